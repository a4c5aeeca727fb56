//! `etcd-steward snapshot save|fetch|remove|install`: the steps of a
//! snapshot's Pods (save, verify's fetch, retention's remove) and of a
//! restored seed's init containers (fetch, install) that need more than
//! etcd's own tools ([`crate::snapshot::pod`], [`crate::restore::pod`]).
//! Each is safe to run again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::etcd::{ClientConfig, EtcdApi, EtcdClient};
use crate::snapshot::pod::{Report, TERMINATION_LOG};
use crate::snapshot::stream::IntegrityHasher;
use crate::snapshot::{Problem, reason};

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Stream a snapshot from an etcd member to a file: written as
    /// <out>.part, fsynced, read back whole (size, sha256 and etcd's own
    /// trailing sha256 checked), then renamed to <out>. The outcome, as
    /// JSON, goes to --report (the Pod's termination message); a failure
    /// leaves no file and exits 1.
    Save(SaveArgs),
    /// Copy a snapshot from S3 (or a file, --file) to --out, checking its
    /// sha256 and etcd's own trailing sha256. Credentials come from
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a CA bundle (PEM) from
    /// ETCD_STEWARD_S3_CA_BUNDLE. Nothing is left at --out unless both
    /// checks pass. The bytes go first to --out with its extension
    /// replaced by `.part`: a failed check removes it, but a stream or I/O
    /// error can leave it.
    Fetch(FetchArgs),
    /// Delete a snapshot file, only if its sha256 is --sha256. A file this
    /// snapshot did not write is left alone: that is the outcome, not a
    /// failure, so it is reported as LeftAlone and the exit code is 0. A
    /// missing file is no error. The outcome goes to --report as JSON.
    Remove(RemoveArgs),
    /// Move a restored member directory (`<staging>/member`) into an etcd
    /// data directory, unless that already has a member; then remove
    /// --clear. Existing data is never replaced.
    Install(InstallArgs),
}

#[derive(Debug, Args)]
pub struct SaveArgs {
    /// The member's client URL (the leader the operator verified).
    #[arg(long)]
    pub endpoint: String,
    #[arg(long)]
    pub out: PathBuf,
    /// Where the JSON outcome is written.
    #[arg(long, default_value = TERMINATION_LOG)]
    pub report: PathBuf,
    /// The deadline of each snapshot RPC and of each snapshot message.
    /// The HashKV asked afterwards has a fixed deadline of 120 s.
    #[arg(long, default_value_t = 30)]
    pub deadline_seconds: u64,
    /// The etcd user to authenticate as, when the cluster has
    /// authentication on; its password comes from the environment only.
    #[arg(long, requires = "password")]
    pub user: Option<String>,
    #[arg(long = "password-from-env", env = PASSWORD_ENV, hide = true, hide_env_values = true)]
    pub password: Option<secrecy::SecretString>,
    /// PEM CA the member's serving certificate is checked against (an
    /// https endpoint).
    #[arg(long)]
    pub cacert: Option<PathBuf>,
    /// PEM client certificate to present, with --key.
    #[arg(long, requires = "key")]
    pub cert: Option<PathBuf>,
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
}

/// The environment variable the save Pod's etcd password is read from,
/// filled from the cluster's root Secret by reference.
pub const PASSWORD_ENV: &str = "ETCD_STEWARD_ETCD_PASSWORD";

#[derive(Debug, Args)]
pub struct FetchArgs {
    #[arg(long, required_unless_present = "file", conflicts_with = "file")]
    pub endpoint: Option<String>,
    #[arg(long, requires = "endpoint")]
    pub bucket: Option<String>,
    /// The object's whole key.
    #[arg(long, requires = "endpoint")]
    pub key: Option<String>,
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    #[arg(long)]
    pub force_path_style: bool,
    /// A snapshot file (on a mounted claim) instead of an S3 object.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// The object's sha256 (hex, or sha256:<hex>).
    #[arg(long)]
    pub sha256: String,
    #[arg(long)]
    pub out: PathBuf,
    /// A directory to remove first (a restore staged by an earlier try).
    #[arg(long)]
    pub clear: Option<PathBuf>,
    /// Where a failure is reported as JSON (the Pod's termination message).
    #[arg(long)]
    pub report: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RemoveArgs {
    #[arg(long)]
    pub file: PathBuf,
    /// The sha256 the file must have (hex, or sha256:<hex>).
    #[arg(long)]
    pub sha256: String,
    #[arg(long, default_value = TERMINATION_LOG)]
    pub report: PathBuf,
}

#[derive(Debug, Args)]
pub struct InstallArgs {
    #[arg(long)]
    pub staging: PathBuf,
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Removed once done, whatever happened (the snapshot and staging area).
    #[arg(long)]
    pub clear: Option<PathBuf>,
}

pub fn run(command: SnapshotCommand) -> anyhow::Result<()> {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    };
    match command {
        SnapshotCommand::Save(args) => runtime()?.block_on(save(args)),
        SnapshotCommand::Fetch(args) => runtime()?.block_on(fetch(args)),
        SnapshotCommand::Remove(args) => remove_file(&args),
        SnapshotCommand::Install(args) => install(&args),
    }
}

async fn save(args: SaveArgs) -> anyhow::Result<()> {
    let outcome = save_to_file(&args).await;
    let report = match &outcome {
        Ok(saved) => saved.clone(),
        Err(p) => Report::Failed {
            reason: p.reason.to_owned(),
            message: p.message.clone(),
        },
    };
    let json = serde_json::to_string(&bounded(report))?;
    if let Err(e) = std::fs::write(&args.report, &json) {
        eprintln!("writing the report to {}: {e}", args.report.display());
    }
    println!("{json}");
    match outcome {
        Ok(_) => Ok(()),
        Err(p) => bail!("{}: {}", p.reason, p.message),
    }
}

/// A report that fits a termination message (the kubelet keeps 4096
/// bytes): a long error message is cut, never the JSON around it.
fn bounded(report: Report) -> Report {
    const MAX: usize = 3072;
    let cut = |m: String| {
        if m.len() <= MAX {
            return m;
        }
        let mut end = MAX;
        while !m.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &m[..end])
    };
    match report {
        Report::Failed { reason, message } => Report::Failed {
            reason,
            message: cut(message),
        },
        Report::LeftAlone { message } => Report::LeftAlone {
            message: cut(message),
        },
        other => other,
    }
}

/// A write that failed for want of space is `VolumeFull`, whatever step hit it.
fn io_problem(what: &str, path: &Path, e: &std::io::Error) -> Problem {
    const EDQUOT: i32 = 122;
    let full = e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(EDQUOT);
    Problem::retry(
        if full {
            reason::VOLUME_FULL
        } else {
            reason::WRITE_FAILED
        },
        format!("{what} {}: {e}", path.display()),
    )
}

async fn save_to_file(args: &SaveArgs) -> Result<Report, Problem> {
    let part = PathBuf::from(format!("{}.part", args.out.display()));
    let result = stream_to(args, &part).await;
    if result.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    result
}

/// The TLS configuration from `--cacert`, `--cert` and `--key`.
fn save_tls(args: &SaveArgs) -> Result<Option<etcd_client::TlsOptions>, String> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()));
    let Some(ca) = &args.cacert else {
        return Ok(None);
    };
    let mut tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(read(ca)?));
    if let (Some(cert), Some(key)) = (&args.cert, &args.key) {
        tls = tls.identity(etcd_client::Identity::from_pem(read(cert)?, read(key)?));
    }
    Ok(Some(tls))
}

async fn stream_to(args: &SaveArgs, part: &Path) -> Result<Report, Problem> {
    let tls = save_tls(args)
        .map_err(|message| Problem::retry(reason::SNAPSHOT_STREAM_FAILED, message))?;
    let etcd = EtcdClient::new(ClientConfig {
        deadline: Duration::from_secs(args.deadline_seconds),
        tls,
        credentials: args
            .user
            .clone()
            .zip(args.password.clone())
            .map(|(user, password)| crate::etcd::Credentials { user, password }),
    });
    let stream = etcd.snapshot(&args.endpoint).await.map_err(|e| {
        Problem::retry(
            reason::SNAPSHOT_STREAM_FAILED,
            format!("opening the snapshot stream: {e}"),
        )
    })?;
    if let Some(parent) = part.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_problem("creating", parent, &e))?;
    }
    let mut file = tokio::fs::File::create(part)
        .await
        .map_err(|e| io_problem("creating", part, &e))?;
    let mut hasher = IntegrityHasher::default();
    let mut chunks = stream.chunks;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| {
            Problem::retry(reason::SNAPSHOT_STREAM_FAILED, format!("streaming: {e}"))
        })?;
        hasher.update(&chunk);
        file.write_all(&chunk)
            .await
            .map_err(|e| io_problem("writing", part, &e))?;
    }
    file.sync_all()
        .await
        .map_err(|e| io_problem("syncing", part, &e))?;
    drop(file);
    let written = hasher.finish()?;

    // Read back what the volume holds, not what was sent.
    let mut back = IntegrityHasher::default();
    let mut file = tokio::fs::File::open(part)
        .await
        .map_err(|e| io_problem("reading back", part, &e))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .await
            .map_err(|e| io_problem("reading back", part, &e))?;
        if n == 0 {
            break;
        }
        back.update(&buf[..n]);
    }
    let read = back.finish()?;
    if read != written {
        return Err(Problem::retry(
            reason::VERIFICATION_FAILED,
            format!(
                "read back {} bytes with sha256 {}, but wrote {} bytes with sha256 {}",
                read.size, read.sha256, written.size, written.sha256
            ),
        ));
    }
    std::fs::rename(part, &args.out).map_err(|e| io_problem("renaming", part, &e))?;
    // The rename is durable only once its directory is synced; a file
    // whose name may not survive a crash is not reported as saved.
    if let Some(dir) = args.out.parent()
        && let Err(e) = std::fs::File::open(dir).and_then(|d| d.sync_all())
    {
        let _ = std::fs::remove_file(&args.out);
        return Err(io_problem("syncing the directory of", &args.out, &e));
    }
    // Best effort: a compaction since the stream opened makes it
    // unanswerable, and `verify: Restore` then compares revisions only.
    let keyspace_hash = etcd
        .hash_kv(
            &args.endpoint,
            stream.revision,
            crate::snapshot::HASH_KV_DEADLINE,
        )
        .await
        .ok()
        .map(|h| crate::api::KeyspaceHash {
            revision: h.revision,
            hash: h.hash,
            compact_revision: h.compact_revision,
        });
    Ok(Report::Saved {
        size_bytes: written.size,
        sha256: written.sha256,
        revision: stream.revision,
        keyspace_hash,
    })
}

async fn open_source(
    args: &FetchArgs,
) -> anyhow::Result<(String, BoxStream<'static, Result<bytes::Bytes, Problem>>)> {
    if let Some(path) = &args.file {
        let file = tokio::fs::File::open(path)
            .await
            .with_context(|| format!("{}: opening {}", reason::OBJECT_NOT_FOUND, path.display()))?;
        let shown = path.display().to_string();
        let chunks = futures::stream::try_unfold(file, move |mut file| {
            let shown = shown.clone();
            async move {
                let mut buf = vec![0u8; 1 << 20];
                let n = file.read(&mut buf).await.map_err(|e| {
                    Problem::retry(reason::WRITE_FAILED, format!("reading {shown}: {e}"))
                })?;
                if n == 0 {
                    return Ok(None);
                }
                buf.truncate(n);
                Ok(Some((bytes::Bytes::from(buf), file)))
            }
        })
        .boxed();
        return Ok((path.display().to_string(), chunks));
    }
    let env = |name: &str| {
        // Trimmed as the operator trims the Secret's values: a key written
        // with a trailing newline works the same in both.
        std::env::var(name)
            .ok()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .with_context(|| format!("{name} is not set"))
    };
    let key = args
        .key
        .clone()
        .context("--key is required with --endpoint")?;
    let location = crate::api::S3Location {
        endpoint: args.endpoint.clone().unwrap_or_default(),
        bucket: args
            .bucket
            .clone()
            .context("--bucket is required with --endpoint")?,
        key: Some(key.clone()),
        credentials_secret_ref: Default::default(),
        region: Some(args.region.clone()),
        force_path_style: args.force_path_style,
        ca_bundle: std::env::var(crate::restore::pod::CA_BUNDLE_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty()),
    };
    let credentials = crate::snapshot::store::Credentials::new(
        env(crate::api::ACCESS_KEY_ID_KEY)?,
        env(crate::api::SECRET_ACCESS_KEY_KEY)?,
    );
    let object = crate::snapshot::store::Destination::object(&location, key, &credentials)
        .map_err(|p| anyhow::anyhow!("{}: {}", p.reason, p.message))?;
    let stream = object
        .open()
        .await
        .map_err(|p| anyhow::anyhow!("{}: {}", p.reason, p.message))?;
    Ok((object.uri.clone(), stream))
}

async fn fetch(args: FetchArgs) -> anyhow::Result<()> {
    let outcome = fetch_to_file(&args).await;
    if let (Err(e), Some(path)) = (&outcome, &args.report) {
        // Each failure of this step names its reason first.
        let text = format!("{e:#}");
        let (named, message) = text.split_once(": ").unwrap_or(("", &text));
        let report = Report::Failed {
            reason: reason::known(named).to_owned(),
            message: message.to_owned(),
        };
        let _ = std::fs::write(path, serde_json::to_string(&bounded(report))?);
    }
    outcome
}

async fn fetch_to_file(args: &FetchArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.clear {
        remove(dir)?;
    }
    if let Some(parent) = args.out.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let (uri, mut stream) = open_source(args).await?;
    let part = args.out.with_extension("part");
    let mut file = tokio::fs::File::create(&part)
        .await
        .with_context(|| format!("creating {}", part.display()))?;
    let mut hasher = IntegrityHasher::default();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|p| anyhow::anyhow!("{}: {}", p.reason, p.message))?;
        hasher.update(&chunk);
        file.write_all(&chunk).await?;
    }
    file.sync_all().await?;
    drop(file);
    let want = args
        .sha256
        .strip_prefix("sha256:")
        .unwrap_or(&args.sha256)
        .to_ascii_lowercase();
    let checked = match hasher.into_parts() {
        (w, _) if w.sha256 != want => Err(format!(
            "{}: {uri} has sha256 {}, not {want}: not restoring it",
            reason::CHECKSUM_MISMATCH,
            w.sha256
        )),
        (_, Err(p)) => Err(format!("{}: {uri}: {}", p.reason, p.message)),
        (w, Ok(())) => Ok(w),
    };
    match checked {
        Ok(w) => {
            std::fs::rename(&part, &args.out)?;
            println!(
                "fetched {uri} ({} bytes, sha256 {}) to {}",
                w.size,
                w.sha256,
                args.out.display()
            );
            Ok(())
        }
        Err(why) => {
            let _ = std::fs::remove_file(&part);
            bail!(why)
        }
    }
}

fn remove_file(args: &RemoveArgs) -> anyhow::Result<()> {
    let outcome = remove_if_written(args);
    let report = match &outcome {
        Ok(existed) => Report::Removed { existed: *existed },
        // Not this run's file: left alone, and that is the outcome, not a
        // failure to retry.
        Err(p) if p.reason == reason::OBJECT_EXISTS => Report::LeftAlone {
            message: p.message.clone(),
        },
        Err(p) => Report::Failed {
            reason: p.reason.to_owned(),
            message: p.message.clone(),
        },
    };
    let json = serde_json::to_string(&bounded(report))?;
    if let Err(e) = std::fs::write(&args.report, &json) {
        eprintln!("writing the report to {}: {e}", args.report.display());
    }
    println!("{json}");
    match outcome {
        Err(p) if p.reason != reason::OBJECT_EXISTS => bail!("{}: {}", p.reason, p.message),
        _ => Ok(()),
    }
}

/// Whether the file existed; it is gone either way on success.
fn remove_if_written(args: &RemoveArgs) -> Result<bool, Problem> {
    use sha2::Digest;
    use std::io::Read;
    let path = &args.file;
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_problem("opening", path, &e)),
    };
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| io_problem("reading", path, &e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let has = hex::encode(hasher.finalize());
    let want = args
        .sha256
        .strip_prefix("sha256:")
        .unwrap_or(&args.sha256)
        .to_ascii_lowercase();
    if has != want {
        return Err(Problem::retry(
            reason::OBJECT_EXISTS,
            format!(
                "{} has sha256 {has}, not the run's {want}: it is not the file this snapshot wrote, and is left alone",
                path.display()
            ),
        ));
    }
    std::fs::remove_file(path).map_err(|e| io_problem("removing", path, &e))?;
    if let Some(dir) = path.parent()
        && let Err(e) = std::fs::File::open(dir).and_then(|d| d.sync_all())
    {
        return Err(io_problem("syncing the directory of", path, &e));
    }
    Ok(true)
}

fn install(args: &InstallArgs) -> anyhow::Result<()> {
    let existing = args.data_dir.join("member");
    let staged = args.staging.join("member");
    let outcome = if existing.exists() {
        println!(
            "{} already holds a member; the staged restore is discarded and the data kept",
            args.data_dir.display()
        );
        Ok(())
    } else if !staged.is_dir() {
        Err(anyhow::anyhow!(
            "{} holds no restored member (did etcdutl snapshot restore run?)",
            args.staging.display()
        ))
    } else {
        std::fs::rename(&staged, &existing)
            .with_context(|| format!("moving {} to {}", staged.display(), existing.display()))
            .map(|()| {
                println!(
                    "installed the restored member into {}",
                    args.data_dir.display()
                )
            })
    };
    if let Some(dir) = &args.clear {
        remove(dir)?;
    }
    outcome
}

fn remove(dir: &Path) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", dir.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_deletes_only_the_file_with_the_runs_checksum() {
        use sha2::Digest;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("run.db");
        std::fs::write(&file, b"the run's bytes").unwrap();
        let sha = hex::encode(sha2::Sha256::digest(b"the run's bytes"));
        let args = |sha256: &str| RemoveArgs {
            file: file.clone(),
            sha256: sha256.to_owned(),
            report: dir.path().join("report"),
        };
        let err = remove_if_written(&args(&"0".repeat(64))).unwrap_err();
        assert_eq!(err.reason, reason::OBJECT_EXISTS);
        assert!(file.exists(), "another file is left alone");
        assert_eq!(remove_if_written(&args(&format!("sha256:{sha}"))), Ok(true));
        assert!(!file.exists());
        assert_eq!(remove_if_written(&args(&sha)), Ok(false), "already gone");
    }

    #[test]
    fn install_moves_a_staged_member_once_and_never_over_existing_data() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let restore = data.join("restore");
        let staging = restore.join("data");
        std::fs::create_dir_all(staging.join("member/snap")).unwrap();
        std::fs::write(staging.join("member/snap/db"), b"restored").unwrap();
        let args = InstallArgs {
            staging: staging.clone(),
            data_dir: data.clone(),
            clear: Some(restore.clone()),
        };
        install(&args).unwrap();
        assert_eq!(
            std::fs::read(data.join("member/snap/db")).unwrap(),
            b"restored"
        );
        assert!(!restore.exists(), "the staging area is removed");

        // Again, with another restore staged: the member's data stays.
        std::fs::create_dir_all(staging.join("member/snap")).unwrap();
        std::fs::write(staging.join("member/snap/db"), b"other").unwrap();
        install(&args).unwrap();
        assert_eq!(
            std::fs::read(data.join("member/snap/db")).unwrap(),
            b"restored"
        );
        assert!(!restore.exists());

        // Nothing staged and nothing there: an error, not an empty member.
        let empty = dir.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let err = install(&InstallArgs {
            staging: empty.join("nothing"),
            data_dir: empty.clone(),
            clear: None,
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("holds no restored member"),
            "{err}"
        );
    }
}

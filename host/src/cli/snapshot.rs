//! `etcd-steward snapshot fetch|install`: the steps of a restored seed's
//! init containers that need more than etcd's own tools
//! ([`crate::restore::pod`]). Each is safe to run again.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::snapshot::stream::IntegrityHasher;

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Download a snapshot object from S3 to a file, checking its sha256
    /// and etcd's own trailing sha256. Credentials come from
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a CA bundle (PEM) from
    /// ETCD_STEWARD_S3_CA_BUNDLE. Nothing is left at --out unless both
    /// checks pass.
    Fetch(FetchArgs),
    /// Move a restored member directory (`<staging>/member`) into an etcd
    /// data directory, unless that already has a member; then remove
    /// --clear. Existing data is never replaced.
    Install(InstallArgs),
}

#[derive(Debug, Args)]
pub struct FetchArgs {
    #[arg(long)]
    pub endpoint: String,
    #[arg(long)]
    pub bucket: String,
    /// The object's whole key.
    #[arg(long)]
    pub key: String,
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    #[arg(long)]
    pub force_path_style: bool,
    /// The object's sha256 (hex, or sha256:<hex>).
    #[arg(long)]
    pub sha256: String,
    #[arg(long)]
    pub out: PathBuf,
    /// A directory to remove first (a restore staged by an earlier try).
    #[arg(long)]
    pub clear: Option<PathBuf>,
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
    match command {
        SnapshotCommand::Fetch(args) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(fetch(args)),
        SnapshotCommand::Install(args) => install(&args),
    }
}

async fn fetch(args: FetchArgs) -> anyhow::Result<()> {
    let env = |name: &str| {
        // Trimmed as the operator trims the Secret's values: a key written
        // with a trailing newline works the same in both.
        std::env::var(name)
            .ok()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .with_context(|| format!("{name} is not set"))
    };
    let location = crate::api::S3Location {
        endpoint: args.endpoint.clone(),
        bucket: args.bucket.clone(),
        key: Some(args.key.clone()),
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
    let object =
        crate::snapshot::store::Destination::object(&location, args.key.clone(), &credentials)
            .map_err(|p| anyhow::anyhow!("{}: {}", p.reason, p.message))?;
    if let Some(dir) = &args.clear {
        remove(dir)?;
    }
    if let Some(parent) = args.out.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let part = args.out.with_extension("part");
    let mut file = tokio::fs::File::create(&part)
        .await
        .with_context(|| format!("creating {}", part.display()))?;
    let mut stream = object
        .open()
        .await
        .map_err(|p| anyhow::anyhow!("{}: {}", p.reason, p.message))?;
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
            "{} has sha256 {}, not {want}: not restoring it",
            object.uri, w.sha256
        )),
        (_, Err(p)) => Err(format!("{}: {}", object.uri, p.message)),
        (w, Ok(())) => Ok(w),
    };
    match checked {
        Ok(w) => {
            std::fs::rename(&part, &args.out)?;
            println!(
                "fetched {} ({} bytes, sha256 {}) to {}",
                object.uri,
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

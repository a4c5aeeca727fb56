//! A real S3 server on loopback for the backup tests: SeaweedFS (Apache-2.0;
//! MinIO is AGPL, and so never used here), built from the Go module pinned
//! in `tests/seaweedfs` by `scripts/ensure-go-tool.sh seaweedfs`, which
//! `scripts/test.sh` exports as `ETCD_STEWARD_SEAWEEDFS`.
//!
//! One `weed server` process runs the four parts SeaweedFS's S3 gateway
//! needs: a master, a volume server, a filer and the gateway. Every one of
//! them, gRPC included, listens on 127.0.0.1 on ports picked here (SeaweedFS
//! would otherwise listen on fixed defaults and derive each gRPC port as
//! port + 10000), so several servers can run at once in one test binary.
//! Its data, logs, configuration and Unix sockets live in a temporary
//! directory of its own (SeaweedFS keeps one socket per gRPC port in /tmp
//! whatever it is told; they are removed when the server goes).
//!
//! Authentication is on: one identity, with a fresh random access key and
//! secret, allowed everything; anonymous requests are refused. Buckets are
//! never created on the fly (`-s3.autoCreateBucket=false`): a request to a
//! bucket nobody created fails, as on AWS.
//!
//! The client side is the `object_store` crate the operator itself uses,
//! path-style (`http://127.0.0.1:PORT/<bucket>/<key>`), as S3-compatible
//! stores on an IP address need.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, AwsAuthorizer, AwsCredential};
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpRequest, HttpRequestBody, ReqwestConnector,
};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};
use tokio::process::{Child, Command};

/// The environment variable that names the `weed` binary.
pub const SEAWEEDFS_ENV: &str = "ETCD_STEWARD_SEAWEEDFS";

/// How long `weed server` may take to be ready (see `wait_ready`): some
/// 10 s alone, and more when several start at once on 2 busy cores.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// A SeaweedFS S3 server on loopback. Killed when dropped.
pub struct S3Server {
    /// The one identity's access key.
    pub access_key_id: String,
    /// Its secret. Printed nowhere: not in errors, logs or `Debug`.
    pub secret_access_key: String,
    /// The region requests are signed for. SeaweedFS accepts any; the
    /// operator's default is AWS's.
    pub region: String,
    /// For [`S3Server::start_tls`]: the PEM certificate of the private CA
    /// that signed the endpoint's certificate (for 127.0.0.1).
    pub ca_pem: Option<String>,
    scheme: &'static str,
    s3_port: u16,
    grpc_sockets: Vec<PathBuf>,
    child: Option<Child>,
    http: HttpClient,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for S3Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Server")
            .field("endpoint", &self.endpoint())
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("region", &self.region)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

/// The ports of one server: each part's HTTP and gRPC port.
struct Ports {
    master: u16,
    master_grpc: u16,
    volume: u16,
    volume_grpc: u16,
    filer: u16,
    filer_grpc: u16,
    s3: u16,
    s3_grpc: u16,
}

impl Ports {
    /// The Unix sockets SeaweedFS serves each part's gRPC on as well, at
    /// paths of its own choosing (weed/command/server.go).
    fn grpc_sockets(&self) -> Vec<PathBuf> {
        [
            ("master", self.master_grpc),
            ("volume", self.volume_grpc),
            ("filer", self.filer_grpc),
            ("s3", self.s3_grpc),
        ]
        .iter()
        .map(|(part, port)| PathBuf::from(format!("/tmp/seaweedfs-{part}-grpc-{port}.sock")))
        .collect()
    }
}

impl S3Server {
    /// Starts a plain-HTTP S3 server: `http://127.0.0.1:PORT`.
    pub async fn start() -> Result<Self> {
        Self::start_with(false).await
    }

    /// Starts an S3 server on HTTPS, with a certificate for 127.0.0.1 from a
    /// private CA of its own ([`S3Server::ca_pem`]): a client trusts it only
    /// when given that CA.
    pub async fn start_tls() -> Result<Self> {
        Self::start_with(true).await
    }

    async fn start_with(tls: bool) -> Result<Self> {
        let weed = std::env::var_os(SEAWEEDFS_ENV).map(PathBuf::from).with_context(|| {
            format!(
                "{SEAWEEDFS_ENV} is not set: run scripts/ensure-go-tool.sh seaweedfs and export its output as {SEAWEEDFS_ENV} (scripts/test.sh does)"
            )
        })?;
        if !weed.is_file() {
            bail!(
                "{SEAWEEDFS_ENV}={} does not exist (scripts/ensure-go-tool.sh seaweedfs builds it)",
                weed.display()
            );
        }
        // A port picked here may be taken by someone else before SeaweedFS
        // binds it; then it exits, and a second set of ports is tried.
        let mut last = None;
        for _ in 0..3 {
            match Self::spawn(&weed, tls).await {
                Ok(server) => return Ok(server),
                Err(Spawn::PortTaken(e)) => last = Some(e),
                Err(Spawn::Failed(e)) => return Err(e),
            }
        }
        Err(last.expect("tried at least once"))
    }

    async fn spawn(weed: &Path, tls: bool) -> Result<Self, Spawn> {
        let dir = tempfile::Builder::new()
            .prefix("seaweedfs-")
            .tempdir()
            .context("creating the S3 server's directory")?;
        let access_key_id = format!(
            "STEWARD{}",
            &uuid::Uuid::new_v4().simple().to_string().to_uppercase()[..13]
        );
        let secret_access_key = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let s3_config = dir.path().join("s3.json");
        let identities = serde_json::json!({
            "identities": [{
                "name": "steward",
                "credentials": [{"accessKey": access_key_id, "secretKey": secret_access_key}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }]
        });
        write_private(&s3_config, &identities.to_string())?;
        for sub in ["data", "glog", "tmp"] {
            std::fs::create_dir_all(dir.path().join(sub))
                .context("creating the S3 server's directory")?;
        }

        let p = pick_ports()?;
        let mut args: Vec<String> = vec![
            // glog writes log files to $TMPDIR unless told where.
            format!("-logdir={}", dir.path().join("glog").display()),
            "server".into(),
            "-ip=127.0.0.1".into(),
            "-ip.bind=127.0.0.1".into(),
            format!("-dir={}", dir.path().join("data").display()),
            format!("-master.port={}", p.master),
            format!("-master.port.grpc={}", p.master_grpc),
            // It would report to telemetry.seaweedfs.com otherwise.
            "-master.telemetry=false".into(),
            // Volumes are files that grow up to this size (bigger objects
            // span several); each bucket gets volumes of its own, one at a
            // time (WEED_MASTER_VOLUME_GROWTH_COPY_1 below, not 7).
            "-master.volumeSizeLimitMB=256".into(),
            format!("-volume.port={}", p.volume),
            format!("-volume.port.grpc={}", p.volume_grpc),
            "-volume.max=100".into(),
            // Not the default 1% of the disk: on a big, nearly full
            // developer disk that would make every volume read-only.
            "-volume.minFreeSpace=256MiB".into(),
            "-volume.preStopSeconds=0".into(),
            "-filer".into(),
            format!("-filer.port={}", p.filer),
            format!("-filer.port.grpc={}", p.filer_grpc),
            format!(
                "-filer.localSocket={}",
                dir.path().join("filer.sock").display()
            ),
            "-s3".into(),
            format!("-s3.port={}", p.s3),
            format!("-s3.port.grpc={}", p.s3_grpc),
            // Its Iceberg and Lance catalogs would take fixed ports.
            "-s3.port.iceberg=0".into(),
            "-s3.port.lance=0".into(),
            "-s3.iam=false".into(),
            format!("-s3.config={}", s3_config.display()),
            "-s3.autoCreateBucket=false".into(),
            format!("-s3.localSocket={}", dir.path().join("s3.sock").display()),
        ];
        let (scheme, ca_pem) = if tls {
            let pki = crate::pki::Pki::create(&dir.path().join("pki"))?;
            let serving = pki.serving("s3", "seaweedfs-s3", &["127.0.0.1"])?;
            // With a certificate and no -s3.port.https, -s3.port serves TLS.
            args.push(format!("-s3.cert.file={}", serving.cert.display()));
            args.push(format!("-s3.key.file={}", serving.key.display()));
            ("https", Some(pki.ca_pem().to_owned()))
        } else {
            ("http", None)
        };

        let log_path = dir.path().join("weed.log");
        let log = std::fs::File::create(&log_path).context("creating weed.log")?;
        let mut command = Command::new(weed);
        // It dies with the thread that started it, as the control plane's
        // components do (component.rs), so a test killed outright leaves
        // no server behind; dropped, it is killed anyway.
        // SAFETY: prctl is async-signal-safe; nothing else runs in the child.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let child = command
            .args(&args)
            .current_dir(dir.path())
            // Nothing from the caller's environment: SeaweedFS reads
            // WEED_* overrides, AWS_* fallback credentials and SENTRY_DSN
            // from it, and ~/.seaweedfs/*.toml from HOME.
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir.path())
            .env("TMPDIR", dir.path().join("tmp"))
            // master.toml's [master.volume_growth] copy_1: a new bucket's
            // first write makes one volume file, not seven.
            .env("WEED_MASTER_VOLUME_GROWTH_COPY_1", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("opening weed.log")?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", weed.display()))?;

        let client_options = client_options(ca_pem.as_deref())?;
        let http = ReqwestConnector::default()
            .connect(&client_options)
            .context("building the S3 client")?;
        let mut server = S3Server {
            access_key_id,
            secret_access_key,
            region: "us-east-1".into(),
            ca_pem,
            scheme,
            s3_port: p.s3,
            grpc_sockets: p.grpc_sockets(),
            child: Some(child),
            http,
            dir,
        };
        server.wait_ready(&log_path).await?;
        Ok(server)
    }

    /// Waits until the gateway answers a signed ListBuckets with 200, and
    /// then until it has written an object.
    ///
    /// The gateway answers some 2 s after the start, but its first object
    /// write waits for more: the master holds volume allocation for 3 s
    /// after it founds a cluster, and the gateway takes an object lock
    /// from the filer, which it can only once the filer has joined the
    /// master's lock ring, some 6 to 8 s after the start. A first PUT then
    /// blocks for seconds, which would eat into the timeouts of the tests;
    /// so an empty object is written to a throwaway bucket here, and both
    /// removed. (Empty: an object with data would leave the filer retrying
    /// to delete its chunk from the bucket's volume, gone with the bucket.)
    async fn wait_ready(&mut self, log_path: &Path) -> Result<(), Spawn> {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        let mut last = String::from("no answer yet");
        let mut listed = false;
        let probe_bucket = format!(
            "steward-probe-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .expect("running")
                .try_wait()
                .ok()
                .flatten()
            {
                let log = std::fs::read_to_string(log_path).unwrap_or_default();
                let e = anyhow::anyhow!(
                    "SeaweedFS ({SEAWEEDFS_ENV}, built by scripts/ensure-go-tool.sh seaweedfs) exited with {status} while starting; from {}:\n{}",
                    log_path.display(),
                    log_excerpt(&log)
                );
                return Err(if log.contains("address already in use") {
                    Spawn::PortTaken(e)
                } else {
                    Spawn::Failed(e)
                });
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Spawn::Failed(anyhow::anyhow!(
                    "SeaweedFS's S3 gateway was not ready within {} s (last: {last}); from {}:\n{}",
                    START_TIMEOUT.as_secs(),
                    log_path.display(),
                    log_excerpt(&std::fs::read_to_string(log_path).unwrap_or_default())
                )));
            }
            let step = if listed {
                self.write_probe(&probe_bucket).await
            } else {
                self.list_buckets_probe().await
            };
            match step {
                Ok(()) if listed => return Ok(()),
                Ok(()) => listed = true,
                Err(e) => {
                    last = format!("{e:#}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    }

    async fn list_buckets_probe(&self) -> Result<()> {
        let (status, body) = self
            .signed(http::Method::GET, "/", HttpRequestBody::empty())
            .await?;
        if status != http::StatusCode::OK {
            bail!("ListBuckets answered {status}: {}", excerpt(&body));
        }
        Ok(())
    }

    /// Creates `bucket` (again, after a failed try), writes and deletes an
    /// empty object in it, and deletes it.
    async fn write_probe(&self, bucket: &str) -> Result<()> {
        let steps = [
            (http::Method::PUT, format!("/{bucket}")),
            (http::Method::PUT, format!("/{bucket}/probe")),
            (http::Method::DELETE, format!("/{bucket}/probe")),
            (http::Method::DELETE, format!("/{bucket}")),
        ];
        for (method, path) in steps {
            let what = format!("{method} {path}");
            let (status, answer) = self.signed(method, &path, HttpRequestBody::empty()).await?;
            // 409: the bucket is there from a try that failed later on.
            if !status.is_success() && status != http::StatusCode::CONFLICT {
                bail!("{what} answered {status}: {}", excerpt(&answer));
            }
        }
        Ok(())
    }

    /// `http://127.0.0.1:PORT`, or `https://` for [`S3Server::start_tls`].
    pub fn endpoint(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.s3_port)
    }

    /// The server's directory: its data, `weed.log`, and the CA's files
    /// (`pki/ca.crt`) for a TLS server.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last lines of the server's log, for a failing test to print.
    pub fn log_tail(&self) -> String {
        log_tail(&self.dir.path().join("weed.log"))
    }

    /// An `object_store` builder for `bucket` on this server, with its
    /// credentials, region and CA, path-style, and few retries (so that a
    /// failure surfaces in seconds, not after object_store's default three
    /// minutes). Tests change what they need (wrong credentials, no CA)
    /// and build.
    pub fn store_builder(&self, bucket: &str) -> Result<AmazonS3Builder> {
        Ok(AmazonS3Builder::new()
            .with_endpoint(self.endpoint())
            .with_bucket_name(bucket)
            .with_region(&self.region)
            .with_access_key_id(&self.access_key_id)
            .with_secret_access_key(&self.secret_access_key)
            .with_virtual_hosted_style_request(false)
            .with_client_options(client_options(self.ca_pem.as_deref())?)
            .with_retry(quick_retries()))
    }

    /// An `object_store` client for `bucket` (see [`S3Server::store_builder`]).
    pub fn store(&self, bucket: &str) -> Result<AmazonS3> {
        self.store_builder(bucket)?
            .build()
            .context("building the S3 client")
    }

    /// Creates `bucket` with a signed `PUT /<bucket>` (CreateBucket).
    /// object_store has no bucket calls, so this one request is signed
    /// with its SigV4 signer and sent with its HTTP client; the gateway
    /// creates the bucket before it answers, so it is usable at once
    /// (a directory made under the filer's /buckets, or `weed shell`'s
    /// s3.bucket.create, would reach the gateway's cache only later).
    pub async fn create_bucket(&self, name: &str) -> Result<()> {
        let (status, body) = self
            .signed(
                http::Method::PUT,
                &format!("/{name}"),
                HttpRequestBody::empty(),
            )
            .await
            .with_context(|| format!("creating bucket {name}"))?;
        if !status.is_success() {
            bail!("creating bucket {name}: {status}: {}", excerpt(&body));
        }
        Ok(())
    }

    /// The objects under `prefix` (a key prefix; "" for all), as
    /// `(key, size)`, in key order.
    pub async fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<(String, u64)>> {
        let store = self.store(bucket)?;
        // object_store lists by whole path segments: list the directory the
        // prefix ends in, and keep the keys that start with the prefix.
        let dir = prefix
            .rfind('/')
            .map(|at| &prefix[..at])
            .filter(|d| !d.is_empty());
        let dir = dir.map(ObjectPath::from);
        let mut out: Vec<(String, u64)> = store
            .list(dir.as_ref())
            .map_ok(|m| (m.location.to_string(), m.size))
            .try_collect::<Vec<_>>()
            .await
            .with_context(|| format!("listing s3://{bucket}/{prefix}"))?
            .into_iter()
            .filter(|(key, _)| key.starts_with(prefix))
            .collect();
        out.sort();
        Ok(out)
    }

    /// The bytes of `key`.
    pub async fn get(&self, bucket: &str, key: &str) -> Result<Vec<u8>> {
        let store = self.store(bucket)?;
        let got = store
            .get(&ObjectPath::from(key))
            .await
            .with_context(|| format!("getting s3://{bucket}/{key}"))?;
        let bytes = got
            .bytes()
            .await
            .with_context(|| format!("reading s3://{bucket}/{key}"))?;
        Ok(bytes.to_vec())
    }

    /// Writes `key` in one PUT, replacing what was there.
    pub async fn put(&self, bucket: &str, key: &str, bytes: impl Into<Bytes>) -> Result<()> {
        let store = self.store(bucket)?;
        store
            .put(&ObjectPath::from(key), PutPayload::from(bytes.into()))
            .await
            .with_context(|| format!("putting s3://{bucket}/{key}"))?;
        Ok(())
    }

    /// Deletes `key` (S3 answers success for a key that is not there).
    pub async fn delete(&self, bucket: &str, key: &str) -> Result<()> {
        let store = self.store(bucket)?;
        store
            .delete(&ObjectPath::from(key))
            .await
            .with_context(|| format!("deleting s3://{bucket}/{key}"))?;
        Ok(())
    }

    /// Kills the server (SIGKILL, by PID) and waits for it: the endpoint
    /// refuses connections from then on. Its data stays until it is dropped.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
        self.remove_grpc_sockets();
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    fn remove_grpc_sockets(&self) {
        for socket in &self.grpc_sockets {
            let _ = std::fs::remove_file(socket);
        }
    }

    /// One SigV4-signed request to the gateway, outside object_store's
    /// object calls; returns the status and the body.
    async fn signed(
        &self,
        method: http::Method,
        path_and_query: &str,
        body: HttpRequestBody,
    ) -> Result<(http::StatusCode, Bytes)> {
        let credential = AwsCredential {
            key_id: self.access_key_id.clone(),
            secret_key: self.secret_access_key.clone(),
            token: None,
        };
        let mut request: HttpRequest = http::Request::builder()
            .method(method)
            .uri(format!("{}{path_and_query}", self.endpoint()))
            .body(body)
            .context("building the request")?;
        AwsAuthorizer::new(&credential, "s3", &self.region).authorize(&mut request, None);
        let response = self
            .http
            .execute(request)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let status = response.status();
        let body = response
            .into_body()
            .bytes()
            .await
            .map_err(|e| anyhow::anyhow!("reading the answer: {e}"))?;
        Ok((status, body))
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        self.remove_grpc_sockets();
    }
}

enum Spawn {
    /// It could not bind a port it was given; worth another try.
    PortTaken(anyhow::Error),
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for Spawn {
    fn from(e: anyhow::Error) -> Self {
        Spawn::Failed(e)
    }
}

/// The client options of this server's clients: HTTP allowed, and the
/// private CA trusted for a TLS server.
fn client_options(ca_pem: Option<&str>) -> Result<ClientOptions> {
    let mut options = ClientOptions::new()
        .with_allow_http(true)
        .with_timeout(Duration::from_secs(60))
        .with_connect_timeout(Duration::from_secs(5));
    if let Some(pem) = ca_pem {
        let ca = object_store::client::Certificate::from_pem(pem.as_bytes())
            .context("reading the CA certificate")?;
        options = options.with_root_certificate(ca);
    }
    Ok(options)
}

fn quick_retries() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            base: 2.0,
        },
        max_retries: 2,
        retry_timeout: Duration::from_secs(10),
    }
}

/// Eight distinct free loopback ports, none ever handed to another server
/// of this process: each is bound (all at once, so no two are equal) and
/// released just before SeaweedFS binds it.
fn pick_ports() -> Result<Ports> {
    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut handed = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let handed = handed.get_or_insert_with(HashSet::new);
    let mut held = Vec::new();
    let mut ports = Vec::new();
    while ports.len() < 8 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
        let port = l.local_addr()?.port();
        held.push(l);
        if handed.insert(port) {
            ports.push(port);
        }
    }
    drop(held);
    let [
        master,
        master_grpc,
        volume,
        volume_grpc,
        filer,
        filer_grpc,
        s3,
        s3_grpc,
    ] = ports[..]
    else {
        unreachable!()
    };
    Ok(Ports {
        master,
        master_grpc,
        volume,
        volume_grpc,
        filer,
        filer_grpc,
        s3,
        s3_grpc,
    })
}

/// Writes a file only its owner can read.
fn write_private(path: &Path, contents: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(contents.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// The last 40 lines of the log.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// What a failed start's error shows of the log: its first error lines
/// (glog's `E`/`F` lines; a fatal one is followed by every goroutine's
/// stack, which would fill a plain tail) and its last 20 lines.
fn log_excerpt(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with('E') || l.starts_with('F'))
        .take(10)
        .collect();
    let tail = lines[lines.len().saturating_sub(20)..].join("\n");
    if errors.is_empty() {
        format!("...\n{tail}")
    } else {
        format!("errors:\n{}\n...\n{tail}", errors.join("\n"))
    }
}

fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.chars().take(500).collect()
}

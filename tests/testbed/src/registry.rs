//! A real OCI registry (the CNCF distribution registry, as Docker Hub and
//! most private registries run it) on loopback, and the real `oras` client
//! to push to it: how a platform team ships a policy component.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::kube_bin::KubeBinaries;

/// The media types of the CNCF "Wasm OCI Artifact" layout.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";

pub struct Registry {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    /// Set for a registry started with [`Registry::start_private`].
    pub private: Option<Private>,
    oras: PathBuf,
    child: Child,
    dir: tempfile::TempDir,
}

/// What a client needs to reach a private registry: its CA and an account.
pub struct Private {
    /// The PEM certificate of the CA that signed the registry's certificate
    /// (a CA of its own, not the control plane's).
    pub ca_pem: String,
    ca_file: PathBuf,
    pub username: String,
    pub password: String,
}

impl Private {
    /// A kubernetes.io/dockerconfigjson `.dockerconfigjson` for `addr`.
    pub fn docker_config_json(&self, addr: &str) -> String {
        serde_json::json!({
            "auths": {addr: {"username": self.username, "password": self.password}}
        })
        .to_string()
    }
}

impl Registry {
    /// Starts a plain-HTTP registry without authentication on a free
    /// loopback port, storing blobs in a directory of its own.
    pub async fn start(bins: &KubeBinaries) -> Result<Self> {
        Self::spawn(bins, None).await
    }

    /// Starts a registry as a private one runs: TLS with a certificate from
    /// a private CA, and htpasswd accounts (one, with a fresh password).
    pub async fn start_private(bins: &KubeBinaries) -> Result<Self> {
        Self::spawn(bins, Some(())).await
    }

    async fn spawn(bins: &KubeBinaries, private: Option<()>) -> Result<Self> {
        let registry = bins.registry.clone().context(
            "no `registry` binary beside kube-apiserver (scripts/ensure-kube.sh builds it)",
        )?;
        let oras = bins
            .oras
            .clone()
            .context("no `oras` binary beside kube-apiserver (scripts/ensure-kube.sh builds it)")?;
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("config.yml");
        let private = match private {
            None => {
                std::fs::write(&config, "version: 0.1\n")?;
                None
            }
            Some(()) => {
                let pki = crate::pki::Pki::create(&dir.path().join("pki"))?;
                let serving = pki.serving("registry", "registry", &["127.0.0.1"])?;
                let username = "steward".to_owned();
                let password = uuid::Uuid::new_v4().simple().to_string();
                // The registry reads bcrypt entries only.
                let hash = bcrypt::hash(&password, 4).context("hashing the password")?;
                let htpasswd = dir.path().join("htpasswd");
                std::fs::write(&htpasswd, format!("{username}:{hash}\n"))?;
                std::fs::write(
                    &config,
                    format!(
                        "version: 0.1\nhttp:\n  tls:\n    certificate: {}\n    key: {}\nauth:\n  htpasswd:\n    realm: steward-testbed\n    path: {}\n",
                        serving.cert.display(),
                        serving.key.display(),
                        htpasswd.display()
                    ),
                )?;
                Some(Private {
                    ca_pem: pki.ca_pem().to_owned(),
                    ca_file: pki.ca_cert().to_path_buf(),
                    username,
                    password,
                })
            }
        };
        let mut child = Command::new(&registry)
            .arg("serve")
            .arg(&config)
            .env(
                "REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY",
                dir.path().join("data"),
            )
            .env("REGISTRY_HTTP_ADDR", "127.0.0.1:0")
            // Otherwise it tries to export traces to localhost:4318.
            .env("OTEL_TRACES_EXPORTER", "none")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", registry.display()))?;
        // It logs the port it bound: `listening on 127.0.0.1:NNNNN`.
        let stderr = child.stderr.take().expect("piped");
        let mut lines = BufReader::new(stderr).lines();
        let addr = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(at) = line.find("listening on ") {
                    let rest = &line[at + "listening on ".len()..];
                    let addr: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                        .collect();
                    return Ok::<_, anyhow::Error>(addr);
                }
            }
            bail!("the registry exited before listening")
        })
        .await
        .context("the registry did not listen within 30 s")??;
        // Keep draining its log, so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self {
            addr,
            private,
            oras,
            child,
            dir,
        })
    }

    /// `<addr>/<repository>:<tag>`.
    pub fn reference(&self, repository: &str, tag: &str) -> String {
        format!("{}/{repository}:{tag}", self.addr)
    }

    /// Pushes `wasm` as a Wasm OCI artifact with oras and returns the
    /// manifest's digest.
    pub async fn push_wasm(&self, reference: &str, wasm: &Path) -> Result<String> {
        let work = tempfile::tempdir_in(self.dir.path())?;
        let component = work.path().join("policy.wasm");
        std::fs::copy(wasm, &component).with_context(|| format!("copying {}", wasm.display()))?;
        let config = work.path().join("config.json");
        std::fs::write(&config, r#"{"architecture":"wasm","os":"wasip2"}"#)?;
        let mut oras = Command::new(&self.oras);
        oras.current_dir(work.path())
            .args(["push", "--no-tty", reference]);
        match &self.private {
            None => {
                oras.arg("--plain-http");
            }
            Some(p) => {
                oras.arg("--ca-file")
                    .arg(&p.ca_file)
                    .args(["--username", &p.username])
                    .args(["--password", &p.password]);
            }
        }
        let out = oras
            .arg("--config")
            .arg(format!("config.json:{WASM_CONFIG_MEDIA_TYPE}"))
            .arg(format!("policy.wasm:{WASM_LAYER_MEDIA_TYPE}"))
            .output()
            .await
            .context("running oras push")?;
        if !out.status.success() {
            bail!(
                "oras push {reference} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.strip_prefix("Digest: ").map(str::trim).map(str::to_owned))
            .with_context(|| format!("oras push printed no digest: {text}"))
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

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
    /// `127.0.0.1:<port>`, plain HTTP.
    pub addr: String,
    oras: PathBuf,
    child: Child,
    dir: tempfile::TempDir,
}

impl Registry {
    /// Starts a registry on a free loopback port, storing blobs in a
    /// directory of its own.
    pub async fn start(bins: &KubeBinaries) -> Result<Self> {
        let registry = bins.registry.clone().context(
            "no `registry` binary beside kube-apiserver (scripts/ensure-kube.sh builds it)",
        )?;
        let oras = bins
            .oras
            .clone()
            .context("no `oras` binary beside kube-apiserver (scripts/ensure-kube.sh builds it)")?;
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("config.yml");
        std::fs::write(&config, "version: 0.1\n")?;
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
        let out = Command::new(&self.oras)
            .current_dir(work.path())
            .args(["push", "--plain-http", "--no-tty", reference])
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

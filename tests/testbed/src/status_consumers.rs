//! The tools that read an EtcdCluster's status, run for real: kstatus
//! (`sigs.k8s.io/cli-utils/pkg/kstatus`, which Flux's health checks and kpt
//! use) and Argo CD's Lua health check (`deploy/argocd/.../health.lua` under
//! gopher-lua, as Argo CD runs a script from argocd-cm). Both live in
//! `steward-status` (tests/kube/cmd/status), which scripts/ensure-kube.sh
//! builds next to the Kubernetes binaries, so the tests assert what those
//! tools report instead of a copy of their rules.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use crate::kube_bin::{self, KubeBinaries};

/// What one consumer makes of an object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Reading {
    /// kstatus: `Current`, `InProgress`, `Failed`, `Terminating`, ...;
    /// Argo CD: `Healthy`, `Progressing`, `Degraded`, `Suspended`, ...
    pub status: String,
    pub message: String,
}

impl std::fmt::Display for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:?})", self.status, self.message)
    }
}

/// The repository's deploy/argocd, where Argo CD's health checks live.
pub fn argocd_dir() -> PathBuf {
    crate::repo::root().join("deploy/argocd")
}

/// The EtcdCluster health check Argo CD is given.
pub fn etcd_cluster_health_lua() -> PathBuf {
    argocd_dir().join("etcd.steward.dev/EtcdCluster/health.lua")
}

/// docs/api.md, which carries the same check as an argocd-cm snippet.
pub fn api_docs() -> PathBuf {
    crate::repo::root().join("docs/api.md")
}

#[derive(Debug, Clone)]
pub struct StatusConsumers {
    bin: PathBuf,
}

impl StatusConsumers {
    /// The steward-status of these binaries; an error, never a skip, if
    /// the directory has none (KUBE_BIN_DIR pointing at other binaries).
    pub fn new(bins: &KubeBinaries) -> Result<Self> {
        match &bins.status {
            Some(bin) => Ok(StatusConsumers { bin: bin.clone() }),
            None => bail!(
                "{} has no steward-status; scripts/ensure-kube.sh builds it from tests/kube/cmd/status \
                 (with KUBE_BIN_DIR set, put one there)",
                bins.dir.display()
            ),
        }
    }

    /// As [`StatusConsumers::new`], for the binaries `kube_bin::locate` finds.
    pub fn locate() -> Result<Self> {
        Self::new(&kube_bin::locate()?)
    }

    /// kstatus's `status.Compute` of the object.
    pub fn kstatus(&self, obj: &serde_json::Value) -> Result<Reading> {
        self.read(&["kstatus"], obj)
    }

    /// Argo CD's health of the object, by the repository's health.lua.
    pub fn argo_health(&self, obj: &serde_json::Value) -> Result<Reading> {
        self.argo_health_by(&etcd_cluster_health_lua(), obj)
    }

    /// Argo CD's health of the object, by the given Lua script.
    pub fn argo_health_by(&self, lua: &Path, obj: &serde_json::Value) -> Result<Reading> {
        let lua = lua.to_str().context("a UTF-8 path")?;
        self.read(&["argo-health", "--lua", lua], obj)
    }

    /// Runs every health.lua under `dir` against its health_test.yaml, and
    /// with `docs` the argocd-cm snippet for the same kind in that file.
    /// Returns the run whatever its exit; stdout has one line per case.
    pub fn argo_health_tests(&self, dir: &Path, docs: Option<&Path>) -> Result<Output> {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("argo-health-tests");
        if let Some(docs) = docs {
            cmd.arg("--docs").arg(docs);
        }
        cmd.arg(dir)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", self.bin.display()))
    }

    fn read(&self, args: &[&str], obj: &serde_json::Value) -> Result<Reading> {
        let mut child = Command::new(&self.bin)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", self.bin.display()))?;
        let input = serde_json::to_vec(obj)?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(&input)
            .context("writing the object")?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "steward-status {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "steward-status {} printed {:?}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }
}

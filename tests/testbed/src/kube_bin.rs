//! Finding the Kubernetes binaries: kube-apiserver, kube-controller-manager,
//! kube-scheduler and kubectl, plus the control plane's own etcd, helm,
//! steward-status (the real status consumers, see `status_consumers`), and
//! an OCI registry with its client (see `registry`), and cert-manager (see
//! `cert_manager`).
//!
//! The order matches `scripts/ensure-kube.sh`: a directory handed down by the
//! test command (`ETCD_STEWARD_KUBE_DIR`), then the script itself, which
//! honours `KUBE_BIN_DIR` (binaries the user already has) or builds them from
//! `tests/kube` into the cache.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::etcd_bin::is_executable;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeBinaries {
    pub dir: PathBuf,
    pub apiserver: PathBuf,
    pub controller_manager: PathBuf,
    pub scheduler: PathBuf,
    pub kubectl: PathBuf,
    /// The control plane's etcd, if the directory has one (ours and
    /// envtest's do); otherwise the kubelet's etcd serves the control plane.
    pub etcd: Option<PathBuf>,
    pub helm: Option<PathBuf>,
    /// kstatus and Argo CD's Lua health checks (tests/kube/cmd/status);
    /// only our build has it.
    pub status: Option<PathBuf>,
    /// The CNCF distribution registry and the oras client, for policies
    /// shipped as OCI artifacts; only our build has them.
    pub registry: Option<PathBuf>,
    pub oras: Option<PathBuf>,
    /// cert-manager's controllers (tests/kube/cmd/certmanager) and the
    /// directory of its CRDs; only our build has them.
    pub cert_manager: Option<PathBuf>,
    pub cert_manager_crds: Option<PathBuf>,
}

impl KubeBinaries {
    pub fn in_dir(dir: &Path) -> Result<Self> {
        let exe = |name: &str| -> Result<PathBuf> {
            let p = dir.join(name);
            if !is_executable(&p) {
                bail!("{} is missing or not executable", p.display());
            }
            Ok(p)
        };
        let optional = |name: &str| Some(dir.join(name)).filter(|p| is_executable(p));
        Ok(KubeBinaries {
            dir: dir.to_path_buf(),
            apiserver: exe("kube-apiserver")?,
            controller_manager: exe("kube-controller-manager")?,
            scheduler: exe("kube-scheduler")?,
            kubectl: exe("kubectl")?,
            etcd: optional("etcd"),
            helm: optional("helm"),
            status: optional("steward-status"),
            registry: optional("registry"),
            oras: optional("oras"),
            cert_manager: optional("cert-manager"),
            cert_manager_crds: Some(dir.join("cert-manager-crds")).filter(|p| p.is_dir()),
        })
    }
}

/// Locates the binaries, building them (once, into the cache) if needed.
pub fn locate() -> Result<KubeBinaries> {
    if let Some(dir) = std::env::var_os("ETCD_STEWARD_KUBE_DIR").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        return KubeBinaries::in_dir(&dir)
            .with_context(|| format!("ETCD_STEWARD_KUBE_DIR={}", dir.display()));
    }
    let script = crate::repo::root().join("scripts/ensure-kube.sh");
    // stderr is inherited: the first build takes minutes and says so.
    let out = Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}); set KUBE_BIN_DIR=/dir/with/kube-apiserver to use existing binaries",
            script.display(),
            out.status,
        );
    }
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    KubeBinaries::in_dir(Path::new(&dir))
        .with_context(|| format!("{} printed {dir:?}", script.display()))
}

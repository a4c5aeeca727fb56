//! A real cert-manager for the tests that issue etcd's certificates
//! through it: its CRDs, as its Go module ships them, applied to the
//! control plane, and its own controllers (the Certificate pipeline, the CA
//! and SelfSigned issuers, the approver), built from that module into
//! `tests/kube` (`cmd/certmanager`, see docs/control-plane.md).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::component::Component;
use crate::kube_bin::KubeBinaries;

pub struct CertManager {
    component: Component,
}

impl CertManager {
    /// Applies cert-manager's CRDs (waiting until they are Established),
    /// then starts its controllers against the apiserver of `kubeconfig`,
    /// logging into `dir/cert-manager.log`.
    pub async fn start(bins: &KubeBinaries, kubeconfig: &Path, dir: &Path) -> Result<Self> {
        let (Some(program), Some(crds)) = (&bins.cert_manager, &bins.cert_manager_crds) else {
            bail!("no `cert-manager` beside kube-apiserver (scripts/ensure-kube.sh builds it)");
        };
        let kubectl = |args: &[&str]| -> Result<()> {
            let out = std::process::Command::new(&bins.kubectl)
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
                .args(args)
                .output()
                .context("running kubectl")?;
            if !out.status.success() {
                bail!(
                    "kubectl {args:?}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            Ok(())
        };
        let crds = crds.display().to_string();
        // Server-side: the Certificate CRD is too large for the annotation
        // client-side apply keeps.
        kubectl(&["apply", "--server-side", "-f", &crds])?;
        kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            &crds,
        ])?;
        let mut component = Component::spawn(
            "cert-manager",
            program,
            &[
                format!("--kubeconfig={}", kubeconfig.display()),
                "--cluster-resource-namespace=cert-manager".into(),
            ],
            dir,
        )?;
        // Ready once its controllers and informers run: it says so on its log.
        let log = component.log_path().to_path_buf();
        component
            .wait_ready(Duration::from_secs(60), || {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                async move {
                    if text.contains("cert-manager: controllers started") {
                        Ok(())
                    } else {
                        bail!("its controllers have not started")
                    }
                }
            })
            .await?;
        Ok(CertManager { component })
    }

    pub fn stop(mut self) {
        self.component.stop(Duration::from_secs(5));
    }
}

//! The whole test control plane: the API stand-in plus the local kubelet,
//! started together and stopped together.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::apiserver::ApiServer;
use crate::kubelet::{Kubelet, KubeletConfig};

/// An API server and a kubelet running etcd Pods. [`ControlPlane::shutdown`]
/// stops every etcd the kubelet started; dropping it kills them.
pub struct ControlPlane {
    // Field order is drop order: the kubelet's processes go first.
    kubelet: Option<Kubelet>,
    api: Option<ApiServer>,
    client: kube::Client,
    dir: PathBuf,
}

impl ControlPlane {
    /// Starts both under `dir` (API data in `dir/api`, Pods in `dir/kubelet`).
    /// Fails with a clear message outside the private mount namespace (see
    /// [`crate::namespace`]).
    pub async fn start(dir: &Path) -> Result<Self> {
        Self::start_with(dir, |_| {}).await
    }

    /// As [`ControlPlane::start`], with a chance to adjust the kubelet's
    /// configuration (backoffs, grace periods).
    pub async fn start_with(dir: &Path, tune: impl FnOnce(&mut KubeletConfig)) -> Result<Self> {
        // Checked first so that no server starts only to be torn down.
        crate::namespace::ensure_private_hosts()?;
        let mut config = KubeletConfig::new(&dir.join("kubelet"))?;
        tune(&mut config);
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let api = ApiServer::start(&dir.join("api")).context("starting the API stand-in")?;
        let client = api
            .client()
            .await
            .context("a client for the API stand-in")?;
        let kubelet = Kubelet::start(client.clone(), config)
            .await
            .context("starting the local kubelet")?;
        Ok(ControlPlane {
            kubelet: Some(kubelet),
            api: Some(api),
            client,
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn kubeconfig_path(&self) -> PathBuf {
        self.api().kubeconfig_path().to_path_buf()
    }

    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    pub fn api(&self) -> &ApiServer {
        self.api
            .as_ref()
            .expect("the API server runs until shutdown")
    }

    pub fn kubelet(&self) -> &Kubelet {
        self.kubelet
            .as_ref()
            .expect("the kubelet runs until shutdown")
    }

    /// Stops every etcd the kubelet started, then the API server.
    pub async fn shutdown(mut self) {
        if let Some(k) = self.kubelet.take() {
            k.shutdown().await;
        }
        if let Some(api) = self.api.take() {
            api.shutdown().await;
        }
    }
}

/// `etcd-steward sandbox --control-plane-only --dir DIR`: runs the control
/// plane until SIGINT or SIGTERM, then stops every etcd it started.
pub async fn run_control_plane_only(dir: &Path) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};

    let mut sigterm = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
    let plane = ControlPlane::start(dir).await?;
    let kubeconfig = dir.join("kubeconfig");
    if plane.kubeconfig_path() != kubeconfig {
        std::fs::copy(plane.kubeconfig_path(), &kubeconfig)
            .with_context(|| format!("writing {}", kubeconfig.display()))?;
    }
    println!("etcd-steward test control plane is running (API stand-in + local kubelet).");
    println!("  kubeconfig: {}", kubeconfig.display());
    println!(
        "  try:        KUBECONFIG={} kubectl get pods -A",
        kubeconfig.display()
    );
    println!(
        "  pod logs:   {}/kubelet/pods/<ns>_<pod>_<uid>/etcd.log",
        dir.display()
    );
    println!("Pod names resolve only inside this process's private mount namespace;");
    println!("run kubectl from another shell freely, but etcdctl against pod names only via");
    println!(
        "  nsenter -t {} -m etcdctl --endpoints=http://<pod>.<svc>.<ns>.svc:2379 ...",
        std::process::id()
    );
    println!("Press Ctrl-C to stop; every etcd started here is stopped.");
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = sigterm.recv() => {}
    }
    println!("stopping the control plane ...");
    plane.shutdown().await;
    Ok(())
}

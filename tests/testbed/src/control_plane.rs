//! The whole test control plane: a real etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler (built from the Kubernetes Go
//! modules by `scripts/ensure-kube.sh`), the local kubelet as the one Node,
//! and its local volume provisioner. Started together, stopped together.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::component::{Component, free_port};
use crate::fault_proxy::FaultProxy;
use crate::kube_bin::KubeBinaries;
use crate::kubelet::{Kubelet, KubeletConfig, provisioner::Provisioner};
use crate::pki::{CertFiles, Pki};
use crate::service_proxy::ServiceProxy;

/// How long one component may take to become ready. Generous: a loaded
/// 2-core machine starting several control planes at once is slow, and a
/// missed deadline here fails a test for a reason it does not test.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// The Service CIDR; the `kubernetes` Service takes its first address.
const SERVICE_CIDR: &str = "10.96.0.0/16";

/// What to start besides the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the
    /// local kubelet and its provisioner.
    Full,
    /// etcd and kube-apiserver only: for tests of API clients (leader
    /// election, reflectors) that run no Pods.
    ApiOnly,
}

/// A running control plane. [`ControlPlane::shutdown`] stops every etcd the
/// kubelet started and then the components; dropping it kills them all.
pub struct ControlPlane {
    // Field order is drop order: the Service proxy and the kubelet's
    // processes go first, the control plane's etcd last.
    service_proxy: Option<ServiceProxy>,
    kubelet: Option<Kubelet>,
    provisioner: Option<Provisioner>,
    scheduler: Option<Component>,
    controller_manager: Option<Component>,
    apiserver: Option<Component>,
    etcd: Option<Component>,
    client: Client,
    url: String,
    kubeconfig: PathBuf,
    dir: PathBuf,
    bins: KubeBinaries,
    certs: Certs,
    startup: Duration,
}

/// The pieces of one control plane's PKI the components need.
struct Certs {
    pki: Pki,
    apiserver: CertFiles,
    sa_key: PathBuf,
    sa_pub: PathBuf,
}

impl ControlPlane {
    /// Starts everything under `dir` (`pki/`, `etcd/`, component logs, Pods
    /// in `kubelet/`). Fails with a clear message outside the private mount
    /// namespace (see [`crate::namespace`]).
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
        Self::launch(dir, Scope::Full, Some(config)).await
    }

    /// etcd and kube-apiserver alone (see [`Scope::ApiOnly`]). Needs no
    /// private mount namespace: nothing edits `/etc/hosts`.
    pub async fn start_api_only(dir: &Path) -> Result<Self> {
        Self::launch(dir, Scope::ApiOnly, None).await
    }

    async fn launch(dir: &Path, scope: Scope, kubelet: Option<KubeletConfig>) -> Result<Self> {
        let started = Instant::now();
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir = std::fs::canonicalize(dir)?;
        // Every start is a new cluster (a new CA signs everything), so the
        // state of an earlier one under the same directory goes first.
        for old in ["etcd", "kubelet", "pki"] {
            let old = dir.join(old);
            if old.exists() {
                std::fs::remove_dir_all(&old)
                    .with_context(|| format!("removing the earlier run's {}", old.display()))?;
            }
        }
        let bins = crate::kube_bin::locate()?;
        let certs = Certs::create(&dir.join("pki"))?;

        let etcd = start_etcd(&bins, &dir).await?;
        let port = free_port()?;
        let url = format!("https://127.0.0.1:{port}");
        let mut apiserver = Component::spawn(
            "kube-apiserver",
            &bins.apiserver,
            &apiserver_args(&certs, &etcd.1, port),
            &dir,
        )?;
        let admin = certs
            .pki
            .client("admin", "kubernetes-admin", &["system:masters"])?;
        let kubeconfig = dir.join("kubeconfig");
        write_kubeconfig(
            &kubeconfig,
            &url,
            certs.pki.ca_cert(),
            &admin,
            "kubernetes-admin",
        )?;
        let client = client_for(&kubeconfig).await?;
        let probe = Probe::new(certs.pki.ca_cert(), &admin, &url)?;
        apiserver
            .wait_ready(READY_TIMEOUT, || probe.ok("/readyz"))
            .await?;

        let mut plane = ControlPlane {
            service_proxy: None,
            kubelet: None,
            provisioner: None,
            scheduler: None,
            controller_manager: None,
            apiserver: Some(apiserver),
            etcd: Some(etcd.0),
            client: client.clone(),
            url: url.clone(),
            kubeconfig,
            dir: dir.clone(),
            bins: bins.clone(),
            certs,
            startup: Duration::ZERO,
        };
        if scope == Scope::Full {
            let cm = start_controller_manager(&bins, &plane.certs, &url, &dir).await?;
            plane.controller_manager = Some(cm);
            let scheduler = start_scheduler(&bins, &plane.certs, &url, &dir).await?;
            plane.scheduler = Some(scheduler);
            // A Pod is refused until its namespace's default ServiceAccount
            // exists; the controller-manager makes it moments after it starts.
            wait_default_service_account(&client).await?;
            plane.provisioner = Some(
                Provisioner::start(client.clone(), &dir.join("kubelet"))
                    .await
                    .context("starting the local volume provisioner")?,
            );
            let node_cert =
                plane
                    .certs
                    .pki
                    .client("kubelet", "system:node:local", &["system:nodes"])?;
            let node_kubeconfig = dir.join("kubelet.kubeconfig");
            write_kubeconfig(
                &node_kubeconfig,
                &url,
                plane.certs.pki.ca_cert(),
                &node_cert,
                "system:node:local",
            )?;
            let node_client = client_for(&node_kubeconfig).await?;
            let mut config = kubelet.expect("a Full control plane has a kubelet config");
            config.api_server = Some(url.clone());
            plane.kubelet = Some(
                Kubelet::start(node_client, config)
                    .await
                    .context("starting the local kubelet")?,
            );
            plane.service_proxy = ServiceProxy::start(client.clone(), SERVICE_CIDR)
                .context("starting the Service proxy")?;
        }
        plane.startup = started.elapsed();
        tracing::info!(startup = ?plane.startup, "test control plane ready at {url}");
        Ok(plane)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// An admin (system:masters) kubeconfig, usable by kubectl from any shell.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.kubeconfig.clone()
    }

    /// The API server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// An admin client.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// (name, PID) of every control-plane process, for tests that check
    /// none outlives the control plane.
    pub fn component_pids(&self) -> Vec<(&'static str, u32)> {
        [
            &self.etcd,
            &self.apiserver,
            &self.controller_manager,
            &self.scheduler,
        ]
        .into_iter()
        .flatten()
        .map(|c| (c.name(), c.pid()))
        .collect()
    }

    pub fn binaries(&self) -> &KubeBinaries {
        &self.bins
    }

    /// How long [`ControlPlane::start`] took, up to a Ready node.
    pub fn startup(&self) -> Duration {
        self.startup
    }

    pub fn kubelet(&self) -> &Kubelet {
        self.kubelet
            .as_ref()
            .expect("the kubelet runs in a Full control plane until shutdown")
    }

    /// A client authenticated by a client certificate of this control
    /// plane's CA, for `user` in `groups`: tests use it to act as a
    /// particular identity under RBAC.
    pub async fn client_as(&self, user: &str, groups: &[&str]) -> Result<Client> {
        let pki = &self.certs.pki;
        let file = format!("user-{}", user.replace([':', '/'], "-"));
        let cert = pki.client(&file, user, groups)?;
        let path = self.dir.join(format!("{file}.kubeconfig"));
        write_kubeconfig(&path, &self.url, pki.ca_cert(), &cert, user)?;
        client_for(&path).await
    }

    /// A fault-injecting proxy in front of this API server, acting as its
    /// admin (see [`crate::fault_proxy`]).
    pub async fn fault_proxy(&self) -> Result<FaultProxy> {
        let admin = self
            .certs
            .pki
            .client("fault-proxy", "fault-proxy", &["system:masters"])?;
        FaultProxy::start(&self.url, self.certs.pki.ca_cert(), &admin.cert, &admin.key).await
    }

    /// Stops every etcd the kubelet started, then the components in reverse
    /// order of their start.
    pub async fn shutdown(mut self) {
        self.service_proxy.take();
        if let Some(k) = self.kubelet.take() {
            k.shutdown().await;
        }
        self.provisioner.take();
        for c in [
            self.scheduler.take(),
            self.controller_manager.take(),
            self.apiserver.take(),
            self.etcd.take(),
        ]
        .into_iter()
        .flatten()
        {
            let mut c = c;
            c.stop(Duration::from_secs(10));
        }
    }
}

impl Certs {
    fn create(dir: &Path) -> Result<Certs> {
        let pki = Pki::create(dir)?;
        let apiserver = pki.serving(
            "apiserver",
            "kube-apiserver",
            &[
                "127.0.0.1",
                "localhost",
                "10.96.0.1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
        )?;
        let (sa_key, sa_pub) = pki.service_account_key()?;
        Ok(Certs {
            pki,
            apiserver,
            sa_key,
            sa_pub,
        })
    }
}

/// The control plane's own etcd, on loopback ports of its own. It is not
/// under test, so it skips fsync (as envtest and kind's CI setups do).
async fn start_etcd(bins: &KubeBinaries, dir: &Path) -> Result<(Component, String)> {
    let etcd_bin = match &bins.etcd {
        Some(e) => e.clone(),
        None => crate::etcd_bin::locate()?.default().etcd.clone(),
    };
    let (client_port, peer_port) = (free_port()?, free_port()?);
    let client_url = format!("http://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let args = vec![
        "--name=control-plane".to_string(),
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls={client_url}"),
        format!("--advertise-client-urls={client_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=control-plane={peer_url}"),
        "--unsafe-no-fsync".to_string(),
        "--log-level=warn".to_string(),
    ];
    let mut etcd = Component::spawn("etcd", &etcd_bin, &args, dir)?;
    let addr = format!("127.0.0.1:{client_port}");
    etcd.wait_ready(READY_TIMEOUT, || http_ok(addr.clone(), "/readyz"))
        .await?;
    Ok((etcd, client_url))
}

fn apiserver_args(certs: &Certs, etcd_url: &str, port: u16) -> Vec<String> {
    let p = |p: &Path| p.display().to_string();
    vec![
        format!("--etcd-servers={etcd_url}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        // The `kubernetes` Service's endpoints may not be loopback, and the
        // apiserver listens on loopback only; Pods get its real address in
        // KUBERNETES_SERVICE_HOST (envtest runs it the same way), and the
        // Service proxy closes connections to the ClusterIP at once.
        "--endpoint-reconciler-type=none".into(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", p(&certs.apiserver.cert)),
        format!("--tls-private-key-file={}", p(&certs.apiserver.key)),
        format!("--client-ca-file={}", p(certs.pki.ca_cert())),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", p(&certs.sa_pub)),
        format!("--service-account-signing-key-file={}", p(&certs.sa_key)),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--authorization-mode=Node,RBAC".into(),
        // The default plugins plus NodeRestriction, as kubeadm enables it:
        // the local kubelet may then touch only its own Node and Pods.
        "--enable-admission-plugins=NodeRestriction".into(),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
    ]
}

async fn start_controller_manager(
    bins: &KubeBinaries,
    certs: &Certs,
    url: &str,
    dir: &Path,
) -> Result<Component> {
    let p = |p: &Path| p.display().to_string();
    let secured = Secured::new(
        certs,
        url,
        dir,
        "controller-manager",
        "system:kube-controller-manager",
    )?;
    let mut args = secured.args.clone();
    args.extend([
        // Each controller under its own ServiceAccount, as kubeadm runs it:
        // the real RBAC of the garbage collector, disruption controller, …
        "--use-service-account-credentials=true".into(),
        format!("--service-account-private-key-file={}", p(&certs.sa_key)),
        format!("--root-ca-file={}", p(certs.pki.ca_cert())),
        format!("--cluster-signing-cert-file={}", p(certs.pki.ca_cert())),
        format!("--cluster-signing-key-file={}", p(&dir.join("pki/ca.key"))),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
    ]);
    let mut cm = Component::spawn(
        "kube-controller-manager",
        &bins.controller_manager,
        &args,
        dir,
    )?;
    // The controller-manager serves no /readyz (404 in 1.37); /healthz is
    // its readiness as kubeadm's static Pod probes it.
    cm.wait_ready(READY_TIMEOUT, || secured.probe.ok("/healthz"))
        .await?;
    Ok(cm)
}

async fn start_scheduler(
    bins: &KubeBinaries,
    certs: &Certs,
    url: &str,
    dir: &Path,
) -> Result<Component> {
    let secured = Secured::new(certs, url, dir, "scheduler", "system:kube-scheduler")?;
    let mut s = Component::spawn("kube-scheduler", &bins.scheduler, &secured.args, dir)?;
    s.wait_ready(READY_TIMEOUT, || secured.probe.ok("/readyz"))
        .await?;
    Ok(s)
}

/// What the controller-manager and the scheduler share: a client identity
/// (kubeconfig), a serving certificate on a secure port of their own, the
/// flags that name them, and a probe of that port.
struct Secured {
    args: Vec<String>,
    probe: Probe,
}

impl Secured {
    fn new(certs: &Certs, url: &str, dir: &Path, file: &str, user: &str) -> Result<Secured> {
        let p = |p: &Path| p.display().to_string();
        let identity = certs.pki.client(file, user, &[])?;
        let kubeconfig = dir.join(format!("{file}.kubeconfig"));
        write_kubeconfig(&kubeconfig, url, certs.pki.ca_cert(), &identity, user)?;
        let serving = certs.pki.serving(
            &format!("{file}-serving"),
            user,
            &["127.0.0.1", "localhost"],
        )?;
        let port = free_port()?;
        let args = vec![
            format!("--kubeconfig={}", p(&kubeconfig)),
            format!("--authentication-kubeconfig={}", p(&kubeconfig)),
            format!("--authorization-kubeconfig={}", p(&kubeconfig)),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", p(&serving.cert)),
            format!("--tls-private-key-file={}", p(&serving.key)),
            "--leader-elect=false".into(),
            "--profiling=false".into(),
        ];
        let probe = Probe::new(
            certs.pki.ca_cert(),
            &identity,
            &format!("https://127.0.0.1:{port}"),
        )?;
        Ok(Secured { args, probe })
    }
}

async fn wait_default_service_account(client: &Client) -> Result<()> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    loop {
        if let Ok(Some(_)) = api.get_opt("default").await {
            return Ok(());
        }
        if start.elapsed() > READY_TIMEOUT {
            bail!(
                "kube-controller-manager: no ServiceAccount default/default after {READY_TIMEOUT:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A component's health endpoints over TLS with a client certificate. Plain
/// hyper rather than a kube::Client: kube logs every refused connection at
/// ERROR, and refusals are what a starting component answers.
struct Probe {
    http: hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        http_body_util::Empty<bytes::Bytes>,
    >,
    base: String,
}

impl Probe {
    fn new(ca: &Path, identity: &CertFiles, base: &str) -> Result<Probe> {
        Ok(Probe {
            http: crate::fault_proxy::tls_client(ca, &identity.cert, &identity.key)?,
            base: base.to_owned(),
        })
    }

    /// `GET path`; anything but 200 `ok` fails, with what was answered.
    async fn ok(&self, path: &str) -> Result<()> {
        use http_body_util::BodyExt;
        let uri: http::Uri = format!("{}{path}", self.base).parse()?;
        let resp = self.http.get(uri).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        let text = String::from_utf8_lossy(&body);
        if status == http::StatusCode::OK && text.trim() == "ok" {
            Ok(())
        } else {
            bail!("{path}: {status} {}", text.trim())
        }
    }
}

/// A plain-HTTP GET that must answer 200 (etcd's /readyz).
async fn http_ok(addr: String, path: &str) -> Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(&addr).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let head = String::from_utf8_lossy(&buf);
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) == Some("200") {
        Ok(())
    } else {
        bail!("{path}: {status}")
    }
}

/// Writes a kubeconfig that names its files by absolute path, so it works
/// from any directory and any shell for as long as the control plane runs.
pub fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca: &Path,
    cert: &CertFiles,
    user: &str,
) -> Result<()> {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "etcd-steward-testbed", "cluster": {
            "server": server,
            "certificate-authority": ca,
        }}],
        "users": [{"name": user, "user": {
            "client-certificate": cert.cert,
            "client-key": cert.key,
        }}],
        "contexts": [{"name": "etcd-steward-testbed", "context": {
            "cluster": "etcd-steward-testbed",
            "user": user,
            "namespace": "default",
        }}],
        "current-context": "etcd-steward-testbed",
    });
    let yaml = serde_saphyr::to_string(&config).context("serialising a kubeconfig")?;
    std::fs::write(path, yaml).with_context(|| format!("writing {}", path.display()))
}

/// A client from `kubeconfig`.
async fn client_for(kubeconfig: &Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading {}", kubeconfig.display()))?;
    Client::try_from(config).context("building a client")
}

/// `etcd-steward sandbox --control-plane-only --dir DIR`: runs the control
/// plane until SIGINT or SIGTERM, then stops every etcd it started.
pub async fn run_control_plane_only(dir: &Path) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};

    let mut sigterm = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
    let plane = ControlPlane::start(dir).await?;
    let kubeconfig = plane.kubeconfig_path();
    let kubectl = plane.binaries().kubectl.display().to_string();
    println!(
        "etcd-steward test control plane is running (kube-apiserver, kube-controller-manager, \
         kube-scheduler; local kubelet), started in {:.1} s.",
        plane.startup().as_secs_f64()
    );
    println!("  kubeconfig: {}", kubeconfig.display());
    println!(
        "  try:        KUBECONFIG={} {kubectl} get nodes,pods -A",
        kubeconfig.display()
    );
    println!(
        "  logs:       {}/*.log (components), {}/kubelet/pods/<ns>_<pod>_<uid>/ (Pods)",
        dir.display(),
        dir.display()
    );
    println!("Pod names resolve only inside this process's private mount namespace;");
    println!(
        "run kubectl from another shell freely, and anything that must reach Pods by name via"
    );
    println!(
        "  nsenter -t {} -m -- COMMAND   (e.g. cargo run -- run, or etcdctl --endpoints=http://<pod>.<svc>.<ns>.svc:2379)",
        std::process::id()
    );
    println!("Press Ctrl-C to stop; every process started here is stopped.");
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = sigterm.recv() => {}
    }
    println!("stopping the control plane ...");
    plane.shutdown().await;
    Ok(())
}

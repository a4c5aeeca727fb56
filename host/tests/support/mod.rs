//! The end-to-end environment: the test control plane (the real
//! kube-apiserver, controller-manager and scheduler, and the local kubelet
//! running real etcd) with deploy/'s CRDs and RBAC applied by the real
//! kubectl, and the operator, in-process, exactly as `etcd-steward run`
//! would start it against a real cluster: under its own ServiceAccount's
//! RBAC, so a verb missing from deploy/01-rbac.yaml fails these tests.

#![allow(dead_code)]

pub mod alerts;

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use etcd_steward::api::{EtcdCluster, EtcdMember};
use etcd_steward::cli::run::{Operator, RunArgs};
use etcd_steward::etcd::Faults;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use steward_testbed::ControlPlane;
pub use steward_testbed::etcd_tls::EtcdCerts;
use steward_testbed::status_consumers::{Reading, StatusConsumers};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const NS: &str = "default";

/// The operator's namespace and ServiceAccount, as deploy/ installs them.
pub const OPERATOR_NS: &str = "etcd-steward-system";
pub const OPERATOR_SA: &str = "etcd-steward";

/// A generous bound for "eventually": these are correctness tests, and a
/// loaded 2-core CI machine must not turn them into timing tests.
pub const EVENTUALLY: Duration = Duration::from_secs(120);

/// A TLS cluster's CA and certificates ([`Env::create_tls_cluster`]); `ca`,
/// `cert` and `key` are the files of the CA and the operator's certificate,
/// for etcdctl.
pub struct TlsCluster {
    pub pki: steward_testbed::pki::Pki,
    pub certs: EtcdCerts,
    pub ca: String,
    pub cert: String,
    pub key: String,
}

/// The certificate `host:port` presents in a TLS handshake (DER), read
/// without trusting or judging it: what a member serves right now.
pub fn served_certificate(host: &str, port: u16) -> Result<Vec<u8>, String> {
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    #[derive(Debug)]
    struct Record(
        std::sync::Mutex<Option<Vec<u8>>>,
        std::sync::Arc<rustls::crypto::CryptoProvider>,
    );
    impl ServerCertVerifier for Record {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            *self.0.lock().unwrap() = Some(end_entity.to_vec());
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.1.signature_verification_algorithms,
            )
        }
        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.1.signature_verification_algorithms,
            )
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.1.signature_verification_algorithms.supported_schemes()
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let record = std::sync::Arc::new(Record(Default::default(), provider.clone()));
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(record.clone())
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name)
        .map_err(|e| e.to_string())?;
    let mut sock = std::net::TcpStream::connect((host, port)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(5))).ok();
    // The server's certificate arrives before it asks for ours; a peer port
    // then refuses a client without one, which does not matter here.
    while conn.is_handshaking() && record.0.lock().unwrap().is_none() {
        if conn.complete_io(&mut sock).is_err() {
            break;
        }
    }
    record
        .0
        .lock()
        .unwrap()
        .take()
        .ok_or_else(|| format!("{host}:{port} presented no certificate"))
}

/// Each member Pod of `cluster`: (name, uid, restarts of its etcd).
pub async fn pod_lives(env: &Env, cluster: &str) -> Vec<(String, String, i32)> {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(env.client.clone(), NS);
    let mut lives = Vec::new();
    for name in env.member_names(cluster).await {
        let pod = pods.get(&name).await.expect("a member's Pod");
        let restarts = pod
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default()
            .iter()
            .map(|c| c.restart_count)
            .sum();
        lives.push((name, pod.metadata.uid.unwrap_or_default(), restarts));
    }
    lives
}

/// Waits until every member of `cluster` serves `cert` on `port`.
pub async fn wait_served(env: &Env, cluster: &str, port: u16, cert: &[u8], what: &str) {
    let start = Instant::now();
    for member in env.member_names(cluster).await {
        let host = format!("{member}.{cluster}.{NS}.svc");
        loop {
            let h = host.clone();
            let served = tokio::task::spawn_blocking(move || served_certificate(&h, port))
                .await
                .unwrap();
            if served.as_deref().ok() == Some(cert) {
                break;
            }
            assert!(
                start.elapsed() < EVENTUALLY,
                "{host}:{port} does not serve {what}: {:?}",
                served.map(|_| "another certificate")
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

pub struct Env {
    pub plane: ControlPlane,
    /// An admin client, for the test's own reads and writes.
    pub client: Client,
    /// The operator's identity: `system:serviceaccount:etcd-steward-system:etcd-steward`.
    pub operator_client: Client,
    pub faults: Faults,
    /// kstatus and Argo CD's health check, the real libraries.
    pub consumers: StatusConsumers,
    operator: Option<(oneshot::Sender<()>, JoinHandle<anyhow::Result<()>>)>,
    /// The running operator's metrics: what its /metrics serves.
    metrics: Option<std::sync::Arc<etcd_steward::metrics::Metrics>>,
    _dir: tempfile::TempDir,
}

pub fn run_args() -> RunArgs {
    RunArgs {
        etcd_image: "quay.io/coreos/etcd".into(),
        namespace: None,
        probe_deadline_ms: 2000,
        resync_ms: 2000,
        verified_refresh_seconds: 15,
        // An hour: in a test, anything a policy picks up came through a
        // watch, not through the minute's recheck.
        policy_recheck_seconds: 3600,
        policy_deadline_ms: 200,
        policy_memory_mib: 64,
        policy_component_mib: 64,
        policy_instances: 64,
        policy_max_deadline_ms: 2000,
        policy_max_memory_mib: 256,
        policy_max_component_mib: 128,
        policy_max_instances: 128,
        policy_cache_dir: None,
        policy_namespace: Some(OPERATOR_NS.into()),
        metrics_addr: String::new(),
        crash_loop_threshold: 5,
        // Two: a snapshot fault test sees Failed after one 5 s backoff.
        snapshot_attempts: 2,
        // The local kubelet runs this image as the binary under test.
        operator_image: "etcd-steward:test".into(),
        leader_elect: false,
        leader_election_namespace: OPERATOR_NS.into(),
    }
}

impl Env {
    pub async fn start() -> Env {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().expect("a temp dir");
        // The operator's image (a restored seed's init containers) runs the
        // binary under test, as the image would.
        let plane = ControlPlane::start_with(dir.path(), |k| {
            k.images.push(steward_testbed::kubelet::launch::LocalImage {
                repository: "etcd-steward".into(),
                program: env!("CARGO_BIN_EXE_etcd-steward").into(),
            })
        })
        .await
        .expect("the test control plane starts (run the tests through `make test`)");
        let client = plane.client();
        install(&plane).await;
        let operator_client = plane
            .client_as(
                &format!("system:serviceaccount:{OPERATOR_NS}:{OPERATOR_SA}"),
                &[
                    "system:serviceaccounts",
                    &format!("system:serviceaccounts:{OPERATOR_NS}"),
                    "system:authenticated",
                ],
            )
            .await
            .expect("a client for the operator's ServiceAccount");
        let consumers = consumers(&plane);
        let mut env = Env {
            plane,
            client,
            operator_client,
            faults: Faults::new(),
            consumers,
            operator: None,
            metrics: None,
            _dir: dir,
        };
        env.start_operator();
        env
    }

    pub fn dir(&self) -> &Path {
        self.plane.dir()
    }

    /// The control plane alone, with nothing installed and no operator,
    /// and a registry (the real CNCF distribution registry, plain HTTP on
    /// loopback) the kubelet pulls images from, as a node pulls from a
    /// registry: `deploy/` and the Helm chart run the operator's image
    /// pushed there.
    pub async fn start_bare() -> (Env, steward_testbed::registry::Registry) {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().expect("a temp dir");
        let bins = steward_testbed::kube_bin::locate()
            .expect("the Kubernetes binaries (run the tests through `make test`)");
        let registry = steward_testbed::registry::Registry::start(&bins)
            .await
            .expect("the registry starts");
        let access = steward_testbed::kubelet::images::RegistryAccess::of(&registry);
        let plane = ControlPlane::start_with(dir.path(), |k| k.registries.push(access))
            .await
            .expect("the test control plane starts (run the tests through `make test`)");
        let client = plane.client();
        let env = Env {
            operator_client: client.clone(),
            consumers: consumers(&plane),
            plane,
            client,
            faults: Faults::new(),
            operator: None,
            metrics: None,
            _dir: dir,
        };
        (env, registry)
    }

    /// Starts the operator (again). Faults injected in `self.faults` apply.
    pub fn start_operator(&mut self) {
        assert!(self.operator.is_none(), "the operator is already running");
        let mut op = Operator::new(run_args());
        op.faults = self.faults.clone();
        self.metrics = Some(op.metrics.clone());
        let (tx, rx) = oneshot::channel::<()>();
        let client = self.operator_client.clone();
        let task = tokio::spawn(async move {
            op.run(client, async {
                let _ = rx.await;
            })
            .await
        });
        self.operator = Some((tx, task));
    }

    /// The text the operator's /metrics serves now (the same encoder).
    pub fn metrics_text(&self) -> String {
        self.metrics
            .as_ref()
            .expect("the operator was started")
            .encode()
    }

    /// Stops the operator as a crash would: in-flight work is abandoned.
    pub async fn kill_operator(&mut self) {
        if let Some((_tx, task)) = self.operator.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Waits until the operator task ends by itself (a simulated crash).
    pub async fn wait_operator_exit(&mut self) {
        let (_tx, task) = self.operator.take().expect("the operator is running");
        let ended = tokio::time::timeout(EVENTUALLY, task).await;
        assert!(ended.is_ok(), "the operator did not stop");
    }

    /// Starts watching one cluster now, so no later status is missed.
    pub async fn watch(&self, name: &str) -> ClusterWatch {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let stream = watcher(
            self.clusters(),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
        .applied_objects()
        .boxed();
        ClusterWatch { stream }
    }

    pub fn clusters(&self) -> Api<EtcdCluster> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub fn members(&self) -> Api<EtcdMember> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub async fn create_cluster(&self, name: &str, replicas: i32) -> EtcdCluster {
        self.create_cluster_at(name, replicas, etcd_steward::api::DEFAULT_ETCD_VERSION)
            .await
    }

    /// A cluster of `replicas` members running etcd `version`.
    pub async fn create_cluster_at(&self, name: &str, replicas: i32, version: &str) -> EtcdCluster {
        let cluster: EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "version": version, "storage": {"size": "1Gi"}}
        }))
        .expect("a valid EtcdCluster");
        self.clusters()
            .create(&PostParams::default(), &cluster)
            .await
            .expect("creating the EtcdCluster")
    }

    /// Creates or replaces the `kubernetes.io/basic-auth` Secret `name`
    /// with etcd's root user and `password`.
    pub async fn set_root_secret(&self, name: &str, password: &str) {
        let secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": NS},
            "type": "kubernetes.io/basic-auth",
            "stringData": {"username": "root", "password": password},
        });
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.client.clone(), NS)
            .patch(
                name,
                &PatchParams::apply("e2e").force(),
                &Patch::Apply(&secret),
            )
            .await
            .expect("applying the root Secret");
    }

    /// A cluster of `replicas` members with client and peer TLS from
    /// Secrets made by a CA of its own: the members' serving certificate
    /// (`*.<name>.<ns>.svc` and the client Service's names), their peer
    /// certificate, and the operator's client certificate (Secrets
    /// `<name>-server`, `<name>-peer`, `<name>-operator`). Returns the
    /// files etcdctl uses to call as the operator does: CA, certificate, key.
    pub async fn create_tls_cluster(&self, name: &str, replicas: i32) -> TlsCluster {
        let pki = steward_testbed::pki::Pki::create(&self.dir().join(format!("{name}-pki")))
            .expect("a CA");
        let certs = EtcdCerts::issue(&pki, name, NS, "1").expect("certificates");
        let secrets =
            Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.client.clone(), NS);
        for secret in certs.secrets(name, NS, pki.ca_pem()) {
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .expect("creating a TLS Secret");
        }
        let cluster: EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "storage": {"size": "1Gi"},
                     "tls": steward_testbed::etcd_tls::spec(name)}
        }))
        .expect("a valid EtcdCluster");
        self.clusters()
            .create(&PostParams::default(), &cluster)
            .await
            .expect("creating the EtcdCluster");
        TlsCluster {
            ca: pki.ca_cert().display().to_string(),
            cert: certs.operator.cert.display().to_string(),
            key: certs.operator.key.display().to_string(),
            pki,
            certs,
        }
    }

    /// Puts `renewed` into the TLS Secrets of `cluster` (made by
    /// [`Env::create_tls_cluster`]) and waits until every member serves the
    /// new serving and peer certificates.
    pub async fn renew_tls(&self, cluster: &str, tls: &TlsCluster, renewed: &EtcdCerts) {
        let ca = tls.pki.ca_pem();
        self.put_tls_secret(&format!("{cluster}-server"), &renewed.server, ca)
            .await;
        self.put_tls_secret(&format!("{cluster}-peer"), &renewed.peer, ca)
            .await;
        self.put_tls_secret(&format!("{cluster}-operator"), &renewed.operator, ca)
            .await;
        wait_served(
            self,
            cluster,
            2379,
            &renewed.server.cert_der,
            "the renewed serving certificate",
        )
        .await;
        wait_served(
            self,
            cluster,
            2380,
            &renewed.peer.cert_der,
            "the renewed peer certificate",
        )
        .await;
    }

    /// Replaces the certificate and key of the TLS Secret `secret`, and
    /// its `ca.crt` by `ca_pem`: what a renewal (or a mistake) does.
    pub async fn put_tls_secret(
        &self,
        secret: &str,
        files: &steward_testbed::pki::CertFiles,
        ca_pem: &str,
    ) {
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.client.clone(), NS)
            .patch(
                secret,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"stringData": {
                    "tls.crt": files.cert_pem, "tls.key": files.key_pem, "ca.crt": ca_pem,
                }})),
            )
            .await
            .expect("patching a TLS Secret");
    }

    /// Patches spec.replicas; returns the object as stored by that patch.
    pub async fn scale(&self, name: &str, replicas: i32) -> EtcdCluster {
        self.clusters()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
            )
            .await
            .expect("scaling")
    }

    /// Polls the cluster until `pred` holds; panics with the last status.
    pub async fn wait_for(
        &self,
        name: &str,
        what: &str,
        pred: impl Fn(&EtcdCluster) -> bool,
    ) -> EtcdCluster {
        let start = Instant::now();
        loop {
            let c = self
                .clusters()
                .get(name)
                .await
                .expect("reading the cluster");
            if pred(&c) {
                return c;
            }
            if start.elapsed() > EVENTUALLY {
                let members: Vec<String> = self
                    .members()
                    .list(&ListParams::default())
                    .await
                    .map(|l| {
                        l.items
                            .iter()
                            .map(|m| {
                                format!(
                                    "{} deleting={:?} finalizers={:?}",
                                    m.name_any(),
                                    m.metadata.deletion_timestamp,
                                    m.metadata.finalizers
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                panic!(
                    "timed out waiting for {what}; members: {members:#?}\nlast status:\n{}",
                    serde_json::to_string_pretty(&c.status).unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until the cluster serves with `ready` members and its
    /// membership is settled (Reconciling=False), then asserts that kstatus
    /// and Argo CD read it as healthy.
    pub async fn wait_available(&self, name: &str, ready: i32) -> EtcdCluster {
        let c = self
            .wait_for(
                name,
                &format!("Available=True with {ready} ready, Reconciling=False"),
                |c| {
                    condition(c, "Available") == Some("True")
                        && ready_members(c) == ready
                        && condition(c, "Reconciling") == Some("False")
                },
            )
            .await;
        self.assert_read_healthy(&c);
        c
    }

    /// What kstatus and Argo CD's health check read in `c`.
    pub fn read(&self, c: &EtcdCluster) -> Readings {
        let obj = serde_json::to_value(c).expect("the cluster as JSON");
        let r = Readings {
            kstatus: self.consumers.kstatus(&obj).expect("kstatus"),
            argo: self
                .consumers
                .argo_health(&obj)
                .expect("Argo CD's health.lua"),
        };
        // Shown with --nocapture: what each state reads as, for the record.
        eprintln!(
            "readings of {} [{}]: kstatus {}; Argo CD {}",
            c.name_any(),
            conditions_line(c),
            r.kstatus,
            r.argo
        );
        r
    }

    /// Asserts the status kstatus (Flux, kpt) and Argo CD report for `c`,
    /// as docs/api.md ("How Flux and Argo CD read it") promises; returns
    /// both readings for checks on their messages.
    pub fn assert_read(&self, c: &EtcdCluster, kstatus: &str, argo: &str) -> Readings {
        let r = self.read(c);
        assert!(
            r.kstatus.status == kstatus && r.argo.status == argo,
            "want kstatus {kstatus} and Argo CD {argo}; read kstatus {} and Argo CD {}\n{}",
            r.kstatus,
            r.argo,
            describe(c)
        );
        r
    }

    /// A serving cluster: kstatus Current; Argo CD Healthy, its message
    /// mentioning the degradation exactly when Degraded=True.
    pub fn assert_read_healthy(&self, c: &EtcdCluster) -> Readings {
        let r = self.assert_read(c, "Current", "Healthy");
        let degraded = condition(c, "Degraded") == Some("True");
        assert_eq!(
            r.argo.message.contains("degraded"),
            degraded,
            "Argo CD's message {:?} with Degraded={:?}",
            r.argo.message,
            condition(c, "Degraded")
        );
        r
    }

    pub async fn member_names(&self, cluster: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .members()
            .list(&ListParams::default())
            .await
            .expect("listing members")
            .items
            .into_iter()
            .filter(|m| m.spec.cluster == cluster)
            .map(|m| m.name_any())
            .collect();
        names.sort();
        names
    }

    pub fn client_url(&self, cluster: &str, member: &str) -> String {
        format!("http://{member}.{cluster}.{NS}.svc:2379")
    }

    pub async fn endpoints(&self, cluster: &str) -> String {
        self.member_names(cluster)
            .await
            .iter()
            .map(|m| self.client_url(cluster, m))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The etcd releases the local kubelet runs, by image tag.
    pub fn releases(&self) -> &steward_testbed::etcd_bin::EtcdReleases {
        self.plane.kubelet().etcd_releases()
    }

    /// Runs the real etcdctl; returns stdout, panics with stderr on failure.
    pub async fn etcdctl(&self, endpoints: &str, args: &[&str]) -> String {
        let bin = self.plane.kubelet().etcd().etcdctl.clone();
        let out = tokio::process::Command::new(bin)
            .arg(format!("--endpoints={endpoints}"))
            .arg("--command-timeout=5s")
            .args(args)
            .output()
            .await
            .expect("running etcdctl");
        assert!(
            out.status.success(),
            "etcdctl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A real cert-manager on this control plane: its CRDs applied and
    /// its controllers running (stop it before [`Env::shutdown`]).
    pub async fn start_cert_manager(&self) -> steward_testbed::cert_manager::CertManager {
        steward_testbed::cert_manager::CertManager::start(
            self.plane.binaries(),
            &self.plane.kubeconfig_path(),
            self.dir(),
        )
        .await
        .expect("cert-manager starts")
    }

    /// Waits for a Warning Event of `reason` whose note contains `says`,
    /// on any object (a folded series keeps the first note).
    pub async fn wait_warning(&self, reason: &str, says: &str) {
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(self.client.clone());
        let start = Instant::now();
        loop {
            let list = events
                .list(&Default::default())
                .await
                .expect("listing Events");
            if list.items.iter().any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some(reason)
                    && e.note.as_deref().is_some_and(|n| n.contains(says))
            }) {
                return;
            }
            assert!(
                start.elapsed() < EVENTUALLY,
                "no Warning Event {reason} saying {says:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    pub async fn shutdown(mut self) {
        self.assert_the_default_policy_never_failed().await;
        if let Some((tx, task)) = self.operator.take() {
            let _ = tx.send(());
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        self.plane.shutdown().await;
    }
}

impl Env {
    /// The embedded default policy must never contradict the host: any
    /// PolicyFailed Event on a cluster that runs it fails the test that
    /// caused it (a cluster a test switched to a broken policy runs that
    /// one, and is not checked).
    async fn assert_the_default_policy_never_failed(&self) {
        let events: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::all(self.client.clone());
        let Ok(list) = events.list(&Default::default()).await else {
            return;
        };
        for e in list.items {
            let Some(regarding) = e.regarding.as_ref() else {
                continue;
            };
            if e.reason.as_deref() != Some("PolicyFailed")
                || regarding.kind.as_deref() != Some("EtcdCluster")
            {
                continue;
            }
            let ns = regarding.namespace.clone().unwrap_or_default();
            let name = regarding.name.clone().unwrap_or_default();
            let Ok(Some(cluster)) = kube::Api::<EtcdCluster>::namespaced(self.client.clone(), &ns)
                .get_opt(&name)
                .await
            else {
                continue;
            };
            let runs_default = cluster.spec.status_policy.is_none()
                && cluster
                    .status
                    .as_ref()
                    .and_then(|s| s.policy.as_ref())
                    .is_some_and(|p| p.name == "steward-default-policy");
            assert!(
                !runs_default,
                "the default policy's verdict was rejected on {ns}/{name}: {:?}",
                e.note
            );
        }
    }
}

/// What the two status consumers read in one object.
#[derive(Debug, Clone)]
pub struct Readings {
    pub kstatus: Reading,
    pub argo: Reading,
}

fn consumers(plane: &ControlPlane) -> StatusConsumers {
    StatusConsumers::new(plane.binaries())
        .expect("steward-status (run the tests through `make test`)")
}

/// `Type=Status/Reason` of each condition, one line.
pub fn conditions_line(c: &EtcdCluster) -> String {
    let mut line = format!(
        "generation {:?} observed {:?}{}",
        c.metadata.generation,
        c.status.as_ref().and_then(|s| s.observed_generation),
        if c.metadata.deletion_timestamp.is_some() {
            " deleting"
        } else {
            ""
        }
    );
    for x in c.status.iter().flat_map(|s| &s.conditions) {
        line.push_str(&format!(" {}={}/{}", x.type_, x.status, x.reason));
    }
    line
}

/// The fields kstatus and Argo CD look at, for assertion messages.
pub fn describe(c: &EtcdCluster) -> String {
    format!(
        "metadata.generation {:?}, deletionTimestamp {:?}, spec.replicas {}, status:\n{}",
        c.metadata.generation,
        c.metadata.deletion_timestamp,
        c.spec.replicas,
        serde_json::to_string_pretty(&c.status).unwrap()
    )
}

/// Every status a cluster goes through, from the moment it was created.
pub struct ClusterWatch {
    stream: futures::stream::BoxStream<'static, Result<EtcdCluster, kube::runtime::watcher::Error>>,
}

impl ClusterWatch {
    /// Every version of the cluster seen until `stop` resolves.
    pub async fn record(mut self, stop: impl Future<Output = ()>) -> Vec<EtcdCluster> {
        use futures::StreamExt;
        let mut seen = Vec::new();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return seen,
                item = self.stream.next() => match item {
                    Some(Ok(c)) => seen.push(c),
                    Some(Err(_)) => {}
                    None => return seen,
                },
            }
        }
    }

    pub async fn until(mut self, what: &str, pred: impl Fn(&EtcdCluster) -> bool) -> EtcdCluster {
        use futures::StreamExt;
        let mut last = None;
        let found = tokio::time::timeout(EVENTUALLY, async {
            while let Some(item) = self.stream.next().await {
                if let Ok(c) = item {
                    if pred(&c) {
                        return Some(c);
                    }
                    last = Some(c);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(c)) => c,
            _ => panic!(
                "never saw {what}; last status:\n{}",
                serde_json::to_string_pretty(&last.and_then(|c| c.status)).unwrap()
            ),
        }
    }
}

/// `kubectl apply` of the CRDs and of deploy/'s namespace and RBAC, exactly
/// as the README installs them; then waits for the CRDs to be Established.
async fn install(plane: &ControlPlane) {
    let root = steward_testbed::repo::root();
    let root = root.display();
    for file in ["crds/", "deploy/00-namespace.yaml", "deploy/01-rbac.yaml"] {
        kubectl(plane, &["apply", "-f", &format!("{root}/{file}")]).await;
    }
    kubectl(
        plane,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=120s",
            "crd/etcdclusters.etcd.steward.dev",
            "crd/etcdmembers.etcd.steward.dev",
            "crd/etcdstatuspolicies.etcd.steward.dev",
        ],
    )
    .await;
}

/// Destroys members' data for good: deletes each member's PVC, then its
/// Pod, and waits until both are gone (pvc-protection holds the claim until
/// no Pod uses it).
pub async fn destroy_data(env: &Env, members: &[String]) {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    for m in members {
        pvcs.delete(&format!("data-{m}"), &Default::default())
            .await
            .unwrap();
    }
    for m in members {
        pods.delete(m, &Default::default()).await.unwrap();
    }
    let start = std::time::Instant::now();
    for m in members {
        while pods.get_opt(m).await.unwrap().is_some()
            || pvcs.get_opt(&format!("data-{m}")).await.unwrap().is_some()
        {
            assert!(start.elapsed() < EVENTUALLY, "{m}'s Pod or PVC stayed");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Runs the real kubectl against the control plane; returns stdout, panics
/// with stderr on failure.
pub async fn kubectl(plane: &ControlPlane, args: &[&str]) -> String {
    let out = kubectl_output(plane, args).await;
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the real kubectl against the control plane, whatever its exit.
pub async fn kubectl_output(plane: &ControlPlane, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(&plane.binaries().kubectl)
        .args(args)
        .env("KUBECONFIG", plane.kubeconfig_path())
        .env("HOME", plane.dir())
        .output()
        .await
        .expect("running kubectl")
}

pub fn condition<'a>(c: &'a EtcdCluster, type_: &str) -> Option<&'a str> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == type_)
        .map(|x| x.status.as_str())
}

pub fn condition_reason<'a>(c: &'a EtcdCluster, type_: &str) -> Option<&'a str> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == type_)
        .map(|x| x.reason.as_str())
}

pub fn condition_message<'a>(c: &'a EtcdCluster, type_: &str) -> Option<&'a str> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == type_)
        .map(|x| x.message.as_str())
}

pub fn ready_members(c: &EtcdCluster) -> i32 {
    c.status.as_ref().map_or(-1, |s| s.ready_members)
}

/// Runs an async test body on a multi-threaded runtime.
pub fn run<F: Future<Output = ()>>(f: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f);
}

impl Env {
    /// Stops a member's etcd as a node shutting down (or a kubelet stopping
    /// the container) does: SIGTERM to its process. etcd hands leadership
    /// over and exits cleanly; with `restartPolicy: Never` the Pod ends
    /// Succeeded and the operator recreates it on the same PVC. Returns the
    /// PID signalled.
    pub fn sigterm_member(&self, member: &str) -> u32 {
        use nix::sys::signal::{Signal, kill};
        let pid = self
            .plane
            .kubelet()
            .pod(NS, member)
            .and_then(|p| p.pid)
            .unwrap_or_else(|| panic!("the local kubelet runs no etcd for {member}"));
        kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGTERM)
            .unwrap_or_else(|e| panic!("SIGTERM to {member}'s etcd (pid {pid}): {e}"));
        pid
    }
}

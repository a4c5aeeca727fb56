//! `etcd-steward run`: the operator, in-cluster or against any kubeconfig.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::context::{Context, OperatorConfig, Scope};
use crate::controller;
use crate::etcd::{ClientConfig, EtcdClient, Faults, FaultyEtcd};
use crate::health::{self, Readiness};
use crate::leader::{self, Candidate, LeaseConfig};
use crate::metrics::Metrics;
use crate::policy::{EngineConfig, Limits, PolicyEngine};

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Repository of the etcd image; members run `<repository>:v<spec.version>`.
    #[arg(
        long,
        env = "ETCD_STEWARD_ETCD_IMAGE",
        default_value = "quay.io/coreos/etcd"
    )]
    pub etcd_image: String,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "ETCD_STEWARD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Deadline of every etcd RPC, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub probe_deadline_ms: u64,
    /// How often a steady cluster is re-probed, in milliseconds. Bounds how
    /// fast a silent outage (a frozen etcd changes no Kubernetes object) shows.
    #[arg(long, default_value_t = 2000)]
    pub resync_ms: u64,
    /// How often an unchanged, verified status is rewritten just to move
    /// lastVerifiedTime forward, in seconds. Any other change is written at
    /// once. Keep it at most half the policy's staleness window (30 s for
    /// the default policy).
    #[arg(long, default_value_t = 15)]
    pub verified_refresh_seconds: u64,
    /// How often each EtcdStatusPolicy is looked at with nothing changed,
    /// in seconds: its cluster count, and another try of a version that
    /// failed to load (a re-pushed tag, which no watch sees). Changes to a
    /// policy, its ConfigMaps and its pull Secret are watched, not polled.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub policy_recheck_seconds: u64,
    /// Deadline of one policy evaluation (instantiation included), in
    /// milliseconds, for a policy whose EtcdStatusPolicy sets none.
    #[arg(long, default_value_t = 50)]
    pub policy_deadline_ms: u64,
    /// How far each linear memory of a policy may grow, in MiB, for a
    /// policy that sets no limits.memoryBytes.
    #[arg(long, default_value_t = 64)]
    pub policy_memory_mib: u64,
    /// The largest component a policy may be, in MiB, unless it sets
    /// limits.componentBytes.
    #[arg(long, default_value_t = 64)]
    pub policy_component_mib: u64,
    /// Core instances one evaluation may create, unless the policy sets
    /// limits.instances.
    #[arg(long, default_value_t = 64)]
    pub policy_instances: u32,
    /// The most any EtcdStatusPolicy may set as limits.deadlineMilliseconds.
    #[arg(long, default_value_t = 1000)]
    pub policy_max_deadline_ms: u64,
    /// The most any EtcdStatusPolicy may set as limits.memoryBytes, in MiB.
    /// The instance pool reserves address space for it.
    #[arg(long, default_value_t = 256)]
    pub policy_max_memory_mib: u64,
    /// The most any EtcdStatusPolicy may set as limits.componentBytes, in MiB.
    #[arg(long, default_value_t = 128)]
    pub policy_max_component_mib: u64,
    /// The most any EtcdStatusPolicy may set as limits.instances.
    #[arg(long, default_value_t = 128)]
    pub policy_max_instances: u32,
    /// Keep compiled policies in this directory, so a restarted operator
    /// does not compile them again (an emptyDir in the Deployment). Only
    /// the operator may write there: its files are loaded as native code.
    #[arg(long, env = "ETCD_STEWARD_POLICY_CACHE_DIR")]
    pub policy_cache_dir: Option<std::path::PathBuf>,
    /// Where EtcdStatusPolicy ConfigMaps and pull Secrets are read from
    /// (default: the operator's own namespace, $POD_NAMESPACE, else
    /// etcd-steward-system).
    #[arg(long, env = "ETCD_STEWARD_POLICY_NAMESPACE")]
    pub policy_namespace: Option<String>,
    /// Where to serve /metrics, /healthz (liveness) and /readyz (caches
    /// synced and leadership known); empty: don't. A taken port fails at
    /// startup.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: String,
    /// Replace a member whose Pod failed this many times in a row without
    /// becoming Ready (OOM kills not counted), once the others hold quorum.
    /// 0 turns crash-loop self-heal off.
    #[arg(long, default_value_t = 5)]
    pub crash_loop_threshold: u32,
    /// The operator's own image, which a restored cluster's seed Pod runs
    /// (init containers that fetch the snapshot and install the restored
    /// data). The manifests and the chart set it to the Deployment's image.
    #[arg(long, env = "ETCD_STEWARD_IMAGE", default_value = concat!("etcd-steward:", env!("CARGO_PKG_VERSION")))]
    pub operator_image: String,
    /// Attempts at one EtcdSnapshot (5 s after the first failure, doubling)
    /// before its phase is Failed.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub snapshot_attempts: u32,
    /// Run as one of several replicas: only the holder of the Lease
    /// `etcd-steward` reconciles; the others wait to take over.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_election_namespace: String,
}

impl RunArgs {
    pub fn operator_config(&self) -> OperatorConfig {
        OperatorConfig {
            etcd_image: self.etcd_image.clone(),
            probe_deadline: Duration::from_millis(self.probe_deadline_ms),
            resync: Duration::from_millis(self.resync_ms),
            busy_resync: Duration::from_millis(self.resync_ms.min(1000)),
            verified_refresh: Duration::from_secs(self.verified_refresh_seconds),
            policy_recheck: Duration::from_secs(self.policy_recheck_seconds),
            crash_loop_threshold: self.crash_loop_threshold,
            snapshot_attempts: self.snapshot_attempts,
            operator_image: self.operator_image.clone(),
            policy_namespace: self
                .policy_namespace
                .clone()
                .or_else(|| std::env::var("POD_NAMESPACE").ok())
                .unwrap_or_else(|| "etcd-steward-system".into()),
            ..OperatorConfig::default()
        }
    }

    pub fn engine_config(&self) -> EngineConfig {
        let mib = |n: u64| (n * 1024 * 1024) as usize;
        EngineConfig {
            defaults: Limits {
                deadline: Duration::from_millis(self.policy_deadline_ms),
                memory_bytes: mib(self.policy_memory_mib),
                component_bytes: mib(self.policy_component_mib),
                instances: self.policy_instances,
            },
            maximum: Limits {
                deadline: Duration::from_millis(self.policy_max_deadline_ms),
                memory_bytes: mib(self.policy_max_memory_mib),
                component_bytes: mib(self.policy_max_component_mib),
                instances: self.policy_max_instances,
            },
            cache_dir: self.policy_cache_dir.clone(),
            ..EngineConfig::default()
        }
    }
}

/// Everything `run` needs besides the client, so tests and the sandbox can
/// start the very same operator in-process (with etcd faults injectable).
pub struct Operator {
    pub args: RunArgs,
    pub faults: Faults,
    pub metrics: Arc<Metrics>,
    /// What `/readyz` reports; set as `run` gets there.
    pub readiness: Arc<Readiness>,
    /// Set by `--leader-elect`: reconcile only while holding this Lease.
    pub lease: Option<LeaseConfig>,
}

impl Operator {
    pub fn new(args: RunArgs) -> Self {
        let lease = args.leader_elect.then(|| {
            // Two replicas may share a Pod name only by accident; the suffix
            // keeps their identities apart anyway.
            let pod = std::env::var("POD_NAME").unwrap_or_else(|_| "etcd-steward".into());
            let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
            let mut config =
                LeaseConfig::new(&args.leader_election_namespace, &format!("{pod}_{suffix}"));
            config.pod = std::env::var("POD_NAMESPACE")
                .ok()
                .zip(std::env::var("POD_NAME").ok());
            config
        });
        Self {
            args,
            faults: Faults::new(),
            metrics: Arc::new(Metrics::default()),
            readiness: Arc::new(Readiness::default()),
            lease,
        }
    }

    /// The shared context, with the watch caches started.
    pub async fn context(&self, client: kube::Client) -> anyhow::Result<Arc<Context>> {
        let engine = PolicyEngine::new(self.args.engine_config())?;
        let etcd = EtcdClient::new(ClientConfig {
            deadline: Duration::from_millis(self.args.probe_deadline_ms),
            ..ClientConfig::default()
        });
        let etcd = Arc::new(FaultyEtcd::new(etcd, self.faults.clone()));
        Context::start(
            client,
            etcd,
            engine,
            self.args.operator_config(),
            &self.scope(),
            self.metrics.clone(),
        )
        .await
    }

    pub fn scope(&self) -> Scope {
        Scope {
            namespace: self.args.namespace.clone(),
        }
    }

    pub async fn run(
        self,
        client: kube::Client,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        // The watch caches fill before leadership is won, so a successor
        // starts reconciling from warm caches.
        let ctx = self.context(client.clone()).await?;
        self.readiness.caches_synced();
        match self.lease {
            None => {
                self.readiness.leader_known();
                self.metrics.set_leading(true);
                controller::run(ctx, shutdown).await
            }
            Some(lease) => {
                let work = controller::run(ctx, std::future::pending());
                let candidate = Candidate::new(client, lease);
                leader::run_as_leader(candidate, work, shutdown, &self.metrics, &self.readiness)
                    .await
            }
        }
    }
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    // The OCI client (reqwest) takes TLS from the process-wide provider;
    // kube's client brings its own, the same one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = kube::Client::try_default().await?;
    let operator = Operator::new(args);
    if !operator.args.metrics_addr.is_empty() {
        let addr: SocketAddr = operator.args.metrics_addr.parse()?;
        let listener = health::bind(addr).await?;
        let (metrics, readiness) = (operator.metrics.clone(), operator.readiness.clone());
        tokio::spawn(async move {
            // Reconciling matters more than metrics: say so and go on.
            if let Err(e) = health::serve(listener, metrics, readiness).await {
                tracing::error!(%addr, error = %e, "serving /metrics, /healthz and /readyz failed");
            }
        });
    }
    // Kubernetes stops a Pod with SIGTERM; a terminal sends SIGINT. Either
    // way the operator stops cleanly and releases its Lease, so a rollout
    // hands over at once instead of after the lease duration.
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let shutdown = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = sigterm.recv() => {}
        }
    };
    operator.run(client, shutdown).await
}

//! Wiring: the shared [`Context`], and the two kube-runtime Controllers
//! (EtcdCluster and EtcdMember) that call into [`crate::reconcile`] and
//! [`crate::member`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Client, ResourceExt};

use crate::api::{EtcdCluster, EtcdMember};
use crate::etcd::{EtcdApi, RpcError};
use crate::metrics::Metrics;
use crate::policy::{LoadedPolicy, PolicyEngine};

/// The field manager for everything the operator writes with server-side apply.
pub const FIELD_MANAGER: &str = "etcd-steward";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing status: {0}")]
    StatusWrite(#[source] kube::Error),
    #[error("kubernetes API: {0}")]
    Kube(#[source] kube::Error),
    #[error("building an object: {0}")]
    Build(#[source] crate::resources::BuildError),
    #[error("etcd: {0}")]
    Etcd(#[source] RpcError),
    #[error("{0}")]
    QuorumNotVerified(String),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::StatusWrite(_) => "status_write",
            Error::Kube(_) => "kube",
            Error::Build(_) => "build",
            Error::Etcd(_) => "etcd",
            Error::QuorumNotVerified(_) => "quorum_not_verified",
            Error::Finalizer(_) => "finalizer",
        }
    }
}

/// Tunables, set from the command line.
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// Repository of the etcd image; the tag is `v<spec.version>`.
    pub etcd_image: String,
    /// Deadline of every etcd RPC.
    pub probe_deadline: Duration,
    /// How often a steady, verified cluster is looked at again. A frozen etcd
    /// changes no Kubernetes object, so this is what bounds detection time.
    pub resync: Duration,
    /// The same while membership moves or the cluster is unverified.
    pub busy_resync: Duration,
    /// Raft entries a learner may trail the leader by and still be promoted.
    pub promote_max_lag: u64,
    /// Consecutive Pod failures after which a member is replaced (0: never).
    pub crash_loop_threshold: u32,
    /// Wait before recreating a Pod that failed again: this, doubling per
    /// consecutive failure, up to `max_recreate_backoff`. The first failure
    /// is recreated at once (the anchor's #368 outage must close fast).
    pub recreate_backoff: Duration,
    pub max_recreate_backoff: Duration,
}

impl Default for OperatorConfig {
    fn default() -> Self {
        Self {
            etcd_image: "quay.io/coreos/etcd".into(),
            probe_deadline: Duration::from_secs(2),
            resync: Duration::from_secs(2),
            busy_resync: Duration::from_secs(1),
            promote_max_lag: 32,
            crash_loop_threshold: 5,
            recreate_backoff: Duration::from_secs(1),
            max_recreate_backoff: Duration::from_secs(60),
        }
    }
}

/// The watch caches reconciles read from.
#[derive(Clone)]
pub struct Stores {
    pub members: Store<EtcdMember>,
    pub pods: Store<Pod>,
}

/// The status policies: the embedded default and those named by clusters.
pub struct Policies {
    engine: PolicyEngine,
    client: Client,
    settings_checked: Mutex<HashMap<(String, String), Result<(), String>>>,
}

impl Policies {
    pub fn new(engine: PolicyEngine, client: Client) -> Self {
        Self {
            engine,
            client,
            settings_checked: Mutex::default(),
        }
    }

    /// The cluster's policy: the embedded default, or the component stored
    /// under `policy.wasm` in the named ConfigMap of the cluster's namespace.
    pub async fn resolve(
        &self,
        cluster: &EtcdCluster,
        name: Option<&str>,
    ) -> Result<Arc<LoadedPolicy>, String> {
        let Some(name) = name else {
            return Ok(self.engine.default_policy());
        };
        let ns = cluster.namespace().unwrap_or_default();
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(self.client.clone(), &ns);
        let cm = api
            .get_opt(name)
            .await
            .map_err(|e| format!("reading ConfigMap {ns}/{name}: {e}"))?
            .ok_or_else(|| format!("ConfigMap {ns}/{name} (spec.statusPolicy.name) not found"))?;
        let key = crate::api::POLICY_CONFIGMAP_KEY;
        let bytes = cm
            .binary_data
            .as_ref()
            .and_then(|d| d.get(key))
            .ok_or_else(|| format!("ConfigMap {ns}/{name} has no binaryData key {key:?}"))?;
        self.engine
            .load(&bytes.0)
            .map_err(|e| format!("policy in ConfigMap {ns}/{name}: {e}"))
    }

    /// Settings are checked once per (policy, settings) pair, not on every
    /// evaluation.
    pub fn validate_settings(&self, policy: &LoadedPolicy, settings: &str) -> Result<(), String> {
        let key = (policy.digest.clone(), settings.to_owned());
        if let Some(known) = self.settings_checked.lock().expect("poisoned").get(&key) {
            return known.clone();
        }
        let result = policy
            .validate_settings(settings)
            .map_err(|e| e.to_string());
        self.settings_checked
            .lock()
            .expect("poisoned")
            .insert(key, result.clone());
        result
    }
}

/// Everything a reconcile needs. One per operator process.
pub struct Context {
    pub client: Client,
    pub etcd: Arc<dyn EtcdApi>,
    pub policies: Policies,
    pub recorder: Recorder,
    pub stores: Stores,
    pub config: OperatorConfig,
    pub metrics: Arc<Metrics>,
    action_errors: Mutex<HashMap<String, String>>,
    caches: Vec<tokio::task::JoinHandle<()>>,
}

impl Context {
    pub fn last_action_error(&self, cluster: &EtcdCluster) -> Option<String> {
        self.action_errors
            .lock()
            .expect("poisoned")
            .get(&cluster.uid().unwrap_or_default())
            .cloned()
    }

    pub fn record_action(&self, cluster: &EtcdCluster, error: Option<String>) {
        let key = cluster.uid().unwrap_or_default();
        let mut map = self.action_errors.lock().expect("poisoned");
        match error {
            Some(e) => map.insert(key, e),
            None => map.remove(&key),
        };
    }

    /// `<cluster>-<5 random lowercase alphanumerics>`, like generateName.
    pub fn new_member_name(&self, cluster: &EtcdCluster) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let raw = uuid::Uuid::new_v4();
        let suffix: String = raw
            .as_bytes()
            .iter()
            .take(5)
            .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
            .collect();
        format!("{}-{suffix}", cluster.name_any())
    }
}

fn error_policy<K>(_obj: Arc<K>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.count_error(err.metric_label());
    tracing::warn!(error = %err, "reconcile failed");
    Action::requeue(Duration::from_secs(2))
}

/// Where the operator runs: which namespace it watches (all when `None`).
#[derive(Clone, Debug, Default)]
pub struct Scope {
    pub namespace: Option<String>,
}

fn api_for<K>(client: &Client, scope: &Scope) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match &scope.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

impl Context {
    /// Builds the context and starts the watch caches it reads from; returns
    /// once they hold a first full list.
    pub async fn start(
        client: Client,
        etcd: Arc<dyn EtcdApi>,
        engine: PolicyEngine,
        config: OperatorConfig,
        scope: &Scope,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Arc<Context>> {
        let (members_store, members_writer) = reflector::store::<EtcdMember>();
        let (pods_store, pods_writer) = reflector::store::<Pod>();
        let members_cache = watcher(
            api_for::<EtcdMember>(&client, scope),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(members_writer)
        .for_each(|_| futures::future::ready(()));
        let pods_cache = watcher(api_for::<Pod>(&client, scope), managed())
            .default_backoff()
            .reflect(pods_writer)
            .for_each(|_| futures::future::ready(()));
        let caches = vec![tokio::spawn(members_cache), tokio::spawn(pods_cache)];
        members_store.wait_until_ready().await?;
        pods_store.wait_until_ready().await?;

        let reporter = Reporter {
            controller: "etcd-steward".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Ok(Arc::new(Context {
            recorder: Recorder::new(client.clone(), reporter),
            policies: Policies::new(engine, client.clone()),
            client,
            etcd,
            stores: Stores {
                members: members_store,
                pods: pods_store,
            },
            config,
            metrics,
            action_errors: Mutex::default(),
            caches,
        }))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        for task in &self.caches {
            task.abort();
        }
    }
}

fn managed() -> watcher::Config {
    watcher::Config::default().labels("app.kubernetes.io/managed-by=etcd-steward")
}

/// Runs both controllers on `ctx` until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    scope: &Scope,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let managed = managed();
    // Status writes must not retrigger the cluster's own reconcile: only
    // spec changes (generation) and owned objects do, plus the resync.
    let (clusters_store, clusters_writer) = reflector::store::<EtcdCluster>();
    let clusters = watcher(
        api_for::<EtcdCluster>(&client, scope),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(clusters_writer)
    .touched_objects()
    .predicate_filter(predicates::generation, Default::default());
    let members_ctl = Controller::new(
        api_for::<EtcdMember>(&client, scope),
        watcher::Config::default(),
    )
    .owns(api_for::<Pod>(&client, scope), managed.clone())
    .owns(
        api_for::<PersistentVolumeClaim>(&client, scope),
        managed.clone(),
    )
    .run(crate::member::reconcile_member, error_policy, ctx.clone())
    .for_each(|_| futures::future::ready(()));
    let cluster_ctl = Controller::for_stream(clusters, clusters_store)
        .owns(
            api_for::<EtcdMember>(&client, scope),
            watcher::Config::default(),
        )
        .owns(api_for::<Service>(&client, scope), managed.clone())
        .owns(
            api_for::<PodDisruptionBudget>(&client, scope),
            managed.clone(),
        )
        .watches(api_for::<Pod>(&client, scope), managed, |pod: Pod| {
            let cluster = pod.labels().get("app.kubernetes.io/instance")?.clone();
            Some(ObjectRef::new(&cluster).within(&pod.namespace()?))
        })
        .run(
            crate::reconcile::reconcile_cluster,
            error_policy,
            ctx.clone(),
        )
        .for_each(|_| futures::future::ready(()));

    // Dropping the controllers on shutdown cancels in-flight reconciles;
    // every step is idempotent and the next operator picks up from etcd.
    tokio::select! {
        _ = futures::future::join(members_ctl, cluster_ctl) => {}
        _ = shutdown => {}
    }
    Ok(())
}

//! What every reconcile shares: the [`Context`] (clients, watch caches,
//! policies, tunables), one per operator process, and where it watches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::api::{EtcdMember, EtcdStatusPolicy};
use crate::etcd::EtcdApi;
use crate::metrics::Metrics;
use crate::policy::{Policies, PolicyEngine};

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
    /// How often an unchanged, verified status is written just to move
    /// `lastVerifiedTime` forward. A change of verdict is written at once;
    /// this bounds the writes of a cluster at rest. Keep it at most half
    /// the policy's staleness window (the default policy's is 30 s).
    pub verified_refresh: Duration,
    /// How often an EtcdStatusPolicy is looked at with nothing changed
    /// (its cluster count, another try of a version that failed).
    pub policy_recheck: Duration,
    /// Consecutive Pod failures after which a member is replaced (0: never).
    pub crash_loop_threshold: u32,
    /// Wait before recreating a Pod that failed again: this, doubling per
    /// consecutive failure, up to `max_recreate_backoff`. The first failure
    /// is recreated at once (the anchor's #368 outage must close fast).
    pub recreate_backoff: Duration,
    pub max_recreate_backoff: Duration,
    /// Where EtcdStatusPolicy ConfigMaps and pull Secrets live: the
    /// operator's own namespace.
    pub policy_namespace: String,
}

impl Default for OperatorConfig {
    fn default() -> Self {
        Self {
            etcd_image: "quay.io/coreos/etcd".into(),
            probe_deadline: Duration::from_secs(2),
            resync: Duration::from_secs(2),
            busy_resync: Duration::from_secs(1),
            verified_refresh: Duration::from_secs(15),
            policy_recheck: Duration::from_secs(60),
            promote_max_lag: 32,
            crash_loop_threshold: 5,
            recreate_backoff: Duration::from_secs(1),
            max_recreate_backoff: Duration::from_secs(60),
            policy_namespace: "etcd-steward-system".into(),
        }
    }
}

/// The watch caches reconciles read from.
#[derive(Clone)]
pub struct Stores {
    pub members: Store<EtcdMember>,
    pub pods: Store<Pod>,
    /// The cluster's own children, to skip applying what is as desired.
    pub services: Store<Service>,
    pub pdbs: Store<PodDisruptionBudget>,
    /// Which EtcdStatusPolicies exist (cluster-scoped, all of them).
    pub status_policies: Store<EtcdStatusPolicy>,
}

/// A watch cache of `api`, its task pushed onto `tasks`.
fn cache<K>(
    api: Api<K>,
    config: watcher::Config,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Store<K>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store::<K>();
    let task = watcher(api, config)
        .default_backoff()
        .reflect(writer)
        .for_each(|_| futures::future::ready(()));
    tasks.push(tokio::spawn(task));
    store
}

/// Everything a reconcile needs. One per operator process.
pub struct Context {
    pub client: Client,
    pub etcd: Arc<dyn EtcdApi>,
    pub policies: Arc<Policies>,
    pub recorder: Recorder,
    pub stores: Stores,
    pub config: OperatorConfig,
    pub metrics: Arc<Metrics>,
    action_errors: Mutex<HashMap<String, String>>,
    /// When etcd last verified each cluster (by UID), exactly; the status
    /// shows it at most `verified_refresh` late.
    verified_at: Mutex<HashMap<String, jiff::Timestamp>>,
    /// The resourceVersion each child object had right after this process
    /// last applied it, with a digest of what was applied: a child whose
    /// cached copy still has that version is as desired (see
    /// [`Context::needs_apply`]).
    applied: Mutex<HashMap<String, (String, u64)>>,
    caches: Vec<tokio::task::JoinHandle<()>>,
}

impl Context {
    /// The error of the last action on `obj` (an EtcdCluster or an
    /// EtcdMember), which its next status shows.
    pub fn last_action_error(&self, obj: &impl ResourceExt) -> Option<String> {
        self.action_errors
            .lock()
            .expect("poisoned")
            .get(&obj.uid().unwrap_or_default())
            .cloned()
    }

    /// The exact time etcd last verified `cluster`, as this process saw it.
    pub fn verified_at(&self, cluster: &impl ResourceExt) -> Option<jiff::Timestamp> {
        let uid = cluster.uid()?;
        self.verified_at
            .lock()
            .expect("poisoned")
            .get(&uid)
            .copied()
    }

    pub fn record_verified(&self, cluster: &impl ResourceExt, at: jiff::Timestamp) {
        if let Some(uid) = cluster.uid() {
            self.verified_at.lock().expect("poisoned").insert(uid, at);
        }
    }

    /// Whether `desired` must be applied: unless this process applied the
    /// very same object and the cache's copy (`live_version`) is still the
    /// one that apply produced. Any other writer moves the version, so a
    /// changed or deleted child is applied again.
    pub fn needs_apply(
        &self,
        key: &str,
        desired: &impl serde::Serialize,
        live_version: Option<&str>,
    ) -> bool {
        let digest = digest(desired);
        let applied = self.applied.lock().expect("poisoned");
        !matches!(
            (applied.get(key), live_version),
            (Some((rv, d)), Some(live)) if rv == live && *d == digest
        )
    }

    /// Remembers what an apply of `desired` produced.
    pub fn record_apply(
        &self,
        key: &str,
        desired: &impl serde::Serialize,
        version: Option<String>,
    ) {
        let mut applied = self.applied.lock().expect("poisoned");
        match version {
            Some(rv) => applied.insert(key.to_owned(), (rv, digest(desired))),
            None => applied.remove(key),
        };
    }

    /// Remembers how the last action on `obj` ended (None: it succeeded).
    pub fn record_action(&self, obj: &impl ResourceExt, error: Option<String>) {
        let key = obj.uid().unwrap_or_default();
        let mut map = self.action_errors.lock().expect("poisoned");
        match error {
            Some(e) => map.insert(key, e),
            None => map.remove(&key),
        };
    }
}

/// Where the operator runs: which namespace it watches (all when `None`).
#[derive(Clone, Debug, Default)]
pub struct Scope {
    pub namespace: Option<String>,
}

/// The objects the operator created carry this label; only they are watched.
pub fn managed() -> watcher::Config {
    watcher::Config::default().labels("app.kubernetes.io/managed-by=etcd-steward")
}

pub fn api_for<K>(client: &Client, scope: &Scope) -> Api<K>
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
        let mut caches = Vec::new();
        let members = cache(
            api_for(&client, scope),
            watcher::Config::default(),
            &mut caches,
        );
        let pods = cache(api_for(&client, scope), managed(), &mut caches);
        let services = cache(api_for(&client, scope), managed(), &mut caches);
        let pdbs = cache(api_for(&client, scope), managed(), &mut caches);
        let status_policies = cache(
            Api::all(client.clone()),
            watcher::Config::default(),
            &mut caches,
        );
        members.wait_until_ready().await?;
        pods.wait_until_ready().await?;
        services.wait_until_ready().await?;
        pdbs.wait_until_ready().await?;
        status_policies.wait_until_ready().await?;

        let reporter = Reporter {
            controller: "etcd-steward".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Ok(Arc::new(Context {
            recorder: Recorder::new(client.clone(), reporter),
            policies: Arc::new(Policies::new(engine, client.clone())),
            client,
            etcd,
            stores: Stores {
                members,
                pods,
                services,
                pdbs,
                status_policies,
            },
            config,
            metrics,
            action_errors: Mutex::default(),
            verified_at: Mutex::default(),
            applied: Mutex::default(),
            caches,
        }))
    }

    /// A context with empty caches and no watchers, for unit tests of the
    /// stages: fill the caches through the returned writers. `client` is
    /// only called by the stages that write (status, act).
    pub fn for_tests(
        client: Client,
        etcd: Arc<dyn EtcdApi>,
        engine: PolicyEngine,
        config: OperatorConfig,
    ) -> (Arc<Context>, StoreWriters) {
        let (members, members_writer) = reflector::store::<EtcdMember>();
        let (pods, pods_writer) = reflector::store::<Pod>();
        let (services, services_writer) = reflector::store::<Service>();
        let (pdbs, pdbs_writer) = reflector::store::<PodDisruptionBudget>();
        let (status_policies, status_policies_writer) = reflector::store::<EtcdStatusPolicy>();
        let reporter = Reporter {
            controller: "etcd-steward-test".into(),
            instance: None,
        };
        let ctx = Context {
            recorder: Recorder::new(client.clone(), reporter),
            policies: Arc::new(Policies::new(engine, client.clone())),
            client,
            etcd,
            stores: Stores {
                members,
                pods,
                services,
                pdbs,
                status_policies,
            },
            config,
            metrics: Arc::default(),
            action_errors: Mutex::default(),
            verified_at: Mutex::default(),
            applied: Mutex::default(),
            caches: Vec::new(),
        };
        (
            Arc::new(ctx),
            StoreWriters {
                members: members_writer,
                pods: pods_writer,
                services: services_writer,
                pdbs: pdbs_writer,
                status_policies: status_policies_writer,
            },
        )
    }
}

/// The writing ends of a test context's caches.
pub struct StoreWriters {
    pub members: reflector::store::Writer<EtcdMember>,
    pub pods: reflector::store::Writer<Pod>,
    pub services: reflector::store::Writer<Service>,
    pub pdbs: reflector::store::Writer<PodDisruptionBudget>,
    pub status_policies: reflector::store::Writer<EtcdStatusPolicy>,
}

impl Drop for Context {
    fn drop(&mut self) {
        for task in &self.caches {
            task.abort();
        }
    }
}

/// A digest of an object's JSON, to tell whether a desired object changed.
fn digest(obj: &impl serde::Serialize) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(obj).unwrap_or_default().hash(&mut h);
    h.finish()
}

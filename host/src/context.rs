//! What every reconcile shares: the [`Context`] (clients, watch caches,
//! policies, tunables), one per operator process, and where it watches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::api::EtcdMember;
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
    /// The error of the last action on `obj` (an EtcdCluster or an
    /// EtcdMember), which its next status shows.
    pub fn last_action_error(&self, obj: &impl ResourceExt) -> Option<String> {
        self.action_errors
            .lock()
            .expect("poisoned")
            .get(&obj.uid().unwrap_or_default())
            .cloned()
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
        let reporter = Reporter {
            controller: "etcd-steward-test".into(),
            instance: None,
        };
        let ctx = Context {
            recorder: Recorder::new(client.clone(), reporter),
            policies: Policies::new(engine, client.clone()),
            client,
            etcd,
            stores: Stores { members, pods },
            config,
            metrics: Arc::default(),
            action_errors: Mutex::default(),
            caches: Vec::new(),
        };
        (
            Arc::new(ctx),
            StoreWriters {
                members: members_writer,
                pods: pods_writer,
            },
        )
    }
}

/// The writing ends of a test context's caches.
pub struct StoreWriters {
    pub members: reflector::store::Writer<EtcdMember>,
    pub pods: reflector::store::Writer<Pod>,
}

impl Drop for Context {
    fn drop(&mut self) {
        for task in &self.caches {
            task.abort();
        }
    }
}

//! What every reconcile shares: the [`Context`] (clients, watch caches,
//! policies, tunables), one per operator process, and where it watches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, ResourceExt};

use crate::etcd::EtcdApi;
use crate::metrics::Metrics;
use crate::policy::{Policies, PolicyEngine};
use crate::watch::{Sources, Watches, Writers};

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
    /// The operator's own image: a restored seed's Pod runs it to fetch the
    /// snapshot and install the restored data.
    pub operator_image: String,
    /// Attempts at one EtcdSnapshot before it is Failed.
    pub snapshot_attempts: u32,
    /// Wait after the first failed snapshot attempt; doubles per attempt.
    pub snapshot_backoff: Duration,
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
            operator_image: format!("etcd-steward:{}", env!("CARGO_PKG_VERSION")),
            snapshot_attempts: 5,
            snapshot_backoff: Duration::from_secs(5),
        }
    }
}

/// Everything a reconcile needs. One per operator process.
pub struct Context {
    pub client: Client,
    pub etcd: Arc<dyn EtcdApi>,
    pub policies: Arc<Policies>,
    pub recorder: Recorder,
    /// The one watch of each kind: the caches the stages read, and the
    /// controllers' triggers.
    pub watches: Watches,
    pub config: OperatorConfig,
    pub metrics: Arc<Metrics>,
    /// Each cluster's etcd credentials, as read and as etcd took them.
    pub auth: crate::auth::Registry,
    /// Each cluster's client certificate for etcd, as last read.
    pub tls: crate::tls::Registry,
    action_errors: Mutex<HashMap<String, String>>,
    /// When etcd last verified each cluster (by UID), exactly; the status
    /// shows it at most `verified_refresh` late.
    verified_at: Mutex<HashMap<String, jiff::Timestamp>>,
    /// The status this process last wrote for each cluster (by UID), until
    /// the watch cache shows it.
    written_status: Mutex<HashMap<String, crate::api::EtcdClusterStatus>>,
    /// The resourceVersion each child object had right after this process
    /// last applied it, with a digest of what was applied: a child whose
    /// cached copy still has that version is as desired (see
    /// [`Context::needs_apply`]).
    applied: Mutex<HashMap<String, (String, u64)>>,
    /// Defragmentations this process ran, by cluster UID and member name,
    /// until the status that shows them is written.
    defrags: Mutex<HashMap<String, HashMap<String, crate::api::LastDefrag>>>,
    /// Restore sources read and checked, by cluster UID, with when: a
    /// verified one is not read again; a failure is retried after
    /// [`RESTORE_RECHECK`].
    restore_checks: Mutex<HashMap<String, RestoreCheck>>,
}

type RestoreCheck = (
    jiff::Timestamp,
    Result<crate::api::MemberRestore, crate::snapshot::Problem>,
);

/// How long a failed check of a restore source stands before the object
/// is read again.
pub const RESTORE_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

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

    /// The defragmentations of `cluster`'s members this process ran.
    pub fn defrags(&self, cluster: &impl ResourceExt) -> HashMap<String, crate::api::LastDefrag> {
        let uid = cluster.uid().unwrap_or_default();
        self.defrags
            .lock()
            .expect("poisoned")
            .get(&uid)
            .cloned()
            .unwrap_or_default()
    }

    pub fn record_defrag(
        &self,
        cluster: &impl ResourceExt,
        member: &str,
        done: crate::api::LastDefrag,
    ) {
        let uid = cluster.uid().unwrap_or_default();
        self.defrags
            .lock()
            .expect("poisoned")
            .entry(uid)
            .or_default()
            .insert(member.to_owned(), done);
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

    /// `cluster` with the status this process last wrote for it, when the
    /// watch cache does not show that write yet. The operator is the only
    /// writer of the status, and a status is written whole: derived from a
    /// cache that lags, it would take back what the last reconcile wrote
    /// (a recovery's record, an unlatched cluster ID).
    pub fn with_written_status(
        &self,
        cluster: Arc<crate::api::EtcdCluster>,
    ) -> Arc<crate::api::EtcdCluster> {
        let Some(uid) = cluster.uid() else {
            return cluster;
        };
        let mut map = self.written_status.lock().expect("poisoned");
        match map.get(&uid) {
            Some(written) if cluster.status.as_ref() != Some(written) => {
                let mut newer = (*cluster).clone();
                newer.status = Some(written.clone());
                Arc::new(newer)
            }
            Some(_) => {
                map.remove(&uid);
                cluster
            }
            None => cluster,
        }
    }

    pub fn record_written_status(
        &self,
        cluster: &impl ResourceExt,
        stored: Option<crate::api::EtcdClusterStatus>,
    ) {
        if let (Some(uid), Some(stored)) = (cluster.uid(), stored) {
            self.written_status
                .lock()
                .expect("poisoned")
                .insert(uid, stored);
        }
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

    /// An action on `obj` (an EtcdCluster or an EtcdMember) failed: log it,
    /// publish a Warning Event, and remember it for the next status
    /// (`status.lastActionError`). The one way either controller reports a
    /// failed action.
    pub async fn record_action_failure<K>(&self, obj: &K, err: &crate::error::ActError)
    where
        K: kube::Resource<DynamicType = ()>,
    {
        let message = err.to_string();
        tracing::warn!(error = %message, "action failed");
        self.publish_event(
            obj,
            kube::runtime::events::EventType::Warning,
            "ActionFailed",
            &message,
            "Reconcile",
        )
        .await;
        self.record_action(obj, Some(message));
    }

    /// Publishes an Event about `obj`, its note cut to what a condition
    /// message may hold. A failed publish is logged, never retried: the
    /// status written before it says the same.
    pub async fn publish_event<K>(
        &self,
        obj: &K,
        type_: kube::runtime::events::EventType,
        reason: &str,
        note: &str,
        action: &str,
    ) where
        K: kube::Resource<DynamicType = ()>,
    {
        let event = kube::runtime::events::Event {
            type_,
            reason: reason.into(),
            note: Some(crate::text::truncate(
                note,
                crate::conditions::MAX_MESSAGE_BYTES,
            )),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &obj.object_ref(&())).await {
            tracing::debug!(error = %e, "publishing an event failed");
        }
    }

    /// Forgets what this process remembers of a deleted object: its last
    /// action's error and verification time (by UID), and what was applied
    /// to it (by [`applied_key`]). Without this the maps would grow with
    /// every cluster, member and child ever deleted.
    pub fn forget<K>(&self, obj: &K)
    where
        K: kube::Resource<DynamicType = ()>,
    {
        if let Some(uid) = obj.uid() {
            self.action_errors.lock().expect("poisoned").remove(&uid);
            self.verified_at.lock().expect("poisoned").remove(&uid);
            self.written_status.lock().expect("poisoned").remove(&uid);
            self.defrags.lock().expect("poisoned").remove(&uid);
            self.restore_checks.lock().expect("poisoned").remove(&uid);
            self.auth.forget(&uid);
            self.tls.forget(&uid);
        }
        if K::kind(&()) == "EtcdCluster" {
            let domain = crate::resources::cluster_domain(
                &obj.meta().name.clone().unwrap_or_default(),
                &obj.meta().namespace.clone().unwrap_or_default(),
            );
            self.etcd.set_credentials(&domain, None);
            self.etcd.set_tls(&domain, None);
        }
        self.applied
            .lock()
            .expect("poisoned")
            .remove(&applied_key(obj));
    }

    /// The standing outcome of checking cluster `uid`'s restore source.
    pub fn restore_checked(
        &self,
        uid: &str,
    ) -> Option<Result<crate::api::MemberRestore, crate::snapshot::Problem>> {
        let map = self.restore_checks.lock().expect("poisoned");
        let (at, outcome) = map.get(uid)?;
        let fresh = jiff::Timestamp::now().duration_since(*at).unsigned_abs() < RESTORE_RECHECK;
        // A verified source, and a fatal refusal (the source is immutable:
        // a mismatching checksum stays one), are not read again.
        let stands = match outcome {
            Ok(_) => true,
            Err(p) => !p.retry || fresh,
        };
        stands.then(|| outcome.clone())
    }

    pub fn record_restore_check(
        &self,
        uid: &str,
        outcome: &Result<crate::api::MemberRestore, crate::snapshot::Problem>,
    ) {
        self.restore_checks
            .lock()
            .expect("poisoned")
            .insert(uid.to_owned(), (jiff::Timestamp::now(), outcome.clone()));
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

impl Context {
    /// Builds the context and starts the watches it reads from; returns
    /// once their caches hold a first full list.
    pub async fn start(
        client: Client,
        etcd: Arc<dyn EtcdApi>,
        engine: PolicyEngine,
        config: OperatorConfig,
        scope: &Scope,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Arc<Context>> {
        let watches = Watches::start(&Sources {
            client: client.clone(),
            namespace: scope.namespace.clone(),
            operator_namespace: config.policy_namespace.clone(),
        });
        watches.wait_until_ready().await?;
        let reporter = Reporter {
            controller: "etcd-steward".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Ok(Arc::new(Context::new(
            client, etcd, engine, config, metrics, reporter, watches,
        )))
    }

    /// A context with empty caches and no watches, for unit tests of the
    /// stages: fill the caches through the returned writers. `client` is
    /// only called by the stages that write (status, act).
    pub fn for_tests(
        client: Client,
        etcd: Arc<dyn EtcdApi>,
        engine: PolicyEngine,
        config: OperatorConfig,
    ) -> (Arc<Context>, Writers) {
        let (watches, writers) = Watches::for_tests();
        let reporter = Reporter {
            controller: "etcd-steward-test".into(),
            instance: None,
        };
        let ctx = Context::new(
            client,
            etcd,
            engine,
            config,
            Arc::default(),
            reporter,
            watches,
        );
        (Arc::new(ctx), writers)
    }

    fn new(
        client: Client,
        etcd: Arc<dyn EtcdApi>,
        engine: PolicyEngine,
        config: OperatorConfig,
        metrics: Arc<Metrics>,
        reporter: Reporter,
        watches: Watches,
    ) -> Context {
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            policies: Arc::new(Policies::new(engine, client.clone())),
            client,
            etcd,
            watches,
            config,
            metrics,
            auth: Default::default(),
            tls: Default::default(),
            action_errors: Mutex::default(),
            verified_at: Mutex::default(),
            written_status: Mutex::default(),
            applied: Mutex::default(),
            defrags: Mutex::default(),
            restore_checks: Mutex::default(),
        }
    }
}

/// The key [`Context::needs_apply`] and [`Context::record_apply`] know a
/// child object by: its kind, namespace and name.
pub fn applied_key<K: kube::Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// A digest of an object's JSON, to tell whether a desired object changed.
fn digest(obj: &impl serde::Serialize) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(obj).unwrap_or_default().hash(&mut h);
    h.finish()
}

//! Leader election on a `coordination.k8s.io/v1` Lease, so that several
//! operator replicas can run and exactly one of them reconciles.
//!
//! The algorithm is client-go's `leaderelection`:
//! - a candidate takes the Lease when nobody holds it, or when the record
//!   (holder and renew time) has not changed for a whole lease duration
//!   *as measured by the candidate's own clock* — renew times written by
//!   another machine are compared, never trusted, so clock skew between
//!   nodes cannot hand the Lease to two holders;
//! - every write is a replace carrying the resourceVersion it read, so two
//!   candidates racing for an expired Lease cannot both win;
//! - the leader renews every retry period and gives up (its controllers
//!   stop, the process exits and is restarted) when no renewal succeeded
//!   for the renew deadline, which is shorter than the lease duration: it
//!   stops acting before anyone else may start;
//! - on a graceful shutdown the leader releases the Lease, so a successor
//!   need not wait out the duration;
//! - in a Pod, the leader gives its own Pod a high
//!   `controller.kubernetes.io/pod-deletion-cost`, so a rollout's
//!   ReplicaSet scale-down removes the standbys first and the leader last:
//!   leadership moves once per rollout, to a new Pod, rather than to an
//!   old standby first. A replica clears the mark before it campaigns.
//!   Best effort, bounded by the retry period: renewing never waits for
//!   the mark, and a failed patch is logged.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::time::Instant;

use crate::health::Readiness;
use crate::metrics::Metrics;

/// Where the Lease lives and how long its terms are.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's identity (the Pod name, plus a random suffix).
    pub identity: String,
    /// How long a silent holder keeps the Lease.
    pub lease_duration: Duration,
    /// The leader gives up when it could not renew for this long.
    pub renew_deadline: Duration,
    /// How often the leader renews and a candidate retries.
    pub retry_period: Duration,
    /// This replica's own Pod (namespace, name), when it runs in one
    /// (`POD_NAMESPACE`, `POD_NAME`): marked with [`LEADER_DELETION_COST`].
    pub pod: Option<(String, String)>,
}

/// The `controller.kubernetes.io/pod-deletion-cost` the leader's Pod gets;
/// a standby's is unset (0), so the ReplicaSet deletes standbys first.
pub const LEADER_DELETION_COST: &str = "1000";

impl LeaseConfig {
    /// client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retries.
    pub fn new(namespace: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: "etcd-steward".to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            pod: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("leadership lost: the Lease {0} could not be renewed within the renew deadline")]
    Lost(String),
}

/// One candidate for the Lease.
pub struct Candidate {
    api: Api<Lease>,
    client: kube::Client,
    config: LeaseConfig,
    /// The last Lease record seen and when (by our clock) it last changed.
    observed: Option<(Record, Instant)>,
}

/// What identifies one term of a holder: it changes on every renewal.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    renewed: Option<MicroTime>,
}

impl Record {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        Self {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            renewed: spec.and_then(|s| s.renew_time.clone()),
        }
    }
}

impl Candidate {
    pub fn new(client: kube::Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client.clone(), &config.namespace),
            client,
            config,
            observed: None,
        }
    }

    /// Sets this replica's Pod as the last to delete in a scale-down
    /// (`leading`), or clears that mark (a replica starts as a standby: a
    /// container restarted in the leader's old Pod must not keep it).
    /// Bounded by the retry period; a failure is only logged. None outside
    /// a Pod.
    pub fn pod_cost(&self, leading: bool) -> Option<impl Future<Output = ()> + Send + 'static> {
        let (namespace, name) = self.config.pod.clone()?;
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), &namespace);
        let cost = leading.then_some(LEADER_DELETION_COST);
        let patch = serde_json::json!({"metadata": {"annotations": {
            "controller.kubernetes.io/pod-deletion-cost": cost
        }}});
        let deadline = self.config.retry_period;
        Some(async move {
            let patched = tokio::time::timeout(
                deadline,
                pods.patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                ),
            )
            .await;
            match patched {
                Ok(Ok(_)) => {}
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, leading, "setting this Pod's deletion cost failed")
                }
                Err(_) => tracing::warn!(leading, "setting this Pod's deletion cost timed out"),
            }
        })
    }

    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// One attempt to take or renew the Lease. `Ok(true)`: we hold it now.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now = Instant::now();
        let me = self.config.identity.clone();
        let Some(current) = self.api.get_opt(&self.config.name).await? else {
            let lease = self.lease(None, 0);
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observed = Some((Record::of(&created), now));
                    Ok(true)
                }
                // Another candidate created it first.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let record = Record::of(&current);
        if self
            .observed
            .as_ref()
            .is_none_or(|(seen, _)| *seen != record)
        {
            self.observed = Some((record.clone(), now));
        }
        let held_by_me = record.holder.as_deref() == Some(me.as_str());
        let changed_at = self.observed.as_ref().map_or(now, |(_, at)| *at);
        let expired = now.duration_since(changed_at) >= self.config.lease_duration;
        if !(held_by_me || record.holder.is_none() || expired) {
            return Ok(false);
        }
        let spec = current.spec.clone().unwrap_or_default();
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!held_by_me);
        let mut next = self.lease(Some(&current), transitions);
        if held_by_me && let Some(s) = next.spec.as_mut() {
            s.acquire_time = spec.acquire_time;
        }
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &next)
            .await
        {
            Ok(written) => {
                self.observed = Some((Record::of(&written), now));
                Ok(true)
            }
            // Someone else wrote it since we read it: not ours this round.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up, so a successor need not wait out its duration.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(current) = self.api.get_opt(&self.config.name).await? else {
            return Ok(());
        };
        if Record::of(&current).holder.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        let mut released = current.clone();
        released.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            ..current.spec.clone().unwrap_or_default()
        });
        self.api
            .replace(&self.config.name, &PostParams::default(), &released)
            .await?;
        Ok(())
    }

    /// Retries until this candidate holds the Lease. `readiness` learns
    /// that leadership is known at the first Lease read that succeeds,
    /// whoever holds it.
    pub async fn acquire(&mut self, readiness: &Readiness) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    readiness.leader_known();
                    return;
                }
                Ok(false) => readiness.leader_known(),
                Err(err) => tracing::warn!(error = %err, "reading the leader Lease failed"),
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Renews every retry period; returns when leadership is lost.
    pub async fn keep_renewing(&mut self) -> LeaderError {
        let mut last_renewed = Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            // A hung API call must not carry the leader past its deadline.
            let left = self
                .config
                .renew_deadline
                .saturating_sub(last_renewed.elapsed());
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => last_renewed = Instant::now(),
                Ok(Ok(false)) => return LeaderError::Lost(self.lease_ref()),
                Ok(Err(err)) => tracing::warn!(error = %err, "renewing the leader Lease failed"),
                Err(_) => tracing::warn!("renewing the leader Lease timed out"),
            }
            if last_renewed.elapsed() >= self.config.renew_deadline {
                return LeaderError::Lost(self.lease_ref());
            }
        }
    }

    fn lease_ref(&self) -> String {
        format!("{}/{}", self.config.namespace, self.config.name)
    }

    fn lease(&self, current: Option<&Lease>, transitions: i32) -> Lease {
        let now = Some(MicroTime(jiff::Timestamp::now()));
        Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                resource_version: current.and_then(|c| c.metadata.resource_version.clone()),
                ..current.map(|c| c.metadata.clone()).unwrap_or_default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(self.config.lease_duration.as_secs().max(1) as i32),
                acquire_time: now.clone(),
                renew_time: now,
                lease_transitions: Some(transitions),
                ..Default::default()
            }),
        }
    }
}

/// Runs `work` only while holding the Lease. Returns when `work` ends, when
/// `shutdown` resolves (releasing the Lease), or with an error when
/// leadership is lost (the caller exits; a restarted replica campaigns
/// again).
pub async fn run_as_leader<W, S>(
    mut candidate: Candidate,
    work: W,
    shutdown: S,
    metrics: &Metrics,
    readiness: &Readiness,
) -> anyhow::Result<()>
where
    W: Future<Output = anyhow::Result<()>>,
    S: Future<Output = ()>,
{
    tokio::pin!(shutdown);
    tracing::info!(identity = candidate.identity(), "waiting to lead");
    // Cleared before campaigning, so it cannot land after a win's mark.
    if let Some(clear) = candidate.pod_cost(false) {
        clear.await;
    }
    tokio::select! {
        () = candidate.acquire(readiness) => {}
        () = &mut shutdown => return Ok(()),
    }
    tracing::info!(identity = candidate.identity(), "leading");
    metrics.set_leading(true);
    // In the background: renewing the Lease never waits for it.
    if let Some(mark) = candidate.pod_cost(true) {
        tokio::spawn(mark);
    }
    let outcome = tokio::select! {
        done = work => done,
        lost = candidate.keep_renewing() => {
            metrics.set_leading(false);
            return Err(lost.into());
        }
        () = &mut shutdown => Ok(()),
    };
    metrics.set_leading(false);
    if let Err(err) = candidate.release().await {
        tracing::warn!(error = %err, "releasing the leader Lease failed");
    }
    outcome
}

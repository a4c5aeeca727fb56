//! The EtcdSnapshot controller: one snapshot of a cluster, streamed by the
//! operator itself from a member in quorum to S3, then read back.
//!
//! The same order as the other reconciles:
//!
//! ```text
//! observe  ->  write status  ->  act  ->  write status
//! ```
//!
//! - [`observe`] finds the source and the destination, or the [`Problem`]
//!   that stops this attempt. The source is the leader of a quorum the
//!   host verified itself, by the same probe and rule as the cluster's
//!   status ([`crate::facts::quorum`]); no snapshot is taken without one.
//! - The status is written before streaming (phase `Started`), and again
//!   with the outcome; a failure of the upload never skips the second write.
//! - An attempt that does not complete counts against `--snapshot-attempts`
//!   and is retried with backoff; the last one makes the phase `Failed`
//!   (`Stalled=True`, which kstatus reads as Failed).
//! - `Complete` means read back: the object's size and sha256 matched what
//!   was streamed, and etcd's own trailing sha256 matched the stream
//!   ([`stream`]). Until then `Verified` is False.
//!
//! Why the operator streams it rather than a Job: the quorum check and the
//! stream use the same etcd client and the same verified facts at the same
//! moment; no image, scheduling or Pod has to work for a backup to be
//! taken; and memory stays bounded ([`store::PARTS_IN_FLIGHT`] parts).

pub mod problem;
pub mod store;
pub mod stream;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType as KubeEventType;
use kube::runtime::reflector::ObjectRef;
use steward_policy_sdk::{self as sdk, Condition, ConditionStatus};

use crate::api::{
    EtcdSnapshot, EtcdSnapshotStatus, SnapshotArtifact, SnapshotPhase, write_whole_status,
};
use crate::context::Context;
use crate::error::Error;
use crate::facts::quorum;
use crate::facts::{ProbeTarget, cluster_members, probe_cluster};
use crate::metrics::ClusterLabels;
pub use problem::{Problem, reason};
use store::{Credentials, Destination};

/// Where this attempt streams from and to.
pub struct Source {
    pub member: String,
    pub endpoint: String,
    pub version: String,
    pub destination: Destination,
}

/// What one reconcile found.
pub struct Observed {
    pub snapshot: Arc<EtcdSnapshot>,
    pub source: Result<Source, Problem>,
}

/// What a completed attempt produced.
struct Taken {
    artifact: SnapshotArtifact,
    revision: i64,
    took: Duration,
}

pub async fn reconcile_snapshot(
    snap: Arc<EtcdSnapshot>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let prev = snap.status.clone().unwrap_or_default();
    if matches!(
        prev.phase,
        Some(SnapshotPhase::Complete | SnapshotPhase::Failed)
    ) {
        return Ok(Action::await_change());
    }
    if prev.phase == Some(SnapshotPhase::Started) {
        // No reconcile of this object runs while another does, and each
        // one that writes Started writes the outcome before it returns: a
        // Started status on entry is an attempt the operator stopped in.
        let cut = Problem::retry(
            reason::INTERRUPTED,
            format!(
                "attempt {} was cut off before it finished (the operator stopped); its upload was never completed",
                prev.attempts
            ),
        );
        return fail(&snap, &cut, &ctx).await;
    }
    let observed = observe(snap, &ctx).await;
    let source = match observed.source {
        Ok(source) => source,
        Err(problem) => return fail(&observed.snapshot, &problem, &ctx).await,
    };
    let snap = observed.snapshot;
    let started = started_status(&snap, &source);
    write(&snap, &started, &ctx).await?;

    match take(&snap, &source, &ctx).await {
        Ok(taken) => complete(&snap, started, &source, taken, &ctx).await,
        Err(problem) => {
            let mut snap = (*snap).clone();
            snap.status = Some(started);
            fail(&snap, &problem, &ctx).await
        }
    }
}

/// The cluster, the credentials and a verified quorum's leader.
pub async fn observe(snapshot: Arc<EtcdSnapshot>, ctx: &Context) -> Observed {
    let source = find_source(&snapshot, ctx).await;
    Observed { snapshot, source }
}

async fn find_source(snap: &EtcdSnapshot, ctx: &Context) -> Result<Source, Problem> {
    let ns = snap.namespace().unwrap_or_default();
    let cluster_name = &snap.spec.cluster_ref.name;
    let cluster = ctx
        .watches
        .clusters
        .store()
        .get(&ObjectRef::new(cluster_name).within(&ns))
        .ok_or_else(|| {
            Problem::retry(
                reason::CLUSTER_NOT_FOUND,
                format!("EtcdCluster {ns}/{cluster_name} does not exist"),
            )
        })?;
    let location = snap.spec.destination.s3.as_ref().ok_or_else(|| {
        Problem::fatal(
            reason::INVALID_SPEC,
            "spec.destination.s3 is not set (destination.pvc is not implemented)",
        )
    })?;
    let credentials = credentials(ctx, &ns, location).await?;
    let destination = Destination::new(location, &snap.name_any(), &credentials)?;

    let targets: Vec<ProbeTarget> = cluster_members(ctx, &cluster)
        .into_iter()
        .filter(|m| !m.spec.dormant)
        .map(|m| ProbeTarget {
            endpoint: crate::resources::member_client_url(&m.name_any(), cluster_name, &ns),
            member: m.name_any(),
        })
        .collect();
    let report = probe_cluster(ctx.etcd.as_ref(), &targets, ctx.config.probe_deadline).await;
    let quorum = quorum::confirmed(&report).map_err(|why| {
        Problem::retry(
            reason::QUORUM_UNVERIFIED,
            format!("no snapshot is taken without a quorum the operator verified: {why}"),
        )
    })?;
    let leader = quorum.leader.ok_or_else(|| {
        Problem::retry(
            reason::QUORUM_UNVERIFIED,
            "the verified quorum names no leader",
        )
    })?;
    let (member, endpoint, version) = report
        .endpoints
        .iter()
        .find_map(|e| match &e.outcome {
            sdk::ProbeOutcome::Answered(s) if s.member_id == leader => {
                Some((e.member.clone(), e.endpoint.clone(), s.version.clone()))
            }
            _ => None,
        })
        .ok_or_else(|| {
            Problem::retry(
                reason::QUORUM_UNVERIFIED,
                format!("the leader {leader:x} did not answer this probe"),
            )
        })?;
    Ok(Source {
        member,
        endpoint,
        version,
        destination,
    })
}

/// The access key pair `location` names, read by name (no list or watch).
pub async fn credentials(
    ctx: &Context,
    ns: &str,
    location: &crate::api::S3Location,
) -> Result<Credentials, Problem> {
    let secret_name = &location.credentials_secret_ref.name;
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(secret_name)
        .await
        .map_err(|e| {
            Problem::retry(
                reason::CREDENTIALS_NOT_FOUND,
                format!("reading Secret {ns}/{secret_name}: {e}"),
            )
        })?
        .ok_or_else(|| {
            Problem::retry(
                reason::CREDENTIALS_NOT_FOUND,
                format!(
                    "Secret {ns}/{secret_name} (destination.s3.credentialsSecretRef) does not exist"
                ),
            )
        })?;
    Credentials::from_secret(&secret)
}

/// Streams, uploads and reads back.
async fn take(snap: &EtcdSnapshot, source: &Source, ctx: &Context) -> Result<Taken, Problem> {
    let begun = Instant::now();
    let uid = snap.uid().unwrap_or_default();
    let dest = &source.destination;
    dest.check_not_foreign(&uid).await?;
    let stream = ctx.etcd.snapshot(&source.endpoint).await.map_err(|e| {
        Problem::retry(
            reason::SNAPSHOT_STREAM_FAILED,
            format!(
                "opening the snapshot stream of member {}: {e}",
                source.member
            ),
        )
    })?;
    let written = dest.upload(stream.chunks, &uid).await?;
    dest.read_back(&written, &uid).await?;
    Ok(Taken {
        artifact: SnapshotArtifact {
            uri: dest.uri.clone(),
            size_bytes: i64::try_from(written.size).unwrap_or(i64::MAX),
            checksum: format!("sha256:{}", written.sha256),
        },
        revision: stream.revision,
        took: begun.elapsed(),
    })
}

fn started_status(snap: &EtcdSnapshot, source: &Source) -> EtcdSnapshotStatus {
    let prev = snap.status.clone().unwrap_or_default();
    let attempt = prev.attempts + 1;
    let desired = [
        cond(
            READY,
            ConditionStatus::False,
            reason::STARTED,
            format!(
                "attempt {attempt}: streaming from member {} to {}",
                source.member, source.destination.uri
            ),
        ),
        not_verified(),
        cond(
            RECONCILING,
            ConditionStatus::True,
            reason::STARTED,
            format!("attempt {attempt} is streaming"),
        ),
        cond(
            STALLED,
            ConditionStatus::False,
            reason::STARTED,
            String::new(),
        ),
    ];
    EtcdSnapshotStatus {
        phase: Some(SnapshotPhase::Started),
        attempts: attempt,
        start_time: prev.start_time.clone().or_else(|| Some(now())),
        member: Some(source.member.clone()),
        etcd_version: Some(source.version.clone()).filter(|v| !v.is_empty()),
        conditions: merged(snap, &prev, &desired),
        observed_generation: snap.metadata.generation,
        ..prev
    }
}

async fn complete(
    snap: &EtcdSnapshot,
    started: EtcdSnapshotStatus,
    source: &Source,
    taken: Taken,
    ctx: &Context,
) -> Result<Action, Error> {
    let message = format!(
        "{} ({} bytes, {}) taken from member {} at revision {}",
        taken.artifact.uri,
        taken.artifact.size_bytes,
        taken.artifact.checksum,
        source.member,
        taken.revision
    );
    let desired = [
        cond(
            READY,
            ConditionStatus::True,
            reason::COMPLETE,
            message.clone(),
        ),
        cond(
            VERIFIED,
            ConditionStatus::True,
            reason::READ_BACK,
            "read back whole: its size and sha256 match the stream, whose trailing sha256 (etcd's own) matched its bytes"
                .into(),
        ),
        cond(
            RECONCILING,
            ConditionStatus::False,
            reason::COMPLETE,
            String::new(),
        ),
        cond(
            STALLED,
            ConditionStatus::False,
            reason::COMPLETE,
            String::new(),
        ),
    ];
    let status = EtcdSnapshotStatus {
        phase: Some(SnapshotPhase::Complete),
        artifact: Some(taken.artifact.clone()),
        revision: Some(taken.revision),
        completion_time: Some(now()),
        conditions: merged(snap, &started, &desired),
        ..started
    };
    write(snap, &status, ctx).await?;
    ctx.metrics.observe_snapshot(
        &cluster_labels(snap),
        jiff::Timestamp::now().as_millisecond() as f64 / 1000.0,
        taken.took,
        taken.artifact.size_bytes.max(0) as u64,
    );
    event(snap, KubeEventType::Normal, reason::COMPLETE, &message, ctx).await;
    Ok(Action::await_change())
}

/// Records a failed attempt: Pending with a backoff while attempts remain,
/// else Failed.
async fn fail(snap: &EtcdSnapshot, problem: &Problem, ctx: &Context) -> Result<Action, Error> {
    let prev = snap.status.clone().unwrap_or_default();
    // An attempt that got as far as Started was counted when it started.
    let attempts = if prev.phase == Some(SnapshotPhase::Started) {
        prev.attempts
    } else {
        prev.attempts + 1
    };
    let last = !problem.retry || attempts >= ctx.config.snapshot_attempts;
    let message = if last && problem.retry {
        format!(
            "attempt {attempts} of {} failed, no more attempts: {}",
            ctx.config.snapshot_attempts, problem.message
        )
    } else if last {
        problem.message.clone()
    } else {
        format!(
            "attempt {attempts} of {} failed, retrying: {}",
            ctx.config.snapshot_attempts, problem.message
        )
    };
    let desired = [
        cond(
            READY,
            ConditionStatus::False,
            problem.reason,
            message.clone(),
        ),
        not_verified(),
        cond(
            RECONCILING,
            if last {
                ConditionStatus::False
            } else {
                ConditionStatus::True
            },
            problem.reason,
            if last { String::new() } else { message.clone() },
        ),
        cond(
            STALLED,
            if last {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            },
            problem.reason,
            if last { message.clone() } else { String::new() },
        ),
    ];
    let status = EtcdSnapshotStatus {
        phase: Some(if last {
            SnapshotPhase::Failed
        } else {
            SnapshotPhase::Pending
        }),
        attempts,
        completion_time: last.then(now),
        observed_generation: snap.metadata.generation,
        conditions: merged(snap, &prev, &desired),
        ..prev.clone()
    };
    write(snap, &status, ctx).await?;
    if last {
        discard_object(snap, ctx).await;
    }
    ctx.metrics
        .count_snapshot_failure(&cluster_labels(snap), problem.reason);
    event(snap, KubeEventType::Warning, problem.reason, &message, ctx).await;
    Ok(if last {
        Action::await_change()
    } else {
        Action::requeue(backoff(ctx.config.snapshot_backoff, attempts))
    })
}

/// Deletes what a failed snapshot may have uploaded (an attempt that failed
/// its read-back, or was cut off after completing): a Failed snapshot's
/// object is nobody's backup, and retention only ever looks at Complete
/// ones. Only an object whose metadata names this snapshot is deleted.
async fn discard_object(snap: &EtcdSnapshot, ctx: &Context) {
    let Some(location) = snap.spec.destination.s3.as_ref() else {
        return;
    };
    let ns = snap.namespace().unwrap_or_default();
    let Ok(credentials) = credentials(ctx, &ns, location).await else {
        return;
    };
    if let Ok(dest) = Destination::new(location, &snap.name_any(), &credentials)
        && let Err(p) = dest
            .delete_if_written_by(&snap.uid().unwrap_or_default())
            .await
    {
        tracing::warn!(snapshot = %snap.name_any(), reason = p.reason, message = %p.message, "a failed snapshot's object could not be deleted");
    }
}

/// The wait after `attempts` failed attempts: doubling, at most 5 minutes.
pub fn backoff(first: Duration, attempts: u32) -> Duration {
    first
        .saturating_mul(1 << attempts.saturating_sub(1).min(10))
        .min(Duration::from_secs(300))
}

const READY: &str = "Ready";
const VERIFIED: &str = "Verified";
const RECONCILING: &str = "Reconciling";
const STALLED: &str = "Stalled";

fn cond(type_: &str, status: ConditionStatus, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message,
    }
}

fn not_verified() -> Condition {
    cond(
        VERIFIED,
        ConditionStatus::False,
        reason::NOT_VERIFIED,
        "not read back yet".into(),
    )
}

fn merged(
    snap: &EtcdSnapshot,
    prev: &EtcdSnapshotStatus,
    desired: &[Condition],
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    crate::conditions::merge(
        &prev.conditions,
        desired,
        snap.metadata.generation.unwrap_or_default(),
        jiff::Timestamp::now(),
    )
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

fn cluster_labels(snap: &EtcdSnapshot) -> ClusterLabels {
    ClusterLabels {
        namespace: snap.namespace().unwrap_or_default(),
        name: snap.spec.cluster_ref.name.clone(),
    }
}

async fn write(
    snap: &EtcdSnapshot,
    status: &EtcdSnapshotStatus,
    ctx: &Context,
) -> Result<(), Error> {
    let api: Api<EtcdSnapshot> =
        Api::namespaced(ctx.client.clone(), &snap.namespace().unwrap_or_default());
    write_whole_status(&api, &snap.name_any(), status)
        .await
        .map_err(Error::StatusWrite)?;
    Ok(())
}

/// A failed publish is logged, never retried: the status already says it.
async fn event(snap: &EtcdSnapshot, type_: KubeEventType, reason: &str, note: &str, ctx: &Context) {
    ctx.publish_event(snap, type_, reason, note, "TakeSnapshot")
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_back_off_doubling_to_five_minutes() {
        let first = Duration::from_secs(5);
        assert_eq!(backoff(first, 1), Duration::from_secs(5));
        assert_eq!(backoff(first, 2), Duration::from_secs(10));
        assert_eq!(backoff(first, 4), Duration::from_secs(40));
        assert_eq!(backoff(first, 40), Duration::from_secs(300));
    }
}

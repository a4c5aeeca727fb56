//! Stage 4: compute the status and write it, and nothing else.
//!
//! The status is computed on every reconcile, from the evaluation and the
//! step the planner chose, and written before any action. It is written
//! whole, as a JSON merge patch that names every field
//! ([`crate::api::write_whole_status`]), not by server-side apply: the
//! operator owns every field of its statuses, so there is nothing to share
//! with another manager, and a switch would leave the fields this patch
//! wrote owned by the old manager, never removed. An unchanged status is
//! not written again. The only failure is the Kubernetes API refusing the
//! write; etcd cannot stop it.

use kube::ResourceExt;
use kube::api::Api;
use steward_policy_sdk as sdk;

use super::evaluate::Evaluated;
use super::plan::{Step, is_crash_looping};
use crate::api::{
    EtcdCluster, EtcdClusterStatus, MemberRole, MemberSummary, ObservedClusterSpec,
    write_whole_status,
};
use crate::conditions::{self, Stall};
use crate::context::Context;
use crate::error::Error;
use crate::resources;

/// Proof that this reconcile's status was written. Only [`write`] makes
/// one, and [`super::act::act`] needs one: that is what puts "act" after
/// "write status" in every reconcile.
pub struct StatusWritten {
    pub(super) evaluated: Evaluated,
    pub(super) status: EtcdClusterStatus,
    /// The membership step this status announced; act carries it out.
    pub(super) step: Step,
}

impl StatusWritten {
    pub fn status(&self) -> &EtcdClusterStatus {
        &self.status
    }
}

/// The status this evaluation implies, from the previous status, and
/// announcing the planner's `step`.
pub fn next_status(e: &Evaluated, step: &Step, ctx: &Context) -> EtcdClusterStatus {
    let cluster = &e.observed.cluster;
    let prev = cluster.status.clone().unwrap_or_default();
    let now = e.observed.now;
    let generation = cluster.metadata.generation.unwrap_or_default();

    let stall = stall(e, &prev, now).or_else(|| match step {
        Step::Refuse { reason, message } => Some(Stall::Refused {
            reason,
            message: message.clone(),
        }),
        _ => None,
    });
    let facts = e.observed.plan_facts(e.verified, &ctx.config);
    let live: Vec<_> = facts.members.iter().filter(|m| !m.deleting).collect();
    let rolling = super::rollout::progress(&cluster.spec.version, &live);
    let running: Vec<&str> = e
        .observed
        .answered()
        .values()
        .map(|s| s.version.as_str())
        .filter(|v| !v.is_empty())
        .collect();
    let mut desired = conditions::desired(
        &e.verdict.conditions,
        &e.declared,
        e.observed.observation.phase,
        stall.as_ref(),
        step.describe().as_deref(),
        rolling.as_deref(),
    );
    // Waiting for cert-manager to issue the seed's certificates is progress
    // towards the first member, with a reason that says what it waits on.
    if let (Step::Wait(message), Some((reason, pending, true))) =
        (step, &facts.certificates_pending)
        && message == pending
        && let Some(p) = desired
            .iter_mut()
            .find(|c| c.type_ == conditions::PROGRESSING)
    {
        *p = sdk::Condition::new(
            conditions::PROGRESSING,
            sdk::ConditionStatus::True,
            *reason,
            message.clone(),
        );
    }
    desired.push(conditions::version_drifted(&cluster.spec.version, &running));
    let conditions = conditions::merge(&prev.conditions, &desired, generation, now);

    let answered = e.observed.answered();
    let leader = e.observed.leader_id();
    // The observation resolved each member's ID and role once; the status
    // shows what the policy saw.
    let members = e
        .observed
        .members
        .iter()
        .zip(&e.observed.observation.members)
        .map(|(m, seen)| {
            let status = answered.get(seen.name.as_str());
            MemberSummary {
                id: seen.member_id.map(|id| format!("{id:x}")),
                role: match seen.role {
                    sdk::MemberRole::Learner => MemberRole::Learner,
                    sdk::MemberRole::Voter => MemberRole::Voter,
                },
                version: status.map(|s| s.version.clone()).filter(|v| !v.is_empty()),
                leader: seen.member_id.is_some() && seen.member_id == leader,
                healthy: m.pod.ready && status.is_some() && !m.pod.deleting,
                last_defrag: e.observed.last_defrag(&seen.name),
                name: seen.name.clone(),
            }
        })
        .collect();

    let target = ObservedClusterSpec {
        replicas: cluster.spec.replicas,
        version: cluster.spec.version.clone(),
        storage: cluster.spec.storage.clone(),
        resources: cluster.spec.resources.clone(),
    };
    let target_changed = prev.observed.as_ref() != Some(&target);
    // A deadline exists only while work is in flight; it starts with the
    // work and restarts when the target moves.
    let progress_deadline = if !is_moving(e.observed.observation.phase) {
        None
    } else if target_changed || prev.progress_deadline.is_none() {
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            now + jiff::SignedDuration::from_secs(
                cluster.spec.progress_deadline_seconds.max(0) as i64
            ),
        ))
    } else {
        prev.progress_deadline.clone()
    };

    EtcdClusterStatus {
        observed_generation: Some(generation),
        ready_members: e.verdict.ready_members as i32,
        selector: Some(resources::cluster_selector(&cluster.name_any())),
        // Restoring from a snapshot starts a new etcd cluster: the old ID
        // is unlatched so the restored seed's can be.
        cluster_id: match step {
            Step::RestoreFromSnapshot { .. } => None,
            _ => e.observed.cluster_id.clone(),
        },
        cluster_token: Some(resources::cluster_token(cluster)),
        version: conditions::cluster_version(&running)
            .map(str::to_owned)
            .or(prev.version.clone()),
        observed: Some(target),
        last_verified_time: if e.verified {
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now))
        } else {
            prev.last_verified_time.clone()
        },
        unverified_streak: if e.verified {
            0
        } else {
            prev.unverified_streak.saturating_add(1)
        },
        policy: Some(e.policy.clone()),
        members,
        broken_members: e
            .observed
            .members
            .iter()
            .filter(|m| is_crash_looping(m.failures(), ctx.config.crash_loop_threshold))
            .map(|m| m.name())
            .collect(),
        last_action_error: ctx.last_action_error(cluster.as_ref()),
        // The host's own quorum finding, not the verdict: a policy that
        // declines verification does not make a quorum lost.
        quorum_loss: (e.quorum.is_err() && facts.cluster_id_latched)
            .then(|| quorum_loss_status(&facts))
            .flatten(),
        last_recovery: match step {
            Step::ForceNewCluster {
                name,
                mode,
                applied,
                revision,
                lost,
            } => Some(crate::api::RecoveryRecord {
                time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
                mode: *mode,
                from_member: Some(name.clone()),
                from_snapshot: None,
                raft_applied_index: *applied,
                revision: *revision,
                lost_revisions: revision
                    .zip(prev.last_verified_revision)
                    .map(|(have, known)| (known - have).max(0)),
                lost_members: lost.clone(),
            }),
            Step::RestoreFromSnapshot {
                snapshot,
                revision,
                mode,
                lost,
            } => Some(crate::api::RecoveryRecord {
                time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
                mode: *mode,
                from_member: None,
                from_snapshot: Some(snapshot.clone()),
                raft_applied_index: 0,
                revision: *revision,
                lost_revisions: revision
                    .zip(prev.last_verified_revision)
                    .map(|(have, known)| (known - have).max(0)),
                lost_members: lost.clone(),
            }),
            _ => prev.last_recovery.clone(),
        },
        // A recovery starts the count again from what it recovered: the
        // old high-water mark is of data that is gone.
        last_verified_revision: match step {
            Step::ForceNewCluster { revision, .. } | Step::RestoreFromSnapshot { revision, .. } => {
                *revision
            }
            _ if e.quorum.is_ok() => facts
                .members
                .iter()
                .filter_map(|m| m.revision)
                .max()
                .max(prev.last_verified_revision),
            _ => prev.last_verified_revision,
        },
        progress_deadline,
        auth_enabled: e.observed.auth.etcd_on.or(prev.auth_enabled),
        conditions,
    }
}

/// The status's account of a quorum lost for good, if it is.
fn quorum_loss_status(facts: &super::plan::Facts) -> Option<crate::api::QuorumLossStatus> {
    use super::recovery;
    let all: Vec<&super::plan::MemberFacts> = facts.members.iter().collect();
    let loss = recovery::quorum_loss(&all)?;
    let r = &facts.recovery;
    let forced = facts.members.iter().find(|m| m.force_new_cluster);
    // With no survivor, the newest verified snapshot takes its place.
    let best = match (&loss.best, forced) {
        // A recovery under way: the member it started from, not a new pick.
        (_, Some(m)) => Some(m.name.clone()),
        (Some(b), None) => Some(b.name.clone()),
        (None, None) if loss.survivors.is_empty() => r
            .snapshots
            .first()
            .map(|s| format!("{}{}", crate::api::RECOVER_FROM_SNAPSHOT, s.name)),
        (None, None) => None,
    };
    let action = match (&best, r.mode) {
        (Some(b), _) if forced.is_some() => {
            format!("recovering: {b} restarts alone with --force-new-cluster")
        }
        (None, _) if loss.survivors.is_empty() => "no voter's data survives and this cluster has no Complete and Verified EtcdSnapshot: create a new cluster restored from a snapshot you trust (spec.bootstrap.restore)".to_owned(),
        (None, _) => "waiting for a surviving member to answer".to_owned(),
        (Some(b), crate::api::QuorumLossMode::Manual) => recovery::manual_command(r, b),
        (Some(b), crate::api::QuorumLossMode::Automatic) => format!(
            "Automatic: the operator recovers from {b} once spec.recovery.gracePeriodSeconds ({} s) have passed since lastVerifiedTime",
            r.grace_ms / 1000
        ),
    };
    Some(crate::api::QuorumLossStatus {
        lost: loss
            .lost
            .into_iter()
            .map(|(name, reason)| crate::api::LostMember { name, reason })
            .collect(),
        survivors: loss
            .survivors
            .into_iter()
            .map(|s| crate::api::SurvivingMember {
                name: s.name,
                raft_applied_index: s.applied,
                revision: s.revision,
            })
            .collect(),
        recover_from: best,
        action,
    })
}

fn stall(e: &Evaluated, prev: &EtcdClusterStatus, now: jiff::Timestamp) -> Option<Stall> {
    if let Some(stall) = e.problem.as_ref().and_then(|p| p.stall()) {
        return Some(stall);
    }
    let deadline = prev.progress_deadline.as_ref()?;
    (is_moving(e.observed.observation.phase) && now > deadline.0).then(|| {
        Stall::ProgressDeadlineExceeded(format!(
            "the target (replicas {}) was not reached by {}",
            e.observed.cluster.spec.replicas, deadline.0
        ))
    })
}

/// Membership is changing towards the target.
fn is_moving(phase: sdk::HostPhase) -> bool {
    matches!(
        phase,
        sdk::HostPhase::Bootstrapping | sdk::HostPhase::ScalingUp | sdk::HostPhase::ScalingDown
    )
}

/// Writes `status` (from [`next_status`]) unless the stored one is the
/// same, and returns the proof that act needs.
pub async fn write(
    evaluated: Evaluated,
    status: EtcdClusterStatus,
    step: Step,
    ctx: &Context,
) -> Result<StatusWritten, Error> {
    let cluster = &evaluated.observed.cluster;
    let status = at_rest(status, cluster.status.as_ref(), ctx.config.verified_refresh);
    // Quiet at rest: an unchanged status is not written again. `cluster`
    // carries this process's last write even while the cache lags it
    // ([`Context::with_written_status`]).
    if cluster.status.as_ref() != Some(&status) {
        let api: Api<EtcdCluster> =
            Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
        // The whole status, lists replaced and emptied fields cleared.
        write_whole_status(&api, &cluster.name_any(), &status)
            .await
            .map_err(Error::StatusWrite)?;
        ctx.record_written_status(cluster.as_ref(), Some(status.clone()));
    }
    Ok(StatusWritten {
        evaluated,
        status,
        step,
    })
}

/// The status to store: `status`, except that `lastVerifiedTime` moves
/// forward only every `refresh` while nothing else changes. A cluster at
/// rest is then written once per `refresh`, not on every reconcile; any
/// other change (a verdict, a member, a condition) is written at once and
/// carries the exact verification time.
pub fn at_rest(
    mut status: EtcdClusterStatus,
    stored: Option<&EtcdClusterStatus>,
    refresh: std::time::Duration,
) -> EtcdClusterStatus {
    let Some(stored) = stored else {
        return status;
    };
    let (Some(new), Some(old)) = (&status.last_verified_time, &stored.last_verified_time) else {
        return status;
    };
    let recent =
        new.0.duration_since(old.0) < jiff::SignedDuration::try_from(refresh).unwrap_or_default();
    if recent {
        let held = EtcdClusterStatus {
            last_verified_time: Some(old.clone()),
            last_verified_revision: stored.last_verified_revision,
            ..status.clone()
        };
        if &held == stored {
            status = held;
        }
    }
    status
}

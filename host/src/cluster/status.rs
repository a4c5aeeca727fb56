//! Stage 3: write the status, then the PodDisruptionBudget.
//!
//! The status is written with server-side apply under the operator's own
//! field manager, on every reconcile, before any action. Its only failure
//! mode is the Kubernetes API refusing the write; etcd cannot stop it.

use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use steward_policy_sdk::{self as sdk, EventType};

use super::evaluate::Evaluated;
use super::plan::{Step, is_crash_looping, plan};
use crate::api::{
    EtcdCluster, EtcdClusterStatus, MemberRole, MemberSummary, ObservedClusterSpec,
    write_whole_status,
};
use crate::conditions::{self, Stall};
use crate::context::Context;
use crate::error::Error;
use crate::resources;
use crate::resources::FIELD_MANAGER;

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

    let stall = stall(e, &prev, now);
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
    );
    desired.push(conditions::version_drifted(&cluster.spec.version, &running));
    let conditions = conditions::merge(&prev.conditions, &desired, generation, now);

    let answered = e.observed.answered();
    let leader = e.observed.leader_id();
    let listed = e.observed.listed_members();
    let members = e
        .observed
        .members
        .iter()
        .map(|m| {
            let name = m.name();
            let in_etcd = listed.and_then(|l| l.iter().find(|x| x.name == name));
            let status = answered.get(name.as_str());
            let id = in_etcd
                .map(|x| x.id)
                .or(status.map(|s| s.member_id))
                .filter(|&id| id != 0);
            MemberSummary {
                id: id.map(|id| format!("{id:x}")),
                role: if in_etcd.is_some_and(|x| x.is_learner)
                    || status.is_some_and(|s| s.is_learner)
                {
                    MemberRole::Learner
                } else {
                    MemberRole::Voter
                },
                version: status.map(|s| s.version.clone()).filter(|v| !v.is_empty()),
                leader: id.is_some() && id == leader,
                healthy: m.pod.ready && status.is_some() && !m.pod.deleting,
                name,
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
        cluster_id: e.observed.cluster_id.clone(),
        cluster_token: Some(resources::cluster_token(cluster)),
        version: conditions::cluster_version(&running)
            .map(str::to_owned)
            .or(prev.version.clone()),
        observed: Some(target),
        last_verified_time: if e.verdict.verified {
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now))
        } else {
            prev.last_verified_time.clone()
        },
        unverified_streak: if e.verdict.verified {
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
        progress_deadline,
        conditions,
    }
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

pub async fn write(evaluated: Evaluated, ctx: &Context) -> Result<StatusWritten, Error> {
    let cluster: &Arc<EtcdCluster> = &evaluated.observed.cluster;
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    // The plan is pure, so it can be made before the write: the status
    // then says what happens next (or what it waits for), and act only
    // carries out what was announced.
    let step = plan(
        &evaluated
            .observed
            .plan_facts(evaluated.quorum.is_ok(), &ctx.config),
    );
    let status = next_status(&evaluated, &step, ctx);

    // Metrics come from the observation, whatever the API does with the write.
    ctx.metrics.observe_cluster(
        &crate::metrics::ClusterLabels {
            namespace: ns.clone(),
            name: name.clone(),
        },
        &health(&evaluated, &status),
    );

    if evaluated.verdict.verified {
        ctx.record_verified(cluster.as_ref(), evaluated.observed.now);
    }
    let status = at_rest(status, cluster.status.as_ref(), ctx.config.verified_refresh);
    // Quiet at rest: an unchanged status is not written again. The cache
    // may lag this process's own last write; then the same status goes out
    // twice, which the apiserver turns into a no-op.
    if cluster.status.as_ref() != Some(&status) {
        let api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
        // The whole status, lists replaced and emptied fields cleared.
        write_whole_status(&api, &name, &status)
            .await
            .map_err(Error::StatusWrite)?;
    }

    // The PDB belongs with the status: both describe what the cluster can
    // tolerate right now, so it must never go stale when etcd is down.
    // A dormant member has no Pod to protect: a paused cluster's PDB
    // protects nothing (minAvailable 0) rather than blocking drains.
    let dormant: Vec<String> = evaluated
        .observed
        .members
        .iter()
        .filter(|m| m.object.spec.dormant)
        .map(|m| m.name())
        .collect();
    let voters = status
        .members
        .iter()
        .filter(|m| matches!(m.role, MemberRole::Voter) && !dormant.contains(&m.name))
        .count();
    if let Ok(pdb) = resources::pod_disruption_budget(cluster, voters) {
        let key = format!("PodDisruptionBudget/{ns}/{}", pdb.name_any());
        let live = ctx
            .stores
            .pdbs
            .get(&ObjectRef::new(&pdb.name_any()).within(&ns))
            .and_then(|p| p.resource_version());
        if ctx.needs_apply(&key, &pdb, live.as_deref()) {
            let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
                Api::namespaced(ctx.client.clone(), &ns);
            match pdbs
                .patch(
                    &pdb.name_any(),
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&pdb),
                )
                .await
            {
                Ok(applied) => ctx.record_apply(&key, &pdb, applied.resource_version()),
                Err(err) => {
                    ctx.record_apply(&key, &pdb, None);
                    tracing::warn!(error = %err, "writing the PodDisruptionBudget failed");
                }
            }
        }
    }

    publish_events(&evaluated, &status, ctx).await;
    Ok(StatusWritten {
        evaluated,
        status,
        step,
    })
}

/// etcd's default `--quota-backend-bytes`: 2 GiB.
const DEFAULT_QUOTA_BACKEND_BYTES: i64 = 2 << 30;

/// The metrics' view of this reconcile.
pub(crate) fn health(e: &Evaluated, status: &EtcdClusterStatus) -> crate::metrics::ClusterHealth {
    let answered = e.observed.answered();
    let leader_id = e.observed.leader_id();
    let alarm_count = |kind: sdk::AlarmKind| {
        answered
            .values()
            .filter(|s| s.alarms.contains(&kind))
            .count() as i64
    };
    crate::metrics::ClusterHealth {
        available: status
            .condition(conditions::AVAILABLE)
            .is_some_and(|c| c.status == "True"),
        ready_members: i64::from(status.ready_members),
        desired_members: i64::from(e.observed.cluster.spec.replicas),
        last_verified_ms: status
            .last_verified_time
            .as_ref()
            .map(|t| t.0.as_millisecond()),
        now_ms: e.observed.now.as_millisecond(),
        leader: leader_id.and_then(|id| {
            answered
                .iter()
                .find(|(_, s)| s.member_id == id)
                .map(|(name, _)| ((*name).to_owned(), id))
        }),
        policy_failed: e.problem.is_some() || crate::cluster::evaluate::caught_by_sdk(&e.verdict),
        quota_bytes: e
            .observed
            .observation
            .spec
            .quota_backend_bytes
            .filter(|&q| q > 0)
            .map_or(DEFAULT_QUOTA_BACKEND_BYTES, |q| q as i64),
        db_sizes: answered
            .iter()
            .map(|(name, s)| ((*name).to_owned(), s.db_size as i64))
            .collect(),
        alarms: vec![
            ("NOSPACE", alarm_count(sdk::AlarmKind::Nospace)),
            ("CORRUPT", alarm_count(sdk::AlarmKind::Corrupt)),
        ],
    }
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
            ..status.clone()
        };
        if &held == stored {
            status = held;
        }
    }
    status
}

async fn publish_events(e: &Evaluated, status: &EtcdClusterStatus, ctx: &Context) {
    let cluster = &e.observed.cluster;
    let reference = cluster.object_ref(&());
    let prev = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let mut events: Vec<KubeEvent> = conditions::transitions(prev, &status.conditions)
        .into_iter()
        .map(|t| KubeEvent {
            type_: match t.event_type() {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: t.reason.clone(),
            note: Some(t.note()),
            action: "UpdateStatus".into(),
            secondary: None,
        })
        .collect();
    if let Some(p) = &e.problem {
        events.push(KubeEvent {
            type_: KubeEventType::Warning,
            reason: p.reason().into(),
            note: Some(crate::text::truncate(
                &p.message(),
                conditions::MAX_MESSAGE_BYTES,
            )),
            action: "EvaluatePolicy".into(),
            secondary: None,
        });
    }
    if let Some(note) = &e.deprecation {
        events.push(KubeEvent {
            type_: KubeEventType::Warning,
            reason: "DeprecatedPolicySource".into(),
            note: Some(note.clone()),
            action: "EvaluatePolicy".into(),
            secondary: None,
        });
    }
    events.extend(e.verdict.events.iter().map(|ev| KubeEvent {
        type_: match ev.type_ {
            EventType::Normal => KubeEventType::Normal,
            EventType::Warning => KubeEventType::Warning,
        },
        reason: ev.reason.clone(),
        note: Some(ev.message.clone()),
        action: "EvaluatePolicy".into(),
        secondary: None,
    }));
    for ev in events {
        if let Err(err) = ctx.recorder.publish(&ev, &reference).await {
            tracing::debug!(error = %err, reason = %ev.reason, "publishing an event failed");
        }
    }
}

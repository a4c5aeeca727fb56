//! Stage 3 of the member reconcile: at most one step on the member's Pod
//! (and its PVC), after the status is written. A failure is recorded on the
//! [`Context`] and shown by the next status and a Warning Event.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType};
use kube::{Resource, ResourceExt};

use super::observe::Observed;
use super::status::StatusWritten;
use crate::api::{EtcdCluster, MemberRole, StorageMedium};
use crate::context::{Context, OperatorConfig};
use crate::error::{ActError, kube};
use crate::facts::PodFacts;
use crate::resources;

/// 404 (already gone) and 409 (another Pod by now, or it exists) are the
/// outcomes the step wanted, seen through a lagging cache.
fn settled(result: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match result {
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        other => other,
    }
}

pub async fn act(written: StatusWritten, ctx: &Context) -> Action {
    let o = &written.observed;
    let Ok(cluster) = &o.cluster else {
        // Without the cluster no Pod can be built; the status says why.
        return Action::requeue(ctx.config.busy_resync);
    };
    match step(o, cluster, ctx).await {
        Ok(next) => {
            ctx.record_action(o.member.as_ref(), None);
            Action::requeue(next)
        }
        Err(err) => {
            ctx.record_action_failure(o.member.as_ref(), &err).await;
            Action::requeue(ctx.config.busy_resync)
        }
    }
}

/// Deletes exactly the Pod that was observed, never a newer one by the
/// same name.
fn delete_this(pod: &Pod) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// Takes the step; returns when to look again.
async fn step(o: &Observed, cluster: &EtcdCluster, ctx: &Context) -> Result<Duration, ActError> {
    let member = &o.member;
    let ns = member.namespace().unwrap_or_default();
    let name = o.name();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let mut next = Duration::from_secs(10);
    match o.pod.as_deref() {
        Some(p) if member.spec.dormant && p.metadata.deletion_timestamp.is_none() => {
            settled(pods.delete(&name, &delete_this(p)).await.map(drop))
                .map_err(kube(format!("deleting the Pod of dormant member {name}")))?;
        }
        // A Pod that ran to completion is never coming back by itself (the
        // anchor's #368): replace it on the same PVC, keeping the data. One
        // that keeps failing is recreated ever more slowly, as a kubelet
        // backs off a crashing container; the cluster replaces it at the
        // crash-loop threshold.
        Some(p) if o.facts.is_terminal() && p.metadata.deletion_timestamp.is_none() => {
            let wait = recreate_wait(
                &o.facts,
                o.prior_failures,
                jiff::Timestamp::now(),
                &ctx.config,
            );
            if !wait.is_zero() {
                next = wait;
            } else {
                publish_recreating(o, ctx).await;
                settled(pods.delete(&name, &delete_this(p)).await.map(drop))
                    .map_err(kube(format!("deleting terminated Pod {name}")))?;
            }
        }
        // The cluster's rollout set a new version on this member: replace
        // the Pod on the same volume (same data, same member ID). Only the
        // cluster planner changes spec.version, one member at a time.
        // Never for Memory: its data would go with the Pod (the planner
        // refuses such a rollout; this keeps a stray spec change harmless).
        Some(p)
            if p.metadata.deletion_timestamp.is_none()
                && !matches!(member.spec.storage.medium, StorageMedium::Memory)
                && resources::pod_version(p).is_some_and(|v| v != member.spec.version) =>
        {
            let ev = KubeEvent {
                type_: KubeEventType::Normal,
                reason: "RestartingOnNewVersion".into(),
                note: Some(format!(
                    "replacing Pod {name} (etcd {}) with one running etcd {} on the same volume",
                    resources::pod_version(p).unwrap_or_default(),
                    member.spec.version
                )),
                action: "ReplacePod".into(),
                secondary: None,
            };
            let _ = ctx.recorder.publish(&ev, &member.object_ref(&())).await;
            settled(pods.delete(&name, &delete_this(p)).await.map(drop))
                .map_err(kube(format!("deleting Pod {name} for its new version")))?;
        }
        // Quorum-loss recovery set or cleared --force-new-cluster: the Pod
        // is replaced on the same volume. Only the cluster controller sets
        // the flag, and clears it before adding members.
        Some(p)
            if p.metadata.deletion_timestamp.is_none()
                && resources::pod_forces_new_cluster(p) != member.spec.force_new_cluster =>
        {
            let ev = KubeEvent {
                type_: KubeEventType::Normal,
                reason: "RestartingForRecovery".into(),
                note: Some(format!(
                    "replacing Pod {name} on the same volume {} --force-new-cluster",
                    if member.spec.force_new_cluster {
                        "with"
                    } else {
                        "without"
                    }
                )),
                action: "ReplacePod".into(),
                secondary: None,
            };
            let _ = ctx.recorder.publish(&ev, &member.object_ref(&())).await;
            settled(pods.delete(&name, &delete_this(p)).await.map(drop))
                .map_err(kube(format!("deleting Pod {name} for recovery")))?;
        }
        // The PDB counts voter Pods by label; a promoted learner's Pod
        // must say so.
        Some(p)
            if wanted_role_label(o).is_some_and(|want| {
                p.labels().get(resources::LABEL_ROLE).map(String::as_str) != Some(want)
            }) =>
        {
            let patch = serde_json::json!({"metadata": {"labels": {
                resources::LABEL_ROLE: wanted_role_label(o)
            }}});
            pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube(format!("labelling Pod {name} with its role")))?;
        }
        // Its data is gone: etcd must not start on an empty volume under
        // the member's old identity. The cluster replaces the member (or,
        // without quorum, recovers); the status says which.
        None if o.data_lost().is_some() => {}
        None if !member.spec.dormant => {
            // A Pod exists only with its PVC (the PVC protection finalizer
            // keeps one in use), so the PVC is made only for a new Pod.
            if let Some(pvc) = resources::member_pvc(cluster, member)? {
                let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
                settled(pvcs.create(&PostParams::default(), &pvc).await.map(drop))
                    .map_err(kube(format!("creating PVC {}", pvc.name_any())))?;
            }
            let mut pod = resources::member_pod(cluster, member, &ctx.config.etcd_image)?;
            crate::restore::pod::add_init_containers(
                &mut pod,
                cluster,
                member,
                &ctx.config.operator_image,
            );
            settled(pods.create(&PostParams::default(), &pod).await.map(drop))
                .map_err(kube(format!("creating Pod {name}")))?;
        }
        _ => {
            if let Some(v) = o.volume().filter(|v| v.needs_request) {
                let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
                let patch =
                    serde_json::json!({"spec": {"resources": {"requests": {"storage": v.wanted}}}});
                pvcs.patch(&v.claim, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(kube(format!(
                        "{} {} to {}",
                        super::volume::RESIZE_ACTION,
                        v.claim,
                        v.wanted
                    )))?;
            }
        }
    }
    Ok(next)
}

async fn publish_recreating(o: &Observed, ctx: &Context) {
    let failed = o.facts.counts_as_failure();
    let ev = KubeEvent {
        type_: if failed {
            KubeEventType::Warning
        } else {
            KubeEventType::Normal
        },
        reason: "RecreatingPod".into(),
        note: Some(format!(
            "pod {} reached phase {:?}{}; recreating it on the same volume{}",
            o.name(),
            o.facts.phase,
            o.facts
                .last_termination
                .as_ref()
                .map(|t| format!(" ({}, exit code {})", t.reason, t.exit_code))
                .unwrap_or_default(),
            if failed {
                format!(" (failure {} in a row)", o.failures())
            } else {
                String::new()
            }
        )),
        action: "RecreatePod".into(),
        secondary: None,
    };
    let _ = ctx.recorder.publish(&ev, &o.member.object_ref(&())).await;
}

/// The role label etcd's last word calls for: None until etcd confirmed
/// the member (a new Pod is labelled by the builder).
fn wanted_role_label(o: &Observed) -> Option<&'static str> {
    let summary = o.summary()?;
    summary.id.as_ref()?;
    Some(match summary.role {
        MemberRole::Learner => resources::ROLE_LEARNER,
        MemberRole::Voter => resources::ROLE_VOTER,
    })
}

/// The wait before recreating after `failures` consecutive failures: none
/// after the first, then the base doubling up to the cap.
pub fn recreate_backoff(failures: u32, config: &OperatorConfig) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32.checked_shl(failures - 1).unwrap_or(u32::MAX);
    config
        .recreate_backoff
        .saturating_mul(factor)
        .min(config.max_recreate_backoff)
}

/// How much longer a terminated Pod waits before it is recreated, counted
/// from when its container finished (zero: recreate now).
pub fn recreate_wait(
    facts: &PodFacts,
    failures: u32,
    now: jiff::Timestamp,
    config: &OperatorConfig,
) -> Duration {
    let backoff = recreate_backoff(failures, config);
    let Some(finished) = facts.last_termination.as_ref().and_then(|t| t.finished_at) else {
        return Duration::ZERO;
    };
    let elapsed = Duration::from_millis((now.as_millisecond() - finished).max(0) as u64);
    backoff.saturating_sub(elapsed)
}

#[cfg(test)]
mod tests {
    use steward_policy_sdk as sdk;

    use super::*;

    fn failed(reason: &str, finished_at: i64) -> PodFacts {
        PodFacts {
            phase: sdk::PodPhase::Failed,
            last_termination: Some(sdk::Termination {
                reason: reason.into(),
                exit_code: 2,
                finished_at: Some(finished_at),
            }),
            ..PodFacts::default()
        }
    }

    #[test]
    fn failures_count_towards_a_crash_loop_but_oom_kills_and_clean_stops_do_not() {
        assert!(failed("Error", 0).counts_as_failure());
        assert!(!failed("OOMKilled", 0).counts_as_failure());
        let stopped = PodFacts {
            phase: sdk::PodPhase::Succeeded,
            ..failed("Completed", 0)
        };
        assert!(!stopped.counts_as_failure());
    }

    #[test]
    fn the_first_failure_is_recreated_at_once_and_later_ones_back_off() {
        let config = OperatorConfig::default();
        let secs = |n| recreate_backoff(n, &config).as_secs();
        assert_eq!(
            (0..9).map(secs).collect::<Vec<_>>(),
            [0, 1, 2, 4, 8, 16, 32, 60, 60]
        );
        assert_eq!(secs(u32::MAX), 60);

        let finished = 1_000_000;
        let at = |ms| jiff::Timestamp::from_millisecond(finished + ms).unwrap();
        let pod = failed("Error", finished);
        assert_eq!(recreate_wait(&pod, 0, at(0), &config), Duration::ZERO);
        assert_eq!(
            recreate_wait(&pod, 3, at(1_500), &config),
            Duration::from_millis(2_500)
        );
        assert_eq!(recreate_wait(&pod, 3, at(4_000), &config), Duration::ZERO);
    }
}

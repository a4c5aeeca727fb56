//! The EtcdMember controller: one bare Pod and one PVC per member, the
//! member's Ready condition, and MemberRemove in the member's finalizer.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType};
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use steward_policy_sdk::{self as sdk, ConditionStatus, quorum};

use crate::api::{EtcdCluster, EtcdMember, EtcdMemberStatus, StorageMedium, write_whole_status};
use crate::controller::{Context, Error, OperatorConfig};
use crate::observe::{ProbeTarget, probe_cluster};
use crate::reconcile::observe::cluster_members;
use crate::reconcile::pod_facts::{PodFacts, pod_facts};
use crate::resources;

pub const FINALIZER: &str = "etcd.steward.dev/member-remove";

pub async fn reconcile_member(member: Arc<EtcdMember>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = member.namespace().unwrap_or_default();
    let api: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, member, |event| async {
        match event {
            Event::Apply(m) => apply(m, &ctx).await,
            Event::Cleanup(m) => cleanup(m, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

async fn cluster_of(member: &EtcdMember, ctx: &Context) -> Result<Option<EtcdCluster>, Error> {
    let ns = member.namespace().unwrap_or_default();
    let api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    api.get_opt(&member.spec.cluster).await.map_err(Error::Kube)
}

async fn apply(member: Arc<EtcdMember>, ctx: &Context) -> Result<Action, Error> {
    let Some(cluster) = cluster_of(&member, ctx).await? else {
        return Ok(Action::await_change());
    };
    let ns = member.namespace().unwrap_or_default();
    let name = member.name_any();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);

    if let Some(pvc) = resources::member_pvc(&cluster, &member).map_err(Error::Build)? {
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
        if pvcs
            .get_opt(&pvc.name_any())
            .await
            .map_err(Error::Kube)?
            .is_none()
        {
            pvcs.create(&PostParams::default(), &pvc)
                .await
                .map_err(Error::Kube)?;
        }
    }

    // The status counts failures across reconciles; the watch cache may
    // not show this controller's own last write yet, so read it fresh.
    let member = Arc::new(
        Api::<EtcdMember>::namespaced(ctx.client.clone(), &ns)
            .get(&name)
            .await
            .map_err(Error::Kube)?,
    );
    let failures = member.status.as_ref().map_or(0, |s| s.consecutive_failures);
    let pod = ctx.stores.pods.get(&ObjectRef::new(&name).within(&ns));
    let facts = pod_facts(pod.as_deref());
    let mut recreated = None;
    let mut next = Duration::from_secs(10);
    match pod.as_deref() {
        Some(p) if member.spec.dormant && p.metadata.deletion_timestamp.is_none() => {
            pods.delete(&name, &DeleteParams::default())
                .await
                .map_err(Error::Kube)?;
        }
        // A Pod that ran to completion is never coming back by itself (the
        // anchor's #368): replace it on the same PVC, keeping the data. One
        // that keeps failing is recreated ever more slowly, as a kubelet
        // backs off a crashing container; the cluster replaces it at the
        // crash-loop threshold.
        Some(p) if facts.is_terminal() && p.metadata.deletion_timestamp.is_none() => {
            let wait = recreate_wait(&facts, failures, jiff::Timestamp::now(), &ctx.config);
            if !wait.is_zero() {
                next = wait;
            } else if still_there(&pods, p).await? {
                let failed = facts.counts_as_failure();
                let ev = KubeEvent {
                    type_: if failed {
                        KubeEventType::Warning
                    } else {
                        KubeEventType::Normal
                    },
                    reason: "RecreatingPod".into(),
                    note: Some(format!(
                        "pod {name} reached phase {:?}{}; recreating it on the same volume{}",
                        facts.phase,
                        facts
                            .last_termination
                            .as_ref()
                            .map(|t| format!(" ({}, exit code {})", t.reason, t.exit_code))
                            .unwrap_or_default(),
                        if failed {
                            format!(" (failure {} in a row)", failures + 1)
                        } else {
                            String::new()
                        }
                    )),
                    action: "RecreatePod".into(),
                    secondary: None,
                };
                let _ = ctx.recorder.publish(&ev, &member.object_ref(&())).await;
                pods.delete(&name, &DeleteParams::default())
                    .await
                    .map_err(Error::Kube)?;
                recreated = Some(failed);
            }
        }
        // The PDB counts voter Pods by label; a promoted learner's Pod
        // must say so.
        Some(p)
            if wanted_role_label(&cluster, &name).is_some_and(|want| {
                p.labels().get(resources::LABEL_ROLE).map(String::as_str) != Some(want)
            }) =>
        {
            let patch = serde_json::json!({"metadata": {"labels": {
                resources::LABEL_ROLE: wanted_role_label(&cluster, &name)
            }}});
            pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(Error::Kube)?;
        }
        None if !member.spec.dormant => {
            let pod = resources::member_pod(&cluster, &member, &ctx.config.etcd_image)
                .map_err(Error::Build)?;
            match pods.create(&PostParams::default(), &pod).await {
                Ok(_) => {}
                // The cache lags behind a Pod created a moment ago.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(Error::Kube(e)),
            }
        }
        _ => {}
    }

    write_member_status(&member, &cluster, pod.as_deref(), recreated, ctx).await?;
    Ok(Action::requeue(next))
}

/// The Pod cache may still show a Pod this controller deleted a moment ago;
/// recreating (and counting) it twice would shorten a crash loop. Asks the
/// API whether this very Pod is still there and not being deleted.
async fn still_there(pods: &Api<Pod>, pod: &Pod) -> Result<bool, Error> {
    let live = pods.get_opt(&pod.name_any()).await.map_err(Error::Kube)?;
    Ok(live.is_some_and(|l| l.uid() == pod.uid() && l.metadata.deletion_timestamp.is_none()))
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

/// The role label etcd's last word calls for: None until etcd confirmed
/// the member (a new Pod is labelled by the builder).
fn wanted_role_label(cluster: &EtcdCluster, name: &str) -> Option<&'static str> {
    let summary = cluster
        .status
        .as_ref()?
        .members
        .iter()
        .find(|m| m.name == name)?;
    summary.id.as_ref()?;
    Some(match summary.role {
        crate::api::MemberRole::Learner => resources::ROLE_LEARNER,
        crate::api::MemberRole::Voter => resources::ROLE_VOTER,
    })
}

async fn write_member_status(
    member: &EtcdMember,
    cluster: &EtcdCluster,
    pod: Option<&Pod>,
    // Some(failed) when this reconcile deleted a terminated Pod to recreate it.
    recreated: Option<bool>,
    ctx: &Context,
) -> Result<(), Error> {
    let name = member.name_any();
    let facts = pod_facts(pod);
    let summary = cluster
        .status
        .as_ref()
        .and_then(|s| s.members.iter().find(|m| m.name == name));
    let prev = member.status.clone().unwrap_or_default();
    let confirmed_id = summary.and_then(|s| s.id.clone());
    let desired = crate::conditions::member_conditions(&crate::conditions::MemberFacts {
        dormant: member.spec.dormant,
        pod_ready: facts.ready,
        listed: summary.map(|s| s.id.is_some()),
        member_id: confirmed_id
            .as_deref()
            .or(prev.member_id.as_deref())
            .and_then(|hex| u64::from_str_radix(hex, 16).ok()),
        spec_version: member.spec.version.clone(),
        running_version: None,
    });
    let generation = member.metadata.generation.unwrap_or_default();
    let new = EtcdMemberStatus {
        member_id: confirmed_id.or(prev.member_id.clone()),
        pod_name: pod.map(|p| p.name_any()),
        pod_uid: pod.and_then(|p| p.uid()),
        is_voter: summary.is_none_or(|s| matches!(s.role, crate::api::MemberRole::Voter)),
        pvc_name: (!matches!(member.spec.storage.medium, StorageMedium::Memory))
            .then(|| resources::pvc_name(&name)),
        pod_restarts: prev.pod_restarts + u32::from(recreated.is_some()),
        // Ready (Pod Ready and confirmed by etcd) ends a crash loop.
        consecutive_failures: if desired.iter().any(|c| {
            c.type_ == crate::api::member_condition::READY && c.status == ConditionStatus::True
        }) {
            0
        } else {
            prev.consecutive_failures + u32::from(recreated == Some(true))
        },
        version: prev.version.clone(),
        conditions: crate::conditions::merge(
            &prev.conditions,
            &desired,
            generation,
            jiff::Timestamp::now(),
        ),
    };
    let api: Api<EtcdMember> =
        Api::namespaced(ctx.client.clone(), &member.namespace().unwrap_or_default());
    // The whole status, lists replaced and emptied fields cleared.
    write_whole_status(&api, &name, &new)
        .await
        .map_err(Error::StatusWrite)?;
    Ok(())
}

/// MemberRemove, only with verified quorum: a majority of the voters
/// answer and agree on a leader now, and the voters that remain after the
/// removal still form a quorum of the smaller cluster.
async fn cleanup(member: Arc<EtcdMember>, ctx: &Context) -> Result<Action, Error> {
    let Some(cluster) = cluster_of(&member, ctx).await? else {
        return Ok(Action::await_change());
    };
    if cluster.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = member.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let targets: Vec<ProbeTarget> = cluster_members(ctx, &cluster)
        .iter()
        .map(|m| ProbeTarget {
            member: m.name_any(),
            endpoint: resources::member_client_url(&m.name_any(), &cluster.name_any(), &ns),
        })
        .collect();
    let report = probe_cluster(ctx.etcd.as_ref(), &targets, ctx.config.probe_deadline).await;
    let decision = removal_decision(&report, &name);
    match decision {
        Removal::AlreadyGone => Ok(Action::await_change()),
        Removal::Refuse(why) => Err(Error::QuorumNotVerified(format!(
            "not removing {name} from etcd: {why}"
        ))),
        Removal::Remove { id, via } => {
            ctx.etcd
                .member_remove(&via, id)
                .await
                .map_err(Error::Etcd)?;
            tracing::info!(member = %name, id = %format!("{id:x}"), "removed from etcd");
            Ok(Action::await_change())
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Removal {
    AlreadyGone,
    Refuse(String),
    Remove { id: u64, via: Vec<String> },
}

pub fn removal_decision(report: &sdk::ProbeReport, name: &str) -> Removal {
    let sdk::MemberListOutcome::Listed(listed) = &report.member_list else {
        return Removal::Refuse("etcd's member list could not be read".into());
    };
    let Some(target) = listed.iter().find(|m| {
        m.name == name
            || m.peer_urls
                .iter()
                .any(|u| crate::reconcile::plan::member_name_from_peer_url(u) == Some(name))
    }) else {
        return Removal::AlreadyGone;
    };
    let voters: Vec<u64> = listed
        .iter()
        .filter(|m| !m.is_learner)
        .map(|m| m.id)
        .collect();
    let answered: Vec<&sdk::EndpointStatus> = report
        .endpoints
        .iter()
        .filter_map(|p| match &p.outcome {
            sdk::ProbeOutcome::Answered(s) => Some(s),
            _ => None,
        })
        .collect();
    let Some(leader) = answered.iter().map(|s| s.leader_id).find(|&l| l != 0) else {
        return Removal::Refuse("no member reports a leader".into());
    };
    let agreeing: Vec<u64> = answered
        .iter()
        .filter(|s| s.leader_id == leader && voters.contains(&s.member_id))
        .map(|s| s.member_id)
        .collect();
    if agreeing.len() < quorum(voters.len()) {
        return Removal::Refuse(format!(
            "only {} of {} voters answer with leader {leader:x}",
            agreeing.len(),
            voters.len()
        ));
    }
    if !target.is_learner {
        let remaining = agreeing.iter().filter(|&&id| id != target.id).count();
        if remaining < quorum(voters.len() - 1) {
            return Removal::Refuse(format!(
                "after removal only {remaining} of {} voters would be healthy",
                voters.len() - 1
            ));
        }
    }
    let via = report
        .endpoints
        .iter()
        .filter(|p| p.member != name)
        .filter_map(|p| match &p.outcome {
            sdk::ProbeOutcome::Answered(s) => Some((s.member_id != leader, p.endpoint.clone())),
            _ => None,
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    Removal::Remove { id: target.id, via }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(answering: &[(u64, u64)], listed: &[(u64, &str, bool)]) -> sdk::ProbeReport {
        sdk::ProbeReport {
            endpoints: listed
                .iter()
                .map(|(id, name, _)| sdk::EndpointProbe {
                    member: name.to_string(),
                    endpoint: format!("http://{name}:2379"),
                    outcome: match answering.iter().find(|(a, _)| a == id) {
                        Some((_, leader)) => sdk::ProbeOutcome::Answered(sdk::EndpointStatus {
                            member_id: *id,
                            leader_id: *leader,
                            ..Default::default()
                        }),
                        None => sdk::ProbeOutcome::Failed(sdk::ProbeError {
                            kind: sdk::ProbeErrorKind::Timeout,
                            message: "deadline".into(),
                        }),
                    },
                })
                .collect(),
            member_list: sdk::MemberListOutcome::Listed(
                listed
                    .iter()
                    .map(|(id, name, learner)| sdk::EtcdMember {
                        id: *id,
                        name: name.to_string(),
                        is_learner: *learner,
                        ..Default::default()
                    })
                    .collect(),
            ),
            quorum_read: sdk::QuorumReadOutcome::Succeeded,
        }
    }

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

    const FIVE: [(u64, &str, bool); 5] = [
        (1, "a", false),
        (2, "b", false),
        (3, "c", false),
        (4, "d", false),
        (5, "e", false),
    ];

    #[test]
    fn a_healthy_cluster_removes_through_the_others_leader_first() {
        let r = report(&[(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)], &FIVE);
        let Removal::Remove { id, via } = removal_decision(&r, "e") else {
            panic!("expected a removal");
        };
        assert_eq!(id, 5);
        assert_eq!(via.first().map(String::as_str), Some("http://a:2379"));
        assert!(!via.iter().any(|e| e.contains("//e:")));
    }

    #[test]
    fn no_removal_without_a_quorum_that_agrees_on_a_leader() {
        let r = report(&[(1, 1), (2, 1)], &FIVE);
        assert!(matches!(removal_decision(&r, "e"), Removal::Refuse(_)));
        let split = report(&[(1, 1), (2, 2), (3, 3)], &FIVE[..3]);
        assert!(matches!(removal_decision(&split, "c"), Removal::Refuse(_)));
    }

    #[test]
    fn no_removal_that_would_leave_the_rest_without_quorum() {
        // 3 of 5 answer; removing one of the three leaves 2 of 4: not a quorum.
        let r = report(&[(1, 1), (2, 1), (3, 1)], &FIVE);
        assert!(
            matches!(removal_decision(&r, "c"), Removal::Refuse(m) if m.contains("after removal"))
        );
        // Removing a dead one leaves 3 of 4 healthy: fine.
        assert!(matches!(
            removal_decision(&r, "e"),
            Removal::Remove { id: 5, .. }
        ));
    }

    #[test]
    fn an_unknown_member_is_already_gone_and_an_unreadable_list_refuses() {
        let r = report(&[(1, 1), (2, 1), (3, 1)], &FIVE[..3]);
        assert_eq!(removal_decision(&r, "zz"), Removal::AlreadyGone);
        let mut r = r;
        r.member_list = sdk::MemberListOutcome::NotAttempted;
        assert!(matches!(removal_decision(&r, "a"), Removal::Refuse(_)));
    }
}

//! Stage 5: after the status is written, keep the cluster's children
//! current and take at most one membership step.
//!
//! The PodDisruptionBudget is applied on every reconcile, etcd up or down:
//! it describes what the cluster can tolerate now (its voters, as the
//! written status counts them), so it must never go stale during an
//! outage. Then the Services, then the step the status announced, then
//! the cert-manager Certificates the observation found missing or
//! outdated.
//!
//! Failures here are recorded on the [`Context`] and appear in the next
//! status (`status.lastActionError`) and as a Warning Event; they never
//! change the status this reconcile already wrote.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use super::plan::{Step, Then};
use super::status::StatusWritten;
use crate::api::{EtcdCluster, EtcdMember, MemberRole};
use crate::context::{Context, applied_key};
use crate::error::{ActError, etcd, kube};
use crate::resources;
use crate::resources::FIELD_MANAGER;

pub async fn act(written: StatusWritten, ctx: &Context) -> Action {
    let e = &written.evaluated;
    let cluster = &e.observed.cluster;

    // A PDB that cannot be written is logged, not an action error: the
    // membership step does not depend on it.
    if let Err(err) = apply_pdb(&written, ctx).await {
        tracing::warn!(error = %err, "writing the PodDisruptionBudget failed");
    }
    let result = async {
        ensure_services(cluster, ctx).await?;
        // A recover-from annotation on a cluster whose quorum the host
        // verified authorises nothing now, and must not authorise the next
        // quorum loss in advance.
        if e.quorum.is_ok()
            && cluster
                .annotations()
                .contains_key(crate::api::ANNOTATION_RECOVER_FROM)
        {
            clear_recover_from(cluster, crate::api::QuorumLossMode::Manual, ctx).await?;
        }
        let step = &written.step;
        if step.changes_membership() {
            tracing::info!(?step, "membership step");
        }
        take(step, &written, ctx).await?;
        // After the step: a Certificate cert-manager refuses must not hold
        // up the membership of members whose Secrets exist. A cluster
        // waiting for its seed's Certificates has no step to take.
        crate::certificates::apply(cluster, &e.observed.issuance, &ctx.client)
            .await
            .map_err(kube("applying cert-manager Certificates"))?;
        Ok::<Step, ActError>(step.clone())
    }
    .await;

    let step = match result {
        Ok(step) => {
            ctx.record_action(cluster.as_ref(), None);
            Some(step)
        }
        Err(err) if err.is_refused_for_now() => {
            tracing::info!(reason = %err, "etcd refused the step for now");
            ctx.record_action(cluster.as_ref(), None);
            Some(Step::Wait(err.to_string()))
        }
        Err(err) => {
            ctx.record_action_failure(cluster.as_ref(), &err).await;
            None
        }
    };

    // Membership in motion, or an unverified cluster, is looked at sooner.
    let busy = step.as_ref().is_none_or(|s| !matches!(s, Step::Idle)) || !e.verified;
    let mut next = if busy {
        ctx.config.busy_resync
    } else {
        ctx.config.resync
    };
    if let Some(hint) = e.verdict.requeue_after_ms {
        next = next.min(Duration::from_millis(hint.max(100) as u64));
    }
    Action::requeue(next)
}

/// Applies `desired` (a child of the cluster) by server-side apply, unless
/// this process applied the very same object and the cache's copy in
/// `store` is still the one that apply produced.
async fn apply_child<K>(desired: &K, store: &Store<K>, ctx: &Context) -> Result<(), ::kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let ns = desired.namespace().unwrap_or_default();
    let key = applied_key(desired);
    let live = store
        .get(&ObjectRef::new(&desired.name_any()).within(&ns))
        .and_then(|o| o.resource_version());
    if !ctx.needs_apply(&key, desired, live.as_deref()) {
        return Ok(());
    }
    let applied = Api::<K>::namespaced(ctx.client.clone(), &ns)
        .patch(
            &desired.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(desired),
        )
        .await;
    ctx.record_apply(
        &key,
        desired,
        applied.as_ref().ok().and_then(|a| a.resource_version()),
    );
    applied.map(drop)
}

/// The PodDisruptionBudget for the voters the written status shows. A
/// dormant member has no Pod to protect: a paused cluster's PDB protects
/// nothing (minAvailable 0) rather than blocking drains.
async fn apply_pdb(written: &StatusWritten, ctx: &Context) -> Result<(), ActError> {
    let observed = &written.evaluated.observed;
    let dormant: Vec<String> = observed
        .members
        .iter()
        .filter(|m| m.object.spec.dormant)
        .map(|m| m.name())
        .collect();
    let voters = written
        .status
        .members
        .iter()
        .filter(|m| matches!(m.role, MemberRole::Voter) && !dormant.contains(&m.name))
        .count();
    let pdb = resources::pod_disruption_budget(&observed.cluster, voters)?;
    apply_child(&pdb, ctx.watches.pdbs.store(), ctx)
        .await
        .map_err(kube(format!(
            "applying PodDisruptionBudget {}",
            pdb.name_any()
        )))
}

async fn ensure_services(cluster: &EtcdCluster, ctx: &Context) -> Result<(), ActError> {
    for svc in [
        resources::headless_service(cluster)?,
        resources::client_service(cluster)?,
    ] {
        apply_child(&svc, ctx.watches.services.store(), ctx)
            .await
            .map_err(kube(format!("applying Service {}", svc.name_any())))?;
    }
    Ok(())
}

async fn take(step: &Step, written: &StatusWritten, ctx: &Context) -> Result<(), ActError> {
    let e = &written.evaluated;
    let cluster = &e.observed.cluster;
    let ns = cluster.namespace().unwrap_or_default();
    let members: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), &ns);
    match step {
        Step::Idle | Step::Wait(_) | Step::Refuse { .. } => Ok(()),
        Step::EnableAuth | Step::ChangeRootPassword { .. } | Step::DisableAuth => {
            crate::auth::act(step, cluster, ctx, &leader_first_endpoints(written)).await
        }
        Step::Defragment {
            name,
            id,
            why,
            clear_no_space,
        } => defragment(written, ctx, name, *id, why, *clear_no_space).await,
        Step::DisarmNoSpace { members } => {
            let endpoint = leader_first_endpoints(written)
                .into_iter()
                .next()
                .ok_or_else(|| ActError::Unanswered {
                    member: members.join(", "),
                    rpc: "AlarmDisarm",
                })?;
            let cleared = disarm_no_space(written, ctx, &endpoint).await?;
            let ev = KubeEvent {
                type_: KubeEventType::Normal,
                reason: "NoSpaceAlarmCleared".into(),
                note: Some(format!(
                    "disarmed the NOSPACE alarm of {}: every member is under the quota",
                    cleared.join(", ")
                )),
                action: "AlarmDisarm".into(),
                secondary: None,
            };
            let _ = ctx.recorder.publish(&ev, &cluster.object_ref(&())).await;
            Ok(())
        }
        Step::CreateSeed => {
            // The cache may not show a seed created a moment ago; two seeds
            // would be two clusters. Ask the API server itself.
            let existing = members
                .list(&kube::api::ListParams::default().labels(&format!(
                    "{}={}",
                    resources::LABEL_INSTANCE,
                    cluster.name_any()
                )))
                .await
                .map_err(kube("listing the cluster's EtcdMembers"))?;
            if existing
                .items
                .iter()
                .any(|m| m.spec.cluster == cluster.name_any())
            {
                return Ok(());
            }
            let name = resources::new_member_name(&cluster.name_any());
            let initial = resources::seed_initial_cluster(
                resources::peer_scheme(cluster),
                &name,
                &cluster.name_any(),
                &ns,
            );
            let mut member = resources::etcd_member(cluster, &name, &initial, true)?;
            match &e.observed.restore {
                Some(Ok(restore)) => member.spec.restore = Some(restore.clone()),
                // The planner creates no seed for a refused restore; a
                // restore never checked is no reason to start empty.
                Some(Err(_)) => return Ok(()),
                None if crate::restore::source(cluster).is_some() => return Ok(()),
                None => {}
            }
            members
                .create(&PostParams::default(), &member)
                .await
                .map_err(kube(format!("creating seed EtcdMember {name}")))?;
            Ok(())
        }
        Step::AddLearner => {
            let name = resources::new_member_name(&cluster.name_any());
            let peer = resources::member_peer_url(
                resources::peer_scheme(cluster),
                &name,
                &cluster.name_any(),
                &ns,
            );
            let endpoints = leader_first_endpoints(written);
            let added = ctx
                .etcd
                .member_add_as_learner(&endpoints, std::slice::from_ref(&peer))
                .await
                .map_err(etcd(format!("MemberAddAsLearner {peer}")))?;
            let initial = joining(&added.members, &name, &peer)?;
            let mut member = resources::etcd_member(cluster, &name, &initial, false)?;
            member.spec.version = join_version(written, ctx);
            members
                .create(&PostParams::default(), &member)
                .await
                .map_err(kube(format!("creating EtcdMember {name}")))?;
            Ok(())
        }
        Step::Adopt { name } => {
            let listed = e.observed.listed_members().unwrap_or_default();
            let peer = resources::member_peer_url(
                resources::peer_scheme(cluster),
                name,
                &cluster.name_any(),
                &ns,
            );
            let initial = joining(listed, name, &peer)?;
            let mut member = resources::etcd_member(cluster, name, &initial, false)?;
            member.spec.version = join_version(written, ctx);
            match members.create(&PostParams::default(), &member).await {
                // The watch cache lagged behind an AddLearner that created
                // it a moment ago: the object this step wanted exists.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                other => other.map(drop).map_err(kube(format!(
                    "creating EtcdMember {name} for a listed learner"
                ))),
            }
        }
        Step::Promote { id, .. } => {
            ctx.etcd
                .member_promote(&leader_first_endpoints(written), *id)
                .await
                .map_err(etcd(format!("MemberPromote {id:x}")))?;
            Ok(())
        }
        Step::Remove { name } => {
            // The member's finalizer runs MemberRemove, after verifying quorum.
            members
                .delete(name, &Default::default())
                .await
                .map_err(kube(format!("deleting EtcdMember {name}")))?;
            Ok(())
        }
        Step::MoveLeader {
            from,
            to,
            to_id,
            then,
        } => {
            let leader = e.observed.leader_id();
            let endpoint =
                answered_endpoint(written, leader).ok_or_else(|| ActError::Unanswered {
                    member: from.clone(),
                    rpc: "MoveLeader",
                })?;
            ctx.etcd
                .move_leader(&endpoint, *to_id)
                .await
                .map_err(etcd(format!("MoveLeader {from} -> {to} ({to_id:x})")))?;
            let ev = KubeEvent {
                type_: KubeEventType::Normal,
                reason: "LeaderMoved".into(),
                note: Some(format!(
                    "moved leadership from {from} to {to} before the {} of {from}",
                    match then {
                        Then::Remove => "removal",
                        Then::Upgrade => "upgrade",
                        Then::Defragment => "defragmentation",
                    }
                )),
                action: "MoveLeader".into(),
                secondary: Some(member_ref(cluster, from)),
            };
            let _ = ctx.recorder.publish(&ev, &cluster.object_ref(&())).await;
            Ok(())
        }
        Step::Upgrade {
            name,
            to,
            done,
            total,
        } => {
            // The member controller sees its version change and replaces
            // the Pod on the same volume: same data, same member ID.
            let patch = serde_json::json!({"spec": {"version": to}});
            members
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube(format!("setting version {to} on EtcdMember {name}")))?;
            let ev = KubeEvent {
                type_: KubeEventType::Normal,
                reason: "UpgradingMember".into(),
                note: Some(format!(
                    "restarting member {name} on etcd {to} ({done} of {total} members run it)"
                )),
                action: "Upgrade".into(),
                // One series per member: the recorder folds Events with the
                // same reason and objects into one, keeping its first note.
                secondary: Some(member_ref(cluster, name)),
            };
            let _ = ctx.recorder.publish(&ev, &cluster.object_ref(&())).await;
            Ok(())
        }
        Step::Replace { name, failures } => {
            let ev = KubeEvent {
                type_: KubeEventType::Warning,
                reason: "ReplacingMember".into(),
                note: Some(format!(
                    "member {name} failed {failures} times in a row without becoming Ready; \
                     removing it from etcd and adding a fresh member with an empty volume"
                )),
                action: "ReplaceMember".into(),
                secondary: None,
            };
            let _ = ctx.recorder.publish(&ev, &cluster.object_ref(&())).await;
            members
                .delete(name, &Default::default())
                .await
                .map_err(kube(format!("deleting crash-looping EtcdMember {name}")))?;
            Ok(())
        }
        Step::ReplaceLost { name, why } => {
            let ev = KubeEvent {
                type_: KubeEventType::Warning,
                reason: "ReplacingLostMember".into(),
                note: Some(format!(
                    "the data of member {name} is gone ({why}); removing it from etcd and adding a fresh member"
                )),
                action: "ReplaceMember".into(),
                // One series per member: the recorder folds Events with
                // the same reason and objects into one, keeping its first note.
                secondary: Some(member_ref(cluster, name)),
            };
            let _ = ctx.recorder.publish(&ev, &cluster.object_ref(&())).await;
            members
                .delete(name, &Default::default())
                .await
                .map_err(kube(format!(
                    "deleting EtcdMember {name}, whose data is gone"
                )))?;
            Ok(())
        }
        Step::ForceNewCluster { name, mode, .. } => {
            // The cache may not show a flag set a moment ago (the Pod of
            // that member then no longer answers, and another survivor
            // looks best): two forced members would be two clusters under
            // one ID. Ask the API server itself.
            let listed = members
                .list(&kube::api::ListParams::default().labels(&format!(
                    "{}={}",
                    resources::LABEL_INSTANCE,
                    cluster.name_any()
                )))
                .await
                .map_err(kube("listing the cluster's EtcdMembers"))?;
            if let Some(other) = listed
                .items
                .iter()
                .find(|m| m.spec.cluster == cluster.name_any() && m.spec.force_new_cluster)
            {
                tracing::info!(member = %other.name_any(), "a recovery is already under way");
                return Ok(());
            }
            // Consumed before it acts: it authorises this recovery only.
            clear_recover_from(cluster, *mode, ctx).await?;
            let patch = serde_json::json!({"spec": {"forceNewCluster": true}});
            members
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube(format!(
                    "setting forceNewCluster on EtcdMember {name}"
                )))?;
            publish_recovery(
                written,
                ctx,
                "it restarts alone with --force-new-cluster, then fresh members join",
                "ForceNewCluster",
            )
            .await;
            Ok(())
        }
        Step::RestoreFromSnapshot { snapshot, mode, .. } => {
            // The status written before this step unlatched the cluster ID
            // and recorded the snapshot: from here the seed to be created
            // restores it. Every member goes; none has data to keep.
            clear_recover_from(cluster, *mode, ctx).await?;
            // Members already being removed are marked too: their
            // finalizers would otherwise wait for a quorum forever.
            for m in &e.observed.members {
                let name = m.name();
                let patch = serde_json::json!({"metadata": {"annotations": {
                    crate::api::ANNOTATION_ABANDONED: format!("restoring the cluster from EtcdSnapshot {snapshot}")
                }}});
                members
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(kube(format!("marking EtcdMember {name} abandoned")))?;
                if m.object.metadata.deletion_timestamp.is_none() {
                    members
                        .delete(&name, &Default::default())
                        .await
                        .map_err(kube(format!("deleting abandoned EtcdMember {name}")))?;
                }
            }
            publish_recovery(
                written,
                ctx,
                "a new seed restores it, then fresh members join (a new cluster ID)",
                "RestoreSnapshot",
            )
            .await;
            Ok(())
        }
        Step::EndForceNewCluster { name } => {
            let patch = serde_json::json!({"spec": {"forceNewCluster": null}});
            members
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube(format!(
                    "clearing forceNewCluster on EtcdMember {name}"
                )))?;
            ctx.publish_event(
                cluster.as_ref(),
                KubeEventType::Normal,
                "QuorumRecovered",
                &format!(
                    "etcd lists {name} alone, with quorum: restarting it without --force-new-cluster; fresh members join as learners"
                ),
                "ForceNewCluster",
            )
            .await;
            Ok(())
        }
        Step::MakeDormant { name } | Step::Wake { name } => {
            let dormant = matches!(step, Step::MakeDormant { .. });
            let patch = serde_json::json!({"spec": {"dormant": dormant}});
            members
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube(format!(
                    "setting dormant={dormant} on EtcdMember {name}"
                )))?;
            Ok(())
        }
    }
}

/// The Warning Event of a recovery that starts, told from the record the
/// status written before it carries.
async fn publish_recovery(written: &StatusWritten, ctx: &Context, then: &str, action: &str) {
    let Some(r) = written.status.last_recovery.as_ref() else {
        return;
    };
    let known = |v: Option<i64>| v.map_or("unknown".to_owned(), |v| v.to_string());
    let from = match (&r.from_member, &r.from_snapshot) {
        (Some(m), _) => format!("member {m} (applied index {})", r.raft_applied_index),
        (None, Some(s)) => format!("EtcdSnapshot {s}, no voter's data surviving"),
        (None, None) => return,
    };
    ctx.publish_event(
        written.evaluated.observed.cluster.as_ref(),
        KubeEventType::Warning,
        "RecoveringFromQuorumLoss",
        &format!(
            "quorum lost for good (the data of {} is gone); {:?} recovery from {from}: revision {}, revisions lost {}; {then}",
            r.lost_members.join(", "),
            r.mode,
            known(r.revision),
            known(r.lost_revisions),
        ),
        action,
    )
    .await;
}

/// Removes the recover-from annotation after a Manual recovery started: it
/// authorised this recovery only, and left in place it would authorise the
/// next quorum loss in advance.
async fn clear_recover_from(
    cluster: &EtcdCluster,
    mode: crate::api::QuorumLossMode,
    ctx: &Context,
) -> Result<(), ActError> {
    if !matches!(mode, crate::api::QuorumLossMode::Manual) {
        return Ok(());
    }
    let clusters: Api<EtcdCluster> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    let patch = serde_json::json!({"metadata": {"annotations": {
        crate::api::ANNOTATION_RECOVER_FROM: null
    }}});
    clusters
        .patch(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(kube(format!(
            "removing the {} annotation",
            crate::api::ANNOTATION_RECOVER_FROM
        )))?;
    Ok(())
}

/// `--initial-cluster` for a joining member, from etcd's own member list.
fn joining(
    listed: &[steward_policy_sdk::EtcdMember],
    name: &str,
    peer: &str,
) -> Result<String, ActError> {
    resources::joining_initial_cluster(listed, name, peer).ok_or_else(|| ActError::NotListed {
        peer_url: peer.to_owned(),
    })
}

/// Client endpoints that answered this reconcile, the leader's first.
/// The version a joining member starts on ([`super::rollout::join_version`]).
fn join_version(written: &StatusWritten, ctx: &Context) -> String {
    let e = &written.evaluated;
    super::rollout::join_version(&e.observed.plan_facts(e.verified, &ctx.config))
}

/// How long one member's defragmentation may take. The cluster's reconcile
/// waits for it, so its status is not refreshed meanwhile (docs/api.md).
const DEFRAG_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// Defragments member `name`, reads its size back, clears the NOSPACE
/// alarms once every member is under the quota, and records the result for
/// the next status, with an Event.
async fn defragment(
    written: &StatusWritten,
    ctx: &Context,
    name: &str,
    id: u64,
    why: &str,
    clear_no_space: bool,
) -> Result<(), ActError> {
    let e = &written.evaluated;
    let cluster = &e.observed.cluster;
    let endpoint = answered_endpoint(written, Some(id)).ok_or_else(|| ActError::Unanswered {
        member: name.to_owned(),
        rpc: "Defragment",
    })?;
    let before = e.observed.answered().get(name).map_or(0, |s| s.db_size);
    ctx.etcd
        .defragment(&endpoint, DEFRAG_DEADLINE)
        .await
        .map_err(etcd(format!("Defragment {name}")))?;
    let after = ctx
        .etcd
        .status(&endpoint)
        .await
        .map_err(etcd(format!("Status of {name} after defragmenting it")))?;
    let reclaimed = before.saturating_sub(after.db_size);
    ctx.record_defrag(
        cluster.as_ref(),
        name,
        crate::api::LastDefrag {
            time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
            reclaimed_bytes: reclaimed as i64,
        },
    );
    let quota = e.observed.plan_facts(e.verified, &ctx.config).quota_bytes;
    let mut cleared = Vec::new();
    if clear_no_space {
        // The alarm is the cluster's: clear it only when every member's
        // database is under the quota with room to spare, this one as it
        // is now.
        use super::maintenance::under_quota;
        let over = e
            .observed
            .answered()
            .iter()
            .any(|(n, s)| *n != name && !under_quota(s.db_size, quota))
            || !under_quota(after.db_size, quota);
        if !over {
            cleared = disarm_no_space(written, ctx, &endpoint).await?;
        }
    }
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let ev = KubeEvent {
        type_: KubeEventType::Normal,
        reason: "Defragmented".into(),
        note: Some(format!(
            "defragmented member {name} ({why}): {:.1} MiB reclaimed, {:.1} MiB -> {:.1} MiB{}",
            mib(reclaimed),
            mib(before),
            mib(after.db_size),
            if cleared.is_empty() {
                String::new()
            } else {
                format!("; NOSPACE alarm cleared for {}", cleared.join(", "))
            }
        )),
        action: "Defragment".into(),
        secondary: Some(member_ref(cluster, name)),
    };
    let _ = ctx.recorder.publish(&ev, &cluster.object_ref(&())).await;
    Ok(())
}

/// Disarms, through `endpoint`, the NOSPACE alarm of every member that
/// reported one in this round; the names of those cleared.
async fn disarm_no_space(
    written: &StatusWritten,
    ctx: &Context,
    endpoint: &str,
) -> Result<Vec<String>, ActError> {
    let mut cleared = Vec::new();
    for (member, status) in written.evaluated.observed.answered() {
        if status
            .alarms
            .contains(&steward_policy_sdk::AlarmKind::Nospace)
        {
            ctx.etcd
                .disarm_no_space(endpoint, status.member_id)
                .await
                .map_err(etcd(format!("AlarmDisarm NOSPACE of {member}")))?;
            cleared.push(member.to_string());
        }
    }
    Ok(cleared)
}

/// A reference to EtcdMember `name` of `cluster`, as an Event's related object.
fn member_ref(cluster: &EtcdCluster, name: &str) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(format!("{}/{}", crate::api::GROUP, crate::api::VERSION)),
        kind: Some("EtcdMember".into()),
        name: Some(name.to_owned()),
        namespace: cluster.namespace(),
        ..Default::default()
    }
}

/// The endpoint at which member `id` answered this round's Status.
fn answered_endpoint(written: &StatusWritten, id: Option<u64>) -> Option<String> {
    let id = id?;
    written
        .evaluated
        .observed
        .report()
        .into_iter()
        .flat_map(|r| r.endpoints.iter())
        .find_map(|p| match &p.outcome {
            steward_policy_sdk::ProbeOutcome::Answered(s) if s.member_id == id => {
                Some(p.endpoint.clone())
            }
            _ => None,
        })
}

fn leader_first_endpoints(written: &StatusWritten) -> Vec<String> {
    let e = &written.evaluated;
    let leader = e.observed.leader_id();
    let mut answered: Vec<(bool, String)> = e
        .observed
        .report()
        .into_iter()
        .flat_map(|r| r.endpoints.iter())
        .filter_map(|p| match &p.outcome {
            steward_policy_sdk::ProbeOutcome::Answered(s) => {
                Some((Some(s.member_id) != leader, p.endpoint.clone()))
            }
            _ => None,
        })
        .collect();
    answered.sort();
    answered.into_iter().map(|(_, e)| e).collect()
}

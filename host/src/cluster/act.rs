//! Stage 4: take at most one membership step, after the status is written.
//!
//! Failures here are recorded on the [`Context`] and appear in the next
//! status (`status.lastActionError`) and as a Warning Event; they never
//! change the status this reconcile already wrote.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::plan::Step;
use super::status::StatusWritten;
use crate::api::{EtcdCluster, EtcdMember};
use crate::context::Context;
use crate::error::{ActError, etcd, kube};
use crate::resources;
use crate::resources::FIELD_MANAGER;

pub async fn act(written: StatusWritten, ctx: &Context) -> Action {
    let e = &written.evaluated;
    let cluster = &e.observed.cluster;

    let result = async {
        ensure_services(cluster, ctx).await?;
        let step = &written.step;
        if step.changes_membership() {
            tracing::info!(?step, "membership step");
        }
        take(step, &written, ctx).await?;
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
            let message = err.to_string();
            tracing::warn!(error = %message, "action failed");
            let ev = KubeEvent {
                type_: KubeEventType::Warning,
                reason: "ActionFailed".into(),
                note: Some(crate::text::truncate(
                    &message,
                    crate::conditions::MAX_MESSAGE_BYTES,
                )),
                action: "Reconcile".into(),
                secondary: None,
            };
            let _ = ctx.recorder.publish(&ev, &cluster.object_ref(&())).await;
            ctx.record_action(cluster.as_ref(), Some(message));
            None
        }
    };

    // Membership in motion, or an unverified cluster, is looked at sooner.
    let busy = step.as_ref().is_none_or(|s| !matches!(s, Step::Idle)) || !e.verdict.verified;
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

async fn ensure_services(cluster: &EtcdCluster, ctx: &Context) -> Result<(), ActError> {
    let ns = cluster.namespace().unwrap_or_default();
    let api: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(ctx.client.clone(), &ns);
    for svc in [
        resources::headless_service(cluster)?,
        resources::client_service(cluster)?,
    ] {
        let key = format!("Service/{ns}/{}", svc.name_any());
        let live = ctx
            .stores
            .services
            .get(&ObjectRef::new(&svc.name_any()).within(&ns))
            .and_then(|s| s.resource_version());
        if !ctx.needs_apply(&key, &svc, live.as_deref()) {
            continue;
        }
        let applied = api
            .patch(
                &svc.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&svc),
            )
            .await
            .map_err(kube(format!("applying Service {}", svc.name_any())));
        ctx.record_apply(
            &key,
            &svc,
            applied.as_ref().ok().and_then(|a| a.resource_version()),
        );
        applied?;
    }
    Ok(())
}

async fn take(step: &Step, written: &StatusWritten, ctx: &Context) -> Result<(), ActError> {
    let e = &written.evaluated;
    let cluster = &e.observed.cluster;
    let ns = cluster.namespace().unwrap_or_default();
    let members: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), &ns);
    match step {
        Step::Idle | Step::Wait(_) => Ok(()),
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
            let initial = resources::seed_initial_cluster(&name, &cluster.name_any(), &ns);
            let member = resources::etcd_member(cluster, &name, &initial, true)?;
            members
                .create(&PostParams::default(), &member)
                .await
                .map_err(kube(format!("creating seed EtcdMember {name}")))?;
            Ok(())
        }
        Step::AddLearner => {
            let name = resources::new_member_name(&cluster.name_any());
            let peer = resources::member_peer_url(&name, &cluster.name_any(), &ns);
            let endpoints = leader_first_endpoints(written);
            let added = ctx
                .etcd
                .member_add_as_learner(&endpoints, std::slice::from_ref(&peer))
                .await
                .map_err(etcd(format!("MemberAddAsLearner {peer}")))?;
            let initial = joining(&added.members, &name, &peer)?;
            let member = resources::etcd_member(cluster, &name, &initial, false)?;
            members
                .create(&PostParams::default(), &member)
                .await
                .map_err(kube(format!("creating EtcdMember {name}")))?;
            Ok(())
        }
        Step::Adopt { name } => {
            let listed = e.observed.listed_members().unwrap_or_default();
            let peer = resources::member_peer_url(name, &cluster.name_any(), &ns);
            let initial = joining(listed, name, &peer)?;
            let member = resources::etcd_member(cluster, name, &initial, false)?;
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

//! Stage 2 of the member reconcile: write the member's status, before any
//! call on its Pod or PVC.

use kube::ResourceExt;
use kube::api::Api;
use steward_policy_sdk::ConditionStatus;

use super::observe::Observed;
use crate::api::{EtcdMember, EtcdMemberStatus, MemberRole, StorageMedium, write_whole_status};
use crate::conditions::{self, MemberState};
use crate::context::Context;
use crate::error::Error;
use crate::resources;

/// Proof that this reconcile wrote the member's status; [`super::act::act`]
/// needs one.
pub struct StatusWritten {
    pub(super) observed: Observed,
    pub(super) status: EtcdMemberStatus,
}

impl StatusWritten {
    pub fn status(&self) -> &EtcdMemberStatus {
        &self.status
    }
}

/// The status the observation implies.
pub fn next_status(o: &Observed, last_action_error: Option<String>) -> EtcdMemberStatus {
    let member = &o.member;
    let name = o.name();
    let prev = member.status.clone().unwrap_or_default();
    let summary = o.summary();
    let confirmed_id = summary.and_then(|s| s.id.clone());
    let desired = conditions::member_conditions(&MemberState {
        dormant: member.spec.dormant,
        pod_ready: o.facts.ready,
        pod_stuck: o.facts.stuck.clone(),
        listed: summary.map(|s| s.id.is_some()),
        member_id: confirmed_id
            .as_deref()
            .or(prev.member_id.as_deref())
            .and_then(|hex| u64::from_str_radix(hex, 16).ok()),
        spec_version: member.spec.version.clone(),
        running_version: summary.and_then(|s| s.version.clone()),
    });
    let mut desired = desired;
    if let Some(volume) = o.volume() {
        let refused = last_action_error
            .as_deref()
            .filter(|e| e.starts_with(super::volume::RESIZE_ACTION));
        desired.push(super::volume::condition(&volume, refused));
    }
    let ready = desired
        .iter()
        .any(|c| c.type_ == conditions::member::READY && c.status == ConditionStatus::True);
    let pod_uid = o.pod.as_ref().and_then(|p| p.uid());
    EtcdMemberStatus {
        member_id: confirmed_id.or(prev.member_id.clone()),
        pod_name: o.pod.as_ref().map(|p| p.name_any()),
        pod_uid: pod_uid.clone(),
        is_voter: summary.is_none_or(|s| matches!(s.role, MemberRole::Voter)),
        pvc_name: (!matches!(member.spec.storage.medium, StorageMedium::Memory))
            .then(|| resources::pvc_name(&name)),
        // Recorded once and kept: a later claim of the same name is not
        // the volume the data was on.
        pvc_uid: prev.pvc_uid.clone().or_else(|| {
            o.pvc
                .as_ref()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .and_then(|c| c.uid())
        }),
        pod_restarts: prev.pod_restarts + u32::from(o.newly_terminated),
        // Ready (Pod Ready and confirmed by etcd) ends a crash loop.
        consecutive_failures: if ready { 0 } else { o.failures() },
        failures_version: (!ready && o.failures() > 0).then(|| member.spec.version.clone()),
        last_terminated_pod_uid: if o.newly_terminated {
            pod_uid
        } else {
            prev.last_terminated_pod_uid.clone()
        },
        last_action_error: match (&o.cluster, last_action_error) {
            (Err(read), _) => Some(read.clone()),
            (Ok(_), e) => e,
        },
        version: summary
            .and_then(|s| s.version.clone())
            .or(prev.version.clone()),
        conditions: conditions::merge(
            &prev.conditions,
            &desired,
            member.metadata.generation.unwrap_or_default(),
            jiff::Timestamp::now(),
        ),
    }
}

pub async fn write(observed: Observed, ctx: &Context) -> Result<StatusWritten, Error> {
    let status = next_status(&observed, ctx.last_action_error(observed.member.as_ref()));
    let api: Api<EtcdMember> = Api::namespaced(
        ctx.client.clone(),
        &observed.member.namespace().unwrap_or_default(),
    );
    // Quiet at rest: an unchanged status is not written again.
    if observed.member.status.as_ref() != Some(&status) {
        // The whole status, lists replaced and emptied fields cleared.
        write_whole_status(&api, &observed.name(), &status)
            .await
            .map_err(Error::StatusWrite)?;
    }
    Ok(StatusWritten { observed, status })
}

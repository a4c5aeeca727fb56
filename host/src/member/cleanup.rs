//! MemberRemove for a deleted EtcdMember, in its finalizer: only with
//! verified quorum, decided by [`removal_decision`] (a pure function). A
//! member the cluster abandoned ([`crate::api::ANNOTATION_ABANDONED`]:
//! every voter's data was gone, and the cluster is being restored from a
//! snapshot) has no cluster left to be removed from, and is let go.

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use steward_policy_sdk::{self as sdk, quorum as majority};

use crate::api::{EtcdCluster, EtcdMember};
use crate::context::Context;
use crate::error::Error;
use crate::facts::quorum::{self, Quorum};
use crate::facts::{ProbeTarget, cluster_members, probe_cluster};
use crate::resources;

async fn cluster_of(member: &EtcdMember, ctx: &Context) -> Result<Option<EtcdCluster>, Error> {
    let ns = member.namespace().unwrap_or_default();
    let api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    api.get_opt(&member.spec.cluster).await.map_err(Error::Kube)
}

/// MemberRemove, only with verified quorum: a majority of the voters
/// answer and agree on a leader now, and the voters that remain after the
/// removal still form a quorum of the smaller cluster.
pub async fn cleanup(member: Arc<EtcdMember>, ctx: &Context) -> Result<Action, Error> {
    let Some(cluster) = cluster_of(&member, ctx).await? else {
        return Ok(Action::await_change());
    };
    if cluster.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Abandoned by a restore after total quorum loss: the etcd cluster it
    // was a member of is gone, so there is nothing to remove it from.
    if member
        .annotations()
        .contains_key(crate::api::ANNOTATION_ABANDONED)
    {
        return Ok(Action::await_change());
    }
    let name = member.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let targets: Vec<ProbeTarget> = cluster_members(ctx, &cluster)
        .iter()
        .map(|m| ProbeTarget {
            member: m.name_any(),
            endpoint: resources::member_client_url(
                resources::client_scheme(&cluster),
                &m.name_any(),
                &cluster.name_any(),
                &ns,
            ),
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
                .any(|u| resources::member_name_from_peer_url(u) == Some(name))
    }) else {
        return Removal::AlreadyGone;
    };
    let Quorum {
        leader,
        voters,
        agreeing,
    } = match quorum::confirmed(report) {
        Ok(q) => q,
        Err(why) => return Removal::Refuse(why),
    };
    if !target.is_learner {
        let remaining = agreeing.iter().filter(|&&id| id != target.id).count();
        if remaining < majority(voters.len() - 1) {
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
            sdk::ProbeOutcome::Answered(s) => {
                Some((Some(s.member_id) != leader, p.endpoint.clone()))
            }
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

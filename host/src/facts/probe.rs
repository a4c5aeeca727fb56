//! Probing a cluster's members over etcd's own API.

use std::future::Future;
use std::time::Duration;

use futures::future::join_all;
use steward_policy_sdk::{
    EndpointProbe, MemberListOutcome, ProbeError, ProbeErrorKind, ProbeOutcome, ProbeReport,
    QuorumReadOutcome,
};
use tokio::time::Instant;

use crate::etcd::{EtcdApi, Rpc, RpcError, StatusInfo};

/// One member to probe: its name (as the operator knows it) and its client URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeTarget {
    pub member: String,
    pub endpoint: String,
}

/// Probes every target and reports what each said, or how it failed.
///
/// 1. Status on every endpoint, in parallel, each within `deadline`.
/// 2. MemberList and a quorum read, in parallel, on an endpoint that
///    answered: the leader first, then other voters, then learners. A
///    failure moves on to the next candidate while time remains; both
///    share one further `deadline`.
///
/// When no endpoint answers, step 2 is not attempted (there is nobody to
/// ask), so the probe takes about one `deadline` even when every endpoint
/// hangs; at worst (endpoints answer Status, then hang) about two.
pub async fn probe_cluster(
    api: &dyn EtcdApi,
    targets: &[ProbeTarget],
    deadline: Duration,
) -> ProbeReport {
    let statuses = join_all(targets.iter().map(|t| {
        bounded(
            Rpc::Status,
            &t.endpoint,
            Instant::now() + deadline,
            api.status(&t.endpoint),
        )
    }))
    .await;

    let mut endpoints = Vec::with_capacity(targets.len());
    let mut answered: Vec<(&ProbeTarget, StatusInfo)> = Vec::new();
    for (target, status) in targets.iter().zip(statuses) {
        let outcome = match status {
            Ok(info) => {
                let outcome = ProbeOutcome::Answered((&info).into());
                answered.push((target, info));
                outcome
            }
            Err(e) => ProbeOutcome::Failed(e.to_probe_error()),
        };
        endpoints.push(EndpointProbe {
            member: target.member.clone(),
            endpoint: target.endpoint.clone(),
            outcome,
        });
    }

    if answered.is_empty() {
        return ProbeReport {
            endpoints,
            member_list: MemberListOutcome::NotAttempted,
            quorum_read: QuorumReadOutcome::NotAttempted,
        };
    }

    let candidates = by_preference(&answered);
    let until = Instant::now() + deadline;
    let (member_list, quorum_read) = futures::join!(
        first_success(Rpc::MemberList, &candidates, until, |ep| api
            .member_list(ep)),
        first_success(Rpc::QuorumRead, &candidates, until, |ep| api
            .quorum_read(ep)),
    );

    ProbeReport {
        endpoints,
        member_list: match member_list {
            Ok(members) => MemberListOutcome::Listed(members),
            Err(e) => MemberListOutcome::Failed(e),
        },
        quorum_read: match quorum_read {
            Ok(()) => QuorumReadOutcome::Succeeded,
            Err(e) => QuorumReadOutcome::Failed(e),
        },
    }
}

/// Answering endpoints, best first: the leader named by the highest term,
/// then voters that follow it, then other voters (a stale or no leader:
/// likely cut off), then learners (which serve neither MemberList nor
/// linearizable reads in etcd 3.5).
fn by_preference<'a>(answered: &[(&'a ProbeTarget, StatusInfo)]) -> Vec<&'a str> {
    let leader = answered
        .iter()
        .filter(|(_, s)| s.leader_id != 0)
        .max_by_key(|(_, s)| s.raft_term)
        .map(|(_, s)| s.leader_id);
    let mut ranked: Vec<(u8, &'a str)> = answered
        .iter()
        .map(|(t, s)| {
            let rank = if Some(s.member_id) == leader {
                0
            } else if s.is_learner {
                3
            } else if s.leader_id != 0 && Some(s.leader_id) == leader {
                1
            } else {
                2
            };
            (rank, t.endpoint.as_str())
        })
        .collect();
    ranked.sort_by_key(|(rank, _)| *rank);
    ranked.into_iter().map(|(_, ep)| ep).collect()
}

/// Tries `call` on each candidate until one succeeds or time runs out.
/// Reports the first candidate's failure (the best-placed endpoint's), with
/// the others' appended.
async fn first_success<'a, T, F, Fut>(
    rpc: Rpc,
    candidates: &[&'a str],
    until: Instant,
    call: F,
) -> Result<T, ProbeError>
where
    F: Fn(&'a str) -> Fut,
    Fut: Future<Output = Result<T, RpcError>>,
{
    let mut failures: Vec<RpcError> = Vec::new();
    for &endpoint in candidates {
        if Instant::now() >= until {
            break;
        }
        match bounded(rpc, endpoint, until, call(endpoint)).await {
            Ok(v) => return Ok(v),
            Err(e) => failures.push(e),
        }
    }
    let mut failures = failures.into_iter();
    let Some(first) = failures.next() else {
        return Err(ProbeError {
            kind: ProbeErrorKind::Timeout,
            message: format!("{rpc}: no time left to ask any endpoint"),
        });
    };
    let mut err = first.to_probe_error();
    let others: Vec<String> = failures.map(|e| e.to_probe_error().message).collect();
    if !others.is_empty() {
        err.message = format!("{}; also tried: {}", err.message, others.join("; "));
    }
    Err(err)
}

/// `call`, cut off at `until` whatever the client's own deadline, so a
/// misbehaving `EtcdApi` cannot stretch the probe.
async fn bounded<T>(
    rpc: Rpc,
    endpoint: &str,
    until: Instant,
    call: impl Future<Output = Result<T, RpcError>>,
) -> Result<T, RpcError> {
    match tokio::time::timeout_at(until, call).await {
        Ok(result) => result,
        Err(_) => Err(RpcError::new(
            rpc,
            endpoint,
            ProbeErrorKind::Timeout,
            "no answer within the probe deadline",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(
        member: &str,
        id: u64,
        leader: u64,
        term: u64,
        learner: bool,
    ) -> (ProbeTarget, StatusInfo) {
        (
            ProbeTarget {
                member: member.into(),
                endpoint: format!("http://{member}:2379"),
            },
            StatusInfo {
                member_id: id,
                leader_id: leader,
                raft_term: term,
                is_learner: learner,
                ..StatusInfo::default()
            },
        )
    }

    #[test]
    fn the_leader_of_the_newest_term_comes_first_and_learners_last() {
        // "b" still believes in the old leader "a" (term 2); "c" and "d"
        // have seen "c" elected in term 3.
        let owned = [
            answered("e", 5, 3, 3, true),
            answered("a", 1, 0, 2, false),
            answered("b", 2, 1, 2, false),
            answered("c", 3, 3, 3, false),
            answered("d", 4, 3, 3, false),
        ];
        let refs: Vec<(&ProbeTarget, StatusInfo)> =
            owned.iter().map(|(t, s)| (t, s.clone())).collect();
        let order: Vec<&str> = by_preference(&refs);
        assert_eq!(
            order,
            [
                "http://c:2379",
                "http://d:2379",
                "http://a:2379",
                "http://b:2379",
                "http://e:2379"
            ]
        );
    }
}

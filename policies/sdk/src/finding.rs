//! The one definition of a verified quorum. The host computes it from each
//! probe and hands it to the policy in `observation.quorum`; `policy test`
//! and the Rust SDK's case runner compute it the same way, here.
//!
//! The rule, from etcd's semantics:
//! - **Verified** when a linearizable read went through raft (etcd's
//!   ReadIndex): etcd serves one only with a quorum of its voters behind
//!   the leader, so it proves a quorum at that moment on its own, even
//!   when the operator reaches a single member.
//! - The Status answers add who is healthy: the leader is the one the most
//!   answering voters name (the lowest ID on a tie), never merely the first
//!   answer, so a stale member that answers first cannot outvote the rest;
//!   `agreeing` are the answering voters that name it.
//! - Otherwise nothing is verified, and why matters: **unreachable** when
//!   no endpoint answered (the operator cannot see etcd, which says nothing
//!   about etcd's quorum), **no-quorum** when an endpoint answered but no
//!   read went through (etcd itself shows no quorum now), **not-probed**
//!   when the host did not probe at all.
//!
//! What the operator cannot see (members that do not answer it) is a matter
//! for `Degraded`, not for whether a quorum exists.

use serde::{Deserialize, Serialize};

use crate::{MemberListOutcome, ProbeOutcome, ProbeReport, Probing, QuorumReadOutcome};

/// Why nothing was verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
pub enum UnverifiedKind {
    NotProbed,
    Unreachable,
    NoQuorum,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnverifiedQuorum {
    pub kind: UnverifiedKind,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VerifiedQuorum {
    #[serde(default, with = "crate::member_id::option")]
    #[cfg_attr(feature = "testing", schemars(with = "Option<crate::member_id::Hex>"))]
    pub leader: Option<u64>,
    #[serde(default, with = "crate::member_id::list")]
    #[cfg_attr(feature = "testing", schemars(with = "Vec<crate::member_id::Hex>"))]
    pub voters: Vec<u64>,
    #[serde(default, with = "crate::member_id::list")]
    #[cfg_attr(feature = "testing", schemars(with = "Vec<crate::member_id::Hex>"))]
    pub agreeing: Vec<u64>,
}

/// The host's finding on one observation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
pub enum QuorumFinding {
    Verified(VerifiedQuorum),
    Unverified(UnverifiedQuorum),
}

impl QuorumFinding {
    pub fn is_verified(&self) -> bool {
        matches!(self, Self::Verified(_))
    }

    /// Nothing was verified, and the host's facts show no quorum now.
    pub fn shows_no_quorum(&self) -> bool {
        matches!(
            self,
            Self::Unverified(UnverifiedQuorum {
                kind: UnverifiedKind::NoQuorum,
                ..
            })
        )
    }

    /// Why nothing was verified; `None` when a quorum was.
    pub fn unverified(&self) -> Option<&UnverifiedQuorum> {
        match self {
            Self::Verified(_) => None,
            Self::Unverified(u) => Some(u),
        }
    }

    /// The finding for one observation's probing.
    pub fn of(probing: &Probing) -> Self {
        match probing {
            Probing::Attempted(report) => Self::of_report(report),
            Probing::Skipped(why) => unverified(
                UnverifiedKind::NotProbed,
                format!("etcd was not probed: {why}"),
            ),
        }
    }

    /// The finding for one probe report.
    pub fn of_report(report: &ProbeReport) -> Self {
        let answers: Vec<&crate::EndpointStatus> = report
            .endpoints
            .iter()
            .filter_map(|p| match &p.outcome {
                ProbeOutcome::Answered(s) => Some(s),
                ProbeOutcome::Failed(_) => None,
            })
            .collect();
        if answers.is_empty() {
            return unverified(
                UnverifiedKind::Unreachable,
                format!(
                    "none of {} endpoints answered, so whether etcd has a quorum is unknown",
                    report.endpoints.len()
                ),
            );
        }
        match &report.quorum_read {
            QuorumReadOutcome::Succeeded => {}
            QuorumReadOutcome::Failed(e) => {
                return unverified(
                    UnverifiedKind::NoQuorum,
                    format!(
                        "{} of {} endpoints answered, but a linearizable read failed: {}",
                        answers.len(),
                        report.endpoints.len(),
                        e.message
                    ),
                );
            }
            QuorumReadOutcome::NotAttempted => {
                return unverified(
                    UnverifiedKind::NoQuorum,
                    format!(
                        "{} of {} endpoints answered, but no linearizable read was made",
                        answers.len(),
                        report.endpoints.len()
                    ),
                );
            }
        }
        let voters: Vec<u64> = match &report.member_list {
            MemberListOutcome::Listed(list) => list
                .iter()
                .filter(|m| !m.is_learner)
                .map(|m| m.id)
                .collect(),
            _ => Vec::new(),
        };
        // Without the member list, an answer's own is-learner says who votes.
        let votes = |s: &crate::EndpointStatus| {
            !s.is_learner && (voters.is_empty() || voters.contains(&s.member_id))
        };
        let mut voting: Vec<&crate::EndpointStatus> = Vec::new();
        for &s in answers.iter().filter(|s| votes(s)) {
            if !voting.iter().any(|v| v.member_id == s.member_id) {
                voting.push(s);
            }
        }
        let leader = most_named_leader(&voting);
        let agreeing = voting
            .iter()
            .filter(|s| leader.is_some_and(|l| s.leader_id == l))
            .map(|s| s.member_id)
            .collect();
        Self::Verified(VerifiedQuorum {
            leader,
            voters,
            agreeing,
        })
    }
}

fn unverified(kind: UnverifiedKind, message: String) -> QuorumFinding {
    QuorumFinding::Unverified(UnverifiedQuorum { kind, message })
}

/// The non-zero leader the most `voting` answers name; the lowest ID on a tie.
fn most_named_leader(voting: &[&crate::EndpointStatus]) -> Option<u64> {
    let mut counts: Vec<(u64, usize)> = Vec::new();
    for id in voting.iter().map(|s| s.leader_id).filter(|&l| l != 0) {
        match counts.iter_mut().find(|(l, _)| *l == id) {
            Some((_, n)) => *n += 1,
            None => counts.push((id, 1)),
        }
    }
    counts
        .into_iter()
        .max_by(|(a, na), (b, nb)| na.cmp(nb).then(b.cmp(a)))
        .map(|(id, _)| id)
}

impl QuorumFinding {
    /// A few words for messages: "verified (leader 8e9e…)" or
    /// "unverified (NoQuorum)".
    pub fn summary(&self) -> String {
        match self {
            Self::Verified(q) => match q.leader {
                Some(l) => format!("verified (leader {l:x})"),
                None => "verified (no leader named)".to_owned(),
            },
            Self::Unverified(u) => format!("unverified ({:?})", u.kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EndpointProbe, EndpointStatus, EtcdMember, ProbeError, ProbeErrorKind};

    fn answer(id: u64, leader: u64) -> EndpointProbe {
        EndpointProbe {
            member: format!("m{id}"),
            endpoint: format!("http://m{id}:2379"),
            outcome: ProbeOutcome::Answered(EndpointStatus {
                member_id: id,
                leader_id: leader,
                ..EndpointStatus::default()
            }),
        }
    }

    fn silent(id: u64) -> EndpointProbe {
        EndpointProbe {
            member: format!("m{id}"),
            endpoint: format!("http://m{id}:2379"),
            outcome: ProbeOutcome::Failed(ProbeError {
                kind: ProbeErrorKind::Timeout,
                message: "deadline".into(),
            }),
        }
    }

    fn listed(ids: &[u64]) -> MemberListOutcome {
        MemberListOutcome::Listed(
            ids.iter()
                .map(|&id| EtcdMember {
                    id,
                    ..EtcdMember::default()
                })
                .collect(),
        )
    }

    fn report(endpoints: Vec<EndpointProbe>, list: MemberListOutcome, read: bool) -> ProbeReport {
        ProbeReport {
            endpoints,
            member_list: list,
            quorum_read: if read {
                QuorumReadOutcome::Succeeded
            } else {
                QuorumReadOutcome::Failed(ProbeError {
                    kind: ProbeErrorKind::Timeout,
                    message: "etcdserver: request timed out".into(),
                })
            },
        }
    }

    fn verified(r: &ProbeReport) -> VerifiedQuorum {
        match QuorumFinding::of_report(r) {
            QuorumFinding::Verified(q) => q,
            other => panic!("expected verified, got {other:?}"),
        }
    }

    #[test]
    fn a_stale_leader_that_answers_first_does_not_outvote_the_majority() {
        // m1 still believes 9 leads; m2 and m3 agree on 2.
        let r = report(
            vec![answer(1, 9), answer(2, 2), answer(3, 2)],
            listed(&[1, 2, 3]),
            true,
        );
        let q = verified(&r);
        assert_eq!(q.leader, Some(2));
        assert_eq!(q.agreeing, [2, 3]);
        assert_eq!(q.voters, [1, 2, 3]);
    }

    #[test]
    fn a_tie_names_the_lowest_id() {
        let r = report(vec![answer(1, 7), answer(2, 5)], listed(&[1, 2, 3]), true);
        assert_eq!(verified(&r).leader, Some(5));
    }

    #[test]
    fn a_read_proves_a_quorum_even_with_one_member_answering_and_no_list() {
        let r = report(
            vec![answer(1, 1), silent(2), silent(3)],
            MemberListOutcome::Failed(ProbeError {
                kind: ProbeErrorKind::Timeout,
                message: "deadline".into(),
            }),
            true,
        );
        let q = verified(&r);
        assert!(q.voters.is_empty(), "no list, no voters");
        assert_eq!(q.agreeing, [1]);
    }

    #[test]
    fn status_answers_alone_never_verify() {
        let r = report(
            vec![answer(1, 1), answer(2, 1), answer(3, 1)],
            listed(&[1, 2, 3]),
            false,
        );
        let f = QuorumFinding::of_report(&r);
        assert!(f.shows_no_quorum(), "{f:?}");
        assert!(
            f.unverified()
                .unwrap()
                .message
                .contains("linearizable read failed")
        );
    }

    #[test]
    fn nobody_answering_is_unreachable_and_not_probing_is_not_probed() {
        let mut r = report(
            vec![silent(1), silent(2)],
            MemberListOutcome::NotAttempted,
            false,
        );
        r.quorum_read = QuorumReadOutcome::NotAttempted;
        let f = QuorumFinding::of_report(&r);
        assert_eq!(
            f.unverified().map(|u| u.kind),
            Some(UnverifiedKind::Unreachable)
        );
        let f = QuorumFinding::of(&Probing::Skipped("every member is dormant".into()));
        assert_eq!(
            f.unverified().map(|u| u.kind),
            Some(UnverifiedKind::NotProbed)
        );
    }

    #[test]
    fn learners_and_members_etcd_does_not_list_as_voters_never_agree() {
        let mut learner = answer(4, 2);
        if let ProbeOutcome::Answered(s) = &mut learner.outcome {
            s.is_learner = true;
        }
        let r = report(
            vec![answer(1, 2), learner, answer(5, 2)],
            listed(&[1, 2, 3]),
            true,
        );
        assert_eq!(verified(&r).agreeing, [1]);
    }

    #[test]
    fn a_file_may_state_the_finding_only_as_probing_shows_it() {
        let file = |quorum: serde_json::Value| {
            let mut o = serde_json::json!({
                "spec": {"desiredReplicas": 1},
                "probing": {"Attempted": {
                    "endpoints": [{"member": "m1", "endpoint": "http://m1:2379",
                        "outcome": {"Answered": {"memberId": "1", "leaderId": "1"}}}],
                    "quorumRead": "Succeeded"
                }},
                "now": 1
            });
            if !quorum.is_null() {
                o["quorum"] = quorum;
            }
            o.to_string()
        };
        let parsed: crate::Observation =
            serde_json::from_str(&file(serde_json::Value::Null)).unwrap();
        assert!(parsed.quorum.is_verified(), "computed when left out");
        let same: crate::Observation =
            serde_json::from_str(&file(serde_json::to_value(&parsed.quorum).unwrap())).unwrap();
        assert_eq!(same, parsed, "stating exactly the finding is accepted");
        let wrong = file(serde_json::json!({"Unverified": {"kind": "NoQuorum", "message": "x"}}));
        let err = serde_json::from_str::<crate::Observation>(&wrong).unwrap_err();
        assert!(err.to_string().contains("the host's finding"), "{err}");
    }
}

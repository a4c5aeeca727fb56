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

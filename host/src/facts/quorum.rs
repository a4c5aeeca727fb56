//! Whether etcd itself confirmed a quorum in one probe: the host's own
//! check, which neither a policy nor a stale cache can talk it out of. Every
//! membership change, every `lastVerifiedTime` and every MemberRemove
//! depends on it.

use steward_policy_sdk::{self as sdk, quorum};

/// A quorum etcd confirmed: a linearizable (quorum) read went through, and
/// a majority of the listed voters answered Status and agree on one leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quorum {
    pub leader: u64,
    /// Voter IDs from etcd's member list.
    pub voters: Vec<u64>,
    /// The voters that answered with `leader`.
    pub agreeing: Vec<u64>,
}

/// The quorum `report` shows, or why it shows none.
pub fn confirmed(report: &sdk::ProbeReport) -> Result<Quorum, String> {
    let sdk::MemberListOutcome::Listed(listed) = &report.member_list else {
        return Err("etcd's member list could not be read".into());
    };
    match &report.quorum_read {
        sdk::QuorumReadOutcome::Succeeded => {}
        sdk::QuorumReadOutcome::Failed(e) => {
            return Err(format!("the quorum read failed: {}", e.message));
        }
        sdk::QuorumReadOutcome::NotAttempted => return Err("no quorum read was made".into()),
    }
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
            sdk::ProbeOutcome::Failed(_) => None,
        })
        .collect();
    let Some(leader) = answered.iter().map(|s| s.leader_id).find(|&l| l != 0) else {
        return Err("no member reports a leader".into());
    };
    let agreeing: Vec<u64> = answered
        .iter()
        .filter(|s| s.leader_id == leader && voters.contains(&s.member_id))
        .map(|s| s.member_id)
        .collect();
    if voters.is_empty() || agreeing.len() < quorum(voters.len()) {
        return Err(format!(
            "only {} of {} voters answer with leader {leader:x}",
            agreeing.len(),
            voters.len()
        ));
    }
    Ok(Quorum {
        leader,
        voters,
        agreeing,
    })
}

/// The same for an observation, which may not have probed at all.
pub fn confirmed_in(probing: &sdk::Probing) -> Result<Quorum, String> {
    match probing {
        sdk::Probing::Attempted(report) => confirmed(report),
        sdk::Probing::Skipped(why) => Err(format!("etcd was not probed: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(
        answering: &[(u64, u64)],
        voters: &[u64],
        read: sdk::QuorumReadOutcome,
    ) -> sdk::ProbeReport {
        sdk::ProbeReport {
            endpoints: voters
                .iter()
                .map(|id| sdk::EndpointProbe {
                    member: format!("m{id}"),
                    endpoint: format!("http://m{id}:2379"),
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
                voters
                    .iter()
                    .map(|id| sdk::EtcdMember {
                        id: *id,
                        name: format!("m{id}"),
                        ..Default::default()
                    })
                    .collect(),
            ),
            quorum_read: read,
        }
    }

    #[test]
    fn a_majority_agreeing_on_a_leader_after_a_quorum_read_is_a_quorum() {
        let ok = sdk::QuorumReadOutcome::Succeeded;
        let q = confirmed(&report(&[(1, 1), (2, 1)], &[1, 2, 3], ok.clone())).unwrap();
        assert_eq!((q.leader, q.agreeing.len(), q.voters.len()), (1, 2, 3));
        assert!(confirmed(&report(&[(1, 1)], &[1, 2, 3], ok.clone())).is_err());
        // Two answer, but with different leaders: no agreement.
        assert!(confirmed(&report(&[(1, 1), (2, 2)], &[1, 2, 3], ok)).is_err());
    }

    #[test]
    fn no_quorum_without_a_quorum_read_or_a_member_list() {
        let failed = sdk::QuorumReadOutcome::Failed(sdk::ProbeError {
            kind: sdk::ProbeErrorKind::Timeout,
            message: "deadline".into(),
        });
        let all = [(1, 1), (2, 1), (3, 1)];
        let why = confirmed(&report(&all, &[1, 2, 3], failed)).unwrap_err();
        assert!(why.contains("quorum read failed"), "{why}");
        let mut r = report(&all, &[1, 2, 3], sdk::QuorumReadOutcome::Succeeded);
        r.member_list = sdk::MemberListOutcome::NotAttempted;
        assert!(confirmed(&r).is_err());
        assert!(confirmed_in(&sdk::Probing::Skipped("no members".into())).is_err());
    }
}

//! The one definition of "verified", end to end without a cluster: over
//! generated observations, the embedded default policy's verdict is never
//! rejected by the host's checks (`cluster::evaluate::judge`), and what the
//! status would show agrees with the host's finding.

use etcd_steward::cluster::evaluate::judge;
use etcd_steward::policy::{EngineConfig, PolicyEngine};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use steward_policy_sdk::{
    ClusterSpec, ConditionStatus, EndpointProbe, EndpointStatus, EtcdMember, HostPhase, Member,
    MemberListOutcome, MemberRole, Observation, PodPhase, ProbeError, ProbeErrorKind, ProbeOutcome,
    ProbeReport, Probing, QuorumFinding, QuorumReadOutcome, UnverifiedKind,
};

/// One random observation: 1 to 7 members (some learners), each answering
/// or failing, leaders that agree or not (a stale one included), a member
/// list and a quorum read that succeed, fail or were not made, sometimes
/// nothing probed at all.
fn observation(rng: &mut StdRng) -> Observation {
    let n = rng.random_range(1..=7u64);
    let ids: Vec<u64> = (1..=n).map(|i| 0x100 + i).collect();
    let learner = |id: u64| n > 1 && id == ids[ids.len() - 1] && rng_bool(id, 3);
    let leader = ids[0];
    let stale = 0x999;
    let members: Vec<Member> = ids
        .iter()
        .map(|&id| Member {
            name: format!("m{id:x}"),
            role: if learner(id) {
                MemberRole::Learner
            } else {
                MemberRole::Voter
            },
            member_id: Some(id),
            endpoint: format!("http://m{id:x}:2379"),
            pod_phase: PodPhase::Running,
            pod_ready: true,
            ..Member::default()
        })
        .collect();
    let endpoints: Vec<EndpointProbe> = ids
        .iter()
        .map(|&id| EndpointProbe {
            member: format!("m{id:x}"),
            endpoint: format!("http://m{id:x}:2379"),
            outcome: if rng.random_bool(0.6) {
                ProbeOutcome::Answered(EndpointStatus {
                    member_id: id,
                    leader_id: match rng.random_range(0..10) {
                        0 => 0,
                        1 => stale,
                        _ => leader,
                    },
                    is_learner: learner(id),
                    version: "3.6.6".into(),
                    ..EndpointStatus::default()
                })
            } else {
                ProbeOutcome::Failed(ProbeError {
                    kind: ProbeErrorKind::Timeout,
                    message: "context deadline exceeded".into(),
                })
            },
        })
        .collect();
    let answered = endpoints
        .iter()
        .any(|p| matches!(p.outcome, ProbeOutcome::Answered(_)));
    let failed = || ProbeError {
        kind: ProbeErrorKind::Timeout,
        message: "etcdserver: request timed out".into(),
    };
    let (member_list, quorum_read) = if !answered {
        (
            MemberListOutcome::NotAttempted,
            QuorumReadOutcome::NotAttempted,
        )
    } else {
        (
            match rng.random_range(0..4) {
                0 => MemberListOutcome::Failed(failed()),
                _ => MemberListOutcome::Listed(
                    ids.iter()
                        .map(|&id| EtcdMember {
                            id,
                            name: format!("m{id:x}"),
                            is_learner: learner(id),
                            ..EtcdMember::default()
                        })
                        .collect(),
                ),
            },
            match rng.random_range(0..3) {
                0 => QuorumReadOutcome::Failed(failed()),
                _ => QuorumReadOutcome::Succeeded,
            },
        )
    };
    let probing = if rng.random_range(0..12) == 0 {
        Probing::Skipped("the TLS Secret is missing".into())
    } else {
        Probing::Attempted(ProbeReport {
            endpoints,
            member_list,
            quorum_read,
        })
    };
    let now = 1_800_000_000_000;
    let mut history = steward_policy_sdk::History::default();
    if rng.random_bool(0.5) {
        history.last_verified = Some(now - rng.random_range(0..120_000));
        history.previous_conditions = vec![steward_policy_sdk::PreviousCondition {
            type_: "Available".into(),
            status: ConditionStatus::True,
            reason: "QuorumHealthy".into(),
            since: now - 600_000,
        }];
    }
    Observation {
        cluster: Default::default(),
        spec: ClusterSpec {
            desired_replicas: if rng.random_bool(0.8) {
                n as u32
            } else {
                rng.random_range(1..=7)
            },
            version: "3.6.6".into(),
            quota_backend_bytes: None,
        },
        phase: match rng.random_range(0..6) {
            0 => HostPhase::ScalingUp,
            1 => HostPhase::ScalingDown,
            _ => HostPhase::Steady,
        },
        members,
        quorum: QuorumFinding::of(&probing),
        probing,
        history,
        backup: None,
        tls: Default::default(),
        now,
        settings: "{}".into(),
    }
}

/// A fixed coin per member ID, so one observation agrees with itself.
fn rng_bool(id: u64, one_in: u64) -> bool {
    id.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .is_multiple_of(one_in)
}

#[test]
fn the_default_policy_is_never_rejected_and_agrees_with_the_finding() {
    let engine = PolicyEngine::new(EngineConfig::default()).expect("the engine starts");
    let policy = engine.default_policy();
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let mut seen = [0usize; 4];
    for i in 0..1500 {
        let obs = observation(&mut rng);
        let judged = judge(&obs, policy.evaluate(&obs));
        assert!(
            judged.problem.is_none(),
            "case {i}: the default policy's verdict was rejected: {:?}\nobservation: {}",
            judged.problem.as_ref().map(|p| p.message()),
            serde_json::to_string(&obs).unwrap()
        );
        let available = judged.verdict.condition("Available").unwrap();
        match obs.quorum.unverified().map(|u| u.kind) {
            None => {
                seen[0] += 1;
                // Verified by the host: the policy says so, unless it
                // declines for its own reason and then says QuorumLost.
                if judged.verified {
                    assert_eq!(available.status, ConditionStatus::True, "case {i}");
                } else {
                    assert_eq!(available.reason, "QuorumLost", "case {i}");
                }
            }
            Some(UnverifiedKind::Unreachable) => {
                seen[1] += 1;
                assert_eq!(available.reason, "ClusterUnreachable", "case {i}");
                assert!(!judged.verified);
            }
            Some(UnverifiedKind::NoQuorum) => {
                seen[2] += 1;
                assert_eq!(available.reason, "QuorumLost", "case {i}");
                assert!(!judged.verified);
            }
            Some(UnverifiedKind::NotProbed) => {
                seen[3] += 1;
                assert!(!judged.verified);
            }
        }
    }
    assert!(
        seen.iter().all(|&n| n > 20),
        "every kind of finding is generated: {seen:?}"
    );
}

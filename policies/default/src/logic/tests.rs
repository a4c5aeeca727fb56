use super::*;

#[test]
fn rfc3339_matches_known_instants() {
    let mut s = String::new();
    push_rfc3339(&mut s, 0);
    assert_eq!(s, "1970-01-01T00:00:00Z");
    s.clear();
    // 2024-02-29T12:34:56Z, a leap day.
    push_rfc3339(&mut s, 1_709_210_096_000);
    assert_eq!(s, "2024-02-29T12:34:56Z");
    s.clear();
    push_rfc3339(&mut s, 1_796_169_600_999);
    assert_eq!(s, "2026-12-02T00:00:00Z");
}

use steward_policy_sdk::{EndpointProbe, Member, ProbeReport};

fn member(name: &str, id: u64) -> Member {
    Member {
        name: name.to_owned(),
        member_id: Some(id),
        endpoint: format!("https://{name}.etcd.ns.svc:2379"),
        pod_phase: PodPhase::Running,
        pod_ready: true,
        ..Member::default()
    }
}

fn answer(name: &str, id: u64, leader: u64) -> EndpointProbe {
    EndpointProbe {
        member: name.to_owned(),
        endpoint: format!("https://{name}.etcd.ns.svc:2379"),
        outcome: ProbeOutcome::Answered(EndpointStatus {
            member_id: id,
            leader_id: leader,
            ..EndpointStatus::default()
        }),
    }
}

fn fail(name: &str, kind: ProbeErrorKind, message: &str) -> EndpointProbe {
    EndpointProbe {
        member: name.to_owned(),
        endpoint: format!("https://{name}.etcd.ns.svc:2379"),
        outcome: ProbeOutcome::Failed(ProbeError {
            kind,
            message: message.to_owned(),
        }),
    }
}

fn observation(desired: u32, members: Vec<Member>, endpoints: Vec<EndpointProbe>) -> Observation {
    let probing = Probing::Attempted(ProbeReport {
        endpoints,
        member_list: MemberListOutcome::NotAttempted,
        quorum_read: QuorumReadOutcome::NotAttempted,
    });
    Observation {
        cluster: Default::default(),
        spec: steward_policy_sdk::ClusterSpec {
            desired_replicas: desired,
            ..Default::default()
        },
        phase: HostPhase::Steady,
        members,
        quorum: steward_policy_sdk::QuorumFinding::of(&probing),
        probing,
        history: Default::default(),
        backup: None,
        tls: Default::default(),
        now: 1_796_169_600_000,
        settings: "{}".to_owned(),
    }
}

fn available(v: &Verdict) -> &Condition {
    v.condition(AVAILABLE).unwrap()
}

#[test]
fn a_member_probed_twice_counts_once_toward_quorum() {
    let obs = observation(
        3,
        vec![member("a", 1), member("b", 2), member("c", 3)],
        vec![
            answer("a", 1, 1),
            answer("a", 1, 1),
            fail("b", ProbeErrorKind::Refused, "refused"),
            fail("c", ProbeErrorKind::Refused, "refused"),
        ],
    );
    let v = evaluate(&obs, &Settings::default());
    assert_eq!(available(&v).status, ConditionStatus::False);
    assert_eq!(available(&v).reason, "QuorumLost");
    assert!(!obs.quorum.is_verified(), "no linearizable read was made");
}

#[test]
fn a_leader_outside_etcds_member_list_is_not_agreed_on() {
    let mut obs = observation(
        3,
        vec![member("a", 1), member("b", 2), member("c", 3)],
        vec![answer("a", 1, 99), answer("b", 2, 99), answer("c", 3, 99)],
    );
    let Probing::Attempted(report) = &mut obs.probing else {
        unreachable!()
    };
    report.member_list = MemberListOutcome::Listed(
        [1, 2, 3]
            .map(|id| steward_policy_sdk::EtcdMember {
                id,
                ..Default::default()
            })
            .to_vec(),
    );
    let v = evaluate(&obs, &Settings::default());
    assert_eq!(available(&v).reason, "QuorumLost", "{:?}", available(&v));
}

#[test]
fn messages_stay_under_a_kibibyte_with_many_long_errors() {
    let long = "x".repeat(5000);
    let members: Vec<Member> = (0..60)
        .map(|i| member(&format!("etcd-{i:02}"), i + 1))
        .collect();
    let endpoints = (0..60)
        .map(|i| {
            let kind = KINDS[i % KINDS.len()];
            fail(&format!("etcd-{i:02}"), kind, &long)
        })
        .collect();
    let mut obs = observation(60, members, endpoints);
    for m in &mut obs.members {
        m.pod_ready = false;
        m.pod_phase = PodPhase::Failed;
    }
    let v = evaluate(&obs, &Settings::default());
    for c in &v.conditions {
        assert!(
            c.message.len() <= 1024,
            "{} is {} bytes",
            c.type_,
            c.message.len()
        );
    }
    assert_eq!(available(&v).reason, "ClusterUnreachable");
    let degraded = v.condition(DEGRADED).unwrap();
    assert!(degraded.message.contains(" more"), "{}", degraded.message);
}

#[test]
fn a_clock_gone_backwards_keeps_the_verdict_without_a_negative_age() {
    let mut obs = observation(1, vec![member("a", 1)], vec![]);
    obs.probing = Probing::Skipped("no secret".into());
    obs.history.last_verified = Some(obs.now + 5_000);
    obs.history.previous_conditions = vec![steward_policy_sdk::PreviousCondition {
        type_: AVAILABLE.into(),
        status: ConditionStatus::True,
        reason: "QuorumHealthy".into(),
        since: 0,
    }];
    let v = evaluate(&obs, &Settings::default());
    assert_eq!(available(&v).status, ConditionStatus::True);
    assert!(
        available(&v).message.contains("(0s ago"),
        "{}",
        available(&v).message
    );
}

#[test]
fn truncation_respects_char_boundaries() {
    let mut out = String::new();
    push_limited(&mut out, "ééééé", 3);
    assert_eq!(out, "é…");
    out.clear();
    push_limited(&mut out, "short", 10);
    assert_eq!(out, "short");
}

#[test]
fn endpoint_host_strips_scheme_and_port() {
    assert_eq!(
        endpoint_host("https://etcd-a.etcd.ns.svc:2379", "m"),
        "etcd-a.etcd.ns.svc"
    );
    assert_eq!(endpoint_host("etcd-a:2379", "m"), "etcd-a");
    assert_eq!(endpoint_host("", "member"), "member");
}

#[test]
fn invalid_settings_use_defaults_and_warn() {
    let mut obs = observation(1, vec![member("a", 1)], vec![answer("a", 1, 1)]);
    if let Probing::Attempted(report) = &mut obs.probing {
        report.quorum_read = QuorumReadOutcome::Succeeded;
    }
    obs.quorum = steward_policy_sdk::QuorumFinding::of(&obs.probing);
    obs.settings = r#"{"staleAfterSeconds": -1}"#.into();
    let v = evaluate_json_settings(&obs);
    assert_eq!(available(&v).status, ConditionStatus::True);
    assert_eq!(v.events.len(), 1);
    assert_eq!(v.events[0].type_, EventType::Warning);
    assert_eq!(v.events[0].reason, "InvalidSettings");
    assert!(
        v.events[0].message.contains("staleAfterSeconds"),
        "{}",
        v.events[0].message
    );
}

#[test]
fn describe_names_the_owned_conditions_and_a_json_schema() {
    let info = describe();
    assert_eq!(info.name, "steward-default-policy");
    assert_eq!(info.condition_types, ["Available", "Degraded"]);
    let schema: serde_json::Value = serde_json::from_str(&info.settings_schema).unwrap();
    assert_eq!(schema["type"], "object");
}

#[test]
fn durations_show_their_two_largest_units() {
    let cases = [
        (0, "0s"),
        (999, "0s"),
        (12_000, "12s"),
        (250_000, "4m10s"),
        (3_600_000, "1h"),
        (18_720_000, "5h12m"),
        (183_600_000, "2d3h"),
        (172_800_000 + 59_000, "2d"),
        (-5, "0s"),
    ];
    for (ms, want) in cases {
        let mut out = String::new();
        push_duration(&mut out, ms);
        assert_eq!(out, want, "{ms} ms");
    }
}

#[test]
fn an_interval_of_zero_is_never_overdue() {
    let mut obs = observation(1, vec![member("a", 1)], vec![answer("a", 1, 1)]);
    if let Probing::Attempted(report) = &mut obs.probing {
        report.quorum_read = QuorumReadOutcome::Succeeded;
    }
    obs.quorum = steward_policy_sdk::QuorumFinding::of(&obs.probing);
    // Any age is more than twice nothing: only the guard keeps this healthy.
    obs.backup = Some(steward_policy_sdk::BackupFacts {
        schedule: "s".into(),
        schedule_created: 0,
        interval_ms: 0,
        last_success: None,
    });
    let v = evaluate(&obs, &Settings::default());
    assert_eq!(v.condition(DEGRADED).unwrap().reason, "MembersHealthy");
}

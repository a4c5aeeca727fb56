//! The condition pipeline as the status writer runs it: desired, merge,
//! transitions.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition as MetaCondition, Time};
use steward_policy_sdk::{Condition, ConditionStatus, EventType, HostPhase};

use super::*;
use ConditionStatus::{False, True, Unknown};

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn policy_healthy() -> Vec<Condition> {
    vec![
        Condition::new(AVAILABLE, True, "QuorumHealthy", "3 of 3 members healthy"),
        Condition::new(DEGRADED, False, "MembersHealthy", "all members healthy"),
    ]
}

fn policy_outage() -> Vec<Condition> {
    vec![
        Condition::new(AVAILABLE, False, "QuorumLost", "0 of 3 members answered"),
        Condition::new(DEGRADED, True, "MembersUnhealthy", "3 members unreachable"),
    ]
}

fn get<'a>(conds: &'a [MetaCondition], type_: &str) -> &'a MetaCondition {
    conds
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {conds:?}"))
}

fn types(conds: &[MetaCondition]) -> Vec<&str> {
    conds.iter().map(|c| c.type_.as_str()).collect()
}

/// Reconcile: desired + merge, as the status writer does it.
fn reconcile(
    stored: &[MetaCondition],
    policy: &[Condition],
    phase: HostPhase,
    stall: Option<&Stall>,
    generation: i64,
    now: Timestamp,
) -> Vec<MetaCondition> {
    merge(
        stored,
        &desired(policy, &[], phase, stall, None, None),
        generation,
        now,
    )
}

#[test]
fn first_reconcile_without_a_verdict_writes_every_condition_as_unknown() {
    let after = reconcile(&[], &[], HostPhase::Bootstrapping, None, 1, t(0));
    assert_eq!(
        types(&after),
        [
            AVAILABLE,
            READY,
            DEGRADED,
            PROGRESSING,
            RECONCILING,
            STALLED
        ]
    );
    for type_ in [AVAILABLE, READY, DEGRADED] {
        let c = get(&after, type_);
        assert_eq!(c.status, "Unknown", "{type_}");
        assert!(!c.reason.is_empty());
    }
    // The host knows what it is doing even before the policy speaks.
    assert_eq!(get(&after, RECONCILING).status, "True");
    assert_eq!(get(&after, RECONCILING).reason, "Bootstrapping");
    assert_eq!(get(&after, PROGRESSING).status, "True");
    assert_eq!(get(&after, STALLED).status, "False");
    for c in &after {
        assert_eq!(c.observed_generation, Some(1), "{}", c.type_);
        assert_eq!(c.last_transition_time, Time(t(0)), "{}", c.type_);
    }
}

#[test]
fn ready_mirrors_available_through_an_outage_and_back() {
    let healthy = reconcile(&[], &policy_healthy(), HostPhase::Steady, None, 2, t(0));
    assert_eq!(get(&healthy, READY).status, "True");
    assert_eq!(get(&healthy, READY).reason, "QuorumHealthy");

    let outage = reconcile(
        &healthy,
        &policy_outage(),
        HostPhase::Steady,
        None,
        2,
        t(10),
    );
    let ready = get(&outage, READY);
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason, "QuorumLost");
    assert_eq!(ready.message, "0 of 3 members answered");
    assert_eq!(ready.last_transition_time, Time(t(10)));

    let back = reconcile(
        &outage,
        &policy_healthy(),
        HostPhase::Steady,
        None,
        2,
        t(20),
    );
    assert_eq!(get(&back, READY).status, "True");
    assert_eq!(get(&back, AVAILABLE).last_transition_time, Time(t(20)));
}

#[test]
fn unchanged_status_keeps_its_transition_time_even_when_reason_and_message_change() {
    let first = reconcile(&[], &policy_outage(), HostPhase::Steady, None, 3, t(0));
    let unreachable = vec![
        Condition::new(
            AVAILABLE,
            False,
            "ClusterUnreachable",
            "no endpoint answered",
        ),
        Condition::new(DEGRADED, True, "MembersUnhealthy", "3 members unreachable"),
    ];
    let second = reconcile(&first, &unreachable, HostPhase::Steady, None, 4, t(30));
    let available = get(&second, AVAILABLE);
    assert_eq!(available.last_transition_time, Time(t(0)));
    assert_eq!(available.reason, "ClusterUnreachable");
    assert_eq!(available.message, "no endpoint answered");
    // The generation moves on every condition, changed or not.
    assert!(second.iter().all(|c| c.observed_generation == Some(4)));
}

#[test]
fn a_merge_of_the_same_verdict_is_a_fixed_point() {
    let first = reconcile(&[], &policy_healthy(), HostPhase::Steady, None, 5, t(0));
    let again = reconcile(&first, &policy_healthy(), HostPhase::Steady, None, 5, t(60));
    assert_eq!(first, again);
    assert!(transitions(&first, &again).is_empty());
}

#[test]
fn reconciling_is_true_only_while_membership_changes() {
    for (phase, status, reason) in [
        (HostPhase::Bootstrapping, "True", "Bootstrapping"),
        (HostPhase::ScalingUp, "True", "ScalingUp"),
        (HostPhase::ScalingDown, "True", "ScalingDown"),
        (HostPhase::Steady, "False", "Steady"),
        (HostPhase::Paused, "False", "Paused"),
        (HostPhase::Deleting, "False", "Deleting"),
    ] {
        let after = reconcile(&[], &policy_healthy(), phase, None, 1, t(0));
        let c = get(&after, RECONCILING);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            (status, reason),
            "{phase:?}"
        );
    }
}

#[test]
fn a_paused_cluster_is_ready_but_not_available() {
    let paused = vec![
        Condition::new(AVAILABLE, False, "Paused", "0 replicas"),
        Condition::new(DEGRADED, False, "Paused", "0 replicas"),
    ];
    let after = reconcile(&[], &paused, HostPhase::Paused, None, 1, t(0));
    assert_eq!(get(&after, AVAILABLE).status, "False");
    let ready = get(&after, READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Paused")
    );
    assert_eq!(get(&after, RECONCILING).status, "False");
}

#[test]
fn reconciling_says_what_the_operator_does_or_waits_for_next() {
    let d = desired(
        &policy_healthy(),
        &[],
        HostPhase::ScalingUp,
        None,
        Some("waiting: learner c is catching up (raft index 40, leader 100)"),
        None,
    );
    let c = d.iter().find(|c| c.type_ == RECONCILING).unwrap();
    assert_eq!(c.status, ConditionStatus::True);
    assert_eq!(
        c.message,
        "adding a member; waiting: learner c is catching up (raft index 40, leader 100)"
    );
}

#[test]
fn progress_deadline_exceeded_mid_scale_up_reads_as_failed_to_kstatus() {
    let stall =
        Stall::ProgressDeadlineExceeded("scale-up to 5 did not finish within 600s".to_owned());
    let after = reconcile(
        &[],
        &policy_healthy(),
        HostPhase::ScalingUp,
        Some(&stall),
        7,
        t(0),
    );
    let stalled = get(&after, STALLED);
    assert_eq!(stalled.status, "True");
    assert_eq!(stalled.reason, "ProgressDeadlineExceeded");
    assert_eq!(stalled.message, "scale-up to 5 did not finish within 600s");
    // kstatus checks Reconciling before Stalled: it must not mask the failure.
    assert_eq!(get(&after, RECONCILING).status, "False");
    let progressing = get(&after, PROGRESSING);
    assert_eq!(progressing.status, "False");
    assert_eq!(progressing.reason, "ProgressDeadlineExceeded");
    // Availability is the policy's business and stays as it said.
    assert_eq!(get(&after, AVAILABLE).status, "True");
    assert_eq!(kstatus(&after, 7), "Failed");
}

#[test]
fn an_unloadable_policy_stalls_the_cluster_and_availability_is_unknown() {
    let stall =
        Stall::PolicyUnloadable("ConfigMap policies/strict has no policy.wasm key".to_owned());
    // What the host puts in place of a verdict when there is no policy to run.
    let fallback = vec![Condition::new(
        AVAILABLE,
        Unknown,
        "PolicyFailed",
        "the status policy could not be loaded",
    )];
    let after = reconcile(&[], &fallback, HostPhase::Steady, Some(&stall), 1, t(0));
    assert_eq!(get(&after, STALLED).status, "True");
    assert_eq!(get(&after, STALLED).reason, "PolicyUnloadable");
    assert_eq!(get(&after, AVAILABLE).status, "Unknown");
    assert_eq!(get(&after, READY).status, "Unknown");
    assert_eq!(get(&after, READY).reason, "PolicyFailed");
    assert_eq!(kstatus(&after, 1), "Failed");
}

#[test]
fn kstatus_reads_the_seed_incident_as_in_progress_and_recovery_as_current() {
    let healthy = reconcile(&[], &policy_healthy(), HostPhase::Steady, None, 1, t(0));
    assert_eq!(kstatus(&healthy, 1), "Current");
    let outage = reconcile(&healthy, &policy_outage(), HostPhase::Steady, None, 1, t(5));
    assert_eq!(kstatus(&outage, 1), "InProgress");
    let scaling = reconcile(
        &healthy,
        &policy_healthy(),
        HostPhase::ScalingUp,
        None,
        2,
        t(5),
    );
    assert_eq!(kstatus(&scaling, 2), "InProgress");
}

#[test]
fn a_policy_cannot_override_host_owned_conditions() {
    let mut policy = policy_outage();
    policy.push(Condition::new(READY, True, "LooksFine", "trust me"));
    policy.push(Condition::new(STALLED, True, "Whatever", ""));
    let after = reconcile(&[], &policy, HostPhase::Steady, None, 1, t(0));
    assert_eq!(get(&after, READY).status, "False");
    assert_eq!(get(&after, READY).reason, "QuorumLost");
    assert_eq!(get(&after, STALLED).status, "False");
}

#[test]
fn the_first_condition_of_a_type_wins_and_policy_types_are_kept_in_name_order() {
    let policy = vec![
        Condition::new(AVAILABLE, True, "QuorumHealthy", ""),
        Condition::new(AVAILABLE, False, "Second", ""),
        Condition::new(
            "SpaceLow",
            True,
            "QuotaNearlyFull",
            "db is 91% of the quota",
        ),
        Condition::new("Defragmented", False, "NeverRun", ""),
    ];
    let after = reconcile(&[], &policy, HostPhase::Steady, None, 1, t(0));
    assert_eq!(get(&after, AVAILABLE).reason, "QuorumHealthy");
    assert_eq!(
        types(&after),
        [
            AVAILABLE,
            READY,
            DEGRADED,
            PROGRESSING,
            RECONCILING,
            STALLED,
            "Defragmented",
            "SpaceLow"
        ]
    );
}

#[test]
fn a_declared_condition_the_policy_did_not_report_becomes_unknown_not_absent() {
    let declared = vec!["SpaceLow".to_owned()];
    let d = desired(
        &policy_healthy(),
        &declared,
        HostPhase::Steady,
        None,
        None,
        None,
    );
    let space = d.iter().find(|c| c.type_ == "SpaceLow").unwrap();
    assert_eq!(space.status, Unknown);
    assert_eq!(space.reason, "NotReported");
}

#[test]
fn the_policy_progressing_wins_over_the_host_phase_unless_the_deadline_passed() {
    let mut policy = policy_healthy();
    policy.push(Condition::new(
        PROGRESSING,
        True,
        "SpecChanged",
        "version 3.5.1 -> 3.5.2",
    ));
    let d = desired(&policy, &[], HostPhase::Steady, None, None, None);
    let p = d.iter().find(|c| c.type_ == PROGRESSING).unwrap();
    assert_eq!((p.status, p.reason.as_str()), (True, "SpecChanged"));
}

#[test]
fn conditions_no_longer_desired_are_dropped() {
    let mut policy = policy_healthy();
    policy.push(Condition::new("SpaceLow", True, "QuotaNearlyFull", ""));
    let before = reconcile(&[], &policy, HostPhase::Steady, None, 1, t(0));
    let after = reconcile(&before, &policy_healthy(), HostPhase::Steady, None, 1, t(1));
    assert!(after.iter().all(|c| c.type_ != "SpaceLow"));
}

#[test]
fn reasons_and_messages_the_apiserver_would_reject_are_repaired() {
    let policy = vec![Condition::new(
        AVAILABLE,
        False,
        "2 members: down!",
        "x".repeat(40_000),
    )];
    let after = reconcile(&[], &policy, HostPhase::Steady, None, 1, t(0));
    let available = get(&after, AVAILABLE);
    assert_eq!(available.reason, "members:down");
    assert_eq!(available.message.len(), MAX_MESSAGE_BYTES);
    assert_eq!(merge::sanitize_reason(""), "Unspecified");
    assert_eq!(merge::sanitize_reason("42"), "Unspecified");
    assert_eq!(merge::sanitize_reason("Quorum_Lost"), "Quorum_Lost");
}

#[test]
fn transitions_report_status_changes_with_event_types() {
    let healthy = reconcile(&[], &policy_healthy(), HostPhase::Steady, None, 1, t(0));
    let outage = reconcile(&healthy, &policy_outage(), HostPhase::Steady, None, 1, t(5));
    let changes = transitions(&healthy, &outage);
    let summary: Vec<_> = changes
        .iter()
        .map(|c| (c.type_.as_str(), c.from, c.to, c.event_type()))
        .collect();
    assert_eq!(
        summary,
        [
            (AVAILABLE, Some(True), False, EventType::Warning),
            (READY, Some(True), False, EventType::Warning),
            (DEGRADED, Some(False), True, EventType::Warning),
        ]
    );
    assert_eq!(
        changes[0].note(),
        "Available: True -> False (QuorumLost): 0 of 3 members answered"
    );

    // Still down, for another reason: reported; the same reason again is not.
    let mut other_cause = outage.clone();
    for c in &mut other_cause {
        if c.type_ == AVAILABLE {
            c.reason = "TLSHandshakeFailed".into();
        }
    }
    let changes = transitions(&outage, &other_cause);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(
        (changes[0].type_.as_str(), changes[0].event_type()),
        (AVAILABLE, EventType::Warning)
    );
    assert!(transitions(&other_cause, &other_cause).is_empty());

    let back = reconcile(&outage, &policy_healthy(), HostPhase::Steady, None, 1, t(9));
    assert!(
        transitions(&outage, &back)
            .iter()
            .all(|c| c.event_type() == EventType::Normal)
    );
}

#[test]
fn first_appearance_is_a_transition_only_when_something_is_known() {
    let first = reconcile(&[], &[], HostPhase::Bootstrapping, None, 1, t(0));
    let changed: Vec<_> = transitions(&[], &first)
        .into_iter()
        .map(|c| c.type_)
        .collect();
    // Available/Ready/Degraded start Unknown: nothing learned yet.
    assert_eq!(changed, [PROGRESSING, RECONCILING, STALLED]);
}

#[test]
fn previous_conditions_carry_status_reason_and_transition_time_for_the_policy() {
    let stored = reconcile(&[], &policy_outage(), HostPhase::Steady, None, 1, t(0));
    let history = previous_conditions(&stored);
    let available = history.iter().find(|c| c.type_ == AVAILABLE).unwrap();
    assert_eq!(available.status, False);
    assert_eq!(available.reason, "QuorumLost");
    assert_eq!(available.since, t(0).as_millisecond());
}

fn member_ready(facts: &MemberState) -> (ConditionStatus, String) {
    let c = &member_conditions(facts)[0];
    assert_eq!(c.type_, "Ready");
    (c.status, c.reason.clone())
}

#[test]
fn a_member_is_ready_only_with_a_ready_pod_and_etcds_confirmation() {
    let confirmed = MemberState {
        pod_ready: true,
        listed: Some(true),
        member_id: Some(0x8e9e05c52164694d),
        spec_version: "3.5.1".into(),
        running_version: Some("3.5.1".into()),
        ..Default::default()
    };
    assert_eq!(member_ready(&confirmed), (True, "PodReady".into()));
    assert_eq!(
        member_conditions(&confirmed)[0].message,
        "Pod Ready, etcd member 8e9e05c52164694d"
    );
    // etcd unreachable this round: the ID learned earlier still confirms it.
    let unlisted = MemberState {
        listed: None,
        ..confirmed.clone()
    };
    assert_eq!(member_ready(&unlisted).0, True);

    let cases = [
        (
            MemberState {
                pod_ready: false,
                ..confirmed.clone()
            },
            "PodNotReady",
        ),
        (
            MemberState {
                member_id: None,
                ..confirmed.clone()
            },
            "DiscoveringMemberID",
        ),
        (
            MemberState {
                listed: Some(false),
                ..confirmed.clone()
            },
            "NotAMember",
        ),
        (
            MemberState {
                dormant: true,
                pod_ready: false,
                ..confirmed.clone()
            },
            "Paused",
        ),
    ];
    for (facts, reason) in cases {
        assert_eq!(
            member_ready(&facts),
            (False, reason.to_owned()),
            "{facts:?}"
        );
    }
    let stuck = MemberState {
        pod_ready: false,
        pod_stuck: Some("ErrImagePull: failed to pull image".into()),
        ..confirmed.clone()
    };
    assert_eq!(
        member_conditions(&stuck)[0].message,
        "the member's Pod cannot start: ErrImagePull: failed to pull image"
    );
}

#[test]
fn version_drift_compares_what_etcd_runs_with_the_member_spec() {
    let facts = |running: Option<&str>| MemberState {
        spec_version: "3.5.1".into(),
        running_version: running.map(str::to_owned),
        ..Default::default()
    };
    let drift = |f: MemberState| {
        let c = member_conditions(&f).remove(1);
        (c.type_, c.status, c.reason)
    };
    assert_eq!(
        drift(facts(Some("3.5.1"))),
        ("VersionDrifted".into(), False, "VersionMatches".into())
    );
    assert_eq!(
        drift(facts(Some("3.5.2"))),
        ("VersionDrifted".into(), True, "VersionMismatch".into())
    );
    assert_eq!(
        drift(facts(None)),
        ("VersionDrifted".into(), Unknown, "VersionUnknown".into())
    );
}

/// What the real kstatus (sigs.k8s.io/cli-utils, run by the testbed's
/// steward-status) reads for an EtcdCluster at `generation` with these
/// conditions.
fn kstatus(conds: &[MetaCondition], generation: i64) -> String {
    let obj = serde_json::json!({
        "apiVersion": "etcd.steward.dev/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": {"name": "main", "namespace": "default", "generation": generation},
        "spec": {"version": "3.5.1"},
        "status": {"observedGeneration": generation, "conditions": conds},
    });
    steward_testbed::status_consumers::StatusConsumers::locate()
        .expect("steward-status is built (run the tests through `make test`)")
        .kstatus(&obj)
        .expect("kstatus reads the object")
        .status
}

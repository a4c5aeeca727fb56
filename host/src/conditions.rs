//! The conditions on an `EtcdCluster` status: what the policy concluded,
//! plus the kstatus conditions the host owns, merged into what is stored.
//!
//! Three steps, each a pure function:
//! 1. [`desired`]: the policy's conditions completed by the host — every
//!    expected type present (Unknown if nobody knows), `Ready` mirroring
//!    `Available`, `Reconciling` and `Stalled` from the host's own state.
//! 2. [`merge`]: desired conditions onto the stored ones — `lastTransitionTime`
//!    moves only when `status` moves; every condition carries the generation.
//! 3. [`transitions`]: what changed, for Events.
//!
//! kstatus (Flux `wait`, `kubectl wait`-like tools) reads `Reconciling=True`
//! as InProgress *before* it looks at `Stalled`, so a stalled cluster must
//! also say `Reconciling=False`, or it would never be reported as Failed.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition as MetaCondition, Time};
use steward_policy_sdk::{Condition, ConditionStatus, EventType, HostPhase, PreviousCondition};

/// The cluster can serve requests: a quorum answered. From the policy.
pub const AVAILABLE: &str = "Available";
/// Some member is unhealthy (quorum may still hold). From the policy.
pub const DEGRADED: &str = "Degraded";
/// The cluster is moving towards a target. From the policy, else the host.
pub const PROGRESSING: &str = "Progressing";
/// kstatus: mirrors Available.
pub const READY: &str = "Ready";
/// kstatus: membership is changing.
pub const RECONCILING: &str = "Reconciling";
/// kstatus: stuck on something only a human can fix.
pub const STALLED: &str = "Stalled";

/// Types the host writes itself; a policy cannot set them.
pub const HOST_OWNED: [&str; 3] = [READY, RECONCILING, STALLED];

/// Every status carries at least these, Unknown if need be.
const ALWAYS: [&str; 6] = [
    AVAILABLE,
    READY,
    DEGRADED,
    PROGRESSING,
    RECONCILING,
    STALLED,
];

/// The longest message the apiserver accepts on a metav1.Condition.
const MAX_MESSAGE_BYTES: usize = 32768;
/// The longest reason the apiserver accepts on a metav1.Condition.
const MAX_REASON_BYTES: usize = 1024;

pub mod reason {
    //! Reasons the host itself writes.
    pub const NOT_REPORTED: &str = "NotReported";
    pub const BOOTSTRAPPING: &str = "Bootstrapping";
    pub const SCALING_UP: &str = "ScalingUp";
    pub const SCALING_DOWN: &str = "ScalingDown";
    pub const STEADY: &str = "Steady";
    pub const PAUSED: &str = "Paused";
    pub const DELETING: &str = "Deleting";
    pub const NOT_STALLED: &str = "NotStalled";
    pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    pub const POLICY_UNLOADABLE: &str = "PolicyUnloadable";
    /// Replaces a reason the apiserver would reject.
    pub const UNSPECIFIED: &str = "Unspecified";
}

/// An error that needs a human; it makes the cluster `Stalled=True`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stall {
    /// The in-flight target was not reached before `status.progressDeadline`.
    ProgressDeadlineExceeded(String),
    /// The named status policy cannot be fetched, compiled or instantiated.
    PolicyUnloadable(String),
}

impl Stall {
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ProgressDeadlineExceeded(_) => reason::PROGRESS_DEADLINE_EXCEEDED,
            Self::PolicyUnloadable(_) => reason::POLICY_UNLOADABLE,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Self::ProgressDeadlineExceeded(m) | Self::PolicyUnloadable(m) => m,
        }
    }
}

/// The full set of conditions the host wants on the status.
///
/// `policy` is the verdict's conditions; `declared` the types the policy
/// declares it reports (a declared type it did not report this time becomes
/// Unknown rather than vanishing). The first condition of a type wins;
/// host-owned types in `policy` are ignored. The result is in a fixed order
/// (the well-known types first, the rest by name), so an unchanged verdict
/// writes an unchanged status.
pub fn desired(
    policy: &[Condition],
    declared: &[String],
    phase: HostPhase,
    stall: Option<&Stall>,
    next_step: Option<&str>,
) -> Vec<Condition> {
    let mut by_type: BTreeMap<String, Condition> = BTreeMap::new();
    for c in policy {
        if HOST_OWNED.contains(&c.type_.as_str()) {
            continue;
        }
        by_type.entry(c.type_.clone()).or_insert_with(|| c.clone());
    }

    if !by_type.contains_key(PROGRESSING) {
        by_type.insert(PROGRESSING.to_owned(), progressing_from_phase(phase));
    }
    if let Some(Stall::ProgressDeadlineExceeded(message)) = stall {
        // The deadline is the host's fact; this is the Deployment convention.
        by_type.insert(
            PROGRESSING.to_owned(),
            Condition::new(
                PROGRESSING,
                ConditionStatus::False,
                reason::PROGRESS_DEADLINE_EXCEEDED,
                message.clone(),
            ),
        );
    }

    for t in ALWAYS
        .iter()
        .copied()
        .filter(|t| !HOST_OWNED.contains(t))
        .chain(declared.iter().map(String::as_str))
    {
        if HOST_OWNED.contains(&t) {
            continue;
        }
        by_type.entry(t.to_owned()).or_insert_with(|| {
            Condition::new(
                t,
                ConditionStatus::Unknown,
                reason::NOT_REPORTED,
                format!("the status policy did not report {t}"),
            )
        });
    }

    let available = by_type
        .get(AVAILABLE)
        .expect("Available is always filled in above");
    let ready = Condition::new(
        READY,
        available.status,
        available.reason.clone(),
        available.message.clone(),
    );
    by_type.insert(READY.to_owned(), ready);
    by_type.insert(RECONCILING.to_owned(), reconciling(phase, stall, next_step));
    by_type.insert(STALLED.to_owned(), stalled(stall));

    let mut out: Vec<Condition> = ALWAYS.iter().filter_map(|t| by_type.remove(*t)).collect();
    out.extend(by_type.into_values());
    out
}

fn membership_change(phase: HostPhase) -> Option<&'static str> {
    match phase {
        HostPhase::Bootstrapping => Some(reason::BOOTSTRAPPING),
        HostPhase::ScalingUp => Some(reason::SCALING_UP),
        HostPhase::ScalingDown => Some(reason::SCALING_DOWN),
        HostPhase::Steady | HostPhase::Paused | HostPhase::Deleting => None,
    }
}

fn idle_reason(phase: HostPhase) -> &'static str {
    match phase {
        HostPhase::Paused => reason::PAUSED,
        HostPhase::Deleting => reason::DELETING,
        _ => reason::STEADY,
    }
}

fn progressing_from_phase(phase: HostPhase) -> Condition {
    match membership_change(phase) {
        Some(r) => Condition::new(PROGRESSING, ConditionStatus::True, r, phase_message(phase)),
        None => Condition::new(
            PROGRESSING,
            ConditionStatus::False,
            idle_reason(phase),
            phase_message(phase),
        ),
    }
}

/// `next_step` is the membership planner's next step or what it waits
/// for; it is what a human reading `kubectl describe` wants to know.
fn reconciling(phase: HostPhase, stall: Option<&Stall>, next_step: Option<&str>) -> Condition {
    if let Some(stall) = stall {
        return Condition::new(
            RECONCILING,
            ConditionStatus::False,
            stall.reason(),
            format!("stopped: {}", stall.message()),
        );
    }
    let message = match next_step {
        Some(step) => format!("{}; {step}", phase_message(phase)),
        None => phase_message(phase).to_owned(),
    };
    match membership_change(phase) {
        Some(r) => Condition::new(RECONCILING, ConditionStatus::True, r, message),
        None => Condition::new(
            RECONCILING,
            ConditionStatus::False,
            idle_reason(phase),
            message,
        ),
    }
}

fn stalled(stall: Option<&Stall>) -> Condition {
    match stall {
        Some(s) => Condition::new(STALLED, ConditionStatus::True, s.reason(), s.message()),
        None => Condition::new(
            STALLED,
            ConditionStatus::False,
            reason::NOT_STALLED,
            "no error needs a human",
        ),
    }
}

fn phase_message(phase: HostPhase) -> &'static str {
    match phase {
        HostPhase::Bootstrapping => "starting the seed member",
        HostPhase::ScalingUp => "adding a member",
        HostPhase::ScalingDown => "removing a member",
        HostPhase::Steady => "membership matches the target",
        HostPhase::Paused => "the cluster is paused at 0 replicas",
        HostPhase::Deleting => "the cluster is being deleted",
    }
}

/// The stored conditions after applying `desired` at `generation`, `now`.
///
/// Conditions not in `desired` are dropped: the host owns the whole list.
/// Reasons and messages are made acceptable to the apiserver (CamelCase
/// reason, bounded lengths), because a rejected status write would freeze
/// the status — the one thing that must never happen.
pub fn merge(
    existing: &[MetaCondition],
    desired: &[Condition],
    generation: i64,
    now: Timestamp,
) -> Vec<MetaCondition> {
    desired
        .iter()
        .map(|d| {
            let status = d.status.as_str().to_owned();
            let last_transition_time = existing
                .iter()
                .find(|e| e.type_ == d.type_ && e.status == status)
                .map_or_else(|| Time(now), |e| e.last_transition_time.clone());
            MetaCondition {
                type_: d.type_.clone(),
                status,
                observed_generation: Some(generation),
                last_transition_time,
                reason: sanitize_reason(&d.reason),
                message: truncate(&d.message, MAX_MESSAGE_BYTES).to_owned(),
            }
        })
        .collect()
}

/// A reason the apiserver accepts: `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`.
fn sanitize_reason(reason: &str) -> String {
    let kept: String = reason
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':'))
        .skip_while(|c| !c.is_ascii_alphabetic())
        .collect();
    let trimmed = truncate(&kept, MAX_REASON_BYTES).trim_end_matches([',', ':']);
    if trimmed.is_empty() {
        reason::UNSPECIFIED.to_owned()
    } else {
        trimmed.to_owned()
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Parses a stored status; anything but True/False is Unknown.
pub fn parse_status(status: &str) -> ConditionStatus {
    match status {
        "True" => ConditionStatus::True,
        "False" => ConditionStatus::False,
        _ => ConditionStatus::Unknown,
    }
}

/// The stored conditions as the policy's history sees them.
pub fn previous_conditions(existing: &[MetaCondition]) -> Vec<PreviousCondition> {
    existing
        .iter()
        .map(|c| PreviousCondition {
            type_: c.type_.clone(),
            status: parse_status(&c.status),
            reason: c.reason.clone(),
            since: c.last_transition_time.0.as_millisecond(),
        })
        .collect()
}

/// A condition whose status changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub type_: String,
    /// None: the condition did not exist before.
    pub from: Option<ConditionStatus>,
    pub to: ConditionStatus,
    pub reason: String,
    pub message: String,
}

impl Transition {
    /// Warning when the condition moved into its bad state.
    pub fn event_type(&self) -> EventType {
        let bad = match self.type_.as_str() {
            AVAILABLE | READY => self.to != ConditionStatus::True,
            DEGRADED | STALLED => self.to == ConditionStatus::True,
            _ => false,
        };
        if bad {
            EventType::Warning
        } else {
            EventType::Normal
        }
    }

    /// An Event note: "Available: True -> False (QuorumLost): 2 of 3 members unreachable".
    pub fn note(&self) -> String {
        let from = self.from.map_or("absent", ConditionStatus::as_str);
        let mut note = format!("{}: {} -> {} ({})", self.type_, from, self.to, self.reason);
        if !self.message.is_empty() {
            note.push_str(": ");
            note.push_str(&self.message);
        }
        note
    }
}

/// The conditions whose status differs between `before` and `after`.
///
/// A condition first appearing as Unknown is not a transition: nothing was
/// learned. A condition disappearing is not reported either; [`desired`]
/// never drops the well-known types.
pub fn transitions(before: &[MetaCondition], after: &[MetaCondition]) -> Vec<Transition> {
    after
        .iter()
        .filter_map(|a| {
            let to = parse_status(&a.status);
            let from = before
                .iter()
                .find(|b| b.type_ == a.type_)
                .map(|b| parse_status(&b.status));
            let changed = match from {
                Some(from) => from != to,
                None => to != ConditionStatus::Unknown,
            };
            changed.then(|| Transition {
                type_: a.type_.clone(),
                from,
                to,
                reason: a.reason.clone(),
                message: a.message.clone(),
            })
        })
        .collect()
}

/// What an EtcdMember's conditions are derived from.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MemberFacts {
    /// The member is dormant (cluster paused): no Pod on purpose.
    pub dormant: bool,
    /// The member's Pod exists and is Ready.
    pub pod_ready: bool,
    /// Whether etcd's member list (when one was obtained this round)
    /// contains the member. None: no list this round.
    pub listed: Option<bool>,
    /// The member ID etcd reported, now or earlier.
    pub member_id: Option<u64>,
    /// The version the member's spec asks for.
    pub spec_version: String,
    /// The version etcd reports the member running, if it answered.
    pub running_version: Option<String>,
}

/// Ready and VersionDrifted for one EtcdMember. Ready needs both a Ready
/// Pod and etcd's confirmation that it is a member (an ID from etcd, and no
/// member list that lacks it): a Pod passing its probe proves a process,
/// not a member.
pub fn member_conditions(facts: &MemberFacts) -> Vec<Condition> {
    use crate::api::member_condition as mc;
    let ready = if facts.dormant {
        Condition::new(
            mc::READY,
            ConditionStatus::False,
            mc::REASON_PAUSED,
            "the cluster is paused; the member has no Pod",
        )
    } else if !facts.pod_ready {
        Condition::new(
            mc::READY,
            ConditionStatus::False,
            mc::REASON_POD_NOT_READY,
            "the member's Pod is missing or not Ready",
        )
    } else if facts.listed == Some(false) {
        Condition::new(
            mc::READY,
            ConditionStatus::False,
            mc::REASON_NOT_A_MEMBER,
            "etcd's member list does not contain this member",
        )
    } else if let Some(id) = facts.member_id {
        Condition::new(
            mc::READY,
            ConditionStatus::True,
            mc::REASON_POD_READY,
            format!("Pod Ready, etcd member {id:x}"),
        )
    } else {
        Condition::new(
            mc::READY,
            ConditionStatus::False,
            mc::REASON_DISCOVERING_MEMBER_ID,
            "the Pod is Ready; waiting for etcd to report the member ID",
        )
    };
    let drift = match &facts.running_version {
        Some(v) if *v != facts.spec_version => Condition::new(
            mc::VERSION_DRIFTED,
            ConditionStatus::True,
            mc::REASON_VERSION_MISMATCH,
            format!("etcd runs {v}, the spec says {}", facts.spec_version),
        ),
        Some(v) => Condition::new(
            mc::VERSION_DRIFTED,
            ConditionStatus::False,
            mc::REASON_VERSION_MATCHES,
            format!("etcd runs {v}"),
        ),
        None => Condition::new(
            mc::VERSION_DRIFTED,
            ConditionStatus::Unknown,
            mc::REASON_VERSION_UNKNOWN,
            "etcd did not report the member's version",
        ),
    };
    vec![ready, drift]
}

#[cfg(test)]
mod tests {
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
            &desired(policy, &[], phase, stall, None),
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
    fn reconciling_says_what_the_operator_does_or_waits_for_next() {
        let d = desired(
            &policy_healthy(),
            &[],
            HostPhase::ScalingUp,
            None,
            Some("waiting: learner c is catching up (raft index 40, leader 100)"),
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
        let d = desired(&policy_healthy(), &declared, HostPhase::Steady, None, None);
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
        let d = desired(&policy, &[], HostPhase::Steady, None, None);
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
        assert_eq!(sanitize_reason(""), "Unspecified");
        assert_eq!(sanitize_reason("42"), "Unspecified");
        assert_eq!(sanitize_reason("Quorum_Lost"), "Quorum_Lost");
        assert_eq!(truncate("ééé", 3), "é");
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

    fn member_ready(facts: &MemberFacts) -> (ConditionStatus, String) {
        let c = &member_conditions(facts)[0];
        assert_eq!(c.type_, "Ready");
        (c.status, c.reason.clone())
    }

    #[test]
    fn a_member_is_ready_only_with_a_ready_pod_and_etcds_confirmation() {
        let confirmed = MemberFacts {
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
        let unlisted = MemberFacts {
            listed: None,
            ..confirmed.clone()
        };
        assert_eq!(member_ready(&unlisted).0, True);

        let cases = [
            (
                MemberFacts {
                    pod_ready: false,
                    ..confirmed.clone()
                },
                "PodNotReady",
            ),
            (
                MemberFacts {
                    member_id: None,
                    ..confirmed.clone()
                },
                "DiscoveringMemberID",
            ),
            (
                MemberFacts {
                    listed: Some(false),
                    ..confirmed.clone()
                },
                "NotAMember",
            ),
            (
                MemberFacts {
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
    }

    #[test]
    fn version_drift_compares_what_etcd_runs_with_the_member_spec() {
        let facts = |running: Option<&str>| MemberFacts {
            spec_version: "3.5.1".into(),
            running_version: running.map(str::to_owned),
            ..Default::default()
        };
        let drift = |f: MemberFacts| {
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

    /// The kstatus rules from sigs.k8s.io/cli-utils, for conditions only
    /// (no deletion), as Flux `wait` applies them.
    fn kstatus(conds: &[MetaCondition], generation: i64) -> &'static str {
        let is = |type_: &str, status: &str| {
            conds.iter().any(|c| c.type_ == type_ && c.status == status)
        };
        if conds
            .iter()
            .any(|c| c.observed_generation != Some(generation))
        {
            return "InProgress";
        }
        if is(RECONCILING, "True") {
            return "InProgress";
        }
        if is(STALLED, "True") {
            return "Failed";
        }
        if is(READY, "True") {
            return "Current";
        }
        "InProgress"
    }
}

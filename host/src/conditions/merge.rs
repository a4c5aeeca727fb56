//! Desired conditions onto the stored ones, and what changed between two
//! stored lists (for Events).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition as MetaCondition, Time};
use steward_policy_sdk::{Condition, ConditionStatus, EventType, PreviousCondition};

use super::{AVAILABLE, DEGRADED, MAX_MESSAGE_BYTES, READY, STALLED, reason};

/// The longest reason the apiserver accepts on a metav1.Condition.
const MAX_REASON_BYTES: usize = 1024;

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
                message: crate::text::truncate(&d.message, MAX_MESSAGE_BYTES),
            }
        })
        .collect()
}

/// A reason the apiserver accepts: `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`.
pub(super) fn sanitize_reason(reason: &str) -> String {
    let kept: String = reason
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':'))
        .skip_while(|c| !c.is_ascii_alphabetic())
        .collect();
    let kept: String = kept.chars().take(MAX_REASON_BYTES).collect();
    let trimmed = kept.trim_end_matches([',', ':']);
    if trimmed.is_empty() {
        reason::UNSPECIFIED.to_owned()
    } else {
        trimmed.to_owned()
    }
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

/// The conditions whose status differs between `before` and `after`, and
/// `Available` staying bad for a new reason: the cause changed (members
/// down, then a certificate refused), which is news to the person on call
/// although the status is not. Only `Available`: `Degraded` repeats its
/// reason while it is False, which would double every such Event.
///
/// A condition first appearing as Unknown is not a transition: nothing was
/// learned. A condition disappearing is not reported either; [`desired`]
/// never drops the well-known types.
pub fn transitions(before: &[MetaCondition], after: &[MetaCondition]) -> Vec<Transition> {
    after
        .iter()
        .filter_map(|a| {
            let to = parse_status(&a.status);
            let prev = before.iter().find(|b| b.type_ == a.type_);
            let from = prev.map(|b| parse_status(&b.status));
            let bad = a.type_ == AVAILABLE && to != ConditionStatus::True;
            let changed = match (from, prev) {
                (Some(from), Some(prev)) => from != to || (bad && prev.reason != a.reason),
                _ => to != ConditionStatus::Unknown,
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

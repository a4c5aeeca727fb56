//! The conditions kstatus reads (Ready, Reconciling, Stalled), which the
//! host owns: a policy cannot set them.
//!
//! kstatus (Flux `wait`, kpt, `kubectl wait`-like tools) reads
//! `Reconciling=True` as InProgress *before* it looks at `Stalled`, so a
//! stalled cluster must also say `Reconciling=False`, or it would never be
//! reported as Failed.

use steward_policy_sdk::{Condition, ConditionStatus, HostPhase};

use super::phase::{idle_reason, membership_change, phase_message};
use super::reason;

/// kstatus: mirrors Available.
pub const READY: &str = "Ready";
/// kstatus: membership is changing.
pub const RECONCILING: &str = "Reconciling";
/// kstatus: stuck on something only a human can fix.
pub const STALLED: &str = "Stalled";

/// An error that needs a human; it makes the cluster `Stalled=True`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stall {
    /// The in-flight target was not reached before `status.progressDeadline`.
    ProgressDeadlineExceeded(String),
    /// The named status policy cannot be fetched, compiled or instantiated.
    PolicyUnloadable(String),
    /// The policy's `validate-settings` rejects `spec.statusPolicy.settings`.
    InvalidPolicySettings(String),
    /// The planner refuses what the spec asks for (a version change etcd
    /// does not support, a defrag schedule that does not parse); `reason`
    /// names which.
    Refused {
        reason: &'static str,
        message: String,
    },
}

impl Stall {
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ProgressDeadlineExceeded(_) => reason::PROGRESS_DEADLINE_EXCEEDED,
            Self::PolicyUnloadable(_) => reason::POLICY_UNLOADABLE,
            Self::InvalidPolicySettings(_) => reason::INVALID_POLICY_SETTINGS,
            Self::Refused { reason, .. } => reason,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Self::ProgressDeadlineExceeded(m)
            | Self::PolicyUnloadable(m)
            | Self::InvalidPolicySettings(m)
            | Self::Refused { message: m, .. } => m,
        }
    }
}

/// `next_step` is the membership planner's next step or what it waits
/// for; it is what a human reading `kubectl describe` wants to know.
/// `rolling` says how far a version rollout is, while one runs.
pub(super) fn reconciling(
    phase: HostPhase,
    stall: Option<&Stall>,
    next_step: Option<&str>,
    rolling: Option<&str>,
) -> Condition {
    if let Some(stall) = stall {
        return Condition::new(
            RECONCILING,
            ConditionStatus::False,
            stall.reason(),
            format!("stopped: {}", stall.message()),
        );
    }
    if let Some(rolling) = rolling.filter(|_| membership_change(phase).is_none()) {
        let message = match next_step {
            Some(step) => format!("{rolling}; {step}"),
            None => rolling.to_owned(),
        };
        return Condition::new(
            RECONCILING,
            ConditionStatus::True,
            reason::UPGRADING,
            message,
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

pub(super) fn stalled(stall: Option<&Stall>) -> Condition {
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

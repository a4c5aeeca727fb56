//! What the host's phase says about membership, in the words both the
//! `Progressing` and the `Reconciling` conditions use.

use steward_policy_sdk::HostPhase;

use super::reason;

/// The reason of a membership change in flight; `None` when membership is
/// at rest.
pub(super) fn membership_change(phase: HostPhase) -> Option<&'static str> {
    match phase {
        HostPhase::Bootstrapping => Some(reason::BOOTSTRAPPING),
        HostPhase::ScalingUp => Some(reason::SCALING_UP),
        HostPhase::ScalingDown => Some(reason::SCALING_DOWN),
        HostPhase::Steady | HostPhase::Paused | HostPhase::Deleting => None,
    }
}

/// The reason when no membership change is in flight.
pub(super) fn idle_reason(phase: HostPhase) -> &'static str {
    match phase {
        HostPhase::Paused => reason::PAUSED,
        HostPhase::Deleting => reason::DELETING,
        _ => reason::STEADY,
    }
}

/// The message for each phase.
pub(super) fn phase_message(phase: HostPhase) -> &'static str {
    match phase {
        HostPhase::Bootstrapping => "starting the seed member",
        HostPhase::ScalingUp => "adding a member",
        HostPhase::ScalingDown => "removing a member",
        HostPhase::Steady => "membership matches the target",
        HostPhase::Paused => "the cluster is paused at 0 replicas",
        HostPhase::Deleting => "the cluster is being deleted",
    }
}

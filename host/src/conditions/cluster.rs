//! The cluster-level conditions: what the policy reports (Available,
//! Degraded, Progressing and any it declares), completed by the host.

use std::collections::BTreeMap;

use steward_policy_sdk::{Condition, ConditionStatus, HostPhase};

use super::HOST_OWNED;
use super::kstatus::{READY, RECONCILING, STALLED, Stall, reconciling, stalled};
use super::phase::{idle_reason, membership_change, phase_message};
use super::reason;

/// The cluster can serve requests: a quorum answered. From the policy.
pub const AVAILABLE: &str = "Available";
/// Some member is unhealthy (quorum may still hold). From the policy.
pub const DEGRADED: &str = "Degraded";
/// The cluster is moving towards a target. From the policy, else the host.
pub const PROGRESSING: &str = "Progressing";

/// Types every verdict must carry.
pub const REQUIRED: [&str; 2] = [AVAILABLE, DEGRADED];

/// Every status carries at least these, Unknown if need be.
const ALWAYS: [&str; 6] = [
    AVAILABLE,
    READY,
    DEGRADED,
    PROGRESSING,
    RECONCILING,
    STALLED,
];

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
    rolling: Option<&str>,
) -> Vec<Condition> {
    let mut by_type: BTreeMap<String, Condition> = BTreeMap::new();
    for c in policy {
        if HOST_OWNED.contains(&c.type_.as_str()) {
            continue;
        }
        by_type.entry(c.type_.clone()).or_insert_with(|| c.clone());
    }

    if !by_type.contains_key(PROGRESSING) {
        let progressing = match rolling.filter(|_| membership_change(phase).is_none()) {
            Some(r) => Condition::new(PROGRESSING, ConditionStatus::True, reason::UPGRADING, r),
            None => progressing_from_phase(phase),
        };
        by_type.insert(PROGRESSING.to_owned(), progressing);
    }
    if let Some(Stall::Refused { reason, message }) = stall {
        // Refused, it is not moving towards anything until the spec changes.
        by_type.insert(
            PROGRESSING.to_owned(),
            Condition::new(
                PROGRESSING,
                ConditionStatus::False,
                *reason,
                message.clone(),
            ),
        );
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
    // Ready is kstatus's "reached the desired state". A paused cluster has:
    // it serves nothing (Available=False) because spec.replicas asks for
    // that, and kstatus, Flux and `kubectl wait` must not wait for it
    // forever, as for a Deployment scaled to 0.
    let ready = if phase == HostPhase::Paused {
        Condition::new(
            READY,
            ConditionStatus::True,
            reason::PAUSED,
            "paused at 0 replicas, as spec.replicas asks; it serves nothing until scaled up",
        )
    } else {
        Condition::new(
            READY,
            available.status,
            available.reason.clone(),
            available.message.clone(),
        )
    };
    by_type.insert(READY.to_owned(), ready);
    by_type.insert(
        RECONCILING.to_owned(),
        reconciling(phase, stall, next_step, rolling),
    );
    by_type.insert(STALLED.to_owned(), stalled(stall));

    let mut out: Vec<Condition> = ALWAYS.iter().filter_map(|t| by_type.remove(*t)).collect();
    out.extend(by_type.into_values());
    out
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

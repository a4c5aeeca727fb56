//! The host's rules for a verdict it will write, and the verdict it writes
//! instead when a policy cannot give one. A broken policy must never freeze
//! or omit status: it gets `Available=Unknown` with reason `PolicyFailed`.

use std::collections::HashSet;

use steward_policy_sdk::{Condition, ConditionStatus, Verdict};

use super::PolicyError;
use crate::conditions::{AVAILABLE, DEGRADED, HOST_OWNED, MAX_MESSAGE_BYTES, REQUIRED, reason};
use crate::text::truncate;

/// The reason of the host's fallback verdict.
pub const FALLBACK_REASON: &str = reason::POLICY_FAILED;

/// The outcome of one evaluation: always a verdict fit to write, plus the
/// error when the verdict is the host's fallback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    pub verdict: Verdict,
    /// A 0.1.0 verdict claimed `verified: true`; the host checks the claim
    /// against its own finding.
    pub claims_verified: bool,
    pub error: Option<PolicyError>,
}

impl Evaluation {
    pub(super) fn failed(error: PolicyError) -> Self {
        Self {
            verdict: fallback_verdict(&error.to_string()),
            claims_verified: false,
            error: Some(error),
        }
    }
}

/// The verdict the host writes when the policy failed or could not even be
/// loaded. It claims nothing: `Available` and `Degraded` are Unknown, no
/// member is ready and nothing was verified.
pub fn fallback_verdict(reason_message: &str) -> Verdict {
    let message = truncate(reason_message, MAX_MESSAGE_BYTES);
    let unknown = |type_: &str| {
        Condition::new(
            type_,
            ConditionStatus::Unknown,
            FALLBACK_REASON,
            message.clone(),
        )
    };
    Verdict {
        conditions: vec![unknown(AVAILABLE), unknown(DEGRADED)],
        ready_members: 0,
        // The host stands in for a policy that gave no verdict, and
        // shows nothing verified on its behalf.
        decline_verification: Some("the host stood in for the policy".to_owned()),
        requeue_after_ms: None,
        events: Vec::new(),
    }
}

/// Checks a policy's verdict against the contract in `wit/`; the error names
/// the first rule broken.
pub fn validate(verdict: &Verdict, member_count: usize) -> Result<(), String> {
    let mut seen = HashSet::new();
    for c in &verdict.conditions {
        if !seen.insert(c.type_.as_str()) {
            return Err(format!("condition {:?} appears twice", c.type_));
        }
        if HOST_OWNED.contains(&c.type_.as_str()) {
            return Err(format!(
                "condition {:?} belongs to the host, not the policy",
                c.type_
            ));
        }
        if !is_camel_case(&c.type_) {
            return Err(format!(
                "condition type {:?} is not CamelCase ^[A-Z][A-Za-z0-9]*$",
                c.type_
            ));
        }
        if !is_camel_case(&c.reason) {
            return Err(format!(
                "condition {} has reason {:?}, which does not match ^[A-Z][A-Za-z0-9]*$",
                c.type_, c.reason
            ));
        }
        if c.message.len() > MAX_MESSAGE_BYTES {
            return Err(format!(
                "condition {} has a {}-byte message (at most {MAX_MESSAGE_BYTES})",
                c.type_,
                c.message.len()
            ));
        }
    }
    for required in REQUIRED {
        if !seen.contains(required) {
            return Err(format!("condition {required} is missing"));
        }
    }
    if verdict.ready_members as usize > member_count {
        return Err(format!(
            "ready-members is {} but the observation has {member_count} members",
            verdict.ready_members
        ));
    }
    for e in &verdict.events {
        if !is_camel_case(&e.reason) {
            return Err(format!(
                "event reason {:?} does not match ^[A-Z][A-Za-z0-9]*$",
                e.reason
            ));
        }
        if e.message.len() > MAX_MESSAGE_BYTES {
            return Err(format!(
                "event {} has a {}-byte message (at most {MAX_MESSAGE_BYTES})",
                e.reason,
                e.message.len()
            ));
        }
    }
    Ok(())
}

/// `^[A-Z][A-Za-z0-9]*$`, without a regex engine on the hot path.
fn is_camel_case(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(conditions: &[(&str, &str)]) -> Verdict {
        Verdict {
            conditions: conditions
                .iter()
                .map(|(t, r)| Condition::new(*t, ConditionStatus::True, *r, ""))
                .collect(),
            ready_members: 0,
            decline_verification: None,
            requeue_after_ms: None,
            events: Vec::new(),
        }
    }

    #[test]
    fn accepts_a_minimal_verdict() {
        assert_eq!(
            validate(&verdict(&[("Available", "Ok"), ("Degraded", "Ok")]), 0),
            Ok(())
        );
    }

    #[test]
    fn rejects_each_broken_rule() {
        let cases: &[(Verdict, usize, &str)] = &[
            (verdict(&[("Available", "Ok")]), 0, "Degraded is missing"),
            (
                verdict(&[("Available", "Ok"), ("Degraded", "Ok"), ("Available", "Ok")]),
                0,
                "appears twice",
            ),
            (
                verdict(&[("Available", "Ok"), ("Degraded", "Ok"), ("Ready", "Ok")]),
                0,
                "belongs to the host",
            ),
            (
                verdict(&[("Available", "lower"), ("Degraded", "Ok")]),
                0,
                "reason \"lower\"",
            ),
            (
                verdict(&[("Available", ""), ("Degraded", "Ok")]),
                0,
                "reason \"\"",
            ),
            (
                verdict(&[("Available", "Has-Dash"), ("Degraded", "Ok")]),
                0,
                "Has-Dash",
            ),
            (
                Verdict {
                    ready_members: 4,
                    ..verdict(&[("Available", "Ok"), ("Degraded", "Ok")])
                },
                3,
                "ready-members is 4",
            ),
        ];
        for (v, members, expected) in cases {
            let err = validate(v, *members).expect_err(expected);
            assert!(
                err.contains(expected),
                "{err:?} should mention {expected:?}"
            );
        }
        let mut long = verdict(&[("Available", "Ok"), ("Degraded", "Ok")]);
        long.conditions[0].message = "é".repeat(513);
        assert!(
            validate(&long, 0)
                .unwrap_err()
                .contains("1026-byte message")
        );
    }

    #[test]
    fn fallback_is_valid_and_claims_nothing() {
        let v = fallback_verdict(&"ü".repeat(2000));
        assert_eq!(validate(&v, 0), Ok(()));
        for type_ in REQUIRED {
            let c = v.condition(type_).unwrap();
            assert_eq!(c.status, ConditionStatus::Unknown);
            assert_eq!(c.reason, FALLBACK_REASON);
        }
        assert!(v.decline_verification.is_some());
        assert_eq!(v.ready_members, 0);
    }
}

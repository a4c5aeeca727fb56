//! {{name}}: a status policy for etcd-steward.
//!
//! Available when the host verified a quorum (`observation.quorum`: a
//! linearizable read went through raft); Degraded while any member is not
//! Ready or does not answer.
//! Change the decisions below; `cargo test` runs tests/*.yaml against them
//! natively, and `etcd-steward policy test` runs the same cases through the
//! built component.

use steward_policy_sdk::guest::Policy;
use steward_policy_sdk::{
    Condition, ConditionStatus, Observation, PolicyInfo, ProbeOutcome, Probing, QuorumFinding,
    UnverifiedKind, Verdict,
};

pub struct ThisPolicy;

impl Policy for ThisPolicy {
    fn describe() -> PolicyInfo {
        PolicyInfo {
            name: "{{name}}".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            condition_types: vec!["Available".into(), "Degraded".into()],
            settings_schema: r#"{"type":"object","additionalProperties":false}"#.into(),
        }
    }

    fn validate_settings(settings: &str) -> Result<(), String> {
        let value: serde_json::Value =
            serde_json::from_str(settings).map_err(|e| format!("settings are not JSON: {e}"))?;
        match value.as_object() {
            Some(map) if map.is_empty() => Ok(()),
            Some(map) => Err(format!(
                "this policy takes no settings, got {}",
                map.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
            None => Err("settings must be an object".into()),
        }
    }

    fn evaluate(observation: Observation) -> Verdict {
        let report = match &observation.probing {
            Probing::Attempted(report) => Some(report),
            Probing::Skipped(_) => None,
        };
        let answered = |member: &str| {
            report.is_some_and(|r| {
                r.endpoints
                    .iter()
                    .any(|p| p.member == member && matches!(p.outcome, ProbeOutcome::Answered(_)))
            })
        };

        // Whether etcd proved a quorum is the host's finding: take it as is.
        let available = match &observation.quorum {
            QuorumFinding::Verified(_) => Condition::new(
                "Available",
                ConditionStatus::True,
                "QuorumConfirmed",
                "a linearizable read went through raft",
            ),
            QuorumFinding::Unverified(u) => Condition::new(
                "Available",
                match u.kind {
                    UnverifiedKind::NotProbed => ConditionStatus::Unknown,
                    UnverifiedKind::Unreachable | UnverifiedKind::NoQuorum => {
                        ConditionStatus::False
                    }
                },
                match u.kind {
                    UnverifiedKind::NotProbed => "NotProbed",
                    UnverifiedKind::Unreachable => "Unreachable",
                    UnverifiedKind::NoQuorum => "NoQuorum",
                },
                u.message.clone(),
            ),
        };
        let unhealthy: Vec<&str> = observation
            .members
            .iter()
            .filter(|m| !m.pod_ready || !answered(&m.name))
            .map(|m| m.name.as_str())
            .collect();
        let degraded = if unhealthy.is_empty() {
            Condition::new(
                "Degraded",
                ConditionStatus::False,
                "MembersHealthy",
                "every member is Ready and answers",
            )
        } else {
            Condition::new(
                "Degraded",
                ConditionStatus::True,
                "MembersUnhealthy",
                format!("not Ready or not answering: {}", unhealthy.join(", ")),
            )
        };
        let ready = observation
            .members
            .iter()
            .filter(|m| m.pod_ready && answered(&m.name))
            .count() as u32;
        Verdict {
            conditions: vec![available, degraded],
            ready_members: ready,
            decline_verification: None,
            requeue_after_ms: None,
            events: Vec::new(),
        }
    }
}

steward_policy_sdk::export_policy!(ThisPolicy);

/// The YAML cases in tests/, against the plain Rust above, as `etcd-steward
/// policy test` runs them against the component.
#[cfg(test)]
mod tests {
    use steward_policy_sdk::testing::{Outcome, check_outcome, load_cases};

    use super::*;

    #[test]
    fn yaml_cases() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
        let mut failures = Vec::new();
        for file in load_cases(&[dir]).expect("the case files parse") {
            for case in &file.cases {
                let outcome = Outcome::of(case, ThisPolicy::validate_settings, |o| {
                    ThisPolicy::evaluate(o.clone())
                });
                for m in check_outcome(&case.expect, &outcome) {
                    failures.push(format!("{}: {}: {m}", file.path.display(), case.name));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

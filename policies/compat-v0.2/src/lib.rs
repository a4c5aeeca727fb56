//! A status policy built against `steward:status@0.2.0`, before the
//! observation carried backup facts. The host must load it and hand it the
//! 0.2.0 observation: the host's quorum finding, without `backup`.
//!
//! It is Available exactly when the host verified a quorum, and its message
//! names the finding's leader and voters, so a test sees that the finding
//! arrived whole through the older contract.

#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    path: "../../wit/0.2.0",
    world: "status-policy",
});

use exports::steward::status::policy::Guest;
use steward::status::types::{
    Condition, ConditionStatus, Observation, PolicyInfo, QuorumFinding, Verdict,
};

struct CompatV02;

impl Guest for CompatV02 {
    fn describe() -> PolicyInfo {
        PolicyInfo {
            name: "compat-v0.2".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            condition_types: vec!["Available".into(), "Degraded".into()],
            settings_schema: r#"{"type":"object","additionalProperties":false}"#.into(),
        }
    }

    fn validate_settings(settings: String) -> Result<(), String> {
        match settings.trim() {
            "" | "{}" => Ok(()),
            other => Err(format!("compat-v0.2 takes no settings, got {other}")),
        }
    }

    fn evaluate(observation: Observation) -> Verdict {
        let (status, message) = match &observation.quorum {
            QuorumFinding::Verified(q) => (
                ConditionStatus::True,
                format!(
                    "verified: leader {:x}, {} voters",
                    q.leader.unwrap_or(0),
                    q.voters.len()
                ),
            ),
            QuorumFinding::Unverified(u) => (ConditionStatus::False, u.message.clone()),
        };
        let condition = |type_: &str, status: ConditionStatus, message: String| Condition {
            type_: type_.into(),
            status,
            reason: "CompatV02".into(),
            message,
        };
        Verdict {
            conditions: vec![
                condition("Available", status, message),
                condition("Degraded", ConditionStatus::False, String::new()),
            ],
            ready_members: 0,
            decline_verification: None,
            requeue_after_ms: None,
            events: Vec::new(),
        }
    }
}

export!(CompatV02);

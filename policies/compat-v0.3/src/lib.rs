//! A status policy built against `steward:status@0.3.0`, before the
//! observation carried TLS facts. The host must load it and hand it the
//! 0.3.0 observation: the finding and the backup facts, without `tls`.
//!
//! It is Available exactly when the host verified a quorum, and Degraded's
//! message names the backup schedule it was told of, so a test sees that
//! what 0.3.0 added still arrives through the older contract.

#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    path: "../../wit/0.3.0",
    world: "status-policy",
});

use exports::steward::status::policy::Guest;
use steward::status::types::{
    Condition, ConditionStatus, Observation, PolicyInfo, QuorumFinding, Verdict,
};

struct CompatV03;

impl Guest for CompatV03 {
    fn describe() -> PolicyInfo {
        PolicyInfo {
            name: "compat-v0.3".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            condition_types: vec!["Available".into(), "Degraded".into()],
            settings_schema: r#"{"type":"object","additionalProperties":false}"#.into(),
        }
    }

    fn validate_settings(settings: String) -> Result<(), String> {
        match settings.trim() {
            "" | "{}" => Ok(()),
            other => Err(format!("compat-v0.3 takes no settings, got {other}")),
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
        let backup = match &observation.backup {
            Some(b) => format!("backup schedule {}", b.schedule),
            None => "no backup schedule".into(),
        };
        let condition = |type_: &str, status: ConditionStatus, message: String| Condition {
            type_: type_.into(),
            status,
            reason: "CompatV03".into(),
            message,
        };
        Verdict {
            conditions: vec![
                condition("Available", status, message),
                condition("Degraded", ConditionStatus::False, backup),
            ],
            ready_members: 0,
            decline_verification: None,
            requeue_after_ms: None,
            events: Vec::new(),
        }
    }
}

export!(CompatV03);

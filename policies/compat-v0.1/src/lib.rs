//! A status policy built against `steward:status@0.1.0`, whose verdict
//! could still claim `verified`. The host must load it, hand it the 0.1.0
//! observation (no quorum finding) and check its claims after the fact.
//!
//! Settings `{"claim": "verified"}` make it say `Available=True` and
//! `verified: true` whatever the probe saw: the host must reject that
//! verdict whenever its own finding shows no verified quorum. With no
//! settings it is well behaved: available, and verified, exactly when a
//! linearizable read went through.

#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    path: "../../wit/0.1.0",
    world: "status-policy",
});

use exports::steward::status::policy::Guest;
use steward::status::types::{
    Condition, ConditionStatus, Observation, PolicyInfo, Probing, QuorumReadOutcome, Verdict,
};

struct CompatV01;

fn claims(settings: &str) -> Result<bool, String> {
    match settings.trim() {
        "" | "{}" => Ok(false),
        r#"{"claim":"verified"}"# => Ok(true),
        other => Err(format!(
            "settings must be {{}} or {{\"claim\":\"verified\"}}, got {other}"
        )),
    }
}

impl Guest for CompatV01 {
    fn describe() -> PolicyInfo {
        PolicyInfo {
            name: "compat-v0.1".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            // CompatDeclared is declared and never reported: the host must
            // write it as Unknown/NotReported rather than drop it.
            condition_types: vec![
                "Available".into(),
                "Degraded".into(),
                "CompatDeclared".into(),
            ],
            settings_schema: r#"{"type":"object","properties":{"claim":{"enum":["verified"]}},"additionalProperties":false}"#.into(),
        }
    }

    fn validate_settings(settings: String) -> Result<(), String> {
        claims(&settings).map(drop)
    }

    fn evaluate(observation: Observation) -> Verdict {
        let read = matches!(
            &observation.probing,
            Probing::Attempted(r) if matches!(r.quorum_read, QuorumReadOutcome::Succeeded)
        );
        let claim = claims(&observation.settings).unwrap_or(false);
        let available = read || claim;
        let condition = |type_: &str, status: ConditionStatus, message: &str| Condition {
            type_: type_.into(),
            status,
            reason: "CompatV01".into(),
            message: message.into(),
        };
        Verdict {
            conditions: vec![
                condition(
                    "Available",
                    if available {
                        ConditionStatus::True
                    } else {
                        ConditionStatus::False
                    },
                    if claim {
                        "compat-v0.1 claims a verified quorum"
                    } else if read {
                        "a linearizable read went through"
                    } else {
                        "no linearizable read went through"
                    },
                ),
                condition("Degraded", ConditionStatus::False, ""),
            ],
            ready_members: 0,
            verified: available,
            requeue_after_ms: None,
            events: Vec::new(),
        }
    }
}

export!(CompatV01);

//! etcd-steward's default status policy.
//!
//! [`logic`] holds the decisions as plain Rust (tested and benchmarked
//! natively); [`DefaultPolicy`] exports them through the SDK's component
//! glue when built for wasm32-wasip2. The rules are tabled in README.md.

pub mod logic;
mod settings;

pub use logic::{describe, evaluate, evaluate_json_settings};
pub use settings::{SCHEMA as SETTINGS_SCHEMA, Settings};

#[cfg(target_arch = "wasm32")]
mod bump;

/// The default policy as a component: the SDK converts the WIT types, the
/// logic decides.
#[cfg(target_arch = "wasm32")]
pub struct DefaultPolicy;

#[cfg(target_arch = "wasm32")]
impl steward_policy_sdk::guest::Policy for DefaultPolicy {
    fn describe() -> steward_policy_sdk::PolicyInfo {
        logic::describe()
    }

    fn validate_settings(settings: &str) -> Result<(), String> {
        Settings::parse(settings).map(drop)
    }

    fn evaluate(observation: steward_policy_sdk::Observation) -> steward_policy_sdk::Verdict {
        logic::evaluate_json_settings(&observation)
    }
}

steward_policy_sdk::export_policy!(DefaultPolicy);

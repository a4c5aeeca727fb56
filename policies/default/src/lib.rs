//! etcd-steward's default status policy.
//!
//! [`logic`] holds the decisions as plain Rust (tested and benchmarked
//! natively); the `wit` module is the thin component boundary built for
//! wasm32-wasip2. The rules are tabled in README.md.

pub mod logic;
mod settings;

pub use logic::{describe, evaluate, evaluate_json_settings};
pub use settings::{SCHEMA as SETTINGS_SCHEMA, Settings};

#[cfg(target_arch = "wasm32")]
mod bump;
#[cfg(target_arch = "wasm32")]
mod wit;

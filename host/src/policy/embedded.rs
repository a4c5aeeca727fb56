//! The default policy, built for wasm32-wasip2 by host/build.rs and carried
//! inside the binary so the operator needs no policy file to run.

pub const DEFAULT_POLICY_WASM: &[u8] = include_bytes!(env!("STEWARD_DEFAULT_POLICY_WASM"));

//! The policy runtime: runs status policies (WebAssembly components of the
//! `steward:status/status-policy` world in `wit/`) in a sandbox with a
//! deadline and a memory cap, and always returns a verdict fit to write.
//!
//! - [`engine`]: one wasmtime Engine, its epoch ticker, compiled-policy cache
//!   (in memory and on disk); a load is a compile, then a describe.
//! - [`limits`]: the limits policies run under, and the operator's maximum.
//! - [`catalog`]: the EtcdStatusPolicies loaded, swapped in whole on reload,
//!   and per policy the clusters whose last evaluation failed.
//! - [`loaded`]: a loaded policy; describe, validate settings, evaluate.
//! - [`resolve`]: which policy a cluster runs ([`Policies`]).
//! - [`source`]: fetching a component from a ConfigMap or an OCI registry.
//! - [`sandbox`]: the WASI context that grants nothing, the memory cap.
//! - [`verdict`]: the host's rules for a verdict, and its fallback verdict.
//! - [`wit`]: the generated bindings and their conversion to sdk types.
//!
//! Evaluation is synchronous and CPU-bound (bounded by the deadline); from
//! async code call it inside `tokio::task::spawn_blocking`.

pub mod catalog;
mod embedded;
mod engine;
mod error;
mod limits;
mod loaded;
mod resolve;
mod sandbox;
pub mod source;
mod verdict;
mod wit;

pub use catalog::EvaluationOutcome;
pub use embedded::DEFAULT_POLICY_WASM;
pub use engine::{Compiled, EngineConfig, PolicyEngine, digest};
pub use error::{ErrorKind, PolicyError};
pub use limits::Limits;
pub use loaded::LoadedPolicy;
pub use resolve::{EMBEDDED_SOURCE, Policies, ResolveError, Resolved};
pub use verdict::{Evaluation, FALLBACK_REASON, fallback_verdict, validate as validate_verdict};

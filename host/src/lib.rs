//! etcd-steward: an etcd operator whose status verdicts come from sandboxed
//! WebAssembly policies.

pub mod api;
pub mod conditions;
pub mod policy;
pub mod resources;

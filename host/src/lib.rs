//! etcd-steward: an etcd operator whose status verdicts come from sandboxed
//! WebAssembly policies.

pub mod cli;
pub mod policy;

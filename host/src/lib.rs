//! etcd-steward: an etcd operator whose status verdicts come from sandboxed
//! WebAssembly policies.
//!
//! Every EtcdCluster reconcile runs observe -> evaluate (policy) -> write
//! status -> act; see [`reconcile`] for how the types enforce that order.

pub mod api;
pub mod cli;
pub mod conditions;
pub mod controller;
pub mod etcd;
pub mod leader;
pub mod member;
pub mod metrics;
pub mod observe;
pub mod policy;
pub mod reconcile;
pub mod resources;

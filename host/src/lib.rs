//! etcd-steward: an etcd operator whose status verdicts come from sandboxed
//! WebAssembly policies.
//!
//! Every reconcile runs observe -> evaluate (policy) -> write status -> act;
//! see [`cluster`] for how the types enforce that order, and [`member`] for
//! the same order in the EtcdMember controller. [`status_policy`] loads the
//! EtcdStatusPolicies clusters select, off the reconcile path.

pub mod api;
pub mod auth;
pub mod certificates;
pub mod cli;
pub mod cluster;
pub mod conditions;
pub mod context;
pub mod controller;
pub mod error;
pub mod etcd;
pub mod facts;
pub mod health;
pub mod leader;
pub mod member;
pub mod metrics;
#[cfg(test)]
pub(crate) mod mock_api;
pub mod policy;
pub mod resources;
pub mod restore;
pub mod schedule;
pub mod snapshot;
pub mod status_policy;
pub mod text;
pub mod tls;
pub mod watch;

//! Talking to etcd: the [`EtcdApi`] trait (every RPC the operator makes),
//! its etcd-client implementation, error classification, and a
//! fault-injecting wrapper for tests.
//!
//! Errors leave this module as data ([`RpcError`] with a
//! [`steward_policy_sdk::ProbeErrorKind`]) so that callers record them in
//! an observation instead of returning early; see `crate::facts`.

mod api;
mod classify;
mod client;
mod faults;

pub use api::{AddedMember, EtcdApi, KvHash, Rpc, RpcError, SnapshotStream, StatusInfo};
pub use classify::redact;
pub use client::{ClientConfig, Credentials, DEFAULT_DEADLINE, EtcdClient, alarms_for};
pub use faults::{Failure, Fault, Faults, FaultyEtcd, SuccessHook, Times};

//! What both controllers know about a cluster's members: what etcd says
//! right now ([`probe_cluster`]), the members in the watch cache
//! ([`cluster_members`]) and their Pods ([`PodFacts`]). The observe stage of
//! each reconcile (observe → evaluate → write status → act) is built on it.
//!
//! # Why nothing here returns an error
//!
//! This operator exists because of an incident in another etcd operator: a
//! MemberList call failed ("lookup ...: no such host"), the reconciler
//! logged it and returned early, and the status derivation after it never
//! ran. A cluster whose members were all dead kept `Available=True` and
//! `readyMembers: 3` for as long as the outage lasted, because the one path
//! that would have said so was behind an early return on an etcd error.
//!
//! So an unreachable etcd is not an error of the reconcile: it is the most
//! important thing the reconcile can observe. [`probe_cluster`] returns a
//! [`ProbeReport`], never a `Result`: timeouts, DNS failures, refused
//! connections and TLS errors are recorded per endpoint and per RPC, and the
//! policy turns them into conditions. There is no `?` to reach for, so no
//! future change can bring that early return back through this module.
//!
//! Every RPC is bounded by a deadline and the per-member probes run in
//! parallel, so even when every endpoint hangs the probe takes about one
//! deadline, and the status is written seconds after an outage begins.

mod backup;
mod members;
mod pod;
mod probe;
pub mod quorum;

pub use backup::{backup_facts, observe_backup, verified_snapshots};
pub use members::cluster_members;
pub use pod::{PodFacts, ms, pod_facts};
pub use probe::{ProbeTarget, probe_cluster};
pub use quorum::Quorum;

/// Re-exported for callers that build on the report.
pub use steward_policy_sdk::ProbeReport;

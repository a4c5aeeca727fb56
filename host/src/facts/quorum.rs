//! Whether etcd itself verified a quorum in one probe: the host's finding,
//! which neither a policy nor a stale cache can talk it out of. Every
//! membership change, every `lastVerifiedTime` and every MemberRemove
//! depends on it.
//!
//! The rule is [`sdk::QuorumFinding::of`] (docs/api.md states it): one
//! definition, which the host hands to every policy in
//! `observation.quorum` and which `policy test` and the Rust SDK's case
//! runner apply the same way. This module gives the host's own consumers
//! the verified quorum, or why there is none.

use steward_policy_sdk::{self as sdk, QuorumFinding};

/// A quorum etcd verified: who leads, who votes, who agrees.
pub type Quorum = sdk::VerifiedQuorum;

/// The quorum `report` shows, or why it shows none.
pub fn confirmed(report: &sdk::ProbeReport) -> Result<Quorum, String> {
    verified(QuorumFinding::of_report(report))
}

/// The same for an observation's finding.
pub fn verified(finding: QuorumFinding) -> Result<Quorum, String> {
    match finding {
        QuorumFinding::Verified(q) => Ok(q),
        QuorumFinding::Unverified(u) => Err(u.message),
    }
}

//! VersionDrifted, on both kinds: whether the etcd that runs is the etcd the
//! spec asks for. Only etcd's own word counts (the version each member
//! reports in its Status answer), never an image tag.

use steward_policy_sdk::{Condition, ConditionStatus};

/// The members run a version other than `spec.version`, or differ among
/// themselves. Written by the host on EtcdClusters and EtcdMembers.
pub const VERSION_DRIFTED: &str = "VersionDrifted";

pub mod reason {
    pub const VERSION_MISMATCH: &str = "VersionMismatch";
    pub const VERSION_MATCHES: &str = "VersionMatches";
    /// No member reported its version in this observation.
    pub const VERSION_UNKNOWN: &str = "VersionUnknown";
}

/// VersionDrifted from `spec` and the versions members reported (one per
/// member that answered).
pub fn version_drifted(spec: &str, running: &[&str]) -> Condition {
    let mut distinct: Vec<&str> = running.to_vec();
    distinct.sort_by_key(|v| parse(v));
    distinct.dedup();
    match distinct.as_slice() {
        [] => Condition::new(
            VERSION_DRIFTED,
            ConditionStatus::Unknown,
            reason::VERSION_UNKNOWN,
            "no member reported its etcd version",
        ),
        [only] if *only == spec => Condition::new(
            VERSION_DRIFTED,
            ConditionStatus::False,
            reason::VERSION_MATCHES,
            format!("etcd runs {only}"),
        ),
        _ => {
            let runs: Vec<String> = distinct
                .iter()
                .map(|v| {
                    let n = running.iter().filter(|r| *r == v).count();
                    if running.len() == 1 {
                        (*v).to_owned()
                    } else {
                        format!("{v} ({n} of {})", running.len())
                    }
                })
                .collect();
            Condition::new(
                VERSION_DRIFTED,
                ConditionStatus::True,
                reason::VERSION_MISMATCH,
                format!("etcd runs {}; spec.version is {spec}", runs.join(", ")),
            )
        }
    }
}

/// The version a cluster runs: the oldest its members report, since a
/// cluster speaks the protocol of its oldest member. None when no member
/// reported one.
pub fn cluster_version<'a>(running: &[&'a str]) -> Option<&'a str> {
    running.iter().copied().min_by_key(|v| parse(v))
}

/// `X.Y.Z` as numbers, so 3.10.0 sorts after 3.9.0; anything else sorts
/// first, as the most suspicious.
fn parse(v: &str) -> (u8, Vec<u64>) {
    let parts: Option<Vec<u64>> = v.split('.').map(|p| p.parse().ok()).collect();
    match parts {
        Some(p) => (1, p),
        None => (0, Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConditionStatus::{False, True, Unknown};

    #[test]
    fn drift_compares_every_member_with_the_spec_and_with_each_other() {
        assert_eq!(version_drifted("3.5.1", &[]).status, Unknown);
        let same = version_drifted("3.5.1", &["3.5.1", "3.5.1"]);
        assert_eq!(
            (same.status, same.message.as_str()),
            (False, "etcd runs 3.5.1")
        );
        let spec = version_drifted("9.9.9", &["3.5.1", "3.5.1", "3.5.1"]);
        assert_eq!(spec.status, True);
        assert_eq!(
            spec.message,
            "etcd runs 3.5.1 (3 of 3); spec.version is 9.9.9"
        );
        let mixed = version_drifted("3.5.2", &["3.5.2", "3.5.1", "3.5.2"]);
        assert_eq!(mixed.status, True);
        assert_eq!(
            mixed.message,
            "etcd runs 3.5.1 (1 of 3), 3.5.2 (2 of 3); spec.version is 3.5.2"
        );
        assert_eq!(
            version_drifted("3.5.1", &["3.6.0"]).message,
            "etcd runs 3.6.0; spec.version is 3.5.1"
        );
    }

    #[test]
    fn a_cluster_runs_its_oldest_members_version() {
        assert_eq!(cluster_version(&["3.10.0", "3.9.2"]), Some("3.9.2"));
        assert_eq!(cluster_version(&[]), None);
    }
}

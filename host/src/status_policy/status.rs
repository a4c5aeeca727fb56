//! The EtcdStatusPolicy's status, computed from the load's outcome
//! whatever it was: a policy that cannot run says why, and whether it
//! waits for a human (Stalled=True) or is being retried.
//!
//! Four conditions, always all present:
//! - `Ready`: the pinned version runs (kstatus: Current), or why none does;
//! - `Stalled`: none runs and only a human can fix it (kstatus: Failed);
//! - `SourceDrifted`: the source, read again under the same pin, holds
//!   something else than the version that runs. That version keeps running
//!   and `Ready` stays True: it is still exactly what the spec pins;
//! - `Degraded`: the version runs, but some cluster's last evaluation by it
//!   failed. `Ready` stays True here too: the version is loaded, and a
//!   policy failing for one cluster of many must not hold back every
//!   rollout that waits on it; the count and the clusters are in
//!   `failingEvaluations` and `failingClusters`.

use steward_policy_sdk::{Condition, ConditionStatus};

use crate::api::{
    DescribedPolicy, EffectiveLimits, EtcdStatusPolicy, EtcdStatusPolicyStatus, FailingCluster,
};
use crate::conditions::{self, DEGRADED, READY, STALLED};
use crate::policy::catalog::{Drift, Entry, FailedEvaluation, SourceHolds, reason};

/// The condition saying whether the source holds the running version.
pub const SOURCE_DRIFTED: &str = "SourceDrifted";

/// Reasons of `SourceDrifted` and `Degraded`, besides a load's.
pub mod why {
    /// The source holds the version that runs.
    pub const SOURCE_MATCHES: &str = "SourceMatches";
    /// The source holds other bytes than the version that runs.
    pub const SOURCE_CHANGED: &str = "SourceChanged";
    /// No version runs: nothing to compare or evaluate.
    pub const NOT_LOADED: &str = "NotLoaded";
    /// Some cluster's last evaluation failed.
    pub const EVALUATIONS_FAILING: &str = "EvaluationsFailing";
    /// No cluster's last evaluation failed.
    pub const EVALUATIONS_SUCCEEDING: &str = "EvaluationsSucceeding";
}

/// How many failing clusters the status lists; the count has them all.
pub const LISTED_FAILURES: usize = 10;

/// How much of a failure's message the list keeps: the cluster's own
/// status has all of it.
const LISTED_MESSAGE_BYTES: usize = 256;

/// The status for `entry`, with `clusters` selecting the policy and
/// `failing` of them failing their last evaluation by the running version.
pub fn next_status(
    policy: &EtcdStatusPolicy,
    entry: &Entry,
    clusters: i32,
    failing: &[FailedEvaluation],
    now: jiff::Timestamp,
) -> EtcdStatusPolicyStatus {
    let generation = policy.metadata.generation.unwrap_or_default();
    let prev = policy.status.clone().unwrap_or_default();
    let not_loaded = |type_: &str| {
        Condition::new(
            type_,
            ConditionStatus::Unknown,
            why::NOT_LOADED,
            "no version of this policy runs (see Ready)",
        )
    };
    let (desired, running, failing) = match entry {
        Entry::Running {
            key,
            policy: loaded,
            drift,
        } => (
            vec![
                Condition::new(
                    READY,
                    ConditionStatus::True,
                    reason::LOADED,
                    format!(
                        "{} {} (sha256:{}) is loaded and runs for the clusters that select it",
                        loaded.info.name, loaded.info.version, loaded.digest
                    ),
                ),
                Condition::new(STALLED, ConditionStatus::False, reason::LOADED, ""),
                source_drifted(&key.origin(), &key.version, &key.digest, drift.as_ref()),
                degraded(clusters, failing),
            ],
            Some(loaded),
            failing,
        ),
        Entry::Failed { failure, .. } => {
            let message = format!("{}; no version of this policy runs", failure.message);
            (
                vec![
                    Condition::new(
                        READY,
                        ConditionStatus::False,
                        failure.reason,
                        message.clone(),
                    ),
                    // A registry that does not answer is retried; anything
                    // else waits for a human to change the spec or source.
                    if failure.transient {
                        Condition::new(STALLED, ConditionStatus::False, failure.reason, "retrying")
                    } else {
                        Condition::new(STALLED, ConditionStatus::True, failure.reason, message)
                    },
                    not_loaded(SOURCE_DRIFTED),
                    not_loaded(DEGRADED),
                ],
                None,
                // Failures of a version that no longer runs are not this
                // status's to show.
                &[][..],
            )
        }
    };
    EtcdStatusPolicyStatus {
        observed_generation: Some(generation),
        digest: running.map(|p| format!("sha256:{}", p.digest)),
        policy: running.map(|p| DescribedPolicy {
            name: p.info.name.clone(),
            version: p.info.version.clone(),
            condition_types: p.info.condition_types.clone(),
            settings_schema: p.info.settings_schema.clone(),
        }),
        limits: running.map(|p| {
            let l = p.limits();
            EffectiveLimits {
                deadline_milliseconds: l.deadline.as_millis() as i64,
                memory_bytes: l.memory_bytes as i64,
                component_bytes: l.component_bytes as i64,
                instances: l.instances.into(),
            }
        }),
        clusters,
        failing_evaluations: failing.len() as i32,
        failing_clusters: failing
            .iter()
            .take(LISTED_FAILURES)
            .map(|f| {
                let (namespace, name) = f.cluster.split_once('/').unwrap_or(("", &f.cluster));
                FailingCluster {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    reason: f.kind.clone(),
                    message: crate::text::truncate(&f.message, LISTED_MESSAGE_BYTES),
                }
            })
            .collect(),
        conditions: conditions::merge(&prev.conditions, &desired, generation, now),
    }
}

/// SourceDrifted of a running version loaded from `origin` (`version`
/// empty: a source the pin names the content of, read once) under `pin`.
fn source_drifted(origin: &str, version: &str, pin: &str, drift: Option<&Drift>) -> Condition {
    let Some(drift) = drift else {
        let message = if version.is_empty() {
            format!("{origin} held the pinned component when it was pulled")
        } else {
            format!("{origin} holds the pinned component")
        };
        return Condition::new(
            SOURCE_DRIFTED,
            ConditionStatus::False,
            why::SOURCE_MATCHES,
            message,
        );
    };
    let seen = drift.seen.origin();
    match &drift.holds {
        SourceHolds::Other(digest) => Condition::new(
            SOURCE_DRIFTED,
            ConditionStatus::True,
            why::SOURCE_CHANGED,
            format!(
                "{seen} now holds {digest}, not the pinned {pin}; the pinned version, loaded \
                 from {origin}, keeps running, and the new component does not run until \
                 spec.digest pins {digest}"
            ),
        ),
        // The API did not answer: whether the source moved is not known.
        SourceHolds::Nothing(failure) if failure.transient => Condition::new(
            SOURCE_DRIFTED,
            ConditionStatus::Unknown,
            failure.reason,
            format!(
                "{}; the pinned version, loaded from {origin}, keeps running",
                failure.message
            ),
        ),
        SourceHolds::Nothing(failure) => Condition::new(
            SOURCE_DRIFTED,
            ConditionStatus::True,
            failure.reason,
            format!(
                "{}; the pinned version, loaded from {origin}, keeps running, but an operator \
                 that restarts could not load it again",
                failure.message
            ),
        ),
    }
}

/// Degraded of a running version with `clusters` selecting it.
fn degraded(clusters: i32, failing: &[FailedEvaluation]) -> Condition {
    if failing.is_empty() {
        return Condition::new(
            DEGRADED,
            ConditionStatus::False,
            why::EVALUATIONS_SUCCEEDING,
            "no cluster that selects it failed its last evaluation",
        );
    }
    let mut named: Vec<String> = failing
        .iter()
        .take(LISTED_FAILURES)
        .map(|f| format!("{} ({})", f.cluster, f.kind))
        .collect();
    if failing.len() > LISTED_FAILURES {
        named.push(format!("{} more", failing.len() - LISTED_FAILURES));
    }
    Condition::new(
        DEGRADED,
        ConditionStatus::True,
        why::EVALUATIONS_FAILING,
        format!(
            "{} of the {clusters} clusters that select it failed their last evaluation by this \
             version: {}; each shows the host's fallback verdict (PolicyFailed), or the SDK's \
             for an exception it caught (PolicyError); status.failingClusters says how",
            failing.len(),
            named.join(", ")
        ),
    )
}

/// Whether the status is worth another look soon: the source could not be
/// read, so whether it drifted is not known yet.
pub fn source_unknown(entry: &Entry) -> bool {
    matches!(
        entry,
        Entry::Running {
            drift: Some(Drift {
                holds: SourceHolds::Nothing(failure),
                ..
            }),
            ..
        } if failure.transient
    )
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, LazyLock};

    use super::*;
    use crate::api::{EtcdStatusPolicySpec, PolicySource};
    use crate::policy::catalog::{LoadFailure, LoadKey};
    use crate::policy::{EngineConfig, LoadedPolicy, PolicyEngine};
    use crate::policy::{Limits, digest};

    static ENGINE: LazyLock<PolicyEngine> =
        LazyLock::new(|| PolicyEngine::new(EngineConfig::default()).expect("the engine starts"));

    fn policy() -> EtcdStatusPolicy {
        EtcdStatusPolicy::new(
            "p",
            EtcdStatusPolicySpec {
                digest: "sha256:aa".into(),
                source: PolicySource::default(),
                limits: Default::default(),
            },
        )
    }

    const NOW: jiff::Timestamp = jiff::Timestamp::UNIX_EPOCH;

    fn failed(transient: bool) -> Entry {
        Entry::Failed {
            key: LoadKey {
                digest: "sha256:aa".into(),
                limits: Limits::default(),
                source: "oci r.example/p:1".into(),
                version: String::new(),
            },
            failure: LoadFailure {
                reason: "SourceUnreachable",
                message: "pulling r.example/p:1: refused".into(),
                transient,
            },
        }
    }

    fn condition<'a>(status: &'a EtcdStatusPolicyStatus, type_: &str) -> (&'a str, &'a str) {
        let c = status
            .condition(type_)
            .unwrap_or_else(|| panic!("no {type_}"));
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn a_transient_failure_is_retried_and_any_other_stalls() {
        let retried = next_status(&policy(), &failed(true), 2, &[], NOW);
        assert_eq!(retried.clusters, 2);
        assert_eq!(retried.digest, None, "no version runs");
        let ready = retried.condition(READY).unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason, "SourceUnreachable");
        assert_eq!(
            ready.message,
            "pulling r.example/p:1: refused; no version of this policy runs"
        );
        let stalled = retried.condition(STALLED).unwrap();
        assert_eq!(stalled.status, "False");
        assert_eq!(stalled.message, "retrying");
        assert_eq!(
            condition(&retried, SOURCE_DRIFTED),
            ("Unknown", "NotLoaded")
        );
        assert_eq!(condition(&retried, DEGRADED), ("Unknown", "NotLoaded"));

        let stalls = next_status(&policy(), &failed(false), 2, &[], NOW);
        let stalled = stalls.condition(STALLED).unwrap();
        assert_eq!(stalled.status, "True");
        assert_eq!(stalled.reason, "SourceUnreachable");
        assert_eq!(stalled.message, stalls.condition(READY).unwrap().message);
    }

    fn config_map_key(version: &str) -> LoadKey {
        LoadKey {
            digest: format!("sha256:{}", digest(crate::policy::DEFAULT_POLICY_WASM)),
            limits: ENGINE.limits().clone(),
            source: "configMap ops/cm key policy.wasm".into(),
            version: version.into(),
        }
    }

    fn running(drift: Option<Drift>) -> (Entry, Arc<LoadedPolicy>) {
        let loaded = ENGINE.default_policy();
        let entry = Entry::Running {
            key: config_map_key("7"),
            policy: loaded.clone(),
            drift,
        };
        (entry, loaded)
    }

    /// While the ConfigMap holds the next version and the pin is still the
    /// running one's, the policy stays Ready (kstatus: Current) and says
    /// what the source holds, naming both digests.
    #[test]
    fn a_drifted_source_is_told_while_the_pinned_version_stays_ready() {
        let (steady, loaded) = running(None);
        let status = next_status(&policy(), &steady, 1, &[], NOW);
        assert_eq!(condition(&status, READY), ("True", "Loaded"));
        assert_eq!(
            condition(&status, SOURCE_DRIFTED),
            ("False", "SourceMatches")
        );
        assert_eq!(
            status.condition(SOURCE_DRIFTED).unwrap().message,
            "configMap ops/cm key policy.wasm at resourceVersion 7 holds the pinned component"
        );

        let next = "sha256:bb".to_owned();
        let (drifted, _) = running(Some(Drift {
            seen: config_map_key("8"),
            holds: SourceHolds::Other(next.clone()),
        }));
        let status = next_status(&policy(), &drifted, 1, &[], NOW);
        assert_eq!(condition(&status, READY), ("True", "Loaded"));
        assert_eq!(condition(&status, STALLED), ("False", "Loaded"));
        assert_eq!(
            condition(&status, SOURCE_DRIFTED),
            ("True", "SourceChanged")
        );
        let pinned = format!("sha256:{}", loaded.digest);
        assert_eq!(status.digest.as_deref(), Some(pinned.as_str()));
        assert_eq!(
            status.condition(SOURCE_DRIFTED).unwrap().message,
            format!(
                "configMap ops/cm key policy.wasm at resourceVersion 8 now holds sha256:bb, not \
                 the pinned {pinned}; the pinned version, loaded from configMap ops/cm key \
                 policy.wasm at resourceVersion 7, keeps running, and the new component does \
                 not run until spec.digest pins sha256:bb"
            )
        );
        assert_eq!(
            status.condition(READY),
            next_status(&policy(), &steady, 1, &[], NOW).condition(READY),
            "Ready does not move: the clusters have nothing to re-evaluate"
        );
        assert!(!source_unknown(&drifted));

        let missing = LoadFailure {
            reason: "SourceMissing",
            message: "ConfigMap ops/cm (spec.source.configMap) not found".into(),
            transient: false,
        };
        let (gone, _) = running(Some(Drift {
            seen: config_map_key("-"),
            holds: SourceHolds::Nothing(missing),
        }));
        let status = next_status(&policy(), &gone, 1, &[], NOW);
        assert_eq!(
            condition(&status, SOURCE_DRIFTED),
            ("True", "SourceMissing")
        );
        assert!(
            status
                .condition(SOURCE_DRIFTED)
                .unwrap()
                .message
                .ends_with("keeps running, but an operator that restarts could not load it again")
        );

        let unreachable = LoadFailure {
            reason: "SourceUnreachable",
            message: "reading ConfigMap ops/cm: refused".into(),
            transient: true,
        };
        let (unknown, _) = running(Some(Drift {
            seen: config_map_key("?"),
            holds: SourceHolds::Nothing(unreachable),
        }));
        let status = next_status(&policy(), &unknown, 1, &[], NOW);
        assert_eq!(
            condition(&status, SOURCE_DRIFTED),
            ("Unknown", "SourceUnreachable")
        );
        assert!(source_unknown(&unknown), "looked at again soon");
    }

    fn failure(cluster: &str, kind: &str) -> FailedEvaluation {
        FailedEvaluation {
            cluster: cluster.into(),
            digest: "aa".into(),
            kind: kind.into(),
            message: format!("policy trapped: evaluate: {}", "x".repeat(400)),
        }
    }

    /// Failing evaluations make the running version Degraded, not unready;
    /// the count is whole and the list bounded.
    #[test]
    fn failing_evaluations_are_counted_listed_and_degrade_the_policy() {
        let (entry, _) = running(None);
        let healthy = next_status(&policy(), &entry, 3, &[], NOW);
        assert_eq!(
            condition(&healthy, DEGRADED),
            ("False", "EvaluationsSucceeding")
        );
        assert_eq!(healthy.failing_evaluations, 0);
        assert!(healthy.failing_clusters.is_empty());

        let two = [failure("ns/a", "Trap"), failure("ns/b", "PolicyError")];
        let status = next_status(&policy(), &entry, 3, &two, NOW);
        assert_eq!(condition(&status, READY), ("True", "Loaded"));
        assert_eq!(condition(&status, DEGRADED), ("True", "EvaluationsFailing"));
        let message = &status.condition(DEGRADED).unwrap().message;
        assert!(
            message.starts_with(
                "2 of the 3 clusters that select it failed their last evaluation by this \
                 version: ns/a (Trap), ns/b (PolicyError); "
            ),
            "{message}"
        );
        assert_eq!(status.failing_evaluations, 2);
        assert_eq!(
            (
                status.failing_clusters[1].namespace.as_str(),
                status.failing_clusters[1].name.as_str(),
                status.failing_clusters[1].reason.as_str()
            ),
            ("ns", "b", "PolicyError")
        );
        assert!(status.failing_clusters[0].message.len() <= LISTED_MESSAGE_BYTES);

        let many: Vec<FailedEvaluation> = (0..25)
            .map(|i| failure(&format!("ns/c{i:02}"), "Deadline"))
            .collect();
        let status = next_status(&policy(), &entry, 30, &many, NOW);
        assert_eq!(status.failing_evaluations, 25);
        assert_eq!(status.failing_clusters.len(), LISTED_FAILURES);
        assert!(
            status
                .condition(DEGRADED)
                .unwrap()
                .message
                .contains("ns/c09 (Deadline), 15 more;")
        );

        // When no version runs, failures of the old one are not shown.
        let status = next_status(&policy(), &failed(false), 3, &two, NOW);
        assert_eq!(status.failing_evaluations, 0);
        assert_eq!(condition(&status, DEGRADED), ("Unknown", "NotLoaded"));
    }
}

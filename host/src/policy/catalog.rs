//! The EtcdStatusPolicies this process can run, by name: what a cluster
//! that selects one gets. The policy controller fills it, fetching and
//! compiling off the cluster reconcile path, and swaps each new version in
//! whole; cluster reconciles only read it.
//!
//! Each entry is the outcome of the last load: a policy that runs, or why
//! none does, with the pin it was loaded under. A reader asks for the
//! current pin and gets nothing else: while a new pin loads, the old
//! version does not run (it no longer matches the pin), and a new version
//! that fails to load replaces the old one with its failure. While the pin
//! stays, the version that runs keeps running even when its source comes
//! to hold other bytes, or none: its own bytes are still the pinned ones.
//! The entry then says what the source holds ([`Drift`]).
//!
//! The catalog also keeps, per policy, the clusters whose last evaluation
//! failed, as the cluster reconciles report them
//! ([`Catalog::record_evaluation`]): a version that loads but fails when it
//! runs is told apart from one that works.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::LoadedPolicy;

/// What identifies a load: a different key means the policy must be loaded
/// again.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LoadKey {
    pub digest: String,
    pub limits: super::Limits,
    /// Where the component is read: `configMap <ns>/<name> key <key>`, or
    /// `oci <reference>`.
    pub source: String,
    /// Which version of the source was read: a ConfigMap's resourceVersion
    /// (`?` while it cannot be read, `-` while it holds no component), so an
    /// edited ConfigMap is read again under the same pin. Empty for an OCI
    /// reference: the pin names its content.
    pub version: String,
}

impl LoadKey {
    /// The source and the version read, as messages name them. A bare
    /// number after the source reads as a line or a count, so the version
    /// is named for what it is.
    pub fn origin(&self) -> String {
        match self.version.as_str() {
            "" => self.source.clone(),
            "?" => format!("{} (could not be read)", self.source),
            "-" => format!("{} (holds no component)", self.source),
            version => format!("{} at resourceVersion {version}", self.source),
        }
    }

    /// The same pin (digest and limits) from the same source, whatever
    /// version of the source was read.
    pub fn same_pin(&self, other: &LoadKey) -> bool {
        self.digest == other.digest && self.limits == other.limits && self.source == other.source
    }
}

/// The outcome of loading one version of a policy.
#[derive(Clone, Debug)]
pub enum Entry {
    Running {
        /// The key the running version was loaded under.
        key: LoadKey,
        policy: Arc<LoadedPolicy>,
        /// Set while the source, read again under the same pin, no longer
        /// holds this version.
        drift: Option<Drift>,
    },
    Failed {
        key: LoadKey,
        failure: LoadFailure,
    },
}

impl Entry {
    pub fn key(&self) -> &LoadKey {
        match self {
            Entry::Running { key, .. } | Entry::Failed { key, .. } => key,
        }
    }
}

/// The source of a running version, read again under the same pin, holds
/// something else. Only the version already loaded keeps running: its bytes
/// are the pinned ones, and what the source holds now is never run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drift {
    /// The source as it was read: a later read that finds it at this very
    /// version knows the answer without reading the bytes again.
    pub seen: LoadKey,
    pub holds: SourceHolds,
}

/// What a drifted source holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceHolds {
    /// Other bytes: their digest, `sha256:<hex>`.
    Other(String),
    /// Nothing that could be had, and why: a ConfigMap or key that is not
    /// there, or (transient) an API that did not answer.
    Nothing(LoadFailure),
}

pub mod reason {
    //! The reasons a load ends with, on the EtcdStatusPolicy's conditions
    //! and Events: declared once here, where a [`super::LoadFailure`]
    //! carries one, and named by the types that fail (the fetch's
    //! [`crate::policy::source::FetchError`], the controller's phases).
    /// The pinned version runs.
    pub const LOADED: &str = "Loaded";
    /// spec.limits asks for more than the operator allows, or the
    /// component is larger than its componentBytes.
    pub const LIMITS_EXCEEDED: &str = "LimitsExceeded";
    /// The source, or something it names, does not exist or does not hold
    /// a component.
    pub const SOURCE_MISSING: &str = "SourceMissing";
    /// The registry or the apiserver did not answer: the one reason that
    /// is retried.
    pub const SOURCE_UNREACHABLE: &str = "SourceUnreachable";
    /// The registry refused the credentials, or anonymous access.
    pub const SOURCE_UNAUTHORIZED: &str = "SourceUnauthorized";
    /// The registry's certificate was refused.
    pub const SOURCE_UNTRUSTED: &str = "SourceUntrusted";
    /// The component is not the one spec.digest pins.
    pub const DIGEST_MISMATCH: &str = "DigestMismatch";
    /// The engine refused the component, or it failed to describe itself.
    pub const INVALID_COMPONENT: &str = "InvalidComponent";
}

/// Why a policy's pinned component does not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct LoadFailure {
    /// CamelCase, for a condition reason and an Event: one of [`reason`].
    pub reason: &'static str,
    pub message: String,
    /// A fault that may pass by itself (a registry that does not answer):
    /// the same version is tried again later.
    pub transient: bool,
}

/// How one evaluation by an EtcdStatusPolicy's version ended for a
/// cluster, as the cluster reconcile reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvaluationOutcome<'a> {
    /// The policy answered: its verdict was written as it is, or it
    /// refused the cluster's settings (the cluster's fault, not its own).
    Answered,
    /// The policy failed: `kind` says how (the error's kind, `Trap`,
    /// `Deadline`, `Memory`, `InvalidVerdict`, `Instantiate`; the check
    /// that rejected its verdict, `UnconfirmedVerification`,
    /// `UnconfirmedAvailability`; or `PolicyError` for an exception its SDK
    /// caught), and `message` is what the cluster's status says of it.
    Failed { kind: &'a str, message: &'a str },
}

/// A cluster whose last evaluation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedEvaluation {
    /// `namespace/name` of the cluster.
    pub cluster: String,
    /// The version that failed: sha256 of its component, lowercase hex.
    pub digest: String,
    pub kind: String,
    pub message: String,
}

/// One policy's clusters whose last evaluation failed.
#[derive(Default)]
struct Evaluations {
    /// By `namespace/name`.
    failing: BTreeMap<String, FailedEvaluation>,
    /// Moves when a cluster starts or stops failing, or fails another way
    /// or with another version; not when only the message changes, so a
    /// policy that fails the same way on every reconcile does not rewrite
    /// its status on every reconcile.
    revision: u64,
}

#[derive(Default)]
pub struct Catalog {
    entries: Mutex<HashMap<String, Entry>>,
    /// Bumped on every change, so a reconcile can wait for a first load.
    changed: tokio::sync::watch::Sender<u64>,
    /// By policy name. A cluster is in one policy's record at most: the
    /// one whose version it ran last.
    evaluations: Mutex<HashMap<String, Evaluations>>,
    /// Bumped whenever a revision in `evaluations` moves.
    evaluations_moved: tokio::sync::watch::Sender<u64>,
}

impl Catalog {
    pub fn get(&self, name: &str) -> Option<Entry> {
        self.lock().get(name).cloned()
    }

    /// Swaps in the outcome of a load, whole.
    pub fn set(&self, name: &str, entry: Entry) {
        self.lock().insert(name.to_owned(), entry);
        self.changed.send_modify(|n| *n += 1);
    }

    /// Keeps only the entries of these policies (the others were deleted),
    /// and their records of failing evaluations.
    pub fn retain(&self, names: &[String]) {
        self.lock().retain(|name, _| names.contains(name));
        self.lock_evaluations()
            .retain(|name, _| names.contains(name));
    }

    /// The entry for `name` loaded under `pin`, waiting up to `patience` for
    /// that load to finish (at startup, for a policy created a moment ago,
    /// or a new pin being fetched and compiled). `None` after that: still
    /// loading. An entry under another pin is never returned: it may not run.
    pub async fn wait_for(&self, name: &str, pin: &str, patience: Duration) -> Option<Entry> {
        let mut changes = self.changed.subscribe();
        let wait = async {
            loop {
                if let Some(entry) = self.get(name).filter(|e| e.key().digest == pin) {
                    return entry;
                }
                if changes.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(patience, wait).await.ok()
    }

    /// Remembers how `cluster`'s (`namespace/name`) last evaluation ended.
    /// `policy` names the EtcdStatusPolicy whose version ran, `digest` that
    /// version; `None` when the cluster ran no EtcdStatusPolicy (the
    /// embedded default, or the deprecated ConfigMap form). The cluster is
    /// dropped from every other policy's record: it runs one policy at a
    /// time.
    pub fn record_evaluation(
        &self,
        cluster: &str,
        policy: Option<&str>,
        digest: &str,
        outcome: EvaluationOutcome<'_>,
    ) {
        let mut moved = false;
        let mut all = self.lock_evaluations();
        for (name, record) in all.iter_mut() {
            if Some(name.as_str()) != policy && record.failing.remove(cluster).is_some() {
                record.revision += 1;
                moved = true;
            }
        }
        if let Some(policy) = policy {
            let record = all.entry(policy.to_owned()).or_default();
            let changed = match outcome {
                EvaluationOutcome::Answered => record.failing.remove(cluster).is_some(),
                EvaluationOutcome::Failed { kind, message } => {
                    let failed = FailedEvaluation {
                        cluster: cluster.to_owned(),
                        digest: digest.to_owned(),
                        kind: kind.to_owned(),
                        message: message.to_owned(),
                    };
                    let before = record.failing.insert(cluster.to_owned(), failed);
                    before.is_none_or(|b| b.digest != digest || b.kind != kind)
                }
            };
            if changed {
                record.revision += 1;
                moved = true;
            }
        }
        drop(all);
        if moved {
            self.evaluations_moved.send_modify(|n| *n += 1);
        }
    }

    /// The clusters whose last evaluation by version `digest` of `policy`
    /// failed, by namespace and name.
    pub fn failing_evaluations(&self, policy: &str, digest: &str) -> Vec<FailedEvaluation> {
        self.lock_evaluations()
            .get(policy)
            .map(|record| {
                record
                    .failing
                    .values()
                    .filter(|f| f.digest == digest)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Forgets the clusters of `policy`'s record for which `keep` is false
    /// (they were deleted, or select another policy now). Not a change
    /// anyone is told of: what reads the record reads only the clusters
    /// that select the policy.
    pub fn retain_evaluations(&self, policy: &str, keep: impl Fn(&str) -> bool) {
        if let Some(record) = self.lock_evaluations().get_mut(policy) {
            record.failing.retain(|cluster, _| keep(cluster));
        }
    }

    /// Each policy's record revision: compared with an earlier call, the
    /// policies whose failing clusters moved.
    pub fn evaluation_revisions(&self) -> HashMap<String, u64> {
        self.lock_evaluations()
            .iter()
            .map(|(name, record)| (name.clone(), record.revision))
            .collect()
    }

    /// Changes whenever some policy's record revision moves.
    pub fn watch_evaluations(&self) -> tokio::sync::watch::Receiver<u64> {
        self.evaluations_moved.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_evaluations(&self) -> std::sync::MutexGuard<'_, HashMap<String, Evaluations>> {
        self.evaluations.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed<'a>(kind: &'a str) -> EvaluationOutcome<'a> {
        EvaluationOutcome::Failed {
            kind,
            message: "policy trapped: evaluate: unreachable",
        }
    }

    fn failing(catalog: &Catalog, policy: &str, digest: &str) -> Vec<(String, String)> {
        catalog
            .failing_evaluations(policy, digest)
            .into_iter()
            .map(|f| (f.cluster, f.kind))
            .collect()
    }

    /// A failure is counted while it is the cluster's last outcome, for the
    /// version that failed, and under the one policy the cluster runs.
    #[test]
    fn a_cluster_counts_as_failing_until_its_next_evaluation_answers() {
        let catalog = Catalog::default();
        catalog.record_evaluation("ns/a", Some("p"), "v1", failed("Trap"));
        catalog.record_evaluation("ns/b", Some("p"), "v1", EvaluationOutcome::Answered);
        catalog.record_evaluation("ns/c", Some("p"), "v1", failed("PolicyError"));
        assert_eq!(
            failing(&catalog, "p", "v1"),
            [
                ("ns/a".into(), "Trap".into()),
                ("ns/c".into(), "PolicyError".into())
            ]
        );
        assert!(
            failing(&catalog, "p", "v2").is_empty(),
            "another version's failures are not this one's"
        );

        catalog.record_evaluation("ns/a", Some("p"), "v1", EvaluationOutcome::Answered);
        assert_eq!(
            failing(&catalog, "p", "v1"),
            [("ns/c".into(), "PolicyError".into())]
        );

        // ns/c moves to policy q, then to the embedded policy.
        catalog.record_evaluation("ns/c", Some("q"), "w1", failed("Deadline"));
        assert!(failing(&catalog, "p", "v1").is_empty());
        assert_eq!(
            failing(&catalog, "q", "w1"),
            [("ns/c".into(), "Deadline".into())]
        );
        catalog.record_evaluation("ns/c", None, "embedded", EvaluationOutcome::Answered);
        assert!(failing(&catalog, "q", "w1").is_empty());
    }

    /// The record's revision, what the policy controller is triggered by,
    /// moves when the failing set or a failure's kind moves, and not when a
    /// failure repeats with another message.
    #[test]
    fn the_revision_moves_with_the_failing_set_not_with_each_message() {
        let catalog = Catalog::default();
        let mut watch = catalog.watch_evaluations();
        let revision = |c: &Catalog| c.evaluation_revisions().get("p").copied();

        catalog.record_evaluation("ns/a", Some("p"), "v1", EvaluationOutcome::Answered);
        assert_eq!(revision(&catalog), Some(0), "nothing failed yet");
        assert!(!watch.has_changed().unwrap());

        catalog.record_evaluation("ns/a", Some("p"), "v1", failed("Trap"));
        assert_eq!(revision(&catalog), Some(1));
        assert!(watch.has_changed().unwrap());
        watch.mark_unchanged();

        let again = EvaluationOutcome::Failed {
            kind: "Trap",
            message: "policy trapped: evaluate: another message",
        };
        catalog.record_evaluation("ns/a", Some("p"), "v1", again);
        assert_eq!(revision(&catalog), Some(1), "the same failure again");
        assert!(!watch.has_changed().unwrap());
        assert_eq!(
            catalog.failing_evaluations("p", "v1")[0].message,
            "policy trapped: evaluate: another message",
            "the message is the last one"
        );

        catalog.record_evaluation("ns/a", Some("p"), "v1", failed("Deadline"));
        assert_eq!(revision(&catalog), Some(2), "another kind of failure");
        catalog.record_evaluation("ns/a", Some("p"), "v2", failed("Deadline"));
        assert_eq!(revision(&catalog), Some(3), "another version failing");
        catalog.record_evaluation("ns/a", Some("p"), "v2", EvaluationOutcome::Answered);
        assert_eq!(revision(&catalog), Some(4), "it answers again");
        assert!(watch.has_changed().unwrap());
    }

    #[test]
    fn records_go_with_their_clusters_and_their_policies() {
        let catalog = Catalog::default();
        catalog.record_evaluation("ns/a", Some("p"), "v1", failed("Trap"));
        catalog.record_evaluation("ns/b", Some("p"), "v1", failed("Trap"));
        catalog.retain_evaluations("p", |c| c == "ns/b");
        assert_eq!(
            failing(&catalog, "p", "v1"),
            [("ns/b".into(), "Trap".into())]
        );
        catalog.retain(&["q".to_owned()]);
        assert!(failing(&catalog, "p", "v1").is_empty());
        assert!(!catalog.evaluation_revisions().contains_key("p"));
    }
}

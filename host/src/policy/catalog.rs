//! The EtcdStatusPolicies this process can run, by name: what a cluster
//! that selects one gets. The policy controller fills it, fetching and
//! compiling off the cluster reconcile path, and swaps each new version in
//! whole; cluster reconciles only read it.
//!
//! Each entry is the outcome of the last load: a policy that runs, or why
//! none does, with the pin it was loaded under. A reader asks for the
//! current pin and gets nothing else: while a new pin loads, the old
//! version does not run (it no longer matches the pin), and a new version
//! that fails to load replaces the old one with its failure.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::LoadedPolicy;

/// What identifies a load: a different key means the policy must be loaded
/// again. The source part is the ConfigMap's resourceVersion or the OCI
/// reference, so an edited ConfigMap is re-read even under the same pin.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LoadKey {
    pub digest: String,
    pub limits: super::Limits,
    pub source: String,
}

/// The outcome of loading one version of a policy.
#[derive(Clone, Debug)]
pub enum Entry {
    Running {
        key: LoadKey,
        policy: Arc<LoadedPolicy>,
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

/// Why a policy's pinned component does not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct LoadFailure {
    /// CamelCase, for a condition reason and an Event.
    pub reason: &'static str,
    pub message: String,
    /// A fault that may pass by itself (a registry that does not answer):
    /// the same version is tried again later.
    pub transient: bool,
}

#[derive(Default)]
pub struct Catalog {
    entries: Mutex<HashMap<String, Entry>>,
    /// Bumped on every change, so a reconcile can wait for a first load.
    changed: tokio::sync::watch::Sender<u64>,
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

    /// Keeps only the entries of these policies (the others were deleted).
    pub fn retain(&self, names: &[String]) {
        self.lock().retain(|name, _| names.contains(name));
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

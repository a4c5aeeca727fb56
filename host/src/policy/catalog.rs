//! The EtcdStatusPolicies this process can run, by name: what a cluster
//! that selects one gets. The policy controller fills it, fetching and
//! compiling off the cluster reconcile path, and swaps each new version in
//! whole; cluster reconciles only read it.
//!
//! Each entry is the outcome of the last load: a policy that runs, or why
//! none does. A new version that fails to load replaces the old one with
//! its failure: the old component no longer matches the pin, so running it
//! would put a verdict in the status from a policy that is not the one
//! configured.

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

    pub fn remove(&self, name: &str) {
        if self.lock().remove(name).is_some() {
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// The entry for `name`, waiting up to `patience` for a first load to
    /// finish (at startup, or for a policy created a moment ago). `None`
    /// after that: still loading.
    pub async fn wait_for(&self, name: &str, patience: Duration) -> Option<Entry> {
        let mut changes = self.changed.subscribe();
        let wait = async {
            loop {
                if let Some(entry) = self.get(name) {
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

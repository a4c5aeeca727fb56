//! Which policy a cluster runs: the embedded default, an EtcdStatusPolicy
//! from the [`Catalog`], or (deprecated) a ConfigMap in the cluster's
//! namespace. Also remembers which (policy, settings) pairs passed
//! `validate-settings`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use super::catalog::{Catalog, Entry, EvaluationOutcome, LoadFailure};
use super::{LoadedPolicy, PolicyEngine, PolicyError};
use crate::api::{ConfigMapPolicySource, EtcdCluster, EtcdStatusPolicy, POLICY_CONFIGMAP_KEY};

/// How long a reconcile waits for the pinned version to load (the operator
/// started a moment ago, the policy was just created, or its pin changed)
/// before it writes a status saying the policy is still loading.
const FIRST_LOAD_PATIENCE: Duration = Duration::from_secs(30);

/// Why a cluster's policy could not be had.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("EtcdStatusPolicy {name} does not run: {failure}")]
    Failed { name: String, failure: LoadFailure },
    #[error("EtcdStatusPolicy {name} is still loading")]
    Loading { name: String },
    #[error("reading ConfigMap {namespace}/{name}: {message}")]
    Read {
        namespace: String,
        name: String,
        message: String,
    },
    #[error(
        "no EtcdStatusPolicy named {name} (spec.statusPolicy.name), and no ConfigMap {namespace}/{name} either"
    )]
    NotFound { namespace: String, name: String },
    #[error("ConfigMap {namespace}/{name} has no binaryData key {POLICY_CONFIGMAP_KEY:?}")]
    NoComponent { namespace: String, name: String },
    #[error("policy in ConfigMap {namespace}/{name}: {source}")]
    Load {
        namespace: String,
        name: String,
        #[source]
        source: PolicyError,
    },
}

impl ResolveError {
    /// What `status.policy.source` says when the policy does not run: the
    /// form that was tried.
    pub fn source(&self) -> String {
        match self {
            Self::Failed { name, .. } | Self::Loading { name } => {
                format!("EtcdStatusPolicy {name}")
            }
            Self::NotFound { name, .. } => format!("EtcdStatusPolicy {name} (not found)"),
            Self::Read {
                namespace, name, ..
            }
            | Self::NoComponent { namespace, name }
            | Self::Load {
                namespace, name, ..
            } => deprecated_source(namespace, name),
        }
    }

    /// Only a human can fix it (as opposed to a load in progress, or a
    /// registry that may answer on the next try).
    pub fn is_lasting(&self) -> bool {
        match self {
            Self::Failed { failure, .. } => !failure.transient,
            Self::Loading { .. } | Self::Read { .. } => false,
            Self::NotFound { .. } | Self::NoComponent { .. } | Self::Load { .. } => true,
        }
    }
}

/// A cluster's policy, and where it came from (for `status.policy.source`).
pub struct Resolved {
    pub policy: Arc<LoadedPolicy>,
    pub source: String,
}

/// The status policies: the embedded default and those clusters select.
pub struct Policies {
    engine: PolicyEngine,
    client: Client,
    /// The EtcdStatusPolicies this process runs, kept by their controller.
    pub catalog: Catalog,
    settings_checked: Mutex<HashMap<(String, String), Result<(), String>>>,
    /// Clusters already told their ConfigMap policy is deprecated.
    warned_deprecated: Mutex<HashSet<String>>,
    /// One permit per pooled instance slot: an evaluation waits for one
    /// rather than fail to instantiate.
    slots: tokio::sync::Semaphore,
}

/// `status.policy.source` of a cluster on the deprecated ConfigMap form.
fn deprecated_source(namespace: &str, name: &str) -> String {
    format!("ConfigMap {namespace}/{name} (deprecated: ship it as an EtcdStatusPolicy)")
}

/// `status.policy.source` of a cluster on the embedded policy.
pub const EMBEDDED_SOURCE: &str = "embedded";

impl Policies {
    pub fn new(engine: PolicyEngine, client: Client) -> Self {
        Self {
            slots: tokio::sync::Semaphore::new(engine.concurrent_evaluations()),
            engine,
            client,
            catalog: Catalog::default(),
            settings_checked: Mutex::default(),
            warned_deprecated: Mutex::default(),
        }
    }

    pub fn engine(&self) -> &PolicyEngine {
        &self.engine
    }

    /// Waits for a free instance slot; hold it while calling into a policy.
    pub async fn slot(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.slots
            .acquire()
            .await
            .expect("the semaphore is never closed")
    }

    /// The cluster's policy: the embedded default when `name` is unset,
    /// else the EtcdStatusPolicy of that name, else (deprecated) the
    /// component under `policy.wasm` in the ConfigMap of that name in the
    /// cluster's namespace.
    pub async fn resolve(
        &self,
        cluster: &EtcdCluster,
        name: Option<&str>,
        known: &Store<EtcdStatusPolicy>,
    ) -> Result<Resolved, ResolveError> {
        let Some(name) = name else {
            return Ok(Resolved {
                policy: self.engine.default_policy(),
                source: EMBEDDED_SOURCE.into(),
            });
        };
        let Some(policy) = known.get(&ObjectRef::new(name)) else {
            return self.deprecated_config_map(cluster, name).await;
        };
        match self
            .catalog
            .wait_for(name, &policy.spec.digest, FIRST_LOAD_PATIENCE)
            .await
        {
            Some(Entry::Running { policy, .. }) => Ok(Resolved {
                policy,
                source: format!("EtcdStatusPolicy {name}"),
            }),
            Some(Entry::Failed { failure, .. }) => Err(ResolveError::Failed {
                name: name.to_owned(),
                failure,
            }),
            None => Err(ResolveError::Loading {
                name: name.to_owned(),
            }),
        }
    }

    /// The deprecated form: a ConfigMap in the cluster's namespace, read
    /// on every reconcile, not pinned.
    async fn deprecated_config_map(
        &self,
        cluster: &EtcdCluster,
        name: &str,
    ) -> Result<Resolved, ResolveError> {
        let namespace = cluster.namespace().unwrap_or_default();
        let at = || (namespace.clone(), name.to_owned());
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &namespace);
        let cm = api
            .get_opt(name)
            .await
            .map_err(|e| {
                let (namespace, name) = at();
                ResolveError::Read {
                    namespace,
                    name,
                    message: e.to_string(),
                }
            })?
            .ok_or_else(|| {
                let (namespace, name) = at();
                ResolveError::NotFound { namespace, name }
            })?;
        let source = ConfigMapPolicySource {
            name: name.to_owned(),
            key: Some(POLICY_CONFIGMAP_KEY.to_owned()),
        };
        let (bytes, _) =
            super::source::from_config_map(Some(&cm), &namespace, &source).map_err(|_| {
                let (namespace, name) = at();
                ResolveError::NoComponent { namespace, name }
            })?;
        let policy = self.engine.load(&bytes).map_err(|source| {
            let (namespace, name) = at();
            ResolveError::Load {
                namespace,
                name,
                source,
            }
        })?;
        Ok(Resolved {
            policy,
            source: deprecated_source(&namespace, name),
        })
    }

    /// Remembers how `cluster`'s evaluation by `evaluated` ended, for the
    /// status of the EtcdStatusPolicy `policy` that supplied it (`None`:
    /// the embedded default, or the deprecated ConfigMap form; the cluster
    /// then counts for no EtcdStatusPolicy). A cluster that fails stays
    /// counted until an evaluation of it answers again, or it selects
    /// another policy. Cheap and non-blocking: call it on every evaluation
    /// that ran the policy (the settings check included), not when the
    /// policy could not be had at all.
    pub fn record_evaluation(
        &self,
        cluster: &EtcdCluster,
        policy: Option<&str>,
        evaluated: &LoadedPolicy,
        outcome: EvaluationOutcome<'_>,
    ) {
        let cluster = format!(
            "{}/{}",
            cluster.namespace().unwrap_or_default(),
            cluster.name_any()
        );
        self.catalog
            .record_evaluation(&cluster, policy, &evaluated.digest, outcome);
    }

    /// Whether this is the first time this process sees `cluster` (by UID)
    /// on a deprecated ConfigMap policy, so it is told once, not on every
    /// reconcile.
    pub fn first_deprecation_notice(&self, cluster: &EtcdCluster) -> bool {
        let uid = cluster.uid().unwrap_or_default();
        self.warned_deprecated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid)
    }

    /// The remembered answer of validate-settings for these settings, if
    /// there is one: no call into the policy, so no blocking thread needed.
    pub fn checked_settings(
        &self,
        policy: &LoadedPolicy,
        settings: &str,
    ) -> Option<Result<(), PolicyError>> {
        let key = (policy.digest.clone(), settings.to_owned());
        let known = self
            .settings_checked
            .lock()
            .expect("poisoned")
            .get(&key)
            .cloned();
        known.map(|answer| answer.map_err(PolicyError::Settings))
    }

    /// Settings are checked once per (policy, settings) pair, not on every
    /// evaluation. Only an answer is remembered (accepted, or refused with a
    /// message): a validate-settings that trapped or ran out of time is a
    /// failure of this evaluation, tried again on the next.
    pub fn validate_settings(
        &self,
        policy: &LoadedPolicy,
        settings: &str,
    ) -> Result<(), PolicyError> {
        if let Some(known) = self.checked_settings(policy, settings) {
            return known;
        }
        let key = (policy.digest.clone(), settings.to_owned());
        let result = policy.validate_settings(settings);
        let answer = match &result {
            Ok(()) => Some(Ok(())),
            Err(PolicyError::Settings(why)) => Some(Err(why.clone())),
            Err(_) => None,
        };
        if let Some(answer) = answer {
            self.settings_checked
                .lock()
                .expect("poisoned")
                .insert(key, answer);
        }
        result
    }
}

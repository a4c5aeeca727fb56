//! Which policy a cluster runs: the embedded default, or the component a
//! ConfigMap named by `spec.statusPolicy.name` holds. Also remembers which
//! (policy, settings) pairs passed `validate-settings`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::{Client, ResourceExt};

use super::{LoadedPolicy, PolicyEngine, PolicyError};
use crate::api::{EtcdCluster, POLICY_CONFIGMAP_KEY};

/// Why a cluster's policy could not be had. Every variant needs a human, so
/// the cluster goes Stalled with the message.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("reading ConfigMap {namespace}/{name}: {message}")]
    Read {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("ConfigMap {namespace}/{name} (spec.statusPolicy.name) not found")]
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

/// The status policies: the embedded default and those named by clusters.
pub struct Policies {
    engine: PolicyEngine,
    client: Client,
    settings_checked: Mutex<HashMap<(String, String), Result<(), String>>>,
}

impl Policies {
    pub fn new(engine: PolicyEngine, client: Client) -> Self {
        Self {
            engine,
            client,
            settings_checked: Mutex::default(),
        }
    }

    /// The cluster's policy: the embedded default, or the component stored
    /// under `policy.wasm` in the named ConfigMap of the cluster's namespace.
    pub async fn resolve(
        &self,
        cluster: &EtcdCluster,
        name: Option<&str>,
    ) -> Result<Arc<LoadedPolicy>, ResolveError> {
        let Some(name) = name else {
            return Ok(self.engine.default_policy());
        };
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
        let bytes = cm
            .binary_data
            .as_ref()
            .and_then(|d| d.get(POLICY_CONFIGMAP_KEY))
            .ok_or_else(|| {
                let (namespace, name) = at();
                ResolveError::NoComponent { namespace, name }
            })?;
        self.engine.load(&bytes.0).map_err(|source| {
            let (namespace, name) = at();
            ResolveError::Load {
                namespace,
                name,
                source,
            }
        })
    }

    /// Settings are checked once per (policy, settings) pair, not on every
    /// evaluation.
    pub fn validate_settings(&self, policy: &LoadedPolicy, settings: &str) -> Result<(), String> {
        let key = (policy.digest.clone(), settings.to_owned());
        if let Some(known) = self.settings_checked.lock().expect("poisoned").get(&key) {
            return known.clone();
        }
        let result = policy
            .validate_settings(settings)
            .map_err(|e| e.to_string());
        self.settings_checked
            .lock()
            .expect("poisoned")
            .insert(key, result.clone());
        result
    }
}

//! The fetch phase: the bytes of the component spec.source names, and the
//! key they load under. What it guarantees:
//! - it reads through the API, never a cache: the watch event that started
//!   this reconcile may be ahead of any cache;
//! - it fetches nothing for a version that already runs under the very
//!   same key, nor for a ConfigMap version already found drifted: a
//!   ConfigMap's metadata is read before its bytes, and an OCI key is
//!   whole before the pull;
//! - the bytes it returns are not yet checked against the pin: that is the
//!   next phase's, the same for every source.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::Api;

use super::pin::Pinned;
use crate::api::{ConfigMapPolicySource, DEFAULT_POLICY_KEY, EtcdStatusPolicy, OciPolicySource};
use crate::policy::catalog::{Entry, LoadKey};
use crate::policy::source::{self, FetchError};

/// Where the sources are read: the operator's namespace, through `client`.
#[derive(Clone, Copy)]
pub struct Sources<'a> {
    pub client: &'a Client,
    pub namespace: &'a str,
}

/// The outcome of the fetch.
#[derive(Debug)]
pub enum Fetched {
    /// The version that runs already runs under this key: reused as it is.
    Running(Entry),
    /// The bytes, not yet verified, and the key they load under.
    Bytes { key: LoadKey, bytes: Vec<u8> },
    /// Why they could not be had, under the key they were asked for.
    Failed { key: LoadKey, error: FetchError },
}

pub async fn fetch(sources: Sources<'_>, policy: &EtcdStatusPolicy, pinned: &Pinned) -> Fetched {
    let source = &policy.spec.source;
    if let Some(cm) = &source.config_map {
        config_map(sources, pinned, cm).await
    } else if let Some(oci) = &source.oci {
        oci_artifact(sources, pinned, oci).await
    } else {
        // The CRD's CEL rule makes this unreachable on a real apiserver.
        Fetched::Failed {
            key: pinned.key("none".into(), ""),
            error: FetchError::Missing("spec.source names no source".into()),
        }
    }
}

/// A ConfigMap's key names its resourceVersion, so an edited ConfigMap is
/// read again under the same pin; `?` while it cannot be read, `-` while it
/// holds no component.
async fn config_map(sources: Sources<'_>, pinned: &Pinned, cm: &ConfigMapPolicySource) -> Fetched {
    let Sources { client, namespace } = sources;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let at = |version: &str| {
        pinned.key(
            format!(
                "configMap {namespace}/{} key {}",
                cm.name,
                cm.key.as_deref().unwrap_or(DEFAULT_POLICY_KEY)
            ),
            version,
        )
    };
    let unreachable = |e: kube::Error| Fetched::Failed {
        key: at("?"),
        error: FetchError::Unreachable(format!("reading ConfigMap {namespace}/{}: {e}", cm.name)),
    };
    // Metadata first: an unchanged ConfigMap, up to 1 MiB, is not read again.
    let version = match api.get_metadata_opt(&cm.name).await {
        Err(e) => return unreachable(e),
        Ok(meta) => meta.and_then(|m| m.metadata.resource_version),
    };
    if let Some(same) = version.as_deref().and_then(|v| pinned.running(&at(v))) {
        return Fetched::Running(same);
    }
    match api.get_opt(&cm.name).await {
        Err(e) => unreachable(e),
        Ok(found) => match source::from_config_map(found.as_ref(), namespace, cm) {
            Ok((bytes, version)) => Fetched::Bytes {
                key: at(&version),
                bytes,
            },
            Err(error) => Fetched::Failed {
                key: at("-"),
                error,
            },
        },
    }
}

/// An OCI artifact's key is its reference: a tag that now holds other
/// bytes is found by the pin, when the manifest is read.
async fn oci_artifact(sources: Sources<'_>, pinned: &Pinned, oci: &OciPolicySource) -> Fetched {
    let key = pinned.key(format!("oci {}", oci.reference), "");
    if let Some(same) = pinned.running(&key) {
        return Fetched::Running(same);
    }
    let pulled = async {
        // What the pull reads besides the registry, by name: a missing one
        // is the source's to report, an API that does not answer is retried.
        let secret = named::<Secret>(sources, oci.pull_secret.as_deref()).await?;
        let ca = named::<ConfigMap>(sources, oci.ca_config_map.as_deref()).await?;
        source::from_oci(
            oci,
            &pinned.digest,
            pinned.limits.component_bytes,
            secret.as_ref(),
            ca.as_ref(),
            sources.namespace,
        )
        .await
    };
    match pulled.await {
        Ok(bytes) => Fetched::Bytes { key, bytes },
        Err(error) => Fetched::Failed { key, error },
    }
}

/// The object named `name` in the operator's namespace, if a name is given
/// and it exists.
async fn named<K>(sources: Sources<'_>, name: Option<&str>) -> Result<Option<K>, FetchError>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let Some(name) = name else { return Ok(None) };
    Api::<K>::namespaced(sources.client.clone(), sources.namespace)
        .get_opt(name)
        .await
        .map_err(|e| {
            FetchError::Unreachable(format!(
                "reading {} {}/{name}: {e}",
                K::kind(&Default::default()),
                sources.namespace
            ))
        })
}

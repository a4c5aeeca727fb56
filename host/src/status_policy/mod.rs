//! The EtcdStatusPolicy controller: fetch → load → swap → write status.
//!
//! It keeps [`crate::policy::catalog`] in step with the EtcdStatusPolicy
//! objects, their ConfigMaps (components and CA bundles) and their pull
//! Secrets: a new
//! version is fetched, compiled and asked to describe itself here, off the
//! cluster reconcile path, and then swapped in whole. The clusters that
//! select the policy are reconciled by the status write that follows (their
//! controller watches these objects), so they show the new verdict within
//! one reconcile of the swap.
//!
//! Like the cluster reconcile, it writes its status whatever the load did:
//! a policy that cannot run says why, on the object and in an Event.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use steward_policy_sdk::{Condition, ConditionStatus};

use crate::api::{
    DescribedPolicy, EffectiveLimits, EtcdCluster, EtcdStatusPolicy, EtcdStatusPolicyStatus,
    write_whole_status,
};
use crate::conditions::{self, READY, STALLED};
use crate::context::Context;
use crate::error::Error;
use crate::policy::catalog::{Entry, LoadFailure, LoadKey};
use crate::policy::source::{self, FetchError};
use crate::policy::{Limits, LoadedPolicy, digest};

/// What the policy controller reads besides the shared context.
pub struct PolicyContext {
    pub ctx: Arc<Context>,
    /// The EtcdClusters, to count those that select each policy.
    pub clusters: Store<EtcdCluster>,
    /// Where ConfigMap sources and pull Secrets live: the operator's namespace.
    pub namespace: String,
    /// Held while a component compiles: one at a time.
    pub compiling: tokio::sync::Mutex<()>,
}

/// How soon a registry that did not answer is asked again.
const RETRY_FETCH: Duration = Duration::from_secs(15);

#[tracing::instrument(skip_all, fields(policy = %policy.name_any()))]
pub async fn reconcile_policy(
    policy: Arc<EtcdStatusPolicy>,
    pctx: Arc<PolicyContext>,
) -> Result<Action, Error> {
    let name = policy.name_any();
    let ctx = &pctx.ctx;
    let entry = load(&policy, &pctx).await;
    let changed = ctx
        .policies
        .catalog
        .get(&name)
        .is_none_or(|old| !same(&old, &entry));
    if changed {
        if let Entry::Running { policy: loaded, .. } = &entry {
            check_settings(&pctx, &name, loaded).await;
        }
        ctx.policies.catalog.set(&name, entry.clone());
        if let Entry::Failed { failure, .. } = &entry {
            publish(ctx, &policy, failure).await;
        }
    }

    let clusters = pctx
        .clusters
        .state()
        .iter()
        .filter(|c| selects(c, &name))
        .count() as i32;
    let status = next_status(&policy, &entry, clusters, jiff::Timestamp::now());
    if policy.status.as_ref() != Some(&status) {
        let api: Api<EtcdStatusPolicy> = Api::all(ctx.client.clone());
        write_whole_status(&api, &name, &status)
            .await
            .map_err(Error::StatusWrite)?;
    }
    Ok(match &entry {
        Entry::Failed { failure, .. } if failure.transient => Action::requeue(RETRY_FETCH),
        // Nothing changed: the cluster count, and another try of a version
        // that failed for a reason a watch cannot see pass (a tag that
        // now holds other bytes).
        _ => Action::requeue(ctx.config.policy_recheck),
    })
}

/// Runs the new version's validate-settings on the settings of every
/// cluster that selects it, before the swap: the answers are remembered
/// (per digest and settings), so the clusters' first reconciles with the
/// new version evaluate at once, and a version that refuses a cluster's
/// settings says so in that cluster's first status after the swap.
async fn check_settings(pctx: &PolicyContext, name: &str, loaded: &Arc<LoadedPolicy>) {
    let settings: Vec<String> = pctx
        .clusters
        .state()
        .iter()
        .filter(|c| selects(c, name))
        .map(|c| crate::cluster::observe::settings_text(c))
        .collect();
    let ctx = pctx.ctx.clone();
    let loaded = loaded.clone();
    let _slot = pctx.ctx.policies.slot().await;
    let checked = tokio::task::spawn_blocking(move || {
        for text in settings {
            let _ = ctx.policies.validate_settings(&loaded, &text);
        }
    })
    .await;
    if let Err(e) = checked {
        tracing::warn!(error = %e, "checking settings against a new policy version failed");
    }
}

/// Whether a cluster runs the named EtcdStatusPolicy.
pub fn selects(cluster: &EtcdCluster, policy: &str) -> bool {
    cluster
        .spec
        .status_policy
        .as_ref()
        .and_then(|p| p.name.as_deref())
        == Some(policy)
}

/// The same outcome: the same version running, or the same failure.
fn same(a: &Entry, b: &Entry) -> bool {
    match (a, b) {
        (
            Entry::Running {
                key: ka,
                policy: pa,
            },
            Entry::Running {
                key: kb,
                policy: pb,
            },
        ) => ka == kb && Arc::ptr_eq(pa, pb),
        (
            Entry::Failed {
                key: ka,
                failure: fa,
            },
            Entry::Failed {
                key: kb,
                failure: fb,
            },
        ) => ka == kb && fa == fb,
        _ => false,
    }
}

/// The limits in force: the spec's, the operator's defaults for the rest.
fn limits_of(policy: &EtcdStatusPolicy, defaults: &Limits) -> Limits {
    let spec = &policy.spec.limits;
    Limits {
        // The schema's minimums keep these positive.
        deadline: spec.deadline_milliseconds.map_or(defaults.deadline, |ms| {
            Duration::from_millis(ms.max(1) as u64)
        }),
        memory_bytes: spec
            .memory_bytes
            .map_or(defaults.memory_bytes, |b| b.max(0) as usize),
        component_bytes: spec
            .component_bytes
            .map_or(defaults.component_bytes, |b| b.max(0) as usize),
        instances: spec
            .instances
            .map_or(defaults.instances, |n| n.max(1) as u32),
    }
}

/// The object named `name` in the operator's namespace, if a name is given
/// and it exists; the API's error as a message otherwise.
async fn named<K>(pctx: &PolicyContext, name: Option<&str>) -> Result<Option<K>, String>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let Some(name) = name else { return Ok(None) };
    Api::<K>::namespaced(pctx.ctx.client.clone(), &pctx.namespace)
        .get_opt(name)
        .await
        .map_err(|e| {
            format!(
                "reading {} {}/{name}: {e}",
                K::kind(&Default::default()),
                pctx.namespace
            )
        })
}

/// Fetches and loads the version the spec pins, unless the catalog already
/// runs exactly that version (same pin, limits and source). A failure is
/// never reused: the next reconcile (a change, or the minute's recount)
/// tries again, so a fixed Secret or a re-pushed tag is picked up.
async fn load(policy: &EtcdStatusPolicy, pctx: &PolicyContext) -> Entry {
    let ctx = &pctx.ctx;
    let engine = ctx.policies.engine();
    let limits = limits_of(policy, engine.limits());
    let pinned = policy.spec.digest.clone();
    let previous = ctx.policies.catalog.get(&policy.name_any());
    let running = |key: &LoadKey| match &previous {
        Some(entry @ Entry::Running { key: old, .. }) if old == key => Some(entry.clone()),
        _ => None,
    };
    let failed =
        |key: LoadKey, reason: &'static str, message: String, transient: bool| Entry::Failed {
            key,
            failure: LoadFailure {
                reason,
                message,
                transient,
            },
        };
    let key_for = |source: String| LoadKey {
        digest: pinned.clone(),
        limits: limits.clone(),
        source,
    };
    // Before anything is fetched: the limits bound the download too.
    if let Some(over) = limits.exceeding(engine.maximum()) {
        return failed(
            key_for("-".into()),
            "LimitsExceeded",
            format!("spec.limits: {over}"),
            false,
        );
    }

    let (bytes, key) = if let Some(cm) = &policy.spec.source.config_map {
        // Through the API, not a cache: the watch event that started this
        // reconcile may be ahead of any cache. Metadata first, so an
        // unchanged ConfigMap is not read again.
        let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &pctx.namespace);
        let at = |version: &str| {
            key_for(format!(
                "configMap {}/{} key {} at {version}",
                pctx.namespace,
                cm.name,
                cm.key.as_deref().unwrap_or(crate::api::DEFAULT_POLICY_KEY)
            ))
        };
        let unreachable = |e: kube::Error| {
            failed(
                at("?"),
                "SourceUnreachable",
                format!("reading ConfigMap {}/{}: {e}", pctx.namespace, cm.name),
                true,
            )
        };
        let version = match api.get_metadata_opt(&cm.name).await {
            Err(e) => return unreachable(e),
            Ok(meta) => meta.and_then(|m| m.metadata.resource_version),
        };
        if let Some(same) = version.as_deref().and_then(|v| running(&at(v))) {
            return same;
        }
        match api.get_opt(&cm.name).await {
            Err(e) => return unreachable(e),
            Ok(found) => match source::from_config_map(found.as_ref(), &pctx.namespace, cm) {
                Ok((bytes, version)) => (bytes, at(&version)),
                Err(e) => return failed(at("-"), "SourceMissing", e.to_string(), false),
            },
        }
    } else if let Some(oci) = &policy.spec.source.oci {
        let key = key_for(format!("oci {}", oci.reference));
        // The pin names the content: what runs under this very key was
        // checked against it, and needs no second download.
        if let Some(same) = running(&key) {
            return same;
        }
        // What the pull reads besides the registry, by name: a missing one
        // is the source's to report, an API that does not answer is retried.
        let secret = match named::<Secret>(pctx, oci.pull_secret.as_deref()).await {
            Ok(found) => found,
            Err(e) => return failed(key, "SourceUnreachable", e, true),
        };
        let ca = match named::<ConfigMap>(pctx, oci.ca_config_map.as_deref()).await {
            Ok(found) => found,
            Err(e) => return failed(key, "SourceUnreachable", e, true),
        };
        match source::from_oci(
            oci,
            &pinned,
            limits.component_bytes,
            secret.as_ref(),
            ca.as_ref(),
            &pctx.namespace,
        )
        .await
        {
            Ok(bytes) => (bytes, key),
            Err(e) => {
                let (reason, transient) = match &e {
                    FetchError::Unreachable(_) => ("SourceUnreachable", true),
                    FetchError::Missing(_) => ("SourceMissing", false),
                    FetchError::Unauthorized(_) => ("SourceUnauthorized", false),
                    FetchError::Untrusted(_) => ("SourceUntrusted", false),
                    FetchError::DigestMismatch(_) => ("DigestMismatch", false),
                    FetchError::TooLarge(_) => ("LimitsExceeded", false),
                };
                return failed(key, reason, e.to_string(), transient);
            }
        }
    } else {
        // The CRD's CEL rule makes this unreachable on a real apiserver.
        return failed(
            key_for("none".into()),
            "SourceMissing",
            "spec.source names no source".into(),
            false,
        );
    };

    if let Some(same) = running(&key) {
        return same;
    }
    let got = format!("sha256:{}", digest(&bytes));
    if got != pinned {
        return failed(
            key.clone(),
            "DigestMismatch",
            format!(
                "the component from {} is {got}, but spec.digest pins {pinned}; it was not run",
                key.source
            ),
            false,
        );
    }
    // One compile at a time: a Python or JavaScript component peaks at
    // ~500 MB while it compiles. Never on an async worker either.
    let _one = pctx.compiling.lock().await;
    let loaded = {
        let engine = engine.clone();
        let limits = limits.clone();
        tokio::task::spawn_blocking(move || engine.load_with(&bytes, &limits)).await
    };
    match loaded {
        Ok(Ok(policy)) => Entry::Running { key, policy },
        Ok(Err(e)) => failed(key, "InvalidComponent", e.to_string(), false),
        Err(join) => failed(
            key,
            "InvalidComponent",
            format!("loading the component failed: {join}"),
            true,
        ),
    }
}

fn next_status(
    policy: &EtcdStatusPolicy,
    entry: &Entry,
    clusters: i32,
    now: jiff::Timestamp,
) -> EtcdStatusPolicyStatus {
    let generation = policy.metadata.generation.unwrap_or_default();
    let prev = policy.status.clone().unwrap_or_default();
    let (desired, running) = match entry {
        Entry::Running { policy: loaded, .. } => (
            vec![
                Condition::new(
                    READY,
                    ConditionStatus::True,
                    "Loaded",
                    format!(
                        "{} {} (sha256:{}) is loaded and runs for the clusters that select it",
                        loaded.info.name, loaded.info.version, loaded.digest
                    ),
                ),
                Condition::new(STALLED, ConditionStatus::False, "Loaded", ""),
            ],
            Some(loaded),
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
                ],
                None,
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
        conditions: conditions::merge(&prev.conditions, &desired, generation, now),
    }
}

/// A Warning Event on the policy naming why it does not run.
async fn publish(ctx: &Context, policy: &EtcdStatusPolicy, failure: &LoadFailure) {
    let event = KubeEvent {
        type_: KubeEventType::Warning,
        reason: failure.reason.into(),
        note: Some(crate::text::truncate(
            &failure.message,
            conditions::MAX_MESSAGE_BYTES,
        )),
        action: "LoadPolicy".into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&event, &policy.object_ref(&())).await {
        tracing::debug!(error = %err, "publishing an event failed");
    }
}

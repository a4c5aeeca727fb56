//! The swap: a load's outcome replaces the policy's catalog entry whole,
//! so a cluster runs the old version or the new one, never a mix. An
//! outcome that is the one the catalog holds (the same version running,
//! or the same failure) changes nothing: no swap, no settings check, no
//! second Event for the same failure. The settings check runs for a new
//! version only, not for the running one kept under a drifted source.

use std::sync::Arc;

use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType};
use kube::{Resource, ResourceExt};

use crate::api::EtcdStatusPolicy;
use crate::conditions;
use crate::context::Context;
use crate::policy::LoadedPolicy;
use crate::policy::catalog::{Entry, LoadFailure};

/// Swaps `entry` in for `policy`, if it differs from what runs.
/// `settings` gives the settings of the clusters that select the policy;
/// it is asked only for a new version.
pub async fn swap(
    ctx: &Arc<Context>,
    policy: &EtcdStatusPolicy,
    entry: &Entry,
    settings: impl FnOnce() -> Vec<String>,
) {
    let name = policy.name_any();
    let old = ctx.policies.catalog.get(&name);
    if old.as_ref().is_some_and(|old| same(old, entry)) {
        return;
    }
    if let Entry::Running { policy: loaded, .. } = entry
        && !old.as_ref().is_some_and(|old| runs(old, loaded))
    {
        check_settings(ctx, loaded, settings()).await;
    }
    ctx.policies.catalog.set(&name, entry.clone());
    if let Entry::Failed { failure, .. } = entry {
        publish(ctx, policy, failure).await;
    }
}

/// Runs the new version's validate-settings on the settings of every
/// cluster that selects it, before the swap: the answers are remembered
/// (per digest and settings), so the clusters' first reconciles with the
/// new version evaluate at once, and a version that refuses a cluster's
/// settings says so in that cluster's first status after the swap.
async fn check_settings(ctx: &Arc<Context>, loaded: &Arc<LoadedPolicy>, settings: Vec<String>) {
    let _slot = ctx.policies.slot().await;
    let ctx = ctx.clone();
    let loaded = loaded.clone();
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

/// Whether `entry` runs that very version (a source that drifted, or a
/// ConfigMap found again with the same bytes, keeps it running).
fn runs(entry: &Entry, loaded: &Arc<LoadedPolicy>) -> bool {
    matches!(entry, Entry::Running { policy, .. } if Arc::ptr_eq(policy, loaded))
}

/// The same outcome: the same version running under the same key with the
/// same drift, or the same failure.
fn same(a: &Entry, b: &Entry) -> bool {
    match (a, b) {
        (
            Entry::Running {
                key: ka,
                policy: pa,
                drift: da,
            },
            Entry::Running {
                key: kb,
                policy: pb,
                drift: db,
            },
        ) => ka == kb && Arc::ptr_eq(pa, pb) && da == db,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Limits;
    use crate::policy::catalog::LoadKey;

    fn failed(source: &str, message: &str) -> Entry {
        Entry::Failed {
            key: LoadKey {
                digest: "sha256:aa".into(),
                limits: Limits::default(),
                source: source.into(),
                version: String::new(),
            },
            failure: LoadFailure {
                reason: "SourceMissing",
                message: message.into(),
                transient: false,
            },
        }
    }

    /// A source that drifts under the running version is a new outcome
    /// (the status says so), but not a new version.
    #[test]
    fn a_drift_is_a_new_outcome_of_the_same_version() {
        use crate::policy::catalog::{Drift, SourceHolds};
        use crate::policy::{EngineConfig, PolicyEngine};
        let engine = PolicyEngine::new(EngineConfig::default()).unwrap();
        let loaded = engine.default_policy();
        let key = |version: &str| LoadKey {
            digest: "sha256:aa".into(),
            limits: Limits::default(),
            source: "configMap ops/cm key policy.wasm".into(),
            version: version.into(),
        };
        let running = Entry::Running {
            key: key("7"),
            policy: loaded.clone(),
            drift: None,
        };
        let drifted = Entry::Running {
            key: key("7"),
            policy: loaded.clone(),
            drift: Some(Drift {
                seen: key("8"),
                holds: SourceHolds::Other("sha256:bb".into()),
            }),
        };
        assert!(same(&running, &running.clone()));
        assert!(!same(&running, &drifted));
        assert!(runs(&running, &loaded), "no settings check for it");
        assert!(!runs(&failed("oci r.example/p:1", "gone"), &loaded));
    }

    /// A failure repeated is not a new outcome: it is not announced again.
    #[test]
    fn the_same_failure_under_the_same_key_is_the_same_outcome() {
        let a = failed("oci r.example/p:1", "gone");
        assert!(same(&a, &a.clone()));
        assert!(!same(&a, &failed("oci r.example/p:2", "gone")));
        assert!(!same(&a, &failed("oci r.example/p:1", "still gone")));
    }
}

//! Wiring: the three kube-runtime Controllers (EtcdCluster, EtcdMember and
//! EtcdStatusPolicy), what each watches, and what triggers a reconcile. The
//! reconciles themselves are [`crate::cluster`], [`crate::member`] and
//! [`crate::status_policy`].

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, watcher};

use crate::api::{EtcdCluster, EtcdMember, EtcdStatusPolicy};
use crate::context::{Context, Scope, api_for, managed};
use crate::error::Error;
use crate::status_policy::{PolicyContext, reconcile_policy, selects};

fn error_policy<K>(_obj: Arc<K>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.count_error(err.metric_label());
    tracing::warn!(error = %err, "reconcile failed");
    Action::requeue(Duration::from_secs(2))
}

fn policy_error_policy(
    _obj: Arc<EtcdStatusPolicy>,
    err: &Error,
    ctx: Arc<PolicyContext>,
) -> Action {
    ctx.ctx.metrics.count_error(err.metric_label());
    tracing::warn!(error = %err, "reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// The objects of the operator's namespace a policy reads.
#[derive(Clone, Copy)]
enum Read<'a> {
    /// As its source, or as the CA bundle of its registry.
    ConfigMap(&'a str),
    /// As its registry's pull Secret.
    Secret(&'a str),
}

/// The policies that read this object: a change to it reloads them.
fn policies_using(
    store: &Store<EtcdStatusPolicy>,
    object: Read,
) -> Vec<ObjectRef<EtcdStatusPolicy>> {
    let uses = |p: &EtcdStatusPolicy| {
        let source = &p.spec.source;
        let oci = source.oci.as_ref();
        match object {
            Read::ConfigMap(name) => {
                source.config_map.as_ref().map(|c| c.name.as_str()) == Some(name)
                    || oci.and_then(|o| o.ca_config_map.as_deref()) == Some(name)
            }
            Read::Secret(name) => oci.and_then(|o| o.pull_secret.as_deref()) == Some(name),
        }
    };
    store
        .state()
        .iter()
        .filter(|p| uses(p))
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// What a cluster that selects the policy gets from it: the pin, and the
/// outcome of its last load (the running digest, or why none runs).
fn policy_outcome(policy: &EtcdStatusPolicy) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    policy.metadata.generation.hash(&mut h);
    if let Some(status) = &policy.status {
        status.digest.hash(&mut h);
        if let Some(ready) = status.condition(crate::conditions::READY) {
            (&ready.status, &ready.reason, &ready.message).hash(&mut h);
        }
    }
    Some(h.finish())
}

/// Runs the controllers on `ctx` until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    scope: &Scope,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let managed = managed();
    // Status writes must not retrigger the cluster's own reconcile: only
    // spec changes (generation) and owned objects do, plus the resync.
    let (clusters_store, clusters_writer) = reflector::store::<EtcdCluster>();
    let clusters = watcher(
        api_for::<EtcdCluster>(&client, scope),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(clusters_writer)
    .touched_objects()
    .predicate_filter(predicates::generation, Default::default());
    let members_ctl = Controller::new(
        api_for::<EtcdMember>(&client, scope),
        watcher::Config::default(),
    )
    .owns(api_for::<Pod>(&client, scope), managed.clone())
    .owns(
        api_for::<PersistentVolumeClaim>(&client, scope),
        managed.clone(),
    )
    .run(crate::member::reconcile_member, error_policy, ctx.clone())
    .for_each(|_| futures::future::ready(()));
    // Policies: the ConfigMaps and pull Secrets of the operator's
    // namespace are watched by metadata only (the reconcile reads the one
    // a policy names), so a fixed source is used at once.
    let policy_ns = ctx.config.policy_namespace.clone();
    let pctx = Arc::new(PolicyContext {
        ctx: ctx.clone(),
        clusters: clusters_store.clone(),
        namespace: policy_ns.clone(),
        compiling: tokio::sync::Mutex::new(()),
    });
    let policy_ctl = Controller::new(
        Api::<EtcdStatusPolicy>::all(client.clone()),
        watcher::Config::default(),
    );
    let policy_store = policy_ctl.store();
    let policy_ctl = {
        let by_cm = policy_store.clone();
        let by_secret = policy_store.clone();
        // Pull Secrets only. The watch carries metadata, but kubectl's
        // last-applied-configuration annotation can repeat a Secret's
        // data, so no other Secret of the namespace is watched at all.
        let secrets = watcher(
            Api::<PartialObjectMeta<Secret>>::namespaced(client.clone(), &policy_ns),
            watcher::Config::default()
                .fields(&format!("type={}", crate::policy::source::PULL_SECRET_TYPE)),
        )
        .default_backoff()
        .touched_objects();
        let configmaps = watcher(
            Api::<PartialObjectMeta<ConfigMap>>::namespaced(client.clone(), &policy_ns),
            watcher::Config::default(),
        )
        .default_backoff()
        .touched_objects();
        // Only a cluster's spec changes which policy it selects; its status
        // writes do not.
        let selections = watcher(
            api_for::<EtcdCluster>(&client, scope),
            watcher::Config::default(),
        )
        .default_backoff()
        .touched_objects()
        .predicate_filter(predicates::generation, Default::default());
        policy_ctl
            .watches_stream(configmaps, move |cm: PartialObjectMeta<ConfigMap>| {
                policies_using(&by_cm, Read::ConfigMap(&cm.name_any()))
            })
            .watches_stream(secrets, move |secret: PartialObjectMeta<Secret>| {
                policies_using(&by_secret, Read::Secret(&secret.name_any()))
            })
            // A cluster that starts selecting a policy changes its count.
            .watches_stream(selections, |cluster: EtcdCluster| {
                let name = cluster.spec.status_policy?.name?;
                Some(ObjectRef::new(&name))
            })
            .run(reconcile_policy, policy_error_policy, pctx)
            .for_each(|_| futures::future::ready(()))
    };

    // What a reconcile never sees: a deleted cluster's metrics, a deleted
    // policy's catalog entry, and versions a reload replaced.
    let prune = {
        let clusters = clusters_store.clone();
        let policies = policy_store.clone();
        let ctx = ctx.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(30));
            loop {
                tick.tick().await;
                let live = clusters
                    .state()
                    .iter()
                    .map(|c| crate::metrics::ClusterLabels {
                        namespace: c.namespace().unwrap_or_default(),
                        name: c.name_any(),
                    })
                    .collect();
                ctx.metrics.retain_clusters(&live);
                if policies.wait_until_ready().await.is_ok() {
                    let names: Vec<String> =
                        policies.state().iter().map(|p| p.name_any()).collect();
                    ctx.policies.catalog.retain(&names);
                }
                ctx.policies.engine().forget_unused();
            }
        }
    };
    let policies_changed = watcher(
        Api::<EtcdStatusPolicy>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects()
    .predicate_filter(policy_outcome, Default::default());

    let cluster_ctl = Controller::for_stream(clusters, clusters_store.clone())
        .owns(
            api_for::<EtcdMember>(&client, scope),
            watcher::Config::default(),
        )
        .owns(api_for::<Service>(&client, scope), managed.clone())
        .owns(
            api_for::<PodDisruptionBudget>(&client, scope),
            managed.clone(),
        )
        .watches(api_for::<Pod>(&client, scope), managed, |pod: Pod| {
            let cluster = pod.labels().get("app.kubernetes.io/instance")?.clone();
            Some(ObjectRef::new(&cluster).within(&pod.namespace()?))
        })
        // A policy's pin or outcome moved (a new version swapped in, or
        // one that cannot run): the clusters that select it are evaluated
        // at once. Its cluster count alone moving is no reason.
        .watches_stream(policies_changed, move |policy: EtcdStatusPolicy| {
            let name = policy.name_any();
            clusters_store
                .state()
                .iter()
                .filter(|c| selects(c, &name))
                .map(|c| ObjectRef::from_obj(c.as_ref()))
                .collect::<Vec<_>>()
        })
        .run(crate::cluster::reconcile_cluster, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));

    // Dropping the controllers on shutdown cancels in-flight reconciles;
    // every step is idempotent and the next operator picks up from etcd.
    tokio::select! {
        _ = futures::future::join3(members_ctl, cluster_ctl, policy_ctl) => {}
        _ = prune => {}
        _ = shutdown => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str, source: serde_json::Value) -> EtcdStatusPolicy {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdStatusPolicy",
            "metadata": {"name": name},
            "spec": {"digest": format!("sha256:{}", "0".repeat(64)), "source": source},
        }))
        .unwrap()
    }

    #[test]
    fn a_change_reaches_the_policies_that_read_the_object() {
        let (store, mut writer) = reflector::store::<EtcdStatusPolicy>();
        for p in [
            policy(
                "from-cm",
                serde_json::json!({"configMap": {"name": "shared"}}),
            ),
            policy(
                "with-ca",
                serde_json::json!({"oci": {"reference": "r.example/p:v1", "caConfigMap": "shared"}}),
            ),
            policy(
                "other",
                serde_json::json!({"oci": {"reference": "r.example/p:v1", "caConfigMap": "other-ca", "pullSecret": "shared"}}),
            ),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(p));
        }
        let names = |read| {
            let mut names: Vec<String> = policies_using(&store, read)
                .into_iter()
                .map(|r| r.name)
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(Read::ConfigMap("shared")), ["from-cm", "with-ca"]);
        assert_eq!(
            names(Read::Secret("shared")),
            ["other"],
            "a Secret by that name is another object"
        );
        assert!(names(Read::ConfigMap("unrelated")).is_empty());
        assert!(names(Read::Secret("unrelated")).is_empty());
    }
}

//! Wiring: the five kube-runtime Controllers (EtcdCluster, EtcdMember,
//! EtcdStatusPolicy, EtcdSnapshot and EtcdBackupSchedule) and what triggers
//! a reconcile of each. Every trigger
//! is a subscription to the one watch of its kind ([`crate::watch`]); no
//! controller opens a watch of its own. The reconciles themselves are
//! [`crate::cluster`], [`crate::member`] and [`crate::status_policy`].

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::ResourceExt;
use kube::api::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::{EtcdCluster, EtcdStatusPolicy};
use crate::context::Context;
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

/// Drops what `ctx` remembers of each deleted object.
fn forgetting<K>(
    ctx: &Arc<Context>,
    deleted: impl futures::Stream<Item = Arc<K>> + Send + 'static,
) -> futures::stream::BoxStream<'static, ()>
where
    K: kube::Resource<DynamicType = ()> + Send + Sync + 'static,
{
    let ctx = ctx.clone();
    deleted.map(move |obj| ctx.forget(obj.as_ref())).boxed()
}

/// Snapshots streamed at once; more wait their turn.
const SNAPSHOTS_AT_ONCE: u16 = 4;

/// A spec change (generation): status writes are no trigger.
fn generation<K: kube::Resource>(obj: &K) -> Option<u64> {
    obj.meta().generation.map(|g| g as u64)
}

/// Runs the controllers on `ctx` until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let w = &ctx.watches;
    let clusters = w.clusters.store().clone();

    // A snapshot's spec is immutable: it is reconciled when it appears (or
    // the operator starts), then by its own requeues and its Pods' changes
    // until it is Complete or Failed. Its status writes are no trigger.
    let snapshot_ctl = Controller::for_shared_stream(
        w.snapshots.subscribe_when(generation),
        w.snapshots.store().clone(),
    )
    // The Pods that save to a claim or restore a copy: their end wakes
    // their snapshot.
    .owns_shared_stream(w.pods.subscribe())
    // Each snapshot in flight holds up to three 8 MiB parts: bounded, so
    // a fleet's midnight schedules cannot exhaust the operator's memory.
    .with_config(kube::runtime::controller::Config::default().concurrency(SNAPSHOTS_AT_ONCE))
    .run(
        crate::snapshot::reconcile_snapshot,
        error_policy,
        ctx.clone(),
    )
    .for_each(|_| futures::future::ready(()));

    // A schedule: its spec, and each change of the EtcdSnapshots it owns
    // (a run finishing); the clock by its own requeue at the next run.
    let schedule_ctl = Controller::for_shared_stream(
        w.schedules.subscribe_when(generation),
        w.schedules.store().clone(),
    )
    .owns_shared_stream(w.snapshots.subscribe())
    // Retention's remove Pods (a claim's files, owned by the run): their
    // end lets the expired run's EtcdSnapshot go.
    .watches_shared_stream(w.pods.subscribe(), |pod: Arc<Pod>| {
        let schedule = pod.labels().get(crate::api::LABEL_SCHEDULE)?.clone();
        Some(ObjectRef::new(&schedule).within(&pod.namespace()?))
    })
    .run(
        crate::schedule::reconcile_schedule,
        error_policy,
        ctx.clone(),
    )
    .for_each(|_| futures::future::ready(()));
    let policies = w.status_policies.store().clone();

    let member_ctl =
        Controller::for_shared_stream(w.members.subscribe(), w.members.store().clone())
            .owns_shared_stream(w.pods.subscribe())
            .owns_shared_stream(w.pvcs.subscribe())
            .run(crate::member::reconcile_member, error_policy, ctx.clone())
            .for_each(|_| futures::future::ready(()));

    let cluster_ctl = {
        let selecting = clusters.clone();
        Controller::for_shared_stream(w.clusters.subscribe_when(generation), clusters.clone())
            .owns_shared_stream(w.members.subscribe())
            .owns_shared_stream(w.services.subscribe())
            .owns_shared_stream(w.pdbs.subscribe())
            .watches_shared_stream(w.pods.subscribe(), |pod: Arc<Pod>| {
                let cluster = pod.labels().get(crate::resources::LABEL_INSTANCE)?.clone();
                Some(ObjectRef::new(&cluster).within(&pod.namespace()?))
            })
            // A policy's pin or outcome moved (a new version swapped in, or
            // one that cannot run): the clusters that select it are
            // evaluated at once. Its cluster count alone moving is no reason.
            .watches_shared_stream(
                w.status_policies.subscribe_when(policy_outcome),
                move |policy: Arc<EtcdStatusPolicy>| {
                    let name = policy.name_any();
                    selecting
                        .state()
                        .iter()
                        .filter(|c| selects(c, &name))
                        .map(|c| ObjectRef::from_obj(c.as_ref()))
                        .collect::<Vec<_>>()
                },
            )
            .run(crate::cluster::reconcile_cluster, error_policy, ctx.clone())
            .for_each(|_| futures::future::ready(()))
    };

    // Policies: a change to a ConfigMap or pull Secret they read reloads
    // them, so a fixed source is used at once.
    let policy_ctl = {
        let pctx = Arc::new(PolicyContext {
            ctx: ctx.clone(),
            clusters: clusters.clone(),
            namespace: ctx.config.policy_namespace.clone(),
            compiling: tokio::sync::Mutex::new(()),
        });
        let (by_cm, by_secret) = (policies.clone(), policies.clone());
        Controller::for_shared_stream(w.status_policies.subscribe(), policies.clone())
            .watches_shared_stream(
                w.config_maps.subscribe(),
                move |cm: Arc<PartialObjectMeta<ConfigMap>>| {
                    policies_using(&by_cm, Read::ConfigMap(&cm.name_any()))
                },
            )
            .watches_shared_stream(
                w.pull_secrets.subscribe(),
                move |secret: Arc<PartialObjectMeta<Secret>>| {
                    policies_using(&by_secret, Read::Secret(&secret.name_any()))
                },
            )
            // Only a cluster's spec changes which policy it selects (and so
            // a policy's count); its status writes do not.
            .watches_shared_stream(
                w.clusters.subscribe_when(generation),
                |cluster: Arc<EtcdCluster>| {
                    let name = cluster.spec.status_policy.as_ref()?.name.clone()?;
                    Some(ObjectRef::new(&name))
                },
            )
            // A policy whose evaluations start or stop failing says so at
            // once (its Degraded condition), not at the next recheck.
            .reconcile_on(crate::status_policy::evaluations_changed(&ctx.policies))
            .run(reconcile_policy, policy_error_policy, pctx)
            .for_each(|_| futures::future::ready(()))
    };

    // Per-object state goes with its object: what this process remembers
    // of a deleted cluster, member or child, a deleted cluster's metrics,
    // a deleted policy's catalog entry.
    let forget = {
        let clusters_gone = {
            let ctx = ctx.clone();
            w.clusters
                .deletions()
                .map(move |c| {
                    ctx.forget(c.as_ref());
                    ctx.metrics.forget_cluster(&crate::metrics::ClusterLabels {
                        namespace: c.namespace().unwrap_or_default(),
                        name: c.name_any(),
                    });
                })
                .boxed()
        };
        let policies_gone = {
            let ctx = ctx.clone();
            w.status_policies
                .deletions()
                .map(move |_| {
                    let live: Vec<String> = policies.state().iter().map(|p| p.name_any()).collect();
                    ctx.policies.catalog.retain(&live);
                })
                .boxed()
        };
        futures::stream::select_all([
            clusters_gone,
            policies_gone,
            forgetting(&ctx, w.members.deletions()),
            forgetting(&ctx, w.services.deletions()),
            forgetting(&ctx, w.pdbs.deletions()),
            {
                // A deleted schedule's interval must not keep an alert armed.
                let ctx = ctx.clone();
                w.schedules
                    .deletions()
                    .map(move |s| {
                        ctx.metrics.set_schedule_interval(
                            &crate::schedule::schedule_labels(s.as_ref()),
                            None,
                        )
                    })
                    .boxed()
            },
        ])
        .for_each(|()| futures::future::ready(()))
    };
    // Versions a reload replaced are dropped once nothing holds them.
    let idle_versions = {
        let ctx = ctx.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(30));
            loop {
                tick.tick().await;
                ctx.policies.engine().forget_unused();
            }
        }
    };

    // Dropping the controllers on shutdown cancels in-flight reconciles;
    // every step is idempotent and the next operator picks up from etcd.
    tokio::select! {
        _ = futures::future::join5(member_ctl, cluster_ctl, policy_ctl, snapshot_ctl, schedule_ctl) => {}
        _ = forget => {}
        _ = idle_versions => {}
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
        let (store, mut writer) = kube::runtime::reflector::store::<EtcdStatusPolicy>();
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
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(p));
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

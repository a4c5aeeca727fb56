//! Wiring: the two kube-runtime Controllers (EtcdCluster and EtcdMember),
//! what each watches, and what triggers a reconcile. The reconciles
//! themselves are [`crate::cluster`] and [`crate::member`].

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, predicates, watcher};

use crate::api::{EtcdCluster, EtcdMember};
use crate::context::{Context, Scope, api_for, managed};
use crate::error::Error;

fn error_policy<K>(_obj: Arc<K>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.count_error(err.metric_label());
    tracing::warn!(error = %err, "reconcile failed");
    Action::requeue(Duration::from_secs(2))
}

/// Runs both controllers on `ctx` until `shutdown` resolves.
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
    // A deleted cluster's metrics go with it (a reconcile never sees it).
    let prune = {
        let store = clusters_store.clone();
        let metrics = ctx.metrics.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(30));
            loop {
                tick.tick().await;
                let live = store
                    .state()
                    .iter()
                    .map(|c| crate::metrics::ClusterLabels {
                        namespace: c.namespace().unwrap_or_default(),
                        name: c.name_any(),
                    })
                    .collect();
                metrics.retain_clusters(&live);
            }
        }
    };
    let cluster_ctl = Controller::for_stream(clusters, clusters_store)
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
        .run(crate::cluster::reconcile_cluster, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));

    // Dropping the controllers on shutdown cancels in-flight reconciles;
    // every step is idempotent and the next operator picks up from etcd.
    tokio::select! {
        _ = futures::future::join(members_ctl, cluster_ctl) => {}
        _ = prune => {}
        _ = shutdown => {}
    }
    Ok(())
}

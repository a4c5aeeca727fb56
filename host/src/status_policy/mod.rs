//! The EtcdStatusPolicy controller: load → swap → write status.
//!
//! It keeps [`crate::policy::catalog`] in step with the EtcdStatusPolicy
//! objects, their ConfigMaps (components and CA bundles) and their pull
//! Secrets. A reconcile runs these stages, one file each:
//!
//! ```text
//! load (limits -> fetch -> verify -> compile -> describe)  ->  swap  ->  write status
//! ```
//!
//! - `load` loads the version the spec pins, off the cluster reconcile
//!   path, in phases that each return a typed outcome (`fetch`, `pin`,
//!   `failure`). Its outcome is a catalog entry: a policy that runs (and,
//!   while the pin stays, whether its source came to hold something else),
//!   or why none does, with a reason and whether it is transient.
//! - `swap` puts that entry in the catalog whole, if it differs from what
//!   runs, and announces a new failure in a Warning Event.
//! - `status` computes the status from that entry, which is written
//!   whatever the load did: a policy that cannot run says why.
//!
//! The clusters that select the policy are reconciled by the status write
//! that follows the swap (their controller watches these objects), so they
//! show the new verdict within one reconcile of it. A transient failure is
//! tried again after `RETRY_FETCH`; any other at the next recheck or
//! change. A failure is never reused, so a fixed Secret or a re-pushed tag
//! is picked up.
//!
//! The status also counts the clusters whose last evaluation by the running
//! version failed, as the cluster reconciles record them in the catalog;
//! [`evaluations_changed`] is the trigger that brings a policy's status in
//! step when that record moves.

mod failure;
mod fetch;
mod load;
mod pin;
mod status;
mod swap;

pub(crate) use pin::limits_of;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::{EtcdCluster, EtcdStatusPolicy, write_whole_status};
use crate::context::Context;
use crate::error::Error;
use crate::policy::Policies;
use crate::policy::catalog::Entry;

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

/// How soon a source that did not answer is asked again.
const RETRY_FETCH: Duration = Duration::from_secs(15);

#[tracing::instrument(skip_all, fields(policy = %policy.name_any()))]
pub async fn reconcile_policy(
    policy: Arc<EtcdStatusPolicy>,
    pctx: Arc<PolicyContext>,
) -> Result<Action, Error> {
    let name = policy.name_any();
    let ctx = &pctx.ctx;
    let loader = load::Loader {
        engine: ctx.policies.engine(),
        sources: fetch::Sources {
            client: &ctx.client,
            namespace: &pctx.namespace,
        },
        compiling: &pctx.compiling,
    };
    let entry = loader.load(&policy, ctx.policies.catalog.get(&name)).await;
    swap::swap(ctx, &policy, &entry, || {
        pctx.clusters
            .state()
            .iter()
            .filter(|c| selects(c, &name))
            .map(|c| crate::cluster::observe::settings_text(c))
            .collect()
    })
    .await;

    let selecting: HashSet<String> = pctx
        .clusters
        .state()
        .iter()
        .filter(|c| selects(c, &name))
        .map(|c| cluster_key(c))
        .collect();
    let catalog = &ctx.policies.catalog;
    catalog.retain_evaluations(&name, |cluster| selecting.contains(cluster));
    let failing = match &entry {
        Entry::Running { policy: loaded, .. } => catalog.failing_evaluations(&name, &loaded.digest),
        Entry::Failed { .. } => Vec::new(),
    };
    let status = status::next_status(
        &policy,
        &entry,
        selecting.len() as i32,
        &failing,
        jiff::Timestamp::now(),
    );
    if policy.status.as_ref() != Some(&status) {
        let api: Api<EtcdStatusPolicy> = Api::all(ctx.client.clone());
        write_whole_status(&api, &name, &status)
            .await
            .map_err(Error::StatusWrite)?;
    }
    Ok(match &entry {
        Entry::Failed { failure, .. } if failure.transient => Action::requeue(RETRY_FETCH),
        _ if status::source_unknown(&entry) => Action::requeue(RETRY_FETCH),
        // Nothing changed: the cluster count, and another try of a version
        // that failed for a reason a watch cannot see pass (a tag that
        // now holds other bytes).
        _ => Action::requeue(ctx.config.policy_recheck),
    })
}

/// How the catalog's record of evaluations names a cluster:
/// `namespace/name`.
pub fn cluster_key(cluster: &EtcdCluster) -> String {
    format!(
        "{}/{}",
        cluster.namespace().unwrap_or_default(),
        cluster.name_any()
    )
}

/// The policies whose record of failing evaluations moved (a cluster
/// started or stopped failing, or fails another way), as a trigger for the
/// policy controller (`Controller::reconcile_on`): their status shows it
/// without waiting for the recheck. Each subscriber compares revisions with
/// what it saw last, so a policy is named once per move, however many
/// clusters record the same outcome again.
pub fn evaluations_changed(
    policies: &Arc<Policies>,
) -> impl futures::Stream<Item = ObjectRef<EtcdStatusPolicy>> + Send + 'static {
    let policies = policies.clone();
    let moved = policies.catalog.watch_evaluations();
    let seen = policies.catalog.evaluation_revisions();
    futures::stream::unfold(
        (policies, moved, seen),
        |(policies, mut moved, mut seen)| async move {
            loop {
                // The catalog lives as long as `policies`: never closed.
                moved.changed().await.ok()?;
                let named: Vec<ObjectRef<EtcdStatusPolicy>> = policies
                    .catalog
                    .evaluation_revisions()
                    .into_iter()
                    // A record starts at 0: a policy new to the catalog
                    // whose clusters all answered has nothing to show.
                    .filter(|(name, revision)| {
                        seen.insert(name.clone(), *revision).unwrap_or(0) != *revision
                    })
                    .map(|(name, _)| ObjectRef::new(&name))
                    .collect();
                if !named.is_empty() {
                    return Some((futures::stream::iter(named), (policies, moved, seen)));
                }
            }
        },
    )
    .flatten()
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

#[cfg(test)]
mod tests {
    use futures::FutureExt as _;

    use super::*;
    use crate::policy::{EngineConfig, EvaluationOutcome, PolicyEngine};

    fn cluster(namespace: &str, name: &str) -> EtcdCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {},
        }))
        .unwrap()
    }

    /// What the policy controller is triggered by: a policy is named when
    /// a cluster starts or stops failing its evaluations, once, and not
    /// when the same outcome is recorded again.
    #[tokio::test]
    async fn a_policy_is_triggered_when_its_failing_clusters_move() {
        let engine = PolicyEngine::new(EngineConfig::default()).unwrap();
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let policies = Arc::new(Policies::new(engine.clone(), client));
        let version = engine.default_policy();
        let a = cluster("ns", "a");
        let trap = EvaluationOutcome::Failed {
            kind: "Trap",
            message: "policy trapped: evaluate: unreachable",
        };
        let mut triggers = Box::pin(evaluations_changed(&policies));
        let named = |r: Option<Option<ObjectRef<EtcdStatusPolicy>>>| r.flatten().map(|r| r.name);

        policies.record_evaluation(&a, Some("p"), &version, EvaluationOutcome::Answered);
        assert_eq!(
            named(triggers.next().now_or_never()),
            None,
            "nothing failed"
        );

        policies.record_evaluation(&a, Some("p"), &version, trap);
        assert_eq!(named(triggers.next().now_or_never()), Some("p".into()));
        policies.record_evaluation(&a, Some("p"), &version, trap);
        assert_eq!(
            named(triggers.next().now_or_never()),
            None,
            "the same failure"
        );
        assert_eq!(
            policies
                .catalog
                .failing_evaluations("p", &version.digest)
                .iter()
                .map(|f| f.cluster.as_str())
                .collect::<Vec<_>>(),
            [cluster_key(&a)]
        );

        // It moves to policy q and answers there: p is named (it lost a
        // failing cluster), q is not (nothing failed there).
        policies.record_evaluation(&a, Some("q"), &version, EvaluationOutcome::Answered);
        assert_eq!(named(triggers.next().now_or_never()), Some("p".into()));
        assert_eq!(named(triggers.next().now_or_never()), None);
    }
}

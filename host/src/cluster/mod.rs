//! One reconcile of an EtcdCluster, in stages that always run in order:
//!
//! ```text
//! observe  ->  evaluate (policy)  ->  plan  ->  write status  ->  act
//! ```
//!
//! The order is carried by the types, not by discipline:
//! - [`observe::observe`] returns an [`observe::Observed`], not a `Result`:
//!   every etcd fault (timeout, DNS, refused, TLS) is data in it.
//! - [`evaluate::evaluate`] returns an [`evaluate::Evaluated`]: a broken
//!   policy yields the host's fallback verdict, never an error.
//! - [`plan::plan`] (a pure function) chooses at most one membership step
//!   from the host's own facts, never from the verdict.
//! - [`status::write`] writes the status that [`status::next_status`]
//!   computed, announcing that step. It is the first step that may fail,
//!   and only on the Kubernetes API. It returns the
//!   [`status::StatusWritten`] token, which nothing else can construct.
//!   [`report`] records the metrics before it and publishes the Events
//!   after it; neither can fail the reconcile.
//! - [`act::act`] takes that token by value: no membership action can run
//!   before this reconcile's status is written, and no action's failure can
//!   reach back into it. Its errors are recorded and shown by the next status.
//!   It keeps the Services and the PodDisruptionBudget current on every
//!   reconcile, etcd up or down, then takes the step the status announced.
//!
//! An early return before the status write would need an etcd call that
//! returns a `Result` here, and there is none: that is the incident this
//! project starts from, made unrepresentable.

pub mod act;
#[cfg(test)]
mod api_tests;
pub mod evaluate;
pub mod maintenance;
pub mod observe;
pub mod plan;
pub mod recovery;
pub mod report;
pub mod rollout;
pub mod status;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::api::EtcdCluster;
use crate::context::Context;
use crate::error::Error;

/// The whole pipeline for one EtcdCluster.
#[tracing::instrument(skip_all, fields(cluster = %cluster.name_any(), namespace = cluster.namespace()))]
pub async fn reconcile_cluster(
    cluster: Arc<EtcdCluster>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let cluster = ctx.with_written_status(cluster);
    let observed = observe::observe(&cluster, &ctx).await;
    let evaluated = evaluate::evaluate(observed, &ctx).await;
    let step = plan::plan(
        &evaluated
            .observed
            .plan_facts(evaluated.quorum.is_ok(), &ctx.config),
    );
    let status = status::next_status(&evaluated, &step, &ctx);
    report::metrics(&evaluated, &status, &ctx);
    let written = status::write(evaluated, status, step, &ctx).await?;
    report::events(&written, &ctx).await;
    let next = act::act(written, &ctx).await;
    ctx.metrics.observe_reconcile(started.elapsed());
    Ok(next)
}

//! The EtcdMember controller: one bare Pod and one PVC per member, the
//! member's conditions, and MemberRemove in the member's finalizer.
//!
//! The same order as the cluster reconcile, carried by the same kind of
//! types:
//!
//! ```text
//! observe  ->  write status  ->  act
//! ```
//!
//! - [`observe::observe`] returns an [`observe::Observed`], not a `Result`:
//!   a failed read of the cluster is data in it, and the Pod comes from the
//!   watch cache.
//! - [`status::write`] writes the member's status first; only the
//!   Kubernetes API refusing that write fails the reconcile. It returns the
//!   [`status::StatusWritten`] token, which nothing else can construct.
//! - [`act::act`] takes the token by value: the Pod and PVC calls run after
//!   the status is written, and a failure of theirs is recorded and shown
//!   by the next status (`status.lastActionError`), never returned early.
//!
//! [`cleanup`] runs MemberRemove when the member is deleted, only with
//! verified quorum.

pub mod act;
pub mod cleanup;
pub mod observe;
pub mod status;
#[cfg(test)]
mod tests;
pub mod volume;

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event, finalizer};

use crate::api::EtcdMember;
use crate::context::Context;
use crate::error::Error;

pub use act::{recreate_backoff, recreate_wait};
pub use cleanup::{Removal, removal_decision};

pub const FINALIZER: &str = "etcd.steward.dev/member-remove";

#[tracing::instrument(skip_all, fields(member = %member.name_any(), namespace = member.namespace()))]
pub async fn reconcile_member(member: Arc<EtcdMember>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = member.namespace().unwrap_or_default();
    let api: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, member, |event| async {
        match event {
            Event::Apply(m) => apply(m, &ctx).await,
            Event::Cleanup(m) => cleanup::cleanup(m, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// The whole pipeline for one EtcdMember that is not being deleted.
async fn apply(member: Arc<EtcdMember>, ctx: &Context) -> Result<Action, Error> {
    let Some(observed) = observe::observe(member, ctx).await else {
        // The cluster is gone: the garbage collector deletes this member
        // with it, and there is nothing to observe it against.
        return Ok(Action::await_change());
    };
    let written = status::write(observed, ctx).await?;
    Ok(act::act(written, ctx).await)
}

//! The error a reconcile returns to kube-runtime, which logs it, counts it
//! and requeues. Only Kubernetes API failures get here: etcd faults are
//! observations (see [`crate::facts`]) and failed actions are recorded for
//! the next status (see [`crate::cluster::act`]).

use crate::etcd::RpcError;
use crate::resources::BuildError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing status: {0}")]
    StatusWrite(#[source] kube::Error),
    #[error("kubernetes API: {0}")]
    Kube(#[source] kube::Error),
    #[error("building an object: {0}")]
    Build(#[source] crate::resources::BuildError),
    #[error("etcd: {0}")]
    Etcd(#[source] RpcError),
    #[error("{0}")]
    QuorumNotVerified(String),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The `kind` label of `etcd_steward_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::StatusWrite(_) => "status_write",
            Error::Kube(_) => "kube",
            Error::Build(_) => "build",
            Error::Etcd(_) => "etcd",
            Error::QuorumNotVerified(_) => "quorum_not_verified",
            Error::Finalizer(_) => "finalizer",
        }
    }
}

/// Why an action (the act stage of either controller) failed. It never
/// fails the reconcile: it is recorded and the next status shows it.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{what}: {source}")]
    Etcd {
        what: String,
        #[source]
        source: RpcError,
    },
    #[error(transparent)]
    Build(#[from] BuildError),
    /// etcd answered MemberAdd with a list that lacks the member it added.
    #[error("etcd's member list does not contain {peer_url}; not creating the member from it")]
    NotListed { peer_url: String },
    /// An RPC that only the member itself can serve (MoveLeader to the
    /// leader, Defragment to the member), and it did not answer this round.
    #[error("member {member} did not answer this round; {rpc} must be sent to it")]
    Unanswered { member: String, rpc: &'static str },
    /// The root Secret could not be read since the step was planned.
    #[error("{step}: the root credentials from spec.auth.rootCredentialsSecretRef are not at hand")]
    NoCredentials { step: &'static str },
}

impl ActError {
    /// etcd refused a membership change that it may accept later (a learner
    /// not caught up, too many learners): a wait, not a failure.
    pub fn is_refused_for_now(&self) -> bool {
        matches!(self, ActError::Etcd { source, .. } if source.is_refused_for_now())
    }
}

/// `.map_err(kube("creating Pod x"))`: a Kubernetes error with what was
/// being done.
pub fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ActError {
    let what = what.into();
    move |source| ActError::Kube { what, source }
}

/// The same for an etcd error.
pub fn etcd(what: impl Into<String>) -> impl FnOnce(RpcError) -> ActError {
    let what = what.into();
    move |source| ActError::Etcd { what, source }
}

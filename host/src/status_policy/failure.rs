//! Why a pinned version does not run: one type per phase of the load.
//! Each names its condition reason (one of
//! [`crate::policy::catalog::reason`]) and whether it is transient or
//! stalls:
//! - transient: it may pass by itself (a source that did not answer, a
//!   blocking task that did not finish), so the same version is tried
//!   again soon and the policy is not Stalled;
//! - stalls: asking again changes nothing until a human changes the spec,
//!   the source or the registry, so the policy is Stalled.
//!
//! The fetch's failures are [`FetchError`], which knows both of itself.

use crate::policy::PolicyError;
use crate::policy::catalog::{LoadFailure, reason};
use crate::policy::source::FetchError;

/// spec.limits asks for more than the operator's maximum. Found before
/// anything is fetched: the limits bound the download too.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("spec.limits: {0}")]
pub struct LimitsExceeded(pub String);

impl LimitsExceeded {
    pub fn reason(&self) -> &'static str {
        reason::LIMITS_EXCEEDED
    }

    pub fn is_transient(&self) -> bool {
        false
    }
}

/// The bytes fetched are not the ones spec.digest pins.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the component from {from} is {got}, but spec.digest pins {pinned}; it was not run")]
pub struct DigestMismatch {
    /// The source, as the load key names it.
    pub from: String,
    pub got: String,
    pub pinned: String,
}

impl DigestMismatch {
    pub fn reason(&self) -> &'static str {
        reason::DIGEST_MISMATCH
    }

    pub fn is_transient(&self) -> bool {
        false
    }
}

/// The compile or the describe of a component that is the pinned one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ComponentError {
    /// The engine refused it: not a component of the status-policy world,
    /// one that does not compile or link, or whose describe() failed. The
    /// same bytes fail the same way.
    #[error(transparent)]
    Refused(#[from] PolicyError),
    /// The blocking task that ran the phase did not finish: it panicked,
    /// or the runtime is shutting down. Nothing says the bytes are at
    /// fault.
    #[error("loading the component failed: {0}")]
    Interrupted(String),
}

impl From<tokio::task::JoinError> for ComponentError {
    fn from(join: tokio::task::JoinError) -> Self {
        Self::Interrupted(join.to_string())
    }
}

impl ComponentError {
    pub fn reason(&self) -> &'static str {
        reason::INVALID_COMPONENT
    }

    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Interrupted(_))
    }
}

/// The phase that stopped a load, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Limits(#[from] LimitsExceeded),
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error(transparent)]
    Verify(#[from] DigestMismatch),
    /// Compile or describe.
    #[error(transparent)]
    Component(#[from] ComponentError),
}

impl LoadError {
    /// CamelCase, for the policy's conditions and Event.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Limits(e) => e.reason(),
            Self::Fetch(e) => e.reason(),
            Self::Verify(e) => e.reason(),
            Self::Component(e) => e.reason(),
        }
    }

    /// Whether the same version is tried again soon, rather than stalled.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Limits(e) => e.is_transient(),
            Self::Fetch(e) => e.is_transient(),
            Self::Verify(e) => e.is_transient(),
            Self::Component(e) => e.is_transient(),
        }
    }

    /// What the catalog keeps of it, and the status and Event say.
    pub fn failure(&self) -> LoadFailure {
        LoadFailure {
            reason: self.reason(),
            message: self.to_string(),
            transient: self.is_transient(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every phase's failure and what it becomes; only a source that did
    /// not answer and an interrupted task are retried.
    #[test]
    fn each_phase_names_its_reason_and_whether_it_is_retried() {
        let mismatch = DigestMismatch {
            from: "oci r.example/p:1".into(),
            got: "sha256:bb".into(),
            pinned: "sha256:aa".into(),
        };
        let table: [(LoadError, &str, bool, &str); 6] = [
            (
                LimitsExceeded("instances 500 is above the operator's maximum 128".into()).into(),
                "LimitsExceeded",
                false,
                "spec.limits: instances 500 is above the operator's maximum 128",
            ),
            (
                FetchError::Unreachable("pulling r.example/p:1: timed out".into()).into(),
                "SourceUnreachable",
                true,
                "pulling r.example/p:1: timed out",
            ),
            (
                FetchError::TooLarge("too large".into()).into(),
                "LimitsExceeded",
                false,
                "too large",
            ),
            (
                mismatch.into(),
                "DigestMismatch",
                false,
                "the component from oci r.example/p:1 is sha256:bb, but spec.digest pins sha256:aa; it was not run",
            ),
            (
                ComponentError::Refused(PolicyError::Load("describe() failed: trap".into())).into(),
                "InvalidComponent",
                false,
                "policy could not be loaded: describe() failed: trap",
            ),
            (
                ComponentError::Interrupted("task 7 panicked".into()).into(),
                "InvalidComponent",
                true,
                "loading the component failed: task 7 panicked",
            ),
        ];
        for (error, reason, transient, message) in table {
            assert_eq!(
                error.failure(),
                LoadFailure {
                    reason,
                    message: message.into(),
                    transient
                },
                "{error:?}"
            );
        }
    }
}

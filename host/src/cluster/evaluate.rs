//! Stage 2: turn the observation into a verdict with the cluster's policy.
//!
//! Infallible by construction: a policy that cannot be found, loaded or run,
//! settings it rejects, or a verdict that claims what etcd did not confirm,
//! all yield the host's fallback verdict (`Available=Unknown`, reason
//! `PolicyFailed`) plus a [`PolicyProblem`], which the status stage shows
//! (as `Stalled=True` when only a human can fix it) and as a Warning Event.

use steward_policy_sdk::Verdict;

use super::observe::Observed;
use crate::api::PolicyStatus;
use crate::conditions::Stall;
use crate::context::Context;
use crate::facts::quorum::{self, Quorum};
use crate::policy::{PolicyError, ResolveError, Resolved, fallback_verdict};

/// Why the host had to stand in for the policy.
#[derive(Clone, Debug)]
pub enum PolicyProblem {
    /// The policy cannot be fetched, compiled or instantiated.
    Unavailable(ResolveError),
    /// The policy's validate-settings rejects `spec.statusPolicy.settings`.
    InvalidSettings { policy: String, message: String },
    /// This evaluation failed (trap, deadline, memory, a malformed verdict).
    Failed(PolicyError),
    /// The verdict says etcd verified a quorum; the host's own check of the
    /// same observation found none. A policy never gets to claim that.
    UnconfirmedVerification { why: String },
}

impl PolicyProblem {
    /// CamelCase, for the Event (and Stalled, when it stalls).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "PolicyUnavailable",
            Self::InvalidSettings { .. } => "InvalidPolicySettings",
            Self::Failed(_) | Self::UnconfirmedVerification { .. } => "PolicyFailed",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Self::Unavailable(e) => e.to_string(),
            Self::InvalidSettings { policy, message } => {
                format!("spec.statusPolicy.settings rejected by {policy}: {message}")
            }
            Self::Failed(e) => e.to_string(),
            Self::UnconfirmedVerification { why } => format!(
                "the policy's verdict claims a verified quorum, but etcd confirmed none ({why}); \
                 the verdict was rejected"
            ),
        }
    }

    /// Needs a human: the policy cannot be loaded or rejects the settings.
    /// A failed evaluation does not stall, nor does a policy still loading
    /// or a registry that did not answer: the next try may succeed.
    pub fn stall(&self) -> Option<Stall> {
        match self {
            Self::Unavailable(e) if e.is_lasting() => Some(Stall::PolicyUnloadable(self.message())),
            Self::Unavailable(_) => None,
            Self::InvalidSettings { .. } => Some(Stall::InvalidPolicySettings(self.message())),
            Self::Failed(_) | Self::UnconfirmedVerification { .. } => None,
        }
    }
}

pub struct Evaluated {
    pub observed: Observed,
    pub verdict: Verdict,
    /// The policy that produced the verdict (or was meant to).
    pub policy: PolicyStatus,
    /// The condition types the policy declares (empty for a fallback).
    pub declared: Vec<String>,
    /// The host's own quorum check of this observation; membership actions
    /// are decided on it, never on the verdict.
    pub quorum: Result<Quorum, String>,
    pub problem: Option<PolicyProblem>,
    /// A Warning to publish once: the cluster uses a deprecated policy form.
    pub deprecation: Option<String>,
}

impl Evaluated {
    /// The same, with a notice to publish once (it was claimed already).
    fn noting(self, deprecation: Option<String>) -> Self {
        Self {
            deprecation,
            ..self
        }
    }

    fn fallback(observed: Observed, policy: PolicyStatus, problem: PolicyProblem) -> Self {
        Evaluated {
            verdict: fallback_verdict(&problem.message()),
            quorum: quorum::confirmed_in(&observed.observation.probing),
            declared: Vec::new(),
            policy,
            problem: Some(problem),
            deprecation: None,
            observed,
        }
    }
}

pub async fn evaluate(observed: Observed, ctx: &Context) -> Evaluated {
    let spec_ref = observed.cluster.spec.status_policy.as_ref();
    let named = spec_ref.and_then(|p| p.name.clone());
    let resolved = ctx
        .policies
        .resolve(
            &observed.cluster,
            named.as_deref(),
            ctx.watches.status_policies.store(),
        )
        .await;
    let (policy, source) = match resolved {
        Ok(Resolved { policy, source }) => (policy, source),
        Err(e) => {
            // The status names what was asked for, not a policy that runs.
            let status = PolicyStatus {
                name: named.clone().unwrap_or_default(),
                version: String::new(),
                digest: String::new(),
                source: e.source(),
            };
            return Evaluated::fallback(observed, status, PolicyProblem::Unavailable(e));
        }
    };
    let deprecation = (source.starts_with("ConfigMap ")
        && ctx.policies.first_deprecation_notice(&observed.cluster))
    .then(|| {
        format!(
            "spec.statusPolicy.name selects {source}; a ConfigMap policy in the cluster's \
             namespace is deprecated and will stop working in v1alpha2"
        )
    });
    let status = PolicyStatus {
        name: policy.info.name.clone(),
        version: policy.info.version.clone(),
        digest: format!("sha256:{}", policy.digest),
        source,
    };

    // Held through validate-settings and evaluate: one pooled instance slot.
    let _slot = ctx.policies.slot().await;
    // Its answer is remembered per (digest, settings); only a first check
    // calls into the policy, on a blocking thread like evaluate (below).
    let checked = match ctx
        .policies
        .checked_settings(&policy, &observed.observation.settings)
    {
        Some(known) => Ok(known),
        None => {
            let (loaded, settings) = (policy.clone(), observed.observation.settings.clone());
            let policies = ctx.policies.clone();
            tokio::task::spawn_blocking(move || policies.validate_settings(&loaded, &settings))
                .await
        }
    };
    match checked {
        Ok(Ok(())) => {}
        Ok(Err(PolicyError::Settings(message))) => {
            let problem = PolicyProblem::InvalidSettings {
                policy: status.name.clone(),
                message,
            };
            return Evaluated::fallback(observed, status, problem).noting(deprecation);
        }
        Ok(Err(e)) => {
            ctx.metrics.observe_policy(Some(&e));
            return Evaluated::fallback(observed, status, PolicyProblem::Failed(e))
                .noting(deprecation);
        }
        Err(join) => {
            let e = PolicyError::Trap(format!("the settings check thread failed: {join}"));
            return Evaluated::fallback(observed, status, PolicyProblem::Failed(e))
                .noting(deprecation);
        }
    }

    // wasmtime-wasi's synchronous bindings block on the runtime, which must
    // not happen on an async worker thread.
    let evaluation = {
        let policy = policy.clone();
        let observation = observed.observation.clone();
        match tokio::task::spawn_blocking(move || policy.evaluate(&observation)).await {
            Ok(evaluation) => evaluation,
            Err(join) => crate::policy::Evaluation {
                verdict: fallback_verdict(&format!("the policy evaluation thread failed: {join}")),
                error: None,
            },
        }
    };
    ctx.metrics.observe_policy(evaluation.error.as_ref());
    if evaluation.error.is_none() && caught_by_sdk(&evaluation.verdict) {
        ctx.metrics.count_caught_policy_error();
    }
    if let Some(e) = evaluation.error {
        return Evaluated::fallback(observed, status, PolicyProblem::Failed(e)).noting(deprecation);
    }
    let quorum = quorum::confirmed_in(&observed.observation.probing);
    if let (true, Err(why)) = (evaluation.verdict.verified, &quorum) {
        let problem = PolicyProblem::UnconfirmedVerification { why: why.clone() };
        ctx.metrics.count_rejected_verdict();
        return Evaluated::fallback(observed, status, problem).noting(deprecation);
    }
    if evaluation.verdict.verified {
        ctx.record_verified(observed.cluster.as_ref(), observed.now);
    }
    Evaluated {
        verdict: evaluation.verdict,
        declared: policy.info.condition_types.clone(),
        quorum,
        policy: status,
        problem: None,
        deprecation,
        observed,
    }
}

/// A verdict an SDK returned for an exception it caught in the policy's
/// code: valid, and written as it is, but a failure of the policy all the
/// same, for the failure metrics an alert watches.
pub fn caught_by_sdk(verdict: &Verdict) -> bool {
    verdict
        .condition(crate::conditions::AVAILABLE)
        .is_some_and(|c| c.reason == crate::conditions::reason::POLICY_ERROR)
}

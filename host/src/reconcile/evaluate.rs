//! Stage 2: turn the observation into a verdict with the cluster's policy.
//!
//! Infallible by construction: a policy that cannot be found, loaded or run,
//! or settings it rejects, all yield the host's fallback verdict
//! (`Available=Unknown`, reason `PolicyFailed`) plus the reason, which the
//! status stage shows as `Stalled=True` and a Warning Event.

use steward_policy_sdk::Verdict;

use super::observe::Observed;
use crate::api::PolicyStatus;
use crate::controller::Context;
use crate::policy::{PolicyError, fallback_verdict};

/// Why the host had to stand in for the policy.
#[derive(Clone, Debug)]
pub struct PolicyProblem {
    /// CamelCase, for the Event (and Stalled, when it stalls).
    pub reason: &'static str,
    pub message: String,
    /// Needs a human: the policy cannot be loaded or rejects the settings.
    /// A failed evaluation does not stall: the next one may succeed.
    pub stalls: bool,
}

pub struct Evaluated {
    pub observed: Observed,
    pub verdict: Verdict,
    /// The policy that produced the verdict (or was meant to).
    pub policy: PolicyStatus,
    pub problem: Option<PolicyProblem>,
}

pub async fn evaluate(observed: Observed, ctx: &Context) -> Evaluated {
    let spec_ref = observed.cluster.spec.status_policy.as_ref();
    let named = spec_ref.and_then(|p| p.name.clone());
    let policy = match ctx
        .policies
        .resolve(&observed.cluster, named.as_deref())
        .await
    {
        Ok(p) => p,
        Err(message) => {
            let problem = PolicyProblem {
                reason: "PolicyUnavailable",
                message,
                stalls: true,
            };
            return Evaluated {
                verdict: fallback_verdict(&problem.message),
                policy: PolicyStatus {
                    name: named.unwrap_or_default(),
                    version: String::new(),
                    digest: String::new(),
                },
                problem: Some(problem),
                observed,
            };
        }
    };
    let status = PolicyStatus {
        name: policy.info.name.clone(),
        version: policy.info.version.clone(),
        digest: policy.digest.clone(),
    };

    if let Err(message) = ctx
        .policies
        .validate_settings(&policy, &observed.observation.settings)
    {
        let problem = PolicyProblem {
            reason: "InvalidPolicySettings",
            message: format!(
                "spec.statusPolicy.settings rejected by {}: {message}",
                status.name
            ),
            stalls: true,
        };
        return Evaluated {
            verdict: fallback_verdict(&problem.message),
            policy: status,
            problem: Some(problem),
            observed,
        };
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
    Evaluated {
        problem: evaluation
            .error
            .as_ref()
            .map(|e: &PolicyError| PolicyProblem {
                reason: "PolicyFailed",
                message: e.to_string(),
                stalls: false,
            }),
        verdict: evaluation.verdict,
        policy: status,
        observed,
    }
}

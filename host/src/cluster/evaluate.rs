//! Stage 2: turn the observation into a verdict with the cluster's policy.
//!
//! Infallible by construction: a policy that cannot be found, loaded or run,
//! settings it rejects, or a verdict that claims what etcd did not confirm,
//! all yield the host's fallback verdict (`Available=Unknown`, reason
//! `PolicyFailed`) plus a [`PolicyProblem`], which the status stage shows
//! (as `Stalled=True` when only a human can fix it) and as a Warning Event.
//!
//! What the host checks of a verdict is [`judge`], a pure function of the
//! observation and what the policy returned: `etcd-steward policy test` and
//! `policy eval` run exactly it, so a verdict that passes there is never
//! rejected here.

use steward_policy_sdk::{ConditionStatus, Observation, UnverifiedKind, Verdict};

use super::observe::Observed;
use crate::api::PolicyStatus;
use crate::conditions::{AVAILABLE, Stall};
use crate::context::Context;
use crate::facts::quorum::{self, Quorum};
use crate::policy::{Evaluation, PolicyError, ResolveError, Resolved, fallback_verdict};

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
    /// The verdict says `Available=True`, but the host's facts show no
    /// quorum now, or the host reached no member at all.
    UnconfirmedAvailability { why: String },
}

impl PolicyProblem {
    /// CamelCase, for the Event (and Stalled, when it stalls).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "PolicyUnavailable",
            Self::InvalidSettings { .. } => "InvalidPolicySettings",
            Self::Failed(_)
            | Self::UnconfirmedVerification { .. }
            | Self::UnconfirmedAvailability { .. } => "PolicyFailed",
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
            Self::UnconfirmedAvailability { why } => format!(
                "the policy's verdict says Available=True, but {why}; the verdict was rejected"
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
            Self::Failed(_)
            | Self::UnconfirmedVerification { .. }
            | Self::UnconfirmedAvailability { .. } => None,
        }
    }

    /// CamelCase, naming which check rejected a verdict: what a `policy
    /// test` case expects under `rejected`. `None` for the problems that are
    /// not a rejected verdict (the policy could not run at all).
    pub fn rejection(&self) -> Option<&'static str> {
        match self {
            Self::UnconfirmedVerification { .. } => Some("UnconfirmedVerification"),
            Self::UnconfirmedAvailability { .. } => Some("UnconfirmedAvailability"),
            Self::Failed(PolicyError::InvalidVerdict(_)) => Some("InvalidVerdict"),
            _ => None,
        }
    }
}

pub struct Evaluated {
    pub observed: Observed,
    pub verdict: Verdict,
    /// Whether the status shows the cluster verified: the host verified a
    /// quorum (`observation.quorum`) and the verdict did not decline it.
    pub verified: bool,
    /// The policy that produced the verdict (or was meant to).
    pub policy: PolicyStatus,
    /// The condition types the policy declares (empty for a fallback).
    pub declared: Vec<String>,
    /// The host's own quorum; membership actions are decided on it, never
    /// on the verdict.
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
        let judged = Judged::fallback(problem);
        Self::new(observed, policy, Vec::new(), judged)
    }

    fn new(observed: Observed, policy: PolicyStatus, declared: Vec<String>, j: Judged) -> Self {
        Evaluated {
            quorum: quorum::verified(observed.observation.quorum.clone()),
            verdict: j.verdict,
            verified: j.verified,
            declared,
            policy,
            problem: j.problem,
            deprecation: None,
            observed,
        }
    }
}

/// What the host makes of one evaluation.
#[derive(Clone, Debug)]
pub struct Judged {
    /// The verdict to write: the policy's, or the host's fallback.
    pub verdict: Verdict,
    /// Whether the status shows the cluster verified.
    pub verified: bool,
    /// Why the host stood in for the policy.
    pub problem: Option<PolicyProblem>,
}

impl Judged {
    fn fallback(problem: PolicyProblem) -> Self {
        Judged {
            verdict: fallback_verdict(&problem.message()),
            verified: false,
            problem: Some(problem),
        }
    }
}

/// The host's checks of what a policy returned, against its own finding
/// (`observation.quorum`); docs/api.md states them:
/// 1. a policy that failed (trap, deadline, memory, an invalid verdict)
///    gets the fallback;
/// 2. a 0.1.0 verdict that claims `verified` without a verified quorum is
///    rejected (0.2.0 and later cannot claim it: they can only decline);
/// 3. `Available=True` is rejected when the host's facts show no quorum now,
///    or when it reached no member; a policy may keep a verified
///    `Available=True` for a while only when the host did not probe at all,
///    and only after a quorum was verified once. The status then says
///    plainly that the cluster is not verified now.
///
/// The status shows the cluster verified when the host verified a quorum
/// and the verdict did not decline it.
pub fn judge(observation: &Observation, evaluation: Evaluation) -> Judged {
    if let Some(e) = evaluation.error {
        return Judged::fallback(PolicyProblem::Failed(e));
    }
    let finding = &observation.quorum;
    if evaluation.claims_verified
        && let Some(u) = finding.unverified()
    {
        return Judged::fallback(PolicyProblem::UnconfirmedVerification {
            why: u.message.clone(),
        });
    }
    let mut verdict = evaluation.verdict;
    let verified = finding.is_verified() && verdict.decline_verification.is_none();
    let says_available = verdict
        .condition(AVAILABLE)
        .is_some_and(|c| c.status == ConditionStatus::True);
    if says_available && !verified {
        let why = match finding.unverified() {
            Some(u) if u.kind != UnverifiedKind::NotProbed => Some(u.message.clone()),
            Some(u) if observation.history.last_verified.is_none() => {
                Some(format!("etcd never verified this cluster ({})", u.message))
            }
            _ => None,
        };
        if let Some(why) = why {
            return Judged::fallback(PolicyProblem::UnconfirmedAvailability { why });
        }
        let now = match (finding.unverified(), &verdict.decline_verification) {
            (Some(u), _) => u.message.clone(),
            (None, Some(declined)) => format!("the policy declined: {declined}"),
            (None, None) => String::new(),
        };
        if let Some(c) = verdict.conditions.iter_mut().find(|c| c.type_ == AVAILABLE) {
            let note = format!(" [not verified now: {now}]");
            c.message = crate::text::truncate(
                &format!("{}{note}", c.message),
                crate::conditions::MAX_MESSAGE_BYTES,
            );
        }
    }
    Judged {
        verdict,
        verified,
        problem: None,
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
    // The EtcdStatusPolicy whose status counts this cluster's evaluations
    // (none for the embedded default or the deprecated ConfigMap form).
    let esp = named
        .as_deref()
        .filter(|_| status.source.starts_with("EtcdStatusPolicy "));

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
    let refused = match checked {
        Ok(Ok(())) => None,
        Ok(Err(PolicyError::Settings(message))) => Some(PolicyProblem::InvalidSettings {
            policy: status.name.clone(),
            message,
        }),
        Ok(Err(e)) => {
            ctx.metrics.observe_policy(Some(&e));
            Some(PolicyProblem::Failed(e))
        }
        Err(join) => Some(PolicyProblem::Failed(PolicyError::Trap(format!(
            "the settings check thread failed: {join}"
        )))),
    };
    if let Some(problem) = refused {
        let evaluated = Evaluated::fallback(observed, status, problem);
        let e = &evaluated;
        record_outcome(
            ctx,
            &e.observed.cluster,
            esp,
            &policy,
            e.problem.as_ref(),
            &e.verdict,
        );
        return evaluated.noting(deprecation);
    }

    // wasmtime-wasi's synchronous bindings block on the runtime, which must
    // not happen on an async worker thread.
    let evaluation = {
        let policy = policy.clone();
        let observation = observed.observation.clone();
        match tokio::task::spawn_blocking(move || policy.evaluate(&observation)).await {
            Ok(evaluation) => evaluation,
            Err(join) => {
                let e = PolicyError::Trap(format!("the policy evaluation thread failed: {join}"));
                crate::policy::Evaluation {
                    verdict: fallback_verdict(&e.to_string()),
                    claims_verified: false,
                    error: Some(e),
                }
            }
        }
    };
    ctx.metrics.observe_policy(evaluation.error.as_ref());
    if evaluation.error.is_none() && caught_by_sdk(&evaluation.verdict) {
        ctx.metrics.count_caught_policy_error();
    }
    let judged = judge(&observed.observation, evaluation);
    record_outcome(
        ctx,
        &observed.cluster,
        esp,
        &policy,
        judged.problem.as_ref(),
        &judged.verdict,
    );
    if let Some(check) = judged.problem.as_ref().and_then(PolicyProblem::rejection)
        && check != "InvalidVerdict"
    {
        ctx.metrics.count_rejected_verdict(check);
    }
    if judged.verified {
        ctx.record_verified(observed.cluster.as_ref(), observed.now);
    }
    let declared = if judged.problem.is_none() {
        policy.info.condition_types.clone()
    } else {
        Vec::new()
    };
    Evaluated::new(observed, status, declared, judged).noting(deprecation)
}

/// Tells the policy's own status how this cluster's evaluation went: an
/// EtcdStatusPolicy whose evaluations fail is Degraded, naming the clusters.
fn record_outcome(
    ctx: &Context,
    cluster: &crate::api::EtcdCluster,
    esp: Option<&str>,
    policy: &crate::policy::LoadedPolicy,
    problem: Option<&PolicyProblem>,
    verdict: &Verdict,
) {
    use crate::policy::EvaluationOutcome;
    let caught = caught_by_sdk(verdict).then(|| {
        verdict
            .condition(AVAILABLE)
            .map_or(String::new(), |c| c.message.clone())
    });
    let failed: Option<(&str, String)> = match (problem, caught) {
        (Some(PolicyProblem::Failed(e)), _) => Some((e.kind().as_str(), e.to_string())),
        // The cluster's settings, or a policy that never ran: not the
        // policy failing an evaluation.
        (Some(PolicyProblem::InvalidSettings { .. } | PolicyProblem::Unavailable(_)), _) => None,
        (Some(p), _) => Some((p.rejection().unwrap_or(p.reason()), p.message())),
        (None, Some(message)) => Some((crate::conditions::reason::POLICY_ERROR, message)),
        (None, None) => None,
    };
    let outcome = match &failed {
        Some((kind, message)) => EvaluationOutcome::Failed { kind, message },
        None => EvaluationOutcome::Answered,
    };
    ctx.policies
        .record_evaluation(cluster, esp, policy, outcome);
}

/// A verdict an SDK returned for an exception it caught in the policy's
/// code: valid, and written as it is, but a failure of the policy all the
/// same, for the failure metrics an alert watches.
pub fn caught_by_sdk(verdict: &Verdict) -> bool {
    verdict
        .condition(crate::conditions::AVAILABLE)
        .is_some_and(|c| c.reason == crate::conditions::reason::POLICY_ERROR)
}

//! A compiled, pre-instantiated policy, and what the host asks of it:
//! describe itself, check settings, evaluate an observation. Every call gets
//! a fresh Store and instance, so nothing a policy does survives the call.

use steward_policy_sdk::{Observation, PolicyInfo};
use wasmtime::Store;

use super::error::{PolicyError, wasm_error, without_backtrace_notes};
use super::limits::Limits;
use super::sandbox::HostState;
use super::verdict::{self, Evaluation};
use super::wit::{Bound, Instance, Returned};

/// How much of a failing policy's stderr goes into the fallback message.
const STDERR_IN_MESSAGE: usize = 300;

pub struct LoadedPolicy {
    /// What the policy said about itself when it was loaded.
    pub info: PolicyInfo,
    /// sha256 of the component bytes, lowercase hex.
    pub digest: String,
    pre: Bound,
    limits: Limits,
    deadline_ticks: u64,
}

impl std::fmt::Debug for LoadedPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPolicy")
            .field("info", &self.info)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

/// Where a call failed, for naming the error.
#[derive(Clone, Copy)]
enum Stage {
    Instantiate,
    Call(&'static str),
}

impl LoadedPolicy {
    /// Asks the component to describe itself: a policy is loaded only
    /// once it has said what it is.
    pub(super) fn new(
        pre: Bound,
        digest: String,
        limits: Limits,
        deadline_ticks: u64,
    ) -> Result<Self, PolicyError> {
        let mut policy = Self {
            info: PolicyInfo {
                name: String::new(),
                version: String::new(),
                condition_types: Vec::new(),
                settings_schema: String::new(),
            },
            digest,
            pre,
            limits,
            deadline_ticks,
        };
        policy.info = policy
            .call("describe", |instance, store| instance.describe(store))
            .map_err(|e| PolicyError::Load(format!("describe() failed: {e}")))?;
        Ok(policy)
    }

    /// The limits every call into this policy runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Asks the policy whether it accepts these settings (JSON text).
    pub fn validate_settings(&self, json: &str) -> Result<(), PolicyError> {
        self.call("validate-settings", |instance, store| {
            instance.validate_settings(store, json)
        })?
        .map_err(|why| {
            PolicyError::Settings(crate::text::truncate(
                &why,
                crate::conditions::MAX_MESSAGE_BYTES,
            ))
        })
    }

    /// Evaluates one observation. Never fails: when the policy does, the
    /// verdict is the host's fallback and `error` says what went wrong.
    pub fn evaluate(&self, observation: &Observation) -> Evaluation {
        match self.try_evaluate(observation) {
            Ok(returned) => Evaluation {
                verdict: returned.verdict,
                claims_verified: returned.claims_verified,
                error: None,
            },
            Err(error) => Evaluation::failed(error),
        }
    }

    fn try_evaluate(&self, observation: &Observation) -> Result<Returned, PolicyError> {
        let returned = self.call("evaluate", |instance, store| {
            instance.evaluate(store, observation)
        })?;
        verdict::validate(&returned.verdict, observation.members.len())
            .map_err(PolicyError::InvalidVerdict)?;
        Ok(returned)
    }

    /// The contract version the component exports ("steward:status@0.4.0").
    pub fn contract(&self) -> &'static str {
        self.pre.contract()
    }

    /// Runs `f` against a fresh instance in a fresh, limited Store.
    fn call<R>(
        &self,
        name: &'static str,
        f: impl FnOnce(&Instance, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, PolicyError> {
        let mut store = Store::new(self.pre.engine(), HostState::new(&self.limits));
        store.limiter(|state| &mut state.limiter);
        store.set_epoch_deadline(self.deadline_ticks);
        let bindings = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| self.classify(&store, &e, Stage::Instantiate))?;
        f(&bindings, &mut store).map_err(|e| self.classify(&store, &e, Stage::Call(name)))
    }

    fn classify(&self, store: &Store<HostState>, e: &wasmtime::Error, stage: Stage) -> PolicyError {
        if e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) {
            return PolicyError::Deadline(self.limits.deadline.as_millis());
        }
        if store.data().limiter.refused {
            return PolicyError::Memory(self.limits.memory_bytes);
        }
        let what = match e.downcast_ref::<wasmtime::Trap>() {
            Some(trap) => trap.to_string(),
            None => wasm_error(e),
        };
        match stage {
            Stage::Instantiate => PolicyError::Instantiate(what),
            Stage::Call(name) => {
                let stderr = without_backtrace_notes(&store.data().stderr.contents());
                let stderr = stderr.split_whitespace().collect::<Vec<_>>().join(" ");
                if stderr.is_empty() {
                    PolicyError::Trap(format!("{name}: {what}"))
                } else {
                    PolicyError::Trap(format!(
                        "{name}: {what}; stderr: {}",
                        crate::text::truncate(&stderr, STDERR_IN_MESSAGE)
                    ))
                }
            }
        }
    }
}

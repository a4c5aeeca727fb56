//! The load of the version a spec pins, in phases that run in order and
//! stop at the first failure:
//!
//! ```text
//! limits  ->  fetch  ->  verify  ->  compile  ->  describe
//! ```
//!
//! Each phase returns its own outcome type ([`super::failure`] holds the
//! failures). What the load guarantees:
//! - limits above the operator's maximum fetch nothing: they bound the
//!   download too;
//! - a version that runs under the very same key is reused, not fetched
//!   or compiled again;
//! - no bytes run whose sha256 is not the pin, wherever they came from;
//! - while the pin and the source stay the same, a source that comes to
//!   hold other bytes, or none, does not stop the version that runs (its
//!   bytes are the pinned ones): the outcome keeps it, and says what the
//!   source holds. So the bytes of a ConfigMap and then the pin can be
//!   changed in two writes without an outage between them;
//! - one component compiles and describes itself at a time, never on an
//!   async worker: a Python or JavaScript component peaks at ~500 MB while
//!   it compiles.
//!
//! The outcome is a catalog [`Entry`], a policy that runs or why none
//! does; swapping it in is the caller's.

use std::sync::Arc;

use super::failure::{ComponentError, DigestMismatch, LimitsExceeded, LoadError};
use super::fetch::{self, Fetched, Sources};
use super::pin::Pinned;
use crate::api::EtcdStatusPolicy;
use crate::policy::catalog::{Entry, LoadKey, SourceHolds};
use crate::policy::{Compiled, Limits, LoadedPolicy, PolicyEngine, digest};

/// What a load reads and holds, besides the policy.
pub struct Loader<'a> {
    pub engine: &'a PolicyEngine,
    pub sources: Sources<'a>,
    /// Held while a component compiles and describes itself.
    pub compiling: &'a tokio::sync::Mutex<()>,
}

impl Loader<'_> {
    /// Loads the version `policy` pins. `previous` is the catalog's entry
    /// for it: the version it runs under the same key is returned as is.
    pub async fn load(&self, policy: &EtcdStatusPolicy, previous: Option<Entry>) -> Entry {
        let pinned = Pinned::new(policy, self.engine.limits(), previous);
        if let Err(e) = within(&pinned.limits, self.engine.maximum()) {
            return failed(pinned.key("-".into(), ""), e);
        }
        let (key, bytes) = match fetch::fetch(self.sources, policy, &pinned).await {
            Fetched::Running(entry) => return entry,
            Fetched::Failed { key, error } => {
                let error = LoadError::from(error);
                let holds = SourceHolds::Nothing(error.failure());
                return pinned
                    .keep_running(&key, holds)
                    .unwrap_or_else(|| failed(key, error));
            }
            Fetched::Bytes { key, bytes } => (key, bytes),
        };
        // A ConfigMap's version is known for sure only with its bytes: it
        // may be the one that runs after all.
        if let Some(same) = pinned.running(&key) {
            return same;
        }
        self.load_fetched(&pinned, key, bytes).await
    }

    /// Verify, compile and describe: the phases after the fetch.
    async fn load_fetched(&self, pinned: &Pinned, key: LoadKey, bytes: Vec<u8>) -> Entry {
        if let Err(mismatch) = verify(&key, &bytes) {
            let holds = SourceHolds::Other(mismatch.got.clone());
            return pinned
                .keep_running(&key, holds)
                .unwrap_or_else(|| failed(key, mismatch));
        }
        // The source holds the running version's bytes again, or still
        // (another key of the ConfigMap changed): nothing to compile.
        if let Some(same) = pinned.found_again(&key) {
            return same;
        }
        // One at a time: a Python or JavaScript component peaks at ~500 MB
        // while it compiles.
        let _one = self.compiling.lock().await;
        let compiled = match compile(self.engine, bytes, &key.limits).await {
            Ok(compiled) => compiled,
            Err(e) => return failed(key, e),
        };
        match describe(compiled).await {
            Ok(policy) => Entry::Running {
                key,
                policy,
                drift: None,
            },
            Err(e) => failed(key, e),
        }
    }
}

fn failed(key: LoadKey, error: impl Into<LoadError>) -> Entry {
    Entry::Failed {
        key,
        failure: error.into().failure(),
    }
}

/// The limits phase: the limits in force within the operator's maximum.
fn within(limits: &Limits, maximum: &Limits) -> Result<(), LimitsExceeded> {
    match limits.exceeding(maximum) {
        Some(over) => Err(LimitsExceeded(over)),
        None => Ok(()),
    }
}

/// The verify phase: the bytes are the ones the key's digest pins.
fn verify(key: &LoadKey, bytes: &[u8]) -> Result<(), DigestMismatch> {
    let got = format!("sha256:{}", digest(bytes));
    if got == key.digest {
        return Ok(());
    }
    Err(DigestMismatch {
        from: key.origin(),
        got,
        pinned: key.digest.clone(),
    })
}

/// The compile phase. The bytes go into the blocking task and are dropped
/// with it: only the compiled component is kept.
async fn compile(
    engine: &PolicyEngine,
    bytes: Vec<u8>,
    limits: &Limits,
) -> Result<Compiled, ComponentError> {
    let engine = engine.clone();
    let limits = limits.clone();
    Ok(tokio::task::spawn_blocking(move || engine.compile_with(&bytes, &limits)).await??)
}

/// The describe phase: the component's first run, under its limits.
async fn describe(compiled: Compiled) -> Result<Arc<LoadedPolicy>, ComponentError> {
    Ok(tokio::task::spawn_blocking(move || compiled.describe()).await??)
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use super::*;
    use crate::api::{
        ConfigMapPolicySource, EtcdStatusPolicySpec, OciPolicySource, PolicyLimits, PolicySource,
    };
    use crate::policy::catalog::{Drift, LoadFailure};
    use crate::policy::{DEFAULT_POLICY_WASM, EngineConfig};

    static ENGINE: LazyLock<PolicyEngine> =
        LazyLock::new(|| PolicyEngine::new(EngineConfig::default()).expect("the engine starts"));

    /// Loads with an apiserver that is not there: nothing listens on port 9,
    /// so a phase that reads the API fails at once, as SourceUnreachable.
    async fn load(policy: &EtcdStatusPolicy, previous: Option<Entry>) -> Entry {
        let client = nowhere();
        let compiling = tokio::sync::Mutex::new(());
        let loader = Loader {
            engine: &ENGINE,
            sources: Sources {
                client: &client,
                namespace: "ops",
            },
            compiling: &compiling,
        };
        loader.load(policy, previous).await
    }

    fn nowhere() -> kube::Client {
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
            .expect("a client")
    }

    fn pin(bytes: &[u8]) -> String {
        format!("sha256:{}", digest(bytes))
    }

    fn policy(source: PolicySource, limits: PolicyLimits) -> EtcdStatusPolicy {
        EtcdStatusPolicy::new(
            "p",
            EtcdStatusPolicySpec {
                digest: pin(DEFAULT_POLICY_WASM),
                source,
                limits,
            },
        )
    }

    fn config_map() -> PolicySource {
        PolicySource {
            config_map: Some(ConfigMapPolicySource {
                name: "cm".into(),
                key: None,
            }),
            oci: None,
        }
    }

    fn oci() -> PolicySource {
        PolicySource {
            config_map: None,
            oci: Some(OciPolicySource {
                // Refused at once, should anything pull it.
                reference: "127.0.0.1:9/policies/p:1".into(),
                insecure: true,
                pull_secret: None,
                ca_config_map: None,
            }),
        }
    }

    fn failure(entry: &Entry) -> (String, &LoadFailure) {
        match entry {
            Entry::Failed { key, failure } => (key.origin(), failure),
            Entry::Running { key, .. } => panic!("{key:?} runs"),
        }
    }

    #[tokio::test]
    async fn limits_above_the_maximum_stop_the_load_before_the_fetch() {
        let limits = PolicyLimits {
            deadline_milliseconds: Some(5000),
            ..Default::default()
        };
        let entry = load(&policy(config_map(), limits), None).await;
        let (source, failure) = failure(&entry);
        assert_eq!(source, "-", "no source was read");
        assert_eq!(
            failure,
            &LoadFailure {
                reason: "LimitsExceeded",
                message:
                    "spec.limits: deadlineMilliseconds 5000 is above the operator's maximum 1000"
                        .into(),
                transient: false,
            }
        );
    }

    #[tokio::test]
    async fn an_apiserver_that_does_not_answer_is_retried() {
        let entry = load(&policy(config_map(), PolicyLimits::default()), None).await;
        let (source, failure) = failure(&entry);
        assert_eq!(
            source,
            "configMap ops/cm key policy.wasm (could not be read)"
        );
        assert_eq!(failure.reason, "SourceUnreachable");
        assert!(failure.transient);
        assert!(
            failure.message.starts_with("reading ConfigMap ops/cm: "),
            "{}",
            failure.message
        );
    }

    #[tokio::test]
    async fn a_spec_without_a_source_stalls() {
        let entry = load(
            &policy(PolicySource::default(), PolicyLimits::default()),
            None,
        )
        .await;
        let (source, failure) = failure(&entry);
        assert_eq!(source, "none");
        assert_eq!(
            failure,
            &LoadFailure {
                reason: "SourceMissing",
                message: "spec.source names no source".into(),
                transient: false,
            }
        );
    }

    /// The pin names the content: the same pin, limits and reference need
    /// no registry.
    #[tokio::test]
    async fn the_version_running_under_the_very_same_key_is_reused_unfetched() {
        let policy = policy(oci(), PolicyLimits::default());
        let running = ENGINE.default_policy();
        let key = LoadKey {
            digest: pin(DEFAULT_POLICY_WASM),
            limits: ENGINE.limits().clone(),
            source: "oci 127.0.0.1:9/policies/p:1".into(),
            version: String::new(),
        };
        let previous = Entry::Running {
            key: key.clone(),
            policy: running.clone(),
            drift: None,
        };
        match load(&policy, Some(previous)).await {
            Entry::Running {
                key: got, policy, ..
            } => {
                assert_eq!(got, key);
                assert!(Arc::ptr_eq(&policy, &running));
            }
            failed => panic!("not reused: {failed:?}"),
        }

        // A failure under the same key is never reused: the pull is tried
        // again (and finds no registry here).
        let previous = Entry::Failed {
            key,
            failure: LoadFailure {
                reason: "SourceUnreachable",
                message: "earlier".into(),
                transient: true,
            },
        };
        let entry = load(&policy, Some(previous)).await;
        let (_, failure) = failure(&entry);
        assert_ne!(failure.message, "earlier");
        assert_eq!(failure.reason, "SourceUnreachable");
    }

    /// The key of ConfigMap ops/cm at resourceVersion `version`, pinning
    /// `digest` under the engine's default limits.
    fn key_at(digest: String, version: &str) -> LoadKey {
        LoadKey {
            digest,
            limits: ENGINE.limits().clone(),
            source: "configMap ops/cm key policy.wasm".into(),
            version: version.into(),
        }
    }

    fn key(digest: String) -> LoadKey {
        key_at(digest, "7")
    }

    fn loader_for_bytes<'a>(
        client: &'a kube::Client,
        compiling: &'a tokio::sync::Mutex<()>,
    ) -> Loader<'a> {
        Loader {
            engine: &ENGINE,
            sources: Sources {
                client,
                namespace: "ops",
            },
            compiling,
        }
    }

    /// What the spec of [`policy`] from ConfigMap ops/cm pins, with
    /// `previous` running or not.
    fn pinned(previous: Option<Entry>) -> Pinned {
        Pinned::new(
            &policy(config_map(), PolicyLimits::default()),
            ENGINE.limits(),
            previous,
        )
    }

    #[tokio::test]
    async fn bytes_that_are_not_the_pinned_ones_never_compile() {
        let bytes = b"\0asm other bytes".to_vec();
        let pinned_digest = pin(DEFAULT_POLICY_WASM);
        let mismatch = verify(&key(pinned_digest.clone()), &bytes).unwrap_err();
        assert_eq!(mismatch.got, pin(&bytes));

        let (client, compiling) = (nowhere(), tokio::sync::Mutex::new(()));
        let entry = loader_for_bytes(&client, &compiling)
            .load_fetched(&pinned(None), key(pinned_digest.clone()), bytes.clone())
            .await;
        let (_, failure) = failure(&entry);
        assert_eq!(
            failure,
            &LoadFailure {
                reason: "DigestMismatch",
                message: format!(
                    "the component from configMap ops/cm key policy.wasm at resourceVersion 7 is {}, but spec.digest pins {pinned_digest}; it was not run",
                    pin(&bytes)
                ),
                transient: false,
            }
        );
    }

    #[tokio::test]
    async fn pinned_bytes_compile_and_describe_or_say_why_not() {
        let (client, compiling) = (nowhere(), tokio::sync::Mutex::new(()));
        let loader = loader_for_bytes(&client, &compiling);

        let entry = loader
            .load_fetched(
                &pinned(None),
                key(pin(DEFAULT_POLICY_WASM)),
                DEFAULT_POLICY_WASM.to_vec(),
            )
            .await;
        match entry {
            Entry::Running { policy, drift, .. } => {
                assert_eq!(
                    format!("sha256:{}", policy.digest),
                    pin(DEFAULT_POLICY_WASM)
                );
                assert!(!policy.info.name.is_empty(), "it described itself");
                assert_eq!(drift, None);
            }
            failed => panic!("{failed:?}"),
        }

        let garbage = b"not wasm".to_vec();
        let entry = loader
            .load_fetched(&pinned(None), key(pin(&garbage)), garbage)
            .await;
        let (_, failure) = failure(&entry);
        assert_eq!(failure.reason, "InvalidComponent");
        assert!(!failure.transient, "the same bytes fail the same way");
        assert_eq!(
            failure.message,
            "policy could not be loaded: not a WebAssembly component (8 bytes, no \\0asm header)"
        );
    }

    /// The running version of ConfigMap ops/cm, loaded at version 7.
    fn running_at_7() -> (Entry, Arc<LoadedPolicy>) {
        let policy = ENGINE.default_policy();
        let entry = Entry::Running {
            key: key(pin(DEFAULT_POLICY_WASM)),
            policy: policy.clone(),
            drift: None,
        };
        (entry, policy)
    }

    /// The first write of "bytes first, then the pin": the ConfigMap holds
    /// the next version while spec.digest still pins the running one. The
    /// running version keeps running, the entry says what the source holds,
    /// and the new bytes never run.
    #[tokio::test]
    async fn a_source_holding_other_bytes_under_the_same_pin_keeps_the_running_version() {
        let (client, compiling) = (nowhere(), tokio::sync::Mutex::new(()));
        let loader = loader_for_bytes(&client, &compiling);
        let (previous, running) = running_at_7();
        let next = b"\0asm the next version".to_vec();
        let pinned_digest = pin(DEFAULT_POLICY_WASM);

        let entry = loader
            .load_fetched(
                &pinned(Some(previous.clone())),
                key_at(pinned_digest.clone(), "8"),
                next.clone(),
            )
            .await;
        let Entry::Running { key, policy, drift } = &entry else {
            panic!("the running version stopped: {entry:?}");
        };
        assert!(Arc::ptr_eq(policy, &running), "the very version that ran");
        assert_eq!(key.version, "7", "still the key it was loaded under");
        assert_eq!(
            drift,
            &Some(Drift {
                seen: key_at(pinned_digest.clone(), "8"),
                holds: SourceHolds::Other(pin(&next)),
            })
        );

        // The next reconcile finds the ConfigMap at 8 again: the answer is
        // known without reading its bytes.
        let again = pinned(Some(entry.clone()));
        assert!(again.running(&key_at(pinned_digest.clone(), "8")).is_some());
        assert!(again.running(&key_at(pinned_digest.clone(), "9")).is_none());

        // The ConfigMap holds the pinned bytes again (at 9): no drift, and
        // nothing compiles again.
        let back = loader
            .load_fetched(
                &again,
                key_at(pinned_digest.clone(), "9"),
                DEFAULT_POLICY_WASM.to_vec(),
            )
            .await;
        match back {
            Entry::Running { key, policy, drift } => {
                assert_eq!(key.version, "9");
                assert!(Arc::ptr_eq(&policy, &running));
                assert_eq!(drift, None);
            }
            failed => panic!("{failed:?}"),
        }
    }

    /// A new pin is a new version: the old one no longer matches it and is
    /// not kept, whatever the source holds.
    #[tokio::test]
    async fn a_new_pin_or_new_limits_do_not_keep_the_old_version() {
        let (client, compiling) = (nowhere(), tokio::sync::Mutex::new(()));
        let loader = loader_for_bytes(&client, &compiling);
        let (previous, _) = running_at_7();
        let next = b"\0asm the next version".to_vec();

        let other_pin = pin(b"\0asm yet another version");
        let entry = loader
            .load_fetched(
                &pinned(Some(previous.clone())),
                key_at(other_pin, "8"),
                next.clone(),
            )
            .await;
        assert_eq!(failure(&entry).1.reason, "DigestMismatch");

        let mut other_limits = key_at(pin(DEFAULT_POLICY_WASM), "8");
        other_limits.limits.instances += 1;
        let entry = loader
            .load_fetched(&pinned(Some(previous)), other_limits, next)
            .await;
        assert_eq!(failure(&entry).1.reason, "DigestMismatch");
    }

    /// A ConfigMap that cannot be read (here, an apiserver that does not
    /// answer) under the same pin does not stop the version that runs.
    #[tokio::test]
    async fn a_source_that_cannot_be_read_under_the_same_pin_keeps_the_running_version() {
        let (previous, running) = running_at_7();
        let entry = load(
            &policy(config_map(), PolicyLimits::default()),
            Some(previous),
        )
        .await;
        let Entry::Running {
            policy,
            drift: Some(drift),
            ..
        } = &entry
        else {
            panic!("the running version stopped: {entry:?}");
        };
        assert!(Arc::ptr_eq(policy, &running));
        assert_eq!(drift.seen.version, "?");
        match &drift.holds {
            SourceHolds::Nothing(failure) => {
                assert_eq!(failure.reason, "SourceUnreachable");
                assert!(failure.transient);
            }
            other => panic!("{other:?}"),
        }
    }
}

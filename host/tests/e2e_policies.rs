//! EtcdStatusPolicy end to end, on the real control plane with real etcd:
//! a policy shipped in a ConfigMap or as an OCI artifact in a real registry
//! (pushed with the real oras), pinned by digest, hot-reloaded when its
//! spec or its ConfigMap changes, and refused when its bytes are not the
//! pinned ones. Every refusal is asserted on the status, the Events and
//! etcd's membership.

mod support;

use std::path::Path;

use etcd_steward::api::{EtcdCluster, EtcdStatusPolicy};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use support::*;

/// One control plane at a time: two on a 2-core machine would turn these
/// correctness tests into timing tests.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

fn policies(env: &Env) -> Api<EtcdStatusPolicy> {
    Api::all(env.client.clone())
}

async fn create_policy(env: &Env, name: &str, digest: &str, source: serde_json::Value) {
    let policy: EtcdStatusPolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "etcd.steward.dev/v1alpha1",
        "kind": "EtcdStatusPolicy",
        "metadata": {"name": name},
        "spec": {"digest": digest, "source": source},
    }))
    .expect("a valid EtcdStatusPolicy");
    policies(env)
        .create(&PostParams::default(), &policy)
        .await
        .expect("creating the EtcdStatusPolicy");
}

async fn patch_policy(env: &Env, name: &str, spec: serde_json::Value) {
    policies(env)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await
        .expect("patching the EtcdStatusPolicy");
}

/// Polls the policy until `pred` holds on its status.
async fn wait_policy(
    env: &Env,
    name: &str,
    what: &str,
    pred: impl Fn(&EtcdStatusPolicy) -> bool,
) -> EtcdStatusPolicy {
    let start = std::time::Instant::now();
    loop {
        let p = policies(env).get(name).await.expect("reading the policy");
        if pred(&p) {
            return p;
        }
        assert!(
            start.elapsed() < EVENTUALLY,
            "timed out waiting for {name}: {what}; status:\n{}",
            serde_json::to_string_pretty(&p.status).unwrap()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

fn policy_condition<'a>(
    p: &'a EtcdStatusPolicy,
    type_: &str,
) -> Option<(&'a str, &'a str, &'a str)> {
    p.status
        .as_ref()?
        .condition(type_)
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

/// How kstatus (Flux, kpt) and Argo CD, by deploy/argocd's
/// EtcdStatusPolicy health.lua, read the policy; asserted as `kstatus` and
/// `argo`.
fn assert_policy_read(env: &Env, p: &EtcdStatusPolicy, kstatus: &str, argo: &str) {
    let obj = serde_json::to_value(p).unwrap();
    let read = env.consumers.kstatus(&obj).expect("kstatus");
    let lua = steward_testbed::status_consumers::argocd_dir()
        .join("etcd.steward.dev/EtcdStatusPolicy/health.lua");
    let health = env
        .consumers
        .argo_health_by(&lua, &obj)
        .expect("Argo CD's health.lua");
    assert_eq!(
        (read.status.as_str(), health.status.as_str()),
        (kstatus, argo),
        "kstatus {read}; Argo CD {health}; status:\n{}",
        serde_json::to_string_pretty(&p.status).unwrap()
    );
    // What a person sees in Argo CD is the condition's own words: Degraded's
    // while a loaded version fails its evaluations, else Ready's.
    let named = match policy_condition(p, "Degraded") {
        Some(("True", _, _)) => policy_condition(p, "Degraded"),
        _ => policy_condition(p, "Ready"),
    };
    assert!(health.message.contains(named.unwrap().2), "{health}");
}

/// A component in a ConfigMap of the operator's namespace.
async fn put_config_map(env: &Env, name: &str, wasm: &[u8]) {
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": OPERATOR_NS},
        "binaryData": {"policy.wasm": k8s_openapi::ByteString(wasm.to_vec())}
    }))
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), OPERATOR_NS);
    api.patch(name, &PatchParams::apply("e2e").force(), &Patch::Apply(&cm))
        .await
        .expect("writing the ConfigMap");
}

async fn select(
    env: &Env,
    cluster: &str,
    policy: &str,
    settings: serde_json::Value,
) -> EtcdCluster {
    env.clusters()
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"statusPolicy": {"name": policy, "settings": settings}}})),
        )
        .await
        .expect("selecting the policy")
}

/// The first status the operator writes for `generation`: what one
/// reconcile of that spec concluded.
async fn first_status_of(watch: ClusterWatch, generation: i64) -> EtcdCluster {
    watch
        .until(&format!("a status for generation {generation}"), |c| {
            c.status.as_ref().and_then(|s| s.observed_generation) == Some(generation)
        })
        .await
}

/// Warning Events on the cluster whose note contains `part`.
async fn warnings(env: &Env, regarding: &str, part: &str) -> Vec<String> {
    let events: Api<Event> = Api::all(env.client.clone());
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding))
        .filter_map(|e| e.note)
        .filter(|n| n.contains(part))
        .collect()
}

async fn assert_membership_untouched(env: &Env, cluster: &str) {
    assert_eq!(env.member_names(cluster).await.len(), 3);
    let endpoints = env.endpoints(cluster).await;
    let listed = env.etcdctl(&endpoints, &["member", "list"]).await;
    assert_eq!(listed.lines().count(), 3, "{listed}");
}

/// Every status one cluster goes through from the moment `record`
/// returns, collected in the background: a watch stream that nobody polls
/// does not watch, and would miss what happens meanwhile.
struct Statuses {
    seen: std::sync::Arc<std::sync::Mutex<Vec<EtcdCluster>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Statuses {
    async fn record(env: &Env, name: &str) -> Statuses {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut stream = watcher(
            env.clusters(),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
        .applied_objects()
        .boxed();
        let into = seen.clone();
        let task = tokio::spawn(async move {
            while let Some(item) = stream.next().await {
                if let Ok(c) = item {
                    into.lock().unwrap().push(c);
                }
            }
        });
        let statuses = Statuses { seen, task };
        // The first list is in: the watch runs from here on.
        statuses.until("the cluster, listed", |_| true).await;
        statuses
    }

    /// The first status recorded (so far or from now on) for which `pred`
    /// holds.
    async fn until(&self, what: &str, pred: impl Fn(&EtcdCluster) -> bool) -> EtcdCluster {
        let start = std::time::Instant::now();
        loop {
            if let Some(c) = self.seen.lock().unwrap().iter().find(|c| pred(c)) {
                return c.clone();
            }
            let last = self.seen.lock().unwrap().last().cloned();
            assert!(
                start.elapsed() < EVENTUALLY,
                "never saw {what}; last status:\n{}",
                serde_json::to_string_pretty(&last.and_then(|c| c.status)).unwrap()
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// Stops recording; every status recorded, in order.
    async fn stop(self) -> Vec<EtcdCluster> {
        self.task.abort();
        let _ = self.task.await;
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

/// A ConfigMap-sourced policy runs once pinned, and is updated without an
/// outage: the new bytes go into the ConfigMap first (seen through its
/// watch, no polling), while the pinned version keeps running and the
/// policy says its source holds something else; then the pin moves and the
/// clusters run the new version, never PolicyFailed in between. A pin whose
/// bytes the ConfigMap does not hold is refused, and nothing runs.
#[test]
fn a_config_map_policy_is_updated_bytes_first_then_pin_without_an_outage() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let raft_lag = std::fs::read(env!("STEWARD_EXAMPLE_RAFT_LAG_WASM")).unwrap();
        let chaos = std::fs::read(env!("STEWARD_CHAOS_POLICY_WASM")).unwrap();
        put_config_map(&env, "raft-lag", &raft_lag).await;
        create_policy(
            &env,
            "raft-lag",
            &sha256(&raft_lag),
            serde_json::json!({"configMap": {"name": "raft-lag"}}),
        )
        .await;
        let p = wait_policy(&env, "raft-lag", "Ready=True", |p| {
            policy_condition(p, "Ready").is_some_and(|c| c.0 == "True")
        })
        .await;
        assert_policy_read(&env, &p, "Current", "Healthy");
        let status = p.status.unwrap();
        assert_eq!(status.digest.as_deref(), Some(sha256(&raft_lag).as_str()));
        let described = status.policy.unwrap();
        assert_eq!(described.name, "raft-lag");
        assert!(described.condition_types.contains(&"RaftInSync".to_owned()));
        assert_eq!(status.limits.unwrap().deadline_milliseconds, 200);

        env.create_cluster("lag", 3).await;
        env.wait_available("lag", 3).await;
        let watch = env.watch("lag").await;
        // Settings both versions accept: the swap below changes the policy only.
        let changed = select(&env, "lag", "raft-lag", serde_json::json!({})).await;
        let c = first_status_of(watch, changed.metadata.generation.unwrap()).await;
        let policy = c.status.as_ref().unwrap().policy.clone().unwrap();
        assert_eq!(
            policy.name, "raft-lag",
            "the first reconcile of the new spec runs it"
        );
        assert_eq!(policy.source, "EtcdStatusPolicy raft-lag");
        assert_eq!(policy.digest, sha256(&raft_lag));
        let c = env
            .wait_for("lag", "RaftInSync=True from the policy", |c| {
                condition(c, "RaftInSync") == Some("True")
            })
            .await;
        assert_eq!(condition(&c, "Available"), Some("True"));
        assert_eq!(condition_reason(&c, "Available"), Some("QuorumHealthy"));
        wait_policy(&env, "raft-lag", "used by one cluster", |p| {
            p.status.as_ref().is_some_and(|s| s.clusters == 1)
        })
        .await;

        // Bytes first, then the pin: the ConfigMap now holds the next
        // version while spec.digest still pins the running one. Every
        // status the cluster goes through from here on is recorded.
        let statuses = Statuses::record(&env, "lag").await;
        put_config_map(&env, "raft-lag", &chaos).await;
        let p = wait_policy(&env, "raft-lag", "SourceDrifted=True", |p| {
            policy_condition(p, "SourceDrifted").is_some_and(|c| c.0 == "True")
        })
        .await;
        let (_, reason, message) = policy_condition(&p, "SourceDrifted").unwrap();
        assert_eq!(reason, "SourceChanged");
        assert!(
            message.contains(&sha256(&chaos)) && message.contains(&sha256(&raft_lag)),
            "the message names what the source holds and the pin: {message}"
        );
        assert_eq!(
            policy_condition(&p, "Ready").map(|c| (c.0, c.1)),
            Some(("True", "Loaded")),
            "the pinned version still runs"
        );
        assert_eq!(
            p.status.as_ref().unwrap().digest.as_deref(),
            Some(sha256(&raft_lag).as_str())
        );
        assert_policy_read(&env, &p, "Current", "Healthy");
        // The cluster is reconciled and its status written while the
        // source differs from the pin (lastVerifiedTime moves at least every
        // 15 s): it keeps the pinned version's verdict.
        let drifted_at = p
            .status
            .as_ref()
            .unwrap()
            .condition("SourceDrifted")
            .unwrap()
            .last_transition_time
            .0;
        let c = statuses
            .until("a status written after the source drifted", |c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.last_verified_time.as_ref())
                    .is_some_and(|t| t.0 > drifted_at)
            })
            .await;
        assert_eq!(
            c.status.as_ref().unwrap().policy.as_ref().unwrap().digest,
            sha256(&raft_lag)
        );
        assert_eq!(condition(&c, "RaftInSync"), Some("True"));
        assert!(
            warnings(&env, "raft-lag", &sha256(&chaos)).await.is_empty(),
            "nothing failed, so nothing warns"
        );

        // The platform team pins the new component: the swap happens, and
        // the cluster runs it, with no PolicyFailed in between.
        patch_policy(
            &env,
            "raft-lag",
            serde_json::json!({"digest": sha256(&chaos)}),
        )
        .await;
        statuses
            .until("the chaos policy's verdict", |c| {
                condition_reason(c, "Available") == Some("Chaos")
            })
            .await;
        for c in statuses.stop().await {
            assert_ne!(
                condition_reason(&c, "Available"),
                Some("PolicyFailed"),
                "the cluster fell back while the policy was updated: {}",
                describe(&c)
            );
            assert_ne!(condition(&c, "Stalled"), Some("True"), "{}", describe(&c));
        }
        let p = wait_policy(
            &env,
            "raft-lag",
            "the new version, the source matching",
            |p| policy_condition(p, "SourceDrifted").is_some_and(|c| c.0 == "False"),
        )
        .await;
        assert_eq!(
            p.status.as_ref().unwrap().digest.as_deref(),
            Some(sha256(&chaos).as_str())
        );
        assert_eq!(
            policy_condition(&p, "SourceDrifted").unwrap().1,
            "SourceMatches"
        );

        // The running version traps on every evaluation (chaos, fault
        // trap): it stays loaded (Ready=True), but the policy is Degraded,
        // naming the cluster that gets the fallback verdict, and Argo CD
        // reads it Degraded.
        select(
            &env,
            "lag",
            "raft-lag",
            serde_json::json!({"fault": "trap"}),
        )
        .await;
        let p = wait_policy(&env, "raft-lag", "Degraded=True, EvaluationsFailing", |p| {
            policy_condition(p, "Degraded").is_some_and(|c| c.0 == "True")
        })
        .await;
        assert_eq!(
            policy_condition(&p, "Degraded").unwrap().1,
            "EvaluationsFailing"
        );
        assert_eq!(policy_condition(&p, "Ready").unwrap().0, "True");
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.failing_evaluations, 1);
        assert_eq!(status.failing_clusters.len(), 1);
        assert_eq!(status.failing_clusters[0].name, "lag");
        assert_eq!(status.failing_clusters[0].reason, "Trap");
        assert_policy_read(&env, &p, "Current", "Degraded");
        let c = env
            .wait_for("lag", "the fallback verdict", |c| {
                condition_reason(c, "Available") == Some("PolicyFailed")
            })
            .await;
        assert_eq!(condition(&c, "Available"), Some("Unknown"));
        // Settings it evaluates again (a merge patch: the key is replaced,
        // not dropped): Degraded clears with the next answer.
        select(
            &env,
            "lag",
            "raft-lag",
            serde_json::json!({"fault": "none"}),
        )
        .await;
        let p = wait_policy(&env, "raft-lag", "Degraded=False", |p| {
            policy_condition(p, "Degraded").is_some_and(|c| c.0 == "False")
        })
        .await;
        assert_eq!(p.status.as_ref().unwrap().failing_evaluations, 0);
        assert_policy_read(&env, &p, "Current", "Healthy");
        // Back to the settings both versions accept (null drops the key).
        select(&env, "lag", "raft-lag", serde_json::json!({"fault": null})).await;

        // A new pin whose bytes the source does not hold is a new version
        // that cannot run: it is refused, and no version runs.
        patch_policy(
            &env,
            "raft-lag",
            serde_json::json!({"digest": sha256(&raft_lag)}),
        )
        .await;
        let p = wait_policy(&env, "raft-lag", "Ready=False, DigestMismatch", |p| {
            policy_condition(p, "Ready").is_some_and(|c| c.1 == "DigestMismatch")
        })
        .await;
        let (_, _, message) = policy_condition(&p, "Stalled").unwrap();
        assert!(
            message.contains(&sha256(&chaos)) && message.contains(&sha256(&raft_lag)),
            "{message}"
        );
        assert_eq!(p.status.as_ref().unwrap().digest, None, "nothing runs");
        assert_policy_read(&env, &p, "Failed", "Degraded");
        let c = env
            .wait_for("lag", "Stalled=True, PolicyUnloadable", |c| {
                condition_reason(c, "Stalled") == Some("PolicyUnloadable")
            })
            .await;
        assert_eq!(condition(&c, "Stalled"), Some("True"));
        assert_eq!(condition(&c, "Available"), Some("Unknown"));
        assert_eq!(condition_reason(&c, "Available"), Some("PolicyFailed"));
        let message = condition_message(&c, "Stalled").unwrap();
        assert!(
            message.contains(&sha256(&chaos)) && message.contains(&sha256(&raft_lag)),
            "{message}"
        );
        env.assert_read(&c, "Failed", "Degraded");
        assert!(
            !warnings(&env, "raft-lag", &sha256(&chaos)).await.is_empty(),
            "an Event names both digests"
        );
        assert_membership_untouched(&env, "lag").await;

        // The ConfigMap gets the pinned bytes (seen through its watch): the
        // cluster runs them.
        put_config_map(&env, "raft-lag", &raft_lag).await;
        let c = env
            .wait_for("lag", "the raft-lag verdict again", |c| {
                condition(c, "RaftInSync") == Some("True")
                    && condition(c, "Stalled") == Some("False")
            })
            .await;
        assert_eq!(c.status.unwrap().policy.unwrap().digest, sha256(&raft_lag));
        env.shutdown().await;
    });
}

/// What the README promises a platform engineer: a policy written in
/// Python, pushed to a registry with oras, pinned by digest in an
/// EtcdStatusPolicy; the cluster switches to it within one reconcile; a
/// tampered artifact and a broken new version are refused with a status
/// that says why, and membership is never touched.
#[test]
fn a_cluster_switches_to_a_python_policy_shipped_as_an_oci_artifact() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let registry = steward_testbed::registry::Registry::start(env.plane.binaries())
            .await
            .expect("the registry starts");
        let python = steward_testbed::sdk_examples::python().expect("the Python example builds");
        let python_bytes = std::fs::read(&python).unwrap();
        let pinned = sha256(&python_bytes);
        let v1 = registry.reference("policies/voters-down", "v1");
        registry.push_wasm(&v1, &python).await.expect("oras push");

        env.create_cluster("py", 3).await;
        let c = env.wait_available("py", 3).await;
        assert_eq!(c.status.unwrap().policy.unwrap().source, "embedded");

        create_policy(
            &env,
            "voters-down",
            &pinned,
            serde_json::json!({"oci": {"reference": v1, "insecure": true}}),
        )
        .await;
        let p = wait_policy(&env, "voters-down", "Ready=True", |p| {
            policy_condition(p, "Ready").is_some_and(|c| c.0 == "True")
        })
        .await;
        assert_eq!(
            p.status.as_ref().unwrap().digest.as_deref(),
            Some(pinned.as_str())
        );

        let watch = env.watch("py").await;
        let changed = select(
            &env,
            "py",
            "voters-down",
            serde_json::json!({"maxVotersDown": 1}),
        )
        .await;
        let c = first_status_of(watch, changed.metadata.generation.unwrap()).await;
        let status = c.status.as_ref().unwrap();
        assert_eq!(status.policy.as_ref().unwrap().digest, pinned);
        assert_eq!(
            status.policy.as_ref().unwrap().source,
            "EtcdStatusPolicy voters-down"
        );
        assert_eq!(condition(&c, "Available"), Some("True"), "{}", describe(&c));
        assert_eq!(condition(&c, "Stalled"), Some("False"));
        env.assert_read_healthy(&c);

        // A tampered artifact: the tag now holds other bytes than the pin.
        let tampered = Path::new(env!("STEWARD_EXAMPLE_RAFT_LAG_WASM"));
        let v2 = registry.reference("policies/voters-down", "v2");
        registry.push_wasm(&v2, tampered).await.expect("oras push");
        patch_policy(
            &env,
            "voters-down",
            serde_json::json!({"source": {"oci": {"reference": v2, "insecure": true}}}),
        )
        .await;
        let p = wait_policy(&env, "voters-down", "DigestMismatch", |p| {
            policy_condition(p, "Ready").is_some_and(|c| c.1 == "DigestMismatch")
        })
        .await;
        let (stalled, _, message) = policy_condition(&p, "Stalled").unwrap();
        assert_eq!(stalled, "True");
        let tampered_digest = sha256(&std::fs::read(tampered).unwrap());
        assert!(
            message.contains(&tampered_digest) && message.contains(&pinned),
            "{message}"
        );
        let c = env
            .wait_for("py", "Stalled=True, PolicyUnloadable", |c| {
                condition_reason(c, "Stalled") == Some("PolicyUnloadable")
            })
            .await;
        assert_eq!(
            condition(&c, "Available"),
            Some("Unknown"),
            "no verdict from a policy that does not run"
        );
        assert_eq!(c.status.as_ref().unwrap().ready_members, 0);
        assert!(!warnings(&env, "py", &tampered_digest).await.is_empty());
        assert_membership_untouched(&env, "py").await;

        // A broken new version, pinned correctly: it cannot load, and no
        // version runs until it is fixed.
        let broken = env.dir().join("broken.wasm");
        std::fs::write(&broken, b"\0asm\x01\0\0\0").unwrap();
        let v3 = registry.reference("policies/voters-down", "v3");
        registry.push_wasm(&v3, &broken).await.expect("oras push");
        patch_policy(
            &env,
            "voters-down",
            serde_json::json!({"digest": sha256(b"\0asm\x01\0\0\0"), "source": {"oci": {"reference": v3, "insecure": true}}}),
        )
        .await;
        let p = wait_policy(&env, "voters-down", "InvalidComponent", |p| {
            policy_condition(p, "Ready").is_some_and(|c| c.1 == "InvalidComponent")
        })
        .await;
        assert!(
            policy_condition(&p, "Ready")
                .unwrap()
                .2
                .contains("core WebAssembly module")
        );
        let c = env
            .wait_for("py", "the broken version's failure", |c| {
                condition_message(c, "Stalled")
                    .is_some_and(|m| m.contains("core WebAssembly module"))
            })
            .await;
        assert_eq!(condition(&c, "Available"), Some("Unknown"));

        // Back to v1: the cluster runs the Python policy again.
        patch_policy(
            &env,
            "voters-down",
            serde_json::json!({"digest": pinned, "source": {"oci": {"reference": v1, "insecure": true}}}),
        )
        .await;
        let c = env
            .wait_for("py", "the Python verdict again", |c| {
                condition(c, "Available") == Some("True")
                    && condition(c, "Stalled") == Some("False")
            })
            .await;
        assert_eq!(c.status.unwrap().policy.unwrap().digest, pinned);
        registry.stop().await;
        env.shutdown().await;
    });
}

/// A private registry, as most platform teams run one: TLS with a
/// certificate from a private CA, and an account. The policy names the CA
/// bundle (a ConfigMap) and a pull Secret, and runs; without the CA, or
/// without the credentials, it is refused with a status that says which,
/// and the password reaches no status and no Event.
#[test]
fn a_policy_is_pulled_from_a_private_registry_with_its_ca_and_credentials() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let registry = steward_testbed::registry::Registry::start_private(env.plane.binaries())
            .await
            .expect("the private registry starts");
        let private = registry.private.as_ref().unwrap();
        let wasm = Path::new(env!("STEWARD_EXAMPLE_RAFT_LAG_WASM"));
        let pinned = sha256(&std::fs::read(wasm).unwrap());
        let reference = registry.reference("platform/raft-lag", "v1");
        registry
            .push_wasm(&reference, wasm)
            .await
            .expect("oras push with the CA and the account");
        env.create_cluster("private", 3).await;

        // What the platform team keeps beside the operator.
        let ca: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "registry-ca", "namespace": OPERATOR_NS},
            "data": {"ca.crt": private.ca_pem}
        }))
        .unwrap();
        Api::<ConfigMap>::namespaced(env.client.clone(), OPERATOR_NS)
            .create(&PostParams::default(), &ca)
            .await
            .expect("creating the CA ConfigMap");
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "registry-credentials", "namespace": OPERATOR_NS},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": private.docker_config_json(&registry.addr)}
        }))
        .unwrap();
        let secrets = Api::<Secret>::namespaced(env.client.clone(), OPERATOR_NS);
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("creating the pull Secret");
        let wrong: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "wrong-credentials", "namespace": OPERATOR_NS},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": serde_json::json!({
                "auths": {registry.addr.as_str(): {"username": private.username, "password": "not-the-password"}}
            }).to_string()}
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &wrong)
            .await
            .expect("creating the wrong pull Secret");

        let oci = |with: serde_json::Value| {
            let mut oci = serde_json::json!({"reference": reference});
            oci.as_object_mut()
                .unwrap()
                .extend(with.as_object().unwrap().clone());
            serde_json::json!({ "oci": oci })
        };
        create_policy(
            &env,
            "private",
            &pinned,
            oci(serde_json::json!({"caConfigMap": "registry-ca", "pullSecret": "registry-credentials"})),
        )
        .await;
        create_policy(
            &env,
            "without-ca",
            &pinned,
            oci(serde_json::json!({"pullSecret": "registry-credentials"})),
        )
        .await;
        create_policy(
            &env,
            "without-credentials",
            &pinned,
            oci(serde_json::json!({"caConfigMap": "registry-ca"})),
        )
        .await;

        // Nothing listens on the discard port.
        create_policy(
            &env,
            "unreachable",
            &pinned,
            serde_json::json!({"oci": {"reference": "127.0.0.1:9/platform/raft-lag:v1", "insecure": true}}),
        )
        .await;
        create_policy(
            &env,
            "wrong-credentials",
            &pinned,
            oci(serde_json::json!({"caConfigMap": "registry-ca", "pullSecret": "wrong-credentials"})),
        )
        .await;

        let p = wait_policy(&env, "private", "Ready=True", |p| {
            policy_condition(p, "Ready").is_some_and(|c| c.0 == "True")
        })
        .await;
        assert_eq!(
            p.status.as_ref().unwrap().digest.as_deref(),
            Some(pinned.as_str())
        );
        let reason = |reason: &'static str| {
            move |p: &EtcdStatusPolicy| policy_condition(p, "Ready").is_some_and(|c| c.1 == reason)
        };
        // TLS refused the certificate: retrying would change nothing.
        let p = wait_policy(
            &env,
            "without-ca",
            "SourceUntrusted",
            reason("SourceUntrusted"),
        )
        .await;
        assert_policy_read(&env, &p, "Failed", "Degraded");
        let (_, _, message) = policy_condition(&p, "Ready").unwrap();
        assert!(message.contains("UnknownIssuer"), "{message}");
        assert!(message.contains("spec.source.oci.caConfigMap"), "{message}");
        assert_eq!(p.status.as_ref().unwrap().digest, None);
        // Nothing answers: retried, so not Failed for kstatus; but nothing
        // runs, which Argo CD shows.
        let p = wait_policy(
            &env,
            "unreachable",
            "SourceUnreachable",
            reason("SourceUnreachable"),
        )
        .await;
        assert_policy_read(&env, &p, "InProgress", "Degraded");
        assert_eq!(policy_condition(&p, "Stalled").map(|c| c.0), Some("False"));
        let p = wait_policy(&env, "without-credentials", "SourceUnauthorized", |p| {
            policy_condition(p, "Ready").is_some_and(|c| c.1 == "SourceUnauthorized")
        })
        .await;
        let (_, _, message) = policy_condition(&p, "Ready").unwrap();
        assert!(
            message.contains("the registry refused anonymous access"),
            "{message}"
        );
        assert_eq!(
            policy_condition(&p, "Stalled").map(|c| c.0),
            Some("True"),
            "only a person can fix it"
        );
        let p = wait_policy(&env, "wrong-credentials", "SourceUnauthorized", |p| {
            policy_condition(p, "Ready").is_some_and(|c| c.1 == "SourceUnauthorized")
        })
        .await;
        let (_, _, message) = policy_condition(&p, "Ready").unwrap();
        assert!(
            message.contains(&format!(
                "the registry refused the credentials in Secret {OPERATOR_NS}/wrong-credentials"
            )),
            "{message}"
        );
        assert_eq!(p.status.as_ref().unwrap().digest, None);
        // The platform team fixes the Secret: the policy loads.
        secrets
            .patch(
                "wrong-credentials",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({
                    "stringData": {".dockerconfigjson": private.docker_config_json(&registry.addr)}
                })),
            )
            .await
            .expect("fixing the pull Secret");
        let p = wait_policy(&env, "wrong-credentials", "Ready=True once fixed", |p| {
            policy_condition(p, "Ready").is_some_and(|c| c.0 == "True")
        })
        .await;
        assert_eq!(
            p.status.as_ref().unwrap().digest.as_deref(),
            Some(pinned.as_str())
        );

        // A cluster selects the private policy and runs it.
        env.wait_available("private", 3).await;
        select(&env, "private", "private", serde_json::json!({})).await;
        let c = env
            .wait_for("private", "RaftInSync=True from the private policy", |c| {
                condition(c, "RaftInSync") == Some("True")
            })
            .await;
        assert_eq!(
            c.status.as_ref().unwrap().policy.as_ref().unwrap().digest,
            pinned
        );

        // The password reaches no status and no Event.
        let mut said = serde_json::to_string(&c.status).unwrap();
        for p in policies(&env).list(&Default::default()).await.unwrap() {
            said.push_str(&serde_json::to_string(&p.status).unwrap());
        }
        for e in Api::<Event>::all(env.client.clone())
            .list(&Default::default())
            .await
            .unwrap()
        {
            said.push_str(&serde_json::to_string(&e).unwrap());
        }
        assert!(!said.contains(&private.password));
        assert!(!said.contains("not-the-password"));
        assert!(said.contains("UnknownIssuer"), "the refusals were read too");
        assert!(
            said.contains("wrong-credentials"),
            "the refusals were read too"
        );
        registry.stop().await;
        env.shutdown().await;
    });
}

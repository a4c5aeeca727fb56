//! Secrets stay secret: a whole authentication scenario (auth turned on
//! from a Secret, then the password changed through the Secret) with the
//! operator logging at trace level, every crate included. Then the logs,
//! the Events, every object in the namespace and the metrics are searched
//! for the passwords. Run through `make test` (the test control plane).

mod support;

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use support::*;

const FIRST: &str = "quiet-First-pa55-x81";
const SECOND: &str = "quiet-Second-pa55-k27";
/// What the logs must show, to prove the search covered the steps that
/// send the password, at every level down to trace (h2 frames among them).
const MARKERS: [&str; 3] = ["EnableAuth", "ChangeRootPassword", " TRACE h2::"];

/// Log bytes searched; lines holding a password; markers seen.
static BYTES: AtomicUsize = AtomicUsize::new(0);
static LEAKS: AtomicUsize = AtomicUsize::new(0);
static SEEN: Mutex<[bool; 3]> = Mutex::new([false; 3]);

/// The log sink: searches each event as it is written (one write per
/// event), so gigabytes of trace need not be held.
struct Search;

impl Write for Search {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let line = String::from_utf8_lossy(buf);
        BYTES.fetch_add(buf.len(), Ordering::Relaxed);
        if line.contains(FIRST) || line.contains(SECOND) {
            LEAKS.fetch_add(1, Ordering::Relaxed);
        }
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        for (i, m) in MARKERS.iter().enumerate() {
            seen[i] |= line.contains(m);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn set_root_secret(env: &Env, password: &str) {
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "quiet-root", "namespace": NS},
        "type": "kubernetes.io/basic-auth",
        "stringData": {"username": "root", "password": password},
    });
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(env.client.clone(), NS);
    secrets
        .patch(
            "quiet-root",
            &kube::api::PatchParams::apply("e2e").force(),
            &kube::api::Patch::Apply(&secret),
        )
        .await
        .unwrap();
}

/// Every object of `kind` in the test namespace, as JSON text.
async fn dump<K>(env: &Env) -> String
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize,
{
    let api: kube::Api<K> = kube::Api::namespaced(env.client.clone(), NS);
    serde_json::to_string(&api.list(&Default::default()).await.unwrap().items).unwrap()
}

#[test]
fn no_password_reaches_a_log_line_an_event_an_object_or_a_metric() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("trace"))
        .with_writer(|| Search)
        .with_ansi(false)
        .init();
    run(async {
        let env = Env::start().await;
        set_root_secret(&env, FIRST).await;
        let cluster: etcd_steward::api::EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": "quiet", "namespace": NS},
            "spec": {"replicas": 1, "storage": {"size": "1Gi"},
                     "auth": {"enabled": true, "rootCredentialsSecretRef": {"name": "quiet-root"}}}
        }))
        .unwrap();
        env.clusters()
            .create(&Default::default(), &cluster)
            .await
            .unwrap();
        env.wait_for("quiet", "authEnabled", |c| {
            condition(c, "Available") == Some("True")
                && c.status
                    .as_ref()
                    .is_some_and(|s| s.auth_enabled == Some(true))
        })
        .await;
        set_root_secret(&env, SECOND).await;
        let events: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(env.client.clone(), NS);
        let start = std::time::Instant::now();
        while !serde_json::to_string(&events.list(&Default::default()).await.unwrap())
            .unwrap()
            .contains("RootPasswordChanged")
        {
            assert!(
                start.elapsed() < EVENTUALLY,
                "the password was never changed"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        env.wait_for("quiet", "Available with the new password", |c| {
            condition(c, "Available") == Some("True")
        })
        .await;

        use k8s_openapi::api::core::v1 as core;
        let written = [
            (
                "EtcdClusters",
                dump::<etcd_steward::api::EtcdCluster>(&env).await,
            ),
            (
                "EtcdMembers",
                dump::<etcd_steward::api::EtcdMember>(&env).await,
            ),
            (
                "Events",
                dump::<k8s_openapi::api::events::v1::Event>(&env).await,
            ),
            ("Pods", dump::<core::Pod>(&env).await),
            ("Services", dump::<core::Service>(&env).await),
            (
                "PersistentVolumeClaims",
                dump::<core::PersistentVolumeClaim>(&env).await,
            ),
            ("ConfigMaps", dump::<core::ConfigMap>(&env).await),
            (
                "PodDisruptionBudgets",
                dump::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(&env).await,
            ),
            ("metrics", env.metrics_text()),
        ];
        let seen = *SEEN.lock().unwrap();
        for (marker, seen) in MARKERS.iter().zip(seen) {
            assert!(seen, "the trace shows {marker}");
        }
        assert_eq!(
            LEAKS.load(Ordering::Relaxed),
            0,
            "log lines held a password"
        );
        for pw in [FIRST, SECOND] {
            for (what, text) in &written {
                assert!(!text.contains(pw), "a password reached the {what}");
            }
        }
        eprintln!(
            "searched {} bytes of trace logs",
            BYTES.load(Ordering::Relaxed)
        );
        env.shutdown().await;
    });
}

//! Secrets stay secret: a whole TLS and authentication scenario (a
//! cluster with client certificates, auth turned on from a Secret, then
//! the password changed through the Secret) with the operator logging at
//! trace level, every crate included. Then the logs, the Events, every
//! object in the namespace and the metrics are searched for the passwords
//! and the operator's private key. Run through `make test` (the test control plane).

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
/// A line of the operator's private key, once made.
/// As PEM text, and as the decimal bytes a `Vec<u8>` Debug prints
/// (tonic's `Identity` is such).
static KEY_LINE: std::sync::OnceLock<[String; 2]> = std::sync::OnceLock::new();

fn key_forms() -> &'static [String] {
    KEY_LINE.get().map_or(&[], |k| k.as_slice())
}

/// The log sink: searches each event as it is written (one write per
/// event), so gigabytes of trace need not be held.
struct Search;

/// Each password as it could leak: plain, base64 (Secret data, JSON of a
/// `ByteString`), hex, and a `Vec<u8>`'s Debug form.
fn forms() -> &'static [String] {
    static FORMS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    FORMS.get_or_init(|| {
        [FIRST, SECOND]
            .iter()
            .flat_map(|pw| {
                let b64 = serde_json::to_string(&k8s_openapi::ByteString(pw.as_bytes().to_vec()))
                    .unwrap()
                    .trim_matches('"')
                    .to_owned();
                let debug = format!("{:?}", pw.as_bytes());
                [
                    pw.to_string(),
                    b64,
                    hex::encode(pw),
                    debug.trim_matches(['[', ']']).to_owned(),
                ]
            })
            .collect()
    })
}

impl Write for Search {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let line = String::from_utf8_lossy(buf);
        BYTES.fetch_add(buf.len(), Ordering::Relaxed);
        if forms().iter().any(|f| line.contains(f.as_str()))
            || key_forms().iter().any(|k| line.contains(k.as_str()))
        {
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
        env.set_root_secret("quiet-root", FIRST).await;
        // TLS with client certificates, then auth on top: the password
        // goes over TLS, and the private keys are secret material too.
        let key = env.create_tls_cluster("quiet", 1).await.key;
        let key = std::fs::read_to_string(key).unwrap();
        let key_line = key.lines().nth(1).unwrap().to_owned();
        assert!(key_line.len() >= 40, "a line of the key's base64 body");
        let debug = format!("{:?}", key_line.as_bytes());
        KEY_LINE
            .set([key_line, debug.trim_matches(['[', ']']).to_owned()])
            .unwrap();
        env.wait_available("quiet", 1).await;
        env.clusters()
            .patch(
                "quiet",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"spec": {"auth":
                    {"enabled": true, "rootCredentialsSecretRef": {"name": "quiet-root"}}}})),
            )
            .await
            .unwrap();
        env.wait_for("quiet", "authEnabled", |c| {
            condition(c, "Available") == Some("True")
                && c.status
                    .as_ref()
                    .is_some_and(|s| s.auth_enabled == Some(true))
        })
        .await;
        env.set_root_secret("quiet-root", SECOND).await;
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
        for form in forms() {
            for (what, text) in &written {
                assert!(
                    !text.contains(form.as_str()),
                    "a password reached the {what}"
                );
            }
        }
        for key in key_forms() {
            for (what, text) in &written {
                assert!(
                    !text.contains(key.as_str()),
                    "a private key reached the {what}"
                );
            }
        }
        eprintln!(
            "searched {} bytes of trace logs",
            BYTES.load(Ordering::Relaxed)
        );
        env.shutdown().await;
    });
}

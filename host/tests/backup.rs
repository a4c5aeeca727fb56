//! Backups end to end: EtcdSnapshot against a real S3 server (SeaweedFS,
//! built from its Go module by scripts/ensure-go-tool.sh), real etcd
//! members run by the local kubelet, the real control plane, and the real
//! etcdutl to prove that what was uploaded restores. Run through `make test`.
//!
//! The scenarios share one control plane and one cluster: each control
//! plane costs seconds of a 2-core machine, and none of them changes the
//! cluster but the last (quorum loss), which runs last.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use etcd_steward::api::{EtcdBackupSchedule, EtcdSnapshot};
use etcd_steward::etcd::{Fault, Rpc};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use steward_policy_sdk::ProbeErrorKind;
use steward_testbed::s3::S3Server;
use support::*;

const BUCKET: &str = "etcd-backups";
const KEYS: usize = 20;

/// Every log line the operator writes in this binary, at trace level, to
/// search for credentials.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn install() -> Self {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("trace"))
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .try_init()
            .expect("the first subscriber of this test binary");
        captured
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn snapshots(env: &Env) -> Api<EtcdSnapshot> {
    Api::namespaced(env.client.clone(), NS)
}

async fn create_secret(env: &Env, name: &str, data: &[(&str, &str)]) {
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "stringData": data
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect::<serde_json::Map<_, _>>(),
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// An EtcdSnapshot of cluster `cluster` to `s3` (merged over the defaults).
async fn create_snapshot(env: &Env, name: &str, cluster: &str, s3: serde_json::Value) {
    let mut location = serde_json::json!({
        "bucket": BUCKET,
        "credentialsSecretRef": {"name": "s3-creds"},
        "forcePathStyle": true,
    });
    for (k, v) in s3.as_object().unwrap() {
        location[k] = v.clone();
    }
    let snap: EtcdSnapshot = serde_json::from_value(serde_json::json!({
        "apiVersion": "etcd.steward.dev/v1alpha1",
        "kind": "EtcdSnapshot",
        "metadata": {"name": name},
        "spec": {"clusterRef": {"name": cluster}, "destination": {"s3": location}},
    }))
    .unwrap();
    snapshots(env)
        .create(&PostParams::default(), &snap)
        .await
        .unwrap();
}

async fn create_claim(env: &Env, name: &str, size: &str, class: Option<&str>) {
    let mut spec = serde_json::json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
    });
    if let Some(class) = class {
        spec["storageClassName"] = class.into();
    }
    let claim: k8s_openapi::api::core::v1::PersistentVolumeClaim =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec}))
            .unwrap();
    Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        env.client.clone(),
        "default",
    )
    .create(&PostParams::default(), &claim)
    .await
    .unwrap();
}

async fn create_pvc_snapshot(env: &Env, name: &str, cluster: &str, claim: &str, restore: bool) {
    let snap: EtcdSnapshot = serde_json::from_value(serde_json::json!({
        "apiVersion": "etcd.steward.dev/v1alpha1",
        "kind": "EtcdSnapshot",
        "metadata": {"name": name},
        "spec": {
            "clusterRef": {"name": cluster},
            "destination": {"pvc": {"claimName": claim, "subPath": format!("etcd/{cluster}")}},
            "verify": if restore { "Restore" } else { "ReadBack" },
        },
    }))
    .unwrap();
    snapshots(env)
        .create(&PostParams::default(), &snap)
        .await
        .unwrap();
}

async fn create_verified_s3_snapshot(env: &Env, name: &str, cluster: &str, endpoint: &str) {
    let snap: EtcdSnapshot = serde_json::from_value(serde_json::json!({
        "apiVersion": "etcd.steward.dev/v1alpha1",
        "kind": "EtcdSnapshot",
        "metadata": {"name": name},
        "spec": {
            "clusterRef": {"name": cluster},
            "destination": {"s3": {"endpoint": endpoint, "bucket": BUCKET, "key": "verified",
                "credentialsSecretRef": {"name": "s3-creds"}, "forcePathStyle": true}},
            "verify": "Restore",
        },
    }))
    .unwrap();
    snapshots(env)
        .create(&PostParams::default(), &snap)
        .await
        .unwrap();
}

/// Waits until none of the named Pods exists.
async fn wait_no_pods(env: &Env, names: &[&str]) {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(env.client.clone(), "default");
    let start = std::time::Instant::now();
    loop {
        let mut left = Vec::new();
        for name in names {
            if pods.get_opt(name).await.unwrap().is_some() {
                left.push(*name);
            }
        }
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < EVENTUALLY,
            "Pods {left:?} were never deleted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

/// Every file under `dir`.
fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walkdir(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn phase(s: &EtcdSnapshot) -> Option<String> {
    let p = s.status.as_ref()?.phase?;
    Some(format!("{p:?}"))
}

fn snap_condition(s: &EtcdSnapshot, type_: &str) -> Option<(String, String, String)> {
    let c = s.status.as_ref()?.condition(type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn wait_snapshot(
    env: &Env,
    name: &str,
    what: &str,
    pred: impl Fn(&EtcdSnapshot) -> bool,
) -> EtcdSnapshot {
    let start = std::time::Instant::now();
    loop {
        let s = snapshots(env).get(name).await.unwrap();
        if pred(&s) {
            return s;
        }
        assert!(
            start.elapsed() < EVENTUALLY,
            "EtcdSnapshot {name}: never {what}; last status {:#?}",
            s.status
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

async fn wait_terminal(env: &Env, name: &str) -> EtcdSnapshot {
    wait_snapshot(env, name, "Complete or Failed", |s| {
        matches!(phase(s).as_deref(), Some("Complete" | "Failed"))
    })
    .await
}

/// The Warning (or Normal) Events about EtcdSnapshot `name`, as (reason, note).
async fn snapshot_events(env: &Env, name: &str) -> Vec<(String, String, String)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.client.clone(), NS);
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("EtcdSnapshot") && r.name.as_deref() == Some(name)
            })
        })
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

fn kstatus_of(env: &Env, s: &EtcdSnapshot) -> String {
    let obj = serde_json::to_value(s).unwrap();
    env.consumers.kstatus(&obj).expect("kstatus").status
}

/// What Argo CD's health check (deploy/argocd) reads in `s`.
fn argo_of(env: &Env, s: &EtcdSnapshot) -> String {
    let obj = serde_json::to_value(s).unwrap();
    let lua = steward_testbed::status_consumers::argocd_dir()
        .join("etcd.steward.dev/EtcdSnapshot/health.lua");
    env.consumers
        .argo_health_by(&lua, &obj)
        .expect("Argo CD's health.lua")
        .status
}

/// A cluster of 3 created from `source` (spec.bootstrap.restore.source).
async fn restore_cluster(
    env: &Env,
    name: &str,
    source: serde_json::Value,
) -> etcd_steward::api::EtcdCluster {
    let cluster: etcd_steward::api::EtcdCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "etcd.steward.dev/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": {"name": name},
        "spec": {"replicas": 3, "bootstrap": {"restore": {"source": source}}},
    }))
    .unwrap();
    env.clusters()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap()
}

/// Restores `file` with the real etcdutl into a fresh data dir, starts a
/// single etcd on it (loopback), and returns the keys under /app/.
async fn restore_and_read(env: &Env, file: &std::path::Path) -> Vec<String> {
    let bins = env.plane.kubelet().etcd().clone();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("restored");
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (client_port, peer_port) = (free(), free());
    let peer = format!("http://127.0.0.1:{peer_port}");
    let client = format!("http://127.0.0.1:{client_port}");
    let out = tokio::process::Command::new(&bins.etcdutl)
        .args(["snapshot", "restore"])
        .arg(file)
        .arg(format!("--data-dir={}", data.display()))
        .args([
            "--name=restored",
            &format!("--initial-cluster=restored={peer}"),
        ])
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "etcdutl snapshot restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut etcd = tokio::process::Command::new(&bins.etcd)
        .arg(format!("--data-dir={}", data.display()))
        .args(["--name=restored"])
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let keys = loop {
        let out = tokio::process::Command::new(&bins.etcdctl)
            .arg(format!("--endpoints={client}"))
            .args([
                "get",
                "/app/",
                "--prefix",
                "--keys-only",
                "--command-timeout=2s",
            ])
            .output()
            .await
            .unwrap();
        if out.status.success() {
            break String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>();
        }
        assert!(
            start.elapsed() < EVENTUALLY,
            "the restored etcd never answered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    };
    etcd.kill().await.unwrap();
    keys
}

#[test]
fn snapshots_are_streamed_to_s3_read_back_and_restore_and_every_fault_is_reported() {
    let logs = Captured::install();
    run(async {
        let mut env = Env::start().await;
        let s3 = S3Server::start()
            .await
            .expect("SeaweedFS's S3 gateway starts");
        s3.create_bucket(BUCKET).await.unwrap();
        create_secret(
            &env,
            "s3-creds",
            &[
                ("AWS_ACCESS_KEY_ID", &s3.access_key_id),
                ("AWS_SECRET_ACCESS_KEY", &s3.secret_access_key),
            ],
        )
        .await;
        let wrong_secret = format!("{}-but-wrong", s3.secret_access_key);
        create_secret(
            &env,
            "wrong-creds",
            &[
                ("AWS_ACCESS_KEY_ID", &s3.access_key_id),
                ("AWS_SECRET_ACCESS_KEY", &wrong_secret),
            ],
        )
        .await;
        create_secret(&env, "no-keys", &[("username", "backup")]).await;

        env.create_cluster("bk", 3).await;
        env.wait_available("bk", 3).await;
        let endpoints = env.endpoints("bk").await;
        for i in 0..KEYS {
            env.etcdctl(
                &endpoints,
                &["put", &format!("/app/{i:02}"), &format!("value-{i}")],
            )
            .await;
        }

        // 1. A snapshot whose first stream fails (an injected Snapshot RPC
        // timeout): the attempt is reported, and the second completes.
        env.faults
            .inject(Fault::fail(Rpc::Snapshot, ProbeErrorKind::Timeout).times(1));
        create_snapshot(
            &env,
            "bk-1",
            "bk",
            serde_json::json!({"endpoint": s3.endpoint(), "key": "prod/bk"}),
        )
        .await;
        let s = wait_terminal(&env, "bk-1").await;
        let status = s.status.clone().unwrap();
        assert_eq!(phase(&s).as_deref(), Some("Complete"), "{status:#?}");
        assert_eq!(
            status.attempts, 2,
            "one failed attempt, then one that completed"
        );
        let (ready, reason, message) = snap_condition(&s, "Ready").unwrap();
        assert_eq!(
            (ready.as_str(), reason.as_str()),
            ("True", "Complete"),
            "{message}"
        );
        let (verified, how, _) = snap_condition(&s, "Verified").unwrap();
        assert_eq!((verified.as_str(), how.as_str()), ("True", "ReadBack"));
        assert_eq!(kstatus_of(&env, &s), "Current");
        assert_eq!(argo_of(&env, &s), "Healthy");
        let events = snapshot_events(&env, "bk-1").await;
        assert!(
            events.iter().any(|(t, r, n)| t == "Warning"
                && r == "SnapshotStreamFailed"
                && n.contains("retrying")),
            "the failed attempt has a Warning Event: {events:?}"
        );
        assert!(
            events
                .iter()
                .any(|(t, r, _)| t == "Normal" && r == "Complete"),
            "{events:?}"
        );

        // What the status says is what the bucket holds.
        let artifact = status.artifact.clone().unwrap();
        assert_eq!(artifact.uri, format!("s3://{BUCKET}/prod/bk/bk-1.db"));
        let object = s3.get(BUCKET, "prod/bk/bk-1.db").await.unwrap();
        assert_eq!(object.len() as i64, artifact.size_bytes);
        assert_eq!(
            artifact.checksum,
            format!("sha256:{}", hex::encode(Sha256::digest(&object)))
        );
        let names = env.member_names("bk").await;
        assert!(
            names.contains(status.member.as_ref().unwrap()),
            "{status:?}"
        );
        assert_eq!(
            status.etcd_version.as_deref(),
            Some(etcd_steward::api::DEFAULT_ETCD_VERSION)
        );

        // The real etcdutl agrees on the revision and restores every key.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bk-1.db");
        std::fs::write(&file, &object).unwrap();
        let out = tokio::process::Command::new(&env.plane.kubelet().etcd().etcdutl)
            .args(["snapshot", "status", "-w", "json"])
            .arg(&file)
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            st["revision"].as_i64(),
            status.revision,
            "etcdutl snapshot status: {st}"
        );
        let keys = restore_and_read(&env, &file).await;
        assert_eq!(keys.len(), KEYS, "{keys:?}");

        let metrics = env.metrics_text();
        assert!(
            metrics.contains(
                r#"etcd_steward_cluster_snapshots_total{namespace="default",name="bk"} 1"#
            ),
            "{metrics}"
        );
        assert!(metrics.contains(r#"etcd_steward_cluster_snapshot_failures_total{namespace="default",name="bk",reason="SnapshotStreamFailed"} 1"#), "{metrics}");
        assert!(metrics.contains(&format!(
            r#"etcd_steward_cluster_snapshot_last_size_bytes{{namespace="default",name="bk"}} {}"#,
            artifact.size_bytes
        )));

        // 1b. A new cluster restored from that snapshot: every key, at
        // least its revision, and an identity of its own.
        restore_cluster(
            &env,
            "restored",
            serde_json::json!({"snapshotRef": {"name": "bk-1"}}),
        )
        .await;
        let c = env.wait_available("restored", 3).await;
        let restored_endpoints = env.endpoints("restored").await;
        let keys = env
            .etcdctl(
                &restored_endpoints,
                &["get", "/app/", "--prefix", "--keys-only"],
            )
            .await;
        assert_eq!(
            keys.lines().filter(|l| !l.is_empty()).count(),
            KEYS,
            "{keys}"
        );
        let st: serde_json::Value = serde_json::from_str(
            &env.etcdctl(&restored_endpoints, &["endpoint", "status", "-w", "json"])
                .await,
        )
        .unwrap();
        for ep in st.as_array().unwrap() {
            let rev = ep["Status"]["header"]["revision"].as_i64().unwrap();
            assert!(rev >= status.revision.unwrap(), "{ep}: revision {rev}");
        }
        let original = env.clusters().get("bk").await.unwrap();
        let id = |c: &etcd_steward::api::EtcdCluster| c.status.as_ref().unwrap().cluster_id.clone();
        assert_ne!(
            id(&c),
            id(&original),
            "a restore has a cluster ID of its own"
        );
        let member_ids = |c: &etcd_steward::api::EtcdCluster| -> Vec<String> {
            c.status
                .as_ref()
                .unwrap()
                .members
                .iter()
                .filter_map(|m| m.id.clone())
                .collect()
        };
        for m in member_ids(&c) {
            assert!(!member_ids(&original).contains(&m), "member ID {m} reused");
        }
        env.clusters()
            .delete("restored", &Default::default())
            .await
            .unwrap();

        // A tampered object is refused before anything starts.
        let mut tampered = object.clone();
        let at = tampered.len() / 2;
        tampered[at] ^= 0xff;
        s3.put(BUCKET, "tampered/bk-1.db", tampered).await.unwrap();
        restore_cluster(
            &env,
            "tampered",
            serde_json::json!({
                "s3": {"endpoint": s3.endpoint(), "bucket": BUCKET, "key": "tampered/bk-1.db",
                       "credentialsSecretRef": {"name": "s3-creds"}, "forcePathStyle": true},
                "sha256": artifact.checksum,
            }),
        )
        .await;
        let c = env
            .wait_for("tampered", "Stalled=True/RestoreChecksumMismatch", |c| {
                condition(c, "Stalled") == Some("True")
                    && condition_reason(c, "Stalled") == Some("RestoreChecksumMismatch")
            })
            .await;
        assert!(
            condition_message(&c, "Stalled")
                .unwrap()
                .contains(&artifact.checksum["sha256:".len()..]),
            "{}",
            describe(&c)
        );
        assert!(
            env.member_names("tampered").await.is_empty(),
            "no member starts from it"
        );
        env.clusters()
            .delete("tampered", &Default::default())
            .await
            .unwrap();

        // 1c. To a PVC, verified by a restore: a Pod of the operator's
        // image writes and reads back the file, a second restores it with
        // etcdutl and serves it, and the operator compares its revision
        // and keyspace hash with the source's before calling it Verified.
        create_claim(&env, "backups", "1Gi", None).await;
        create_pvc_snapshot(&env, "bk-pvc", "bk", "backups", true).await;
        let s = wait_terminal(&env, "bk-pvc").await;
        let pvc_status = s.status.clone().unwrap();
        assert_eq!(phase(&s).as_deref(), Some("Complete"), "{pvc_status:#?}");
        let (verified, how, message) = snap_condition(&s, "Verified").unwrap();
        assert_eq!(
            (verified.as_str(), how.as_str()),
            ("True", "Restored"),
            "{message}"
        );
        assert!(message.contains("matches the source's"), "{message}");
        let hash = pvc_status
            .keyspace_hash
            .expect("the source's HashKV is recorded");
        assert_eq!(Some(hash.revision), pvc_status.revision);
        assert_eq!(kstatus_of(&env, &s), "Current");
        let pvc_artifact = pvc_status.artifact.clone().unwrap();
        assert_eq!(pvc_artifact.uri, "pvc://backups/etcd/bk/bk-pvc.db");
        // What the status says is what the claim holds, and nothing else.
        let dirs = env.plane.kubelet().claim_dirs("default", "backups");
        assert_eq!(dirs.len(), 1, "{dirs:?}");
        let on_claim = std::fs::read(dirs[0].join("etcd/bk/bk-pvc.db")).unwrap();
        assert_eq!(on_claim.len() as i64, pvc_artifact.size_bytes);
        assert_eq!(
            pvc_artifact.checksum,
            format!("sha256:{}", hex::encode(Sha256::digest(&on_claim)))
        );
        let leftovers: Vec<_> = std::fs::read_dir(dirs[0].join("etcd/bk"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "no partial file is left: {leftovers:?}");
        let file = dir.path().join("bk-pvc.db");
        std::fs::write(&file, &on_claim).unwrap();
        assert_eq!(restore_and_read(&env, &file).await.len(), KEYS);
        // The save and verify Pods are gone once read.
        wait_no_pods(&env, &["bk-pvc-save", "bk-pvc-verify"]).await;

        // The same verification on S3, with the source's HashKV failing
        // (an injected timeout): the restore still proves the revision,
        // and the status says that only the revision was compared.
        env.faults
            .inject(Fault::fail(Rpc::HashKv, ProbeErrorKind::Timeout).times(1));
        create_verified_s3_snapshot(&env, "bk-s3-restored", "bk", &s3.endpoint()).await;
        let s = wait_terminal(&env, "bk-s3-restored").await;
        let (verified, how, message) = snap_condition(&s, "Verified").unwrap();
        assert_eq!(
            (phase(&s).as_deref(), verified.as_str(), how.as_str()),
            (Some("Complete"), "True", "Restored"),
            "{message}"
        );
        assert!(
            message.contains("only the revision was compared"),
            "{message}"
        );
        assert!(s.status.as_ref().unwrap().keyspace_hash.is_none());

        // A new cluster restored from the snapshot on the claim: the seed's
        // Pod copies it from the claim (read-only) and checks its sha256.
        restore_cluster(
            &env,
            "from-pvc",
            serde_json::json!({"snapshotRef": {"name": "bk-pvc"}}),
        )
        .await;
        env.wait_available("from-pvc", 3).await;
        let from_pvc = env.endpoints("from-pvc").await;
        let keys = env
            .etcdctl(&from_pvc, &["get", "/app/", "--prefix", "--keys-only"])
            .await;
        assert_eq!(
            keys.lines().filter(|l| !l.is_empty()).count(),
            KEYS,
            "{keys}"
        );
        env.clusters()
            .delete("from-pvc", &Default::default())
            .await
            .unwrap();

        // A full PVC: a claim with a real capacity, smaller than the
        // snapshot. The snapshot fails with VolumeFull at once (a full
        // volume is not retried), an Event says so, and no partial file is
        // left behind.
        let tiny = (pvc_artifact.size_bytes / 2).max(4096);
        create_claim(
            &env,
            "tiny",
            &tiny.to_string(),
            Some(steward_testbed::kubelet::provisioner::CAPPED_STORAGE_CLASS),
        )
        .await;
        create_pvc_snapshot(&env, "bk-full", "bk", "tiny", false).await;
        let s = wait_terminal(&env, "bk-full").await;
        assert_eq!(
            phase(&s).as_deref(),
            Some("Failed"),
            "not retried: {:#?}",
            s.status
        );
        let (ready, why, message) = snap_condition(&s, "Ready").unwrap();
        assert_eq!(
            (ready.as_str(), why.as_str()),
            ("False", "VolumeFull"),
            "{message}"
        );
        assert!(message.contains("No space left on device"), "{message}");
        assert_eq!(snap_condition(&s, "Stalled").unwrap().0, "True");
        assert_eq!(snap_condition(&s, "Verified").unwrap().0, "False");
        assert!(s.status.as_ref().unwrap().artifact.is_none());
        let events = snapshot_events(&env, "bk-full").await;
        assert!(
            events
                .iter()
                .any(|(t, r, _)| t == "Warning" && r == "VolumeFull"),
            "{events:?}"
        );
        wait_no_pods(&env, &["bk-full-save"]).await;
        let dirs = env.plane.kubelet().claim_dirs("default", "tiny");
        assert!(!dirs.is_empty(), "the claim was provisioned");
        for dir in dirs {
            let files = walkdir(&dir);
            assert!(files.is_empty(), "a failed save leaves nothing: {files:?}");
        }

        // A schedule to the claim: retention's remove Pods delete the
        // expired runs' files, and never a file the run did not write: a
        // file of the test's own beside them, nor a run's file whose bytes
        // were replaced.
        let claim_dir = env.plane.kubelet().claim_dirs("default", "backups")[0].clone();
        std::fs::create_dir_all(claim_dir.join("sched")).unwrap();
        std::fs::write(claim_dir.join("sched/not-ours.db"), b"left alone").unwrap();
        let schedules: Api<EtcdBackupSchedule> = Api::namespaced(env.client.clone(), NS);
        let schedule: EtcdBackupSchedule = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdBackupSchedule",
            "metadata": {"name": "toclaim"},
            "spec": {
                "clusterRef": {"name": "bk"},
                "schedule": "*/5 * * * * *",
                "destination": {"pvc": {"claimName": "backups", "subPath": "sched"}},
                "retention": {"keepLast": 2},
            },
        }))
        .unwrap();
        schedules
            .create(&PostParams::default(), &schedule)
            .await
            .unwrap();
        let claim_runs = |env: &Env| {
            let api = snapshots(env);
            async move {
                let mut v: Vec<EtcdSnapshot> = api
                    .list(
                        &kube::api::ListParams::default()
                            .labels("etcd.steward.dev/schedule=toclaim"),
                    )
                    .await
                    .unwrap()
                    .items;
                v.sort_by_key(|s| s.metadata.name.clone());
                v
            }
        };
        let patch_schedule = |spec: serde_json::Value| {
            let schedules = schedules.clone();
            async move {
                schedules
                    .patch(
                        "toclaim",
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(serde_json::json!({"spec": spec})),
                    )
                    .await
                    .unwrap();
            }
        };
        // One run taken; then suspended, and the run in progress let end,
        // so nothing is expired while one run's file is replaced.
        let start = std::time::Instant::now();
        while !claim_runs(&env)
            .await
            .iter()
            .any(|r| phase(r).as_deref() == Some("Complete"))
        {
            assert!(
                start.elapsed() < EVENTUALLY,
                "no run to the claim completed"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        patch_schedule(serde_json::json!({"suspend": true})).await;
        let start = std::time::Instant::now();
        while claim_runs(&env)
            .await
            .iter()
            .any(|r| !matches!(phase(r).as_deref(), Some("Complete" | "Failed")))
        {
            assert!(
                start.elapsed() < EVENTUALLY,
                "a suspended schedule's run never ended"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let replaced = claim_runs(&env)
            .await
            .into_iter()
            .find(|r| phase(r).as_deref() == Some("Complete"))
            .unwrap()
            .name_any();
        let replaced_file = claim_dir.join(format!("sched/{replaced}.db"));
        assert!(replaced_file.exists(), "{replaced_file:?}");
        std::fs::write(&replaced_file, b"someone else's bytes").unwrap();
        patch_schedule(serde_json::json!({"suspend": false, "retention": {"keepLast": 1}})).await;
        let start = std::time::Instant::now();
        let mut completed = std::collections::BTreeSet::new();
        let (kept, files) = loop {
            let runs = claim_runs(&env).await;
            let complete: Vec<String> = runs
                .iter()
                .filter(|r| phase(r).as_deref() == Some("Complete"))
                .map(|r| r.name_any())
                .collect();
            completed.extend(complete.iter().cloned());
            let mut files: Vec<String> = std::fs::read_dir(claim_dir.join("sched"))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            files.sort();
            let expired: Vec<&String> =
                completed.iter().filter(|n| !complete.contains(n)).collect();
            let expired_gone = expired
                .iter()
                .filter(|n| **n != &replaced)
                .all(|n| !files.contains(&format!("{n}.db")));
            if completed.len() >= 4
                && complete.len() == 1
                && expired.contains(&&replaced)
                && expired_gone
            {
                break (complete, files);
            }
            assert!(
                start.elapsed() < EVENTUALLY,
                "retention on the claim: completed {completed:?}, complete now {complete:?}, files {files:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        };
        assert!(files.contains(&format!("{}.db", kept[0])), "{files:?}");
        assert_eq!(
            std::fs::read(claim_dir.join("sched/not-ours.db")).unwrap(),
            b"left alone"
        );
        assert_eq!(
            std::fs::read(&replaced_file).unwrap(),
            b"someone else's bytes",
            "a file the run did not write is left alone"
        );
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(env.client.clone(), NS);
        let left_alone = events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .any(|e| {
                e.regarding
                    .as_ref()
                    .is_some_and(|r| r.name.as_deref() == Some("toclaim"))
                    && e.reason.as_deref() == Some("ObjectExists")
                    && e.note.as_deref().is_some_and(|n| n.contains(&replaced))
            });
        assert!(
            left_alone,
            "a Warning Event names the run whose file was left alone"
        );
        schedules
            .delete("toclaim", &Default::default())
            .await
            .unwrap();

        // 2. Bad input, all at once: each gets its reason, an Event, and
        // Failed once the attempts are spent; nothing is overwritten.
        s3.put(
            BUCKET,
            "prod/bk/taken.db",
            b"somebody else's backup".to_vec(),
        )
        .await
        .unwrap();
        let cases: [(&str, serde_json::Value, &str); 6] = [
            (
                "wrong-creds",
                serde_json::json!({"endpoint": s3.endpoint(), "credentialsSecretRef": {"name": "wrong-creds"}}),
                "AccessDenied",
            ),
            (
                "no-bucket",
                serde_json::json!({"endpoint": s3.endpoint(), "bucket": "no-such-bucket"}),
                "BucketNotFound",
            ),
            (
                "unreachable",
                serde_json::json!({"endpoint": "http://127.0.0.1:9"}),
                "EndpointUnreachable",
            ),
            (
                "no-secret",
                serde_json::json!({"endpoint": s3.endpoint(), "credentialsSecretRef": {"name": "absent"}}),
                "CredentialsNotFound",
            ),
            (
                "no-keys",
                serde_json::json!({"endpoint": s3.endpoint(), "credentialsSecretRef": {"name": "no-keys"}}),
                "CredentialsInvalid",
            ),
            (
                "taken",
                serde_json::json!({"endpoint": s3.endpoint(), "key": "prod/bk"}),
                "ObjectExists",
            ),
        ];
        for (name, s3_spec, _) in &cases {
            create_snapshot(&env, name, "bk", s3_spec.clone()).await;
        }
        create_snapshot(
            &env,
            "no-cluster",
            "absent",
            serde_json::json!({"endpoint": s3.endpoint()}),
        )
        .await;
        for (name, _, want) in cases.iter().map(|(n, s, w)| (*n, s, *w)).chain([(
            "no-cluster",
            &serde_json::Value::Null,
            "ClusterNotFound",
        )]) {
            let s = wait_terminal(&env, name).await;
            assert_eq!(
                phase(&s).as_deref(),
                Some("Failed"),
                "{name}: {:#?}",
                s.status
            );
            let (ready, reason, message) = snap_condition(&s, "Ready").unwrap();
            assert_eq!(
                (ready.as_str(), reason.as_str()),
                ("False", want),
                "{name}: {message}"
            );
            let (stalled, _, _) = snap_condition(&s, "Stalled").unwrap();
            assert_eq!(stalled, "True", "{name}");
            assert_eq!(snap_condition(&s, "Verified").unwrap().0, "False", "{name}");
            assert!(s.status.as_ref().unwrap().artifact.is_none(), "{name}");
            assert_eq!(kstatus_of(&env, &s), "Failed", "{name}");
            assert_eq!(argo_of(&env, &s), "Degraded", "{name}");
            let events = snapshot_events(&env, name).await;
            assert!(
                events.iter().any(|(t, r, _)| t == "Warning" && r == want),
                "{name}: {events:?}"
            );
            eprintln!("{name}: {reason}: {message}");
        }
        assert_eq!(
            s3.get(BUCKET, "prod/bk/taken.db").await.unwrap(),
            b"somebody else's backup",
            "an object the snapshot did not write is left as it was"
        );
        let listed = s3.list(BUCKET, "prod/").await.unwrap();
        assert_eq!(
            listed.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["prod/bk/bk-1.db", "prod/bk/taken.db"],
            "no failed attempt left an object behind"
        );

        // 3. A store behind a private CA: refused until the CA is given.
        let tls = S3Server::start_tls()
            .await
            .expect("the TLS S3 gateway starts");
        tls.create_bucket(BUCKET).await.unwrap();
        create_secret(
            &env,
            "tls-creds",
            &[
                ("AWS_ACCESS_KEY_ID", &tls.access_key_id),
                ("AWS_SECRET_ACCESS_KEY", &tls.secret_access_key),
            ],
        )
        .await;
        let tls_spec = |ca: Option<&str>| {
            let mut v = serde_json::json!({"endpoint": tls.endpoint(), "credentialsSecretRef": {"name": "tls-creds"}});
            if let Some(ca) = ca {
                v["caBundle"] = ca.into();
            }
            v
        };
        create_snapshot(&env, "untrusted", "bk", tls_spec(None)).await;
        create_snapshot(&env, "trusted", "bk", tls_spec(tls.ca_pem.as_deref())).await;
        let s = wait_terminal(&env, "untrusted").await;
        assert_eq!(
            snap_condition(&s, "Ready").unwrap().1,
            "TLSUntrusted",
            "{:#?}",
            s.status
        );
        let s = wait_terminal(&env, "trusted").await;
        assert_eq!(phase(&s).as_deref(), Some("Complete"), "{:#?}", s.status);

        // 4. A schedule every 10 s keeping the last 2: runs are taken and
        // verified, retention deletes the older ones and their objects, and
        // never an object the schedule did not write.
        s3.put(BUCKET, "sched/not-ours.db", b"left alone".to_vec())
            .await
            .unwrap();
        let schedules: Api<EtcdBackupSchedule> = Api::namespaced(env.client.clone(), NS);
        let schedule: EtcdBackupSchedule = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdBackupSchedule",
            "metadata": {"name": "every10"},
            "spec": {
                "clusterRef": {"name": "bk"},
                "schedule": "*/10 * * * * *",
                "destination": {"s3": {"endpoint": s3.endpoint(), "bucket": BUCKET, "key": "sched",
                                       "credentialsSecretRef": {"name": "s3-creds"}, "forcePathStyle": true}},
                "retention": {"keepLast": 2},
            },
        }))
        .unwrap();
        schedules
            .create(&PostParams::default(), &schedule)
            .await
            .unwrap();
        let runs = |env: &Env| {
            let api = snapshots(env);
            async move {
                let mut v: Vec<EtcdSnapshot> = api
                    .list(
                        &kube::api::ListParams::default()
                            .labels("etcd.steward.dev/schedule=every10"),
                    )
                    .await
                    .unwrap()
                    .items;
                v.sort_by_key(|s| s.metadata.name.clone());
                v
            }
        };
        let start = std::time::Instant::now();
        let mut completed_names = std::collections::BTreeSet::new();
        loop {
            for r in runs(&env).await {
                if phase(&r).as_deref() == Some("Complete") {
                    completed_names.insert(r.metadata.name.clone().unwrap());
                }
            }
            let sched = schedules.get("every10").await.unwrap();
            let st = sched.status.clone().unwrap_or_default();
            if completed_names.len() >= 3
                && st.kept == 2
                && runs(&env)
                    .await
                    .iter()
                    .filter(|r| phase(r).as_deref() == Some("Complete"))
                    .count()
                    == 2
            {
                break;
            }
            assert!(
                start.elapsed() < EVENTUALLY,
                "the schedule never ran three times with two kept: {st:#?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let kept: Vec<EtcdSnapshot> = runs(&env)
            .await
            .into_iter()
            .filter(|r| phase(r).as_deref() == Some("Complete"))
            .collect();
        for r in &kept {
            assert_eq!(snap_condition(r, "Verified").unwrap().0, "True");
        }
        // The bucket holds exactly the kept runs' objects, and the foreign one.
        let start = std::time::Instant::now();
        loop {
            let keys: Vec<String> = s3
                .list(BUCKET, "sched/")
                .await
                .unwrap()
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            let mut want: Vec<String> = kept
                .iter()
                .map(|r| format!("sched/{}.db", r.metadata.name.clone().unwrap()))
                .collect();
            want.push("sched/not-ours.db".into());
            want.sort();
            // A newer run may have started meanwhile: compare the older ones.
            if want.iter().all(|k| keys.contains(k)) && keys.len() <= want.len() + 1 {
                break;
            }
            assert!(
                start.elapsed() < EVENTUALLY,
                "retention left {keys:?}, want {want:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        assert_eq!(
            s3.get(BUCKET, "sched/not-ours.db").await.unwrap(),
            b"left alone"
        );
        // Each run retention dropped lost its object, not only its
        // EtcdSnapshot.
        let kept_names: Vec<String> = kept.iter().map(|r| r.name_any()).collect();
        let expired: Vec<&String> = completed_names
            .iter()
            .filter(|n| !kept_names.contains(n))
            .collect();
        assert!(!expired.is_empty());
        let start = std::time::Instant::now();
        loop {
            let keys: Vec<String> = s3
                .list(BUCKET, "sched/")
                .await
                .unwrap()
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            if expired
                .iter()
                .all(|n| !keys.contains(&format!("sched/{n}.db")))
            {
                break;
            }
            assert!(
                start.elapsed() < EVENTUALLY,
                "expired runs' objects remain: {keys:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let st = schedules.get("every10").await.unwrap().status.unwrap();
        assert!(
            st.last_successful_backup_time.is_some() && st.next_schedule_time.is_some(),
            "{st:#?}"
        );
        let ready = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "LastRunComplete"),
            "{st:#?}"
        );

        // The backup alert, by the real promtool on the series the operator
        // exports now: silent while runs complete; firing once the last
        // success is older than two intervals (the same series, with the
        // last success moved back to the start of the test's clock).
        {
            use std::collections::BTreeMap;
            use support::alerts::{ALERTS, Case, Firing, test_rules, value};
            let now = env.metrics_text();
            let bk = format!(r#"{{namespace="{NS}",name="bk"}}"#);
            let last = format!("etcd_steward_cluster_snapshot_last_success_timestamp_seconds{bk}");
            assert!(value(&now, &last).is_some(), "{now}");
            assert_eq!(
                value(
                    &now,
                    &format!(
                        r#"etcd_steward_backup_schedule_interval_seconds{{namespace="{NS}",name="bk",schedule="every10"}}"#
                    )
                ),
                Some(10.0),
                "{now}"
            );
            let overdue: String = now
                .lines()
                .map(|l| {
                    if l.starts_with(&last) {
                        format!("{last} 0")
                    } else {
                        l.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n");
            let others: Vec<&'static str> = ALERTS
                .iter()
                .copied()
                .filter(|a| *a != "EtcdClusterBackupOverdue")
                .collect();
            let out = test_rules(
                env.dir(),
                &[
                    Case { name: "backups complete", exposition: &now, firing: vec![], unasserted: others.clone() },
                    Case {
                        name: "no verified backup for 30 minutes, every 10 s",
                        exposition: &overdue,
                        firing: vec![Firing {
                            alert: "EtcdClusterBackupOverdue",
                            labels: BTreeMap::from([
                                ("namespace", NS.to_owned()),
                                ("name", "bk".to_owned()),
                                ("severity", "warning".to_owned()),
                            ]),
                            annotations: BTreeMap::from([
                                ("summary", format!("EtcdCluster {NS}/bk has no verified backup for 30m 0s")),
                                ("description", "More than two intervals of its EtcdBackupSchedule passed since its last snapshot was uploaded and read back. The schedule's status and its failed EtcdSnapshots say why.".to_owned()),
                                ("runbook", "docs/alerts.md#etcdclusterbackupoverdue".to_owned()),
                            ]),
                        }],
                        unasserted: others,
                    },
                ],
            );
            assert!(out.contains("SUCCESS"), "{out}");
        }

        // Missed runs: with the operator down for three slots, it takes one
        // snapshot on return (for the latest slot), not one per slot. It is
        // stopped between runs, with the next slot seconds away: a run cut
        // off mid-stream would hold the catch-up back (one run at a time).
        // Stopped just after the run of the current slot finished, with
        // the next slot seconds away (read from the clock, not from a
        // status that may trail a run just created).
        let start = std::time::Instant::now();
        loop {
            let now = jiff::Timestamp::now().as_millisecond();
            let slot = now / 10_000 * 10_000;
            let all = runs(&env).await;
            let current_done = all.iter().any(|r| {
                r.annotations()
                    .get("etcd.steward.dev/scheduled-time")
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .is_some_and(|t| t.as_millisecond() == slot)
                    && matches!(phase(r).as_deref(), Some("Complete"))
            });
            let idle = all
                .iter()
                .all(|r| matches!(phase(r).as_deref(), Some("Complete" | "Failed")));
            let into = jiff::Timestamp::now().as_millisecond() - slot;
            if current_done && idle && into < 6_000 {
                break;
            }
            assert!(start.elapsed() < EVENTUALLY, "the schedule never went idle");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        env.kill_operator().await;
        let down_at = jiff::Timestamp::now();
        tokio::time::sleep(std::time::Duration::from_secs(32)).await;
        // Back one second into a slot, so its first reconcile (seconds
        // later) falls before the next one: the catch-up run's slot is the
        // one just before the return.
        while jiff::Timestamp::now().as_millisecond() % 10_000 > 1_500 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        env.start_operator();
        let up_at = jiff::Timestamp::now();
        let latest_missed = jiff::Timestamp::from_second(up_at.as_second() / 10 * 10).unwrap();
        let slot_of = |r: &EtcdSnapshot| -> jiff::Timestamp {
            r.annotations()["etcd.steward.dev/scheduled-time"]
                .parse()
                .unwrap()
        };
        let start = std::time::Instant::now();
        let after = loop {
            let after: Vec<EtcdSnapshot> = runs(&env)
                .await
                .into_iter()
                .filter(|r| slot_of(r) > down_at)
                .collect();
            if !after.is_empty() {
                break after;
            }
            assert!(
                start.elapsed() < EVENTUALLY,
                "no run after the operator came back"
            );
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        };
        // Three slots passed while it was down. However long the operator
        // takes to start again, its first reconcile takes one run, for the
        // latest slot at that moment (schedule::plan's unit tests pin the
        // slot), never one per missed slot: no burst of runs for the slots
        // of the downtime.
        assert!(up_at.as_second() - down_at.as_second() >= 30);
        let during: Vec<String> = after
            .iter()
            .filter(|r| slot_of(r) <= up_at)
            .map(|r| r.name_any())
            .collect();
        assert!(
            during.len() <= 1,
            "one run per missed slot ({latest_missed} the latest; down {down_at}, up {up_at}): {during:?}"
        );
        // The first run is for a slot no older than the latest one at the
        // moment the operator came back: it cannot have decided earlier,
        // so an older slot would be a replay of the downtime.
        let first = after.iter().min_by_key(|r| slot_of(r)).unwrap();
        assert!(
            slot_of(first) >= latest_missed,
            "the first run after the return replays a slot of the downtime: {} for {} (up at {up_at})",
            first.name_any(),
            slot_of(first)
        );
        // Suspended: no next run, and the schedule takes none.
        schedules
            .patch(
                "every10",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"spec": {"suspend": true}})),
            )
            .await
            .unwrap();
        let start = std::time::Instant::now();
        loop {
            let st = schedules.get("every10").await.unwrap().status.unwrap();
            if st.next_schedule_time.is_none() && st.active.is_none() {
                break;
            }
            assert!(
                start.elapsed() < EVENTUALLY,
                "suspend never showed: {st:#?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
        let count = runs(&env).await.len();
        // Longer than one period: an unsuspended schedule would have run.
        tokio::time::sleep(std::time::Duration::from_secs(12)).await;
        assert_eq!(
            runs(&env).await.len(),
            count,
            "a suspended schedule took a snapshot"
        );

        // The status policy sees the backups (steward:status@0.3.0): a
        // schedule every 5 s whose runs all fail (wrong credentials), with
        // the last verified snapshot older than two of its intervals, makes
        // the cluster Degraded with BackupOverdue, and still Available.
        let overdue: EtcdBackupSchedule = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdBackupSchedule",
            "metadata": {"name": "overdue"},
            "spec": {
                "clusterRef": {"name": "bk"},
                "schedule": "*/5 * * * * *",
                "destination": {"s3": {"endpoint": s3.endpoint(), "bucket": BUCKET, "key": "overdue",
                                       "credentialsSecretRef": {"name": "wrong-creds"}, "forcePathStyle": true}},
                "failedHistoryLimit": 1,
            },
        }))
        .unwrap();
        schedules
            .create(&PostParams::default(), &overdue)
            .await
            .unwrap();
        let c = env
            .wait_for("bk", "Degraded with BackupOverdue", |c| {
                condition_reason(c, "Degraded") == Some("BackupOverdue")
            })
            .await;
        assert_eq!(condition(&c, "Degraded"), Some("True"));
        assert_eq!(condition(&c, "Available"), Some("True"));
        let message = condition_message(&c, "Degraded").unwrap();
        assert!(
            message.contains("schedule overdue runs every 5s"),
            "{message}"
        );
        // No active schedule: nothing is expected, nothing is overdue.
        schedules
            .delete("overdue", &Default::default())
            .await
            .unwrap();
        env.wait_for("bk", "Degraded False once no schedule is active", |c| {
            condition(c, "Degraded") == Some("False")
        })
        .await;

        // 5. No credential reached a log line, an Event, a status or a metric.
        let mut seen = vec![("logs", logs.text()), ("metrics", env.metrics_text())];
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(env.client.clone());
        seen.push((
            "events",
            serde_json::to_string(&events.list(&Default::default()).await.unwrap().items).unwrap(),
        ));
        seen.push((
            "snapshots",
            serde_json::to_string(
                &snapshots(&env)
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items,
            )
            .unwrap(),
        ));
        let schedules_json = serde_json::to_string(
            &Api::<EtcdBackupSchedule>::namespaced(env.client.clone(), NS)
                .list(&Default::default())
                .await
                .unwrap()
                .items,
        )
        .unwrap();
        seen.push(("schedules", schedules_json));
        seen.push((
            "members",
            serde_json::to_string(&env.members().list(&Default::default()).await.unwrap().items)
                .unwrap(),
        ));
        seen.push((
            "pods",
            serde_json::to_string(
                &Api::<k8s_openapi::api::core::v1::Pod>::namespaced(env.client.clone(), NS)
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items,
            )
            .unwrap(),
        ));
        seen.push((
            "clusters",
            serde_json::to_string(
                &env.clusters()
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items,
            )
            .unwrap(),
        ));
        assert!(
            seen[0].1.contains("EtcdSnapshot") || seen[0].1.contains("snapshot"),
            "the logs were captured"
        );
        for secret in [
            &s3.access_key_id,
            &s3.secret_access_key,
            &wrong_secret,
            &tls.secret_access_key,
        ] {
            for (what, text) in &seen {
                assert!(
                    !text.contains(secret.as_str()),
                    "a credential appears in the {what}"
                );
            }
        }

        // 6. No snapshot without a quorum the host verified: with two of
        // three members gone and the operator stopped, a reconcile reports
        // QuorumUnverified and never opens a snapshot stream.
        env.kill_operator().await;
        for m in &names[1..] {
            env.plane.kubelet().kill(NS, m).await.unwrap();
        }
        create_snapshot(
            &env,
            "no-quorum",
            "bk",
            serde_json::json!({"endpoint": s3.endpoint(), "key": "q"}),
        )
        .await;
        let op = etcd_steward::cli::run::Operator::new(run_args());
        let ctx = op.context(env.operator_client.clone()).await.unwrap();
        let snap = snapshots(&env).get("no-quorum").await.unwrap();
        etcd_steward::snapshot::reconcile_snapshot(Arc::new(snap), ctx)
            .await
            .unwrap();
        let s = snapshots(&env).get("no-quorum").await.unwrap();
        let (ready, reason, message) = snap_condition(&s, "Ready").unwrap();
        assert_eq!(
            (ready.as_str(), reason.as_str()),
            ("False", "QuorumUnverified"),
            "{message}"
        );
        assert_eq!(
            phase(&s).as_deref(),
            Some("Pending"),
            "a retry follows: {:#?}",
            s.status
        );
        assert_eq!(
            op.faults.calls(Rpc::Snapshot),
            0,
            "no stream is opened without quorum"
        );
        assert!(s3.list(BUCKET, "q/").await.unwrap().is_empty());
        env.shutdown().await;
    });
}

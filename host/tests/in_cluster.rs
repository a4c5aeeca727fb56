//! The operator installed in-cluster, exactly as the README says: `kubectl
//! apply -f crds/` and `kubectl apply -f deploy/`, or `helm install`. The
//! kubelet runs the Deployment's Pods (image `etcd-steward`) as this build's
//! binary, with a projected ServiceAccount token at the standard path, so
//! the operator runs under deploy/'s least-privilege RBAC for real. In each,
//! a cluster reaches Available through the installed operator, and a
//! rollout hands leadership to a new Pod, which then reconciles.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use support::*;

/// The names of the operator's live (not terminating) Pods.
async fn operator_pods(env: &Env) -> BTreeSet<String> {
    Api::<Pod>::namespaced(env.client.clone(), OPERATOR_NS)
        .list(&ListParams::default().labels("app.kubernetes.io/name=etcd-steward"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect()
}

/// The Pod whose replica holds the leader Lease (identity `<pod>_<suffix>`).
async fn leader_pod(env: &Env) -> Option<String> {
    let lease = Api::<Lease>::namespaced(env.client.clone(), OPERATOR_NS)
        .get_opt("etcd-steward")
        .await
        .unwrap()?;
    let holder = lease.spec?.holder_identity?;
    holder.rsplit_once('_').map(|(pod, _)| pod.to_owned())
}

async fn rollout_status(env: &Env, deployment: &str) {
    let deployment = format!("deployment/{deployment}");
    let args = [
        "rollout",
        "status",
        &deployment,
        "-n",
        OPERATOR_NS,
        "--timeout=300s",
    ];
    let out = kubectl_output(&env.plane, &args).await;
    if out.status.success() {
        return;
    }
    // What a user would look at next: the Pods, their events, their logs.
    let pods = kubectl(&env.plane, &["describe", "pods", "-n", OPERATOR_NS]).await;
    panic!(
        "kubectl rollout status: {}\n{pods}\n{}",
        String::from_utf8_lossy(&out.stderr),
        operator_logs(env)
    );
}

/// The last lines of every operator container's log.
fn operator_logs(env: &Env) -> String {
    logs_under(env.plane.kubelet().root())
}

fn logs_under(root: &std::path::Path) -> String {
    let mut logs = String::new();
    for entry in walk(&root.join("pods")) {
        if entry.extension().is_some_and(|e| e == "log")
            && entry.to_string_lossy().contains(OPERATOR_NS)
        {
            let text = std::fs::read_to_string(&entry).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(20)..].join("\n");
            logs += &format!("--- {}\n{tail}\n", entry.display());
        }
    }
    logs
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Available through the installed operator, then a rollout: the new Pods
/// replace the old, one of them takes the Lease and reconciles a new cluster.
async fn reconciles_and_hands_over(env: &Env, name: &str, deployment: &str) {
    rollout_status(env, deployment).await;
    env.create_cluster(name, 3).await;
    env.wait_available(name, 3).await;
    let before = operator_pods(env).await;
    let leader = leader_pod(env).await.expect("a replica leads");
    assert!(
        before.contains(&leader),
        "{leader} is not one of {before:?}"
    );

    kubectl(
        &env.plane,
        &[
            "rollout",
            "restart",
            &format!("deployment/{deployment}"),
            "-n",
            OPERATOR_NS,
        ],
    )
    .await;
    rollout_status(env, deployment).await;
    let start = Instant::now();
    loop {
        let now = operator_pods(env).await;
        let leader = leader_pod(env).await;
        if now.is_disjoint(&before) && leader.as_ref().is_some_and(|l| now.contains(l)) {
            break;
        }
        assert!(
            start.elapsed() < EVENTUALLY,
            "leadership never moved to a new Pod: pods {now:?}, leader {leader:?}, before {before:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let after = format!("{name}-after");
    env.create_cluster(&after, 1).await;
    env.wait_available(&after, 1).await;
    // The first cluster stayed whole through the handover.
    env.wait_available(name, 3).await;
}

#[test]
fn kubectl_apply_deploy_runs_the_operator_in_cluster_under_its_rbac() {
    let _g = serial();
    run(async {
        let env = Env::start_bare().await;
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        kubectl(&env.plane, &["apply", "-f", &format!("{root}/crds/")]).await;
        kubectl(&env.plane, &["apply", "-f", &format!("{root}/deploy/")]).await;
        reconciles_and_hands_over(&env, "kubectl", "etcd-steward").await;
        env.shutdown().await;
    });
}

#[test]
fn helm_install_runs_the_operator_in_cluster_under_its_rbac() {
    let _g = serial();
    run(async {
        let env = Env::start_bare().await;
        let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/helm/etcd-steward");
        helm(&env, &["lint", chart]).await;
        helm(
            &env,
            &[
                "install",
                "etcd-steward",
                chart,
                "--namespace",
                OPERATOR_NS,
                "--create-namespace",
                "--wait",
                "--timeout=300s",
            ],
        )
        .await;
        // The chart names its objects <release>-<chart>.
        reconciles_and_hands_over(&env, "helm", "etcd-steward-etcd-steward").await;
        env.shutdown().await;
    });
}

/// One in-cluster install at a time: each runs two operators and etcd.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

async fn helm(env: &Env, args: &[&str]) -> String {
    let helm = env
        .plane
        .binaries()
        .helm
        .clone()
        .expect("helm, built by scripts/ensure-kube.sh");
    let out = tokio::process::Command::new(helm)
        .args(args)
        .env("KUBECONFIG", env.plane.kubeconfig_path())
        .env("HOME", env.dir())
        .env("HELM_CACHE_HOME", env.dir().join("helm/cache"))
        .env("HELM_CONFIG_HOME", env.dir().join("helm/config"))
        .env("HELM_DATA_HOME", env.dir().join("helm/data"))
        .output()
        .await
        .expect("running helm");
    assert!(
        out.status.success(),
        "helm {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

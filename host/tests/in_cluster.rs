//! The operator installed in-cluster, exactly as the README says, from
//! its release artifacts: the image is built by `scripts/build-image.sh`
//! (`make image`) and pushed to a real registry, and the kubelet pulls it
//! and runs its entrypoint as the image's user; the chart is pushed by
//! `scripts/push-chart.sh` (`make chart`) and installed with `helm install
//! oci://…`, or `deploy/` is applied with `kubectl apply -k` through an
//! overlay that points the image at the registry. The operator runs under
//! deploy/'s least-privilege RBAC with a projected ServiceAccount token at
//! the standard path. In each, a cluster reaches Available through the
//! installed operator, and a rollout to a second image (gated by the Pods'
//! /readyz probes) hands leadership to a new Pod, which then reconciles;
//! the metrics Service lists every replica and only the leader reports
//! leading and its clusters.
//!
//! The image ships this test build's binary (`BIN=`); `make image` ships
//! the static release build (docs/benchmarks.md).

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
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

/// Every line the operator containers wrote, without the kubelet's own
/// "--- steward-testbed kubelet:" markers.
fn operator_log_lines(env: &Env) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in walk(&env.plane.kubelet().root().join("pods")) {
        if entry.extension().is_some_and(|e| e == "log")
            && entry.to_string_lossy().contains(OPERATOR_NS)
        {
            let text = std::fs::read_to_string(&entry).unwrap_or_default();
            lines.extend(
                text.lines()
                    .filter(|l| !l.starts_with("--- steward-testbed kubelet:"))
                    .map(str::to_owned),
            );
        }
    }
    lines
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

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The operator's images in the registry, as `make image` pushes them.
struct Images {
    /// `<registry>/etcd-steward`.
    repository: String,
    /// `<repository>@sha256:…` of the release tag.
    first: String,
    /// A second image (the first with one more label), tagged
    /// `<VERSION>-next`, for a rollout; and its digest reference.
    next_tag: String,
    next: String,
}

fn run_script(name: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd =
        std::process::Command::new(steward_testbed::repo::root().join("scripts").join(name));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the script runs");
    assert!(
        out.status.success(),
        "scripts/{name} {args:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Pushes `image` with the label `dev.steward.test=<label>` (so another
/// digest) as `reference`; the new image's `<repository>@sha256:…`.
fn relabel(image: &str, label: &str, reference: &str) -> String {
    let crane = std::env::var("ETCD_STEWARD_CRANE")
        .expect("ETCD_STEWARD_CRANE names crane (run the tests through `make test`)");
    let crane = |args: &[&str]| {
        let out = std::process::Command::new(&crane)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "crane {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let label = format!("dev.steward.test={label}");
    crane(&["mutate", "--insecure", image, "-l", &label, "-t", reference]);
    let digest = crane(&["digest", "--insecure", reference]);
    let repository = reference.rsplit_once(':').unwrap().0;
    format!("{repository}@{digest}")
}

fn push_images(registry: &steward_testbed::registry::Registry) -> Images {
    let repository = format!("{}/etcd-steward", registry.addr);
    let first = run_script(
        "build-image.sh",
        &[&format!("{repository}:{VERSION}")],
        &[
            ("BIN", env!("CARGO_BIN_EXE_etcd-steward")),
            ("INSECURE", "1"),
        ],
    );
    let next_tag = format!("{VERSION}-next");
    let next = relabel(&first, "next", &format!("{repository}:{next_tag}"));
    assert_ne!(next, first);
    Images {
        repository,
        first,
        next_tag,
        next,
    }
}

/// The image IDs the operator's live containers run, as the kubelet
/// reports them.
async fn operator_image_ids(env: &Env) -> BTreeSet<String> {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), OPERATOR_NS);
    pods.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .flat_map(|p| {
            p.status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
        })
        .map(|c| c.image_id.clone())
        .collect()
}

/// Available through the installed operator, running the pulled image;
/// then a rollout to the second image: the new Pods replace the old, one of
/// them takes the Lease and reconciles a new cluster.
async fn reconciles_and_hands_over(env: &Env, name: &str, deployment: &str, images: &Images) {
    rollout_status(env, deployment).await;
    assert_eq!(
        operator_image_ids(env).await,
        BTreeSet::from([images.first.clone()]),
        "the operator runs the image pulled from the registry"
    );
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
            "set",
            "image",
            &format!("deployment/{deployment}"),
            &format!("operator={}:{}", images.repository, images.next_tag),
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
    assert_eq!(
        operator_image_ids(env).await,
        BTreeSet::from([images.next.clone()]),
        "the rollout pulled and runs the second image"
    );
    let after = format!("{name}-after");
    env.create_cluster(&after, 1).await;
    env.wait_available(&after, 1).await;
    // The first cluster stayed whole through the handover.
    env.wait_available(name, 3).await;
    scrapes_every_replica_through_its_metrics_service(
        env,
        &format!("{deployment}-metrics"),
        &after,
    )
    .await;
}

/// The metrics Service selects every live replica and targets its named
/// port; every replica is Ready (the kubelet probes /readyz) and answers
/// /readyz; exactly the Lease holder reports leading and the cluster it
/// reconciles.
///
/// The Service is followed as a scraper's service discovery does: its
/// selector, then the port its targetPort names. (Its EndpointSlices are
/// filled too under `scripts/in-namespace.sh`, where Pod IPs are routable;
/// e2e.rs checks those of a cluster's Services.)
async fn scrapes_every_replica_through_its_metrics_service(
    env: &Env,
    service: &str,
    cluster: &str,
) {
    let svc = Api::<Service>::namespaced(env.client.clone(), OPERATOR_NS)
        .get(service)
        .await
        .unwrap_or_else(|e| panic!("the Service {service}: {e}"));
    let spec = svc.spec.expect("a Service spec");
    let selector = spec
        .selector
        .expect("the metrics Service selects Pods")
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let target = spec
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .and_then(|p| p.target_port.clone())
        .expect("the Service has a port named metrics");
    let IntOrString::String(target) = target else {
        panic!("the metrics port targets a named container port, got {target:?}");
    };
    let start = Instant::now();
    let pods = loop {
        let all: Vec<Pod> = Api::<Pod>::namespaced(env.client.clone(), OPERATOR_NS)
            .list(&ListParams::default().labels("app.kubernetes.io/name=etcd-steward"))
            .await
            .unwrap()
            .items;
        let selected: Vec<Pod> = Api::<Pod>::namespaced(env.client.clone(), OPERATOR_NS)
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items;
        let live = |pods: &[Pod]| -> BTreeSet<String> {
            pods.iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| p.name_any())
                .collect()
        };
        let ready = selected.iter().all(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        if !selected.is_empty()
            && live(&selected) == live(&all)
            && selected.len() == all.len()
            && ready
        {
            break selected;
        }
        assert!(
            start.elapsed() < EVENTUALLY,
            "the Service {service} (selector {selector}) never selected exactly the live, Ready \
             replicas {:?}: it selects {:?}",
            live(&all),
            live(&selected)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let leader = leader_pod(env).await.expect("a replica leads");
    for pod in &pods {
        let name = pod.name_any();
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_else(|| panic!("{name} has an IP"));
        let port = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(target.as_str()))
            .unwrap_or_else(|| panic!("{name} has a container port named {target}"))
            .container_port as u16;
        let (code, body) = http_get(&ip, port, "/readyz").await;
        assert_eq!(
            (code, body.as_str()),
            (200, "ok"),
            "/readyz of {name} at {ip}:{port}"
        );
        let (code, metrics) = http_get(&ip, port, "/metrics").await;
        assert_eq!(code, 200, "/metrics of {name}: {metrics}");
        let leads = metrics.lines().any(|l| l == "etcd_steward_leader 1");
        assert_eq!(
            leads,
            name == leader,
            "{name} (leader {leader}):\n{metrics}"
        );
        let reports_cluster = metrics.lines().any(|l| {
            l.starts_with("etcd_steward_cluster_available{")
                && l.contains(&format!("name=\"{cluster}\""))
                && l.ends_with(" 1")
        });
        assert_eq!(reports_cluster, leads, "{name}:\n{metrics}");
    }
}

/// One HTTP/1.0 GET, as a scraper or a kubelet probe would send it.
async fn http_get(ip: &str, port: u16, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect((ip, port))
        .await
        .unwrap_or_else(|e| panic!("connecting to {ip}:{port}: {e}"));
    tcp.write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut raw = String::new();
    tcp.read_to_string(&mut raw).await.unwrap();
    let code = raw
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

/// `to` relative to `from` (kustomize refuses absolute resource paths).
fn relative(from: &std::path::Path, to: &std::path::Path) -> String {
    let up = from.components().count() - 1;
    let down = to.strip_prefix("/").unwrap().display().to_string();
    format!("{}{down}", "../".repeat(up))
}

#[test]
fn kubectl_apply_deploy_runs_the_operator_in_cluster_under_its_rbac() {
    let _g = serial();
    run(async {
        let (env, registry) = Env::start_bare().await;
        let images = push_images(&registry);
        let root = steward_testbed::repo::root();
        kubectl(
            &env.plane,
            &[
                "apply",
                "--server-side",
                "-f",
                &format!("{}/crds/", root.display()),
            ],
        )
        .await;
        // The README's overlay: deploy/, with the image in the registry.
        let overlay = tempfile::tempdir().unwrap();
        let overlay_dir = overlay.path().canonicalize().unwrap();
        std::fs::write(
            overlay_dir.join("kustomization.yaml"),
            format!(
                "resources: [{}]\nimages:\n  - name: etcd-steward\n    newName: {}\n",
                relative(&overlay_dir, &root.join("deploy").canonicalize().unwrap()),
                images.repository
            ),
        )
        .unwrap();
        kubectl(&env.plane, &["apply", "-k", overlay_dir.to_str().unwrap()]).await;
        reconciles_and_hands_over(&env, "kubectl", "etcd-steward", &images).await;
        // RUST_LOG=info, and the container's stderr is a file: plain text.
        let lines = operator_log_lines(&env);
        assert!(!lines.is_empty(), "the operator logged at info");
        assert!(
            lines.iter().all(|l| !l.contains('\x1b')),
            "no colour codes in the container log: {:?}",
            lines.iter().find(|l| l.contains('\x1b'))
        );
        env.shutdown().await;
        registry.stop().await;
    });
}

#[test]
fn helm_install_runs_the_operator_in_cluster_under_its_rbac() {
    let _g = serial();
    run(async {
        let (env, registry) = Env::start_bare().await;
        let images = push_images(&registry);
        let pushed = run_script("push-chart.sh", &[&registry.addr], &[("PLAIN_HTTP", "1")]);
        assert!(
            pushed.contains(&format!("/charts/etcd-steward:{VERSION}@sha256:")),
            "{pushed}"
        );
        let chart = format!("oci://{}/charts/etcd-steward", registry.addr);
        // As the README says, with the test's own options after it.
        helm(
            &env,
            &[
                "install",
                "etcd-steward",
                &chart,
                "--version",
                VERSION,
                "--plain-http",
                "-n",
                OPERATOR_NS,
                "--create-namespace",
                "--set",
                &format!("image.repository={}", images.repository),
                "--set",
                "logFormat=json",
                "--set",
                "dashboard.enabled=true",
                "--wait",
                "--timeout=300s",
            ],
        )
        .await;
        // The chart names its objects <release>-<chart>.
        reconciles_and_hands_over(&env, "helm", "etcd-steward-etcd-steward", &images).await;
        // The CRD upgrade path the README gives (Helm never upgrades the
        // chart's crds/): server-side apply over the CRDs Helm created.
        kubectl(
            &env.plane,
            &[
                "apply",
                "--server-side",
                "-f",
                &format!(
                    "{}/crds/etcd-steward.yaml",
                    steward_testbed::repo::root().display()
                ),
            ],
        )
        .await;
        // The dashboard's ConfigMap, labelled for Grafana's sidecar.
        let dashboard = kubectl(
            &env.plane,
            &[
                "get",
                "configmap",
                "-n",
                OPERATOR_NS,
                "-l",
                "grafana_dashboard=1",
                "-o",
                "jsonpath={.items[*].data.etcd-steward\\.json}",
            ],
        )
        .await;
        let dashboard: serde_json::Value = serde_json::from_str(&dashboard)
            .unwrap_or_else(|e| panic!("the dashboard ConfigMap holds JSON ({e}): {dashboard}"));
        assert_eq!(dashboard["uid"], "etcd-steward");
        // logFormat=json: one JSON object per line, for log collectors.
        let lines = operator_log_lines(&env);
        assert!(!lines.is_empty(), "the operator logged at info");
        for line in &lines {
            let object: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
            assert!(
                object["level"].is_string() && object["timestamp"].is_string(),
                "{line}"
            );
        }
        env.shutdown().await;
        registry.stop().await;
    });
}

/// The operator's own upgrade, as a platform team runs it: `helm upgrade`
/// from the previous chart to this one while a client writes to a cluster.
/// There is no earlier release, so this tree's chart and image stand in for
/// it, packaged and tagged as 0.0.1 (the image with one more label, so
/// another digest). Leadership moves once, from the old leader to a new
/// Pod (the leader's Pod carries the highest pod-deletion-cost, so the
/// ReplicaSet removes the old standby first); the cluster, healthy
/// throughout, never shows anything but Available=True; every write that
/// was acknowledged is there afterwards, and membership is unchanged.
#[test]
fn helm_upgrade_from_the_previous_chart_moves_leadership_once_and_loses_nothing() {
    const PREVIOUS: &str = "0.0.1";
    let _g = serial();
    run(async {
        let (env, registry) = Env::start_bare().await;
        let images = push_images(&registry);
        relabel(
            &images.first,
            "previous",
            &format!("{}:{PREVIOUS}", images.repository),
        );
        run_script(
            "push-chart.sh",
            &[&registry.addr],
            &[("PLAIN_HTTP", "1"), ("CHART_VERSION", PREVIOUS)],
        );
        run_script("push-chart.sh", &[&registry.addr], &[("PLAIN_HTTP", "1")]);
        let chart = format!("oci://{}/charts/etcd-steward", registry.addr);
        let image = format!("image.repository={}", images.repository);
        let deployment = "etcd-steward-etcd-steward";
        helm(
            &env,
            &[
                "install",
                "etcd-steward",
                &chart,
                "--version",
                PREVIOUS,
                "--plain-http",
                "-n",
                OPERATOR_NS,
                "--create-namespace",
                "--set",
                &image,
                "--wait",
                "--timeout=300s",
            ],
        )
        .await;
        rollout_status(&env, deployment).await;
        env.create_cluster("upgrade", 3).await;
        env.wait_available("upgrade", 3).await;
        let before = operator_pods(&env).await;
        let first_leader = leader_pod(&env).await.expect("a replica leads");
        let lease_api = Api::<Lease>::namespaced(env.client.clone(), OPERATOR_NS);
        let transitions = |l: &Lease| {
            l.spec
                .as_ref()
                .and_then(|s| s.lease_transitions)
                .unwrap_or(0)
        };
        let transitions_before = transitions(&lease_api.get("etcd-steward").await.unwrap());
        let leader: Pod = Api::namespaced(env.client.clone(), OPERATOR_NS)
            .get(&first_leader)
            .await
            .unwrap();
        assert_eq!(
            leader
                .annotations()
                .get("controller.kubernetes.io/pod-deletion-cost")
                .map(String::as_str),
            Some("1000"),
            "the leader marks its Pod to be deleted last"
        );

        // Statuses, Lease holders and writes, recorded through the upgrade.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let statuses = tokio::spawn(env.watch("upgrade").await.record(stopped(stop_rx.clone())));
        let leases = {
            let client = env.client.clone();
            let stop = stop_rx.clone();
            tokio::spawn(async move {
                let api = Api::<Lease>::namespaced(client, OPERATOR_NS);
                let mut holders: Vec<String> = Vec::new();
                while !*stop.borrow() {
                    if let Ok(Some(l)) = api.get_opt("etcd-steward").await
                        && let Some(h) = l
                            .spec
                            .and_then(|s| s.holder_identity)
                            .filter(|h| !h.is_empty())
                        && holders.last() != Some(&h)
                    {
                        holders.push(h);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                holders
            })
        };
        let endpoints: Vec<String> = env
            .endpoints("upgrade")
            .await
            .split(',')
            .map(str::to_owned)
            .collect();
        let writer = {
            let stop = stop_rx.clone();
            let endpoints = endpoints.clone();
            tokio::spawn(async move {
                let mut client = etcd_client::Client::connect(&endpoints, None)
                    .await
                    .unwrap();
                let mut acked = Vec::new();
                let mut i = 0u32;
                while !*stop.borrow() {
                    if client
                        .put(format!("/upgrade/{i}"), format!("v{i}"), None)
                        .await
                        .is_ok()
                    {
                        acked.push(i);
                    }
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                acked
            })
        };

        helm(
            &env,
            &[
                "upgrade",
                "etcd-steward",
                &chart,
                "--version",
                VERSION,
                "--plain-http",
                "-n",
                OPERATOR_NS,
                "--set",
                &image,
                "--wait",
                "--timeout=300s",
            ],
        )
        .await;
        rollout_status(&env, deployment).await;
        let start = Instant::now();
        let new_leader = loop {
            let now = operator_pods(&env).await;
            if let Some(l) = leader_pod(&env)
                .await
                .filter(|l| now.contains(l) && !before.contains(l))
            {
                break l;
            }
            assert!(start.elapsed() < EVENTUALLY, "no new Pod leads: {now:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(
            operator_image_ids(&env).await,
            BTreeSet::from([images.first.clone()]),
            "the new release's image runs"
        );
        // The new leader reconciles: a status verified after it took over.
        let lease = lease_api.get("etcd-steward").await.unwrap();
        let acquired = lease
            .spec
            .as_ref()
            .and_then(|s| s.acquire_time.clone())
            .expect("the Lease's acquireTime")
            .0;
        env.wait_for("upgrade", "a status verified by the new leader", |c| {
            c.status
                .as_ref()
                .and_then(|s| s.last_verified_time.as_ref())
                .is_some_and(|t| t.0 > acquired)
                && condition(c, "Available") == Some("True")
        })
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        stop_tx.send(true).unwrap();
        let statuses = statuses.await.unwrap();
        let holders = leases.await.unwrap();
        let acked = writer.await.unwrap();

        let pods_of: Vec<&str> = holders
            .iter()
            .map(|h| h.rsplit_once('_').map_or(h.as_str(), |(p, _)| p))
            .collect();
        assert_eq!(
            pods_of,
            [first_leader.as_str(), new_leader.as_str()],
            "leadership moved once, from the old leader to a new Pod"
        );
        // The Lease counts every change of holder, polled or not.
        assert_eq!(
            transitions(&lease) - transitions_before,
            1,
            "the Lease changed holders once"
        );
        assert!(!statuses.is_empty());
        for c in &statuses {
            assert_eq!(
                condition(c, "Available"),
                Some("True"),
                "a healthy cluster showed {:?}",
                c.status
            );
        }
        assert!(
            acked.len() > 20,
            "the writer kept writing: {} acks",
            acked.len()
        );
        let mut client = etcd_client::Client::connect(&endpoints, None)
            .await
            .unwrap();
        for i in &acked {
            let got = client.get(format!("/upgrade/{i}"), None).await.unwrap();
            assert_eq!(
                got.kvs().first().map(|kv| kv.value().to_vec()),
                Some(format!("v{i}").into_bytes()),
                "acknowledged write {i} is there"
            );
        }
        let list = env.etcdctl(&endpoints.join(","), &["member", "list"]).await;
        assert_eq!(
            list.lines().filter(|l| l.contains("started")).count(),
            3,
            "{list}"
        );
        env.shutdown().await;
        registry.stop().await;
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

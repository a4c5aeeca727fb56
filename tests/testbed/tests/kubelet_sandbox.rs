//! `etcd-steward sandbox --control-plane-only`: runs until SIGTERM, then
//! stops every etcd it started and every control-plane process. Its own test binary, because the test sends
//! SIGTERM to its own process (caught by the control plane's handler).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, PostParams};
use serde_json::json;
use steward_testbed::kubelet::fixtures::StaticCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_runs_until_sigterm_and_leaves_no_etcd_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let run = tokio::spawn(async move { steward_testbed::run_control_plane_only(&path).await });

    let kubeconfig = dir.path().join("kubeconfig");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    let client = loop {
        assert!(
            !run.is_finished(),
            "the control plane stopped early: {:?}",
            run.await
        );
        if let Ok(kc) = kube::config::Kubeconfig::read_from(&kubeconfig)
            && let Ok(cfg) = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await
            && let Ok(client) = kube::Client::try_from(cfg)
            && Api::<Node>::all(client.clone())
                .get_opt("local")
                .await
                .is_ok_and(|n| n.is_some())
        {
            break client;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no usable {}",
            kubeconfig.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let c = StaticCluster::new("sandbox", "solo", 1);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": c.namespace}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let pp = PostParams::default();
    Api::<Service>::namespaced(client.clone(), &c.namespace)
        .create(&pp, &c.service())
        .await
        .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), &c.namespace)
        .create(&pp, &c.claim_object(0))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &c.namespace);
    pods.create(&pp, &c.pod(0, "new")).await.unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let pid: i32 = loop {
        let p = pods.get(&c.member(0)).await.unwrap();
        let cs = serde_json::to_value(p.status.and_then(|s| s.container_statuses)).unwrap();
        let running = cs[0]["state"]["running"].is_object() && cs[0]["ready"] == true;
        if let (true, Some(id)) = (running, cs[0]["containerID"].as_str()) {
            break id.trim_start_matches("local://").parse().unwrap();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Pod never ran: {cs}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());

    // The printed usage works: kubectl sees the Pod the kubelet runs.
    let out = tokio::process::Command::new("kubectl")
        .args(["get", "pods", "-A", "--no-headers"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .await
        .expect("running kubectl (it must be installed)");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.contains("solo-0"))
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        row.get(..4),
        Some(&["sandbox", "solo-0", "1/1", "Running"][..]),
        "{table}"
    );

    nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGTERM).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("still running after SIGTERM");
    result.unwrap().expect("run_control_plane_only failed");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|s| s.split_whitespace().next());
    assert!(
        stat.is_empty() || state == Some("Z"),
        "etcd {pid} outlived the control plane: {stat}"
    );
    // Every component names a file under the directory on its command line.
    let dir = std::fs::canonicalize(dir.path()).unwrap();
    let needle = dir.as_os_str().as_encoded_bytes();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        assert!(
            !cmdline.windows(needle.len()).any(|w| w == needle),
            "a process outlived the control plane: {}",
            String::from_utf8_lossy(&cmdline).replace('\0', " ")
        );
    }
}

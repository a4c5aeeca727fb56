//! The test control plane itself: the real components start and report
//! ready, the local kubelet is a Ready Node with a live Lease, the local
//! provisioner's StorageClass is the default, RBAC is enforced, and nothing
//! outlives shutdown.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams};
use steward_testbed::ControlPlane;

fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|s| s.split_whitespace().next());
    !stat.is_empty() && state != Some("Z")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_components_start_register_a_node_enforce_rbac_and_stop() {
    let dir = tempfile::tempdir().unwrap();
    let plane = ControlPlane::start(dir.path())
        .await
        .unwrap_or_else(|e| panic!("the control plane did not start: {e:#}"));
    let client = plane.client();
    // A figure for docs/benchmarks.md (`-- --nocapture`), not a check.
    println!(
        "control plane startup: {:.1} s",
        plane.startup().as_secs_f64()
    );

    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "37"),
        "{version:?}"
    );

    let node = Api::<Node>::all(client.clone()).get("local").await.unwrap();
    let ready = node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status);
    assert_eq!(ready.as_deref(), Some("True"));
    let lease = Api::<Lease>::namespaced(client.clone(), "kube-node-lease")
        .get("local")
        .await
        .unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("local")
    );

    let classes = Api::<StorageClass>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let default: Vec<_> = classes
        .items
        .iter()
        .filter(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("storageclass.kubernetes.io/is-default-class"))
                .map(String::as_str)
                == Some("true")
        })
        .map(|c| {
            (
                c.metadata.name.clone().unwrap(),
                c.volume_binding_mode.clone(),
            )
        })
        .collect();
    assert_eq!(
        default,
        [(
            "standard".to_string(),
            Some("WaitForFirstConsumer".to_string())
        )]
    );

    // RBAC is real: an authenticated user with no bindings is refused, and
    // the apiserver's message names the user and the verb.
    let nobody = plane.client_as("nobody", &[]).await.unwrap();
    match Api::<Secret>::namespaced(nobody, "default")
        .list(&ListParams::default())
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(
                s.message
                    .contains(r#"User "nobody" cannot list resource "secrets""#),
                "{}",
                s.message
            );
        }
        other => panic!("nobody listed secrets: {other:?}"),
    }

    let pids = plane.component_pids();
    let names: Vec<&str> = pids.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler"
        ]
    );
    plane.shutdown().await;
    for (name, pid) in pids {
        assert!(!alive(pid), "{name} ({pid}) outlived the control plane");
    }
}

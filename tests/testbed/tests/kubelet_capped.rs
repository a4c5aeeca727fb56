//! The `capped` StorageClass: a claim's volume holds what it requests and
//! no more (a tmpfs of that size), so a container writing beyond it gets
//! ENOSPC as on a full disk; growing the claim remounts it larger, and
//! deleting it unmounts and removes it.
//! Run under scripts/in-namespace.sh (scripts/test.sh does).

mod common;

use std::path::Path;
use std::time::Duration;

use common::{EVENTUALLY, wait_pod};

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use steward_testbed::control_plane::ControlPlane;
use steward_testbed::kubelet::launch::LocalImage;
use steward_testbed::kubelet::provisioner::CAPPED_STORAGE_CLASS;

const NS: &str = "capped";
const MI: u64 = 1024 * 1024;

/// The size of the filesystem at `dir`.
fn total_bytes(dir: &Path) -> u64 {
    let s = nix::sys::statvfs::statvfs(dir).unwrap();
    s.blocks() * s.fragment_size()
}

async fn eventually<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "never {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_claim_fills_up_grows_and_is_unmounted_when_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plane = ControlPlane::start_with(dir.path(), |k| {
        k.images.push(LocalImage {
            repository: "shell".into(),
            program: "/bin/sh".into(),
        });
    })
    .await
    .unwrap_or_else(|e| panic!("the control plane did not start: {e:#}"));
    let client = plane.client();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "small"},
        "spec": {
            "storageClassName": CAPPED_STORAGE_CLASS,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "filler"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "fill",
                "image": "shell:1",
                "args": ["-c", "dd if=/dev/zero of=/var/lib/etcd/big bs=1024 count=2048"],
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "small"}}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let failed = wait_pod(&pods, "filler", "Failed", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
    })
    .await;
    let s = serde_json::to_value(&failed.status).unwrap();
    let t = &s["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["exitCode"], 1, "{s:#}");
    assert!(
        t["message"]
            .as_str()
            .is_some_and(|m| m.contains("No space left on device")),
        "dd's error is the message: {s:#}"
    );

    let dirs = plane.kubelet().claim_dirs(NS, "small");
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let data = dirs[0].clone();
    assert_eq!(total_bytes(&data), MI, "a tmpfs of the request");
    let written = std::fs::metadata(data.join("big")).unwrap().len();
    assert!(written <= MI, "wrote {written} bytes into 1Mi");

    // Growing the claim: the volume is remounted before its capacities say so.
    let patch = json!({"spec": {"resources": {"requests": {"storage": "2Mi"}}}});
    claims
        .patch("small", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("resized to 2Mi", async || {
        let c = claims.get("small").await.ok()?;
        let cap = c.status?.capacity?.get("storage")?.0.clone();
        (cap == "2Mi").then_some(())
    })
    .await;
    assert_eq!(total_bytes(&data), 2 * MI);

    // Deleting it: the PV is Released, its tmpfs unmounted, its directory
    // and then the PV removed.
    let pv_name = claims
        .get("small")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.volume_name)
        .unwrap();
    pods.delete("filler", &DeleteParams::default())
        .await
        .unwrap();
    claims
        .delete("small", &DeleteParams::default())
        .await
        .unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client);
    eventually("the PV deleted", async || {
        pvs.get_opt(&pv_name)
            .await
            .ok()
            .and_then(|pv| pv.is_none().then_some(()))
    })
    .await;
    assert!(!data.exists(), "{} is left", data.display());
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let shown = data.display().to_string();
    assert!(
        !mountinfo.lines().any(|l| l.contains(&shown)),
        "still mounted: {mountinfo}"
    );

    plane.shutdown().await;
}

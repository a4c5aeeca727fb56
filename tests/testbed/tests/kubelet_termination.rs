//! Termination messages, as a kubelet reports them: a file made for each
//! container start is visible at the container's `terminationMessagePath`
//! (the default `/dev/termination-log`, or a path under `/run` or `/tmp`),
//! its content becomes `state.terminated.message` (and stays in
//! `lastState` across a restart), and under `FallbackToLogsOnError` a
//! failing container with nothing in it gets the tail of its log instead.
//! A mapped image `shell:1` (`/bin/sh`) stands in for the operator's.
//! Run under scripts/in-namespace.sh (scripts/test.sh does).

mod common;

use std::path::Path;

use common::wait_pod;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use steward_testbed::control_plane::ControlPlane;
use steward_testbed::kubelet::launch::LocalImage;

const NS: &str = "term";

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn status(p: &Pod) -> Value {
    serde_json::to_value(&p.status).unwrap()
}

fn shell(name: &str, script: &str) -> Value {
    json!({"name": name, "image": "shell:1", "args": ["-c", script]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_message_a_container_leaves_or_its_log_tail_is_in_its_status() {
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
    let pods: Api<Pod> = Api::namespaced(client, NS);
    let create = |spec: Value| {
        let pods = pods.clone();
        async move {
            let pod: Pod = serde_json::from_value(spec).unwrap();
            pods.create(&PostParams::default(), &pod).await.unwrap();
        }
    };

    // A path under /tmp and one under /run for the init containers; the
    // default for the container, which writes to /dev/null as well (the
    // copy of /dev holding the file keeps the real devices).
    let mut first = shell(
        "first",
        "printf 'init via /tmp' > /tmp/steward-termination-test",
    );
    first["terminationMessagePath"] = json!("/tmp/steward-termination-test");
    let mut second = shell("second", "printf 'init via /run' > /run/termination-log");
    second["terminationMessagePath"] = json!("/run/termination-log");
    let mut main = shell(
        "main",
        "echo to the log; echo nothing > /dev/null && printf 'done: %s' ok > /dev/termination-log",
    );
    main["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    create(json!({
        "metadata": {"name": "said"},
        "spec": {"restartPolicy": "Never", "initContainers": [first, second], "containers": [main]},
    }))
    .await;

    // 100 lines, then exit 3, restarted: the last 80 lines are the message,
    // of each start's own log only, kept in lastState.
    let lines = "i=1; while [ $i -le 100 ]; do echo line $i; i=$((i+1)); done";
    let mut failing = shell("main", &format!("{lines}; exit 3"));
    failing["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    create(json!({
        "metadata": {"name": "failing"},
        "spec": {"restartPolicy": "OnFailure", "containers": [failing]},
    }))
    .await;

    // The default policy (File) never falls back to the log.
    create(json!({
        "metadata": {"name": "silent"},
        "spec": {"restartPolicy": "Never", "containers": [shell("main", &format!("{lines}; exit 2"))]},
    }))
    .await;

    let said = wait_pod(&pods, "said", "Succeeded", |p| phase(p) == "Succeeded").await;
    let s = status(&said);
    let message = |v: &Value| v["state"]["terminated"]["message"].clone();
    assert_eq!(
        message(&s["initContainerStatuses"][0]),
        "init via /tmp",
        "{s:#}"
    );
    assert_eq!(
        message(&s["initContainerStatuses"][1]),
        "init via /run",
        "{s:#}"
    );
    let main = &s["containerStatuses"][0];
    assert_eq!(main["state"]["terminated"]["exitCode"], 0, "{s:#}");
    assert_eq!(
        message(main),
        "done: ok",
        "the file wins over the log: {s:#}"
    );
    // Nothing was made on the machine: each path existed only in the
    // container's own mount namespace.
    for p in ["/dev/termination-log", "/tmp/steward-termination-test"] {
        assert!(!Path::new(p).exists(), "{p} was created on the machine");
    }

    let want: String = (21..=100).map(|i| format!("line {i}\n")).collect();
    let failing = wait_pod(&pods, "failing", "restarted after exit 3", |p| {
        status(p)["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 3
    })
    .await;
    let last = &status(&failing)["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(last["message"], want, "{last:#}");

    let silent = wait_pod(&pods, "silent", "Failed", |p| phase(p) == "Failed").await;
    let t = &status(&silent)["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["exitCode"], 2, "{t:#}");
    assert!(t.get("message").is_none_or(Value::is_null), "{t:#}");

    let pids = plane.kubelet().started_pids();
    plane.shutdown().await;
    for pid in pids {
        assert!(!is_alive(pid), "PID {pid} outlived the control plane");
    }
}

/// Exists and is not a zombie.
fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().next())
            != Some("Z")
    })
}

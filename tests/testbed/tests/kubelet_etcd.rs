//! Real etcd from Pods: the local kubelet runs etcd Pods created through the
//! API and reports on them honestly, and its fault verbs break them the way
//! machines break. Run under scripts/in-namespace.sh (scripts/test.sh does);
//! outside it every test here fails with the namespace guard's message.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::{EVENTUALLY, wait_pod};

use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use steward_testbed::control_plane::ControlPlane;
use steward_testbed::etcd_bin::EtcdBinaries;
use steward_testbed::kubelet::fixtures::StaticCluster;

struct Plane {
    plane: ControlPlane,
    _dir: tempfile::TempDir,
}

async fn start() -> Plane {
    let dir = tempfile::tempdir().expect("tempdir");
    let plane = ControlPlane::start(dir.path())
        .await
        .unwrap_or_else(|e| panic!("the control plane did not start: {e:#}"));
    Plane { plane, _dir: dir }
}

impl Plane {
    fn client(&self) -> Client {
        self.plane.client()
    }

    fn bins(&self) -> EtcdBinaries {
        self.plane.kubelet().etcd().clone()
    }

    /// Stops everything and proves no process the kubelet started survives
    /// and no name it published is left behind.
    async fn finish(self, clusters: &[&StaticCluster]) {
        let pids = self.plane.kubelet().started_pids();
        let etcd = self.bins().etcd;
        let hosts = self.plane.kubelet().hosts_path().to_path_buf();
        assert!(!pids.is_empty(), "the kubelet started no process at all");
        self.plane.shutdown().await;
        for pid in pids {
            assert!(
                !is_alive(pid, &etcd),
                "etcd PID {pid} outlived the control plane"
            );
        }
        let text = std::fs::read_to_string(hosts).unwrap();
        for c in clusters {
            assert!(
                !text.contains(&c.host(0)),
                "{} left in the hosts file:\n{text}",
                c.host(0)
            );
        }
    }
}

/// Alive = exists, is not a zombie, and is still our etcd (not a reused PID).
fn is_alive(pid: u32, etcd: &Path) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|s| s.split_whitespace().next());
    if state == Some("Z") {
        return false;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    cmdline.starts_with(etcd.as_os_str().as_encoded_bytes())
}

async fn create_cluster(client: &Client, c: &StaticCluster) {
    create_cluster_without_pods(client, c).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &c.namespace);
    for i in 0..c.replicas {
        pods.create(&PostParams::default(), &c.pod(i, "new"))
            .await
            .expect("creating a Pod");
    }
}

/// The namespace (if new), the headless Service and the claims.
async fn create_cluster_without_pods(client: &Client, c: &StaticCluster) {
    let ns: Api<Namespace> = Api::all(client.clone());
    let obj: Namespace =
        serde_json::from_value(json!({"metadata": {"name": c.namespace}})).unwrap();
    match ns.create(&PostParams::default(), &obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating namespace {}: {e}", c.namespace),
    }
    let svc: Api<Service> = Api::namespaced(client.clone(), &c.namespace);
    svc.create(&PostParams::default(), &c.service())
        .await
        .expect("creating the headless Service");
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &c.namespace);
    for i in 0..c.replicas {
        pvcs.create(&PostParams::default(), &c.claim_object(i))
            .await
            .expect("creating a PVC");
    }
}

fn pods(client: &Client, c: &StaticCluster) -> Api<Pod> {
    Api::namespaced(client.clone(), &c.namespace)
}

async fn wait_gone(api: &Api<Pod>, name: &str) {
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while api.get_opt(name).await.expect("reading a pod").is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pod {name} was never removed"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn condition(p: &Pod, kind: &str) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| c.status.clone())
}

fn ready(p: &Pod) -> bool {
    condition(p, "Ready").as_deref() == Some("True")
}

fn container(p: &Pod) -> serde_json::Value {
    let s = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first());
    serde_json::to_value(s).unwrap()
}

async fn etcdctl(bins: &EtcdBinaries, endpoint: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(&bins.etcdctl)
        .arg(format!("--endpoints={endpoint}"))
        .args(["--dial-timeout=3s", "--command-timeout=5s"])
        .args(args)
        .env("ETCDCTL_API", "3")
        .kill_on_drop(true)
        .output()
        .await
        .expect("running etcdctl")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// etcdctl until it succeeds (etcd may still be electing), within EVENTUALLY.
async fn etcdctl_ok(bins: &EtcdBinaries, endpoint: &str, args: &[&str]) -> String {
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    loop {
        let out = etcdctl(bins, endpoint, args).await;
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "etcdctl {args:?} at {endpoint} kept failing: {}",
            text(&out)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_pods_form_a_cluster_and_a_graceful_node_stop_ends_them_succeeded() {
    let plane = start().await;
    let client = plane.client();
    let bins = plane.bins();
    let c = StaticCluster::new("trio", "trio", 3);
    create_cluster(&client, &c).await;
    let api = pods(&client, &c);

    for i in 0..3 {
        let p = wait_pod(&api, &c.member(i), "Running and Ready", |p| {
            phase(p) == "Running" && ready(p)
        })
        .await;
        let info = plane
            .plane
            .kubelet()
            .pod(&c.namespace, &c.member(i))
            .expect("the kubelet runs it");
        let status = p.status.unwrap();
        assert_eq!(status.pod_ip.as_deref(), Some(info.ip.to_string().as_str()));
        assert_eq!(status.host_ip.as_deref(), Some("127.0.0.1"));
        assert!(
            is_alive(info.pid.expect("a running process"), &bins.etcd),
            "{i}: no live etcd process"
        );
        let cs = container(&api.get(&c.member(i)).await.unwrap());
        assert!(cs["state"]["running"]["startedAt"].is_string(), "{cs}");
        assert_eq!(cs["restartCount"], 0);
    }

    let list = etcdctl_ok(&bins, &c.client_url(0), &["member", "list", "-w", "json"]).await;
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let members = list["members"].as_array().unwrap();
    assert_eq!(members.len(), 3, "{list}");
    let mut names: Vec<_> = members
        .iter()
        .map(|m| m["name"].as_str().unwrap_or("").to_string())
        .collect();
    names.sort();
    // A member that has not started yet has an empty name and no client URLs.
    assert_eq!(names, vec!["trio-0", "trio-1", "trio-2"], "{list}");
    for m in members {
        assert!(
            m["clientURLs"].as_array().is_some_and(|u| !u.is_empty()),
            "member not started: {m}"
        );
    }

    etcdctl_ok(
        &bins,
        &c.client_url(0),
        &["put", "/greeting", "written through trio-0"],
    )
    .await;
    let got = etcdctl_ok(
        &bins,
        &c.client_url(2),
        &["get", "/greeting", "--print-value-only"],
    )
    .await;
    assert_eq!(got.trim(), "written through trio-0");

    plane.plane.kubelet().stop_node().await;
    for i in 0..3 {
        let p = wait_pod(&api, &c.member(i), "Succeeded", |p| phase(p) == "Succeeded").await;
        let cs = container(&p);
        assert_eq!(cs["state"]["terminated"]["exitCode"], 0, "{cs}");
        assert_eq!(cs["state"]["terminated"]["reason"], "Completed", "{cs}");
        assert_eq!(condition(&p, "Ready").as_deref(), Some("False"));
    }
    assert!(plane.plane.kubelet().live_pids().is_empty());
    plane.finish(&[&c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_recreated_on_the_same_claim_keeps_its_data_until_the_claim_is_wiped() {
    let plane = start().await;
    let client = plane.client();
    let bins = plane.bins();
    let c = StaticCluster::new("keep", "keep", 1);
    create_cluster(&client, &c).await;
    let api = pods(&client, &c);
    let member = c.member(0);

    wait_pod(&api, &member, "Ready", ready).await;
    etcdctl_ok(&bins, &c.client_url(0), &["put", "/kept", "survives"]).await;
    let first_pid = plane
        .plane
        .kubelet()
        .pod(&c.namespace, &member)
        .unwrap()
        .pid
        .unwrap();

    // Deletion is graceful: the object stays until etcd has stopped.
    api.delete(&member, &DeleteParams::default()).await.unwrap();
    wait_gone(&api, &member).await;
    assert!(
        !is_alive(first_pid, &bins.etcd),
        "the deleted Pod's etcd still runs"
    );

    api.create(&PostParams::default(), &c.pod(0, "new"))
        .await
        .unwrap();
    wait_pod(&api, &member, "Ready again", ready).await;
    let got = etcdctl_ok(
        &bins,
        &c.client_url(0),
        &["get", "/kept", "--print-value-only"],
    )
    .await;
    assert_eq!(got.trim(), "survives");

    api.delete(&member, &DeleteParams::default()).await.unwrap();
    wait_gone(&api, &member).await;
    plane
        .plane
        .kubelet()
        .wipe_claim(&c.namespace, &c.claim(0))
        .unwrap();
    api.create(&PostParams::default(), &c.pod(0, "new"))
        .await
        .unwrap();
    wait_pod(&api, &member, "Ready on a wiped claim", ready).await;
    let got = etcdctl_ok(
        &bins,
        &c.client_url(0),
        &["get", "/kept", "--print-value-only"],
    )
    .await;
    assert_eq!(got.trim(), "", "a wiped claim still held data");
    plane.finish(&[&c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_terminates_and_restarts_only_under_restart_policy_always() {
    let plane = start().await;
    let client = plane.client();
    let never = StaticCluster::new("kill", "never", 1);
    let mut always = StaticCluster::new("kill", "always", 1);
    always.restart_policy = "Always".into();
    create_cluster(&client, &never).await;
    create_cluster(&client, &always).await;
    let api = pods(&client, &never);
    let kubelet = plane.plane.kubelet();

    wait_pod(&api, &never.member(0), "Ready", ready).await;
    let before = wait_pod(&api, &always.member(0), "Ready", ready).await;
    let first_started = container(&before)["state"]["running"]["startedAt"].clone();

    kubelet
        .kill(&never.namespace, &never.member(0))
        .await
        .unwrap();
    let dead = wait_pod(&api, &never.member(0), "Failed", |p| phase(p) == "Failed").await;
    let cs = container(&dead);
    assert_eq!(cs["state"]["terminated"]["exitCode"], 137, "{cs}");
    assert_eq!(cs["state"]["terminated"]["signal"], 9, "{cs}");
    assert_eq!(cs["state"]["terminated"]["reason"], "Error", "{cs}");
    assert_eq!(cs["ready"], false);
    assert_eq!(condition(&dead, "Ready").as_deref(), Some("False"));

    let killed = kubelet
        .kill(&always.namespace, &always.member(0))
        .await
        .unwrap();
    let back = wait_pod(&api, &always.member(0), "restarted and Ready", |p| {
        container(p)["restartCount"] == 1 && ready(p)
    })
    .await;
    let cs = container(&back);
    assert_eq!(phase(&back), "Running");
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 137, "{cs}");
    assert_eq!(
        cs["lastState"]["terminated"]["startedAt"], first_started,
        "{cs}"
    );
    assert_ne!(
        kubelet
            .pod(&always.namespace, &always.member(0))
            .unwrap()
            .pid,
        Some(killed)
    );
    plane.finish(&[&never, &always]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_from_outside_the_kubelet_is_a_clean_exit_0() {
    let plane = start().await;
    let client = plane.client();
    let c = StaticCluster::new("term", "outside", 1);
    create_cluster(&client, &c).await;
    let api = pods(&client, &c);
    wait_pod(&api, &c.member(0), "Ready", ready).await;
    // As a node shutting down or an operator's `kill` would: the kubelet
    // did not send this one.
    let pid = plane
        .plane
        .kubelet()
        .pod(&c.namespace, &c.member(0))
        .unwrap()
        .pid
        .unwrap();
    // The process is named after its program, as in a container (the
    // kubelet execs the opened file, not /proc/self/fd/N).
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap()
            .trim_end(),
        "etcd"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let done = wait_pod(&api, &c.member(0), "Succeeded", |p| phase(p) == "Succeeded").await;
    let cs = container(&done);
    assert_eq!(cs["state"]["terminated"]["exitCode"], 0, "{cs}");
    assert_eq!(cs["state"]["terminated"]["reason"], "Completed", "{cs}");
    assert!(cs["state"]["terminated"]["signal"].is_null(), "{cs}");
    plane.finish(&[&c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_member_stays_ready_while_etcd_goes_silent_and_recovers_on_thaw() {
    let plane = start().await;
    let client = plane.client();
    let bins = plane.bins();
    let c = StaticCluster::new("freeze", "ice", 1);
    create_cluster(&client, &c).await;
    let api = pods(&client, &c);
    let member = c.member(0);
    wait_pod(&api, &member, "Ready", ready).await;
    etcdctl_ok(&bins, &c.client_url(0), &["put", "/k", "v"]).await;

    plane
        .plane
        .kubelet()
        .freeze(&c.namespace, &member)
        .await
        .unwrap();
    let silent = etcdctl(&bins, &c.client_url(0), &["get", "/k"]).await;
    assert!(
        !silent.status.success(),
        "a frozen etcd answered: {}",
        text(&silent)
    );
    // Probe period 1 s, failureThreshold 3: a probing kubelet would have
    // turned the Pod unready well within this window.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let p = api.get(&member).await.unwrap();
    assert!(ready(&p), "a frozen Pod lost Ready: {:?}", p.status);
    assert!(
        plane
            .plane
            .kubelet()
            .pod(&c.namespace, &member)
            .unwrap()
            .frozen
    );

    plane
        .plane
        .kubelet()
        .thaw(&c.namespace, &member)
        .await
        .unwrap();
    let got = etcdctl_ok(
        &bins,
        &c.client_url(0),
        &["get", "/k", "--print-value-only"],
    )
    .await;
    assert_eq!(got.trim(), "v");
    plane.finish(&[&c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unresolvable_member_name_fails_as_a_name_error_until_restored() {
    let plane = start().await;
    let client = plane.client();
    let bins = plane.bins();
    let c = StaticCluster::new("dns", "named", 1);
    create_cluster(&client, &c).await;
    let api = pods(&client, &c);
    let member = c.member(0);
    wait_pod(&api, &member, "Ready", ready).await;
    let ip = plane.plane.kubelet().pod(&c.namespace, &member).unwrap().ip;
    for name in [c.host(0), format!("{}.cluster.local", c.host(0))] {
        let addrs: Vec<_> = tokio::net::lookup_host((name.as_str(), 2379))
            .await
            .unwrap()
            .collect();
        assert!(
            addrs.iter().all(|a| a.ip() == ip) && !addrs.is_empty(),
            "{name} -> {addrs:?}"
        );
    }

    plane
        .plane
        .kubelet()
        .make_unresolvable(&c.namespace, &member)
        .unwrap();
    let err = match tokio::net::lookup_host((c.host(0).as_str(), 2379)).await {
        Ok(addrs) => panic!(
            "{} still resolves: {:?}",
            c.host(0),
            addrs.collect::<Vec<_>>()
        ),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(
        msg.contains("name resolution") || msg.contains("not known"),
        "not a name error: {msg}"
    );
    let out = etcdctl(&bins, &c.client_url(0), &["get", "/k"]).await;
    assert!(
        !out.status.success(),
        "etcdctl reached an unresolvable member: {}",
        text(&out)
    );
    let lookup = format!("lookup {}", c.host(0));
    assert!(
        text(&out).contains(&lookup),
        "etcdctl failed, but not on the name: {}",
        text(&out)
    );

    plane
        .plane
        .kubelet()
        .restore_name(&c.namespace, &member)
        .unwrap();
    let addrs: Vec<_> = tokio::net::lookup_host((c.host(0).as_str(), 2379))
        .await
        .unwrap()
        .collect();
    assert_eq!(addrs[0].ip(), ip);
    etcdctl_ok(&bins, &c.client_url(0), &["put", "/k", "back"]).await;
    plane.finish(&[&c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_liveness_probe_restarts_the_container_and_counts_it() {
    let plane = start().await;
    let client = plane.client();
    let mut c = StaticCluster::new("live", "sick", 1);
    c.restart_policy = "Always".into();
    create_cluster_without_pods(&client, &c).await;
    let mut pod = c.pod(0, "new");
    // etcd's metrics listener answers 404 here: the probe fails for real.
    let probe = json!({"httpGet": {"path": "/no-such-endpoint", "port": 2381}, "periodSeconds": 1, "failureThreshold": 2});
    pod.spec.as_mut().unwrap().containers[0].liveness_probe =
        Some(serde_json::from_value(probe).unwrap());
    let api = pods(&client, &c);
    api.create(&PostParams::default(), &pod).await.unwrap();

    let p = wait_pod(&api, &c.member(0), "restarted twice", |p| {
        container(p)["restartCount"].as_i64().unwrap_or(0) >= 2
    })
    .await;
    let cs = container(&p);
    assert!(cs["lastState"]["terminated"].is_object(), "{cs}");
    assert_eq!(phase(&p), "Running");
    assert!(plane.plane.kubelet().started_pids().len() >= 3);
    plane.finish(&[&c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_the_kubelet_cannot_run_says_why_and_can_still_be_deleted() {
    let plane = start().await;
    let client = plane.client();
    let c = StaticCluster::new("unrunnable", "odd", 1);
    create_cluster_without_pods(&client, &c).await;
    let mut pod = c.pod(0, "new");
    let spec = pod.spec.as_mut().unwrap();
    spec.volumes.as_mut().unwrap()[0] =
        serde_json::from_value(json!({"name": "data", "configMap": {"name": "cfg"}})).unwrap();
    let api = pods(&client, &c);
    api.create(&PostParams::default(), &pod).await.unwrap();

    let p = wait_pod(&api, &c.member(0), "refused", |p| {
        container(p)["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    })
    .await;
    let message = container(&p)["state"]["waiting"]["message"].to_string();
    assert!(message.contains("volume \\\"data\\\""), "{message}");
    assert_eq!(phase(&p), "Pending");
    assert!(plane.plane.kubelet().started_pids().is_empty());

    api.delete(&c.member(0), &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&api, &c.member(0)).await;
    plane.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_pod_stays_pending_until_released_and_a_running_one_is_untouched() {
    let plane = start().await;
    let client = plane.client();
    let c = StaticCluster::new("held", "held", 2);
    let kubelet = plane.plane.kubelet();
    kubelet.hold_starts(&c.namespace, &c.member(1));
    create_cluster(&client, &c).await;
    let api = pods(&client, &c);

    // The other Pod runs, so the kubelet has had every chance to start both.
    wait_pod(&api, &c.member(0), "Running", |p| phase(p) == "Running").await;
    let held = wait_pod(&api, &c.member(1), "Pending, held", |p| {
        container(p)["state"]["waiting"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("held"))
    })
    .await;
    let shown = |p: &Pod| serde_json::to_string_pretty(&p.status).unwrap();
    assert_eq!(phase(&held), "Pending", "{}", shown(&held));
    assert_eq!(
        container(&held)["state"]["waiting"]["reason"],
        "ContainerCreating",
        "{}",
        shown(&held)
    );
    assert!(
        kubelet
            .pod(&c.namespace, &c.member(1))
            .unwrap()
            .pid
            .is_none(),
        "a held Pod has no process: {:?}",
        kubelet.pod(&c.namespace, &c.member(1))
    );

    // Holding a running Pod's name does not stop it.
    kubelet.hold_starts(&c.namespace, &c.member(0));
    let running = kubelet.pod(&c.namespace, &c.member(0)).unwrap().pid;
    assert!(
        running.is_some(),
        "{:?}",
        kubelet.pod(&c.namespace, &c.member(0))
    );
    kubelet.release_starts(&c.namespace, &c.member(1));
    wait_pod(&api, &c.member(1), "Running after release", |p| {
        phase(p) == "Running"
    })
    .await;
    let first = api.get(&c.member(0)).await.unwrap();
    assert_eq!(
        kubelet.pod(&c.namespace, &c.member(0)).unwrap().pid,
        running,
        "the running Pod kept its process; its status now: {}",
        shown(&first)
    );
    plane.finish(&[&c]).await;
}

/// A volume mounted over the directory a local image's program lives in
/// (an emptyDir at /tmp, with the build under /tmp) does not hide the
/// program, as a volume never hides a real container's image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_over_the_programs_directory_does_not_hide_the_image() {
    let build = tempfile::tempdir_in("/tmp").unwrap();
    let program = build.path().join("sleeper");
    std::fs::copy("/bin/sleep", &program).unwrap();
    let dir = tempfile::tempdir().expect("tempdir");
    let plane = ControlPlane::start_with(dir.path(), |k| {
        k.images.push(steward_testbed::kubelet::launch::LocalImage {
            repository: "sleeper".into(),
            program: program.clone(),
        })
    })
    .await
    .unwrap_or_else(|e| panic!("the control plane did not start: {e:#}"));
    let api: Api<Pod> = Api::namespaced(plane.client(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "sleeper"},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "containers": [{"name": "main", "image": "sleeper:1", "args": ["300"],
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
            "volumes": [{"name": "tmp", "emptyDir": {}}]
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &pod).await.unwrap();
    let p = wait_pod(&api, "sleeper", "Running", |p| phase(p) == "Running").await;
    assert!(
        container(&p)["state"]["running"].is_object(),
        "{:?}",
        p.status
    );
    api.delete("sleeper", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&api, "sleeper").await;
    plane.shutdown().await;
}

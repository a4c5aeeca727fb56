//! Init containers, as a kubelet runs them: one at a time, in order, each
//! to completion, before the Pod's container starts; a failure under
//! `restartPolicy: Never` fails the Pod, under `Always` it is retried; a
//! restarted container does not re-run them. The shape is the operator's
//! restore from a snapshot: a `fetch` container puts the snapshot on the
//! member's claim, a `restore` container of the etcd image runs
//! `etcdutl snapshot restore` into the data dir, then etcd starts on it.
//! Run under scripts/in-namespace.sh (scripts/test.sh does).

mod common;

use std::io::Write;
use std::time::Duration;

use common::{EVENTUALLY, wait_pod};

use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Secret, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use steward_testbed::control_plane::ControlPlane;
use steward_testbed::etcd_bin::EtcdBinaries;
use steward_testbed::kubelet::fixtures::StaticCluster;
use steward_testbed::kubelet::launch::LocalImage;

const NS: &str = "init";

/// The etcd image the init containers name: the kubelet runs the release
/// its tag names (the default one here), etcdutl or etcdctl by command.
const ETCD_IMAGE: &str = "quay.io/coreos/etcd:v3.6.17";

/// A stand-in for the operator's image: `shell:1` runs /bin/sh, with the
/// container's args.
async fn start() -> (ControlPlane, tempfile::TempDir) {
    start_with(|_| {}).await
}

async fn start_with(
    tune: impl FnOnce(&mut steward_testbed::kubelet::KubeletConfig),
) -> (ControlPlane, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let plane = ControlPlane::start_with(dir.path(), |k| {
        k.images.push(LocalImage {
            repository: "shell".into(),
            program: "/bin/sh".into(),
        });
        tune(k);
    })
    .await
    .unwrap_or_else(|e| panic!("the control plane did not start: {e:#}"));
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(plane.client())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    (plane, dir)
}

/// Shuts everything down and proves no process the kubelet started
/// survives it.
async fn finish(plane: ControlPlane) {
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

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// The condition `kind` as JSON (status, reason, message).
fn condition(p: &Pod, kind: &str) -> Value {
    let c = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == kind));
    serde_json::to_value(c).unwrap()
}

fn ready(p: &Pod) -> bool {
    condition(p, "Ready")["status"] == "True"
}

fn container(p: &Pod) -> Value {
    let s = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first());
    serde_json::to_value(s).unwrap()
}

/// `initContainerStatuses[i]`, or null.
fn init(p: &Pod, i: usize) -> Value {
    let s = p
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|c| c.get(i));
    serde_json::to_value(s).unwrap()
}

fn shown(p: &Pod) -> String {
    serde_json::to_string_pretty(&p.status).unwrap()
}

fn time(v: &Value) -> jiff::Timestamp {
    v.as_str()
        .unwrap_or_else(|| panic!("not a timestamp: {v}"))
        .parse()
        .unwrap()
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

async fn etcdctl_ok(bins: &EtcdBinaries, endpoint: &str, args: &[&str]) -> String {
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    loop {
        let out = tokio::process::Command::new(&bins.etcdctl)
            .arg(format!("--endpoints={endpoint}"))
            .args(["--dial-timeout=3s", "--command-timeout=5s"])
            .args(args)
            .kill_on_drop(true)
            .output()
            .await
            .expect("running etcdctl");
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "etcdctl {args:?} at {endpoint} kept failing: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The headless Service and the claims of `c`.
async fn create_service_and_claims(client: &Client, c: &StaticCluster) {
    Api::<Service>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &c.service())
        .await
        .unwrap();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    for i in 0..c.replicas {
        pvcs.create(&PostParams::default(), &c.claim_object(i))
            .await
            .unwrap();
    }
}

/// A Pod whose container is etcd on an emptyDir, with `inits` before it.
fn etcd_pod(name: &str, restart_policy: &str, inits: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 5,
            "automountServiceAccountToken": false,
            "initContainers": inits,
            "containers": [{
                "name": "etcd", "image": ETCD_IMAGE, "command": ["etcd"],
                "args": [
                    "--data-dir=/var/lib/etcd/data",
                    "--listen-client-urls=http://0.0.0.0:2379",
                    "--advertise-client-urls=http://127.0.0.1:2379",
                    "--listen-peer-urls=http://0.0.0.0:2380",
                ],
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
            }],
            "volumes": [{"name": "data", "emptyDir": {}}],
        }
    }))
    .unwrap()
}

fn log_of(plane: &ControlPlane, pod: &str, container: &str) -> String {
    let path = plane
        .kubelet()
        .container_log(NS, pod, container)
        .expect("the kubelet runs the pod");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_restored_by_init_containers_starts_on_the_snapshot_and_restarts_without_them() {
    let (plane, dir) = start().await;
    let client = plane.client();
    let kubelet = plane.kubelet();
    let bins = kubelet.etcd().clone();
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);

    // A snapshot of a real member, holding one key.
    let seed = StaticCluster::new(NS, "seed", 1);
    create_service_and_claims(&client, &seed).await;
    api.create(&PostParams::default(), &seed.pod(0, "new"))
        .await
        .unwrap();
    wait_pod(&api, &seed.member(0), "Ready", ready).await;
    etcdctl_ok(
        &bins,
        &seed.client_url(0),
        &["put", "/restored", "from the snapshot"],
    )
    .await;
    let snapshot = dir.path().join("seed.db");
    etcdctl_ok(
        &bins,
        &seed.client_url(0),
        &["snapshot", "save", snapshot.to_str().unwrap()],
    )
    .await;
    api.delete(&seed.member(0), &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&api, &seed.member(0)).await;

    // The member Pod, as the operator builds it for a restore: both init
    // containers mount the claim where etcd does.
    let mut c = StaticCluster::new(NS, "restored", 1);
    c.restart_policy = "Always".into();
    create_service_and_claims(&client, &c).await;
    let member = c.member(0);
    let mut pod = c.pod(0, "new");
    let mut spec = serde_json::to_value(pod.spec.take().unwrap()).unwrap();
    let main = &mut spec["containers"][0];
    let args: Vec<Value> = main["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| match a.as_str() {
            Some("--data-dir=/var/lib/etcd") => json!("--data-dir=/var/lib/etcd/data"),
            _ => a.clone(),
        })
        .collect();
    main["args"] = json!(args);
    let data = json!([{"name": "data", "mountPath": "/var/lib/etcd"}]);
    spec["initContainers"] = json!([
        {
            "name": "fetch", "image": "shell:1",
            // Slow enough to be seen initializing.
            "args": ["-c", "sleep 2 && cp \"$SNAPSHOT\" /var/lib/etcd/restore.db && echo fetched \"$SNAPSHOT\""],
            "env": [{"name": "SNAPSHOT", "value": snapshot.to_str().unwrap()}],
            "volumeMounts": data,
        },
        {
            "name": "restore", "image": ETCD_IMAGE,
            "command": ["/usr/local/bin/etcdutl"],
            "args": [
                "snapshot", "restore", "/var/lib/etcd/restore.db",
                "--data-dir", "/var/lib/etcd/data",
                "--name=$(POD_NAME)",
                format!("--initial-cluster={}", c.initial_cluster()),
                format!("--initial-advertise-peer-urls=http://{}:2380", c.host(0)),
                "--initial-cluster-token=restored",
            ],
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "volumeMounts": data,
        },
    ]);
    pod.spec = Some(serde_json::from_value(spec).unwrap());
    api.create(&PostParams::default(), &pod).await.unwrap();

    // Initializing: Pending, the first init container running, the second
    // and etcd waiting.
    let p = wait_pod(&api, &member, "initializing", |p| {
        init(p, 0)["state"]["running"].is_object()
    })
    .await;
    assert_eq!(phase(&p), "Pending", "{}", shown(&p));
    let initialized = condition(&p, "Initialized");
    assert_eq!(initialized["status"], "False", "{}", shown(&p));
    assert_eq!(initialized["reason"], "ContainersNotInitialized");
    assert_eq!(
        initialized["message"],
        "containers with incomplete status: [fetch restore]"
    );
    assert_eq!(init(&p, 0)["name"], "fetch");
    assert_eq!(init(&p, 0)["started"], true);
    assert_eq!(init(&p, 1)["name"], "restore");
    assert_eq!(init(&p, 1)["state"]["waiting"]["reason"], "PodInitializing");
    assert_eq!(
        container(&p)["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    assert_eq!(container(&p)["started"], false);
    let fetch_pid = kubelet.pod(NS, &member).unwrap().pid.expect("fetch runs");

    // Then etcd, on the restored data.
    let p = wait_pod(&api, &member, "Running and Ready", |p| {
        phase(p) == "Running" && ready(p)
    })
    .await;
    assert_eq!(
        condition(&p, "Initialized")["status"],
        "True",
        "{}",
        shown(&p)
    );
    for (i, name) in ["fetch", "restore"].iter().enumerate() {
        let s = init(&p, i);
        assert_eq!(s["name"], *name, "{s}");
        assert_eq!(s["state"]["terminated"]["exitCode"], 0, "{s}");
        assert_eq!(s["state"]["terminated"]["reason"], "Completed", "{s}");
        assert_eq!(s["ready"], true, "a completed init container is ready: {s}");
        assert_eq!(s["restartCount"], 0, "{s}");
    }
    assert_eq!(init(&p, 1)["image"], ETCD_IMAGE);
    assert_eq!(
        init(&p, 1)["imageID"],
        format!("local://{}", bins.etcdutl.display()),
        "the release's etcdutl ran"
    );
    // In order, each after the one before had finished.
    let fetched = time(&init(&p, 0)["state"]["terminated"]["finishedAt"]);
    let restore = &init(&p, 1)["state"]["terminated"];
    assert!(fetched <= time(&restore["startedAt"]), "{}", shown(&p));
    let restored = time(&restore["finishedAt"]);
    let etcd_started = time(&container(&p)["state"]["running"]["startedAt"]);
    assert!(restored <= etcd_started, "{}", shown(&p));
    assert!(!is_alive(fetch_pid));

    let got = etcdctl_ok(
        &bins,
        &c.client_url(0),
        &["get", "/restored", "--print-value-only"],
    )
    .await;
    assert_eq!(got.trim(), "from the snapshot", "etcd runs on the restore");

    // Their logs stay where etcd's is.
    let fetch_log = log_of(&plane, &member, "fetch");
    assert!(fetch_log.contains("fetched "), "{fetch_log}");
    let restore_log = log_of(&plane, &member, "restore");
    assert!(restore_log.contains("restored snapshot"), "{restore_log}");

    // etcd dies and restarts; the init containers do not run again.
    kubelet.kill(NS, &member).await.unwrap();
    let again = wait_pod(&api, &member, "restarted and Ready", |p| {
        container(p)["restartCount"] == 1 && ready(p)
    })
    .await;
    for i in 0..2 {
        assert_eq!(init(&again, i), init(&p, i), "init container {i} ran again");
    }
    assert_eq!(log_of(&plane, &member, "fetch"), fetch_log);
    assert_eq!(log_of(&plane, &member, "restore"), restore_log);
    let got = etcdctl_ok(
        &bins,
        &c.client_url(0),
        &["get", "/restored", "--print-value-only"],
    )
    .await;
    assert_eq!(got.trim(), "from the snapshot");
    finish(plane).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_init_container_fails_the_pod_under_never_and_is_retried_under_always() {
    let (plane, _dir) = start().await;
    let api: Api<Pod> = Api::namespaced(plane.client(), NS);
    let inits = json!([
        {
            "name": "restore", "image": ETCD_IMAGE, "command": ["etcdutl"],
            "args": ["snapshot", "restore", "/var/lib/etcd/missing.db", "--data-dir", "/var/lib/etcd/data"],
            "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
        },
        {"name": "after", "image": "shell:1", "args": ["-c", "echo never"]},
    ]);
    api.create(
        &PostParams::default(),
        &etcd_pod("never", "Never", inits.clone()),
    )
    .await
    .unwrap();

    let p = wait_pod(&api, "never", "Failed", |p| phase(p) == "Failed").await;
    let s = init(&p, 0);
    assert_eq!(s["state"]["terminated"]["exitCode"], 1, "{}", shown(&p));
    assert_eq!(s["state"]["terminated"]["reason"], "Error", "{s}");
    assert_eq!(s["ready"], false, "{s}");
    assert_eq!(
        init(&p, 1)["state"]["waiting"]["reason"],
        "PodInitializing",
        "{}",
        shown(&p)
    );
    assert_eq!(
        container(&p)["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    assert_eq!(container(&p)["restartCount"], 0);
    let initialized = condition(&p, "Initialized");
    assert_eq!(initialized["status"], "False");
    assert_eq!(
        initialized["message"],
        "containers with incomplete status: [restore after]"
    );
    assert_eq!(
        plane.kubelet().started_pids().len(),
        1,
        "only the failed init container ran"
    );
    // Its output is kept, for whoever asks why.
    let log = log_of(&plane, "never", "restore");
    assert!(
        log.contains("Error: open") && log.contains("missing.db: no such file or directory"),
        "{log}"
    );
    let after = plane.kubelet().container_log(NS, "never", "after").unwrap();
    assert!(!after.exists(), "the next init container ran");

    // Under Always the failed init container runs again, with back-off,
    // and the Pod stays Pending.
    api.create(&PostParams::default(), &etcd_pod("always", "Always", inits))
        .await
        .unwrap();
    let p = wait_pod(&api, "always", "retried twice", |p| {
        init(p, 0)["restartCount"].as_i64().unwrap_or(0) >= 2
    })
    .await;
    assert_eq!(phase(&p), "Pending", "{}", shown(&p));
    assert_eq!(
        init(&p, 0)["lastState"]["terminated"]["exitCode"],
        1,
        "{}",
        shown(&p)
    );
    assert_eq!(
        container(&p)["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    let p = wait_pod(&api, "always", "backing off", |p| {
        init(p, 0)["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    })
    .await;
    assert_eq!(container(&p)["started"], false);
    finish(plane).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_the_etcd_image_lacks_fails_to_start_as_a_runtime_says() {
    let (plane, _dir) = start().await;
    let api: Api<Pod> = Api::namespaced(plane.client(), NS);

    // The regular container: wrapping etcd in a shell.
    let mut wrapped = etcd_pod("wrapped", "Never", json!([]));
    let main = &mut wrapped.spec.as_mut().unwrap().containers[0];
    main.command = Some(vec!["sh".into(), "-c".into(), "exec etcd".into()]);
    main.args = None;
    api.create(&PostParams::default(), &wrapped).await.unwrap();
    let p = wait_pod(&api, "wrapped", "Failed", |p| phase(p) == "Failed").await;
    let t = &container(&p)["state"]["terminated"];
    assert_eq!(t["reason"], "StartError", "{}", shown(&p));
    assert_eq!(t["exitCode"], 128);
    let message = t["message"].as_str().unwrap();
    assert!(
        message.contains("exec: \"sh\": executable file not found in $PATH")
            && message.contains("holds only etcd, etcdctl and etcdutl"),
        "{message}"
    );

    // An init container naming a path the image does not have.
    let inits =
        json!([{"name": "prepare", "image": ETCD_IMAGE, "command": ["/bin/bash", "-c", "true"]}]);
    api.create(&PostParams::default(), &etcd_pod("bash", "Never", inits))
        .await
        .unwrap();
    let p = wait_pod(&api, "bash", "Failed", |p| phase(p) == "Failed").await;
    let t = &init(&p, 0)["state"]["terminated"];
    assert_eq!(t["reason"], "StartError", "{}", shown(&p));
    assert!(
        t["message"]
            .as_str()
            .unwrap()
            .contains("exec: \"/bin/bash\": stat /bin/bash: no such file or directory"),
        "{}",
        shown(&p)
    );
    assert_eq!(
        container(&p)["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    let log = log_of(&plane, "bash", "prepare");
    assert!(log.contains("stat /bin/bash"), "{log}");
    assert!(
        plane.kubelet().started_pids().is_empty(),
        "nothing was started"
    );
    finish(plane).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_init_container_waits_for_the_secret_its_env_names() {
    let (plane, _dir) = start().await;
    let client = plane.client();
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let inits = json!([{
        "name": "fetch", "image": "shell:1",
        "args": ["-c", "echo \"key=$ACCESS_KEY optional=${MAYBE-unset} url=$URL\""],
        "env": [
            {"name": "ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "access-key"}}},
            {"name": "MAYBE", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": true}}},
            {"name": "URL", "value": "s3://$(BUCKET)/snapshots"},
        ],
        "envFrom": [{"secretRef": {"name": "creds"}}],
    }]);
    api.create(&PostParams::default(), &etcd_pod("creds", "Never", inits))
        .await
        .unwrap();

    let waiting = |p: &Pod| init(p, 0)["state"]["waiting"].clone();
    let p = wait_pod(&api, "creds", "missing its Secret", |p| {
        waiting(p)["message"] == "secrets \"creds\" not found"
    })
    .await;
    assert_eq!(
        waiting(&p)["reason"],
        "CreateContainerConfigError",
        "{}",
        shown(&p)
    );
    assert_eq!(phase(&p), "Pending");

    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds", "namespace": NS},
        "stringData": {"BUCKET": "backups"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    wait_pod(&api, "creds", "missing its key", |p| {
        waiting(p)["message"] == "couldn't find key access-key in Secret init/creds"
    })
    .await;
    assert!(plane.kubelet().started_pids().is_empty());

    let patch = json!({"stringData": {"access-key": "AK-1"}});
    secrets
        .patch("creds", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let p = wait_pod(&api, "creds", "Running", |p| phase(p) == "Running").await;
    assert_eq!(init(&p, 0)["state"]["terminated"]["reason"], "Completed");
    let log = log_of(&plane, "creds", "fetch");
    assert!(
        log.contains("key=AK-1 optional=unset url=s3://backups/snapshots"),
        "{log}"
    );
    finish(plane).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pod_mid_init_stops_the_init_container() {
    let (plane, _dir) = start().await;
    let api: Api<Pod> = Api::namespaced(plane.client(), NS);
    let inits = json!([{"name": "slow", "image": "shell:1", "args": ["-c", "exec sleep 300"]}]);
    api.create(&PostParams::default(), &etcd_pod("slow", "Never", inits))
        .await
        .unwrap();
    wait_pod(&api, "slow", "initializing", |p| {
        init(p, 0)["state"]["running"].is_object()
    })
    .await;
    let pid = plane.kubelet().pod(NS, "slow").unwrap().pid.unwrap();
    assert!(is_alive(pid));

    api.delete("slow", &DeleteParams::default()).await.unwrap();
    wait_gone(&api, "slow").await;
    assert!(!is_alive(pid), "the init container outlived its Pod");
    assert_eq!(plane.kubelet().started_pids(), [pid], "etcd never started");
    finish(plane).await;
}

/// A one-layer image holding /bin/sh (this machine's dash: it finds its
/// libraries and `id` on the machine, the kubelet does not chroot), run as
/// nobody.
fn shell_image() -> (Vec<u8>, String) {
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_uid(0);
    h.set_gid(0);
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    tar.append_data(&mut h, "bin/", std::io::empty()).unwrap();
    let bytes = std::fs::read("/bin/sh").unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_uid(0);
    h.set_gid(0);
    h.set_mode(0o755);
    h.set_size(bytes.len() as u64);
    tar.append_data(&mut h, "bin/sh", bytes.as_slice()).unwrap();
    let raw = tar.into_inner().unwrap();
    let diff_id = {
        use sha2::Digest;
        format!("sha256:{}", hex::encode(sha2::Sha256::digest(&raw)))
    };
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&raw).unwrap();
    (gz.finish().unwrap(), diff_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_init_container_of_a_pulled_image_runs_before_etcd() {
    use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
    let bins = steward_testbed::kube_bin::locate().unwrap();
    let registry = steward_testbed::registry::Registry::start(&bins)
        .await
        .unwrap();
    let reference = registry.reference("tools/pulled-sh", "v1");
    let (layer, diff_id) = shell_image();
    let config = json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/bin/sh"], "Env": ["PATH=/usr/bin:/bin"], "User": "65534:65534"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    });
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = oci_client::Client::try_from(ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    })
    .unwrap();
    let r: oci_client::Reference = reference.parse().unwrap();
    client
        .push(
            &r,
            &[ImageLayer::oci_v1_gzip(layer, None)],
            Config::oci_v1(serde_json::to_vec(&config).unwrap(), None),
            &oci_client::secrets::RegistryAuth::Anonymous,
            None,
        )
        .await
        .unwrap();

    let access = steward_testbed::kubelet::images::RegistryAccess::of(&registry);
    let (plane, _dir) = start_with(|k| k.registries.push(access)).await;
    let api: Api<Pod> = Api::namespaced(plane.client(), NS);
    // The operator's shape: its image runs as a user of its own, and the
    // Pod's fsGroup lets that user write to the member's claim, mounted
    // where etcd's data lives (a path this machine does not have).
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data-pulled", "namespace": NS},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(plane.client(), NS)
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
    let inits = json!([{
        "name": "fetch", "image": reference,
        "args": ["-c", "echo pulled as $(id -u) > /var/lib/etcd/fetched && cat /var/lib/etcd/fetched"],
        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
    }]);
    let mut pod = etcd_pod("pulled", "Never", inits);
    let spec = pod.spec.as_mut().unwrap();
    spec.volumes = Some(vec![
        serde_json::from_value(
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-pulled"}}),
        )
        .unwrap(),
    ]);
    spec.security_context = Some(serde_json::from_value(json!({"fsGroup": 2000})).unwrap());
    api.create(&PostParams::default(), &pod).await.unwrap();
    let p = wait_pod(&api, "pulled", "Running", |p| phase(p) == "Running").await;
    let s = init(&p, 0);
    assert_eq!(s["state"]["terminated"]["reason"], "Completed", "{s}");
    assert!(
        s["imageID"]
            .as_str()
            .is_some_and(|id| id.starts_with(&format!("{}/tools/pulled-sh@sha256:", registry.addr))),
        "{s}"
    );
    let log = log_of(&plane, "pulled", "fetch");
    // As real root the kubelet runs it as the image's user; under
    // `unshare -r` as itself.
    let real_root = std::fs::read_to_string("/proc/self/uid_map")
        .is_ok_and(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]);
    let expected = if real_root {
        "pulled as 65534"
    } else {
        "pulled as "
    };
    assert!(log.contains(expected), "{log}");
    // What the init container wrote is on the claim etcd got.
    let dirs = plane.kubelet().claim_dirs(NS, "data-pulled");
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let fetched = std::fs::read_to_string(dirs[0].join("fetched")).unwrap();
    assert!(fetched.starts_with(expected), "{fetched}");
    if real_root {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&dirs[0]).unwrap();
        assert_eq!(
            (m.gid(), m.mode() & 0o7777),
            (2000, 0o2775),
            "fsGroup on the claim"
        );
    }
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while !dirs[0].join("data/member").is_dir() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "etcd wrote no data to {}",
            dirs[0].display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    finish(plane).await;
}

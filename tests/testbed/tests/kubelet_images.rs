//! Image pulls: the local kubelet pulls a container's image from a real
//! registry (the CNCF distribution registry on loopback), unpacks it and
//! runs its entrypoint, as a kubelet and its runtime do. The image is built
//! here: one gzip tar layer holding the registry's own static binary and a
//! config file, pushed with oci-client. Run under scripts/in-namespace.sh.

mod common;

use std::io::Write;
use std::path::Path;

use common::{EVENTUALLY, wait_pod};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use oci_client::client::{
    Certificate, CertificateEncoding, ClientConfig, ClientProtocol, Config, ImageLayer,
};
use oci_client::secrets::RegistryAuth;
use serde_json::{Value, json};
use steward_testbed::control_plane::ControlPlane;
use steward_testbed::kubelet::images::RegistryAccess;
use steward_testbed::registry::Registry;

const NS: &str = "images";

/// The image: `/bin/registry` (a static Go binary), its config in
/// `/etc/distribution`, run as nobody from that WorkingDir.
struct Image {
    layer: Vec<u8>,
    diff_id: String,
}

fn build_layer(program: &Path) -> Image {
    let mut tar = tar::Builder::new(Vec::new());
    let dir = |tar: &mut tar::Builder<Vec<u8>>, path: &str| {
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        tar.append_data(&mut h, path, std::io::empty()).unwrap();
    };
    dir(&mut tar, "bin/");
    let bytes = std::fs::read(program).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_uid(0);
    h.set_gid(0);
    h.set_mode(0o755);
    h.set_size(bytes.len() as u64);
    tar.append_data(&mut h, "bin/registry", bytes.as_slice())
        .unwrap();
    dir(&mut tar, "etc/");
    dir(&mut tar, "etc/distribution/");
    let config = b"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: /var/lib/registry\nhttp:\n  addr: :5000\n";
    let mut h = tar::Header::new_gnu();
    h.set_uid(0);
    h.set_gid(0);
    h.set_mode(0o644);
    h.set_size(config.len() as u64);
    tar.append_data(&mut h, "etc/distribution/config.yml", &config[..])
        .unwrap();
    let raw = tar.into_inner().unwrap();
    let diff_id = format!("sha256:{}", sha256(&raw));
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&raw).unwrap();
    Image {
        layer: gz.finish().unwrap(),
        diff_id,
    }
}

fn sha256(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

fn oci(registry: &Registry) -> (oci_client::Client, RegistryAuth) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (protocol, roots, auth) = match &registry.private {
        None => (ClientProtocol::Http, vec![], RegistryAuth::Anonymous),
        Some(p) => (
            ClientProtocol::Https,
            vec![Certificate {
                encoding: CertificateEncoding::Pem,
                data: p.ca_pem.as_bytes().to_vec(),
            }],
            RegistryAuth::Basic(p.username.clone(), p.password.clone()),
        ),
    };
    let client = oci_client::Client::try_from(ClientConfig {
        protocol,
        extra_root_certificates: roots,
        ..ClientConfig::default()
    })
    .unwrap();
    (client, auth)
}

/// Pushes the image under `reference` with `label` in its Env (so two
/// pushes can differ) and returns its manifest digest.
async fn push(registry: &Registry, image: &Image, reference: &str, label: &str) -> String {
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": ["/bin/registry"],
            "Cmd": ["serve", "config.yml"],
            "Env": [
                "PATH=/bin",
                "OTEL_TRACES_EXPORTER=none",
                "REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY=/tmp/data",
                format!("LABEL={label}"),
            ],
            "User": "65534:65534",
            "WorkingDir": "/etc/distribution",
        },
        "rootfs": {"type": "layers", "diff_ids": [image.diff_id]},
    });
    let (client, auth) = oci(registry);
    let r: oci_client::Reference = reference.parse().unwrap();
    client
        .push(
            &r,
            &[ImageLayer::oci_v1_gzip(image.layer.clone(), None)],
            Config::oci_v1(serde_json::to_vec(&config).unwrap(), None),
            &auth,
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("pushing {reference}: {e}"));
    client.fetch_manifest_digest(&r, &auth).await.unwrap()
}

fn pod(name: &str, image: &str, extra: Value) -> Pod {
    let mut container = json!({
        "name": "registry",
        "image": image,
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "REGISTRY_HTTP_ADDR", "value": "$(POD_IP):5000"},
        ],
        "readinessProbe": {"httpGet": {"path": "/v2/", "port": 5000}, "periodSeconds": 1},
        "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}],
    });
    let mut spec = json!({
        "restartPolicy": "Always",
        "containers": [],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
    });
    for (k, v) in extra.as_object().unwrap() {
        if k == "imagePullSecrets" {
            spec[k] = v.clone();
        } else {
            container[k] = v.clone();
        }
    }
    spec["containers"] = json!([container]);
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": NS}, "spec": spec}))
        .unwrap()
}

async fn start(registries: &[&Registry]) -> (ControlPlane, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let access: Vec<RegistryAccess> = registries.iter().map(|r| RegistryAccess::of(r)).collect();
    let plane = ControlPlane::start_with(dir.path(), |k| k.registries = access)
        .await
        .unwrap_or_else(|e| panic!("the control plane did not start: {e:#}"));
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(plane.client())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    (plane, dir)
}

fn status(p: &Pod) -> Value {
    let s = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first());
    serde_json::to_value(s).unwrap()
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Every waiting (reason, message) the Pod's status shows, in order,
/// until `enough` says so.
async fn waiting_sequence(
    client: &Client,
    name: &str,
    enough: impl Fn(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, cfg).boxed();
    let mut seen: Vec<(String, String)> = Vec::new();
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while !enough(&seen) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let ev = tokio::time::timeout(left, events.next())
            .await
            .unwrap_or_else(|_| panic!("pod {name}: waiting states seen: {seen:#?}"));
        let pods = match ev {
            Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p))) => vec![p],
            _ => continue,
        };
        for p in pods {
            let w = &status(&p)["state"]["waiting"];
            if let Some(reason) = w["reason"].as_str() {
                let entry = (
                    reason.to_owned(),
                    w["message"].as_str().unwrap_or("").to_owned(),
                );
                if seen.last() != Some(&entry) {
                    seen.push(entry);
                }
            }
        }
    }
    seen
}

/// One plain HTTP/1.1 exchange; the whole answer.
async fn http(addr: &str, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap()
        .trim_end()
        .to_owned()
}

/// The effective uid of `pid`.
fn uid_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// Whether this process is root over every uid (then containers run as
/// their image's user; inside `unshare -r` they cannot).
fn all_ids_mapped() -> bool {
    uid_of(std::process::id()) == 0
        && std::fs::read_to_string("/proc/self/uid_map")
            .is_ok_and(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"])
}

async fn finish(plane: ControlPlane) {
    let pids = plane.kubelet().started_pids();
    plane.shutdown().await;
    for pid in pids {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            state.is_empty() || state.contains(") Z"),
            "container PID {pid} outlived the control plane"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pulled_image_runs_its_entrypoint_as_its_user_and_failed_pulls_back_off() {
    let bins = steward_testbed::kube_bin::locate().unwrap();
    let program = bins
        .registry
        .clone()
        .expect("scripts/ensure-kube.sh builds `registry`");
    let registry = Registry::start(&bins).await.unwrap();
    let image = build_layer(&program);
    let v1 = registry.reference("tools/registry", "v1");
    let digest = push(&registry, &image, &v1, "one").await;
    let (plane, _dir) = start(&[&registry]).await;
    let client = plane.client();
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();

    // Pulled, unpacked and run: Ready means the registry in the image
    // answers on the Pod's IP (its config read from the WorkingDir in the
    // rootfs, its storage in the emptyDir, as uid 65534).
    api.create(&pp, &pod("web", &v1, json!({}))).await.unwrap();
    let p = wait_pod(&api, "web", "Ready", ready).await;
    let cs = status(&p);
    assert_eq!(cs["image"], v1.as_str(), "{cs}");
    assert_eq!(
        cs["imageID"],
        format!("{}/tools/registry@{digest}", registry.addr),
        "{cs}"
    );
    let info = plane.kubelet().pod(NS, "web").unwrap();
    let pid = info.pid.unwrap();
    assert_eq!(comm(pid), "registry", "named after its program");
    let hex = digest.trim_start_matches("sha256:");
    let rootfs = plane
        .kubelet()
        .root()
        .join(format!("images/sha256-{hex}/rootfs"));
    assert!(
        rootfs.join("bin/registry").is_file(),
        "{}",
        rootfs.display()
    );
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert_eq!(exe, rootfs.join("bin/registry"), "runs the image's program");
    if all_ids_mapped() {
        assert_eq!(uid_of(pid), 65534, "the image's User");
    } else {
        assert_eq!(uid_of(pid), uid_of(std::process::id()));
    }
    // An upload makes the registry write to its storage, /tmp/data in its
    // emptyDir: writable by the image's user.
    let answer = http(
        &format!("{}:5000", info.ip),
        "POST /v2/probe/blobs/uploads/ HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    let pods = plane.kubelet().root().join("pods");
    let stored = std::fs::read_dir(&pods).unwrap().flatten().any(|d| {
        d.path()
            .join("volumes/scratch/data/docker/registry/v2/repositories/probe")
            .is_dir()
    });
    assert!(
        stored,
        "the registry stores under /tmp/data, in its emptyDir"
    );

    // imagePullPolicy Always resolves the tag again at every start: a new
    // push under the same tag runs after a restart.
    let moving = registry.reference("tools/registry", "moving");
    let first = push(&registry, &image, &moving, "first").await;
    api.create(
        &pp,
        &pod("always", &moving, json!({"imagePullPolicy": "Always"})),
    )
    .await
    .unwrap();
    let p = wait_pod(&api, "always", "Ready", ready).await;
    assert!(
        status(&p)["imageID"].as_str().unwrap().ends_with(&first),
        "{}",
        status(&p)
    );
    let second = push(&registry, &image, &moving, "second").await;
    assert_ne!(first, second);
    plane.kubelet().kill(NS, "always").await.unwrap();
    let p = wait_pod(&api, "always", "restarted on the new image", |p| {
        ready(p)
            && status(p)["imageID"]
                .as_str()
                .unwrap_or("")
                .ends_with(&second)
    })
    .await;
    assert_eq!(status(&p)["restartCount"], 1);

    // A tag the registry lacks: ErrImagePull naming the reference and the
    // registry, then ImagePullBackOff, then ErrImagePull on the retry.
    let missing = registry.reference("tools/registry", "missing");
    api.create(&pp, &pod("missing", &missing, json!({})))
        .await
        .unwrap();
    let seen = waiting_sequence(&client, "missing", |s| {
        let reasons: Vec<&str> = s.iter().map(|(r, _)| r.as_str()).collect();
        reasons
            .windows(3)
            .any(|w| w == ["ErrImagePull", "ImagePullBackOff", "ErrImagePull"])
    })
    .await;
    let (_, message) = seen.iter().find(|(r, _)| r == "ErrImagePull").unwrap();
    assert!(message.contains(&format!("{missing:?}")), "{message}");
    assert!(message.contains("not found"), "{message}");
    assert!(message.contains(&registry.addr), "{message}");
    let (_, backoff) = seen.iter().find(|(r, _)| r == "ImagePullBackOff").unwrap();
    assert!(backoff.contains("Back-off pulling image"), "{backoff}");
    let p = api.get("missing").await.unwrap();
    assert_eq!(status(&p)["imageID"], "", "nothing was pulled");

    // Never: only what is present. v1 is; an unpulled tag is not.
    api.create(
        &pp,
        &pod("never-ok", &v1, json!({"imagePullPolicy": "Never"})),
    )
    .await
    .unwrap();
    let unpulled = registry.reference("tools/registry", "unpulled");
    push(&registry, &image, &unpulled, "unpulled").await;
    api.create(
        &pp,
        &pod("never", &unpulled, json!({"imagePullPolicy": "Never"})),
    )
    .await
    .unwrap();
    wait_pod(&api, "never-ok", "Ready", ready).await;
    let p = wait_pod(&api, "never", "ErrImageNeverPull", |p| {
        status(p)["state"]["waiting"]["reason"] == "ErrImageNeverPull"
    })
    .await;
    let msg = status(&p)["state"]["waiting"]["message"].clone();
    assert!(
        msg.as_str()
            .unwrap()
            .contains("is not present with pull policy of Never"),
        "{msg}"
    );

    finish(plane).await;
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_registry_is_pulled_with_the_pull_secret_and_refuses_a_wrong_one() {
    let bins = steward_testbed::kube_bin::locate().unwrap();
    let program = bins
        .registry
        .clone()
        .expect("scripts/ensure-kube.sh builds `registry`");
    let registry = Registry::start_private(&bins).await.unwrap();
    let private = registry.private.as_ref().unwrap();
    let image = build_layer(&program);
    let reference = registry.reference("team/registry", "v1");
    let digest = push(&registry, &image, &reference, "private").await;
    let (plane, _dir) = start(&[&registry]).await;
    let client = plane.client();
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();

    let secret = |name: &str, config: String| -> Secret {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": config},
        }))
        .unwrap()
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    secrets
        .create(
            &pp,
            &secret("pull", private.docker_config_json(&registry.addr)),
        )
        .await
        .unwrap();
    let wrong_password = "not-the-password-4711";
    let wrong = json!({"auths": {registry.addr.clone(): {
        "username": private.username, "password": wrong_password,
    }}});
    secrets
        .create(&pp, &secret("wrong", wrong.to_string()))
        .await
        .unwrap();

    api.create(
        &pp,
        &pod(
            "good",
            &reference,
            json!({"imagePullSecrets": [{"name": "pull"}]}),
        ),
    )
    .await
    .unwrap();
    api.create(
        &pp,
        &pod(
            "bad",
            &reference,
            // Always: under IfNotPresent the image "good" pulled would run
            // with no check of credentials, as on a real node.
            json!({"imagePullSecrets": [{"name": "wrong"}], "imagePullPolicy": "Always"}),
        ),
    )
    .await
    .unwrap();
    api.create(
        &pp,
        &pod(
            "anonymous",
            &reference,
            json!({"imagePullPolicy": "Always"}),
        ),
    )
    .await
    .unwrap();

    let p = wait_pod(&api, "good", "Ready", ready).await;
    assert_eq!(
        status(&p)["imageID"],
        format!("{}/team/registry@{digest}", registry.addr)
    );
    let pid = plane.kubelet().pod(NS, "good").unwrap().pid.unwrap();
    assert_eq!(comm(pid), "registry");

    let waiting = |p: &Pod| status(p)["state"]["waiting"]["reason"] == "ErrImagePull";
    let p = wait_pod(&api, "bad", "ErrImagePull", waiting).await;
    let msg = status(&p)["state"]["waiting"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(msg.contains(&format!("{reference:?}")), "{msg}");
    assert!(
        msg.contains(&format!(
            "the registry {} refused the credentials in Secret {NS}/wrong",
            registry.addr
        )),
        "{msg}"
    );
    let p = wait_pod(&api, "anonymous", "ErrImagePull", waiting).await;
    let msg = status(&p)["state"]["waiting"]["message"].clone();
    assert!(
        msg.as_str().unwrap().contains("refused anonymous access"),
        "{msg}"
    );

    // Neither password shows anywhere in any Pod's status, at any time
    // (ImagePullBackOff repeats the message).
    wait_pod(&api, "bad", "ImagePullBackOff", |p| {
        status(p)["state"]["waiting"]["reason"] == "ImagePullBackOff"
    })
    .await;
    for p in api.list(&Default::default()).await.unwrap() {
        let text = serde_json::to_string(&p.status).unwrap();
        assert!(!text.contains(&private.password), "{text}");
        assert!(!text.contains(wrong_password), "{text}");
    }

    finish(plane).await;
    registry.stop().await;
}

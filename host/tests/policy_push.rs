//! `etcd-steward policy push`, the real binary, on the test control plane
//! and the test registry (the CNCF distribution registry, read back with
//! the real oras): the printed EtcdStatusPolicy, applied with the real
//! kubectl, runs. A component too large for a ConfigMap is refused before
//! anything is sent, and goes to the registry instead.

mod support;

use std::process::Output;

use etcd_steward::api::EtcdStatusPolicy;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use support::*;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-steward");

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// `etcd-steward policy push ARGS` as a user runs it, with the test
/// control plane's kubeconfig.
async fn push(env: &Env, args: &[&str]) -> Output {
    tokio::process::Command::new(BIN)
        .args(["policy", "push"])
        .args(args)
        .env("KUBECONFIG", env.plane.kubeconfig_path())
        .env_remove("RUST_LOG")
        .output()
        .await
        .expect("the binary runs")
}

/// The EtcdStatusPolicy a successful push printed, and the same applied
/// with kubectl.
async fn apply_printed(env: &Env, out: &Output, file: &str) -> EtcdStatusPolicy {
    assert!(
        out.status.success(),
        "push failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout.clone()).unwrap();
    let printed: EtcdStatusPolicy = serde_saphyr::from_str(&yaml)
        .unwrap_or_else(|e| panic!("stdout is not an EtcdStatusPolicy ({e}):\n{yaml}"));
    let path = env.dir().join(file);
    std::fs::write(&path, &yaml).unwrap();
    kubectl(&env.plane, &["apply", "-f", path.to_str().unwrap()]).await;
    printed
}

async fn wait_ready(env: &Env, name: &str) -> EtcdStatusPolicy {
    let policies: Api<EtcdStatusPolicy> = Api::all(env.client.clone());
    let start = std::time::Instant::now();
    loop {
        let p = policies.get(name).await.expect("reading the policy");
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.condition("Ready"))
            .is_some_and(|c| c.status == "True");
        if ready {
            return p;
        }
        assert!(
            start.elapsed() < EVENTUALLY,
            "{name} never became Ready; status:\n{}",
            serde_json::to_string_pretty(&p.status).unwrap()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// `oras manifest fetch` of `reference`: what oras reads there.
async fn oras_manifest(env: &Env, reference: &str) -> serde_json::Value {
    let oras = env
        .plane
        .binaries()
        .oras
        .clone()
        .expect("oras beside kube-apiserver (scripts/ensure-kube.sh builds it)");
    let out = tokio::process::Command::new(oras)
        .args(["manifest", "fetch", "--plain-http", reference])
        .env("HOME", env.dir())
        .output()
        .await
        .expect("running oras");
    assert!(
        out.status.success(),
        "oras manifest fetch {reference}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a manifest")
}

#[test]
fn a_pushed_policy_is_pinned_applied_and_runs() {
    run(async {
        let env = Env::start().await;
        let registry = steward_testbed::registry::Registry::start(env.plane.binaries())
            .await
            .expect("the registry starts");
        let wasm = env!("STEWARD_EXAMPLE_RAFT_LAG_WASM");
        let bytes = std::fs::read(wasm).unwrap();
        let pin = sha256(&bytes);

        // Into a ConfigMap of the operator's namespace.
        let out = push(&env, &["--configmap", "raft-lag", wasm]).await;
        let printed = apply_printed(&env, &out, "raft-lag.yaml").await;
        assert_eq!(printed.metadata.name.as_deref(), Some("raft-lag"));
        assert_eq!(printed.spec.digest, pin);
        let cm = Api::<ConfigMap>::namespaced(env.client.clone(), OPERATOR_NS)
            .get("raft-lag")
            .await
            .expect("the ConfigMap was written");
        assert_eq!(cm.binary_data.unwrap()["policy.wasm"].0, bytes);
        assert!(
            cm.metadata.annotations.unwrap_or_default().is_empty(),
            "no last-applied annotation: it would cap the component at 256 KiB"
        );
        let p = wait_ready(&env, "raft-lag").await;
        assert_eq!(p.status.unwrap().digest.as_deref(), Some(pin.as_str()));
        // The columns docs/api.md shows.
        let table = kubectl(&env.plane, &["get", "esp", "raft-lag"]).await;
        let mut lines = table
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>());
        assert_eq!(
            lines.next().unwrap(),
            [
                "NAME", "READY", "REASON", "VERSION", "CLUSTERS", "FAILING", "AGE"
            ]
        );
        assert_eq!(lines.next().unwrap()[..3], ["raft-lag", "True", "Loaded"]);
        let wide = kubectl(&env.plane, &["get", "esp", "raft-lag", "-o", "wide"]).await;
        let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(header[6..9], ["POLICY", "DIGEST", "DRIFTED"], "{wide}");

        // Pushing again replaces it in place.
        let again = push(&env, &["--configmap", "raft-lag", wasm]).await;
        assert!(
            again.status.success(),
            "{}",
            String::from_utf8_lossy(&again.stderr)
        );

        // Into the registry, under the layout oras pushes and reads.
        let reference = registry.reference("policies/raft-lag", "v1");
        let out = push(
            &env,
            &[
                "--oci",
                &reference,
                "--insecure",
                "--name",
                "raft-lag-oci",
                wasm,
            ],
        )
        .await;
        let printed = apply_printed(&env, &out, "raft-lag-oci.yaml").await;
        assert_eq!(printed.spec.digest, pin);
        let oci = printed.spec.source.oci.as_ref().expect("an OCI source");
        assert_eq!(
            (oci.reference.as_str(), oci.insecure),
            (reference.as_str(), true)
        );
        let p = wait_ready(&env, "raft-lag-oci").await;
        assert_eq!(p.status.unwrap().digest.as_deref(), Some(pin.as_str()));
        let manifest = oras_manifest(&env, &reference).await;
        assert_eq!(
            manifest["config"]["mediaType"],
            steward_testbed::registry::WASM_CONFIG_MEDIA_TYPE
        );
        assert_eq!(
            manifest["layers"][0]["mediaType"],
            steward_testbed::registry::WASM_LAYER_MEDIA_TYPE
        );
        assert_eq!(manifest["layers"][0]["digest"], pin.as_str());

        // A component the size of a Python or JavaScript one: refused for a
        // ConfigMap before anything is sent, pushed to the registry.
        let big = env.dir().join("big.wasm");
        let mut component = b"\0asm\x0d\0\x01\0".to_vec();
        component.resize(3 << 20, 0);
        std::fs::write(&big, &component).unwrap();
        let big = big.to_str().unwrap();
        let refused = push(&env, &["--configmap", "big", big]).await;
        assert!(!refused.status.success());
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains("push it to a registry with --oci"), "{said}");
        assert!(refused.stdout.is_empty(), "no policy printed for it");
        let missing = Api::<ConfigMap>::namespaced(env.client.clone(), OPERATOR_NS)
            .get_opt("big")
            .await
            .unwrap();
        assert!(missing.is_none(), "nothing was sent");
        let big_ref = registry.reference("policies/big", "v1");
        let pushed = push(&env, &["--oci", &big_ref, "--insecure", big]).await;
        assert!(
            pushed.status.success(),
            "{}",
            String::from_utf8_lossy(&pushed.stderr)
        );
        let manifest = oras_manifest(&env, &big_ref).await;
        assert_eq!(manifest["layers"][0]["digest"], sha256(&component).as_str());
        assert_eq!(manifest["layers"][0]["size"], component.len());

        registry.stop().await;
        env.shutdown().await;
    });
}

/// Without a registry or a cluster: a file that is not a component is
/// refused, whatever the destination.
#[test]
fn only_a_component_is_pushed() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("module.wasm");
    std::fs::write(&module, b"\0asm\x01\0\0\0").unwrap();
    let out = std::process::Command::new(BIN)
        .args(["policy", "push", "--oci", "127.0.0.1:9/p:v1", "--insecure"])
        .arg(&module)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("core WebAssembly module, not a component"),
        "{said}"
    );
    assert!(out.stdout.is_empty(), "no policy printed for it");
}

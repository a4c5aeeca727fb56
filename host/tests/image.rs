//! The release artifacts, built by the scripts `make image` and `make
//! chart` run, pushed to the real CNCF distribution registry: the image is
//! reproducible and says what it is; the chart is an OCI artifact helm
//! installs from; bad input gets a clear message.
//!
//! The image here ships this test build's binary (`BIN=`), as the
//! in-cluster tests do; `make image` ships the static release build
//! (docs/benchmarks.md has its size).

use std::process::{Command, Output};

use steward_testbed::registry::Registry;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-steward");
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn script(name: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(steward_testbed::repo::root().join("scripts").join(name));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the script runs")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn crane(args: &[&str]) -> String {
    let crane = std::env::var("ETCD_STEWARD_CRANE")
        .expect("ETCD_STEWARD_CRANE names crane (run the tests through `make test`)");
    let o = Command::new(crane).args(args).output().unwrap();
    assert!(o.status.success(), "crane {args:?}: {}", text(&o).1);
    text(&o).0
}

fn registry() -> (tokio::runtime::Runtime, Registry) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let bins = steward_testbed::kube_bin::locate().unwrap();
    let registry = rt.block_on(Registry::start(&bins)).unwrap();
    (rt, registry)
}

fn build_image(reference: &str) -> Output {
    script(
        "build-image.sh",
        &[reference],
        &[("BIN", BIN), ("INSECURE", "1")],
    )
}

#[test]
fn two_builds_of_one_commit_give_one_image_that_says_what_it_is() {
    let (_rt, registry) = registry();
    let reference = registry.reference("etcd-steward", VERSION);
    let first = build_image(&reference);
    let (digest, err) = text(&first);
    assert!(first.status.success(), "{err}");
    assert!(
        digest.starts_with(&format!("{}/etcd-steward@sha256:", registry.addr)),
        "{digest}"
    );
    let second = build_image(&reference);
    assert!(second.status.success(), "{}", text(&second).1);
    assert_eq!(text(&second).0, digest, "reproducible");

    let config: serde_json::Value =
        serde_json::from_str(&crane(&["config", "--insecure", &digest])).unwrap();
    let c = &config["config"];
    assert_eq!(c["User"], "65532:65532", "{config}");
    assert_eq!(
        c["Entrypoint"],
        serde_json::json!(["/usr/local/bin/etcd-steward"])
    );
    assert_eq!(c["Cmd"], serde_json::json!(["run"]));
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(steward_testbed::repo::root())
        .output()
        .unwrap();
    let labels = &c["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.revision"],
        String::from_utf8_lossy(&head.stdout).trim()
    );
    assert_eq!(labels["org.opencontainers.image.version"], VERSION);
    assert!(labels["org.opencontainers.image.source"].is_string());

    // One layer; its files, owners and modes.
    let manifest: serde_json::Value =
        serde_json::from_str(&crane(&["manifest", "--insecure", &digest])).unwrap();
    assert_eq!(
        manifest["layers"].as_array().unwrap().len(),
        1,
        "{manifest}"
    );
    let dir = tempfile::tempdir().unwrap();
    let fs = dir.path().join("fs.tar");
    crane(&["export", "--insecure", &digest, fs.to_str().unwrap()]);
    let listing = Command::new("tar")
        .args(["-tvf", fs.to_str().unwrap(), "--numeric-owner"])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    for (mode, owner, path) in [
        ("-rwxr-xr-x", "0/0", "usr/local/bin/etcd-steward"),
        ("-rw-r--r--", "0/0", "etc/ssl/certs/ca-certificates.crt"),
        ("-rw-r--r--", "0/0", "etc/passwd"),
        ("drwx------", "65532/65532", "home/nonroot"),
        ("drwxrwxrwt", "0/0", "tmp"),
    ] {
        assert!(
            listing.lines().any(|l| l.starts_with(mode)
                && l.contains(owner)
                && l.trim_end().trim_end_matches('/').ends_with(path)),
            "{mode} {owner} {path} in\n{listing}"
        );
    }
    let exported = Command::new("tar")
        .args(["-xOf", fs.to_str().unwrap(), "usr/local/bin/etcd-steward"])
        .output()
        .unwrap();
    assert!(
        exported.stdout == std::fs::read(BIN).unwrap(),
        "the image ships the binary it was given"
    );
}

#[test]
fn the_chart_is_an_oci_artifact_helm_reads_and_bad_references_are_named() {
    let (_rt, registry) = registry();
    let pushed = script("push-chart.sh", &[&registry.addr], &[("PLAIN_HTTP", "1")]);
    let (reference, err) = text(&pushed);
    assert!(pushed.status.success(), "{err}");
    assert!(
        reference.starts_with(&format!(
            "oci://{}/charts/etcd-steward:{VERSION}@sha256:",
            registry.addr
        )),
        "{reference}"
    );
    let helm = steward_testbed::kube_bin::locate()
        .unwrap()
        .helm
        .expect("helm beside kube-apiserver");
    let chart = format!("oci://{}/charts/etcd-steward", registry.addr);
    let show = Command::new(&helm)
        .args([
            "show",
            "chart",
            &chart,
            "--version",
            VERSION,
            "--plain-http",
        ])
        .output()
        .unwrap();
    let (shown, err) = text(&show);
    assert!(show.status.success(), "{err}");
    assert!(shown.contains(&format!("appVersion: {VERSION}")), "{shown}");
    assert!(shown.contains(&format!("version: {VERSION}")), "{shown}");

    // A chart version that does not exist.
    let missing = Command::new(&helm)
        .args([
            "show",
            "chart",
            &chart,
            "--version",
            "9.9.9",
            "--plain-http",
        ])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let err = text(&missing).1;
    assert!(err.contains("9.9.9") && err.contains("not found"), "{err}");

    // An image tag the registry lacks, and a registry that is not there.
    let absent = format!("{}/etcd-steward:0.0.0-absent", registry.addr);
    let o = Command::new(std::env::var("ETCD_STEWARD_CRANE").unwrap())
        .args(["digest", "--insecure", &absent])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).1.contains("MANIFEST_UNKNOWN"), "{}", text(&o).1);
    let o = build_image("127.0.0.1:9/etcd-steward:0.1.0");
    assert!(!o.status.success());
    let err = text(&o).1;
    assert!(
        err.contains("crane append failed") && err.contains("127.0.0.1:9"),
        "{err}"
    );
}

#[test]
fn a_registry_that_refuses_the_credentials_is_named() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let bins = steward_testbed::kube_bin::locate().unwrap();
    let registry = rt.block_on(Registry::start_private(&bins)).unwrap();
    // No login (an empty docker config): the private registry answers
    // 401, and the script says so.
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &registry.private.as_ref().unwrap().ca_pem).unwrap();
    let o = script(
        "build-image.sh",
        &[&registry.reference("etcd-steward", VERSION)],
        &[
            ("BIN", BIN),
            ("DOCKER_CONFIG", dir.path().to_str().unwrap()),
            ("SSL_CERT_FILE", ca.to_str().unwrap()),
        ],
    );
    assert!(!o.status.success());
    let err = text(&o).1;
    assert!(
        err.contains("crane append failed: the registry refused the credentials"),
        "{err}"
    );
    let password = &registry.private.as_ref().unwrap().password;
    assert!(!err.contains(password.as_str()));
}

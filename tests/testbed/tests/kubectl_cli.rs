//! The real `kubectl` (a client nobody here wrote) against the stand-in:
//! apply, get with printer columns, watch, patch, server-side apply and
//! delete, asserting on what kubectl prints.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use steward_testbed::ApiServer;

const EVENTUALLY: Duration = Duration::from_secs(20);

fn kubectl_bin() -> PathBuf {
    std::env::var_os("KUBECTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/kubectl"))
}

struct Kubectl {
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Kubectl {
    fn new(server: &ApiServer, dir: &Path) -> Self {
        // A private HOME keeps kubectl's discovery cache per test.
        let home = dir.join("home");
        std::fs::create_dir_all(&home).unwrap();
        Self {
            kubeconfig: server.kubeconfig_path().to_path_buf(),
            home,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(kubectl_bin());
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home)
            .env_remove("KUBECTL_EXTERNAL_DIFF");
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .output()
            .unwrap_or_else(|e| panic!("running kubectl {args:?}: {e}"))
    }

    /// Runs kubectl and returns stdout, failing the test on a non-zero exit.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        stdout
    }

    /// Runs kubectl expecting failure; returns stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} should fail; stdout: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).to_string()
    }
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.kubectl.testbed.io
spec:
  group: kubectl.testbed.io
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wdg]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
    - name: Ready
      type: string
      jsonPath: .status.conditions[?(@.type=="Ready")].status
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1, maximum: 9}
              colour: {type: string}
          status:
            type: object
            properties:
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {type: string}
                    status: {type: string}
"#;

fn widget(name: &str, ns: &str, size: i64) -> String {
    format!(
        "apiVersion: kubectl.testbed.io/v1\nkind: Widget\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  size: {size}\n"
    )
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().to_string()
}

/// The whitespace-separated cells of the output line whose first cells are `prefix`.
fn row(output: &str, prefix: &[&str]) -> Vec<String> {
    output
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|cells| cells.len() >= prefix.len() && cells.iter().zip(prefix).all(|(a, b)| a == b))
        .unwrap_or_else(|| panic!("no row starting {prefix:?} in:\n{output}"))
}

#[test]
fn kubectl_applies_gets_patches_and_deletes_custom_resources() {
    let dir = tempfile::tempdir().unwrap();
    let server = ApiServer::start(dir.path()).unwrap();
    let k = Kubectl::new(&server, dir.path());

    let crd = write(dir.path(), "crd.yaml", CRD);
    let out = k.ok(&["apply", "-f", &crd]);
    assert!(
        out.contains(
            "customresourcedefinition.apiextensions.k8s.io/widgets.kubectl.testbed.io created"
        ),
        "{out}"
    );
    // re-applying unchanged is a no-op kubectl recognises
    let out = k.ok(&["apply", "-f", &crd]);
    assert!(
        out.contains("widgets.kubectl.testbed.io unchanged"),
        "{out}"
    );

    let ns = write(
        dir.path(),
        "ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: other\n",
    );
    assert!(
        k.ok(&["apply", "-f", &ns])
            .contains("namespace/other created")
    );
    let w1 = write(dir.path(), "w1.yaml", &widget("alpha", "default", 3));
    let w2 = write(dir.path(), "w2.yaml", &widget("beta", "other", 5));
    let out = k.ok(&["apply", "-f", &w1]);
    assert!(
        out.contains("widget.kubectl.testbed.io/alpha created"),
        "{out}"
    );
    k.ok(&["apply", "-f", &w2]);

    let out = k.ok(&["get", "widgets", "-A"]);
    let header = row(&out, &["NAMESPACE", "NAME"]);
    assert_eq!(
        header,
        ["NAMESPACE", "NAME", "SIZE", "READY", "AGE"],
        "{out}"
    );
    let alpha = row(&out, &["default", "alpha"]);
    assert_eq!(&alpha[..3], ["default", "alpha", "3"], "{out}");
    assert!(
        alpha[alpha.len() - 1].ends_with('s'),
        "age column like 5s: {out}"
    );
    // no Ready condition yet: an empty cell, so only four cells on the row
    assert_eq!(row(&out, &["other", "beta"]).len(), 4, "{out}");
    assert_eq!(&row(&out, &["other", "beta"])[..3], ["other", "beta", "5"]);

    // the Ready column follows the condition
    k.ok(&[
        "patch",
        "widget",
        "alpha",
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
    ]);
    let out = k.ok(&["get", "wdg", "alpha"]);
    assert_eq!(row(&out, &["alpha"])[..3], ["alpha", "3", "True"], "{out}");

    // client-side apply of a changed file patches the live object
    let w1b = write(dir.path(), "w1b.yaml", &widget("alpha", "default", 4));
    let out = k.ok(&["apply", "-f", &w1b]);
    assert!(
        out.contains("widget.kubectl.testbed.io/alpha configured"),
        "{out}"
    );
    assert_eq!(
        k.ok(&["get", "widget", "alpha", "-o", "jsonpath={.spec.size}"]),
        "4"
    );

    let out = k.ok(&[
        "patch",
        "widget",
        "alpha",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"colour":"blue"}}"#,
    ]);
    assert!(
        out.contains("widget.kubectl.testbed.io/alpha patched"),
        "{out}"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "widget",
            "alpha",
            "-o",
            "jsonpath={.spec.colour}/{.spec.size}"
        ]),
        "blue/4"
    );

    // schema violations come back as kubectl's Invalid error naming the field
    let bad = write(dir.path(), "bad.yaml", &widget("gamma", "default", 42));
    let err = k.fails(&["apply", "-f", &bad]);
    assert!(
        err.contains("spec.size") && err.contains("Invalid"),
        "{err}"
    );

    let ssa = write(dir.path(), "ssa.yaml", &widget("delta", "default", 2));
    let out = k.ok(&["apply", "--server-side", "-f", &ssa]);
    assert!(
        out.contains("widget.kubectl.testbed.io/delta serverside-applied"),
        "{out}"
    );
    let ssa2 = write(dir.path(), "ssa2.yaml", &widget("delta", "default", 6));
    k.ok(&["apply", "--server-side", "-f", &ssa2]);
    assert_eq!(
        k.ok(&["get", "widget", "delta", "-o", "jsonpath={.spec.size}"]),
        "6"
    );
    let managers = k.ok(&[
        "get",
        "widget",
        "delta",
        "--show-managed-fields",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ]);
    assert!(managers.contains("kubectl"), "{managers}");

    let out = k.ok(&["delete", "widget", "alpha"]);
    assert!(
        out.contains("widget.kubectl.testbed.io \"alpha\" deleted"),
        "{out}"
    );
    let err = k.fails(&["get", "widget", "alpha"]);
    assert!(err.contains("NotFound") && err.contains("alpha"), "{err}");
}

#[test]
fn kubectl_get_pods_watch_sees_an_update() {
    let dir = tempfile::tempdir().unwrap();
    let server = ApiServer::start(dir.path()).unwrap();
    let k = Kubectl::new(&server, dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pods: Api<Pod> = rt.block_on(async {
        let client = server.client().await.unwrap();
        let pods: Api<Pod> = Api::default_namespaced(client);
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "watched"}, "spec": {"containers": [{"name": "etcd", "image": "etcd"}]}})).unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        pods
    });

    let out = k.ok(&["get", "pods"]);
    assert_eq!(
        row(&out, &["NAME"]),
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{out}"
    );
    assert_eq!(
        row(&out, &["watched"])[..4],
        ["watched", "0/1", "Pending", "0"],
        "{out}"
    );

    let mut child = k
        .command(&["get", "pods", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |pred: &dyn Fn(&str) -> bool, what: &str| -> String {
        let start = Instant::now();
        while start.elapsed() < EVENTUALLY {
            if let Ok(line) = lines.recv_timeout(Duration::from_millis(200))
                && pred(&line)
            {
                return line;
            }
        }
        panic!("kubectl get pods -w never printed {what}");
    };
    wait_for(
        &|l| l.starts_with("watched") && l.contains("Pending"),
        "the initial Pending row",
    );

    rt.block_on(async {
        let status = json!({"status": {"phase": "Running", "podIP": "127.0.0.2", "containerStatuses": [
            {"name": "etcd", "ready": true, "restartCount": 1, "image": "etcd", "imageID": "", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
        ]}});
        pods.patch_status("watched", &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    });
    let line = wait_for(
        &|l| l.starts_with("watched") && l.contains("Running"),
        "the Running update",
    );
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cells[..4], ["watched", "1/1", "Running", "1"], "{line}");

    let described = k.ok(&["describe", "pod", "watched"]);
    assert!(
        described.contains("watched") && described.contains("Running"),
        "{described}"
    );

    // client-side apply of a built-in type goes through strategic merge
    let pod = |image: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: applied\n  labels: {{app: etcd}}\nspec:\n  containers:\n  - name: etcd\n    image: {image}\n    args: [--name, one]\n  - name: sidecar\n    image: busybox\n"
        )
    };
    let p1 = write(dir.path(), "p1.yaml", &pod("etcd:3.5.1"));
    assert!(k.ok(&["apply", "-f", &p1]).contains("pod/applied created"));
    let p2 = write(dir.path(), "p2.yaml", &pod("etcd:3.5.2"));
    assert!(
        k.ok(&["apply", "-f", &p2])
            .contains("pod/applied configured")
    );
    let images = k.ok(&[
        "get",
        "pod",
        "applied",
        "-o",
        "jsonpath={.spec.containers[*].image} {.spec.containers[0].args}",
    ]);
    assert_eq!(images, r#"etcd:3.5.2 busybox ["--name","one"]"#);
    let wide = k.ok(&["get", "pods", "-o", "wide", "-l", "app=etcd"]);
    assert_eq!(
        row(&wide, &["NAME"]),
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"],
        "{wide}"
    );
    assert_eq!(
        row(&wide, &["applied"])[..3],
        ["applied", "0/2", "Pending"],
        "{wide}"
    );

    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
}

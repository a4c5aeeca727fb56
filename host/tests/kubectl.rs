//! The real kubectl against the real kube-apiserver, with the operator
//! running: what a user types after `kubectl apply -f crds/ -f deploy/`.
//! Printer columns, `describe`, core/v1 Events, `wait`, server-side apply
//! and `explain` from the published OpenAPI.

mod support;

use support::*;

const CLUSTER: &str = "\
apiVersion: etcd.steward.dev/v1alpha1
kind: EtcdCluster
metadata:
  name: shown
  namespace: default
spec:
  replicas: 3
  version: 3.6.17
";

/// The cells of the first line starting with `prefix`.
fn row(output: &str, prefix: &str) -> Vec<String> {
    output
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{output}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[test]
fn kubectl_applies_waits_lists_describes_and_explains_a_cluster() {
    run(async {
        let env = Env::start().await;
        let file = env.dir().join("cluster.yaml");
        std::fs::write(&file, CLUSTER).unwrap();
        let file = file.display().to_string();
        let k = |args: &'static [&'static str]| kubectl(&env.plane, args);

        let applied = kubectl(&env.plane, &["apply", "--server-side", "-f", &file]).await;
        assert!(
            applied.contains("etcdcluster.etcd.steward.dev/shown serverside-applied"),
            "{applied}"
        );
        let waited = kubectl(
            &env.plane,
            &[
                "wait",
                "--for=condition=Ready",
                "--timeout=300s",
                "etcdcluster/shown",
            ],
        )
        .await;
        assert!(
            waited.contains("etcdcluster.etcd.steward.dev/shown condition met"),
            "{waited}"
        );
        // Ready mirrors Available; wait for the ready count to catch up too.
        env.wait_available("shown", 3).await;

        let listed = k(&["get", "etcdclusters"]).await;
        assert_eq!(
            row(&listed, "NAME"),
            [
                "NAME",
                "VERSION",
                "REPLICAS",
                "READY",
                "AVAILABLE",
                "VERIFIED",
                "AGE"
            ],
            "{listed}"
        );
        assert_eq!(
            row(&listed, "shown")[..5],
            ["shown", "3.6.17", "3", "3", "True"],
            "{listed}"
        );
        let members = k(&["get", "etcdmembers"]).await;
        assert_eq!(
            row(&members, "NAME")[..4],
            ["NAME", "CLUSTER", "VERSION", "READY"],
            "{members}"
        );
        assert_eq!(
            members.lines().filter(|l| l.starts_with("shown-")).count(),
            3,
            "{members}"
        );

        let described = k(&["describe", "etcdcluster", "shown"]).await;
        for needle in ["Conditions:", "Available", "Events:", "etcd-steward"] {
            assert!(described.contains(needle), "no {needle:?} in:\n{described}");
        }

        // The operator's events.k8s.io Events, read back as core/v1.
        let events = kubectl(
            &env.plane,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.kind=EtcdCluster,involvedObject.name=shown",
                "-o",
                "custom-columns=REASON:.reason,SOURCE:.reportingComponent",
            ],
        )
        .await;
        let available_reason = env
            .clusters()
            .get("shown")
            .await
            .unwrap()
            .status
            .unwrap()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Available")
            .unwrap()
            .reason;
        assert!(
            events
                .lines()
                .any(|l| l.starts_with(&available_reason) && l.contains("etcd-steward")),
            "no {available_reason} event from etcd-steward in:\n{events}"
        );

        // Re-applying the same file changes nothing; a new replica count does.
        let again = kubectl(&env.plane, &["apply", "--server-side", "-f", &file]).await;
        assert!(again.contains("serverside-applied"), "{again}");
        let replicas = k(&[
            "get",
            "etcdcluster",
            "shown",
            "-o",
            "jsonpath={.spec.replicas}",
        ])
        .await;
        assert_eq!(replicas, "3");

        let explained = k(&["explain", "etcdcluster.spec"]).await;
        for needle in [
            "GROUP:      etcd.steward.dev",
            "KIND:       EtcdCluster",
            "replicas",
            "version",
        ] {
            assert!(explained.contains(needle), "no {needle:?} in:\n{explained}");
        }
        let field = k(&["explain", "etcdcluster.spec.replicas"]).await;
        assert!(field.contains("FIELD: replicas <integer>"), "{field}");
        assert!(field.contains("0 pauses the cluster"), "{field}");
        env.shutdown().await;
    });
}

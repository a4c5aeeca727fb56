//! What the chart gives a platform team to monitor with. The Grafana
//! dashboard asks only for what the operator exports: every metric a query
//! names is a family the operator's /metrics serves, and every label a
//! query selects or groups by is one its series carry. The alerts pass the
//! real `promtool check rules`, as a file and as the rendered
//! PrometheusRule, and each has a runbook. (`promtool test rules` runs on a
//! real run's series in host/tests/e2e.rs, the seed incident.)

mod support;

use std::collections::BTreeSet;

use etcd_steward::metrics::{ClusterHealth, ClusterLabels, Metrics};

/// What /metrics serves with one cluster observed, so that every
/// per-cluster series (and its labels) is present.
fn exported() -> String {
    let m = Metrics::default();
    m.observe_cluster(
        &ClusterLabels {
            namespace: "prod".into(),
            name: "main".into(),
        },
        &ClusterHealth {
            available: true,
            ready_members: 3,
            desired_members: 3,
            last_verified_ms: Some(1_000),
            now_ms: 2_000,
            leader: Some(("main-a".into(), 0xabc)),
            quota_bytes: 2 << 30,
            db_sizes: vec![("main-a".into(), 1 << 20)],
            alarms: vec![("NOSPACE", 0), ("CORRUPT", 0)],
            ..Default::default()
        },
    );
    m.observe_reconcile(std::time::Duration::from_millis(5));
    m.set_leading(true);
    m.encode()
}

fn dashboard() -> serde_json::Value {
    let path =
        steward_testbed::repo::root().join("deploy/helm/etcd-steward/dashboards/etcd-steward.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn queries(d: &serde_json::Value) -> Vec<String> {
    let mut out: Vec<String> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect();
    out.extend(
        d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v["type"] == "query")
            .map(|v| v["query"].as_str().unwrap().to_owned()),
    );
    out
}

/// What is wrong with dashboard `d` against the exported `text`.
fn problems(d: &serde_json::Value, text: &str) -> Vec<String> {
    let families: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let series_labels: BTreeSet<String> = regex::Regex::new(r#"([a-z_]+)=""#)
        .unwrap()
        .captures_iter(text)
        .map(|c| c[1].to_owned())
        .collect();
    let metric = regex::Regex::new(r"etcd_steward_[a-z_]+").unwrap();
    let label = regex::Regex::new(r#"(?:by \(([a-z_, ]+)\))|([a-z_]+)=~?""#).unwrap();
    let mut out = Vec::new();
    for q in queries(d) {
        let named: Vec<&str> = metric.find_iter(&q).map(|m| m.as_str()).collect();
        if named.is_empty() {
            out.push(format!("{q}: names no etcd-steward metric"));
        }
        for name in named {
            let family = ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| families.contains(f)))
                .unwrap_or(name);
            if !families.contains(family) {
                out.push(format!("{q}: {name} is not exported"));
            }
        }
        for c in label.captures_iter(&q) {
            let names = c.get(1).or(c.get(2)).unwrap().as_str();
            for l in names.split(',').map(str::trim) {
                if !series_labels.contains(l) {
                    out.push(format!("{q}: no exported series carries label {l:?}"));
                }
            }
        }
    }
    out
}

#[test]
fn every_dashboard_query_names_metrics_and_labels_the_operator_exports() {
    let d = dashboard();
    let qs = queries(&d);
    assert!(qs.len() >= 8, "{qs:?}");
    let wrong = problems(&d, &exported());
    assert!(wrong.is_empty(), "{wrong:#?}");
    // What the issue asks a platform team to see per cluster.
    let all = qs.join("\n");
    for must in [
        "etcd_steward_cluster_available",
        "etcd_steward_cluster_ready_members",
        "etcd_steward_cluster_desired_members",
        "etcd_steward_cluster_seconds_since_verified",
        "etcd_steward_cluster_leader",
        "etcd_steward_cluster_member_db_size_bytes",
        "etcd_steward_cluster_quota_backend_bytes",
    ] {
        assert!(all.contains(must), "the dashboard shows {must}");
    }
}

/// The check finds a metric or a label the operator does not export.
#[test]
fn the_check_refuses_what_the_operator_does_not_export() {
    let mut d = dashboard();
    d["panels"][0]["targets"][0]["expr"] = "max by (pod) (etcd_steward_cluster_up)".into();
    let wrong = problems(&d, &exported());
    assert!(
        wrong
            .iter()
            .any(|p| p.contains("etcd_steward_cluster_up is not exported")),
        "{wrong:#?}"
    );
    assert!(
        wrong.iter().any(|p| p.contains("label \"pod\"")),
        "{wrong:#?}"
    );
    d["panels"][0]["targets"][0]["expr"] = "up".into();
    assert!(
        problems(&d, &exported())
            .iter()
            .any(|p| p.contains("names no"))
    );
}

fn helm_template(set: &[&str]) -> String {
    let kube = std::env::var_os("ETCD_STEWARD_KUBE_DIR")
        .map(std::path::PathBuf::from)
        .expect(
            "ETCD_STEWARD_KUBE_DIR names the Kubernetes tools (run the tests through `make test`)",
        );
    let chart = steward_testbed::repo::root().join("deploy/helm/etcd-steward");
    let mut cmd = std::process::Command::new(kube.join("helm"));
    cmd.args([
        "template",
        "rel",
        chart.to_str().unwrap(),
        "--namespace",
        "ops",
    ]);
    for s in set {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().expect("helm runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The rendered manifests of `kind`.
fn rendered(all: &str, kind: &str) -> Vec<serde_json::Value> {
    all.split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<serde_json::Value>(doc).ok())
        .filter(|v| v["kind"] == kind)
        .collect()
}

/// `promtool check rules` passes on the rule file and on the chart's
/// rendered PrometheusRule; both hold every alert docs/alerts.md explains.
#[test]
fn the_charts_alerts_pass_promtool_check_rules_and_each_has_a_runbook() {
    let file = support::alerts::rules_file();
    let out = support::alerts::run_promtool(&["check", "rules", file.to_str().unwrap()]);
    assert!(
        out.contains(&format!(
            "SUCCESS: {} rules found",
            support::alerts::ALERTS.len()
        )),
        "{out}"
    );

    assert!(
        rendered(&helm_template(&[]), "PrometheusRule").is_empty(),
        "off by default"
    );
    let all = helm_template(&["prometheusRule.enabled=true", "serviceMonitor.enabled=true"]);
    let rule = rendered(&all, "PrometheusRule");
    assert_eq!(rule.len(), 1, "{all}");
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("rendered.rules.json");
    std::fs::write(&spec, serde_json::to_vec(&rule[0]["spec"]).unwrap()).unwrap();
    let out = support::alerts::run_promtool(&["check", "rules", spec.to_str().unwrap()]);
    assert!(out.contains("SUCCESS"), "{out}");

    let runbooks =
        std::fs::read_to_string(steward_testbed::repo::root().join("docs/alerts.md")).unwrap();
    let names: Vec<&str> = rule[0]["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    assert_eq!(names, support::alerts::ALERTS);
    for r in rule[0]["spec"]["groups"][0]["rules"].as_array().unwrap() {
        let alert = r["alert"].as_str().unwrap();
        assert!(
            runbooks.contains(&format!("## {alert}")),
            "docs/alerts.md has a section for {alert}"
        );
        assert_eq!(
            r["annotations"]["runbook"],
            format!("docs/alerts.md#{}", alert.to_lowercase()),
        );
    }

    // The ServiceMonitor selects the metrics Service by its port's name.
    let monitor = rendered(&all, "ServiceMonitor");
    let service = rendered(&all, "Service")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "rel-etcd-steward-metrics")
        .expect("the metrics Service");
    let selector = monitor[0]["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    for (k, v) in selector {
        assert_eq!(&service["metadata"]["labels"][k], v, "label {k}");
    }
    assert_eq!(monitor[0]["spec"]["endpoints"][0]["port"], "metrics");
    // The series' own `namespace` (the EtcdCluster's) must win over the
    // target's, or every `by (namespace, name)` would group wrongly.
    assert_eq!(monitor[0]["spec"]["endpoints"][0]["honorLabels"], true);
    assert_eq!(service["spec"]["ports"][0]["name"], "metrics");
}

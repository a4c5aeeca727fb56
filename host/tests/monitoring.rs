//! The chart's Grafana dashboard asks only for what the operator exports:
//! every metric a query names is a family the operator's /metrics serves,
//! and every label a query selects or groups by is one its series carry.

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

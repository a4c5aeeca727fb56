//! The chart's alerts (deploy/helm/etcd-steward/rules), run by the real
//! `promtool` (scripts/ensure-go-tool.sh promtool) on series the operator exported.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

/// Every alert the rule file defines.
pub const ALERTS: &[&str] = &[
    "EtcdClusterUnavailable",
    "EtcdClusterUnverified",
    "EtcdClusterMemberDown",
    "EtcdClusterDatabaseNearQuota",
    "EtcdClusterAlarm",
    "EtcdClusterBackupOverdue",
    "EtcdStatusPolicyFailing",
    "EtcdStewardNoLeader",
];

pub fn promtool() -> PathBuf {
    std::env::var_os("ETCD_STEWARD_PROMTOOL")
        .map(PathBuf::from)
        .expect("ETCD_STEWARD_PROMTOOL names promtool (run the tests through `make test`)")
}

pub fn rules_file() -> PathBuf {
    steward_testbed::repo::root().join("deploy/helm/etcd-steward/rules/etcd-steward.rules.yaml")
}

/// Runs promtool with `args`; its output, or a panic naming what it said.
pub fn run_promtool(args: &[&str]) -> String {
    let out = Command::new(promtool())
        .args(args)
        .output()
        .expect("promtool runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// The samples of a /metrics text: (series, value).
pub fn samples(exposition: &str) -> Vec<(String, String)> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.to_owned()))
        })
        .collect()
}

/// The value of the first sample whose series starts with `prefix`.
pub fn value(exposition: &str, prefix: &str) -> Option<f64> {
    samples(exposition)
        .into_iter()
        .find(|(s, _)| s.starts_with(prefix))
        .and_then(|(_, v)| v.parse().ok())
}

/// One alert expected to fire: its labels and annotations, all of them
/// (promtool compares both whole).
pub struct Firing {
    pub alert: &'static str,
    pub labels: BTreeMap<&'static str, String>,
    pub annotations: BTreeMap<&'static str, String>,
}

/// One promtool test: `exposition` held for an hour (every sample
/// constant), evaluated after 30 minutes; `firing` are the alerts expected,
/// every other alert of [`ALERTS`] but those in `unasserted` is expected
/// silent.
pub struct Case<'a> {
    pub name: &'a str,
    pub exposition: &'a str,
    pub firing: Vec<Firing>,
    pub unasserted: Vec<&'static str>,
}

/// Writes the cases as a promtool test file in `dir` and runs
/// `promtool test rules` on it.
pub fn test_rules(dir: &std::path::Path, cases: &[Case]) -> String {
    let tests: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            let series: Vec<serde_json::Value> = samples(c.exposition)
                .into_iter()
                .map(|(s, v)| serde_json::json!({"series": s, "values": format!("{v}+0x60")}))
                .collect();
            let alert_tests: Vec<serde_json::Value> = ALERTS
                .iter()
                .filter(|a| !c.unasserted.contains(a))
                .map(|alert| {
                    let exp: Vec<serde_json::Value> = c
                        .firing
                        .iter()
                        .filter(|f| f.alert == *alert)
                        .map(|f| {
                            serde_json::json!({
                                "exp_labels": f.labels,
                                "exp_annotations": f.annotations,
                            })
                        })
                        .collect();
                    serde_json::json!({"eval_time": "30m", "alertname": alert, "exp_alerts": exp})
                })
                .collect();
            serde_json::json!({
                "name": c.name,
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": alert_tests,
            })
        })
        .collect();
    let file = serde_json::json!({
        "rule_files": [rules_file()],
        "evaluation_interval": "1m",
        "tests": tests,
    });
    let path = dir.join("alerts.test.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&file).unwrap()).unwrap();
    run_promtool(&["test", "rules", path.to_str().unwrap()])
}

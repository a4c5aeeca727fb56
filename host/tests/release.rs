//! What a release says about itself: `--version`, the versions that must
//! agree (the binary, the chart, the manifests' image tag, the changelog),
//! and the log's forms, run as the real binary.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_etcd-steward");
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn steward(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .current_dir(steward_testbed::repo::root())
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .env_remove("ETCD_STEWARD_LOG_FORMAT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the binary runs")
}

fn read(path: &str) -> String {
    let path = steward_testbed::repo::root().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The value of a top-level `key: value` line of a YAML file.
fn top_level(yaml: &str, key: &str) -> Option<String> {
    yaml.lines().find_map(|l| {
        let v = l.strip_prefix(key)?.strip_prefix(':')?;
        Some(v.trim().trim_matches('"').to_owned())
    })
}

#[test]
fn version_names_the_release_and_the_commit_it_was_built_from() {
    let o = steward(&["--version"], &[]);
    assert!(o.status.success());
    let printed = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(steward_testbed::repo::root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let commit = std::env::var("ETCD_STEWARD_COMMIT")
        .ok()
        .or(head)
        .unwrap_or_else(|| "unknown".into());
    assert_eq!(
        printed,
        format!("etcd-steward {VERSION} (commit {commit})"),
        "a build at another commit than HEAD is stale"
    );
}

#[test]
fn the_binary_the_chart_the_manifests_and_the_changelog_agree_on_the_version() {
    let chart = read("deploy/helm/etcd-steward/Chart.yaml");
    assert_eq!(top_level(&chart, "version").as_deref(), Some(VERSION));
    assert_eq!(top_level(&chart, "appVersion").as_deref(), Some(VERSION));
    let deployment = read("deploy/02-deployment.yaml");
    let image = format!("image: etcd-steward:{VERSION}");
    assert!(
        deployment.contains(&image),
        "deploy/02-deployment.yaml runs {image}"
    );
    let values = read("deploy/helm/etcd-steward/values.yaml");
    assert!(
        values.contains("tag: \"\""),
        "the chart's image tag defaults to its appVersion"
    );
    let changelog = read("CHANGELOG.md");
    assert!(
        changelog
            .lines()
            .any(|l| l.starts_with(&format!("## [{VERSION}] - "))),
        "CHANGELOG.md has an entry for {VERSION}"
    );
}

const OBSERVATION: &str = r#"
spec: {desiredReplicas: 1}
members:
  - {name: etcd-0, podPhase: Running, podReady: true}
probing:
  Attempted:
    endpoints:
      - member: etcd-0
        outcome: {Answered: {memberId: "1", leaderId: "1"}}
    quorumRead: Succeeded
now: 1780000000000
"#;

/// Loading the embedded policy logs one line at info.
fn eval_logs(env: &[(&str, &str)], args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("obs.yaml");
    std::fs::write(&input, OBSERVATION).unwrap();
    let mut all = args.to_vec();
    all.extend(["policy", "eval", "--input", input.to_str().unwrap()]);
    let o = steward(&all, env);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn logs_are_plain_text_off_a_terminal_or_one_json_object_per_line() {
    let text = eval_logs(&[("RUST_LOG", "info")], &[]);
    assert!(text.contains("loaded a status policy"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "no colour codes in a pipe: {text:?}"
    );

    for (env, args) in [
        (vec![("RUST_LOG", "info")], vec!["--log-format", "json"]),
        (
            vec![("RUST_LOG", "info"), ("ETCD_STEWARD_LOG_FORMAT", "json")],
            vec![],
        ),
    ] {
        let json = eval_logs(&env, &args);
        let logged: Vec<serde_json::Value> = json
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let loaded = logged
            .iter()
            .find(|o| o["message"] == "loaded a status policy")
            .unwrap_or_else(|| panic!("no JSON line for the load: {json}"));
        assert_eq!(loaded["level"], "INFO");
        assert_eq!(loaded["policy"], "steward-default-policy");
        assert!(loaded["timestamp"].is_string(), "{loaded}");
    }

    let o = steward(&["--log-format", "yaml", "crd"], &[]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("invalid value 'yaml' for '--log-format"),
        "{err}"
    );
}

/// The default build (what `cargo build --release -p etcd-steward` makes,
/// and what the in-cluster tests run) has no sandbox: the test control
/// plane is linked only with `--features sandbox` (`make sandbox`).
#[test]
fn the_default_build_carries_no_sandbox() {
    let o = steward(&["--help"], &[]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("policy"), "{help}");
    assert!(!help.contains("sandbox"), "{help}");
    let o = steward(&["sandbox"], &[]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("unrecognized subcommand 'sandbox'"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

//! `etcd-steward policy test|eval|inspect`, run as the real binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_etcd-steward");
const CHAOS_WASM: &str = env!("STEWARD_CHAOS_POLICY_WASM");
const RAFT_LAG_WASM: &str = env!("STEWARD_EXAMPLE_RAFT_LAG_WASM");

fn repo() -> PathBuf {
    steward_testbed::repo::root()
}

fn steward(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(repo())
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Bad input: a non-zero exit and exactly one `error:` line, never a panic.
fn assert_one_error_line(o: &Output, mentions: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "should fail; stdout: {}", stdout(o));
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(
        lines[0].contains(mentions),
        "{err} should mention {mentions:?}"
    );
}

fn write(dir: &Path, name: &str, contents: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path.to_string_lossy().into_owned()
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

#[test]
fn default_policy_passes_its_own_suite() {
    let o = steward(&["policy", "test", "policies/default/tests"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    let last = out.lines().last().unwrap_or_default();
    let (passed, failed) = last
        .split_once(" passed, ")
        .and_then(|(p, f)| {
            Some((
                p.parse::<u32>().ok()?,
                f.strip_suffix(" failed")?.parse::<u32>().ok()?,
            ))
        })
        .unwrap_or_else(|| panic!("last line {last:?} is not `N passed, M failed`"));
    assert_eq!(failed, 0, "{out}");
    assert!(passed > 0, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok   ")).count(),
        passed as usize
    );
}

#[test]
fn failing_case_is_reported_and_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let cases = format!(
        "cases:\n  - name: claims the wrong thing\n    observation:\n{}\n    expect:\n      conditions:\n        - {{type: Available, status: \"False\", reason: Nope}}\n      readyMembers: 0\n  - name: right\n    observation:\n{}\n    expect:\n      conditions:\n        - {{type: Available, status: \"True\"}}\n",
        indent(OBSERVATION, 6),
        indent(OBSERVATION, 6)
    );
    let file = write(dir.path(), "cases.yaml", cases.as_bytes());
    let o = steward(&["policy", "test", "--policy", CHAOS_WASM, &file]);
    let out = stdout(&o);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains(&format!("FAIL {file}: claims the wrong thing")),
        "{out}"
    );
    assert!(
        out.contains("Available.status: expected False, got True"),
        "{out}"
    );
    assert!(out.contains("readyMembers: expected 0, got 1"), "{out}");
    assert!(out.contains(&format!("ok   {file}: right")), "{out}");
    assert_eq!(out.lines().last(), Some("1 passed, 1 failed"));

    let o = steward(&[
        "policy", "test", "--policy", CHAOS_WASM, "--run", "^ri", &file,
    ]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert_eq!(stdout(&o).lines().last(), Some("1 passed, 0 failed"));
}

#[test]
fn policy_failure_fails_the_case() {
    let dir = tempfile::tempdir().unwrap();
    let cases = format!(
        "cases:\n  - name: traps\n    settings: {{fault: trap}}\n    observation:\n{}\n    expect:\n      conditions:\n        - {{type: Available, status: Unknown, reason: PolicyFailed}}\n",
        indent(OBSERVATION, 6)
    );
    let file = write(dir.path(), "trap.yaml", cases.as_bytes());
    let o = steward(&["policy", "test", "--policy", CHAOS_WASM, &file]);
    let out = stdout(&o);
    assert!(!o.status.success(), "{out}");
    assert!(out.contains("policy failed (Trap)"), "{out}");
    assert_eq!(out.lines().last(), Some("0 passed, 1 failed"));
}

/// A Rust policy's panic message reaches the status through its stderr;
/// the panic hook's advice about RUST_BACKTRACE is for no one there.
#[test]
fn a_panic_is_reported_without_the_backtrace_advice() {
    let dir = tempfile::tempdir().unwrap();
    let cases = format!(
        "cases:\n  - name: panics\n    settings: {{fault: panic}}\n    observation:\n{}\n    expect: {{}}\n",
        indent(OBSERVATION, 6)
    );
    let file = write(dir.path(), "panic.yaml", cases.as_bytes());
    let o = steward(&["policy", "test", "--policy", CHAOS_WASM, &file]);
    let out = stdout(&o);
    assert!(!o.status.success(), "{out}");
    assert!(out.contains("policy failed (Trap)"), "{out}");
    assert!(out.contains("chaos policy: deliberate panic"), "{out}");
    assert!(!out.contains("RUST_BACKTRACE"), "{out}");
}

#[test]
fn unparsable_case_file_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "broken.yaml",
        b"cases:\n  - name: typo\n    observation:\n      spec: {desiredReplicas: three}\n      probing: {Skipped: no}\n      now: 0\n    expect: {}\n",
    );
    let o = steward(&["policy", "test", &file]);
    assert_one_error_line(&o, &format!("{file}:4:"));
    assert!(stderr(&o).contains("desiredReplicas"), "{}", stderr(&o));
}

#[test]
fn case_files_are_checked_before_the_policy_is_compiled() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "broken.yaml",
        b"cases:\n  - name: typo\n    observation: {spec: {desiredReplicas: 1}, probing: {Skipped: no}, now: 0}\n    expect: {readyMembrs: 1}\n",
    );
    // Not a component at all: had it been compiled first, this would be the error.
    let policy = write(dir.path(), "not.wasm", b"not wasm");
    let o = steward(&["policy", "test", "--policy", &policy, &file]);
    assert_one_error_line(&o, &format!("{file}:4:"));
    assert!(stderr(&o).contains("readyMembrs"), "{}", stderr(&o));
}

/// CI collects the report, so a case file that does not parse is in it: one
/// failed case naming the file, line and column, and still one error line.
#[test]
fn an_unparsable_case_file_is_a_failed_case_in_junit_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "broken.yaml",
        b"cases:\n  - name: typo\n    observation:\n      spec: {desiredReplicas: three}\n      probing: {Skipped: no}\n      now: 0\n    expect: {}\n",
    );
    // file:4:COLUMN: followed by the field.
    let names_the_place = |text: &str| {
        text.strip_prefix(&format!("{file}:4:"))
            .and_then(|rest| rest.split_once(": "))
            .is_some_and(|(column, rest)| {
                column.parse::<u32>().is_ok_and(|c| c > 0) && rest.contains("desiredReplicas")
            })
    };

    let o = steward(&["policy", "test", "--format", "junit", &file]);
    assert_one_error_line(&o, &format!("{file}:4:"));
    let report = quick_junit::Report::deserialize_from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("not JUnit XML: {e}\n{}", stdout(&o)));
    assert_eq!((report.tests, report.failures, report.errors), (1, 1, 0));
    let suite = &report.test_suites[0];
    assert_eq!(suite.name.as_str(), file);
    let quick_junit::TestCaseStatus::NonSuccess { message, .. } = &suite.test_cases[0].status
    else {
        panic!("{:?}", suite.test_cases[0].status)
    };
    let message = message.as_ref().map(|m| m.as_str()).unwrap_or_default();
    assert!(names_the_place(message), "{message}");

    let o = steward(&["policy", "test", "--format", "json", &file]);
    assert_one_error_line(&o, &format!("{file}:4:"));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("not JSON: {e}\n{}", stdout(&o)));
    assert_eq!(
        (doc["passed"].as_u64(), doc["failed"].as_u64()),
        (Some(0), Some(1))
    );
    let case = &doc["cases"][0];
    assert_eq!(case["file"], file.as_str());
    assert_eq!(case["passed"], false);
    let problem = case["problems"][0].as_str().unwrap_or_default();
    assert!(names_the_place(problem), "{problem}");
}

/// Two cases with settings the default policy's validate-settings rejects:
/// one expects the rejection, one expects a verdict.
fn rejected_settings_cases(dir: &Path) -> String {
    let cases = format!(
        "cases:\n  - name: refuses a zero window\n    settings: {{staleAfterSeconds: 0}}\n    observation:\n{obs}\n    expect:\n      settingsRejected: {{messageContains: staleAfterSeconds}}\n  - name: expects a verdict anyway\n    settings: {{staleAfterSeconds: 0}}\n    observation:\n{obs}\n    expect:\n      conditions:\n        - {{type: Available, status: \"True\"}}\n",
        obs = indent(OBSERVATION, 6)
    );
    write(dir, "settings.yaml", cases.as_bytes())
}

#[test]
fn rejected_settings_pass_only_a_case_that_expects_the_rejection() {
    let dir = tempfile::tempdir().unwrap();
    let file = rejected_settings_cases(dir.path());
    let o = steward(&["policy", "test", &file]);
    let out = stdout(&o);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains(&format!("ok   {file}: refuses a zero window")),
        "{out}"
    );
    assert!(
        out.contains(&format!("FAIL {file}: expects a verdict anyway")),
        "{out}"
    );
    assert!(
        out.contains("settings: expected accepted by validate-settings"),
        "{out}"
    );
    assert!(
        out.contains("staleAfterSeconds must be between 1 and"),
        "{out}"
    );
    assert_eq!(out.lines().last(), Some("1 passed, 1 failed"));
}

#[test]
fn junit_and_json_reports_carry_every_case_and_its_problems() {
    let dir = tempfile::tempdir().unwrap();
    let file = rejected_settings_cases(dir.path());

    let o = steward(&["policy", "test", "--format", "junit", &file]);
    assert!(!o.status.success(), "{}", stdout(&o));
    let report = quick_junit::Report::deserialize_from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("not JUnit XML: {e}\n{}", stdout(&o)));
    assert_eq!((report.tests, report.failures, report.errors), (2, 1, 0));
    assert_eq!(report.test_suites.len(), 1);
    let suite = &report.test_suites[0];
    assert_eq!(suite.name.as_str(), file);
    let failed: Vec<_> = suite
        .test_cases
        .iter()
        .filter(|c| !matches!(c.status, quick_junit::TestCaseStatus::Success { .. }))
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].name.as_str(), "expects a verdict anyway");
    let quick_junit::TestCaseStatus::NonSuccess { message, .. } = &failed[0].status else {
        unreachable!()
    };
    let message = message.as_ref().map(|m| m.as_str()).unwrap_or_default();
    assert!(
        message.starts_with("settings: expected accepted"),
        "{message}"
    );

    let o = steward(&["policy", "test", "--format", "json", &file]);
    assert!(!o.status.success(), "{}", stdout(&o));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("not JSON: {e}\n{}", stdout(&o)));
    assert_eq!(
        (doc["passed"].as_u64(), doc["failed"].as_u64()),
        (Some(1), Some(1))
    );
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases[0]["name"], "refuses a zero window");
    assert_eq!(cases[0]["passed"], true);
    assert_eq!(cases[0]["problems"], serde_json::json!([]));
    assert_eq!(cases[1]["passed"], false);
    assert_eq!(cases[1]["file"], file.as_str());
    let problem = cases[1]["problems"][0].as_str().unwrap();
    assert!(
        problem.contains("staleAfterSeconds must be between 1 and"),
        "{problem}"
    );
}

#[test]
fn eval_prints_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let input = write(dir.path(), "obs.yaml", OBSERVATION.as_bytes());
    let o = steward(&["policy", "eval", "--policy", CHAOS_WASM, "--input", &input]);
    assert!(o.status.success(), "{}", stderr(&o));
    let yaml = stdout(&o);
    assert!(yaml.contains("readyMembers: 1"), "{yaml}");
    assert!(yaml.contains("reason: Chaos"), "{yaml}");

    let o = steward(&[
        "policy", "eval", "--policy", CHAOS_WASM, "--input", &input, "-o", "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let verdict: steward_policy_sdk::Verdict = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(verdict.ready_members, 1);
    assert!(verdict.decline_verification.is_none());
    assert!(stderr(&o).contains("verified: true"), "{}", stderr(&o));

    // The embedded default policy, with no --policy.
    let o = steward(&["policy", "eval", "--input", &input, "-o", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let verdict: steward_policy_sdk::Verdict = serde_json::from_slice(&o.stdout).unwrap();
    assert!(verdict.condition("Available").is_some());
}

#[test]
fn eval_of_a_failing_policy_prints_the_fallback_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let input = write(
        dir.path(),
        "obs.yaml",
        format!("{OBSERVATION}settings: {{fault: loop}}\n").as_bytes(),
    );
    let o = steward(&[
        "policy", "eval", "--policy", CHAOS_WASM, "--input", &input, "-o", "json",
    ]);
    assert!(!o.status.success());
    let verdict: steward_policy_sdk::Verdict = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        verdict.condition("Available").unwrap().reason,
        "PolicyFailed"
    );
    assert_one_error_line(&o, "(Deadline)");
}

#[test]
fn eval_rejects_settings_the_policy_rejects() {
    let dir = tempfile::tempdir().unwrap();
    let input = write(
        dir.path(),
        "obs.yaml",
        format!("{OBSERVATION}settings: {{fault: nonsense}}\n").as_bytes(),
    );
    let o = steward(&["policy", "eval", "--policy", CHAOS_WASM, "--input", &input]);
    assert_one_error_line(&o, "unknown fault");
}

/// An EtcdStatusPolicy manifest with these spec.limits (YAML flow
/// mapping), after a ConfigMap: `--limits-from` picks the policy out.
fn manifest(dir: &Path, limits: &str) -> String {
    let text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: chaos}}\n---\n\
         apiVersion: etcd.steward.dev/v1alpha1\nkind: EtcdStatusPolicy\nmetadata: {{name: chaos}}\n\
         spec:\n  digest: sha256:{}\n  source: {{configMap: {{name: chaos}}}}\n  limits: {limits}\n",
        "0".repeat(64)
    );
    write(dir, "policy.yaml", text.as_bytes())
}

/// The limits tried locally are the ones the operator would enforce: a
/// case that passes under the defaults fails under a smaller memoryBytes,
/// and a deadline from the manifest or a flag (which wins) is the one a
/// runaway policy is stopped at.
#[test]
fn test_and_eval_run_under_the_limits_a_manifest_or_a_flag_sets() {
    let dir = tempfile::tempdir().unwrap();
    let healthy = format!(
        "cases:\n  - name: healthy\n    observation:\n{}\n    expect:\n      conditions:\n        - {{type: Available, status: \"True\"}}\n",
        indent(OBSERVATION, 6)
    );
    let healthy = write(dir.path(), "healthy.yaml", healthy.as_bytes());
    let o = steward(&["policy", "test", "--policy", CHAOS_WASM, &healthy]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    // One wasm page: less than the Rust policy's stack alone.
    let o = steward(&[
        "policy",
        "test",
        "--policy",
        CHAOS_WASM,
        "--memory-bytes",
        "65536",
        &healthy,
    ]);
    assert_one_error_line(&o, "exceeded its memory cap of 65536 bytes");
    let small = manifest(dir.path(), "{memoryBytes: 65536}");
    let o = steward(&[
        "policy",
        "test",
        "--policy",
        CHAOS_WASM,
        "--limits-from",
        &small,
        &healthy,
    ]);
    assert_one_error_line(&o, "exceeded its memory cap of 65536 bytes");

    let looping = format!(
        "cases:\n  - name: loops\n    settings: {{fault: loop}}\n    observation:\n{}\n    expect: {{}}\n",
        indent(OBSERVATION, 6)
    );
    let looping = write(dir.path(), "loop.yaml", looping.as_bytes());
    let stopped_at = |extra: &[&str]| {
        let mut args = vec!["policy", "test", "--policy", CHAOS_WASM];
        args.extend_from_slice(extra);
        args.push(&looping);
        let o = steward(&args);
        assert!(!o.status.success(), "{}", stdout(&o));
        stdout(&o)
    };
    let deadline =
        |ms: u32| format!("policy failed (Deadline): policy exceeded its {ms} ms deadline");
    let out = stopped_at(&[]);
    assert!(out.contains(&deadline(50)), "the default: {out}");
    let from_file = manifest(dir.path(), "{deadlineMilliseconds: 30}");
    let out = stopped_at(&["--limits-from", &from_file]);
    assert!(out.contains(&deadline(30)), "{out}");
    let out = stopped_at(&["--limits-from", &from_file, "--deadline-ms", "20"]);
    assert!(out.contains(&deadline(20)), "the flag wins: {out}");

    let input = write(
        dir.path(),
        "obs.yaml",
        format!("{OBSERVATION}settings: {{fault: loop}}\n").as_bytes(),
    );
    let o = steward(&[
        "policy",
        "eval",
        "--policy",
        CHAOS_WASM,
        "--deadline-ms",
        "20",
        "--input",
        &input,
    ]);
    assert_one_error_line(&o, "policy exceeded its 20 ms deadline");
}

#[test]
fn limits_above_the_operators_maximum_are_refused_as_the_operator_refuses_them() {
    let dir = tempfile::tempdir().unwrap();
    let input = write(dir.path(), "obs.yaml", OBSERVATION.as_bytes());
    let greedy = manifest(dir.path(), "{deadlineMilliseconds: 5000}");
    let refusal = "spec.limits: deadlineMilliseconds 5000 is above the operator's maximum 1000";
    assert_one_error_line(
        &steward(&[
            "policy",
            "eval",
            "--limits-from",
            &greedy,
            "--input",
            &input,
        ]),
        refusal,
    );
    assert_one_error_line(
        &steward(&[
            "policy",
            "test",
            "--limits-from",
            &greedy,
            "policies/default/tests",
        ]),
        refusal,
    );
    assert_one_error_line(
        &steward(&[
            "policy",
            "eval",
            "--memory-bytes",
            &(1u64 << 30).to_string(),
            "--input",
            &input,
        ]),
        "spec.limits: memoryBytes 1073741824 is above the operator's maximum 268435456",
    );
    // Within the maximum, the flag replaces the file's limit.
    let o = steward(&[
        "policy",
        "eval",
        "--limits-from",
        &greedy,
        "--deadline-ms",
        "100",
        "--input",
        &input,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));

    let not_a_policy = write(dir.path(), "cm.yaml", b"apiVersion: v1\nkind: ConfigMap\n");
    assert_one_error_line(
        &steward(&[
            "policy",
            "eval",
            "--limits-from",
            &not_a_policy,
            "--input",
            &input,
        ]),
        "expected one document of kind EtcdStatusPolicy",
    );
}

#[test]
fn inspect_shows_description_and_digest() {
    use sha2::Digest as _;
    let o = steward(&["policy", "inspect", CHAOS_WASM]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let bytes = std::fs::read(CHAOS_WASM).unwrap();
    let digest = hex::encode(sha2::Sha256::digest(&bytes));
    assert!(out.contains("name: chaos"), "{out}");
    assert!(out.contains(&format!("digest: sha256:{digest}")), "{out}");
    assert!(out.contains("- Available"), "{out}");

    // What it takes of the limits an EtcdStatusPolicy sets.
    let o = steward(&["policy", "inspect", CHAOS_WASM, "-o", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        doc["componentBytes"],
        serde_json::json!({"used": bytes.len(), "defaultLimit": 64 << 20, "maximum": 128 << 20})
    );
    assert_eq!(doc["instances"]["defaultLimit"], 64);
    assert_eq!(doc["instances"]["maximum"], 128);
    let instances = doc["instances"]["used"].as_u64().unwrap();
    assert!((1..=64).contains(&instances), "{doc}");
    // The count is the least `instances` it runs under, as the operator
    // enforces it: one fewer and it does not even describe itself.
    let dir = tempfile::tempdir().unwrap();
    let input = write(dir.path(), "obs.yaml", OBSERVATION.as_bytes());
    let eval_with = |n: u64| {
        let limits = manifest(dir.path(), &format!("{{instances: {n}}}"));
        steward(&[
            "policy",
            "eval",
            "--policy",
            CHAOS_WASM,
            "--limits-from",
            &limits,
            "--input",
            &input,
        ])
    };
    let o = eval_with(instances);
    assert!(o.status.success(), "{}", stderr(&o));
    if instances > 1 {
        assert_one_error_line(&eval_with(instances - 1), "describe() failed");
    }
}

/// `crd --help` names every CRD `crd` prints.
#[test]
fn crd_help_names_every_crd() {
    let o = steward(&["crd"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let crds = stdout(&o);
    let kinds: Vec<&str> = crds
        .lines()
        .filter_map(|l| l.trim().strip_prefix("kind: "))
        .filter(|k| *k != "CustomResourceDefinition")
        .collect();
    assert_eq!(
        kinds,
        [
            "EtcdCluster",
            "EtcdMember",
            "EtcdStatusPolicy",
            "EtcdSnapshot",
            "EtcdBackupSchedule"
        ],
        "{crds}"
    );
    let o = steward(&["crd", "--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let help = stdout(&o);
    for kind in kinds {
        assert!(help.contains(kind), "{help}");
    }
}

#[test]
fn garbage_policies_get_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let component = std::fs::read(CHAOS_WASM).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "text.wasm",
            b"#!/bin/sh\necho hi\n".to_vec(),
            "not a WebAssembly component",
        ),
        (
            "truncated.wasm",
            component[..component.len() / 3].to_vec(),
            "not a valid component",
        ),
        (
            "module.wasm",
            wat::parse_str("(module)").unwrap(),
            "core WebAssembly module",
        ),
        (
            "other-world.wasm",
            wat::parse_str("(component)").unwrap(),
            "not a steward:status/status-policy component",
        ),
    ];
    let dir_path = dir.path().to_string_lossy().into_owned();
    for (name, bytes, mentions) in cases {
        let file = write(dir.path(), name, &bytes);
        assert_one_error_line(&steward(&["policy", "inspect", &file]), mentions);
        assert_one_error_line(
            &steward(&[
                "policy",
                "test",
                "--policy",
                &file,
                "policies/default/tests",
            ]),
            mentions,
        );
    }
    assert_one_error_line(
        &steward(&["policy", "inspect", "does/not/exist.wasm"]),
        "does/not/exist.wasm",
    );
    assert_one_error_line(&steward(&["policy", "inspect", &dir_path]), &dir_path);
}

fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.trim()
        .lines()
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The Rust SDK's example, built as a component, passes its own cases.
#[test]
fn the_rust_sdk_example_passes_its_cases_as_a_component() {
    let out = steward(&[
        "policy",
        "test",
        "--policy",
        RAFT_LAG_WASM,
        "policies/examples/raft-lag/tests",
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("passed, 0 failed"), "{text}");
    assert!(
        text.contains("a follower falls 5000 entries behind"),
        "{text}"
    );
}

/// Every case file in the repository is valid against `policy schema`, and
/// the schema refuses what the format refuses.
#[test]
fn the_schema_validates_every_case_file_and_refuses_the_old_casing() {
    let out = steward(&["policy", "schema"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");

    let mut files = Vec::new();
    let mut stack = vec![repo().join("policies")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !["node_modules", "target", "fixtures"].contains(&name.as_str()) {
                    stack.push(path);
                }
            } else if name.ends_with(".yaml") && path.parent().unwrap().ends_with("tests") {
                files.push(path);
            }
        }
    }
    assert!(files.len() >= 8, "case files found: {files:?}");
    for file in &files {
        let value: serde_json::Value =
            serde_saphyr::from_str(&std::fs::read_to_string(file).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", file.display());
    }

    let case = |observation: &str| -> serde_json::Value {
        let text =
            format!("cases:\n  - name: c\n    observation: {observation}\n    expect: {{}}\n");
        serde_saphyr::from_str(&text).unwrap()
    };
    let good = "{spec: {desiredReplicas: 1}, phase: Steady, members: [{name: a, memberId: \"10\"}], \
                settings: {a: 1}, probing: {Skipped: x}, now: 0}";
    assert!(validator.is_valid(&case(good)), "{good}");
    for (bad, why) in [
        (
            "{spec: {desiredReplicas: 1}, phase: steady, probing: {Skipped: x}, now: 0}",
            "a lower-case enum value",
        ),
        (
            "{spec: {desiredReplicas: 1}, probing: {skipped: x}, now: 0}",
            "a lower-case variant",
        ),
        (
            "{spec: {desiredReplicas: 1}, members: [{name: a, memberId: 10}], probing: {Skipped: x}, now: 0}",
            "a member ID as a number",
        ),
        (
            "{spec: {desiredReplicas: 1}, settings: '{}', probing: {Skipped: x}, now: 0}",
            "settings as JSON text",
        ),
    ] {
        assert!(
            !validator.is_valid(&case(bad)),
            "the schema accepts {why}: {bad}"
        );
    }
}

#[test]
fn a_member_id_written_as_a_number_is_refused_with_how_to_write_it() {
    let dir = tempfile::tempdir().unwrap();
    let cases = write(
        dir.path(),
        "ids.yaml",
        b"cases:\n  - name: c\n    observation:\n      spec: {desiredReplicas: 1}\n      \
          members: [{name: a, memberId: 10}]\n      probing: {Skipped: x}\n      now: 0\n    \
          expect: {}\n",
    );
    let out = steward(&["policy", "test", &cases]);
    assert_one_error_line(&out, "cases[0].observation.members[0].memberId");
    assert!(
        stderr(&out).contains(r#"write "10" if those are hex digits, or "a" for the number 10"#),
        "{}",
        stderr(&out)
    );
}

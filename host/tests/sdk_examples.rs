//! Each SDK's example policy, built by the SDK's own build script, passes
//! its YAML cases through `etcd-steward policy test`, and fits the limits a
//! policy gets by default.

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_etcd-steward");

fn policy_test(wasm: &Path, cases: &str) -> Output {
    Command::new(BIN)
        .args(["policy", "test", "--policy"])
        .arg(wasm)
        .arg(cases)
        .current_dir(steward_testbed::repo::root())
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs")
}

fn assert_passes(out: &Output, at_least: usize) {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let passed: usize = text
        .lines()
        .last()
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(passed >= at_least, "only {passed} cases passed:\n{text}");
}

#[test]
fn the_python_example_passes_its_cases() {
    let wasm = steward_testbed::sdk_examples::python().expect("the Python example builds");
    // Default limits: a Python component is ~18 MB with dozens of core
    // instances, and `policy test` runs it under what an operator grants.
    assert!(std::fs::metadata(&wasm).unwrap().len() > 1 << 20);
    assert_passes(
        &policy_test(&wasm, "policies/python/examples/voters-down/tests"),
        20,
    );
}

#[test]
fn the_javascript_example_passes_its_cases() {
    let wasm = steward_testbed::sdk_examples::js().expect("the JavaScript example builds");
    assert_passes(
        &policy_test(&wasm, "policies/js/examples/db-headroom/tests"),
        20,
    );
}

/// With `--stub-wasi` an uncaught exception would be a bare wasm trap and
/// the host's fallback would not say what Python raised; the SDK answers
/// with a verdict that claims nothing and names the error and its line.
#[test]
fn a_python_exception_becomes_a_verdict_that_names_it() {
    let wasm = steward_testbed::sdk_examples::python_raising().expect("the raising policy builds");
    assert_passes(
        &policy_test(&wasm, "policies/python/testdata/raises/tests"),
        5,
    );
}

//! Argo CD's health checks (deploy/argocd: EtcdCluster, EtcdStatusPolicy,
//! EtcdSnapshot), run by gopher-lua the way Argo CD runs a check from
//! argocd-cm, against their health_test.yaml fixtures; and the argocd-cm
//! snippets in docs/api.md against the same fixtures, so the documented
//! copies cannot drift.

use std::path::Path;

use steward_testbed::status_consumers::{StatusConsumers, api_docs, argocd_dir};

fn consumers() -> StatusConsumers {
    StatusConsumers::locate().expect("steward-status (run the tests through `make test`)")
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The cases of one kind's health_test.yaml.
fn fixtures(kind: &str) -> usize {
    let yaml = std::fs::read_to_string(
        argocd_dir().join(format!("etcd.steward.dev/{kind}/health_test.yaml")),
    )
    .unwrap();
    yaml.lines()
        .filter(|l| l.trim_start().starts_with("inputPath:"))
        .count()
}

#[test]
fn health_lua_and_the_docs_snippet_pass_every_fixture_under_gopher_lua() {
    let docs = api_docs();
    let out = consumers()
        .argo_health_tests(&argocd_dir(), Some(&docs))
        .unwrap();
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ok = |source: &str, kind: &str| {
        text.lines()
            .filter(|l| l.starts_with(&format!("ok   [{source}] {kind}/")))
            .count()
    };
    let mut total = 0;
    for (kind, at_least) in [
        ("EtcdCluster", 9),
        ("EtcdStatusPolicy", 6),
        ("EtcdSnapshot", 6),
    ] {
        let n = fixtures(kind);
        assert!(n >= at_least, "{kind}'s health_test.yaml has {n} cases");
        assert_eq!(ok("health.lua", kind), n, "{text}");
        assert_eq!(ok(docs.to_str().unwrap(), kind), n, "{text}");
        total += n;
    }
    assert!(
        text.contains(&format!("\n{} passed, 0 failed\n", 2 * total)),
        "{text}"
    );
}

/// A copy of deploy/argocd in a temp dir, for breaking.
fn copy_argocd(to: &Path) {
    let from = argocd_dir().join("etcd.steward.dev/EtcdCluster");
    let dest = to.join("etcd.steward.dev/EtcdCluster");
    std::fs::create_dir_all(dest.join("testdata")).unwrap();
    for entry in std::fs::read_dir(from.join("testdata")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dest.join("testdata").join(p.file_name().unwrap())).unwrap();
    }
    for f in ["health.lua", "health_test.yaml"] {
        std::fs::copy(from.join(f), dest.join(f)).unwrap();
    }
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} has no {from:?}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

#[test]
fn a_wrong_expectation_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    copy_argocd(dir.path());
    edit(
        &dir.path()
            .join("etcd.steward.dev/EtcdCluster/health_test.yaml"),
        "message: \"Paused at 0 replicas\"",
        "message: \"Paused\"",
    );
    let out = consumers().argo_health_tests(dir.path(), None).unwrap();
    let text = stdout(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("FAIL [health.lua] EtcdCluster/testdata/paused.yaml"),
        "{text}"
    );
}

#[test]
fn a_docs_snippet_that_reads_differently_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    copy_argocd(dir.path());
    let docs = dir.path().join("api.md");
    std::fs::copy(api_docs(), &docs).unwrap();
    edit(
        &docs,
        "return { status = \"Suspended\", message = \"Paused at 0 replicas\" }",
        "return { status = \"Healthy\", message = \"Paused at 0 replicas\" }",
    );
    let out = consumers()
        .argo_health_tests(dir.path(), Some(&docs))
        .unwrap();
    let text = stdout(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "FAIL [{}] EtcdCluster/testdata/paused.yaml",
            docs.display()
        )),
        "{text}"
    );
    assert!(
        !text.contains("FAIL [health.lua]"),
        "health.lua itself still passes:\n{text}"
    );
}

#[test]
fn docs_without_the_snippet_fail_the_run() {
    let dir = tempfile::tempdir().unwrap();
    copy_argocd(dir.path());
    let docs = dir.path().join("api.md");
    std::fs::copy(api_docs(), &docs).unwrap();
    edit(
        &docs,
        "resource.customizations.health.etcd.steward.dev_EtcdCluster: |",
        "resource.customizations.health.etcd.steward.dev_Other: |",
    );
    let out = consumers()
        .argo_health_tests(dir.path(), Some(&docs))
        .unwrap();
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no argocd-cm snippet with key resource.customizations.health.etcd.steward.dev_EtcdCluster"),
        "{err}"
    );
}

/// Argo CD reads a status it does not know as Unknown, and a script that
/// returns no table as an error; the runner does the same.
#[test]
fn the_runner_keeps_argo_cds_rules_for_bad_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let obj = serde_json::json!({
        "apiVersion": "etcd.steward.dev/v1alpha1", "kind": "EtcdCluster",
        "metadata": {"name": "main", "generation": 1}
    });
    let c = consumers();
    let lua = dir.path().join("health.lua");
    std::fs::write(&lua, "return { status = \"Fine\", message = \"x\" }").unwrap();
    let r = c.argo_health_by(&lua, &obj).unwrap();
    assert_eq!(
        (r.status.as_str(), r.message.as_str()),
        ("Unknown", "Lua returned an invalid health status")
    );
    std::fs::write(&lua, "return \"Healthy\"").unwrap();
    let err = c.argo_health_by(&lua, &obj).unwrap_err().to_string();
    assert!(err.contains("expect table output"), "{err}");
    // Only os.time and os.date are there, as in Argo CD's safe os.
    std::fs::write(
        &lua,
        "return { status = \"Healthy\", message = type(os.time()) .. \" \" .. type(os.execute) .. \" \" .. type(io) }",
    )
    .unwrap();
    let r = c.argo_health_by(&lua, &obj).unwrap();
    assert_eq!(r.message, "number nil nil");
}

//! `etcd-steward policy new`: each language's scaffold builds with its own
//! tools and passes `policy test` as generated.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_etcd-steward");

fn steward(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Where scaffolded Rust projects build: one directory shared by runs, so
/// their crates.io dependencies compile once.
fn scaffold_target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("scaffolds"),
        _ => steward_testbed::repo::root().join("target/scaffolds"),
    }
}

/// cargo as a policy author runs it: none of the variables the outer
/// `cargo test` set for itself.
fn author_cargo(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new("cargo");
    cmd.args(args).current_dir(dir);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if (key.starts_with("CARGO") && key != "CARGO_HOME")
            || key.starts_with("RUSTC")
            || key == "RUSTFLAGS"
        {
            cmd.env_remove(&*key);
        }
    }
    cmd.env("CARGO_TARGET_DIR", scaffold_target_dir());
    // `make test` runs this in a namespace without DNS: the crates come
    // from the local cache the workspace build filled (the scaffold's are
    // a subset of the workspace's).
    cmd.env("CARGO_NET_OFFLINE", "true");
    cmd.output().expect("cargo runs")
}

#[test]
fn a_new_rust_policy_builds_and_passes_its_own_cases() {
    let dir = tempfile::tempdir().unwrap();
    let out = steward(
        dir.path(),
        &["policy", "new", "--lang", "rust", "quorum-watch"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("cargo build --target wasm32-wasip2 --release"),
        "{}",
        text(&out)
    );
    let project = dir.path().join("quorum-watch");
    for file in [
        "Cargo.toml",
        "src/lib.rs",
        "tests/basic.yaml",
        "steward-policy-sdk/wit/status-policy.wit",
    ] {
        assert!(project.join(file).is_file(), "{file} missing");
    }

    // The native tests run the same YAML cases against the plain Rust.
    let tested = author_cargo(&project, &["test", "--quiet"]);
    assert!(tested.status.success(), "cargo test: {}", text(&tested));

    let built = author_cargo(
        &project,
        &["build", "--quiet", "--target", "wasm32-wasip2", "--release"],
    );
    assert!(built.status.success(), "cargo build: {}", text(&built));
    let wasm = scaffold_target_dir().join("wasm32-wasip2/release/quorum_watch.wasm");
    let out = steward(
        &project,
        &[
            "policy",
            "test",
            "--policy",
            wasm.to_str().unwrap(),
            "tests/",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("5 passed, 0 failed"), "{}", text(&out));

    let inspected = steward(&project, &["policy", "inspect", wasm.to_str().unwrap()]);
    assert!(inspected.status.success(), "{}", text(&inspected));
    assert!(
        text(&inspected).contains("name: quorum-watch"),
        "{}",
        text(&inspected)
    );
}

#[test]
fn a_second_scaffold_into_the_same_directory_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let first = steward(dir.path(), &["policy", "new", "--lang", "rust", "twice"]);
    assert!(first.status.success(), "{}", text(&first));
    std::fs::write(dir.path().join("twice/src/lib.rs"), "// mine").unwrap();
    let second = steward(dir.path(), &["policy", "new", "--lang", "rust", "twice"]);
    assert!(!second.status.success());
    assert!(
        text(&second).contains("not empty; nothing was written"),
        "{}",
        text(&second)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("twice/src/lib.rs")).unwrap(),
        "// mine"
    );
}

#[test]
fn a_new_python_policy_builds_and_passes_its_own_cases() {
    let dir = tempfile::tempdir().unwrap();
    let out = steward(
        dir.path(),
        &["policy", "new", "--lang", "python", "py-watch"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let project = dir.path().join("py-watch");
    for file in [
        "app.py",
        "build.sh",
        "steward_policy/__init__.py",
        "wit/status-policy.wit",
    ] {
        assert!(project.join(file).is_file(), "{file} missing");
    }
    // As the summary says: the project's own build script, then the cases.
    let built = Command::new("./build.sh")
        .arg("py-watch.wasm")
        .current_dir(&project)
        .output()
        .expect("build.sh runs");
    assert!(built.status.success(), "build.sh: {}", text(&built));
    let out = steward(
        &project,
        &["policy", "test", "--policy", "py-watch.wasm", "tests/"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(" passed, 0 failed"), "{}", text(&out));
    let inspected = steward(&project, &["policy", "inspect", "py-watch.wasm"]);
    assert!(
        text(&inspected).contains("name: py-watch"),
        "{}",
        text(&inspected)
    );
}

#[test]
fn a_new_javascript_policy_builds_and_passes_its_own_cases() {
    let dir = tempfile::tempdir().unwrap();
    let out = steward(dir.path(), &["policy", "new", "--lang", "js", "js-watch"]);
    assert!(out.status.success(), "{}", text(&out));
    let project = dir.path().join("js-watch");
    for file in [
        "policy.js",
        "package.json",
        "package-lock.json",
        "sdk/policy.js",
        "wit/status-policy.wit",
    ] {
        assert!(project.join(file).is_file(), "{file} missing");
    }
    // As the summary says: npm ci from the project's lock, npm run build.
    let npm = |args: &[&str]| {
        let out = Command::new("npm")
            .args(args)
            .current_dir(&project)
            .output()
            .expect("npm runs");
        assert!(out.status.success(), "npm {args:?}: {}", text(&out));
    };
    npm(&[
        "ci",
        "--prefer-offline",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
    ]);
    npm(&["run", "build", "--silent"]);
    let out = steward(
        &project,
        &["policy", "test", "--policy", "js-watch.wasm", "tests"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(" passed, 0 failed"), "{}", text(&out));
    let inspected = steward(&project, &["policy", "inspect", "js-watch.wasm"]);
    assert!(
        text(&inspected).contains("name: js-watch"),
        "{}",
        text(&inspected)
    );
}

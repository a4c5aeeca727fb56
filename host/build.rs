//! Builds the policy components for wasm32-wasip2 so that `cargo build` at
//! the root stays one command (in the style of substrate-wasm-builder).
//!
//! A nested cargo builds `steward-default-policy` (embedded in the binary),
//! `steward-chaos-policy`, `steward-compat-v0-1-policy`,
//! `steward-compat-v0-2-policy` and `steward-compat-v0-3-policy`
//! (components of the earlier contracts) and
//! the Rust SDK's example (for the host's tests)
//! with the workspace's
//! `policy` profile, into a target dir of its own: the outer build holds the
//! lock on its target dir, so sharing it would deadlock.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, exit};

const TARGET: &str = "wasm32-wasip2";
const PROFILE: &str = "policy";

/// (package, artifact stem, env var the host code reads the path from)
const POLICIES: &[(&str, &str, &str)] = &[
    (
        "steward-default-policy",
        "steward_default_policy",
        "STEWARD_DEFAULT_POLICY_WASM",
    ),
    (
        "steward-chaos-policy",
        "steward_chaos_policy",
        "STEWARD_CHAOS_POLICY_WASM",
    ),
    (
        "steward-compat-v0-1-policy",
        "steward_compat_v0_1_policy",
        "STEWARD_COMPAT_V0_1_POLICY_WASM",
    ),
    (
        "steward-compat-v0-2-policy",
        "steward_compat_v0_2_policy",
        "STEWARD_COMPAT_V0_2_POLICY_WASM",
    ),
    (
        "steward-compat-v0-3-policy",
        "steward_compat_v0_3_policy",
        "STEWARD_COMPAT_V0_3_POLICY_WASM",
    ),
    (
        "steward-example-raft-lag",
        "steward_example_raft_lag",
        "STEWARD_EXAMPLE_RAFT_LAG_WASM",
    ),
];

/// Inherited variables that would change what the nested build compiles or
/// where it puts it: flags meant for the host target, the outer target dir,
/// and clippy's driver (the nested build is plain cargo).
const SCRUBBED_ENV: &[&str] = &[
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_BUILD_TARGET",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_LLVM_COV",
    "CARGO_PRIMARY_PACKAGE",
];

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest_dir
        .parent()
        .expect("host/ sits in the workspace root");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));

    for path in [
        "wit",
        "Cargo.toml",
        "Cargo.lock",
        "policies/sdk/src",
        "policies/sdk/Cargo.toml",
        "policies/default/src",
        "policies/default/Cargo.toml",
        "policies/default/build.rs",
        "policies/chaos/src",
        "policies/chaos/Cargo.toml",
        "policies/compat-v0.1/src",
        "policies/compat-v0.1/Cargo.toml",
        "policies/compat-v0.2/src",
        "policies/compat-v0.2/Cargo.toml",
        "policies/compat-v0.3/src",
        "policies/compat-v0.3/Cargo.toml",
        "policies/examples/raft-lag/src",
        "policies/examples/raft-lag/Cargo.toml",
    ] {
        // Relative to this package: the target dir is shared between
        // checkouts, and an absolute path would make another checkout's
        // build look at this one's files.
        println!("cargo:rerun-if-changed=../{path}");
    }

    record_commit(workspace);

    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    require_target(&rustc);

    let target_dir = nested_target_dir(&out_dir);
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(&cargo);
    build
        .arg("build")
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .args(["--target", TARGET, "--profile", PROFILE])
        .arg("--target-dir")
        .arg(&target_dir);
    for (package, _, _) in POLICIES {
        build.args(["-p", package]);
    }
    for key in SCRUBBED_ENV {
        build.env_remove(key);
    }
    if env::var_os("RUSTC_WRAPPER").is_some_and(|w| is_clippy(&w)) {
        build.env_remove("RUSTC_WRAPPER");
    }

    let status = build.status().unwrap_or_else(|e| {
        fail(&format!(
            "could not run {} to build the policies: {e}",
            cargo.to_string_lossy()
        ))
    });
    if !status.success() {
        fail(&format!(
            "building the policy components for {TARGET} failed ({status}); the cargo output above says why"
        ));
    }

    let artifacts = target_dir.join(TARGET).join(PROFILE);
    for (package, stem, var) in POLICIES {
        let built = artifacts.join(format!("{stem}.wasm"));
        let copied = out_dir.join(format!("{stem}.wasm"));
        if let Err(e) = std::fs::copy(&built, &copied) {
            fail(&format!(
                "{package} built but {} is missing: {e}",
                built.display()
            ));
        }
        println!("cargo:rustc-env={var}={}", copied.display());
    }
}

/// The nested target dir lives beside the outer build's output but never is
/// it: `$CARGO_TARGET_DIR/policy-wasm`, else derived from OUT_DIR
/// (`<target>/<profile>/build/<pkg>/out`). Debug and release builds share it,
/// since the policies always use the `policy` profile.
fn nested_target_dir(out_dir: &Path) -> PathBuf {
    if let Some(dir) = env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return if dir.is_absolute() {
            dir.join("policy-wasm")
        } else {
            env::current_dir()
                .expect("build scripts run in a directory")
                .join(dir)
                .join("policy-wasm")
        };
    }
    let profile_dir = out_dir
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "build"))
        .and_then(Path::parent)
        .expect("OUT_DIR is <target>/<profile>/build/<pkg>/out");
    profile_dir
        .parent()
        .unwrap_or(profile_dir)
        .join("policy-wasm")
}

fn require_target(rustc: &OsString) {
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let Some(sysroot) = sysroot else {
        fail(&format!(
            "could not ask {} for its sysroot",
            rustc.to_string_lossy()
        ));
    };
    if !sysroot.join("lib/rustlib").join(TARGET).is_dir() {
        fail(&format!(
            "the {TARGET} target is not installed for this toolchain ({}): \
             run `rustup toolchain install` in the repo (it reads rust-toolchain.toml)",
            sysroot.display()
        ));
    }
}

fn is_clippy(wrapper: &OsString) -> bool {
    Path::new(wrapper)
        .file_stem()
        .is_some_and(|s| s.to_string_lossy().starts_with("clippy-driver"))
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    println!("cargo:warning={message}");
    exit(1);
}

/// `ETCD_STEWARD_COMMIT` for `--version`: the variable of that name if set
/// (a build from a source tarball), else the checkout's HEAD, else
/// "unknown". Rebuilt when HEAD moves.
fn record_commit(workspace: &Path) {
    println!("cargo:rerun-if-env-changed=ETCD_STEWARD_COMMIT");
    let git = workspace.join(".git");
    if git.is_dir() {
        println!("cargo:rerun-if-changed=../.git/HEAD");
        println!("cargo:rerun-if-changed=../.git/packed-refs");
        if let Some(head) = std::fs::read_to_string(git.join("HEAD"))
            .ok()
            .and_then(|h| h.strip_prefix("ref: ").map(|r| r.trim().to_owned()))
        {
            println!("cargo:rerun-if-changed=../.git/{head}");
        }
    }
    let commit = env::var("ETCD_STEWARD_COMMIT").ok().or_else(|| {
        let out = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(workspace)
            .output()
            .ok()?;
        let sha = String::from_utf8(out.stdout).ok()?.trim().to_owned();
        (out.status.success() && !sha.is_empty()).then_some(sha)
    });
    println!(
        "cargo:rustc-env=ETCD_STEWARD_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
}

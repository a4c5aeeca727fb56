//! The committed CRDs are exactly what the Rust types generate.
//!
//! `crds/` is what users `kubectl apply`; the Helm chart ships a copy in
//! its own `crds/`. Both drift silently the moment someone edits the types
//! and forgets to regenerate, and a stale CRD prunes or rejects fields the
//! operator relies on.

use std::path::PathBuf;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ sits in the repository root")
        .to_path_buf()
}

/// Set to rewrite the committed files instead of comparing.
const BLESS: &str = "STEWARD_BLESS_CRDS";

fn assert_committed(relative: &str) {
    let path = repo_root().join(relative);
    let generated = etcd_steward::api::crds_yaml();
    if std::env::var_os(BLESS).is_some() {
        std::fs::write(&path, &generated).unwrap_or_else(|e| panic!("writing {relative}: {e}"));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{relative} is out of date with host/src/api; regenerate it with\n\n    \
         cargo run -p etcd-steward -- crd > {relative}\n\n\
         or {BLESS}=1 cargo test -p etcd-steward --test crds_up_to_date\n\
         (first differing line: {})",
        first_difference(&committed, &generated)
    );
}

fn first_difference(committed: &str, generated: &str) -> String {
    let mut committed_lines = committed.lines();
    for (n, want) in generated.lines().enumerate() {
        match committed_lines.next() {
            Some(have) if have == want => continue,
            Some(have) => return format!("{}: committed {have:?}, generated {want:?}", n + 1),
            None => return format!("{}: committed file ends, generated {want:?}", n + 1),
        }
    }
    "the committed file has extra lines at the end".to_owned()
}

#[test]
fn crds_directory_matches_the_types() {
    assert_committed(etcd_steward::api::CRDS_PATH);
}

#[test]
fn helm_chart_crds_match_the_types() {
    assert_committed("deploy/helm/etcd-steward/crds/etcd-steward.yaml");
}

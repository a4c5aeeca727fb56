//! The YAML cases beside this file, against the plain Rust; `make test` also
//! runs them through the built component with `etcd-steward policy test`.

use steward_example_raft_lag::RaftLag;
use steward_policy_sdk::guest::Policy;
use steward_policy_sdk::testing::{Outcome, check_outcome, load_cases};

#[test]
fn yaml_cases() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut failures = Vec::new();
    let mut count = 0;
    for file in load_cases(&[dir]).expect("the case files parse") {
        for case in &file.cases {
            count += 1;
            let outcome = Outcome::of(case, RaftLag::validate_settings, |o| {
                RaftLag::evaluate(o.clone())
            });
            for m in check_outcome(&case.expect, &outcome) {
                failures.push(format!("{}: {}: {m}", file.path.display(), case.name));
            }
        }
    }
    assert!(count >= 10, "only {count} cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

//! Runs the YAML suite in this directory against the native decision logic,
//! so every row of README.md's decision table is proven without wasm too
//! (the host runs the same files through the component via `policy test`).

use std::path::{Path, PathBuf};

use steward_default_policy::{Settings, evaluate_json_settings};
use steward_policy_sdk::testing::{Outcome, check_outcome, load_cases, load_observation};
use steward_policy_sdk::{ConditionStatus, Observation, Verdict};

fn here(rel: &str) -> PathBuf {
    // Read when the test runs: a compiled-in path can name another checkout
    // that shared the cached target dir (see steward-testbed's repo module).
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR");
    Path::new(&dir).join(rel)
}

/// What the host checks of every verdict; a case that passes its own
/// expectation must not fail these either.
fn contract_violations(obs: &Observation, verdict: &Verdict) -> Vec<String> {
    let mut out = Vec::new();
    // The host rejects Available=True unless it verified a quorum, or did
    // not probe at all after verifying one once: the default policy must
    // never be rejected.
    let available = verdict
        .condition("Available")
        .is_some_and(|c| c.status == steward_policy_sdk::ConditionStatus::True);
    let may_say_available = match obs.quorum.unverified() {
        None => true,
        Some(u) => {
            u.kind == steward_policy_sdk::UnverifiedKind::NotProbed
                && obs.history.last_verified.is_some()
        }
    };
    if available && !may_say_available {
        out.push(format!(
            "Available=True while the host's finding is {}",
            obs.quorum.summary()
        ));
    }
    for required in ["Available", "Degraded"] {
        if verdict.condition(required).is_none() {
            out.push(format!("no {required} condition"));
        }
    }
    for (i, c) in verdict.conditions.iter().enumerate() {
        if verdict.conditions[..i].iter().any(|o| o.type_ == c.type_) {
            out.push(format!("{} appears twice", c.type_));
        }
    }
    let reasons = verdict
        .conditions
        .iter()
        .map(|c| (&c.reason, &c.message))
        .chain(verdict.events.iter().map(|e| (&e.reason, &e.message)));
    for (reason, message) in reasons {
        let camel = reason.starts_with(|c: char| c.is_ascii_uppercase())
            && reason.chars().all(|c| c.is_ascii_alphanumeric());
        if !camel {
            out.push(format!("reason {reason:?} is not CamelCase"));
        }
        if message.len() > 1024 {
            out.push(format!("message of {} bytes: {message:?}", message.len()));
        }
    }
    if verdict.ready_members as usize > obs.members.len() {
        out.push(format!(
            "readyMembers {} above the {} members",
            verdict.ready_members,
            obs.members.len()
        ));
    }
    out
}

#[test]
fn every_yaml_case_passes_against_the_native_logic() {
    let files = load_cases(&[here("tests")]).unwrap_or_else(|e| panic!("{e}"));
    let mut failures = Vec::new();
    let mut count = 0;
    for file in &files {
        for case in &file.cases {
            count += 1;
            let obs = case.observation();
            // As the component's validate-settings and evaluate do.
            let outcome = Outcome::of(
                case,
                |s| Settings::parse(s).map(drop),
                evaluate_json_settings,
            );
            let mut problems: Vec<String> = check_outcome(&case.expect, &outcome)
                .iter()
                .map(ToString::to_string)
                .collect();
            if let Outcome::Evaluated { verdict, .. } = &outcome {
                problems.extend(contract_violations(&obs, verdict));
            }
            if !problems.is_empty() {
                failures.push(format!(
                    "{} / {}:\n    {}",
                    file.path.file_name().unwrap().to_string_lossy(),
                    case.name,
                    problems.join("\n    ")
                ));
            }
        }
    }
    assert!(count >= 40, "only {count} cases were found");
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Row IDs ("A4") from the decision table in README.md.
fn table_rows() -> Vec<String> {
    let readme = std::fs::read_to_string(here("README.md")).unwrap();
    readme
        .lines()
        .filter_map(|line| line.strip_prefix("| ")?.split(" |").next())
        .map(str::trim)
        .filter(|id| {
            id.len() >= 2
                && id.starts_with(|c: char| c.is_ascii_uppercase())
                && id[1..].chars().all(|c| c.is_ascii_digit())
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_decision_table_row_has_a_case_and_every_case_a_row() {
    let rows = table_rows();
    assert!(rows.len() >= 20, "README.md table has only {rows:?}");
    let files = load_cases(&[here("tests")]).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = files
        .iter()
        .flat_map(|f| f.cases.iter().map(|c| c.name.as_str()))
        .collect();
    for row in &rows {
        let prefix = format!("{row}: ");
        assert!(
            names.iter().any(|n| n.starts_with(&prefix)),
            "row {row} of README.md has no case named \"{row}: ...\""
        );
    }
    for name in names {
        let row = name.split(':').next().unwrap();
        assert!(
            rows.iter().any(|r| r == row),
            "case {name:?} maps to no row of README.md"
        );
    }
}

#[test]
fn the_five_member_benchmark_fixture_is_a_healthy_cluster() {
    let obs = load_observation(here("tests/fixtures/five-members.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(obs.members.len(), 5);
    let verdict = evaluate_json_settings(&obs);
    let available = verdict.condition("Available").unwrap();
    assert_eq!(available.status, ConditionStatus::True, "{available:?}");
    assert_eq!(available.reason, "QuorumHealthy");
    assert_eq!(
        verdict.condition("Degraded").unwrap().status,
        ConditionStatus::False
    );
    assert_eq!(verdict.ready_members, 5);
    assert!(obs.quorum.is_verified() && verdict.decline_verification.is_none());
    assert!(verdict.events.is_empty(), "{:?}", verdict.events);
}

#[test]
fn evaluate_given_rejected_settings_uses_the_defaults_and_warns() {
    let mut obs = load_observation(here("tests/fixtures/five-members.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let healthy = evaluate_json_settings(&obs);
    obs.settings = r#"{"dbSizeWarnRatio": 1.5}"#.to_owned();
    let rejected = Settings::parse(&obs.settings).unwrap_err();
    let verdict = evaluate_json_settings(&obs);
    assert_eq!(verdict.conditions, healthy.conditions);
    let warning = verdict
        .events
        .iter()
        .find(|e| e.reason == "InvalidSettings")
        .expect("an InvalidSettings event");
    assert_eq!(
        warning.message,
        format!("using default settings: {rejected}")
    );
}

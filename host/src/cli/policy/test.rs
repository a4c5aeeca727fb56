//! `policy test`: runs YAML case files (`steward_policy_sdk::testing`)
//! through a loaded policy and reports one line per case.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use regex::Regex;
use steward_policy_sdk::testing::{self, Case};

use crate::policy::LoadedPolicy;

pub fn run(
    policy: &LoadedPolicy,
    paths: &[PathBuf],
    filter: Option<&Regex>,
) -> anyhow::Result<ExitCode> {
    let files = testing::load_cases(paths)?;
    let (mut passed, mut failed) = (0usize, 0usize);
    for file in &files {
        for case in file
            .cases
            .iter()
            .filter(|c| filter.is_none_or(|re| re.is_match(&c.name)))
        {
            let problems = problems(policy, case);
            if problems.is_empty() {
                passed += 1;
                println!("ok   {}: {}", show(&file.path), case.name);
            } else {
                failed += 1;
                println!("FAIL {}: {}", show(&file.path), case.name);
                for problem in problems {
                    println!("       {problem}");
                }
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if passed + failed == 0 {
        let what = filter.map_or(String::new(), |re| format!(" matching --run {re}"));
        eprintln!("error: no cases{what}");
        return Ok(ExitCode::FAILURE);
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Everything wrong with one case: the policy failing counts, even when the
/// fallback verdict happens to fit the expectation.
fn problems(policy: &LoadedPolicy, case: &Case) -> Vec<String> {
    let evaluation = policy.evaluate(&case.observation());
    let mut problems: Vec<String> = evaluation
        .error
        .iter()
        .map(|e| format!("policy failed ({}): {e}", e.kind()))
        .collect();
    problems.extend(
        testing::check(&case.expect, &evaluation.verdict)
            .iter()
            .map(ToString::to_string),
    );
    problems
}

fn show(path: &Path) -> String {
    path.display().to_string()
}

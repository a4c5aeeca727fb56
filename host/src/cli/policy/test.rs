//! `policy test`: runs YAML case files (`steward_policy_sdk::testing`)
//! through a loaded policy, as the operator would run it, and reports each
//! case as text, JUnit XML or JSON.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use regex::Regex;
use serde::Serialize;
use steward_policy_sdk::testing::{self, Case, CaseFile, CaseFileError, Outcome};

use crate::cluster::evaluate::{PolicyProblem, judge};
use crate::policy::{LoadedPolicy, PolicyError};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Report {
    /// One line per case, then the problems of each failed case.
    #[default]
    Text,
    /// A JUnit XML report (one testsuite per case file), for CI systems.
    Junit,
    /// A JSON document: every case with its problems, and the totals.
    Json,
}

/// One case's result.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaseResult {
    pub file: PathBuf,
    pub name: String,
    pub passed: bool,
    pub problems: Vec<String>,
    #[serde(skip)]
    pub time: Duration,
}

/// Parses every case file, so that a broken one fails at once, before the
/// policy is compiled.
pub fn load(paths: &[PathBuf]) -> Result<Vec<CaseFile>, CaseFileError> {
    testing::load_cases(paths)
}

/// A case file that cannot be used fails the run before `policy` is
/// compiled. A CI system that collects the report must still see why, not
/// an empty or missing report: in JUnit and JSON the file is one failed
/// case, whose problem is the error (`file:line:column: field: ...` for one
/// that does not parse). As text, the error line is the report.
pub fn unloadable(error: CaseFileError, policy: &str, report: Report) -> anyhow::Result<ExitCode> {
    let file = match &error {
        CaseFileError::Io { path, .. }
        | CaseFileError::Parse { path, .. }
        | CaseFileError::Invalid { path, .. } => path.clone(),
    };
    let results = [CaseResult {
        file,
        name: "the case file loads".to_owned(),
        passed: false,
        problems: vec![error.to_string()],
        time: Duration::ZERO,
    }];
    match report {
        Report::Text => return Err(error.into()),
        Report::Junit => print!("{}", junit(policy, &results)?),
        Report::Json => println!("{}", json(&results)?),
    }
    eprintln!("error: {error}");
    Ok(ExitCode::FAILURE)
}

pub fn run(
    policy: &LoadedPolicy,
    files: &[CaseFile],
    filter: Option<&Regex>,
    report: Report,
) -> anyhow::Result<ExitCode> {
    let mut results = Vec::new();
    for file in files {
        for case in file
            .cases
            .iter()
            .filter(|c| filter.is_none_or(|re| re.is_match(&c.name)))
        {
            let start = Instant::now();
            let problems = problems(policy, case);
            results.push(CaseResult {
                file: file.path.clone(),
                name: case.name.clone(),
                passed: problems.is_empty(),
                problems,
                time: start.elapsed(),
            });
        }
    }
    match report {
        Report::Text => print!("{}", text(&results)),
        Report::Junit => print!("{}", junit(&policy.info.name, &results)?),
        Report::Json => println!("{}", json(&results)?),
    }
    if results.is_empty() {
        let what = filter.map_or(String::new(), |re| format!(" matching --run {re}"));
        eprintln!("error: no cases{what}");
        return Ok(ExitCode::FAILURE);
    }
    Ok(if results.iter().all(|r| r.passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Everything wrong with one case. The policy failing counts, even when
/// the fallback verdict happens to fit the expectation; a rejection of the
/// settings is an outcome the case may expect.
fn problems(policy: &LoadedPolicy, case: &Case) -> Vec<String> {
    let mut problems = Vec::new();
    let observation = case.observation();
    let settings = match policy.validate_settings(&observation.settings) {
        Ok(()) => Ok(()),
        Err(PolicyError::Settings(why)) => Err(why),
        Err(e) => {
            problems.push(format!("validate-settings failed ({}): {e}", e.kind()));
            Ok(())
        }
    };
    // As the operator's evaluate stage runs it: the policy, then the
    // host's own checks of its verdict (crate::cluster::evaluate::judge).
    let outcome = match settings {
        Err(message) => Outcome::SettingsRejected(message),
        Ok(()) => {
            let judged = judge(&observation, policy.evaluate(&observation));
            match judged.problem {
                None => Outcome::Evaluated {
                    verdict: judged.verdict,
                    verified: judged.verified,
                },
                Some(problem) => match problem.rejection() {
                    Some(reason) => Outcome::Rejected {
                        reason: reason.to_owned(),
                        message: problem.message(),
                    },
                    None => {
                        problems.push(match &problem {
                            PolicyProblem::Failed(e) => {
                                format!("policy failed ({}): {e}", e.kind())
                            }
                            other => format!("policy failed: {}", other.message()),
                        });
                        Outcome::Evaluated {
                            verdict: judged.verdict,
                            verified: judged.verified,
                        }
                    }
                },
            }
        }
    };
    problems.extend(
        testing::check_outcome(&case.expect, &outcome)
            .iter()
            .map(ToString::to_string),
    );
    problems
}

fn text(results: &[CaseResult]) -> String {
    let mut out = String::new();
    for r in results {
        let mark = if r.passed { "ok  " } else { "FAIL" };
        out += &format!("{mark} {}: {}\n", r.file.display(), r.name);
        for problem in &r.problems {
            out += &format!("       {problem}\n");
        }
    }
    let passed = results.iter().filter(|r| r.passed).count();
    out += &format!("{passed} passed, {} failed\n", results.len() - passed);
    out
}

/// One testsuite per case file (named by its path), one testcase per case;
/// a failed case's problems are its failure's message and text.
fn junit(policy: &str, results: &[CaseResult]) -> anyhow::Result<String> {
    use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus, TestSuite};
    let mut report = quick_junit::Report::new(format!("etcd-steward policy test: {policy}"));
    let mut suites: Vec<TestSuite> = Vec::new();
    for r in results {
        let suite_name = r.file.display().to_string();
        if suites.last().is_none_or(|s| s.name.as_str() != suite_name) {
            suites.push(TestSuite::new(suite_name.clone()));
        }
        let status = if r.passed {
            TestCaseStatus::success()
        } else {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status
                .set_message(r.problems.first().cloned().unwrap_or_default())
                .set_description(r.problems.join("\n"));
            status
        };
        let mut case = TestCase::new(r.name.clone(), status);
        case.set_classname(suite_name).set_time(r.time);
        suites
            .last_mut()
            .expect("a suite was just pushed")
            .add_test_case(case);
    }
    report.add_test_suites(suites);
    Ok(report.to_string()?)
}

fn json(results: &[CaseResult]) -> anyhow::Result<String> {
    #[derive(Serialize)]
    struct Document<'a> {
        passed: usize,
        failed: usize,
        cases: &'a [CaseResult],
    }
    let passed = results.iter().filter(|r| r.passed).count();
    Ok(serde_json::to_string_pretty(&Document {
        passed,
        failed: results.len() - passed,
        cases: results,
    })?)
}

//! `etcd-steward policy test|eval|inspect`: a policy author's tools.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use steward_policy_sdk::Observation;

use crate::policy::{Limits, LoadedPolicy, PolicyEngine};

mod test;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Run YAML test cases against a policy.
    Test(TestArgs),
    /// Evaluate one observation and print the verdict.
    Eval(EvalArgs),
    /// Print what a policy component says about itself, and its digest.
    Inspect(InspectArgs),
}

#[derive(Debug, Args)]
pub struct PolicySelection {
    /// The policy component (.wasm); the built-in default policy if omitted.
    #[arg(long, value_name = "FILE.wasm")]
    pub policy: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TestArgs {
    #[command(flatten)]
    pub selection: PolicySelection,
    /// Only run cases whose name matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    pub run: Option<regex::Regex>,
    /// How to report: one line per case, a JUnit XML report for CI, or
    /// JSON. The exit code is the same for all three.
    #[arg(long, value_enum, default_value_t = test::Report::Text)]
    pub format: test::Report,
    /// Case files, or directories searched for *.yaml / *.yml. They are
    /// all parsed before the policy is compiled.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub selection: PolicySelection,
    /// The observation, as YAML (or JSON).
    #[arg(long, value_name = "OBS.yaml")]
    pub input: PathBuf,
    #[arg(short, long, value_enum, default_value_t = Format::Yaml)]
    pub output: Format,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The policy component (.wasm).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[arg(short, long, value_enum, default_value_t = Format::Yaml)]
    pub output: Format,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Yaml,
    Json,
}

pub fn run(command: PolicyCommand) -> anyhow::Result<ExitCode> {
    match command {
        PolicyCommand::Test(args) => test(args),
        PolicyCommand::Eval(args) => eval(args),
        PolicyCommand::Inspect(args) => inspect(args),
    }
}

fn engine() -> anyhow::Result<PolicyEngine> {
    PolicyEngine::new(Limits::default())
}

fn select(engine: &PolicyEngine, selection: &PolicySelection) -> anyhow::Result<Arc<LoadedPolicy>> {
    match &selection.policy {
        Some(path) => Ok(engine.load_file(path)?),
        None => Ok(engine.default_policy()),
    }
}

fn test(args: TestArgs) -> anyhow::Result<ExitCode> {
    let files = test::load(&args.paths)?;
    let engine = engine()?;
    let policy = select(&engine, &args.selection)?;
    test::run(&policy, &files, args.run.as_ref(), args.format)
}

fn eval(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let observation: Observation = steward_policy_sdk::testing::load_observation(&args.input)?;
    let engine = engine()?;
    let policy = select(&engine, &args.selection)?;
    policy
        .validate_settings(&observation.settings)
        .with_context(|| format!("{}: settings", args.input.display()))?;
    let evaluation = policy.evaluate(&observation);
    print(&evaluation.verdict, args.output)?;
    match evaluation.error {
        None => Ok(ExitCode::SUCCESS),
        Some(error) => {
            eprintln!(
                "error: {} failed ({}), the verdict above is the host's fallback: {error}",
                policy.info.name,
                error.kind()
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Inspection {
    name: String,
    version: String,
    digest: String,
    condition_types: Vec<String>,
    settings_schema: serde_json::Value,
}

fn inspect(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let engine = engine()?;
    let policy = engine.load_file(&args.file)?;
    let info = &policy.info;
    let inspection = Inspection {
        name: info.name.clone(),
        version: info.version.clone(),
        digest: format!("sha256:{}", policy.digest),
        condition_types: info.condition_types.clone(),
        // Shown as a structure when it parses, as the text it is otherwise.
        settings_schema: serde_json::from_str(&info.settings_schema)
            .unwrap_or_else(|_| serde_json::Value::String(info.settings_schema.clone())),
    };
    print(&inspection, args.output)?;
    Ok(ExitCode::SUCCESS)
}

fn print(value: &impl Serialize, format: Format) -> anyhow::Result<()> {
    let text = match format {
        Format::Yaml => serde_saphyr::to_string(value)?,
        Format::Json => serde_json::to_string_pretty(value)? + "\n",
    };
    print!("{text}");
    Ok(())
}

//! `etcd-steward policy new|test|schema|eval|inspect|push`: a policy author's tools.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use steward_policy_sdk::Observation;

use crate::policy::{EngineConfig, LoadedPolicy, PolicyEngine};

pub mod new;
pub mod push;
mod test;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Write a new policy project (Rust, Python or JavaScript) that builds
    /// and passes `policy test` as generated.
    New(NewArgs),
    /// Run YAML test cases against a policy.
    Test(TestArgs),
    /// Print the JSON Schema of the YAML test-case files, for editors and CI.
    Schema,
    /// Evaluate one observation and print the verdict.
    Eval(EvalArgs),
    /// Print what a policy component says about itself, and its digest.
    Inspect(InspectArgs),
    /// Put a component in a ConfigMap of the operator's namespace or in an
    /// OCI registry, and print the EtcdStatusPolicy that pins it.
    Push(push::PushArgs),
}

#[derive(Debug, Args)]
pub struct PolicySelection {
    /// The policy component (.wasm); the built-in default policy if omitted.
    #[arg(long, value_name = "FILE.wasm")]
    pub policy: Option<PathBuf>,
    #[command(flatten)]
    pub cache: CacheArgs,
}

#[derive(Debug, Args)]
pub struct CacheArgs {
    /// Keep compiled components here, keyed by their digest and this
    /// build's compiler settings, so a second run does not compile again
    /// [default: $XDG_CACHE_HOME/etcd-steward/compiled, or ~/.cache/...].
    #[arg(long, env = "ETCD_STEWARD_POLICY_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile every time; read and write no cache.
    #[arg(long)]
    pub no_cache: bool,
}

impl CacheArgs {
    fn dir(&self) -> Option<PathBuf> {
        if self.no_cache {
            return None;
        }
        self.cache_dir.clone().or_else(|| {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
            Some(base.join("etcd-steward/compiled"))
        })
    }
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
pub struct NewArgs {
    /// The language to write the policy in.
    #[arg(long, value_enum)]
    pub lang: new::Lang,
    /// The policy's name: lowercase letters, digits and dashes.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Where to create the NAME directory.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
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
    #[command(flatten)]
    pub cache: CacheArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Yaml,
    Json,
}

pub fn run(command: PolicyCommand) -> anyhow::Result<ExitCode> {
    match command {
        PolicyCommand::New(args) => {
            let root = new::scaffold(args.lang, &args.name, &args.dir)?;
            print!("{}", new::summary(args.lang, &args.name, &root));
            Ok(ExitCode::SUCCESS)
        }
        PolicyCommand::Test(args) => test(args),
        PolicyCommand::Schema => {
            let schema = steward_policy_sdk::testing::case_file_schema();
            println!("{}", serde_json::to_string_pretty(&schema)?);
            Ok(ExitCode::SUCCESS)
        }
        PolicyCommand::Eval(args) => eval(args),
        PolicyCommand::Inspect(args) => inspect(args),
        PolicyCommand::Push(args) => push::run(args),
    }
}

fn engine(cache: &CacheArgs) -> anyhow::Result<PolicyEngine> {
    PolicyEngine::new(EngineConfig {
        cache_dir: cache.dir(),
        ..EngineConfig::default()
    })
}

fn select(engine: &PolicyEngine, selection: &PolicySelection) -> anyhow::Result<Arc<LoadedPolicy>> {
    match &selection.policy {
        Some(path) => Ok(engine.load_file(path)?),
        None => Ok(engine.default_policy()),
    }
}

fn test(args: TestArgs) -> anyhow::Result<ExitCode> {
    let files = test::load(&args.paths)?;
    let engine = engine(&args.selection.cache)?;
    let policy = select(&engine, &args.selection)?;
    test::run(&policy, &files, args.run.as_ref(), args.format)
}

fn eval(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let observation: Observation = steward_policy_sdk::testing::load_observation(&args.input)?;
    let engine = engine(&args.selection.cache)?;
    let policy = select(&engine, &args.selection)?;
    policy
        .validate_settings(&observation.settings)
        .with_context(|| format!("{}: settings", args.input.display()))?;
    // As the operator runs it: the policy, then the host's checks.
    let evaluation = policy.evaluate(&observation);
    let judged = crate::cluster::evaluate::judge(&observation, evaluation);
    print(&judged.verdict, args.output)?;
    match judged.problem {
        None => {
            eprintln!(
                "verified: {} (the host's finding: {})",
                judged.verified,
                observation.quorum.summary()
            );
            Ok(ExitCode::SUCCESS)
        }
        Some(problem) => {
            let what = match &problem {
                crate::cluster::evaluate::PolicyProblem::Failed(e) => {
                    format!("{} failed ({})", policy.info.name, e.kind())
                }
                other => format!(
                    "the operator rejects {}'s verdict ({})",
                    policy.info.name,
                    other.rejection().unwrap_or(other.reason())
                ),
            };
            eprintln!(
                "error: {what}, the verdict above is the host's fallback: {}",
                problem.message()
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
    let engine = engine(&args.cache)?;
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

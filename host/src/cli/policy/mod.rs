//! `etcd-steward policy new|test|schema|eval|inspect|push`: a policy author's tools.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use steward_policy_sdk::Observation;

use crate::api::{EtcdStatusPolicy, EtcdStatusPolicySpec};
use crate::policy::{EngineConfig, Limits, LoadedPolicy, PolicyEngine};

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
    /// Print what a policy component says about itself, its digest, and
    /// its size and core instances against the limits.
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
    pub limits: LimitArgs,
    #[command(flatten)]
    pub cache: CacheArgs,
}

/// The limits the policy runs under, set as an EtcdStatusPolicy's
/// spec.limits sets them, so that what is tried here is what the operator
/// enforces. Without any, the operator's defaults.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// The spec.limits of this EtcdStatusPolicy manifest (the one
    /// document of that kind in the file).
    #[arg(long, value_name = "FILE.yaml", help_heading = LIMITS)]
    pub limits_from: Option<PathBuf>,
    /// deadlineMilliseconds; overrides --limits-from.
    #[arg(long, value_name = "MS", help_heading = LIMITS,
          value_parser = clap::value_parser!(i32).range(1..))]
    pub deadline_ms: Option<i32>,
    /// memoryBytes; overrides --limits-from.
    #[arg(long, value_name = "BYTES", help_heading = LIMITS,
          value_parser = clap::value_parser!(i64).range(65536..))]
    pub memory_bytes: Option<i64>,
    /// componentBytes; overrides --limits-from.
    #[arg(long, value_name = "BYTES", help_heading = LIMITS,
          value_parser = clap::value_parser!(i64).range(8..))]
    pub component_bytes: Option<i64>,
}

const LIMITS: &str = "Limits (as spec.limits sets them; the operator's defaults for the rest)";

impl LimitArgs {
    /// The limits asked for, or None when none are (the operator's
    /// defaults). Limits above the operator's maximum are refused with the
    /// message the operator gives such an EtcdStatusPolicy.
    fn resolve(&self, engine: &PolicyEngine) -> anyhow::Result<Option<Limits>> {
        let flags = self.deadline_ms.is_some()
            || self.memory_bytes.is_some()
            || self.component_bytes.is_some();
        let mut policy = match &self.limits_from {
            Some(path) => status_policy_in(path)?,
            None if !flags => return Ok(None),
            // Only its limits are read.
            None => EtcdStatusPolicy::new(
                "",
                EtcdStatusPolicySpec {
                    digest: String::new(),
                    source: Default::default(),
                    limits: Default::default(),
                },
            ),
        };
        let spec = &mut policy.spec.limits;
        spec.deadline_milliseconds = self.deadline_ms.or(spec.deadline_milliseconds);
        spec.memory_bytes = self.memory_bytes.or(spec.memory_bytes);
        spec.component_bytes = self.component_bytes.or(spec.component_bytes);
        // As the operator makes them: the same function, the same defaults
        // and maximum (its own may be raised with `run --policy-max-*`).
        let limits = crate::status_policy::limits_of(&policy, engine.limits());
        if let Some(over) = limits.exceeding(engine.maximum()) {
            anyhow::bail!(
                "spec.limits: {over} (the operator refuses such an EtcdStatusPolicy: LimitsExceeded)"
            );
        }
        Ok(Some(limits))
    }
}

/// The one EtcdStatusPolicy in a YAML file of one or more documents (what
/// `policy push` prints, or a file that also holds its ConfigMap).
fn status_policy_in(path: &std::path::Path) -> anyhow::Result<EtcdStatusPolicy> {
    let at = || format!("--limits-from {}", path.display());
    let text = std::fs::read_to_string(path).with_context(at)?;
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).with_context(at)?;
    let mut policies = docs
        .into_iter()
        .filter(|doc| doc["kind"] == "EtcdStatusPolicy");
    let (Some(policy), None) = (policies.next(), policies.next()) else {
        anyhow::bail!("{}: expected one document of kind EtcdStatusPolicy", at());
    };
    serde_json::from_value(policy).with_context(|| format!("{}: EtcdStatusPolicy", at()))
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
    let Some(limits) = selection.limits.resolve(engine)? else {
        return match &selection.policy {
            Some(path) => Ok(engine.load_file(path)?),
            None => Ok(engine.default_policy()),
        };
    };
    Ok(match &selection.policy {
        Some(path) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            engine
                .load_with(&bytes, &limits)
                .with_context(|| path.display().to_string())?
        }
        None => engine.load_with(crate::policy::DEFAULT_POLICY_WASM, &limits)?,
    })
}

fn test(args: TestArgs) -> anyhow::Result<ExitCode> {
    let files = match test::load(&args.paths) {
        Ok(files) => files,
        Err(e) => {
            let policy = args
                .selection
                .policy
                .as_ref()
                .map_or("the embedded default policy".into(), |p| {
                    p.display().to_string()
                });
            return test::unloadable(e, &policy, args.format);
        }
    };
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
    /// The component's size in bytes, against spec.limits.componentBytes.
    component_bytes: Usage,
    /// Core instances one evaluation creates, against spec.limits.instances.
    instances: Usage,
}

/// What a component takes of one limit: what a policy that sets none gets,
/// and the most an EtcdStatusPolicy may ask for.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Usage {
    used: u64,
    default_limit: u64,
    maximum: u64,
}

fn inspect(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let engine = engine(&args.cache)?;
    let policy = engine.load_file(&args.file)?;
    let bytes =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let (defaults, maximum) = (engine.limits(), engine.maximum());
    let info = &policy.info;
    let inspection = Inspection {
        name: info.name.clone(),
        version: info.version.clone(),
        digest: format!("sha256:{}", policy.digest),
        condition_types: info.condition_types.clone(),
        // Shown as a structure when it parses, as the text it is otherwise.
        settings_schema: serde_json::from_str(&info.settings_schema)
            .unwrap_or_else(|_| serde_json::Value::String(info.settings_schema.clone())),
        component_bytes: Usage {
            used: bytes.len() as u64,
            default_limit: defaults.component_bytes as u64,
            maximum: maximum.component_bytes as u64,
        },
        instances: Usage {
            used: core_instances(&engine, &bytes).into(),
            default_limit: defaults.instances.into(),
            maximum: maximum.instances.into(),
        },
    };
    print(&inspection, args.output)?;
    Ok(ExitCode::SUCCESS)
}

/// The core instances one instantiation of a component creates, which
/// loads under the default limits. wasmtime counts them only against a
/// limit, so this is the smallest `instances` the component loads under:
/// the count exactly as the operator enforces it. A load instantiates it
/// once (describe()), from the compiled component the first load left.
fn core_instances(engine: &PolicyEngine, bytes: &[u8]) -> u32 {
    let loads = |instances| {
        let limits = Limits {
            instances,
            ..engine.limits().clone()
        };
        engine.load_with(bytes, &limits).is_ok()
    };
    // It loads under `high`, and under nothing below `low`.
    let (mut low, mut high) = (1, engine.limits().instances);
    while low < high {
        let mid = low + (high - low) / 2;
        if loads(mid) {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    high
}

fn print(value: &impl Serialize, format: Format) -> anyhow::Result<()> {
    let text = match format {
        Format::Yaml => serde_saphyr::to_string(value)?,
        Format::Json => serde_json::to_string_pretty(value)? + "\n",
    };
    print!("{text}");
    Ok(())
}

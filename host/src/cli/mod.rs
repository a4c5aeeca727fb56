//! The `etcd-steward` command line: one module per subcommand group.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod crd;
pub mod policy;
pub mod run;
#[cfg(feature = "sandbox")]
pub mod sandbox;
pub mod snapshot;

/// The release and the commit it was built from (`host/build.rs`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("ETCD_STEWARD_COMMIT"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "etcd-steward",
    version = VERSION,
    about = "An etcd operator for Kubernetes"
)]
pub struct Cli {
    /// The log's form on stderr: `text` for people (coloured only on a
    /// terminal, and never with NO_COLOR set), `json` for collectors (one
    /// object per line). The level comes from RUST_LOG (default: warn).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = LogFormat::Text,
        env = "ETCD_STEWARD_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator against the cluster of the current kubeconfig (or in-cluster).
    Run(run::RunArgs),
    /// Print the CRDs (EtcdCluster, EtcdMember, EtcdStatusPolicy, EtcdSnapshot,
    /// EtcdBackupSchedule) as YAML.
    Crd,
    /// A local sandbox: test control plane, real etcd, the operator and an
    /// example EtcdCluster, in one process. Not for production.
    #[cfg(feature = "sandbox")]
    Sandbox(sandbox::SandboxArgs),
    /// Test, evaluate and inspect status policies, without a cluster.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// The steps of the snapshot Pods (save, verify's fetch, retention's
    /// remove) and of a restored seed's init containers (fetch, install).
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Parses the command line, runs it, and turns any error into one line on
/// stderr and a failing exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let outcome = match cli.command {
        Command::Policy(command) => policy::run(command),
        Command::Crd => crd::run().map(|()| ExitCode::SUCCESS),
        Command::Snapshot(command) => snapshot::run(command).map(|()| ExitCode::SUCCESS),
        Command::Run(args) => runtime()
            .and_then(|rt| rt.block_on(run::run(args)))
            .map(|()| ExitCode::SUCCESS),
        // The private mount namespace must be entered while the process
        // still has one thread, so before the runtime starts.
        #[cfg(feature = "sandbox")]
        Command::Sandbox(args) => sandbox::prepare(&args)
            .and_then(|()| runtime())
            .and_then(|rt| rt.block_on(sandbox::run(args)))
            .map(|()| ExitCode::SUCCESS),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Colour codes are noise in `kubectl logs` and in files.
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
            .init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
}

/// An error and its causes, on one line; a cause the message already quotes
/// is not repeated.
fn error_chain(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let cause = cause.to_string();
        if line.contains(&cause) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
    }
    crate::text::one_line(&line)
}

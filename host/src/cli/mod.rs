//! The `etcd-steward` command line: one module per subcommand group.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod crd;
pub mod policy;
pub mod run;
#[cfg(feature = "sandbox")]
pub mod sandbox;

#[derive(Debug, Parser)]
#[command(
    name = "etcd-steward",
    version,
    about = "An etcd operator for Kubernetes"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator against the cluster of the current kubeconfig (or in-cluster).
    Run(run::RunArgs),
    /// Print the CRDs (EtcdCluster, EtcdMember, EtcdStatusPolicy) as YAML.
    Crd,
    /// A local sandbox: test control plane, real etcd, the operator and an
    /// example EtcdCluster, in one process. Not for production.
    #[cfg(feature = "sandbox")]
    Sandbox(sandbox::SandboxArgs),
    /// Test, evaluate and inspect status policies, without a cluster.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Parses the command line, runs it, and turns any error into one line on
/// stderr and a failing exit code.
pub fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Policy(command) => policy::run(command),
        Command::Crd => crd::run().map(|()| ExitCode::SUCCESS),
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

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
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

//! `etcd-steward sandbox`: the test control plane (the real kube-apiserver,
//! controller-manager and scheduler, and the local kubelet running real
//! etcd) and the operator in one process, with an example EtcdCluster. For trying etcd-steward without a cluster; the
//! operator inside is the same code `etcd-steward run` runs in-cluster.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use steward_testbed::ControlPlane;

use super::run::{Operator, RunArgs};
use crate::api::EtcdCluster;

#[derive(Args, Debug, Clone)]
pub struct SandboxArgs {
    /// Where the sandbox keeps its kubeconfig, etcd data and logs.
    #[arg(long, default_value = ".sandbox")]
    pub dir: PathBuf,
    /// Members of the example EtcdCluster.
    #[arg(long, default_value_t = 3)]
    pub members: i32,
    /// Start only the control plane and the kubelet (no operator, no example).
    #[arg(long)]
    pub control_plane_only: bool,
    /// Replay the seed incident: stop every member gracefully, print the
    /// status timeline, bring the node back, and exit once it recovered.
    #[arg(long, conflicts_with = "control_plane_only")]
    pub replay_incident: bool,
}

/// Must run before any thread exists: it enters a private mount namespace
/// so Pod names can be published in a private /etc/hosts.
pub fn prepare(args: &SandboxArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    steward_testbed::namespace::enter_private_mount_namespace(&args.dir)
}

pub async fn run(args: SandboxArgs) -> anyhow::Result<()> {
    let dir = std::fs::canonicalize(&args.dir)?;
    if args.control_plane_only {
        return steward_testbed::run_control_plane_only(&dir).await;
    }
    let plane = ControlPlane::start(&dir).await?;
    let kubeconfig = publish_kubeconfig(&plane, &dir)?;
    let client = plane.client();
    install_crds(&client).await?;

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let operator = Operator::new(RunArgs {
        metrics_addr: String::new(),
        ..sandbox_run_args()
    });
    let operator = tokio::spawn(operator.run(client.clone(), async {
        let _ = stop_rx.await;
    }));

    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), "default");
    let example: EtcdCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "etcd.steward.dev/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": {"name": "example", "namespace": "default"},
        "spec": {"replicas": args.members, "version": "3.5.1", "storage": {"size": "1Gi"}}
    }))?;
    clusters.create(&PostParams::default(), &example).await?;

    println!(
        "etcd-steward sandbox is running: kube-apiserver, controller-manager, scheduler, local kubelet (real etcd), operator."
    );
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!(
        "  export PATH={}:$PATH   # the kubectl built with this control plane",
        plane.binaries().dir.display()
    );
    println!("  kubectl get etcdclusters        # VERSION REPLICAS READY AVAILABLE VERIFIED AGE");
    println!("  kubectl get etcdmembers,pods");
    println!("  kubectl describe etcdcluster example");
    println!("  etcd logs: {}/kubelet/pods/", dir.display());
    println!();

    let timeline = tokio::spawn(print_timeline(clusters.clone()));
    let outcome = if args.replay_incident {
        replay_incident(&plane, &clusters, args.members).await
    } else {
        println!("Press Ctrl-C to stop; every etcd started here is stopped.");
        tokio::signal::ctrl_c().await.map_err(Into::into)
    };

    timeline.abort();
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), operator).await;
    plane.shutdown().await;
    println!("sandbox stopped; no etcd left running.");
    outcome
}

/// Applies the CRDs (server-side, so a second run is a no-op) and waits
/// until the apiserver serves them.
async fn install_crds(client: &kube::Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crate::api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(
            &name,
            &PatchParams::apply("etcd-steward-sandbox").force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("installing {name}"))?;
        let start = Instant::now();
        loop {
            let got = crds.get(&name).await?;
            let established = got
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            anyhow::ensure!(
                start.elapsed() < Duration::from_secs(60),
                "{name} was not Established within a minute"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

fn sandbox_run_args() -> RunArgs {
    use clap::Parser;
    #[derive(Parser)]
    struct Defaults {
        #[command(flatten)]
        run: RunArgs,
    }
    Defaults::parse_from(["sandbox"]).run
}

fn publish_kubeconfig(plane: &ControlPlane, dir: &Path) -> anyhow::Result<PathBuf> {
    let kubeconfig = dir.join("kubeconfig");
    if plane.kubeconfig_path() != kubeconfig {
        std::fs::copy(plane.kubeconfig_path(), &kubeconfig)
            .with_context(|| format!("writing {}", kubeconfig.display()))?;
    }
    Ok(kubeconfig)
}

/// One line per change of what a user (or Flux, or Argo) would read.
async fn print_timeline(clusters: Api<EtcdCluster>) {
    let start = Instant::now();
    let mut last = String::new();
    let mut stream = watcher(clusters, watcher::Config::default())
        .applied_objects()
        .boxed();
    while let Some(Ok(c)) = stream.next().await {
        let line = summary(&c);
        if line != last {
            println!("[{:>6.1}s] {line}", start.elapsed().as_secs_f64());
            last = line;
        }
    }
}

fn cond<'a>(c: &'a EtcdCluster, t: &str) -> (&'a str, &'a str) {
    c.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|x| x.type_ == t))
        .map_or(("-", "-"), |x| (x.status.as_str(), x.reason.as_str()))
}

fn summary(c: &EtcdCluster) -> String {
    let (avail, avail_reason) = cond(c, "Available");
    let (degraded, degraded_reason) = cond(c, "Degraded");
    let ready = c.status.as_ref().map_or(0, |s| s.ready_members);
    format!(
        "{}: Available={avail} ({avail_reason}) Degraded={degraded} ({degraded_reason}) ready={ready}/{}",
        c.metadata.name.as_deref().unwrap_or(""),
        c.spec.replicas
    )
}

async fn wait_until(
    clusters: &Api<EtcdCluster>,
    pred: impl Fn(&EtcdCluster) -> bool,
    bound: Duration,
) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let c = clusters.get("example").await?;
        if pred(&c) {
            return Ok(());
        }
        anyhow::ensure!(
            start.elapsed() < bound,
            "gave up after {bound:?}: {}",
            summary(&c)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn replay_incident(
    plane: &ControlPlane,
    clusters: &Api<EtcdCluster>,
    members: i32,
) -> anyhow::Result<()> {
    let healthy = |c: &EtcdCluster| {
        cond(c, "Available").0 == "True"
            && c.status
                .as_ref()
                .is_some_and(|s| s.ready_members == members)
    };
    println!("== waiting for the example cluster to be Available with {members} members");
    wait_until(clusters, healthy, Duration::from_secs(180)).await?;

    println!(
        "== the incident: the node shuts down gracefully; every etcd exits 0 and its Pod goes Succeeded"
    );
    let outage = Instant::now();
    // Watch while the node stops: etcd takes seconds to exit gracefully.
    let (_, detected) = tokio::join!(plane.kubelet().stop_node(), async {
        wait_until(
            clusters,
            |c| cond(c, "Available").0 == "False",
            Duration::from_secs(60),
        )
        .await
        .map(|()| outage.elapsed())
    });
    println!(
        "== Available turned False {:.1}s after the outage began (the incident's operator never did)",
        detected?.as_secs_f64()
    );

    tokio::time::sleep(Duration::from_secs(5)).await;
    println!("== the node comes back; the operator recreates the Succeeded Pods on their PVCs");
    let back = Instant::now();
    plane.kubelet().start_node();
    wait_until(clusters, healthy, Duration::from_secs(180)).await?;
    println!(
        "== Available is True again {:.1}s after the node came back",
        back.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(())
}

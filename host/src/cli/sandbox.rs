//! `etcd-steward sandbox`: the test control plane (the real kube-apiserver,
//! controller-manager and scheduler, and the local kubelet running real
//! etcd) and the operator in one process, with an example EtcdCluster. For trying etcd-steward without a cluster; the
//! operator inside is the same code `etcd-steward run` runs in-cluster.
//!
//! It ships any policy, as a cluster would: the operator's namespace (where
//! policy sources live) exists, and the tests' OCI registry (the CNCF
//! distribution registry, plain HTTP on loopback) runs beside it, so a
//! Python or JavaScript component, too large for a ConfigMap, can be pushed
//! and pinned. What to run is printed at start.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use steward_testbed::ControlPlane;
use steward_testbed::registry::Registry;

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
    /// Make the example a TLS cluster: a fresh CA under <dir>/tls, the
    /// serving, peer and operator certificates in Secrets, and spec.tls
    /// naming them (https on the client and peer ports, client
    /// certificates required).
    #[arg(long, conflicts_with = "control_plane_only")]
    pub tls: bool,
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
    let run_args = RunArgs {
        metrics_addr: String::new(),
        ..sandbox_run_args()
    };
    let policy_namespace = run_args.operator_config().policy_namespace;
    create_namespace(&client, &policy_namespace).await?;
    // Without it the sandbox still runs: only ConfigMap sources then.
    let registry = Registry::start(plane.binaries()).await;

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let operator = Operator::new(run_args);
    let operator = tokio::spawn(operator.run(client.clone(), async {
        let _ = stop_rx.await;
    }));

    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), "default");
    let mut spec = serde_json::json!({"replicas": args.members, "version": crate::api::DEFAULT_ETCD_VERSION, "storage": {"size": "1Gi"}});
    let tls = if args.tls {
        let pki = tls_secrets(&client, &dir).await?;
        spec["tls"] = steward_testbed::etcd_tls::spec("example");
        Some(pki)
    } else {
        None
    };
    let example: EtcdCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "etcd.steward.dev/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": {"name": "example", "namespace": "default"},
        "spec": spec,
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
    if let Some(tls) = &tls {
        println!(
            "  TLS: the CA is {}, the operator's client certificate {} (key {}); docs/control-plane.md says how to reach the members",
            tls.ca_cert().display(),
            tls.dir().join("example-operator-1.crt").display(),
            tls.dir().join("example-operator-1.key").display(),
        );
    }
    println!();
    print!(
        "{}",
        shipping_help(
            &policy_namespace,
            registry
                .as_ref()
                .map(|r| r.addr.as_str())
                .map_err(|e| format!("{e:#}"))
        )
    );
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
    if let Ok(registry) = registry {
        registry.stop().await;
    }
    plane.shutdown().await;
    println!("sandbox stopped; no etcd left running.");
    outcome
}

/// A fresh CA under `<dir>/tls` and the example's TLS Secrets from it.
async fn tls_secrets(
    client: &kube::Client,
    dir: &Path,
) -> anyhow::Result<steward_testbed::pki::Pki> {
    let pki = steward_testbed::pki::Pki::create(&dir.join("tls"))?;
    // The sandbox's Pods have loopback addresses, so a member's peer
    // connections come from 127.0.0.1, which its peer certificate must
    // name (etcd checks it); the tests' Pods have addresses of their own.
    let certs = steward_testbed::etcd_tls::EtcdCerts::issue_with_peer_hosts(
        &pki,
        "example",
        "default",
        "1",
        &["127.0.0.1"],
    )?;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), "default");
    for secret in certs.secrets("example", "default", pki.ca_pem()) {
        secrets.create(&PostParams::default(), &secret).await?;
    }
    Ok(pki)
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

/// Creates `name` (server-side, so a second run is a no-op): the
/// operator reads policy sources there, and `policy push --configmap`
/// writes them there.
async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name},
    });
    namespaces
        .patch(
            name,
            &PatchParams::apply("etcd-steward-sandbox").force(),
            &Patch::Apply(&namespace),
        )
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// How to ship a policy to this sandbox: through the registry at
/// `registry` (or why there is none), or a ConfigMap in `namespace`.
fn shipping_help(namespace: &str, registry: Result<&str, String>) -> String {
    use crate::cli::policy::push::WASM_CONFIG_MEDIA_TYPE;
    use crate::policy::source::WASM_LAYER_MEDIA_TYPE;
    let mut out = String::from(
        "Ship a status policy (docs/writing-policies.md, \"Shipping to etcd-steward sandbox\"):\n",
    );
    out += &format!("  policy sources live in namespace {namespace} (created)\n");
    match registry {
        Ok(addr) => {
            let at = format!("{addr}/policies/NAME:v1");
            out += &format!(
                "  an OCI registry for any size (plain HTTP, no account) listens on {addr}:\n"
            );
            out += &format!(
                "    etcd-steward policy push --oci {at} --insecure NAME.wasm | kubectl apply -f -\n"
            );
            out += "    # or with oras (beside kubectl, on the PATH above):\n";
            out += "    echo '{\"architecture\":\"wasm\",\"os\":\"wasip2\"}' > config.json\n";
            out += &format!(
                "    oras push --plain-http {at} --config config.json:{WASM_CONFIG_MEDIA_TYPE} NAME.wasm:{WASM_LAYER_MEDIA_TYPE}\n"
            );
            out += &format!(
                "    # then an EtcdStatusPolicy with spec.source.oci: {{reference: {at}, insecure: true}}\n"
            );
        }
        Err(why) => out += &format!("  no OCI registry: {why}\n"),
    }
    out += "  a ConfigMap, for a component up to 1 MiB (Rust; not Python or JavaScript):\n";
    out += &format!(
        "    etcd-steward policy push --configmap NAME --namespace {namespace} NAME.wasm | kubectl apply -f -\n"
    );
    out += "  then select it: kubectl patch ec example --type merge -p '{\"spec\":{\"statusPolicy\":{\"name\":\"NAME\"}}}'\n";
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What the sandbox prints is what works: the media types the
    /// operator pulls and `policy push` writes, the testbed registry's,
    /// and the namespace the operator reads.
    #[test]
    fn the_shipping_help_uses_the_layout_the_operator_pulls() {
        let help = shipping_help("etcd-steward-system", Ok("127.0.0.1:5000"));
        for layout in [
            steward_testbed::registry::WASM_CONFIG_MEDIA_TYPE,
            steward_testbed::registry::WASM_LAYER_MEDIA_TYPE,
        ] {
            assert!(help.contains(layout), "{layout} in\n{help}");
        }
        assert!(help.contains(
            "etcd-steward policy push --oci 127.0.0.1:5000/policies/NAME:v1 --insecure NAME.wasm"
        ));
        assert!(help.contains("--namespace etcd-steward-system"));
        let without = shipping_help("ops", Err("no `registry` binary".into()));
        assert!(without.contains("no OCI registry: no `registry` binary"));
        assert!(!without.contains("oras push"));
    }
}

//! The kubelet's Node: registration, the Lease heartbeat the node lifecycle
//! controller watches, and the Ready condition.
//!
//! As a real kubelet: the Lease in `kube-node-lease` is renewed every 10 s
//! with a 40 s duration, and the Node's status is written on registration
//! and then every minute (`nodeStatusReportFrequency` is 5 min upstream; a
//! minute keeps `kubectl describe node` fresh without a write per probe).
//! When the kubelet stops (or [`super::Kubelet::stop_node`]) both stop, and
//! the controller-manager marks the Node NotReady by itself.

use std::time::Duration;

use anyhow::{Context, Result};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::NODE_NAME;

const LEASE_NAMESPACE: &str = "kube-node-lease";
const LEASE_DURATION_SECONDS: i32 = 40;
const RENEW_EVERY: Duration = Duration::from_secs(10);
const STATUS_EVERY: Duration = Duration::from_secs(60);

/// Creates the Node (or takes over the one left by an earlier run) with a
/// Ready status.
pub(crate) async fn register(client: &Client) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "labels": {
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
            },
        },
    }))?;
    match api.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e).context("registering the Node"),
    }
    write_status(&api, true).await?;
    renew_lease(client).await
}

/// Renews the Lease and refreshes the status while `up` says the node runs.
pub(crate) async fn heartbeat(client: Client, mut up: watch::Receiver<bool>) {
    let api: Api<Node> = Api::all(client.clone());
    let mut renew = tokio::time::interval(RENEW_EVERY);
    let mut status = tokio::time::interval(STATUS_EVERY);
    loop {
        tokio::select! {
            _ = renew.tick() => {
                if *up.borrow() && let Err(e) = renew_lease(&client).await {
                    tracing::debug!("renewing the node lease: {e:#}");
                }
            }
            _ = status.tick() => {
                if *up.borrow() && let Err(e) = write_status(&api, true).await {
                    tracing::debug!("writing the node status: {e:#}");
                }
            }
            changed = up.changed() => {
                if changed.is_err() {
                    return;
                }
                if *up.borrow() {
                    // Back up: report Ready at once, as a restarted kubelet does.
                    let _ = renew_lease(&client).await;
                    let _ = write_status(&api, true).await;
                }
            }
        }
    }
}

async fn renew_lease(client: &Client) -> Result<()> {
    let api: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let now = micro_time();
    match api.get_opt(NODE_NAME).await? {
        None => {
            let lease: Lease = serde_json::from_value(json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": NODE_NAME, "namespace": LEASE_NAMESPACE},
                "spec": {
                    "holderIdentity": NODE_NAME,
                    "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                    "renewTime": now,
                },
            }))?;
            api.create(&PostParams::default(), &lease).await?;
        }
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.holder_identity = Some(NODE_NAME.into());
            spec.lease_duration_seconds = Some(LEASE_DURATION_SECONDS);
            spec.renew_time = Some(serde_json::from_value(json!(now))?);
            api.replace(NODE_NAME, &PostParams::default(), &lease)
                .await?;
        }
    }
    Ok(())
}

async fn write_status(api: &Api<Node>, ready: bool) -> Result<()> {
    let now = Timestamp::from_second(Timestamp::now().as_second())?.to_string();
    let condition = |kind: &str, status: bool, reason: &str, message: &str| -> Value {
        json!({
            "type": kind,
            "status": if status { "True" } else { "False" },
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        })
    };
    // Enough room that the scheduler never turns an etcd Pod away for its
    // requests: the node is this machine, shared with everything else.
    let capacity = json!({
        "cpu": "64",
        "memory": "256Gi",
        "pods": "500",
        "ephemeral-storage": "1Ti",
    });
    let status = json!({"status": {
        "capacity": capacity,
        "allocatable": capacity,
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": NODE_NAME},
        ],
        "conditions": [
            condition("MemoryPressure", false, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", false, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", false, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", ready, "KubeletReady", "steward-testbed local kubelet is posting ready status"),
        ],
        "nodeInfo": {
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
            "kernelVersion": "",
            "osImage": "steward-testbed local kubelet (processes, no containers)",
            "containerRuntimeVersion": "local://",
            "kubeletVersion": "v1.37.2",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": std::env::consts::ARCH,
        },
    }});
    // A merge patch of conditions replaces the list; the lifecycle
    // controller's own changes (Unknown) are overwritten with the truth
    // once the kubelet is back, exactly as a real kubelet does.
    api.patch_status(
        NODE_NAME,
        &PatchParams::default(),
        &Patch::Strategic(&status),
    )
    .await
    .context("writing the Node status")?;
    Ok(())
}

fn micro_time() -> String {
    Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

//! The write gap of day-2 operations, for docs/benchmarks.md: a client
//! writes through every member's endpoint (as through the client Service,
//! which the testbed has no proxy for) while the operator
//! - rolls a 3-member cluster from etcd 3.5.36 to the default 3.6 release
//!   (followers first, MoveLeader, the leader last), and
//! - scales 5 -> 3 with the leader on a member being removed (MoveLeader
//!   first);
//! - renews the serving, peer and operator certificates of a TLS cluster
//!   in their Secrets (members pick them up in place). Here the client is
//!   etcdctl, once per write, through the client Service: each write makes
//!   a new handshake with whichever member the Service picks, as a
//!   short-lived client would.
//!
//! Reported: failed writes, and the longest window in which writes failed
//! (from the start of the first failed write to the start of the next
//! successful one). The goal: no window longer than one leader election
//! (etcd's default election timeout, 1 s).
//!
//! ```sh
//! ETCD_STEWARD_ETCD_DIR=$(scripts/ensure-etcd.sh) \
//!   scripts/in-namespace.sh cargo bench --profile dev -p etcd-steward --bench write_gap
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::*;

/// Each write's start and whether it succeeded.
type Log = Vec<(Instant, bool)>;

async fn writer(endpoints: Vec<String>, stop: Arc<AtomicBool>) -> Log {
    let options = etcd_client::ConnectOptions::new()
        .with_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(500));
    let mut client = etcd_client::Client::connect(&endpoints, Some(options))
        .await
        .expect("connecting the writer");
    let mut log = Vec::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let ok = client
            .put("/steward/gap", i.to_string(), None)
            .await
            .is_ok();
        log.push((t, ok));
        i += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    log
}

/// One etcdctl per write through `service`, with `flags` (TLS).
async fn etcdctl_writer(
    bin: std::path::PathBuf,
    service: String,
    flags: Vec<String>,
    stop: Arc<AtomicBool>,
) -> Log {
    let mut log = Vec::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let ok = tokio::process::Command::new(&bin)
            .arg(format!("--endpoints={service}"))
            .args(["--dial-timeout=2s", "--command-timeout=3s"])
            .args(&flags)
            .args(["put", "/steward/gap", &i.to_string()])
            .output()
            .await
            .expect("running etcdctl")
            .status
            .success();
        log.push((t, ok));
        i += 1;
    }
    log
}

/// (writes, failed, longest failing window).
fn gap(log: &Log) -> (usize, usize, Duration) {
    let failed = log.iter().filter(|(_, ok)| !ok).count();
    let mut longest = Duration::ZERO;
    let mut since: Option<Instant> = None;
    for (t, ok) in log {
        match (ok, since) {
            (false, None) => since = Some(*t),
            (true, Some(s)) => {
                longest = longest.max(*t - s);
                since = None;
            }
            _ => {}
        }
    }
    (log.len(), failed, longest)
}

fn report(what: &str, log: &Log, took: Duration) {
    let (n, failed, longest) = gap(log);
    println!(
        "{what:<40} writes={n:<5} failed={failed:<3} longest_gap={:>5.0}ms operation={:.1}s",
        longest.as_secs_f64() * 1000.0,
        took.as_secs_f64()
    );
}

async fn measured<F: std::future::Future<Output = ()>>(
    env: &Env,
    cluster: &str,
    op: F,
) -> (Log, Duration) {
    let endpoints: Vec<String> = env
        .member_names(cluster)
        .await
        .iter()
        .map(|m| env.client_url(cluster, m))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn(writer(endpoints, stop.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t0 = Instant::now();
    op.await;
    let took = t0.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    (task.await.unwrap(), took)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("write_gap: bench");
        return;
    }
    run(async {
        let env = Env::start().await;
        let target = etcd_steward::api::DEFAULT_ETCD_VERSION;
        for round in 0..3 {
            let name = format!("up{round}");
            env.create_cluster_at(&name, 3, "3.5.36").await;
            env.wait_available(&name, 3).await;
            let (log, took) = measured(&env, &name, async {
                env.clusters()
                    .patch(
                        &name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(serde_json::json!({"spec": {"version": target}})),
                    )
                    .await
                    .unwrap();
                env.wait_for(&name, "every member runs the target", |c| {
                    condition(c, "Reconciling") == Some("False")
                        && c.status.as_ref().is_some_and(|s| {
                            s.members.len() == 3
                                && s.members
                                    .iter()
                                    .all(|m| m.version.as_deref() == Some(target))
                        })
                })
                .await;
            })
            .await;
            report(
                &format!("upgrade 3.5.36 -> {target}, round {round}"),
                &log,
                took,
            );
            env.clusters()
                .delete(&name, &Default::default())
                .await
                .unwrap();
        }

        let tls = env.create_tls_cluster("rot", 3).await;
        env.wait_available("rot", 3).await;
        for round in 0..3 {
            let renewed = EtcdCerts::issue(&tls.pki, "rot", NS, &(round + 2).to_string()).unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let task = tokio::spawn(etcdctl_writer(
                env.plane.kubelet().etcd().etcdctl.clone(),
                format!("https://rot-client.{NS}.svc:2379"),
                vec![
                    format!("--cacert={}", tls.ca),
                    format!("--cert={}", tls.cert),
                    format!("--key={}", tls.key),
                ],
                stop.clone(),
            ));
            tokio::time::sleep(Duration::from_secs(2)).await;
            let t0 = Instant::now();
            env.renew_tls("rot", &tls, &renewed).await;
            let took = t0.elapsed();
            tokio::time::sleep(Duration::from_secs(2)).await;
            stop.store(true, Ordering::Relaxed);
            let log = task.await.unwrap();
            report(&format!("TLS renewal in place, round {round}"), &log, took);
            let slowest = log
                .windows(2)
                .map(|w| w[1].0 - w[0].0)
                .max()
                .unwrap_or_default();
            println!(
                "{:<40} longest time between two write starts {:.0}ms (one etcdctl process per write)",
                "",
                slowest.as_secs_f64() * 1000.0
            );
        }
        env.clusters()
            .delete("rot", &Default::default())
            .await
            .unwrap();

        env.create_cluster("down", 5).await;
        env.wait_available("down", 5).await;
        for round in 0..2 {
            let names = env.member_names("down").await;
            let c = env.wait_available("down", 5).await;
            // The newest member leads: scaling down must move leadership first.
            let newest = env
                .members()
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|m| m.spec.cluster == "down")
                .max_by_key(|m| m.metadata.creation_timestamp.clone().map(|t| t.0))
                .unwrap();
            let id = c
                .status
                .as_ref()
                .unwrap()
                .members
                .iter()
                .find(|m| Some(&m.name) == newest.metadata.name.as_ref())
                .and_then(|m| m.id.clone())
                .unwrap();
            let all = env.endpoints("down").await;
            env.etcdctl(&all, &["move-leader", &id]).await;
            let (log, took) = measured(&env, "down", async {
                env.scale("down", 3).await;
                env.wait_available("down", 3).await;
            })
            .await;
            report(
                &format!("scale 5 -> 3, newest leads, round {round}"),
                &log,
                took,
            );
            let _ = names;
            env.scale("down", 5).await;
        }
        env.shutdown().await;
    });
}

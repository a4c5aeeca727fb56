//! End-to-end latency figures for docs/benchmarks.md:
//! - detection latency of the seed incident (every member stops gracefully)
//!   and of a frozen cluster (SIGSTOP, Pods stay Ready);
//! - time to scale 3 -> 5.
//!
//! Runs real etcd through the test control plane, so it needs the private
//! mount namespace:
//!
//! ```sh
//! scripts/in-namespace.sh cargo bench -p etcd-steward --bench e2e_latency
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;

const ROUNDS: usize = 5;

fn stats(name: &str, mut xs: Vec<Duration>) {
    xs.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = xs[xs.len() / 2];
    println!(
        "{name:<44} n={:<2} min={:>7.0}ms median={:>7.0}ms max={:>7.0}ms",
        xs.len(),
        ms(xs[0]),
        ms(median),
        ms(*xs.last().unwrap())
    );
}

/// [`ROUNDS`] of the seed incident on `cluster` (3 members): the time
/// from the stop to the first status with `Available=False`, and how long
/// the graceful stop itself took; the node comes back after each.
async fn incident_rounds(env: &Env, cluster: &str) -> (Vec<Duration>, Vec<Duration>) {
    let mut incident = Vec::new();
    let mut stop_took = Vec::new();
    for _ in 0..ROUNDS {
        let watch = env.watch(cluster).await;
        // stop_node returns once every etcd has exited, which takes
        // seconds of graceful shutdown; the outage begins with the stop,
        // so the watch runs alongside it and the clock starts before both.
        let t0 = Instant::now();
        let detected = async {
            watch
                .until("Available=False", |c| {
                    condition(c, "Available") == Some("False")
                })
                .await;
            t0.elapsed()
        };
        let stopped = async {
            env.plane.kubelet().stop_node().await;
            t0.elapsed()
        };
        let (detected, stopped) = tokio::join!(detected, stopped);
        incident.push(detected);
        stop_took.push(stopped);
        env.plane.kubelet().start_node();
        env.wait_available(cluster, 3).await;
    }
    (incident, stop_took)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("e2e_latency: bench");
        return;
    }
    run(async {
        let env = Env::start().await;
        // The seed incident on a cluster with client and peer TLS first,
        // alone on the node (a stop stops every Pod): detection must not
        // depend on TLS.
        env.create_tls_cluster("tls", 3).await;
        env.wait_available("tls", 3).await;
        let (tls_incident, _) = incident_rounds(&env, "tls").await;

        env.clusters()
            .delete("tls", &Default::default())
            .await
            .expect("deleting the TLS cluster");
        while !env.member_names("tls").await.is_empty()
            || env.clusters().get_opt("tls").await.unwrap().is_some()
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }

        env.create_cluster("bench", 3).await;
        env.wait_available("bench", 3).await;

        let (incident, stop_took) = incident_rounds(&env, "bench").await;

        let mut frozen = Vec::new();
        for _ in 0..ROUNDS {
            let names = env.member_names("bench").await;
            let watch = env.watch("bench").await;
            let t0 = Instant::now();
            for n in &names {
                env.plane.kubelet().freeze(NS, n).await.unwrap();
            }
            watch
                .until("Available=False", |c| {
                    condition(c, "Available") == Some("False")
                })
                .await;
            frozen.push(t0.elapsed());
            for n in &names {
                env.plane.kubelet().thaw(NS, n).await.unwrap();
            }
            env.wait_available("bench", 3).await;
        }

        let mut scale = Vec::new();
        for _ in 0..2 {
            let t0 = Instant::now();
            env.scale("bench", 5).await;
            env.wait_available("bench", 5).await;
            scale.push(t0.elapsed());
            env.scale("bench", 3).await;
            env.wait_for("bench", "3 members", |c| {
                ready_members(c) == 3 && c.status.as_ref().is_some_and(|s| s.members.len() == 3)
            })
            .await;
        }

        // Whole reconciles (observe, evaluate, write status, act) of a
        // cluster none of whose members answers, called directly on a
        // second Context so each one is timed alone. The running operator
        // keeps reconciling too, as it would in production.
        env.create_cluster("seven", 7).await;
        env.wait_available("seven", 7).await;
        let ctx = etcd_steward::cli::run::Operator::new(run_args())
            .context(env.operator_client.clone())
            .await
            .expect("a second context starts");
        let mut unreachable = Vec::new();
        for (cluster, members) in [("bench", 3), ("seven", 7)] {
            let names = env.member_names(cluster).await;
            assert_eq!(names.len(), members);
            for n in &names {
                env.plane.kubelet().freeze(NS, n).await.unwrap();
            }
            let mut took = Vec::new();
            for _ in 0..ROUNDS {
                let current = env.clusters().get(cluster).await.unwrap();
                let t0 = Instant::now();
                etcd_steward::cluster::reconcile_cluster(Arc::new(current), ctx.clone())
                    .await
                    .expect("the reconcile writes status");
                took.push(t0.elapsed());
                let after = env.clusters().get(cluster).await.unwrap();
                assert_eq!(condition(&after, "Available"), Some("False"));
            }
            unreachable.push((members, took));
            for n in &names {
                env.plane.kubelet().thaw(NS, n).await.unwrap();
            }
            env.wait_available(cluster, members as i32).await;
        }
        drop(ctx);

        println!("resync 2 s, probe deadline 2 s (the defaults) (support::run_args)");
        for (members, took) in unreachable {
            stats(&format!("reconcile, {members} members, all frozen"), took);
        }
        stats("detection: every member stops gracefully", incident);
        stats("  (graceful stop until every etcd exited)", stop_took);
        stats("detection: every member frozen (SIGSTOP)", frozen);
        stats(
            "detection with TLS: every member stops gracefully",
            tls_incident,
        );
        stats("scale 3 -> 5 (Available with 5 ready)", scale);
        env.shutdown().await;
    });
}

//! How long the observe stage takes when no etcd endpoint answers.
//!
//! Goal (issue 4, section 6): at most 1.2 × the probe deadline, for 3 and
//! 7 members, with the default 2 s deadline; the status write follows the
//! probe, so this bounds how stale an outage can leave the status.
//!
//! Two ways of not answering, both accepting TCP:
//! - `frozen`: real etcd members, SIGSTOPped after the operator's channels
//!   to them are established (the e2e "all frozen" scenario);
//! - `blackhole`: listeners that accept connections and never read, so
//!   every probe hangs in the HTTP/2 handshake.
//!
//! Run: `cargo bench -p etcd-steward --bench observe_unreachable`
//! (`-- --iterations N` to change the sample count, default 10).
//! A bench binary rather than criterion: one sample takes seconds, and the
//! figures wanted are the median and the maximum.

#[path = "../tests/etcd_support/mod.rs"]
mod etcd_support;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use etcd_steward::etcd::{ClientConfig, DEFAULT_DEADLINE, EtcdClient};
use etcd_steward::facts::{ProbeTarget, probe_cluster};
use etcd_support::{Cluster, loopback};
use steward_policy_sdk::{ProbeOutcome, ProbeReport};

fn main() {
    let iterations = std::env::args()
        .skip_while(|a| a != "--iterations")
        .nth(1)
        .map_or(10, |n| n.parse().expect("--iterations N"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let deadline = DEFAULT_DEADLINE;
    println!(
        "deadline {deadline:?}, goal <= {:?}, {iterations} iterations",
        deadline.mul_f64(1.2)
    );
    println!(
        "{:<10} {:>7} {:>10} {:>10} {:>10}",
        "scenario", "members", "median", "max", "max/dl"
    );
    for members in [3, 7] {
        rt.block_on(blackhole(members, deadline, iterations));
        rt.block_on(frozen(members, deadline, iterations));
    }
}

async fn blackhole(members: usize, deadline: Duration, iterations: usize) {
    // Kept open (never accepted from) for the whole run: the kernel
    // completes the handshakes, nobody reads.
    let listeners: Vec<TcpListener> = (0..members)
        .map(|i| TcpListener::bind((loopback(i), 0)).unwrap())
        .collect();
    let targets: Vec<ProbeTarget> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| ProbeTarget {
            member: format!("m{i}"),
            endpoint: format!("http://{}", l.local_addr().unwrap()),
        })
        .collect();
    let api = EtcdClient::new(ClientConfig::default());
    let samples = measure(&api, &targets, deadline, iterations).await;
    report("blackhole", members, deadline, samples);
}

async fn frozen(members: usize, deadline: Duration, iterations: usize) {
    let cluster = Cluster::start(members).await;
    let targets: Vec<ProbeTarget> = cluster
        .members
        .iter()
        .map(|m| ProbeTarget {
            member: m.name.clone(),
            endpoint: m.client_url.clone(),
        })
        .collect();
    let api = EtcdClient::new(ClientConfig::default());
    let warm = probe_cluster(&api, &targets, deadline).await;
    assert_eq!(answered(&warm), members, "healthy before freezing");
    for m in &cluster.members {
        m.freeze();
    }
    let samples = measure(&api, &targets, deadline, iterations).await;
    for m in &cluster.members {
        m.thaw();
    }
    report("frozen", members, deadline, samples);
}

async fn measure(
    api: &EtcdClient,
    targets: &[ProbeTarget],
    deadline: Duration,
    iterations: usize,
) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let report = probe_cluster(api, targets, deadline).await;
        samples.push(start.elapsed());
        // A sample only counts if nothing answered: otherwise this measures
        // something else.
        assert_eq!(answered(&report), 0, "{report:?}");
    }
    samples
}

fn answered(report: &ProbeReport) -> usize {
    report
        .endpoints
        .iter()
        .filter(|e| matches!(e.outcome, ProbeOutcome::Answered(_)))
        .count()
}

fn report(scenario: &str, members: usize, deadline: Duration, mut samples: Vec<Duration>) {
    samples.sort();
    let median = samples[samples.len() / 2];
    let max = *samples.last().unwrap();
    println!(
        "{scenario:<10} {members:>7} {:>10} {:>10} {:>10.3}",
        format!("{:.3}s", median.as_secs_f64()),
        format!("{:.3}s", max.as_secs_f64()),
        max.as_secs_f64() / deadline.as_secs_f64(),
    );
}

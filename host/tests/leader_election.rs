//! Leader election against the real kube-apiserver: one holder at a time, a
//! graceful release hands over at once, a silent leader is replaced only
//! after the lease duration and then finds itself deposed.
//!
//! Every wait here is for an outcome, bounded generously; how fast a
//! takeover happens is not asserted.

use std::time::{Duration, Instant};

use etcd_steward::leader::{Candidate, LeaderError, LeaseConfig};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use steward_testbed::{ControlPlane, FaultProxy};

const EVENTUALLY: Duration = Duration::from_secs(60);

fn config(identity: &str) -> LeaseConfig {
    LeaseConfig {
        lease_duration: Duration::from_millis(1500),
        renew_deadline: Duration::from_millis(1000),
        retry_period: Duration::from_millis(100),
        ..LeaseConfig::new("default", identity)
    }
}

async fn lease(client: &kube::Client) -> k8s_openapi::api::coordination::v1::LeaseSpec {
    let lease = Api::<Lease>::namespaced(client.clone(), "default")
        .get("etcd-steward")
        .await
        .unwrap();
    lease.spec.unwrap()
}

async fn holder(client: &kube::Client) -> Option<String> {
    lease(client).await.holder_identity
}

async fn transitions(client: &kube::Client) -> i32 {
    lease(client).await.lease_transitions.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_at_a_time_release_hands_over_and_a_silent_leader_is_deposed() {
    let dir = tempfile::tempdir().unwrap();
    let server = ControlPlane::start_api_only(dir.path()).await.unwrap();
    let client = server.client();
    let mut a = Candidate::new(client.clone(), config("a"));
    let mut b = Candidate::new(client.clone(), config("b"));

    assert!(
        a.try_acquire_or_renew().await.unwrap(),
        "a takes a free Lease"
    );
    assert!(!b.try_acquire_or_renew().await.unwrap());
    assert_eq!(holder(&client).await.as_deref(), Some("a"));

    // While a renews, b never gets it, however long it tries: b measures
    // the lease duration from the last change it saw, and a keeps changing
    // the record.
    let until = Instant::now() + Duration::from_millis(4000);
    while Instant::now() < until {
        assert!(a.try_acquire_or_renew().await.unwrap(), "a renews");
        assert!(
            !b.try_acquire_or_renew().await.unwrap(),
            "b took a held Lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A graceful release: b's very next attempt wins.
    a.release().await.unwrap();
    assert!(
        b.try_acquire_or_renew().await.unwrap(),
        "b takes a released Lease"
    );
    assert_eq!(holder(&client).await.as_deref(), Some("b"));
    let before = transitions(&client).await;

    // b goes silent. a takes over, but only once b's record stood still for
    // a whole lease duration by a's clock.
    let silent = Instant::now();
    assert!(!a.try_acquire_or_renew().await.unwrap());
    loop {
        if a.try_acquire_or_renew().await.unwrap() {
            break;
        }
        assert!(silent.elapsed() < EVENTUALLY, "a never took over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        silent.elapsed() >= Duration::from_millis(1500),
        "a took the Lease before b's term ran out"
    );
    assert_eq!(holder(&client).await.as_deref(), Some("a"));
    assert_eq!(transitions(&client).await, before + 1);

    // b wakes up: it is no longer the leader and says so.
    assert!(matches!(b.keep_renewing().await, LeaderError::Lost(_)));
    server.shutdown().await;
}

/// An API server, a fault proxy in front of it, and a candidate that leads
/// through the proxy.
async fn a_leader() -> (ControlPlane, FaultProxy, Candidate, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let server = ControlPlane::start_api_only(dir.path()).await.unwrap();
    let proxy = server.fault_proxy().await.unwrap();
    let mut a = Candidate::new(proxy.client().unwrap(), config("a"));
    assert!(a.try_acquire_or_renew().await.unwrap());
    (server, proxy, a, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_reach_the_api_gives_up_within_its_renew_deadline() {
    let (server, _proxy, mut a, _dir) = a_leader().await;
    server.shutdown().await;
    let lost = tokio::time::timeout(EVENTUALLY, a.keep_renewing()).await;
    assert!(
        matches!(lost, Ok(LeaderError::Lost(_))),
        "a leader that cannot renew must stop leading"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_api_calls_hang_gives_up_instead_of_leading_on() {
    let (server, proxy, mut a, _dir) = a_leader().await;
    // Every request now takes ten minutes: far past the lease duration, by
    // which time another replica may lead.
    proxy.faults().set_latency(Duration::from_secs(600));
    let lost = tokio::time::timeout(EVENTUALLY, a.keep_renewing()).await;
    assert!(
        matches!(lost, Ok(LeaderError::Lost(_))),
        "a leader stuck on a hung renewal must stop leading"
    );
    proxy.faults().set_latency(Duration::ZERO);
    server.shutdown().await;
}

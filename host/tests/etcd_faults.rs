//! The fault injector over a real etcd: each RPC fails exactly as
//! configured, and a failed membership change leaves membership untouched.

mod etcd_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use etcd_steward::etcd::{ClientConfig, EtcdApi, EtcdClient, Fault, Faults, FaultyEtcd, Rpc};
use etcd_support::{Cluster, free_addr, loopback};
use steward_policy_sdk::ProbeErrorKind;

fn faulty(deadline: Duration) -> (FaultyEtcd<EtcdClient>, Faults) {
    let faults = Faults::new();
    let api = EtcdClient::new(ClientConfig {
        deadline,
        ..ClientConfig::default()
    });
    (FaultyEtcd::new(api, faults.clone()), faults)
}

/// Calls one read RPC and reduces the answer to "ok" or its error.
async fn read(api: &dyn EtcdApi, rpc: Rpc, url: &str) -> Result<(), etcd_steward::etcd::RpcError> {
    match rpc {
        Rpc::Status => api.status(url).await.map(drop),
        Rpc::MemberList => api.member_list(url).await.map(drop),
        Rpc::QuorumRead => api.quorum_read(url).await,
        other => panic!("{other} is not a read"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_read_rpc_fails_with_the_injected_kind_then_recovers() {
    let cluster = Cluster::start(1).await;
    let (api, faults) = faulty(Duration::from_secs(2));
    let url = &cluster.members[0].client_url;
    let kinds = [
        ProbeErrorKind::Timeout,
        ProbeErrorKind::Dns,
        ProbeErrorKind::Refused,
        ProbeErrorKind::Tls,
        ProbeErrorKind::Auth,
        ProbeErrorKind::Other,
    ];
    for rpc in [Rpc::Status, Rpc::MemberList, Rpc::QuorumRead] {
        for kind in kinds {
            faults.inject(Fault::fail(rpc, kind).times(1));
            let err = read(&api, rpc, url).await.unwrap_err();
            assert_eq!((err.rpc, err.kind), (rpc, kind), "{err}");
            assert_eq!(&err.endpoint, url);
            assert!(err.message.contains("injected"), "{err}");
            // The other reads are untouched while this one is faulted...
            for other in [Rpc::Status, Rpc::MemberList, Rpc::QuorumRead] {
                if other != rpc {
                    faults.inject(Fault::fail(rpc, kind).times(1));
                    read(&api, other, url).await.expect("unfaulted RPC");
                    faults.clear(rpc);
                }
            }
            // ...and the fault was used up by its one call.
            read(&api, rpc, url).await.expect("fault used up");
        }
        assert_eq!(faults.injected(rpc), kinds.len() as u64);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_until_cleared_keeps_failing_and_can_target_one_endpoint() {
    let cluster = Cluster::start(3).await;
    let (api, faults) = faulty(Duration::from_secs(2));
    let urls = cluster.client_urls();
    faults.inject(Fault::fail(Rpc::MemberList, ProbeErrorKind::Dns).at(urls[1].clone()));

    for _ in 0..3 {
        let err = api.member_list(&urls[1]).await.unwrap_err();
        assert_eq!(err.kind, ProbeErrorKind::Dns);
        assert_eq!(api.member_list(&urls[0]).await.unwrap().len(), 3);
        assert_eq!(api.member_list(&urls[2]).await.unwrap().len(), 3);
    }
    assert_eq!(faults.injected(Rpc::MemberList), 3);
    assert_eq!(faults.calls(Rpc::MemberList), 9);

    faults.clear(Rpc::MemberList);
    assert_eq!(api.member_list(&urls[1]).await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hang_lasts_until_the_deadline_and_reads_as_a_timeout() {
    let cluster = Cluster::start(1).await;
    let deadline = Duration::from_millis(700);
    let (api, faults) = faulty(deadline);
    let url = &cluster.members[0].client_url;
    faults.inject(Fault::hang(Rpc::QuorumRead).times(1));

    let start = Instant::now();
    let err = api.quorum_read(url).await.unwrap_err();
    let took = start.elapsed();
    assert_eq!(err.kind, ProbeErrorKind::Timeout);
    assert!(
        took >= deadline,
        "it hangs, it does not fail fast: {took:?}"
    );
    assert!(took < deadline * 3, "{took:?}");
    api.quorum_read(url).await.expect("next call goes through");
}

/// MemberAddAsLearner, MemberPromote and MemberRemove each fail as
/// injected, and etcd's membership shows that nothing happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_membership_changes_change_nothing() {
    let cluster = Cluster::start(1).await;
    let (api, faults) = faulty(Duration::from_secs(2));
    let endpoints = cluster.client_urls();
    let url = &endpoints[0];
    let peer = vec![format!("http://{}", free_addr(loopback(4)))];

    faults.inject(Fault::fail(Rpc::MemberAddAsLearner, ProbeErrorKind::Timeout).times(1));
    let err = api
        .member_add_as_learner(&endpoints, &peer)
        .await
        .unwrap_err();
    assert_eq!(
        (err.rpc, err.kind),
        (Rpc::MemberAddAsLearner, ProbeErrorKind::Timeout)
    );
    assert_eq!(
        api.member_list(url).await.unwrap().len(),
        1,
        "no member added"
    );

    let added = api.member_add_as_learner(&endpoints, &peer).await.unwrap();
    assert_eq!(api.member_list(url).await.unwrap().len(), 2);

    faults.inject(Fault::fail(Rpc::MemberPromote, ProbeErrorKind::Refused).times(1));
    let err = api.member_promote(&endpoints, added.id).await.unwrap_err();
    assert_eq!(
        (err.rpc, err.kind),
        (Rpc::MemberPromote, ProbeErrorKind::Refused)
    );
    let listed = api.member_list(url).await.unwrap();
    assert!(
        listed.iter().any(|m| m.id == added.id && m.is_learner),
        "still a learner"
    );

    faults.inject(Fault::fail(Rpc::MemberRemove, ProbeErrorKind::Auth));
    for _ in 0..2 {
        let err = api.member_remove(&endpoints, added.id).await.unwrap_err();
        assert_eq!(
            (err.rpc, err.kind),
            (Rpc::MemberRemove, ProbeErrorKind::Auth)
        );
    }
    assert_eq!(
        api.member_list(url).await.unwrap().len(),
        2,
        "nothing removed"
    );

    faults.clear_all();
    let after = api.member_remove(&endpoints, added.id).await.unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(api.member_list(url).await.unwrap().len(), 1);
    for rpc in [Rpc::MemberAddAsLearner, Rpc::MemberPromote] {
        assert_eq!(faults.injected(rpc), 1);
    }
    assert_eq!(faults.injected(Rpc::MemberRemove), 2);
}

/// The hook the end-to-end suite uses to crash the operator right after
/// MemberAdd: it runs after etcd applied the change and before the caller
/// gets the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_hook_runs_after_the_change_is_applied() {
    let cluster = Cluster::start(1).await;
    let (api, faults) = faulty(Duration::from_secs(2));
    let endpoints = cluster.client_urls();
    let runs = Arc::new(AtomicUsize::new(0));
    let seen = runs.clone();
    faults.on_success(Rpc::MemberAddAsLearner, move |rpc, eps| {
        assert_eq!(rpc, Rpc::MemberAddAsLearner);
        assert_eq!(eps.len(), 1);
        seen.fetch_add(1, Ordering::SeqCst);
    });

    // A failed call does not run the hook.
    faults.inject(Fault::fail(Rpc::MemberAddAsLearner, ProbeErrorKind::Other).times(1));
    let peer = vec![format!("http://{}", free_addr(loopback(5)))];
    api.member_add_as_learner(&endpoints, &peer)
        .await
        .unwrap_err();
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    api.member_add_as_learner(&endpoints, &peer).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let listed = api.member_list(&endpoints[0]).await.unwrap();
    assert_eq!(listed.iter().filter(|m| m.is_learner).count(), 1);

    // Other RPCs do not run it.
    api.member_list(&endpoints[0]).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

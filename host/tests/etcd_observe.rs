//! The observe stage against real clusters in the states that matter: what
//! the probe report says when members are healthy, killed, frozen, or
//! unresolvable, and when single RPCs fail.

mod etcd_support;

use std::time::{Duration, Instant};

use etcd_steward::etcd::{ClientConfig, EtcdApi, EtcdClient, Fault, Faults, FaultyEtcd, Rpc};
use etcd_steward::facts::{ProbeTarget, probe_cluster};
use etcd_support::Cluster;
use steward_policy_sdk::{
    MemberListOutcome, ProbeErrorKind, ProbeOutcome, ProbeReport, QuorumReadOutcome,
};

const DEADLINE: Duration = Duration::from_secs(1);

fn api() -> EtcdClient {
    EtcdClient::new(ClientConfig {
        deadline: DEADLINE,
        ..ClientConfig::default()
    })
}

fn targets(cluster: &Cluster) -> Vec<ProbeTarget> {
    cluster
        .members
        .iter()
        .map(|m| ProbeTarget {
            member: m.name.clone(),
            endpoint: m.client_url.clone(),
        })
        .collect()
}

fn answered(report: &ProbeReport) -> usize {
    report
        .endpoints
        .iter()
        .filter(|e| matches!(e.outcome, ProbeOutcome::Answered(_)))
        .count()
}

fn failures(report: &ProbeReport) -> Vec<ProbeErrorKind> {
    report
        .endpoints
        .iter()
        .filter_map(|e| match &e.outcome {
            ProbeOutcome::Failed(err) => Some(err.kind),
            ProbeOutcome::Answered(_) => None,
        })
        .collect()
}

fn listed(report: &ProbeReport) -> usize {
    match &report.member_list {
        MemberListOutcome::Listed(m) => m.len(),
        other => panic!("member list: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_healthy_members_all_answer_and_quorum_holds() {
    let cluster = Cluster::start(3).await;
    let targets = targets(&cluster);
    let report = probe_cluster(&api(), &targets, DEADLINE).await;

    assert_eq!(answered(&report), 3);
    let names: Vec<&str> = report.endpoints.iter().map(|e| e.member.as_str()).collect();
    assert_eq!(names, ["m0", "m1", "m2"], "one entry per target, in order");
    for (probe, target) in report.endpoints.iter().zip(&targets) {
        assert_eq!(probe.endpoint, target.endpoint);
    }
    let leaders: Vec<u64> = report
        .endpoints
        .iter()
        .filter_map(|e| match &e.outcome {
            ProbeOutcome::Answered(s) => Some(s.leader_id),
            _ => None,
        })
        .collect();
    assert!(leaders.iter().all(|l| *l != 0 && *l == leaders[0]));
    assert_eq!(listed(&report), 3);
    assert_eq!(report.quorum_read, QuorumReadOutcome::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_three_killed_is_refused_and_quorum_still_holds() {
    let mut cluster = Cluster::start(3).await;
    cluster.members[0].kill();
    let report = probe_cluster(&api(), &targets(&cluster), DEADLINE).await;

    assert_eq!(answered(&report), 2);
    assert_eq!(failures(&report), [ProbeErrorKind::Refused]);
    assert!(matches!(
        report.endpoints[0].outcome,
        ProbeOutcome::Failed(_)
    ));
    assert_eq!(listed(&report), 3, "etcd still lists the dead member");
    // A new leader may take an election timeout to emerge; the probe
    // records whatever it saw, so ask until the survivors settle.
    let report = etcd_support::eventually(Duration::from_secs(10), "quorum", || {
        let targets = targets(&cluster);
        async move {
            let r = probe_cluster(&api(), &targets, DEADLINE).await;
            (r.quorum_read == QuorumReadOutcome::Succeeded).then_some(r)
        }
    })
    .await;
    assert_eq!(answered(&report), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_three_killed_answers_status_but_the_quorum_read_fails() {
    let mut cluster = Cluster::start(3).await;
    cluster.members[1].kill();
    cluster.members[2].kill();
    let report = probe_cluster(&api(), &targets(&cluster), DEADLINE).await;

    assert_eq!(answered(&report), 1);
    assert_eq!(
        failures(&report),
        [ProbeErrorKind::Refused, ProbeErrorKind::Refused]
    );
    // In etcd 3.5 MemberList is served locally, so the survivor still lists.
    assert_eq!(listed(&report), 3);
    match &report.quorum_read {
        QuorumReadOutcome::Failed(e) => assert_eq!(e.kind, ProbeErrorKind::Timeout, "{e:?}"),
        other => panic!("quorum read: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_killed_is_all_refused_and_nobody_is_asked_for_the_member_list() {
    let mut cluster = Cluster::start(3).await;
    for m in &mut cluster.members {
        m.kill();
    }
    let report = probe_cluster(&api(), &targets(&cluster), DEADLINE).await;

    assert_eq!(answered(&report), 0);
    assert_eq!(failures(&report), [ProbeErrorKind::Refused; 3]);
    assert_eq!(report.member_list, MemberListOutcome::NotAttempted);
    assert_eq!(report.quorum_read, QuorumReadOutcome::NotAttempted);
    for e in &report.endpoints {
        let ProbeOutcome::Failed(err) = &e.outcome else {
            unreachable!()
        };
        assert!(
            err.message.contains(&e.endpoint),
            "message says where: {err:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_frozen_times_out_everywhere_within_a_bounded_time() {
    let cluster = Cluster::start(3).await;
    let targets = targets(&cluster);
    let api = api();
    // Warm the cached channels first: a frozen member with an established
    // connection is the case the e2e "all frozen" scenario hits.
    assert_eq!(answered(&probe_cluster(&api, &targets, DEADLINE).await), 3);
    for m in &cluster.members {
        m.freeze();
    }
    let start = Instant::now();
    let report = probe_cluster(&api, &targets, DEADLINE).await;
    let took = start.elapsed();
    for m in &cluster.members {
        m.thaw();
    }

    assert_eq!(failures(&report), [ProbeErrorKind::Timeout; 3]);
    assert_eq!(report.member_list, MemberListOutcome::NotAttempted);
    assert_eq!(report.quorum_read, QuorumReadOutcome::NotAttempted);
    assert!(took < DEADLINE * 3, "bounded: {took:?}");

    // Thawed, the same client sees a healthy cluster again.
    let report = etcd_support::eventually(Duration::from_secs(10), "thawed", || {
        let (api, targets) = (&api, &targets);
        async move {
            let r = probe_cluster(api, targets, DEADLINE).await;
            (r.quorum_read == QuorumReadOutcome::Succeeded).then_some(r)
        }
    })
    .await;
    assert_eq!(answered(&report), 3);
}

#[tokio::test]
async fn names_that_do_not_resolve_are_reported_as_dns() {
    let targets: Vec<ProbeTarget> = (0..3)
        .map(|i| ProbeTarget {
            member: format!("etcd-{i}"),
            endpoint: format!("http://etcd-{i}.etcd.nope.invalid:2379"),
        })
        .collect();
    let report = probe_cluster(&api(), &targets, DEADLINE).await;
    assert_eq!(failures(&report), [ProbeErrorKind::Dns; 3]);
    assert_eq!(report.member_list, MemberListOutcome::NotAttempted);
}

#[tokio::test]
async fn no_targets_is_an_empty_report_not_an_error() {
    let report = probe_cluster(&api(), &[], DEADLINE).await;
    assert_eq!(report, ProbeReport::default());
}

fn faulty() -> (FaultyEtcd<EtcdClient>, Faults) {
    let faults = Faults::new();
    (FaultyEtcd::new(api(), faults.clone()), faults)
}

async fn leader_url(cluster: &Cluster) -> String {
    let api = api();
    for url in cluster.client_urls() {
        if api.status(&url).await.unwrap().is_leader() {
            return url;
        }
    }
    panic!("no leader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_is_asked_first_and_a_failure_there_falls_back() {
    let cluster = Cluster::start(3).await;
    let leader = leader_url(&cluster).await;
    let (api, faults) = faulty();
    faults.inject(Fault::fail(Rpc::MemberList, ProbeErrorKind::Refused).at(leader.clone()));
    faults.inject(Fault::fail(Rpc::QuorumRead, ProbeErrorKind::Timeout).at(leader));

    let report = probe_cluster(&api, &targets(&cluster), DEADLINE).await;
    assert_eq!(listed(&report), 3);
    assert_eq!(report.quorum_read, QuorumReadOutcome::Succeeded);
    // Only the leader is faulted, so each fault firing once proves the
    // leader was asked, and success proves another endpoint was asked next.
    assert_eq!(faults.injected(Rpc::MemberList), 1);
    assert_eq!(faults.injected(Rpc::QuorumRead), 1);
    assert_eq!(faults.calls(Rpc::MemberList), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failed_rpc_is_recorded_without_hiding_the_others() {
    let cluster = Cluster::start(3).await;
    let targets = targets(&cluster);
    let (api, faults) = faulty();

    faults.inject(Fault::fail(Rpc::MemberList, ProbeErrorKind::Dns));
    let report = probe_cluster(&api, &targets, DEADLINE).await;
    assert_eq!(answered(&report), 3);
    match &report.member_list {
        MemberListOutcome::Failed(e) => assert_eq!(e.kind, ProbeErrorKind::Dns),
        other => panic!("{other:?}"),
    }
    assert_eq!(report.quorum_read, QuorumReadOutcome::Succeeded);
    assert_eq!(
        faults.calls(Rpc::MemberList),
        3,
        "every answering endpoint tried"
    );
    faults.clear_all();

    faults.inject(Fault::fail(Rpc::QuorumRead, ProbeErrorKind::Auth));
    let report = probe_cluster(&api, &targets, DEADLINE).await;
    assert_eq!(listed(&report), 3);
    match &report.quorum_read {
        QuorumReadOutcome::Failed(e) => assert_eq!(e.kind, ProbeErrorKind::Auth),
        other => panic!("{other:?}"),
    }
    faults.clear_all();

    faults.inject(Fault::hang(Rpc::Status));
    let start = Instant::now();
    let report = probe_cluster(&api, &targets, DEADLINE).await;
    assert!(start.elapsed() < DEADLINE * 3);
    assert_eq!(failures(&report), [ProbeErrorKind::Timeout; 3]);
    assert_eq!(report.member_list, MemberListOutcome::NotAttempted);
    faults.clear_all();

    // One endpoint's Status failing leaves the rest of the report intact.
    faults.inject(Fault::fail(Rpc::Status, ProbeErrorKind::Tls).at(targets[2].endpoint.clone()));
    let report = probe_cluster(&api, &targets, DEADLINE).await;
    assert_eq!(failures(&report), [ProbeErrorKind::Tls]);
    assert_eq!(listed(&report), 3);
    assert_eq!(report.quorum_read, QuorumReadOutcome::Succeeded);
}

/// A probe that hangs in Status and then in the follow-up calls still ends:
/// the follow-ups share one further deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hangs_after_status_are_bounded_too() {
    let cluster = Cluster::start(3).await;
    let (api, faults) = faulty();
    faults.inject(Fault::hang(Rpc::MemberList));
    faults.inject(Fault::hang(Rpc::QuorumRead));
    let start = Instant::now();
    let report = probe_cluster(&api, &targets(&cluster), DEADLINE).await;
    let took = start.elapsed();
    assert_eq!(answered(&report), 3);
    assert!(
        matches!(&report.member_list, MemberListOutcome::Failed(e) if e.kind == ProbeErrorKind::Timeout)
    );
    assert!(
        matches!(&report.quorum_read, QuorumReadOutcome::Failed(e) if e.kind == ProbeErrorKind::Timeout)
    );
    assert!(took < DEADLINE * 4, "{took:?}");
    // The deadline is a deadline for the probe, not per attempt: one hang
    // uses it up, so no second endpoint is tried.
    assert_eq!(faults.calls(Rpc::MemberList), 1);
}

/// The leader freezes: its endpoint times out, the followers still answer
/// and list the members, and once they elect a new leader (one election
/// timeout, 1 s here) the quorum read succeeds through them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_times_out_and_the_rest_keep_quorum() {
    let cluster = Cluster::start(3).await;
    let leader = leader_url(&cluster).await;
    let frozen = cluster
        .members
        .iter()
        .find(|m| m.client_url == leader)
        .unwrap();
    let targets = targets(&cluster);
    let api = api();
    let old_leader = api.status(&leader).await.unwrap().member_id;
    frozen.freeze();

    let report = probe_cluster(&api, &targets, DEADLINE).await;
    assert_eq!(answered(&report), 2);
    assert_eq!(failures(&report), [ProbeErrorKind::Timeout]);
    let probe = report
        .endpoints
        .iter()
        .find(|e| e.endpoint == leader)
        .unwrap();
    assert!(matches!(&probe.outcome, ProbeOutcome::Failed(e) if e.kind == ProbeErrorKind::Timeout));
    assert_eq!(listed(&report), 3);

    let report = etcd_support::eventually(Duration::from_secs(15), "new leader", || {
        let (api, targets) = (&api, &targets);
        async move {
            let r = probe_cluster(api, targets, DEADLINE).await;
            (r.quorum_read == QuorumReadOutcome::Succeeded).then_some(r)
        }
    })
    .await;
    frozen.thaw();
    assert_eq!(answered(&report), 2);
    let new_leaders: Vec<u64> = report
        .endpoints
        .iter()
        .filter_map(|e| match &e.outcome {
            ProbeOutcome::Answered(s) => Some(s.leader_id),
            _ => None,
        })
        .collect();
    assert_ne!(new_leaders[0], old_leader);
    assert!(new_leaders.iter().all(|l| *l == new_leaders[0]));
}

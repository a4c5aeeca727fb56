//! The etcd client against real etcd processes: reads, the membership
//! cycle the operator runs on scale-up/down, and how each way of being
//! unreachable is classified.

mod etcd_support;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use etcd_steward::etcd::{ClientConfig, EtcdApi, EtcdClient, Rpc};
use etcd_support::{Cluster, EtcdProcess, eventually, free_addr, loopback};
use steward_policy_sdk::ProbeErrorKind;

fn client(deadline: Duration) -> EtcdClient {
    EtcdClient::new(ClientConfig {
        deadline,
        ..ClientConfig::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_three_member_cluster_reports_one_leader_three_voters_and_quorum() {
    let cluster = Cluster::start(3).await;
    let api = client(Duration::from_secs(2));

    let mut statuses = Vec::new();
    for url in cluster.client_urls() {
        statuses.push(api.status(&url).await.expect("status"));
    }
    let leader = statuses[0].leader_id;
    assert_ne!(leader, 0);
    assert!(
        statuses.iter().all(|s| s.leader_id == leader),
        "{statuses:#?}"
    );
    assert_eq!(statuses.iter().filter(|s| s.is_leader()).count(), 1);
    let mut ids: Vec<u64> = statuses.iter().map(|s| s.member_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "distinct member ids");
    assert!(
        statuses
            .iter()
            .all(|s| s.version == etcd_steward::api::DEFAULT_ETCD_VERSION && !s.is_learner)
    );
    assert!(
        statuses
            .iter()
            .all(|s| s.cluster_id == statuses[0].cluster_id)
    );
    assert!(statuses.iter().all(|s| s.db_size > 0 && s.raft_index > 0));

    let members = api.member_list(&cluster.client_urls()[1]).await.unwrap();
    let mut names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["m0", "m1", "m2"]);
    assert!(members.iter().all(|m| !m.is_learner));
    let mut listed: Vec<u64> = members.iter().map(|m| m.id).collect();
    listed.sort();
    assert_eq!(listed, ids, "member list and status agree on ids");
    for m in &members {
        let own = cluster.members.iter().find(|p| p.name == m.name).unwrap();
        assert_eq!(m.client_urls, std::slice::from_ref(&own.client_url));
        assert_eq!(m.peer_urls, std::slice::from_ref(&own.peer_url));
    }

    for url in cluster.client_urls() {
        api.quorum_read(&url).await.expect("quorum read");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_read_fails_once_quorum_is_lost_while_status_still_answers() {
    let mut cluster = Cluster::start(3).await;
    let api = client(Duration::from_secs(1));
    cluster.members[1].kill();
    cluster.members[2].kill();
    let survivor = cluster.members[0].client_url.clone();

    let status = api.status(&survivor).await.expect("status is local");
    assert!(!status.is_learner);
    let err = api.quorum_read(&survivor).await.unwrap_err();
    assert_eq!(err.rpc, Rpc::QuorumRead);
    eprintln!("{err}");
    assert_eq!(err.kind, ProbeErrorKind::Timeout, "{err}");
}

/// Scale 3 → 4 → 3 the way the operator does it: add as learner, start the
/// member with etcd's own view of the cluster, promote once caught up,
/// then remove a non-leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learner_is_added_caught_up_promoted_and_a_member_removed() {
    let cluster = Cluster::start(3).await;
    let api = client(Duration::from_secs(2));
    let endpoints = cluster.client_urls();

    let ip = loopback(3);
    let peer = free_addr(ip);
    let peer_url = format!("http://{peer}");
    // etcd refuses membership changes ("unhealthy cluster") until every
    // member has been connected for a few seconds; the operator retries
    // on its next reconcile, the test retries here.
    let added = eventually(Duration::from_secs(20), "member add", || {
        let (api, endpoints, peer_url) = (&api, &endpoints, peer_url.clone());
        async move {
            match api.member_add_as_learner(endpoints, &[peer_url]).await {
                Ok(added) => Some(added),
                Err(e) if e.message.contains("unhealthy cluster") => None,
                Err(e) => panic!("member add: {e}"),
            }
        }
    })
    .await;
    assert_ne!(added.id, 0);
    assert_eq!(added.members.len(), 4);
    let new = added.members.iter().find(|m| m.id == added.id).unwrap();
    assert!(new.is_learner);
    assert_eq!(new.peer_urls, std::slice::from_ref(&peer_url));
    assert!(new.name.is_empty(), "not started yet");

    // The initial cluster comes from etcd's member list, not from our
    // bookkeeping: that is what a restarted operator would have.
    let initial: Vec<String> = added
        .members
        .iter()
        .map(|m| {
            let name = if m.id == added.id { "m3" } else { &m.name };
            format!("{name}={}", m.peer_urls[0])
        })
        .collect();
    let learner = EtcdProcess::spawn("m3", ip, &initial.join(","), "existing", peer, &[]);

    let leader_url = eventually(Duration::from_secs(20), "learner caught up", || {
        let (api, endpoints, learner_url) = (&api, &endpoints, learner.client_url.clone());
        async move {
            let ours = api.status(&learner_url).await.ok()?;
            assert!(ours.is_learner);
            for url in endpoints {
                let s = api.status(url).await.ok()?;
                if s.is_leader() {
                    return (ours.raft_applied_index >= s.raft_index).then(|| url.clone());
                }
            }
            None
        }
    })
    .await;

    // etcd has its own notion of "in sync"; it may lag ours by a heartbeat.
    let members = eventually(Duration::from_secs(20), "promote", || {
        let endpoints = vec![leader_url.clone()];
        let api = &api;
        async move { api.member_promote(&endpoints, added.id).await.ok() }
    })
    .await;
    assert_eq!(members.len(), 4);
    assert!(members.iter().all(|m| !m.is_learner), "{members:#?}");
    // The new member answers as a voter once it applied its promotion
    // (until then it refuses MemberList: "rpc not supported for learner").
    let listed = eventually(Duration::from_secs(10), "promotion applied", || async {
        api.member_list(&learner.client_url).await.ok()
    })
    .await;
    assert_eq!(listed.iter().filter(|m| !m.is_learner).count(), 4);
    assert!(listed.iter().any(|m| m.name == "m3"));

    let mut victim = None;
    for (i, url) in endpoints.iter().enumerate() {
        let s = api.status(url).await.unwrap();
        if !s.is_leader() {
            victim = Some((i, s.member_id));
            break;
        }
    }
    let (victim_index, victim_id) = victim.unwrap();
    let members = api
        .member_remove(std::slice::from_ref(&leader_url), victim_id)
        .await
        .expect("member remove");
    assert_eq!(members.len(), 3);
    assert!(members.iter().all(|m| m.id != victim_id));
    let survivor = endpoints
        .iter()
        .enumerate()
        .find(|(i, _)| *i != victim_index)
        .unwrap()
        .1;
    let listed = api.member_list(survivor).await.unwrap();
    assert_eq!(listed.len(), 3);
    api.quorum_read(&learner.client_url)
        .await
        .expect("the promoted member serves linearizable reads");
}

#[tokio::test]
async fn membership_change_skips_an_endpoint_that_refuses() {
    let cluster = Cluster::start(1).await;
    let api = client(Duration::from_secs(2));
    let dead = format!("http://{}", free_addr(loopback(5)));
    let peer_url = format!("http://{}", free_addr(loopback(6)));
    let added = api
        .member_add_as_learner(&[dead, cluster.members[0].client_url.clone()], &[peer_url])
        .await
        .expect("falls through to the live endpoint");
    let listed = api
        .member_list(&cluster.members[0].client_url)
        .await
        .unwrap();
    assert!(listed.iter().any(|m| m.id == added.id && m.is_learner));
}

#[tokio::test]
async fn a_closed_port_is_refused() {
    let api = client(Duration::from_secs(2));
    let url = format!("http://{}", free_addr(loopback(7)));
    for rpc in [Rpc::Status, Rpc::MemberList, Rpc::QuorumRead] {
        let err = match rpc {
            Rpc::Status => api.status(&url).await.map(drop),
            Rpc::MemberList => api.member_list(&url).await.map(drop),
            _ => api.quorum_read(&url).await,
        }
        .unwrap_err();
        eprintln!("{err}");
        assert_eq!(err.kind, ProbeErrorKind::Refused, "{err}");
        assert_eq!(err.rpc, rpc);
        assert_eq!(err.endpoint, url);
    }
}

#[tokio::test]
async fn an_unresolvable_name_is_dns() {
    let api = client(Duration::from_secs(2));
    let err = api.status("http://nope.invalid:2379").await.unwrap_err();
    eprintln!("{err}");
    assert_eq!(err.kind, ProbeErrorKind::Dns, "{err}");
    assert!(err.message.to_lowercase().contains("lookup") || err.message.contains("dns"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_member_times_out_within_the_deadline_and_recovers_on_thaw() {
    let cluster = Cluster::start(1).await;
    let api = client(Duration::from_millis(800));
    let url = cluster.members[0].client_url.clone();
    api.status(&url).await.expect("healthy first");

    cluster.members[0].freeze();
    let start = Instant::now();
    let err = api.status(&url).await.unwrap_err();
    let took = start.elapsed();
    cluster.members[0].thaw();
    eprintln!("{err}");
    assert_eq!(err.kind, ProbeErrorKind::Timeout, "{err}");
    assert!(
        took < Duration::from_secs(5),
        "bounded by the deadline: {took:?}"
    );

    // The same cached channel serves again once the process runs.
    eventually(Duration::from_secs(10), "answers after thaw", || async {
        api.status(&url).await.ok()
    })
    .await;
}

/// A port that accepts TCP but never reads (a blackholed endpoint): a hung
/// connect or HTTP/2 handshake is bounded by the deadline too.
#[tokio::test]
async fn a_listener_that_never_answers_times_out() {
    let listener = TcpListener::bind((loopback(8), 0)).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let api = client(Duration::from_millis(500));
    let start = Instant::now();
    let err = api.member_list(&url).await.unwrap_err();
    eprintln!("{err}");
    assert_eq!(err.kind, ProbeErrorKind::Timeout, "{err}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// Speaking TLS to a plaintext etcd fails as a TLS fault, not "other".
#[tokio::test]
async fn https_to_a_plaintext_member_is_a_tls_fault() {
    let cluster = Cluster::start(1).await;
    let api = client(Duration::from_secs(2));
    let url = cluster.members[0].client_url.replace("http://", "https://");
    let err = api.status(&url).await.unwrap_err();
    eprintln!("{err}");
    assert_eq!(err.kind, ProbeErrorKind::Tls, "{err}");
}

#[tokio::test]
async fn credentials_in_an_endpoint_never_reach_the_message() {
    let api = client(Duration::from_secs(1));
    let port = free_addr(loopback(9)).port();
    let url = format!("http://root:hunter2@{}:{port}", loopback(9));
    let err = api.status(&url).await.unwrap_err();
    let text = err.to_string();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(!err.to_probe_error().message.contains("hunter2"));
}

/// A full backend raises NOSPACE; Status carries it, attributed to the
/// member, and nothing else is mistaken for an alarm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nospace_alarm_shows_in_status() {
    let cluster = Cluster::start_with(1, &["--quota-backend-bytes", "100000"]).await;
    let api = client(Duration::from_secs(2));
    let url = &cluster.members[0].client_url;
    assert_eq!(api.status(url).await.unwrap().alarms, []);

    let mut kv = etcd_client::Client::connect([url], None).await.unwrap();
    let value = vec![b'x'; 20_000];
    let mut refused = false;
    // The size check sees the backend after each batch commit (100 ms).
    for i in 0..100 {
        if kv.put(format!("k{i}"), value.clone(), None).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(refused, "the quota should fill up");

    let status = api.status(url).await.unwrap();
    eprintln!("{:?}", status.errors);
    assert_eq!(status.alarms, [steward_policy_sdk::AlarmKind::Nospace]);
    assert!(
        status
            .errors
            .iter()
            .any(|e| e.contains(&status.member_id.to_string()))
    );
}

/// Endpoints are usually names (a member's headless-Service DNS name); they
/// are resolved on every call, and a name that resolves keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_reached_by_name() {
    let ip = std::net::Ipv4Addr::LOCALHOST;
    let peer = free_addr(ip);
    let member = EtcdProcess::spawn("solo", ip, &format!("solo=http://{peer}"), "new", peer, &[]);
    let by_name = member.client_url.replace("127.0.0.1", "localhost");
    let api = client(Duration::from_secs(2));
    let status = eventually(Duration::from_secs(20), "solo up", || async {
        api.status(&by_name).await.ok()
    })
    .await;
    assert!(status.is_leader());
    let members = api.member_list(&by_name).await.unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].name, "solo");
    api.quorum_read(&by_name).await.unwrap();
}

//! End-to-end scenarios: the real operator, real etcd processes run by the
//! local kubelet, the real Kubernetes control plane. Run through `make test` (they need the
//! private mount namespace for Pod names).
//!
//! Each test waits with a generous bound: they assert what the status says
//! and what etcd holds, not how fast. Wherever a scenario reaches a state,
//! it also asserts what kstatus (Flux, kpt) and Argo CD's health check read
//! in the fetched object, by the real libraries (`Env::assert_read`), as
//! docs/api.md ("How Flux and Argo CD read it") promises. Detection latency is measured by the
//! `detection` benchmark (docs/benchmarks.md).

mod support;

use std::sync::Mutex;

use support::*;

/// One scenario at a time: each runs 3 to 5 etcd processes on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

async fn healthy_three(env: &Env, name: &str) -> String {
    let watch = env.watch(name).await;
    let created = env.create_cluster(name, 3).await;
    // No status yet. kstatus counts an object without conditions as
    // Current; Argo CD waits for the operator.
    let r = env.assert_read(&created, "Current", "Progressing");
    assert_eq!(r.argo.message, "Waiting for etcd-steward to report status");
    let c = watch
        .until(
            "Reconciling=True while bootstrapping, not yet Available",
            |c| {
                condition(c, "Reconciling") == Some("True")
                    && condition(c, "Available") != Some("True")
            },
        )
        .await;
    assert_eq!(condition_reason(&c, "Reconciling"), Some("Bootstrapping"));
    let r = env.assert_read(&c, "InProgress", "Progressing");
    assert!(r.argo.message.starts_with("Bootstrapping: "), "{r:?}");
    let c = env.wait_available(name, 3).await;
    assert_eq!(
        condition(&c, "Ready"),
        Some("True"),
        "Ready mirrors Available"
    );
    let endpoints = env.endpoints(name).await;
    env.etcdctl(&endpoints, &["put", "/steward/e2e", "kept"])
        .await;
    endpoints
}

/// Polls a Pod until `pred` holds.
async fn wait_pod(
    env: &Env,
    name: &str,
    what: &str,
    pred: impl Fn(&k8s_openapi::api::core::v1::Pod) -> bool,
) {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(env.client.clone(), NS);
    let start = std::time::Instant::now();
    loop {
        if let Some(p) = pods.get_opt(name).await.unwrap()
            && p.metadata.deletion_timestamp.is_none()
            && pred(&p)
        {
            return;
        }
        assert!(
            start.elapsed() < EVENTUALLY,
            "pod {name} never became {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

fn voters(member_list: &str) -> usize {
    member_list
        .lines()
        .filter(|l| l.contains(", started,") && l.trim_end().ends_with("false"))
        .count()
}

#[test]
fn three_members_become_available_and_etcd_sees_three_voters() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let endpoints = healthy_three(&env, "alpha").await;
        let list = env.etcdctl(&endpoints, &["member", "list"]).await;
        assert_eq!(voters(&list), 3, "etcdctl member list:\n{list}");
        let got = env
            .etcdctl(&endpoints, &["get", "/steward/e2e", "--print-value-only"])
            .await;
        assert_eq!(got.trim(), "kept");

        let c = env.clusters().get("alpha").await.unwrap();
        let status = c.status.unwrap();
        assert!(status.cluster_id.is_some(), "the cluster ID is latched");
        assert!(status.last_verified_time.is_some());
        assert_eq!(status.members.len(), 3);
        assert_eq!(status.members.iter().filter(|m| m.leader).count(), 1);
        assert!(status.policy.is_some_and(|p| p.digest.len() == 64));
        for m in env.members().list(&Default::default()).await.unwrap() {
            let ready = m
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
            assert_eq!(
                ready.map(|c| c.status.as_str()),
                Some("True"),
                "member {:?}",
                m.metadata.name
            );
        }
        env.shutdown().await;
    });
}

#[test]
fn the_seed_incident_every_member_stops_gracefully_then_recovers() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let endpoints = healthy_three(&env, "seed").await;

        env.plane.kubelet().stop_node().await;
        let c = env
            .wait_for("seed", "Available=False after the graceful stop", |c| {
                condition(c, "Available") == Some("False")
            })
            .await;
        assert_eq!(condition(&c, "Ready"), Some("False"));
        assert_eq!(condition(&c, "Degraded"), Some("True"));
        assert_eq!(ready_members(&c), 0);
        // An outage: Flux waits (InProgress, not Failed), Argo CD is Degraded.
        let r = env.assert_read(&c, "InProgress", "Degraded");
        assert_eq!(r.kstatus.message, condition_message(&c, "Ready").unwrap());
        let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget =
            kube::Api::namespaced(env.client.clone(), NS)
                .get("seed")
                .await
                .unwrap();
        assert_eq!(
            pdb.spec.unwrap().min_available,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2))
        );

        // The node comes back; the operator replaces the Succeeded Pods on
        // their PVCs and the data is still there.
        env.plane.kubelet().start_node();
        env.wait_available("seed", 3).await;
        let got = env
            .etcdctl(&endpoints, &["get", "/steward/e2e", "--print-value-only"])
            .await;
        assert_eq!(got.trim(), "kept");
        env.shutdown().await;
    });
}

#[test]
fn one_killed_member_degrades_then_heals_and_two_killed_lose_quorum() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        healthy_three(&env, "kills").await;
        let names = env.member_names("kills").await;

        let watch = env.watch("kills").await;
        env.plane.kubelet().kill(NS, &names[0]).await.unwrap();
        let c = watch
            .until("Degraded=True while still Available", |c| {
                condition(c, "Degraded") == Some("True")
                    && condition(c, "Available") == Some("True")
            })
            .await;
        assert!(ready_members(&c) <= 2);
        // A dead member changes no membership: Reconciling stays False, so
        // kstatus reads the Ready mirror of Available.
        assert_eq!(condition(&c, "Reconciling"), Some("False"));
        let r = env.assert_read_healthy(&c);
        assert!(r.argo.message.starts_with("Available, degraded: "), "{r:?}");
        env.wait_for("kills", "healed", |c| {
            condition(c, "Degraded") == Some("False") && ready_members(c) == 3
        })
        .await;

        // Two of three killed. The operator recreates their Pods at once
        // (they go Failed), and a restarted etcd could rejoin before any
        // probe looks; so the node holds the new Pods back (as a hung image
        // pull or volume attach would) and the outage lasts until released.
        let kubelet = env.plane.kubelet();
        let watch = env.watch("kills").await;
        for n in &names[1..] {
            kubelet.hold_starts(NS, n);
        }
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(env.client.clone(), NS);
        let mut killed_uids = Vec::new();
        for n in &names[1..] {
            killed_uids.push(pods.get(n).await.unwrap().metadata.uid.unwrap());
            kubelet.kill(NS, n).await.unwrap();
        }
        let c = watch
            .until("Available=False with two of three down", |c| {
                condition(c, "Available") == Some("False")
            })
            .await;
        assert_eq!(condition_reason(&c, "Available"), Some("QuorumLost"));
        assert!(ready_members(&c) <= 1, "{:?}", c.status);
        assert_eq!(condition(&c, "Degraded"), Some("True"));
        let r = env.assert_read(&c, "InProgress", "Degraded");
        assert!(r.argo.message.starts_with("QuorumLost: "), "{r:?}");
        // The operator did its part: both Pods were recreated (and held).
        for n in &names[1..] {
            wait_pod(&env, n, "recreated and Pending", |p| {
                !killed_uids.contains(p.metadata.uid.as_ref().unwrap())
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")
            })
            .await;
        }
        for n in &names[1..] {
            kubelet.release_starts(NS, n);
        }
        env.wait_available("kills", 3).await;
        env.shutdown().await;
    });
}

/// What happens to the victim's volume while its Pod is down.
enum DiskFault {
    /// Garbage where etcd's data directory was.
    Corrupted,
    /// Empty, as after a disk replacement.
    Wiped,
}

#[test]
fn a_member_that_keeps_crashing_is_replaced_while_the_others_hold_quorum() {
    let _g = serial();
    run(replaced_after_disk_fault(
        "heal",
        false,
        DiskFault::Corrupted,
    ));
}

/// Without care, the seed (started with --initial-cluster-state=new) would
/// bootstrap a second, empty cluster under the same identity on a blank
/// volume, and look healthy. It must fail to start and be replaced.
#[test]
fn a_seed_whose_volume_was_replaced_never_starts_a_second_cluster() {
    let _g = serial();
    run(replaced_after_disk_fault("reseed", true, DiskFault::Wiped));
}

async fn replaced_after_disk_fault(name: &str, seed: bool, fault: DiskFault) {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let env = Env::start().await;
    let endpoints = healthy_three(&env, name).await;
    let members = env.members().list(&Default::default()).await.unwrap();
    let victim = members
        .items
        .iter()
        .find(|m| m.spec.cluster == name && m.spec.bootstrap == seed)
        .unwrap()
        .metadata
        .name
        .clone()
        .unwrap();
    let claim = format!("data-{victim}");
    let list = env.etcdctl(&endpoints, &["member", "list"]).await;
    assert!(list.contains(&victim), "{list}");

    // Kill it, keep its recreated Pod from starting, and break the volume
    // meanwhile: from now on etcd fails at every start.
    let kubelet = env.plane.kubelet();
    kubelet.hold_starts(NS, &victim);
    kubelet.kill(NS, &victim).await.unwrap();
    wait_pod(&env, &victim, "recreated and Pending", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")
    })
    .await;
    kubelet.wipe_claim(NS, &claim).unwrap();
    if let DiskFault::Corrupted = fault {
        for dir in kubelet.claim_dirs(NS, &claim) {
            std::fs::write(dir.join("member"), b"not an etcd data directory").unwrap();
        }
    }
    kubelet.release_starts(NS, &victim);

    // The operator replaces it: MemberRemove, a fresh learner on a new
    // volume, promotion. The cluster never lost quorum meanwhile.
    let c = env
        .wait_for(name, "the crash-looping member replaced", |c| {
            condition(c, "Available") == Some("True")
                && ready_members(c) == 3
                && condition(c, "Reconciling") == Some("False")
                && c.status.as_ref().is_some_and(|s| {
                    s.members.len() == 3
                        && !s.members.iter().any(|m| m.name == victim)
                        && s.broken_members.is_empty()
                })
        })
        .await;
    assert_eq!(condition(&c, "Degraded"), Some("False"));
    env.assert_read_healthy(&c);
    let now = env.member_names(name).await;
    assert!(!now.contains(&victim), "{now:?}");
    // Every member answers with the one cluster ID the operator latched.
    let all = env.endpoints(name).await;
    let status = env
        .etcdctl(&all, &["endpoint", "status", "--write-out=json"])
        .await;
    let ids: std::collections::BTreeSet<String> =
        serde_json::from_str::<serde_json::Value>(&status)
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                format!(
                    "{:x}",
                    e["Status"]["header"]["cluster_id"].as_u64().unwrap()
                )
            })
            .collect();
    assert_eq!(
        ids.into_iter().collect::<Vec<_>>(),
        [c.status.as_ref().unwrap().cluster_id.clone().unwrap()],
        "{status}"
    );
    let list = env.etcdctl(&all, &["member", "list"]).await;
    assert_eq!(voters(&list), 3, "{list}");
    assert!(
        !list.contains(&victim),
        "etcd still lists {victim}:\n{list}"
    );
    let got = env
        .etcdctl(&all, &["get", "/steward/e2e", "--print-value-only"])
        .await;
    assert_eq!(got.trim(), "kept");
    // The broken member's volume goes with it: the garbage collector
    // deletes the claim once its EtcdMember is gone, pvc-protection lets it
    // go once no Pod uses it, and reclaimPolicy Delete removes the data.
    let pvcs: kube::Api<PersistentVolumeClaim> = kube::Api::namespaced(env.client.clone(), NS);
    let start = std::time::Instant::now();
    while pvcs.get_opt(&claim).await.unwrap().is_some()
        || !env.plane.kubelet().claim_dirs(NS, &claim).is_empty()
    {
        assert!(
            start.elapsed() < EVENTUALLY,
            "the broken member's claim {claim} or its data outlived it"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(env.client.clone(), NS);
    let events = events.list(&Default::default()).await.unwrap().items;
    assert!(
        events.iter().any(|e| e.type_.as_deref() == Some("Warning")
            && e.reason.as_deref() == Some("ReplacingMember")
            && e.note.as_deref().is_some_and(|n| n.contains(&victim))),
        "a Warning Event names the replaced member"
    );
    env.shutdown().await;
}

#[test]
fn frozen_members_are_detected_without_any_pod_change() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        healthy_three(&env, "frozen").await;
        let names = env.member_names("frozen").await;
        for n in &names {
            env.plane.kubelet().freeze(NS, n).await.unwrap();
        }
        let c = env
            .wait_for(
                "frozen",
                "Available=False while every Pod stays Ready",
                |c| condition(c, "Available") == Some("False"),
            )
            .await;
        assert_eq!(ready_members(&c), 0);
        env.assert_read(&c, "InProgress", "Degraded");
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(env.client.clone(), NS);
        for n in &names {
            let pod = pods.get(n).await.unwrap();
            let ready = pod
                .status
                .unwrap()
                .conditions
                .unwrap()
                .into_iter()
                .find(|c| c.type_ == "Ready")
                .unwrap();
            assert_eq!(ready.status, "True", "the frozen pod {n} still looks Ready");
        }
        for n in &names {
            env.plane.kubelet().thaw(NS, n).await.unwrap();
        }
        let before = c.status.and_then(|s| s.last_verified_time);
        let c = env.wait_available("frozen", 3).await;
        assert!(
            c.status.unwrap().last_verified_time > before,
            "health is verified again"
        );
        env.shutdown().await;
    });
}

#[test]
fn names_that_stop_resolving_are_reported_as_dns() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        healthy_three(&env, "dns").await;
        let names = env.member_names("dns").await;
        for n in &names {
            env.plane.kubelet().make_unresolvable(NS, n).unwrap();
        }
        let c = env
            .wait_for("dns", "Available=False", |c| {
                condition(c, "Available") == Some("False")
            })
            .await;
        let message = condition_message(&c, "Available")
            .unwrap_or_default()
            .to_lowercase();
        assert!(message.contains("dns"), "the message names DNS: {message}");
        let r = env.assert_read(&c, "InProgress", "Degraded");
        assert!(r.argo.message.to_lowercase().contains("dns"), "{r:?}");
        for n in &names {
            env.plane.kubelet().restore_name(NS, n).unwrap();
        }
        env.wait_available("dns", 3).await;
        env.shutdown().await;
    });
}

#[test]
fn scaling_three_to_five_to_three_keeps_data_and_quorum() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let endpoints = healthy_three(&env, "scale").await;

        let watch = env.watch("scale").await;
        let patched = env.scale("scale", 5).await;
        // The new generation is not observed yet: both consumers wait.
        let r = env.assert_read(&patched, "InProgress", "Progressing");
        let generation = patched.metadata.generation.unwrap();
        assert_eq!(
            r.argo.message,
            format!("Waiting for etcd-steward to observe generation {generation}")
        );
        let c = watch
            .until("Reconciling=True (ScalingUp) while Available", |c| {
                condition_reason(c, "Reconciling") == Some("ScalingUp")
                    && condition(c, "Reconciling") == Some("True")
                    && condition(c, "Available") == Some("True")
            })
            .await;
        // kstatus waits for the membership change; Argo CD checks
        // Available before Reconciling, so a serving cluster is Healthy.
        env.assert_read(&c, "InProgress", "Healthy");
        env.wait_available("scale", 5).await;
        let all = env.endpoints("scale").await;
        let list = env.etcdctl(&all, &["member", "list"]).await;
        assert_eq!(voters(&list), 5, "five voters, no learner left:\n{list}");

        let watch = env.watch("scale").await;
        let patched = env.scale("scale", 3).await;
        env.assert_read(&patched, "InProgress", "Progressing");
        let c = watch
            .until("Reconciling=True (ScalingDown) while Available", |c| {
                condition_reason(c, "Reconciling") == Some("ScalingDown")
                    && condition(c, "Reconciling") == Some("True")
                    && condition(c, "Available") == Some("True")
            })
            .await;
        env.assert_read(&c, "InProgress", "Healthy");
        let c = env
            .wait_for("scale", "three members again", |c| {
                condition(c, "Available") == Some("True")
                    && ready_members(c) == 3
                    && condition(c, "Reconciling") == Some("False")
                    && c.status.as_ref().is_some_and(|s| s.members.len() == 3)
            })
            .await;
        env.assert_read_healthy(&c);
        let now = env.endpoints("scale").await;
        let list = env.etcdctl(&now, &["member", "list"]).await;
        assert_eq!(voters(&list), 3, "{list}");
        let got = env
            .etcdctl(&now, &["get", "/steward/e2e", "--print-value-only"])
            .await;
        assert_eq!(got.trim(), "kept");
        let _ = endpoints;
        env.shutdown().await;
    });
}

#[test]
fn an_operator_killed_right_after_member_add_is_converged_by_the_next() {
    use etcd_steward::etcd::Rpc;
    let _g = serial();
    run(async {
        let mut env = Env::start().await;
        healthy_three(&env, "crash").await;

        // The first operator dies the moment MemberAddAsLearner succeeds,
        // before it can create the EtcdMember: the hook panics inside the
        // reconcile, which takes the whole operator task down like a crash.
        env.faults.on_success(Rpc::MemberAddAsLearner, |_, _| {
            panic!("simulated operator crash right after MemberAddAsLearner");
        });
        env.scale("crash", 4).await;
        env.wait_operator_exit().await;
        assert!(env.faults.calls(Rpc::MemberAddAsLearner) >= 1);
        env.faults.clear_all();
        let all = env.endpoints("crash").await;
        let list = env.etcdctl(&all, &["member", "list"]).await;
        assert!(
            list.contains("unstarted"),
            "etcd holds the added, never-started learner:\n{list}"
        );

        env.start_operator();
        env.wait_available("crash", 4).await;
        let all = env.endpoints("crash").await;
        let list = env.etcdctl(&all, &["member", "list"]).await;
        assert_eq!(voters(&list), 4, "{list}");
        assert_eq!(env.member_names("crash").await.len(), 4);
        env.shutdown().await;
    });
}

#[test]
fn two_replicas_elect_one_leader_and_hand_over_on_shutdown() {
    use etcd_steward::cli::run::{Operator, RunArgs};
    use etcd_steward::leader::LeaseConfig;
    let _g = serial();
    run(async {
        let mut env = Env::start().await;
        env.kill_operator().await;
        let replica = |id: &str| {
            let mut op = Operator::new(RunArgs {
                leader_elect: true,
                ..run_args()
            });
            op.lease = Some(LeaseConfig {
                lease_duration: std::time::Duration::from_secs(3),
                renew_deadline: std::time::Duration::from_secs(2),
                retry_period: std::time::Duration::from_millis(200),
                ..LeaseConfig::new(OPERATOR_NS, id)
            });
            let metrics = op.metrics.clone();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let client = env.operator_client.clone();
            let task = tokio::spawn(op.run(client, async {
                let _ = stopped.await;
            }));
            (metrics, stop, task)
        };
        let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(env.client.clone(), OPERATOR_NS);
        let holder = || async {
            leases
                .get_opt("etcd-steward")
                .await
                .unwrap()
                .and_then(|l| l.spec?.holder_identity)
        };
        let (a_metrics, stop_a, a) = replica("replica-a");
        let start = std::time::Instant::now();
        while holder().await.as_deref() != Some("replica-a") {
            assert!(start.elapsed() < EVENTUALLY, "replica-a never led");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let (b_metrics, stop_b, b) = replica("replica-b");

        healthy_three(&env, "ha").await;
        assert_eq!(holder().await.as_deref(), Some("replica-a"));
        assert!(reconciles(&a_metrics) > 0);
        assert_eq!(reconciles(&b_metrics), 0, "the follower reconciled");
        assert!(b_metrics.encode().contains("etcd_steward_leader 0"));

        // A rolling update stops the leader: it releases the Lease and the
        // follower carries on writing status.
        stop_a.send(()).unwrap();
        a.await.unwrap().unwrap();
        let start = std::time::Instant::now();
        while holder().await.as_deref() != Some("replica-b") {
            assert!(start.elapsed() < EVENTUALLY, "replica-b never took over");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let before = env.clusters().get("ha").await.unwrap().status.unwrap();
        env.wait_for("ha", "a status written by the new leader", |c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.last_verified_time > before.last_verified_time)
        })
        .await;
        // The reconcile that wrote it is counted once its act stage is done.
        let start = std::time::Instant::now();
        while reconciles(&b_metrics) == 0 {
            assert!(start.elapsed() < EVENTUALLY, "replica-b never reconciled");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(b_metrics.encode().contains("etcd_steward_leader 1"));
        stop_b.send(()).unwrap();
        b.await.unwrap().unwrap();
        env.shutdown().await;
    });
}

/// Reconciles of the EtcdCluster controller, from the metrics text.
fn reconciles(metrics: &etcd_steward::metrics::Metrics) -> u64 {
    metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix("etcd_steward_reconcile_duration_seconds_count "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The incident's guard, for every etcd RPC the operator makes: with the
/// member Pods not Ready and that RPC failing, the very same reconcile
/// writes Available=False and readyMembers 0. Membership RPCs are never
/// reached without verified quorum; the test proves that too.
#[test]
fn every_failing_etcd_rpc_still_yields_a_written_unavailable_status() {
    use etcd_steward::cli::run::Operator;
    use etcd_steward::cluster::reconcile_cluster;
    use etcd_steward::etcd::{Fault, Rpc};
    use steward_policy_sdk::ProbeErrorKind;
    let _g = serial();
    run(async {
        let mut env = Env::start().await;
        healthy_three(&env, "rpcs").await;
        let names = env.member_names("rpcs").await;
        env.kill_operator().await;
        env.plane.kubelet().kill(NS, &names[1]).await.unwrap();
        env.plane.kubelet().kill(NS, &names[2]).await.unwrap();
        // The survivor has no quorum, so its readiness probe (/health) fails too.
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(env.client.clone(), NS);
        let start = std::time::Instant::now();
        loop {
            let mut ready = 0;
            for n in &names {
                let p = pods.get(n).await.unwrap();
                let r = p.status.and_then(|s| s.conditions).unwrap_or_default();
                ready += r
                    .iter()
                    .filter(|c| c.type_ == "Ready" && c.status == "True")
                    .count();
            }
            if ready == 0 {
                break;
            }
            assert!(start.elapsed() < EVENTUALLY, "pods never went not-Ready");
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }

        for rpc in Rpc::ALL {
            let op = Operator::new(run_args());
            op.faults.inject(Fault::fail(rpc, ProbeErrorKind::Timeout));
            let ctx = op.context(env.operator_client.clone()).await.unwrap();
            // Start from a stale "healthy" status, as the incident's cluster had.
            let stale = serde_json::json!({"status": {"readyMembers": 3, "conditions": [{
                "type": "Available", "status": "True", "reason": "QuorumHealthy",
                "message": "stale", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
            env.clusters()
                .patch_status(
                    "rpcs",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&stale),
                )
                .await
                .unwrap();
            let before = env.clusters().get("rpcs").await.unwrap();
            assert_eq!(condition(&before, "Available"), Some("True"));
            reconcile_cluster(std::sync::Arc::new(before), ctx.clone())
                .await
                .unwrap();
            let after = env.clusters().get("rpcs").await.unwrap();
            assert_eq!(
                condition(&after, "Available"),
                Some("False"),
                "{rpc}: {:?}",
                after.status
            );
            assert_eq!(ready_members(&after), 0, "{rpc}");
            env.assert_read(&after, "InProgress", "Degraded");
            if rpc.is_mutation() {
                assert_eq!(
                    op.faults.calls(rpc),
                    0,
                    "{rpc} must not run without verified quorum"
                );
            } else {
                assert!(op.faults.injected(rpc) >= 1, "{rpc} was reached and failed");
            }
        }
        env.start_operator();
        env.wait_available("rpcs", 3).await;
        env.shutdown().await;
    });
}

#[test]
fn a_broken_policy_falls_back_to_unknown_with_a_warning_event() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let wasm = std::fs::read(env!("STEWARD_CHAOS_POLICY_WASM"))
            .expect("the chaos test policy was built");
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "chaos", "namespace": NS},
            "binaryData": {"policy.wasm": k8s_openapi::ByteString(wasm)}
        }))
        .unwrap();
        kube::Api::<ConfigMap>::namespaced(env.client.clone(), NS)
            .create(&Default::default(), &cm)
            .await
            .unwrap();
        healthy_three(&env, "broken").await;

        env.clusters()
            .patch(
                "broken",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({
                    "spec": {"statusPolicy": {"name": "chaos", "settings": {"fault": "trap"}}}
                })),
            )
            .await
            .unwrap();
        let c = env
            .wait_for("broken", "Available=Unknown/PolicyFailed", |c| {
                condition(c, "Available") == Some("Unknown")
                    && condition_reason(c, "Available") == Some("PolicyFailed")
            })
            .await;
        // Not verified is not healthy: Ready mirrors Unknown, so Flux
        // waits; Argo CD says why.
        let r = env.assert_read(&c, "InProgress", "Degraded");
        assert!(
            r.argo
                .message
                .starts_with("Health not verified: PolicyFailed: "),
            "{r:?}"
        );
        let streak = c.status.as_ref().unwrap().unverified_streak;
        // The status keeps updating while the policy keeps failing.
        env.wait_for("broken", "the status still updates", |c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.unverified_streak > streak)
        })
        .await;
        let events: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(env.client.clone(), NS);
        let list = events.list(&Default::default()).await.unwrap();
        assert!(
            list.items
                .iter()
                .any(|e| e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("PolicyFailed")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("broken")),
            "a Warning Event names the policy failure"
        );

        // A policy that cannot be had at all is for a human to fix:
        // Stalled, which kstatus reads as Failed (Flux fails at once).
        env.clusters()
            .patch(
                "broken",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({
                    "spec": {"statusPolicy": {"name": "absent", "settings": null}}
                })),
            )
            .await
            .unwrap();
        let c = env
            .wait_for("broken", "Stalled=True/PolicyUnloadable", |c| {
                condition(c, "Stalled") == Some("True")
                    && condition_reason(c, "Stalled") == Some("PolicyUnloadable")
            })
            .await;
        assert_eq!(
            condition(&c, "Reconciling"),
            Some("False"),
            "Stalled=True forces Reconciling=False"
        );
        let r = env.assert_read(&c, "Failed", "Degraded");
        assert!(r.argo.message.starts_with("PolicyUnloadable: "), "{r:?}");
        assert_eq!(r.kstatus.message, condition_message(&c, "Stalled").unwrap());
        env.shutdown().await;
    });
}

#[test]
fn a_paused_cluster_is_suspended_for_argo_and_a_deleted_one_terminating() {
    use kube::api::DeleteParams;
    let _g = serial();
    run(async {
        let env = Env::start().await;
        healthy_three(&env, "pause").await;

        env.scale("pause", 0).await;
        let c = env
            .wait_for("pause", "paused (Reconciling=False/Paused)", |c| {
                condition(c, "Reconciling") == Some("False")
                    && condition_reason(c, "Reconciling") == Some("Paused")
                    && c.status.as_ref().and_then(|s| s.observed_generation)
                        == c.metadata.generation
            })
            .await;
        let r = env.read(&c);
        assert_eq!(
            (r.argo.status.as_str(), r.argo.message.as_str()),
            ("Suspended", "Paused at 0 replicas"),
            "{}",
            describe(&c)
        );
        // TODO(issue 9, item 7): kstatus has no paused state and reads the
        // Ready=False mirror of Available=False/Paused as InProgress, which
        // a Flux health check waits on until it times out. The host is
        // changing; no assertion on kstatus here until it has.
        eprintln!("kstatus reads the paused cluster as {}", r.kstatus);

        // Deleted with foreground propagation, the object stays while the
        // garbage collector removes its members: the API server's answer
        // is that object, with deletionTimestamp set.
        let deleting = env
            .clusters()
            .delete("pause", &DeleteParams::foreground())
            .await
            .unwrap()
            .left()
            .expect("foreground deletion keeps the object until its dependents are gone");
        assert!(deleting.metadata.deletion_timestamp.is_some());
        let r = env.assert_read(&deleting, "Terminating", "Progressing");
        assert_eq!(r.argo.message, "Deleting");
        let start = std::time::Instant::now();
        while env.clusters().get_opt("pause").await.unwrap().is_some() {
            assert!(start.elapsed() < EVENTUALLY, "the deleted cluster stayed");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        env.shutdown().await;
    });
}

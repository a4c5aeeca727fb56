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

/// The release the clusters run: the operator's default, which the local
/// kubelet runs from the image tag.
const ETCD_VERSION: &str = etcd_steward::api::DEFAULT_ETCD_VERSION;
/// Another release the testbed builds (tests/etcd/3.5): one minor down,
/// which a cluster running 3.6 everywhere refuses to roll to.
const OTHER_VERSION: &str = "3.5.36";

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
    // The version etcd itself reports, per member and for the cluster.
    let c = env
        .wait_for(name, "every member reported its version", |c| {
            c.status.as_ref().is_some_and(|s| {
                s.members.len() == 3 && s.members.iter().all(|m| m.version.is_some())
            })
        })
        .await;
    let status = c.status.as_ref().unwrap();
    assert_eq!(status.version.as_deref(), Some(ETCD_VERSION));
    assert!(
        status
            .members
            .iter()
            .all(|m| m.version.as_deref() == Some(ETCD_VERSION))
    );
    assert_eq!(condition(&c, "VersionDrifted"), Some("False"));
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
        assert!(
            status
                .policy
                .is_some_and(|p| p.digest.starts_with("sha256:") && p.digest.len() == 71)
        );
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

        // Pods have addresses the API server accepts in EndpointSlices (not
        // loopback ones), so the Services applications use have endpoints:
        // every member's Pod IP, ready, in both.
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(env.client.clone(), NS);
        let mut ips = Vec::new();
        for n in env.member_names("alpha").await {
            let ip = pods.get(&n).await.unwrap().status.unwrap().pod_ip.unwrap();
            let parsed: std::net::Ipv4Addr = ip.parse().unwrap();
            assert!(!parsed.is_loopback() && parsed.is_private(), "{n}: {ip}");
            ips.push(ip);
        }
        ips.sort();
        let slices: kube::Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
            kube::Api::namespaced(env.client.clone(), NS);
        for service in ["alpha-client", "alpha"] {
            let selector = format!("kubernetes.io/service-name={service}");
            let start = std::time::Instant::now();
            loop {
                let mut ready: Vec<String> = slices
                    .list(&kube::api::ListParams::default().labels(&selector))
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .flat_map(|s| s.endpoints.unwrap_or_default())
                    .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                    .flat_map(|e| e.addresses)
                    .collect();
                ready.sort();
                if ready == ips {
                    break;
                }
                assert!(
                    start.elapsed() < EVENTUALLY,
                    "{service}: ready endpoints {ready:?}, Pod IPs {ips:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        }
        // As an application writes: to the client Service's name, which
        // resolves to its ClusterIP, forwarded to a ready member by the
        // testbed's Service proxy.
        let service = format!("http://alpha-client.{NS}.svc:2379");
        env.etcdctl(&service, &["put", "/steward/via-service", "through it"])
            .await;
        let got = env
            .etcdctl(
                &endpoints,
                &["get", "/steward/via-service", "--print-value-only"],
            )
            .await;
        assert_eq!(got.trim(), "through it");
        env.shutdown().await;
    });
}

#[test]
fn the_seed_incident_every_member_stops_gracefully_then_recovers() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let endpoints = healthy_three(&env, "seed").await;
        let healthy = env.metrics_text();

        env.plane.kubelet().stop_node().await;
        let c = env
            .wait_for("seed", "Available=False after the graceful stop", |c| {
                condition(c, "Available") == Some("False")
            })
            .await;
        let down = env.metrics_text();
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
        the_alerts_fire_on_the_incident_and_stay_silent_when_healthy(&env, &healthy, &down);
        env.shutdown().await;
    });
}

/// The chart's alerts, run by the real promtool on the series this run's
/// operator exported: silent on the healthy cluster, Unavailable and
/// MemberDown on the seed incident, Unverified once verification is old.
fn the_alerts_fire_on_the_incident_and_stay_silent_when_healthy(
    env: &Env,
    healthy: &str,
    down: &str,
) {
    use std::collections::BTreeMap;
    use support::alerts::{Case, Firing, test_rules, value};
    let labels = |severity: &str| {
        BTreeMap::from([
            ("namespace", NS.to_owned()),
            ("name", "seed".to_owned()),
            ("severity", severity.to_owned()),
        ])
    };
    let seed = format!(r#"{{namespace="{NS}",name="seed"}}"#);
    let since = format!("etcd_steward_cluster_seconds_since_verified{seed}");
    assert!(
        value(healthy, &format!("etcd_steward_cluster_available{seed}")) == Some(1.0),
        "{healthy}"
    );
    assert_eq!(
        value(down, &format!("etcd_steward_cluster_available{seed}")),
        Some(0.0),
        "{down}"
    );
    let not_ready = value(down, &format!("etcd_steward_cluster_desired_members{seed}")).unwrap()
        - value(down, &format!("etcd_steward_cluster_ready_members{seed}")).unwrap();
    assert!(not_ready > 0.0, "{down}");
    let firing_down = vec![
        Firing {
            alert: "EtcdClusterUnavailable",
            labels: labels("critical"),
            annotations: BTreeMap::from([
                ("summary", format!("EtcdCluster {NS}/seed is not Available")),
                ("description", format!("The operator could not verify a quorum for {NS}/seed: a linearizable read did not succeed. Clients may not be able to read or write.")),
                ("runbook", "docs/alerts.md#etcdclusterunavailable".to_owned()),
            ]),
        },
        Firing {
            alert: "EtcdClusterMemberDown",
            labels: labels("warning"),
            annotations: BTreeMap::from([
                ("summary", format!("EtcdCluster {NS}/seed has {not_ready} member(s) not ready")),
                ("description", "Fewer members are ready than spec.replicas asks for; the cluster tolerates fewer failures until they return.".to_owned()),
                ("runbook", "docs/alerts.md#etcdclustermemberdown".to_owned()),
            ]),
        },
    ];
    // How old verification is at the snapshot depends on the machine's
    // pace; the derived case below asserts Unverified.
    let unasserted = if value(down, &since).is_some_and(|v| v > 60.0) {
        vec!["EtcdClusterUnverified"]
    } else {
        vec![]
    };
    let stale = healthy
        .lines()
        .map(|l| {
            if l.starts_with(&since) {
                format!("{since} 120")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let out = test_rules(
        env.dir(),
        &[
            Case {
                name: "healthy",
                exposition: healthy,
                firing: vec![],
                unasserted: vec![],
            },
            Case {
                name: "seed incident",
                exposition: down,
                firing: firing_down,
                unasserted,
            },
            Case {
                name: "healthy, but last verified 2 minutes ago",
                exposition: &stale,
                firing: vec![Firing {
                    alert: "EtcdClusterUnverified",
                    labels: labels("warning"),
                    annotations: BTreeMap::from([
                        (
                            "summary",
                            format!("EtcdCluster {NS}/seed has not been verified for 2m 0s"),
                        ),
                        (
                            "description",
                            format!(
                                "The last verified health of {NS}/seed is older than twice the default policy's 30 s staleness window."
                            ),
                        ),
                        ("runbook", "docs/alerts.md#etcdclusterunverified".to_owned()),
                    ]),
                }],
                unasserted: vec![],
            },
        ],
    );
    assert!(out.contains("SUCCESS"), "{out}");
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
        let original = env.member_names("scale").await;

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

        // Hand leadership to a member the scale-up added: scaling back
        // removes the newest members, so one removal hits the leader, and
        // the operator must move leadership off it first rather than
        // remove an older member instead.
        let added: Vec<String> = env
            .member_names("scale")
            .await
            .into_iter()
            .filter(|n| !original.contains(n))
            .collect();
        assert_eq!(added.len(), 2, "{added:?}");
        let target = &added[0];
        let id = list
            .lines()
            .find(|l| l.contains(&format!(", {target}, ")))
            .and_then(|l| l.split(',').next())
            .unwrap_or_else(|| panic!("{target} in {list}"))
            .to_owned();
        env.etcdctl(&all, &["move-leader", &id]).await;
        env.wait_for("scale", "the added member leads", |c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.members.iter().any(|m| m.leader && &m.name == target))
        })
        .await;

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
        assert_eq!(
            env.member_names("scale").await,
            original,
            "the two newest members were removed, the leader among them"
        );
        let leader = c.status.as_ref().unwrap().members.iter().find(|m| m.leader);
        assert!(
            leader.is_some_and(|m| original.contains(&m.name)),
            "{}",
            describe(&c)
        );
        let events: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(env.client.clone(), NS);
        let moved: Vec<String> = events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("LeaderMoved"))
            .filter_map(|e| e.note)
            .collect();
        assert!(
            moved
                .iter()
                .any(|n| n.starts_with(&format!("moved leadership from {target} to "))),
            "a LeaderMoved Event for {target}: {moved:?}"
        );
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

        // Snapshot and HashKV are no calls of the cluster reconcile:
        // backup.rs fails them under an EtcdSnapshot and checks that its
        // status is written. The auth calls are mutations: never made
        // without verified quorum (asserted below); the spec.auth test
        // fails AuthEnable on a verified cluster.
        for rpc in Rpc::ALL
            .into_iter()
            .filter(|r| !matches!(r, Rpc::Snapshot | Rpc::HashKv))
        {
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
    let _g = serial();
    run(async {
        let env = Env::start().await;
        install_chaos_policy(&env).await;
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
        // A ConfigMap in the cluster's namespace is the deprecated form: it
        // still runs, the status says where it came from, and one Warning
        // says it is deprecated.
        let source = &c.status.as_ref().unwrap().policy.as_ref().unwrap().source;
        assert!(
            source.starts_with("ConfigMap default/chaos (deprecated"),
            "{source}"
        );
        let deprecations: Vec<_> = list
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("DeprecatedPolicySource"))
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("broken"))
            .collect();
        assert_eq!(deprecations.len(), 1, "{deprecations:?}");
        assert_eq!(deprecations[0].type_.as_deref(), Some("Warning"));
        assert!(
            deprecations[0]
                .note
                .as_deref()
                .is_some_and(|n| n.contains("v1alpha2")),
            "{deprecations:?}"
        );

        // Settings the policy's validate-settings rejects are never
        // evaluated: the host's fallback, Stalled for a human to fix.
        env.clusters()
            .patch(
                "broken",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({
                    "spec": {"statusPolicy": {"name": "chaos", "settings": {"fault": "nonsense"}}}
                })),
            )
            .await
            .unwrap();
        let c = env
            .wait_for("broken", "Stalled=True/InvalidPolicySettings", |c| {
                condition(c, "Stalled") == Some("True")
                    && condition_reason(c, "Stalled") == Some("InvalidPolicySettings")
            })
            .await;
        let message = condition_message(&c, "Stalled").unwrap();
        assert!(message.contains("unknown fault \"nonsense\""), "{message}");
        assert_eq!(
            condition(&c, "Available"),
            Some("Unknown"),
            "{}",
            describe(&c)
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
    use kube::ResourceExt;
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
        // Paused is the state spec.replicas asks for: Ready=True/Paused, so
        // kstatus (Flux, kpt) reads Current and stops waiting, while
        // Available=False says it serves nothing.
        assert_eq!(r.kstatus.status, "Current", "{}", describe(&c));
        assert_eq!(condition(&c, "Ready"), Some("True"));
        assert_eq!(condition_reason(&c, "Ready"), Some("Paused"));
        assert_eq!(condition(&c, "Available"), Some("False"));
        // One dormant member, no Pod, and a PDB that protects nothing.
        let members = env.members().list(&Default::default()).await.unwrap();
        let mine: Vec<_> = members
            .items
            .iter()
            .filter(|m| m.spec.cluster == "pause")
            .collect();
        assert_eq!(mine.len(), 1, "one member stays");
        assert!(mine[0].spec.dormant);
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(env.client.clone(), NS);
        assert!(pods.get_opt(&mine[0].name_any()).await.unwrap().is_none());
        let pdbs: kube::Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
            kube::Api::namespaced(env.client.clone(), NS);
        let pdb = pdbs.get("pause").await.unwrap();
        assert_eq!(
            pdb.spec.and_then(|s| s.min_available),
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0))
        );

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

/// Installs the component at `path` as the ConfigMap `name` (the
/// deprecated ConfigMap form, selected by `spec.statusPolicy.name`).
async fn install_config_map_policy(env: &Env, name: &str, path: &str) {
    use k8s_openapi::api::core::v1::ConfigMap;
    let wasm = std::fs::read(path).unwrap_or_else(|e| panic!("{path} was built: {e}"));
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": NS},
        "binaryData": {"policy.wasm": k8s_openapi::ByteString(wasm)}
    }))
    .unwrap();
    kube::Api::<ConfigMap>::namespaced(env.client.clone(), NS)
        .create(&Default::default(), &cm)
        .await
        .unwrap();
}

/// Installs the chaos test policy as the ConfigMap `chaos`.
async fn install_chaos_policy(env: &Env) {
    install_config_map_policy(env, "chaos", env!("STEWARD_CHAOS_POLICY_WASM")).await;
}

/// A third party's policy that says Available=True for every observation
/// (chaos `always-available`), in each outage of this suite: every member
/// frozen, two killed, names gone from DNS, every member stopped: the seed
/// incident reached through a policy. The host rejects the verdict, so the
/// status never says Available=True while etcd answers nobody, and says
/// why; with the members thawed, the same verdict is true and stands.
#[test]
fn a_policy_that_always_says_available_cannot_hide_frozen_members() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        install_chaos_policy(&env).await;
        healthy_three(&env, "careless").await;
        env.clusters()
            .patch(
                "careless",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"spec": {
                    "statusPolicy": {"name": "chaos", "settings": {"fault": "always-available"}}
                }})),
            )
            .await
            .unwrap();
        env.wait_for("careless", "the chaos policy runs", |c| {
            condition_reason(c, "Available") == Some("Chaos")
        })
        .await;
        let names = env.member_names("careless").await;
        for n in &names {
            env.plane.kubelet().freeze(NS, n).await.unwrap();
        }
        let c = env
            .wait_for("careless", "the verdict is rejected", |c| {
                condition_reason(c, "Available") == Some("PolicyFailed")
            })
            .await;
        assert_eq!(condition(&c, "Available"), Some("Unknown"));
        let message = condition_message(&c, "Available").unwrap();
        assert!(
            message.contains("says Available=True, but none of 3 endpoints answered"),
            "{message}"
        );
        assert_eq!(ready_members(&c), 0);
        env.assert_read(&c, "InProgress", "Degraded");
        // Still rejected a while later: the status keeps moving and never
        // turns True while the members stay frozen.
        let streak = c.status.as_ref().unwrap().unverified_streak;
        let later = env
            .wait_for("careless", "the status still updates", |c| {
                c.status
                    .as_ref()
                    .is_some_and(|s| s.unverified_streak > streak + 2)
            })
            .await;
        assert_eq!(condition(&later, "Available"), Some("Unknown"));
        assert_policy_failed_event(&env, "careless", "says Available=True").await;
        for n in &names {
            env.plane.kubelet().thaw(NS, n).await.unwrap();
        }
        env.wait_for("careless", "the verdict stands again", |c| {
            condition(c, "Available") == Some("True")
                && condition_reason(c, "Available") == Some("Chaos")
        })
        .await;

        // The other outages of this suite, each with the same policy: two
        // members killed and kept down (quorum lost), every name gone from
        // DNS, every member stopped gracefully (the seed incident). Each
        // time the claim is rejected and stays rejected until etcd answers.
        let kubelet = env.plane.kubelet();
        for n in &names[1..] {
            kubelet.hold_starts(NS, n);
            kubelet.kill(NS, n).await.unwrap();
        }
        chaos_claim_rejected(&env, "two members killed").await;
        for n in &names[1..] {
            kubelet.release_starts(NS, n);
        }
        chaos_claim_stands(&env).await;

        for n in &names {
            kubelet.make_unresolvable(NS, n).unwrap();
        }
        chaos_claim_rejected(&env, "names gone from DNS").await;
        for n in &names {
            kubelet.restore_name(NS, n).unwrap();
        }
        chaos_claim_stands(&env).await;

        kubelet.stop_node().await;
        chaos_claim_rejected(&env, "every member stopped").await;
        kubelet.start_node();
        chaos_claim_stands(&env).await;
        env.shutdown().await;
    });
}

/// The chaos policy's Available=True is rejected for the `careless`
/// cluster during `outage`, and still is several reconciles later.
async fn chaos_claim_rejected(env: &Env, outage: &str) {
    let c = env
        .wait_for(
            "careless",
            &format!("{outage}: the verdict is rejected"),
            |c| condition_reason(c, "Available") == Some("PolicyFailed"),
        )
        .await;
    assert_eq!(condition(&c, "Available"), Some("Unknown"), "{outage}");
    let message = condition_message(&c, "Available").unwrap();
    assert!(
        message.contains("says Available=True"),
        "{outage}: {message}"
    );
    let streak = c.status.as_ref().unwrap().unverified_streak;
    let later = env
        .wait_for(
            "careless",
            &format!("{outage}: the status still updates"),
            |c| {
                c.status
                    .as_ref()
                    .is_some_and(|s| s.unverified_streak > streak + 2)
            },
        )
        .await;
    assert_eq!(condition(&later, "Available"), Some("Unknown"), "{outage}");
}

/// The chaos policy's verdict stands once etcd answers again.
async fn chaos_claim_stands(env: &Env) {
    env.wait_for("careless", "the verdict stands again", |c| {
        condition(c, "Available") == Some("True")
            && condition_reason(c, "Available") == Some("Chaos")
            && ready_members(c) == 3
    })
    .await;
}

/// A PolicyFailed Warning Event on `cluster` whose note contains `text`.
async fn assert_policy_failed_event(env: &Env, cluster: &str, text: &str) {
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(env.client.clone(), NS);
    let list = events.list(&Default::default()).await.unwrap();
    assert!(
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("PolicyFailed")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(cluster)
                && e.note.as_deref().is_some_and(|n| n.contains(text))),
        "a Warning Event on {cluster} names the rejected claim ({text})"
    );
}

/// Installs a component built against the previous contract
/// (`steward:status@0.1.0`) as the ConfigMap `compat-v01`.
async fn install_compat_v0_1_policy(env: &Env) {
    install_config_map_policy(env, "compat-v01", env!("STEWARD_COMPAT_V0_1_POLICY_WASM")).await;
}

/// A policy may say anything about availability, but not that etcd
/// verified a quorum when etcd confirmed none: that claim would move
/// lastVerifiedTime and open the planner's door to membership changes.
/// Only a 0.1.0 component can still make the claim (0.2.0 verdicts can only
/// decline verification); the host loads it and checks it.
#[test]
fn a_verdict_claiming_a_quorum_etcd_did_not_confirm_is_rejected() {
    use etcd_steward::cli::run::Operator;
    use etcd_steward::cluster::reconcile_cluster;
    use etcd_steward::etcd::{Fault, Rpc};
    use steward_policy_sdk::ProbeErrorKind;
    let _g = serial();
    run(async {
        let mut env = Env::start().await;
        install_compat_v0_1_policy(&env).await;
        let endpoints = healthy_three(&env, "liar").await;
        env.kill_operator().await;
        // A scale-up is due, and the policy claims all is verified.
        env.clusters()
            .patch(
                "liar",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"spec": {
                    "replicas": 5,
                    "statusPolicy": {"name": "compat-v01", "settings": {"claim": "verified"}}
                }})),
            )
            .await
            .unwrap();

        // No member answers Status: etcd confirms nothing.
        let op = Operator::new(run_args());
        op.faults
            .inject(Fault::fail(Rpc::Status, ProbeErrorKind::Refused));
        let ctx = op.context(env.operator_client.clone()).await.unwrap();
        let before = env.clusters().get("liar").await.unwrap();
        let verified_before = before.status.as_ref().unwrap().last_verified_time.clone();
        assert!(verified_before.is_some());
        for _ in 0..3 {
            let current = env.clusters().get("liar").await.unwrap();
            reconcile_cluster(std::sync::Arc::new(current), ctx.clone())
                .await
                .unwrap();
        }
        let after = env.clusters().get("liar").await.unwrap();
        let status = after.status.as_ref().unwrap();
        assert_eq!(
            condition(&after, "Available"),
            Some("Unknown"),
            "{status:?}"
        );
        assert_eq!(condition_reason(&after, "Available"), Some("PolicyFailed"));
        let message = condition_message(&after, "Available").unwrap();
        assert!(
            message.contains("claims a verified quorum, but etcd confirmed none"),
            "{message}"
        );
        assert_eq!(status.last_verified_time, verified_before, "not verified");
        assert_eq!(status.ready_members, 0);
        assert_eq!(status.policy.as_ref().unwrap().name, "compat-v0.1");
        // No membership change: not in Kubernetes, not in etcd.
        assert_eq!(op.faults.injected(Rpc::MemberAddAsLearner), 0);
        assert_eq!(env.member_names("liar").await.len(), 3);
        let listed = env.etcdctl(&endpoints, &["member", "list"]).await;
        assert_eq!(listed.lines().count(), 3, "{listed}");
        assert_policy_failed_event(&env, "liar", "claims a verified quorum").await;

        // What a platform team alerts on says the same.
        let text = op.metrics.encode();
        for line in [
            r#"etcd_steward_cluster_available{namespace="default",name="liar"} 0"#,
            r#"etcd_steward_cluster_ready_members{namespace="default",name="liar"} 0"#,
            r#"etcd_steward_cluster_desired_members{namespace="default",name="liar"} 5"#,
            r#"etcd_steward_cluster_policy_failures_total{namespace="default",name="liar"} 3"#,
            r#"etcd_steward_policy_failures_total{kind="UnconfirmedVerification"} 3"#,
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert!(
            !text.contains("etcd_steward_cluster_leader{"),
            "no leader seen: {text}"
        );

        // With etcd answering, the same claim is true and stands (at the
        // old size, so that this reconcile changes no membership either).
        op.faults.clear_all();
        env.scale("liar", 3).await;
        // The API keeps whole seconds: the operator's last verification
        // before it was stopped may share a second with this reconcile, and
        // then a fresh time would be stored equal to the old one.
        let old = verified_before.as_ref().unwrap().0;
        let next_second = old + jiff::SignedDuration::from_secs(1);
        if let Ok(wait) = next_second
            .duration_since(jiff::Timestamp::now())
            .try_into()
        {
            tokio::time::sleep(wait).await;
        }
        let current = env.clusters().get("liar").await.unwrap();
        reconcile_cluster(std::sync::Arc::new(current), ctx.clone())
            .await
            .unwrap();
        let after = env.clusters().get("liar").await.unwrap();
        assert_eq!(condition(&after, "Available"), Some("True"));
        assert_eq!(condition_reason(&after, "Available"), Some("CompatV01"));
        // A type the policy declares but did not report is Unknown, not absent.
        assert_eq!(condition(&after, "CompatDeclared"), Some("Unknown"));
        assert_eq!(
            condition_reason(&after, "CompatDeclared"),
            Some("NotReported")
        );
        assert!(after.status.as_ref().unwrap().last_verified_time > verified_before);
        let text = op.metrics.encode();
        assert!(
            text.contains(r#"etcd_steward_cluster_available{namespace="default",name="liar"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"etcd_steward_cluster_seconds_since_verified{namespace="default",name="liar"} 0"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "etcd_steward_cluster_leader{namespace=\"default\",name=\"liar\",member=\"liar-"
            ),
            "{text}"
        );
        assert!(text.contains("etcd_steward_cluster_member_db_size_bytes{namespace=\"default\",name=\"liar\",member=\"liar-"), "{text}");
        drop(ctx);
        env.start_operator();
        env.shutdown().await;
    });
}

/// Each supported minor runs under the operator: a cluster of every release
/// the testbed builds (tests/etcd) forms, reports the version etcd itself
/// runs, and keeps what is written to it; the default release is what every
/// other scenario runs. A version that passes the schema but has no image
/// (3.6.99) fails its Pod as a pull would, and the member's and the
/// cluster's status name the kubelet's reason.
#[test]
fn every_supported_release_forms_a_cluster_and_a_missing_one_is_named_in_the_status() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let default = env.releases().default_version();
        let others: Vec<String> = env
            .releases()
            .versions()
            .filter(|v| *v != default)
            .map(|v| v.to_string())
            .collect();
        let minors: Vec<String> = env
            .releases()
            .versions()
            .map(|v| format!("{}.{}", v.0, v.1))
            .collect();
        assert_eq!(
            minors,
            etcd_steward::api::SUPPORTED_ETCD_MINORS,
            "one release of each supported minor is built"
        );
        for version in &others {
            let name = format!("v{}", version.replace('.', "-"));
            env.create_cluster_at(&name, 3, version).await;
            env.wait_available(&name, 3).await;
            let c = env
                .wait_for(&name, "every member reported its version", |c| {
                    c.status.as_ref().is_some_and(|s| {
                        s.members.len() == 3 && s.members.iter().all(|m| m.version.is_some())
                    })
                })
                .await;
            let status = c.status.as_ref().unwrap();
            assert_eq!(status.version.as_deref(), Some(version.as_str()), "{name}");
            assert_eq!(condition(&c, "VersionDrifted"), Some("False"), "{name}");
            let endpoints = env.endpoints(&name).await;
            env.etcdctl(&endpoints, &["put", "/steward/release", version])
                .await;
            let got = env
                .etcdctl(
                    &endpoints,
                    &["get", "/steward/release", "--print-value-only"],
                )
                .await;
            assert_eq!(got.trim(), version);
            let list = env.etcdctl(&endpoints, &["member", "list"]).await;
            assert_eq!(list.lines().count(), 3, "{name}: {list}");
            assert!(!list.contains("true"), "{name}: no learner left: {list}");
            env.clusters()
                .delete(&name, &Default::default())
                .await
                .unwrap();
        }

        env.create_cluster_at("missing", 1, "3.6.99").await;
        let c = env
            .wait_for("missing", "the status names the failed pull", |c| {
                describe(c).contains("cannot start: ErrImagePull")
            })
            .await;
        assert!(
            describe(&c).contains("etcd 3.6.99 is not built here"),
            "{}",
            describe(&c)
        );
        assert_ne!(condition(&c, "Available"), Some("True"));
        let member = env
            .members()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|m| m.spec.cluster == "missing")
            .expect("the seed member");
        let ready = member
            .status
            .as_ref()
            .and_then(|s| s.condition("Ready"))
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert!(
            ready.contains("the member's Pod cannot start: ErrImagePull"),
            "{ready}"
        );
        env.shutdown().await;
    });
}

/// Changing spec.version rolls the members one at a time along etcd's
/// supported path, keeping each member's volume and ID:
/// - a version that cannot start (no image for 3.5.99) stops the rollout at
///   the first member, named, with quorum kept; setting spec.version back
///   rolls that member back;
/// - 3.5.36 → 3.6.17 rolls followers first and the leader last, after
///   leadership moved away, with Reconciling=True/Upgrading meanwhile; data,
///   member IDs and PVCs stay;
/// - 3.6 → 3.5 on a cluster that runs 3.6 everywhere is refused (Stalled,
///   UnsupportedVersionChange) and nothing moves.
#[test]
fn changing_the_version_rolls_members_one_at_a_time_and_stops_on_failure() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let name = "roll";
        let (old, new) = ("3.5.36", ETCD_VERSION);
        env.create_cluster_at(name, 3, old).await;
        env.wait_available(name, 3).await;
        let endpoints = env.endpoints(name).await;
        env.etcdctl(&endpoints, &["put", "/steward/roll", "kept"])
            .await;
        let ids = |c: &etcd_steward::api::EtcdCluster| -> Vec<(String, Option<String>)> {
            let mut v: Vec<_> = c
                .status
                .as_ref()
                .unwrap()
                .members
                .iter()
                .map(|m| (m.name.clone(), m.id.clone()))
                .collect();
            v.sort();
            v
        };
        let before = env
            .wait_for(name, "every member's ID known", |c| {
                c.status.as_ref().is_some_and(|s| {
                    s.members.len() == 3 && s.members.iter().all(|m| m.id.is_some())
                })
            })
            .await;
        let pvcs: kube::Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            kube::Api::namespaced(env.client.clone(), NS);
        let claim_uids = || async {
            let mut v: Vec<String> = pvcs
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|p| {
                    p.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("data-roll-"))
                })
                .filter_map(|p| p.metadata.uid)
                .collect();
            v.sort();
            v
        };
        let claims = claim_uids().await;
        assert_eq!(claims.len(), 3);
        let clusters = env.clusters();
        let set_version = |v: &'static str| {
            let clusters = clusters.clone();
            async move {
                clusters
                    .patch(
                        name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(serde_json::json!({"spec": {"version": v}})),
                    )
                    .await
                    .unwrap();
            }
        };

        // A version with no image: the first member fails and the rollout
        // stops there, saying why; the other two keep quorum.
        set_version("3.5.99").await;
        let c = env
            .wait_for(
                name,
                "the rollout stopped at a member that cannot start",
                |c| {
                    condition_message(c, "Reconciling").is_some_and(|m| {
                        m.contains(
                            "is restarting on etcd 3.5.99: its Pod cannot start: ErrImagePull",
                        )
                    })
                },
            )
            .await;
        assert_eq!(condition_reason(&c, "Reconciling"), Some("Upgrading"));
        assert_eq!(condition(&c, "Available"), Some("True"), "{}", describe(&c));
        let on_new: Vec<String> = env
            .members()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|m| m.spec.cluster == name && m.spec.version == "3.5.99")
            .map(|m| m.metadata.name.unwrap())
            .collect();
        assert_eq!(on_new.len(), 1, "one member at a time: {on_new:?}");
        // Back: that member returns to the old version on its own volume.
        set_version(old).await;
        let c = env
            .wait_for(name, "rolled back", |c| {
                condition(c, "Available") == Some("True")
                    && condition(c, "Reconciling") == Some("False")
                    && ready_members(c) == 3
                    && c.status.as_ref().is_some_and(|s| {
                        s.members.iter().all(|m| m.version.as_deref() == Some(old))
                    })
            })
            .await;
        assert_eq!(ids(&c), ids(&before), "the same members");

        // The real upgrade, one minor up.
        let watch = env.watch(name).await;
        set_version(new).await;
        let c = watch
            .until("Reconciling=True/Upgrading while Available", |c| {
                condition_reason(c, "Reconciling") == Some("Upgrading")
                    && condition(c, "Available") == Some("True")
            })
            .await;
        assert_eq!(condition_reason(&c, "Progressing"), Some("Upgrading"));
        let c = env
            .wait_for(name, "every member runs the new version", |c| {
                condition(c, "Available") == Some("True")
                    && condition(c, "Reconciling") == Some("False")
                    && c.status.as_ref().is_some_and(|s| {
                        s.version.as_deref() == Some(new)
                            && s.members.len() == 3
                            && s.members.iter().all(|m| m.version.as_deref() == Some(new))
                    })
            })
            .await;
        assert_eq!(condition(&c, "VersionDrifted"), Some("False"));
        assert_eq!(ids(&c), ids(&before), "member IDs kept");
        assert_eq!(claim_uids().await, claims, "the same volumes");
        let now = env.endpoints(name).await;
        let got = env
            .etcdctl(&now, &["get", "/steward/roll", "--print-value-only"])
            .await;
        assert_eq!(got.trim(), "kept");
        let list = env.etcdctl(&now, &["member", "list"]).await;
        assert_eq!(voters(&list), 3, "{list}");
        let events: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(env.client.clone(), NS);
        let notes: Vec<(String, String)> = events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect();
        assert!(
            notes
                .iter()
                .any(|(r, n)| r == "LeaderMoved" && n.contains("before the upgrade of")),
            "the leader handed over before its restart: {notes:?}"
        );
        // One series per member (the Event names it as the related
        // object): every member was restarted on the new version.
        let restarted: std::collections::BTreeSet<String> = events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("UpgradingMember"))
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter_map(|e| e.related.and_then(|r| r.name))
            .collect();
        let members: std::collections::BTreeSet<String> =
            ids(&c).into_iter().map(|(n, _)| n).collect();
        assert_eq!(restarted, members, "{notes:?}");

        // One minor down on a cluster that runs 3.6 everywhere: refused.
        set_version(old).await;
        let c = env
            .wait_for(name, "Stalled: unsupported version change", |c| {
                condition_reason(c, "Stalled") == Some("UnsupportedVersionChange")
            })
            .await;
        assert_eq!(condition(&c, "Stalled"), Some("True"));
        assert!(
            condition_message(&c, "Stalled").is_some_and(|m| m.contains("downgrade API")),
            "{}",
            describe(&c)
        );
        let members = env.members().list(&Default::default()).await.unwrap();
        assert!(
            members
                .items
                .iter()
                .filter(|m| m.spec.cluster == name)
                .all(|m| m.spec.version == new),
            "nothing moved"
        );
        env.shutdown().await;
    });
}

/// Growing spec.storage.size expands each member's PVC through the real
/// API server (its admission checks the StorageClass) and the testbed's
/// resizer; the member's StorageResized condition follows it to done. A
/// class without allowVolumeExpansion gets the API server's refusal in
/// that condition, and the member keeps running on its volume.
#[test]
fn growing_storage_expands_each_volume_or_names_the_refusal() {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;
    use steward_testbed::kubelet::provisioner::PROVISIONER;
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let fixed: StorageClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "fixed"},
            "provisioner": PROVISIONER,
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowVolumeExpansion": false,
        }))
        .unwrap();
        kube::Api::<StorageClass>::all(env.client.clone())
            .create(&Default::default(), &fixed)
            .await
            .unwrap();
        env.create_cluster("grow", 1).await;
        let on_fixed: etcd_steward::api::EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": "fixed", "namespace": NS},
            "spec": {"replicas": 1, "storage": {"size": "1Gi", "storageClassName": "fixed"}}
        }))
        .unwrap();
        env.clusters()
            .create(&Default::default(), &on_fixed)
            .await
            .unwrap();
        env.wait_available("grow", 1).await;
        env.wait_available("fixed", 1).await;
        let endpoints = env.endpoints("grow").await;
        env.etcdctl(&endpoints, &["put", "/steward/grow", "kept"])
            .await;

        for name in ["grow", "fixed"] {
            env.clusters()
                .patch(
                    name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(
                        serde_json::json!({"spec": {"storage": {"size": "2Gi"}}}),
                    ),
                )
                .await
                .unwrap();
        }
        // Each member's StorageResized condition, once it speaks of 2Gi.
        let resized = |cluster: &'static str, reason: &'static str| {
            let members = env.members();
            async move {
                let start = std::time::Instant::now();
                loop {
                    let list = members.list(&Default::default()).await.unwrap();
                    let found = list.items.into_iter().find(|m| {
                        m.spec.cluster == cluster
                            && m.status
                                .as_ref()
                                .and_then(|s| s.condition("StorageResized"))
                                .is_some_and(|c| c.reason == reason && c.message.contains("2Gi"))
                    });
                    if let Some(m) = found {
                        return m;
                    }
                    assert!(
                        start.elapsed() < EVENTUALLY,
                        "{cluster}: StorageResized never became {reason}"
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                }
            }
        };
        let grown = resized("grow", "AtRequestedSize").await;
        let condition = grown
            .status
            .as_ref()
            .unwrap()
            .condition("StorageResized")
            .unwrap();
        assert_eq!(condition.status, "True");
        let claim_name = format!("data-{}", grown.metadata.name.as_deref().unwrap());
        let claim = kube::Api::<PersistentVolumeClaim>::namespaced(env.client.clone(), NS)
            .get(&claim_name)
            .await
            .unwrap();
        let capacity = claim.status.as_ref().unwrap().capacity.as_ref().unwrap();
        assert_eq!(capacity["storage"].0, "2Gi");
        let volume = claim.spec.as_ref().unwrap().volume_name.clone().unwrap();
        let pv = kube::Api::<PersistentVolume>::all(env.client.clone())
            .get(&volume)
            .await
            .unwrap();
        assert_eq!(
            pv.spec.as_ref().unwrap().capacity.as_ref().unwrap()["storage"].0,
            "2Gi"
        );
        let got = env
            .etcdctl(&endpoints, &["get", "/steward/grow", "--print-value-only"])
            .await;
        assert_eq!(got.trim(), "kept");

        let refused = resized("fixed", "ExpansionRefused").await;
        let message = &refused
            .status
            .as_ref()
            .unwrap()
            .condition("StorageResized")
            .unwrap()
            .message;
        assert!(
            message.contains("growing data-") && message.contains("support resize"),
            "the API server's own reason: {message}"
        );
        let c = env.wait_available("fixed", 1).await;
        assert_eq!(ready_members(&c), 1, "still serving on its volume");
        env.shutdown().await;
    });
}

/// spec.maintenance.defrag with real etcd: a database filled to its quota
/// raises NOSPACE; once its data is deleted and compacted, the operator
/// defragments every member, followers first and the leader last after
/// moving leadership away, reclaims the space, clears the alarm, and
/// writes work again. Each member's status shows its last defrag.
#[test]
fn fragmented_databases_are_defragmented_one_member_at_a_time_and_nospace_is_cleared() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let cluster: etcd_steward::api::EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": "frag", "namespace": NS},
            "spec": {
                "replicas": 3,
                "options": {"quotaBackendBytes": 16 << 20},
                "maintenance": {"defrag": {"fragmentedPercent": 50, "quotaPercent": 100}}
            }
        }))
        .unwrap();
        env.clusters()
            .create(&Default::default(), &cluster)
            .await
            .unwrap();
        env.wait_available("frag", 3).await;
        let endpoints: Vec<String> = env
            .endpoints("frag")
            .await
            .split(',')
            .map(str::to_owned)
            .collect();
        let mut client = etcd_client::Client::connect(&endpoints, None)
            .await
            .unwrap();
        client.put("/keep", "kept", None).await.unwrap();
        let value = vec![b'x'; 256 << 10];
        let mut full = None;
        for i in 0..400 {
            if let Err(e) = client.put(format!("/fill/{i}"), value.clone(), None).await {
                full = Some(e.to_string());
                break;
            }
        }
        let full = full.expect("the quota was reached");
        assert!(full.contains("database space exceeded"), "{full}");
        let deleted = client
            .delete(
                "/fill/",
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await
            .unwrap();
        let revision = deleted.header().unwrap().revision();
        client
            .compact(
                revision,
                Some(etcd_client::CompactionOptions::new().with_physical()),
            )
            .await
            .unwrap();

        let c = env
            .wait_for("frag", "every member defragmented", |c| {
                c.status.as_ref().is_some_and(|s| {
                    s.members.len() == 3
                        && s.members.iter().all(|m| {
                            m.last_defrag
                                .as_ref()
                                .is_some_and(|d| d.reclaimed_bytes > 0)
                        })
                })
            })
            .await;
        let alarms = client
            .alarm(
                etcd_client::AlarmAction::Get,
                etcd_client::AlarmType::None,
                None,
            )
            .await
            .unwrap();
        assert!(
            alarms.alarms().is_empty(),
            "NOSPACE cleared: {} alarm(s) left",
            alarms.alarms().len()
        );
        client
            .put("/after", "written", None)
            .await
            .expect("writes work again");
        let got = client.get("/keep", None).await.unwrap();
        assert_eq!(got.kvs()[0].value(), b"kept");
        let list = env.etcdctl(&endpoints.join(","), &["member", "list"]).await;
        assert_eq!(voters(&list), 3, "{list}");
        assert_eq!(condition(&c, "Available"), Some("True"));

        let events: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(env.client.clone(), NS);
        let all = events.list(&Default::default()).await.unwrap().items;
        let defragged: std::collections::BTreeSet<String> = all
            .iter()
            .filter(|e| e.reason.as_deref() == Some("Defragmented"))
            .filter_map(|e| e.related.as_ref().and_then(|r| r.name.clone()))
            .collect();
        assert_eq!(defragged.len(), 3, "one Defragmented series per member");
        assert!(
            all.iter()
                .any(|e| e.reason.as_deref() == Some("LeaderMoved")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("before the defragmentation of"))),
            "the leader handed over before its turn"
        );
        env.shutdown().await;
    });
}

/// The status says what etcd runs, from etcd's own word, and
/// VersionDrifted says when that differs from spec.version: here a change
/// the operator refuses to roll (one minor down), so the members stay.
#[test]
fn the_status_reports_the_version_etcd_runs_and_its_drift_from_the_spec() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        healthy_three(&env, "drift").await;
        env.clusters()
            .patch(
                "drift",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"spec": {"version": OTHER_VERSION}})),
            )
            .await
            .unwrap();
        let c = env
            .wait_for("drift", "VersionDrifted=True", |c| {
                condition(c, "VersionDrifted") == Some("True")
            })
            .await;
        assert_eq!(
            condition_reason(&c, "VersionDrifted"),
            Some("VersionMismatch")
        );
        assert_eq!(
            condition_message(&c, "VersionDrifted"),
            Some(
                format!("etcd runs {ETCD_VERSION} (3 of 3); spec.version is {OTHER_VERSION}")
                    .as_str()
            )
        );
        assert_eq!(
            c.status.as_ref().unwrap().version.as_deref(),
            Some(ETCD_VERSION)
        );
        // Each member says the same about itself.
        let start = std::time::Instant::now();
        loop {
            let members = env.members().list(&Default::default()).await.unwrap();
            let drifted = members
                .items
                .iter()
                .filter(|m| m.spec.cluster == "drift")
                .filter(|m| {
                    m.status.as_ref().is_some_and(|s| {
                        s.version.as_deref() == Some(ETCD_VERSION)
                            && s.condition("VersionDrifted").map(|c| c.status.as_str())
                                == Some("False")
                    })
                })
                .count();
            // The members' own spec.version stays the old one: they match.
            if drifted == 3 {
                break;
            }
            assert!(
                start.elapsed() < EVENTUALLY,
                "members never reported their version"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        env.shutdown().await;
    });
}

/// The member controller writes the member's status before it touches the
/// Pod or the PVC: a failing create is shown in the status (and an Event),
/// and the next reconcile retries it.
#[test]
fn a_failing_pvc_or_pod_create_still_writes_the_member_status() {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    use steward_testbed::fault_proxy::{FailWith, Verb};
    let _g = serial();
    run(async {
        let mut env = Env::start().await;
        env.kill_operator().await;
        let proxy = env.plane.fault_proxy().await.unwrap();
        env.operator_client = proxy.client().unwrap();
        proxy.faults().fail_next(
            Verb::Create,
            "persistentvolumeclaims",
            2,
            FailWith::Internal,
        );
        proxy
            .faults()
            .fail_next(Verb::Create, "pods", 2, FailWith::Internal);
        // Every status the members ever had, from a watch started first.
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorder = {
            let seen = seen.clone();
            let members = env.members();
            tokio::spawn(async move {
                let mut stream = watcher(members, watcher::Config::default())
                    .applied_objects()
                    .boxed();
                while let Some(Ok(m)) = stream.next().await {
                    if let Some(s) = m.status {
                        seen.lock().unwrap().push(s);
                    }
                }
            })
        };
        env.start_operator();
        env.create_cluster("flaky", 1).await;
        env.wait_available("flaky", 1).await;
        recorder.abort();
        assert_eq!(
            proxy.faults().injected(),
            4,
            "every injected failure was hit"
        );
        let seen = seen.lock().unwrap().clone();
        for what in ["creating PVC", "creating Pod"] {
            let failed = seen
                .iter()
                .find(|s| {
                    s.last_action_error
                        .as_deref()
                        .is_some_and(|e| e.contains(what))
                })
                .unwrap_or_else(|| {
                    panic!("no member status showed the failure of {what}: {seen:#?}")
                });
            let ready = failed.condition("Ready").expect("Ready is written");
            assert_eq!(
                (ready.status.as_str(), ready.reason.as_str()),
                ("False", "PodNotReady")
            );
            assert!(failed.pod_name.is_none());
        }
        // Once the create went through, the error is cleared.
        let members = env.members().list(&Default::default()).await.unwrap();
        let member = members
            .items
            .iter()
            .find(|m| m.spec.cluster == "flaky")
            .unwrap();
        let start = std::time::Instant::now();
        loop {
            let m = env
                .members()
                .get(&member.metadata.name.clone().unwrap())
                .await
                .unwrap();
            if m.status
                .as_ref()
                .is_some_and(|s| s.last_action_error.is_none())
            {
                break;
            }
            assert!(
                start.elapsed() < EVENTUALLY,
                "the member kept its action error"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let events: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(env.client.clone(), NS);
        let list = events.list(&Default::default()).await.unwrap();
        assert!(
            list.items
                .iter()
                .any(|e| e.reason.as_deref() == Some("ActionFailed")
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("EtcdMember")),
            "a Warning Event on the EtcdMember"
        );
        env.shutdown().await;
    });
}

/// A rolling node reboot: each member's etcd is stopped gracefully (SIGTERM,
/// as a node shutting down stops its containers) and comes back on its own
/// volume, one at a time, in a seeded random order (`STEWARD_E2E_SEED`
/// replays one). Member Pods run with `restartPolicy: Never`, so "comes
/// back" is the operator recreating the Succeeded Pod on the same PVC, as
/// docs/api.md ("Crash-loop self-heal") says. The whole status timeline, as
/// a watch sees it, is asserted: the default policy never fails, Available
/// is never Unknown, and it is True only in a status whose reconcile
/// verified a quorum (docs/api.md, "Verified: one definition, the host's").
#[test]
fn every_member_rebooting_in_turn_never_shows_a_policy_failure_or_an_unverified_available() {
    use rand::SeedableRng as _;
    use rand::seq::SliceRandom as _;
    const NAME: &str = "reboots";
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let endpoints = healthy_three(&env, NAME).await;
        let seed = std::env::var("STEWARD_E2E_SEED")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        let mut order = env.member_names(NAME).await;
        order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
        eprintln!("reboot order {order:?} (STEWARD_E2E_SEED={seed} replays it)");
        env.etcdctl(&endpoints, &["put", "/steward/reboots", &seed.to_string()])
            .await;

        let timeline = Timeline::record(&env, NAME).await;
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(env.client.clone(), NS);
        for (i, n) in order.iter().enumerate() {
            let member = env.members().get(n).await.unwrap();
            let member_status = member.status.clone().unwrap_or_default();
            let old_uid = pods.get(n).await.unwrap().metadata.uid.unwrap();
            let claim = claim_of(&env, n).await;
            let leader = env
                .clusters()
                .get(NAME)
                .await
                .unwrap()
                .status
                .and_then(|s| s.members.into_iter().find(|m| m.leader).map(|m| m.name));
            let from = timeline.len();
            let pid = env.sigterm_member(n);
            eprintln!(
                "reboot {}/{}: SIGTERM to {n}'s etcd (pid {pid}); leader {leader:?}",
                i + 1,
                order.len()
            );
            wait_pod(&env, n, "recreated and Ready", |p| {
                p.metadata.uid.as_ref() != Some(&old_uid)
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
            })
            .await;
            env.wait_available(NAME, 3).await;
            env.wait_for(NAME, "Degraded=False again", |c| {
                condition(c, "Degraded") == Some("False")
            })
            .await;
            timeline
                .until(
                    from,
                    &format!("the reboot of {n}: fewer than 3 ready, then Available=True with 3"),
                    |ms| {
                        ms.iter().position(|m| m.ready < 3).is_some_and(|d| {
                            ms[d..]
                                .iter()
                                .any(|m| m.available == "True" && m.ready == 3)
                        })
                    },
                )
                .await;
            // The same member on the same volume: etcd kept its ID, the
            // PVC is the one it had, and the operator counted one Pod that
            // ended (cleanly: not a failure).
            assert_eq!(claim_of(&env, n).await, claim, "{n} runs on its own PVC");
            let start = std::time::Instant::now();
            let after = loop {
                let m = env.members().get(n).await.unwrap();
                let s = m.status.unwrap_or_default();
                if s.pod_restarts > member_status.pod_restarts
                    || start.elapsed() > support::EVENTUALLY
                {
                    break s;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            };
            assert_eq!(
                after.pod_restarts,
                member_status.pod_restarts + 1,
                "{n}: {after:?}"
            );
            assert_eq!(after.consecutive_failures, 0, "{n}: {after:?}");
            assert!(after.member_id.is_some(), "{n}: {after:?}");
            assert_eq!(
                after.member_id, member_status.member_id,
                "{n} kept its etcd ID"
            );
        }

        let moments = timeline.stop().await;
        eprintln!("the status timeline of {NAME} (seed {seed}, order {order:?}):");
        let mut last_key = None;
        for m in &moments {
            if last_key.as_ref() != Some(&m.key()) {
                eprintln!("  {m}");
                last_key = Some(m.key());
            }
        }
        assert_timeline_verified(&moments);

        // The data is still there, through the cluster and in every
        // member's own store (a serializable read answers from it alone).
        for key in ["/steward/e2e", "/steward/reboots"] {
            let want = if key == "/steward/e2e" {
                "kept".to_owned()
            } else {
                seed.to_string()
            };
            let got = env
                .etcdctl(&endpoints, &["get", key, "--print-value-only"])
                .await;
            assert_eq!(got.trim(), want, "{key}");
            for n in &order {
                let got = env
                    .etcdctl(
                        &env.client_url(NAME, n),
                        &["get", key, "--print-value-only", "--consistency=s"],
                    )
                    .await;
                assert_eq!(got.trim(), want, "{key} in {n}'s own store");
            }
        }
        let list = env.etcdctl(&endpoints, &["member", "list"]).await;
        assert_eq!(voters(&list), 3, "etcdctl member list:\n{list}");
        env.shutdown().await;
    });
}

/// The PVC a member's Pod mounts: its name and UID.
async fn claim_of(env: &Env, pod: &str) -> (String, String) {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
    let p = kube::Api::<Pod>::namespaced(env.client.clone(), NS)
        .get(pod)
        .await
        .unwrap();
    let name = p
        .spec
        .unwrap()
        .volumes
        .unwrap_or_default()
        .into_iter()
        .find_map(|v| v.persistent_volume_claim.map(|c| c.claim_name))
        .unwrap_or_else(|| panic!("pod {pod} mounts no PVC"));
    let uid = kube::Api::<PersistentVolumeClaim>::namespaced(env.client.clone(), NS)
        .get(&name)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    (name, uid)
}

/// One status of a cluster, as a watch delivered it.
#[derive(Debug, Clone)]
struct Moment {
    resource_version: String,
    available: String,
    reason: String,
    message: String,
    /// The Available condition's lastTransitionTime.
    since: Option<jiff::Timestamp>,
    last_verified: Option<jiff::Timestamp>,
    ready: i32,
    unverified_streak: u32,
    degraded: String,
}

impl Moment {
    fn of(c: &etcd_steward::api::EtcdCluster) -> Moment {
        let status = c.status.clone().unwrap_or_default();
        let available = status.conditions.iter().find(|x| x.type_ == "Available");
        Moment {
            resource_version: c.metadata.resource_version.clone().unwrap_or_default(),
            available: available.map(|x| x.status.clone()).unwrap_or_default(),
            reason: available.map(|x| x.reason.clone()).unwrap_or_default(),
            message: available.map(|x| x.message.clone()).unwrap_or_default(),
            since: available.map(|x| x.last_transition_time.0),
            last_verified: status.last_verified_time.map(|t| t.0),
            ready: status.ready_members,
            unverified_streak: status.unverified_streak,
            degraded: condition(c, "Degraded").unwrap_or_default().to_owned(),
        }
    }

    /// What the printed timeline tells apart.
    fn key(&self) -> (String, String, Option<jiff::Timestamp>, i32) {
        (
            self.available.clone(),
            self.reason.clone(),
            self.last_verified,
            self.ready,
        )
    }
}

impl std::fmt::Display for Moment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rv {}: Available={}/{} lastVerifiedTime={} readyMembers={} (unverifiedStreak {}, Degraded={}): {}",
            self.resource_version,
            self.available,
            self.reason,
            self.last_verified.map_or("-".to_owned(), |t| t.to_string()),
            self.ready,
            self.unverified_streak,
            self.degraded,
            self.message
        )
    }
}

/// Every status of one cluster from now on, recorded by a watch in a
/// background task.
struct Timeline {
    moments: std::sync::Arc<std::sync::Mutex<Vec<Moment>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Timeline {
    /// Starts the watch; returns once it delivered the current status.
    async fn record(env: &Env, name: &str) -> Timeline {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let stream = watcher(
            env.clusters(),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
        .default_backoff()
        .applied_objects();
        let moments = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = moments.clone();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                if let Ok(c) = item {
                    sink.lock().unwrap().push(Moment::of(&c));
                }
            }
        });
        let timeline = Timeline { moments, task };
        timeline
            .until(0, "the watch delivers the current status", |ms| {
                !ms.is_empty()
            })
            .await;
        timeline
    }

    fn len(&self) -> usize {
        self.moments.lock().unwrap().len()
    }

    /// Waits until the moments recorded from index `from` on satisfy `pred`.
    async fn until(&self, from: usize, what: &str, pred: impl Fn(&[Moment]) -> bool) {
        let start = std::time::Instant::now();
        loop {
            {
                let ms = self.moments.lock().unwrap();
                if pred(&ms[from.min(ms.len())..]) {
                    return;
                }
                if start.elapsed() > EVENTUALLY {
                    let seen: Vec<String> = ms[from.min(ms.len())..]
                        .iter()
                        .map(|m| m.to_string())
                        .collect();
                    panic!("the watch never showed {what}; it showed:\n{seen:#?}");
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// Stops the watch once it shows the cluster Available with 3 ready (the
    /// state the test last read), and returns everything it recorded.
    async fn stop(self) -> Vec<Moment> {
        self.until(0, "the final Available=True with 3 ready", |ms| {
            ms.last()
                .is_some_and(|m| m.available == "True" && m.ready == 3)
        })
        .await;
        self.task.abort();
        let _ = self.task.await;
        std::mem::take(&mut *self.moments.lock().unwrap())
    }
}

/// The rules of docs/api.md ("Verified: one definition, the host's") over a
/// whole timeline of a default-policy cluster whose members stay probed.
fn assert_timeline_verified(moments: &[Moment]) {
    let show = |i: usize| {
        moments[i.saturating_sub(3)..(i + 2).min(moments.len())]
            .iter()
            .map(|m| format!("\n  {m}"))
            .collect::<String>()
    };
    let mut since_false = false;
    for (i, m) in moments.iter().enumerate() {
        assert_ne!(
            m.reason,
            "PolicyFailed",
            "the host rejected the default policy's verdict:{}",
            show(i)
        );
        // Every reconcile probes these members, so nothing is ever
        // unknown; in particular not on the way from False back to True.
        assert_ne!(
            m.available,
            "Unknown",
            "Available=Unknown{}:{}",
            if since_false {
                " between a False and a True"
            } else {
                ""
            },
            show(i)
        );
        match m.available.as_str() {
            "False" => since_false = true,
            "True" => since_false = false,
            _ => {}
        }
        let prev = i.checked_sub(1).map(|p| &moments[p]);
        // lastVerifiedTime never goes back nor disappears.
        if let Some(p) = prev {
            assert!(
                p.last_verified.is_none() || m.last_verified >= p.last_verified,
                "lastVerifiedTime went back:{}",
                show(i)
            );
        }
        if m.available != "True" {
            continue;
        }
        // True only from a reconcile in which the host verified a quorum:
        // it reset the streak and its verdict is not one kept unprobed.
        assert!(
            m.last_verified.is_some(),
            "True, never verified:{}",
            show(i)
        );
        assert_eq!(
            m.unverified_streak,
            0,
            "Available=True written by a reconcile that verified nothing:{}",
            show(i)
        );
        assert!(
            !m.message.contains("not verified now") && !m.message.contains("not probed"),
            "Available=True kept without probing:{}",
            show(i)
        );
        // Back to True: verified again, at or after the moment it stopped
        // being True (the API keeps whole seconds, hence not strictly after).
        if let Some(p) = prev.filter(|p| p.available != "True") {
            assert!(
                m.last_verified >= p.since && m.last_verified >= p.last_verified,
                "Available=True again without a fresh verification:{}",
                show(i)
            );
        }
    }
}

/// Runs the real etcdctl, as `user` (`name:password`) when given; returns
/// whether it succeeded, and its stdout or stderr.
async fn etcdctl_as(
    env: &Env,
    endpoints: &str,
    user: Option<&str>,
    args: &[&str],
) -> (bool, String) {
    let bin = env.plane.kubelet().etcd().etcdctl.clone();
    let mut cmd = tokio::process::Command::new(bin);
    cmd.arg(format!("--endpoints={endpoints}"))
        .arg("--command-timeout=5s");
    if let Some(user) = user {
        cmd.arg(format!("--user={user}"));
    }
    let out = cmd.args(args).output().await.expect("running etcdctl");
    let text = if out.status.success() {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    (out.status.success(), text)
}

/// Takes an EtcdSnapshot of `cluster` to a new claim `<cluster>-backups`
/// and waits until it is Complete; a Failed one fails the test.
async fn snapshot_to_pvc(env: &Env, cluster: &str) {
    let claim: k8s_openapi::api::core::v1::PersistentVolumeClaim =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{cluster}-backups")},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .unwrap();
    kube::Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        env.client.clone(),
        NS,
    )
    .create(&Default::default(), &claim)
    .await
    .unwrap();
    let name = format!("{cluster}-snap");
    let snap: etcd_steward::api::EtcdSnapshot = serde_json::from_value(serde_json::json!({
        "apiVersion": "etcd.steward.dev/v1alpha1",
        "kind": "EtcdSnapshot",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"clusterRef": {"name": cluster},
                 "destination": {"pvc": {"claimName": format!("{cluster}-backups"), "subPath": cluster}}},
    }))
    .unwrap();
    let snapshots: kube::Api<etcd_steward::api::EtcdSnapshot> =
        kube::Api::namespaced(env.client.clone(), NS);
    snapshots.create(&Default::default(), &snap).await.unwrap();
    let start = std::time::Instant::now();
    loop {
        let s = snapshots.get(&name).await.unwrap();
        let phase = s.status.as_ref().and_then(|s| s.phase);
        if phase.is_some_and(|p| format!("{p:?}") == "Complete") {
            return;
        }
        assert!(
            phase.is_none_or(|p| format!("{p:?}") != "Failed") && start.elapsed() < EVENTUALLY,
            "the snapshot of {cluster} to a PVC: {:#?}",
            s.status
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// spec.auth end to end, on real etcd: a failed AuthEnable still writes
/// the status and is retried; auth goes on with the Secret's password; a
/// password changed behind the operator's back is AuthCredentialsRejected
/// (no membership change, data kept) until the Secret has it; a password
/// changed in the Secret is set in etcd; enabled: false turns auth off.
/// No password appears in the status or an Event.
#[test]
fn etcd_auth_is_turned_on_from_a_secret_rejected_passwords_are_named_and_changes_are_applied() {
    use etcd_steward::etcd::{Fault, Rpc};
    use steward_policy_sdk::ProbeErrorKind;
    const FIRST: &str = "first-Pa55word-7q";
    const BEHIND: &str = "behind-the-back-Pa55-3k";
    const ROTATED: &str = "rotated-Pa55word-9z";
    let _g = serial();
    run(async {
        let env = Env::start().await;
        env.set_root_secret("auth-root", FIRST).await;
        env.faults
            .inject(Fault::fail(Rpc::AuthEnable, ProbeErrorKind::Other));
        let cluster: etcd_steward::api::EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": "auth", "namespace": NS},
            "spec": {"replicas": 3, "storage": {"size": "1Gi"},
                     "auth": {"enabled": true, "rootCredentialsSecretRef": {"name": "auth-root"}}}
        }))
        .unwrap();
        env.clusters()
            .create(&Default::default(), &cluster)
            .await
            .unwrap();

        // AuthEnable fails: the status is still written, verified, with the
        // failure in lastActionError, and etcd still takes requests without
        // a user.
        env.wait_for("auth", "AuthEnable failing shows in the status", |c| {
            condition(c, "Available") == Some("True")
                && ready_members(c) == 3
                && c.status.as_ref().is_some_and(|s| {
                    s.auth_enabled == Some(false)
                        && s.last_action_error
                            .as_deref()
                            .is_some_and(|e| e.contains("AuthEnable"))
                })
        })
        .await;
        let endpoints = env.endpoints("auth").await;
        let (ok, out) = etcdctl_as(&env, &endpoints, None, &["put", "/auth/open", "1"]).await;
        assert!(ok, "auth is still off: {out}");

        env.faults.clear(Rpc::AuthEnable);
        let c = env
            .wait_for("auth", "authEnabled", |c| {
                condition(c, "Available") == Some("True")
                    && c.status
                        .as_ref()
                        .is_some_and(|s| s.auth_enabled == Some(true))
            })
            .await;
        assert_eq!(ready_members(&c), 3);
        let root = format!("root:{FIRST}");
        let (ok, out) = etcdctl_as(&env, &endpoints, None, &["put", "/auth/k", "v"]).await;
        assert!(!ok, "without a user etcd refuses: {out}");
        let (ok, out) = etcdctl_as(&env, &endpoints, Some(&root), &["put", "/auth/k", "v"]).await;
        assert!(ok, "root with the Secret's password: {out}");
        let members_before = env.member_names("auth").await;

        // A snapshot to a PVC: its save Pod authenticates with the
        // Secret's password, which it gets by reference.
        snapshot_to_pvc(&env, "auth").await;

        // Someone changes root's password in etcd: every RPC is refused, and
        // the status says so rather than that the cluster is unreachable.
        let mut child = tokio::process::Command::new(env.plane.kubelet().etcd().etcdctl.clone())
            .arg(format!("--endpoints={endpoints}"))
            .arg(format!("--user={root}"))
            .args(["user", "passwd", "root", "--interactive=false"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use tokio::io::AsyncWriteExt;
            let mut stdin = child.stdin.take().unwrap();
            stdin
                .write_all(format!("{BEHIND}\n").as_bytes())
                .await
                .unwrap();
        }
        let out = child.wait_with_output().await.unwrap();
        assert!(out.status.success(), "etcdctl user passwd");
        let c = env
            .wait_for("auth", "AuthCredentialsRejected", |c| {
                condition_reason(c, "Available") == Some("AuthCredentialsRejected")
            })
            .await;
        assert_eq!(condition(&c, "Available"), Some("False"));
        assert_eq!(ready_members(&c), 0);
        assert!(
            condition_message(&c, "Available")
                .is_some_and(|m| m.contains("rootCredentialsSecretRef")),
            "{}",
            conditions_line(&c)
        );
        assert_eq!(
            env.member_names("auth").await,
            members_before,
            "no membership change"
        );
        let behind = format!("root:{BEHIND}");
        let (ok, out) = etcdctl_as(
            &env,
            &endpoints,
            Some(&behind),
            &["get", "/auth/k", "--print-value-only"],
        )
        .await;
        assert!(ok && out.trim() == "v", "the data is kept: {out}");

        // The Secret gets the password etcd has: verified again.
        env.set_root_secret("auth-root", BEHIND).await;
        env.wait_for("auth", "Available with the mended Secret", |c| {
            condition(c, "Available") == Some("True") && ready_members(c) == 3
        })
        .await;

        // A new password in the Secret is set in etcd.
        env.set_root_secret("auth-root", ROTATED).await;
        let rotated = format!("root:{ROTATED}");
        let start = std::time::Instant::now();
        loop {
            let (ok, _) = etcdctl_as(&env, &endpoints, Some(&rotated), &["get", "/auth/k"]).await;
            if ok {
                break;
            }
            assert!(
                start.elapsed() < EVENTUALLY,
                "etcd never took the rotated password"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let (ok, _) = etcdctl_as(&env, &endpoints, Some(&behind), &["get", "/auth/k"]).await;
        assert!(!ok, "the old password is gone");
        env.wait_for("auth", "Available after the rotation", |c| {
            condition(c, "Available") == Some("True") && ready_members(c) == 3
        })
        .await;

        // enabled: false turns authentication off.
        env.clusters()
            .patch(
                "auth",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"spec": {"auth": {"enabled": false}}})),
            )
            .await
            .unwrap();
        env.wait_for("auth", "authEnabled false", |c| {
            condition(c, "Available") == Some("True")
                && c.status
                    .as_ref()
                    .is_some_and(|s| s.auth_enabled == Some(false))
        })
        .await;
        let (ok, out) = etcdctl_as(
            &env,
            &endpoints,
            None,
            &["get", "/auth/k", "--print-value-only"],
        )
        .await;
        assert!(ok && out.trim() == "v", "open again, data kept: {out}");

        // No password in what the operator wrote.
        let c = env.clusters().get("auth").await.unwrap();
        let events: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(env.client.clone(), NS);
        let written = format!(
            "{}\n{}",
            serde_json::to_string(&c).unwrap(),
            serde_json::to_string(&events.list(&Default::default()).await.unwrap()).unwrap()
        );
        for pw in [FIRST, BEHIND, ROTATED] {
            assert!(
                !written.contains(pw),
                "a password reached the status or an Event"
            );
        }
        assert!(written.contains("RootPasswordChanged") && written.contains("AuthEnabled"));
        env.shutdown().await;
    });
}

/// A cluster whose certificates come from a real cert-manager
/// (`spec.tls.*.certManager`). Before cert-manager is installed the seed is
/// refused with `CertManagerNotInstalled`; with cert-manager but no issuer
/// yet, the operator's Certificates are not Ready and the status waits
/// with `CertificateNotReady`, each with a Warning Event and no member.
/// Once the CA issuer exists, the cluster reaches Available on what
/// cert-manager issued: members serve it, an application writes through
/// the client Service with the issued operator certificate. A certificate
/// cert-manager issues again is served in place, with no restart.
#[test]
fn cert_manager_issues_the_certificates_and_its_absence_or_a_pending_one_is_named() {
    use etcd_steward::api::EtcdCluster;
    use k8s_openapi::api::core::v1::Secret;
    use kube::ResourceExt;
    use kube::api::{
        Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    };
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let cluster: EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": "cm", "namespace": NS},
            "spec": {"replicas": 3, "storage": {"size": "1Gi"},
                     "tls": {"client": {"certManager": {"serverIssuerRef": {"name": "cm-ca"},
                                                        "operatorClientIssuerRef": {"name": "cm-ca"}}},
                             "peer": {"certManager": {"issuerRef": {"name": "cm-ca"}}}}}
        }))
        .unwrap();
        env.clusters()
            .create(&PostParams::default(), &cluster)
            .await
            .unwrap();

        // No cert-manager: refused, and the status says what to install.
        let c = env
            .wait_for("cm", "CertManagerNotInstalled", |c| {
                condition_reason(c, "Stalled") == Some("CertManagerNotInstalled")
                    && condition(c, "Stalled") == Some("True")
                    && condition_message(c, "Available")
                        .is_some_and(|m| m.contains("cert-manager is not installed"))
            })
            .await;
        assert_eq!(
            condition(&c, "Available"),
            Some("Unknown"),
            "{}",
            conditions_line(&c)
        );
        assert_eq!(
            (
                condition(&c, "Progressing"),
                condition_reason(&c, "Progressing")
            ),
            (Some("False"), Some("CertManagerNotInstalled"))
        );
        env.wait_warning(
            "CertManagerNotInstalled",
            "serves no cert-manager.io/v1 Certificate",
        )
        .await;
        assert!(
            env.member_names("cm").await.is_empty(),
            "no member without certificates"
        );

        // cert-manager, but the issuer the spec names does not exist yet.
        let cert_manager = env.start_cert_manager().await;
        let c = env
            .wait_for("cm", "CertificateNotReady", |c| {
                condition_reason(c, "Progressing") == Some("CertificateNotReady")
                    && condition_message(c, "Progressing").is_some_and(|m| {
                        m.contains("Certificate cm-server (Secret cm-server-tls) is not Ready")
                    })
            })
            .await;
        assert_eq!(
            condition(&c, "Stalled"),
            Some("False"),
            "{}",
            conditions_line(&c)
        );
        env.wait_warning(
            "CertificateNotReady",
            "Certificate cm-server (Secret cm-server-tls) is not Ready",
        )
        .await;
        assert!(
            env.member_names("cm").await.is_empty(),
            "no member without certificates"
        );

        // The CA issuer, bootstrapped as platform teams do: a self-signed
        // issuer signs a CA certificate, whose Secret the CA issuer uses.
        let kind = |k: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("cert-manager.io", "v1", k),
                plural,
            )
        };
        for (ar, object) in [
            (
                kind("Issuer", "issuers"),
                serde_json::json!({
                "apiVersion": "cert-manager.io/v1", "kind": "Issuer",
                "metadata": {"name": "cm-selfsigned"}, "spec": {"selfSigned": {}}}),
            ),
            (
                kind("Certificate", "certificates"),
                serde_json::json!({
                "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                "metadata": {"name": "cm-ca-root"},
                "spec": {"isCA": true, "commonName": "cm-ca", "secretName": "cm-ca-root",
                         "privateKey": {"algorithm": "ECDSA", "size": 256},
                         "issuerRef": {"name": "cm-selfsigned", "kind": "Issuer", "group": "cert-manager.io"}}}),
            ),
            (
                kind("Issuer", "issuers"),
                serde_json::json!({
                "apiVersion": "cert-manager.io/v1", "kind": "Issuer",
                "metadata": {"name": "cm-ca"}, "spec": {"ca": {"secretName": "cm-ca-root"}}}),
            ),
        ] {
            let object: DynamicObject = serde_json::from_value(object).unwrap();
            Api::<DynamicObject>::namespaced_with(env.client.clone(), NS, &ar)
                .patch(
                    &object.name_any(),
                    &PatchParams::apply("e2e").force(),
                    &Patch::Apply(&object),
                )
                .await
                .expect("applying a cert-manager object");
        }
        let c = env.wait_available("cm", 3).await;
        env.assert_read_healthy(&c);
        // Applied once each: what cert-manager stores is what the operator
        // asked for, so no reconcile finds them outdated.
        let certificates = Api::<DynamicObject>::namespaced_with(
            env.client.clone(),
            NS,
            &kind("Certificate", "certificates"),
        )
        .list(&Default::default())
        .await
        .unwrap();
        for c in certificates
            .items
            .iter()
            .filter(|c| c.name_any() != "cm-ca-root")
        {
            assert_eq!(
                c.metadata.generation,
                Some(1),
                "{} was applied again",
                c.name_any()
            );
            let owner = &c.metadata.owner_references.as_ref().expect("owned")[0];
            assert_eq!(
                (owner.kind.as_str(), owner.name.as_str()),
                ("EtcdCluster", "cm")
            );
        }

        // The members serve what cert-manager issued.
        let secrets = Api::<Secret>::namespaced(env.client.clone(), NS);
        let issued = |secret: &Secret, key: &str| -> Vec<u8> {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .expect(key)
                .0
                .clone()
        };
        let leaf = |pem: &[u8]| -> Vec<u8> {
            x509_parser::pem::parse_x509_pem(pem)
                .expect("a PEM certificate")
                .1
                .contents
        };
        let server = secrets.get("cm-server-tls").await.unwrap();
        wait_served(
            &env,
            "cm",
            2379,
            &leaf(&issued(&server, "tls.crt")),
            "cert-manager's serving certificate",
        )
        .await;
        let peer = secrets.get("cm-peer-tls").await.unwrap();
        wait_served(
            &env,
            "cm",
            2380,
            &leaf(&issued(&peer, "tls.crt")),
            "cert-manager's peer certificate",
        )
        .await;

        // An application writes through the client Service, trusting the
        // issuer's CA and presenting a certificate it issued.
        let operator = secrets.get("cm-operator-client-tls").await.unwrap();
        let files = env.dir().join("cm-client");
        std::fs::create_dir_all(&files).unwrap();
        for key in ["ca.crt", "tls.crt", "tls.key"] {
            let from = if key == "ca.crt" { &server } else { &operator };
            std::fs::write(files.join(key), issued(from, key)).unwrap();
        }
        let flags = [
            format!("--cacert={}", files.join("ca.crt").display()),
            format!("--cert={}", files.join("tls.crt").display()),
            format!("--key={}", files.join("tls.key").display()),
        ];
        let service = format!("https://cm-client.{NS}.svc:2379");
        let put: Vec<&str> = flags
            .iter()
            .map(String::as_str)
            .chain(["put", "/steward/cm", "issued"])
            .collect();
        env.etcdctl(&service, &put).await;
        let get: Vec<&str> = flags
            .iter()
            .map(String::as_str)
            .chain(["get", "/steward/cm", "--print-value-only"])
            .collect();
        assert_eq!(env.etcdctl(&service, &get).await.trim(), "issued");

        // cert-manager issues the serving certificate again (its Secret
        // lost): every member serves the new one, none restarts, and the
        // cluster stays Available.
        let lives = pod_lives(&env, "cm").await;
        let before = leaf(&issued(&server, "tls.crt"));
        secrets
            .delete("cm-server-tls", &Default::default())
            .await
            .unwrap();
        let start = std::time::Instant::now();
        let renewed = loop {
            if let Some(s) = secrets.get_opt("cm-server-tls").await.unwrap()
                && s.data.as_ref().is_some_and(|d| d.contains_key("tls.crt"))
                && leaf(&issued(&s, "tls.crt")) != before
            {
                break leaf(&issued(&s, "tls.crt"));
            }
            assert!(
                start.elapsed() < EVENTUALLY,
                "cert-manager did not issue the certificate again"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        };
        wait_served(
            &env,
            "cm",
            2379,
            &renewed,
            "the certificate cert-manager issued again",
        )
        .await;
        let c = env.wait_available("cm", 3).await;
        env.assert_read_healthy(&c);
        assert_eq!(pod_lives(&env, "cm").await, lives, "no member restarted");
        assert_eq!(
            env.etcdctl(&service, &get).await.trim(),
            "issued",
            "the data stays"
        );

        cert_manager.stop();
        env.shutdown().await;
    });
}

/// A cluster with client and peer TLS from Secrets reaches Available: the
/// operator verifies it over https with its client certificate, members
/// talk to each other over https, and an application writes a key over
/// https through the client Service. Without a client certificate etcd
/// refuses.
#[test]
fn a_tls_cluster_serves_https_through_its_client_service_and_requires_client_certificates() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let TlsCluster { ca, cert, key, .. } = env.create_tls_cluster("tls", 3).await;
        let c = env.wait_available("tls", 3).await;
        env.assert_read_healthy(&c);

        let endpoints = env
            .member_names("tls")
            .await
            .iter()
            .map(|m| format!("https://{m}.tls.{NS}.svc:2379"))
            .collect::<Vec<_>>()
            .join(",");
        let tls_flags = [
            format!("--cacert={ca}"),
            format!("--cert={cert}"),
            format!("--key={key}"),
        ];
        let with_tls = |args: &[&str]| -> Vec<String> {
            tls_flags
                .iter()
                .cloned()
                .chain(args.iter().map(|a| a.to_string()))
                .collect()
        };
        let list = with_tls(&["member", "list"]);
        let list: Vec<&str> = list.iter().map(String::as_str).collect();
        let members = env.etcdctl(&endpoints, &list).await;
        assert_eq!(voters(&members), 3, "etcdctl member list:\n{members}");
        assert_eq!(
            members.matches("https://").count(),
            6,
            "every peer and client URL is https:\n{members}"
        );

        let service = format!("https://tls-client.{NS}.svc:2379");
        let put = with_tls(&["put", "/steward/tls", "over https"]);
        let put: Vec<&str> = put.iter().map(String::as_str).collect();
        env.etcdctl(&service, &put).await;
        let get = with_tls(&["get", "/steward/tls", "--print-value-only"]);
        let get: Vec<&str> = get.iter().map(String::as_str).collect();
        assert_eq!(env.etcdctl(&endpoints, &get).await.trim(), "over https");

        // No client certificate: refused.
        let ca_only = format!("--cacert={ca}");
        let (ok, out) = etcdctl_as(&env, &service, None, &[&ca_only, "get", "/steward/tls"]).await;
        assert!(!ok, "etcd requires a client certificate: {out}");
        let (ok, out) = etcdctl_as(
            &env,
            &service.replace("https://", "http://"),
            None,
            &["get", "/steward/tls"],
        )
        .await;
        assert!(!ok, "no plaintext on the client port: {out}");

        // Scaling 3 -> 5 -> 3: learners join over https peer URLs.
        env.scale("tls", 5).await;
        env.wait_available("tls", 5).await;
        env.scale("tls", 3).await;
        env.wait_for("tls", "3 members again", |c| {
            condition(c, "Available") == Some("True")
                && ready_members(c) == 3
                && c.status.as_ref().is_some_and(|s| s.members.len() == 3)
        })
        .await;
        let endpoints = env
            .member_names("tls")
            .await
            .iter()
            .map(|m| format!("https://{m}.tls.{NS}.svc:2379"))
            .collect::<Vec<_>>()
            .join(",");
        let members = env.etcdctl(&endpoints, &list).await;
        assert_eq!(voters(&members), 3, "etcdctl member list:\n{members}");
        assert_eq!(env.etcdctl(&endpoints, &get).await.trim(), "over https");

        // The seed incident with TLS: every member stops gracefully, and
        // Available turns False; back, the data is there.
        env.plane.kubelet().stop_node().await;
        let c = env
            .wait_for("tls", "Available=False after the graceful stop", |c| {
                condition(c, "Available") == Some("False")
            })
            .await;
        assert_eq!(ready_members(&c), 0);
        env.plane.kubelet().start_node();
        env.wait_available("tls", 3).await;
        assert_eq!(env.etcdctl(&endpoints, &get).await.trim(), "over https");

        // A snapshot to a PVC: its save Pod gets the serving Secret's CA and
        // the operator's certificate by reference, and streams over https.
        snapshot_to_pvc(&env, "tls").await;

        // The operator's certificate from another CA: every member refuses
        // it. The status names TLS, and nothing is done to the membership;
        // the right Secret restores it (the operator reconnects).

        let members_before = env.member_names("tls").await;
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(env.client.clone(), NS);
        let good = secrets.get("tls-operator").await.unwrap();
        let other = steward_testbed::pki::Pki::create(&env.dir().join("other-pki")).unwrap();
        let stranger = other.client("stranger", "etcd-steward", &[]).unwrap();
        let replace = |cert: &str, key: &str, ca: &str| serde_json::json!({"stringData": {"tls.crt": cert, "tls.key": key, "ca.crt": ca}});
        secrets
            .patch(
                "tls-operator",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(replace(
                    &stranger.cert_pem,
                    &stranger.key_pem,
                    other.ca_pem(),
                )),
            )
            .await
            .unwrap();
        let c = env
            .wait_for("tls", "TLSHandshakeFailed", |c| {
                condition_reason(c, "Available") == Some("TLSHandshakeFailed")
            })
            .await;
        assert_eq!(condition(&c, "Available"), Some("False"));
        assert_eq!(ready_members(&c), 0);
        assert_eq!(
            env.member_names("tls").await,
            members_before,
            "no membership change"
        );
        assert_eq!(
            env.etcdctl(&endpoints, &get).await.trim(),
            "over https",
            "the data is kept"
        );
        let good_data = good.data.clone().unwrap();
        let text = |k: &str| String::from_utf8(good_data[k].0.clone()).unwrap();
        secrets
            .patch(
                "tls-operator",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(replace(
                    &text("tls.crt"),
                    &text("tls.key"),
                    &text("ca.crt"),
                )),
            )
            .await
            .unwrap();
        env.wait_available("tls", 3).await;

        // The operator's Secret gone: the configuration read before still
        // reaches the members, so the cluster stays verified, and a Warning
        // Event names the Secret.
        secrets
            .delete("tls-operator", &Default::default())
            .await
            .unwrap();
        let events: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(env.client.clone(), NS);
        let start = std::time::Instant::now();
        while !events.list(&Default::default()).await.unwrap().items.iter().any(|e| {
            e.reason.as_deref() == Some("TLSSecretInvalid")
                && e.note.as_deref().is_some_and(|n| {
                    n.contains("Secret default/tls-operator (spec.tls.client.operatorClientSecretRef) does not exist")
                })
        }) {
            assert!(start.elapsed() < EVENTUALLY, "no TLSSecretInvalid Event");
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let c = env.clusters().get("tls").await.unwrap();
        assert_eq!(
            condition(&c, "Available"),
            Some("True"),
            "{}",
            conditions_line(&c)
        );
        assert_eq!(
            env.member_names("tls").await,
            members_before,
            "no membership change"
        );

        // A cluster whose operator Secret never existed is not probed, and
        // its status says why.
        let lone: etcd_steward::api::EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": "lone", "namespace": NS},
            "spec": {"replicas": 1, "storage": {"size": "1Gi"},
                     "tls": {"client": {"serverSecretRef": {"name": "tls-server"},
                                        "operatorClientSecretRef": {"name": "nope"}}}}
        }))
        .unwrap();
        env.clusters()
            .create(&Default::default(), &lone)
            .await
            .unwrap();
        env.wait_for("lone", "the missing Secret named", |c| {
            condition_message(c, "Available").is_some_and(|m| {
                m.contains("no TLS configuration for etcd: Secret default/nope (spec.tls.client.operatorClientSecretRef) does not exist")
            })
        })
        .await;
        // Then a Secret without the key: named too.
        let keyless: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "nope", "namespace": NS},
            "type": "Opaque",
            "stringData": {"tls.crt": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"},
        }))
        .unwrap();
        secrets.create(&Default::default(), &keyless).await.unwrap();
        env.wait_for("lone", "the Secret without tls.key named", |c| {
            condition_message(c, "Available").is_some_and(|m| {
                m.contains("Secret default/nope (spec.tls.client.operatorClientSecretRef) has no non-empty tls.key")
            })
        })
        .await;
        env.shutdown().await;
    });
}

/// Certificates are renewed in place: new serving, peer and operator
/// certificates from the same CA go into the Secrets while an application
/// writes through the client Service, every member serves them without a
/// restart, and no write fails. Then the serving certificate is broken in
/// each way a person can break it (expired, from another CA, for other
/// names): each turns Available False with a message that says which, and
/// a Warning Event, while the members and the data stay. Last, a working
/// certificate close to its expiry makes the cluster Degraded.
#[test]
fn tls_certificates_are_renewed_in_place_under_writes_and_broken_ones_are_named() {
    let _g = serial();
    run(async {
        let env = Env::start().await;
        let tls = env.create_tls_cluster("rot", 3).await;
        env.wait_available("rot", 3).await;
        wait_served(
            &env,
            "rot",
            2379,
            &tls.certs.server.cert_der,
            "the first serving certificate",
        )
        .await;
        wait_served(
            &env,
            "rot",
            2380,
            &tls.certs.peer.cert_der,
            "the first peer certificate",
        )
        .await;
        let lives = pod_lives(&env, "rot").await;
        let members = env.member_names("rot").await;

        // The application: one etcdctl per write, so every write makes a
        // new handshake through the Service, with whichever member it gets.
        let service = format!("https://rot-client.{NS}.svc:2379");
        let flags = [
            format!("--cacert={}", tls.ca),
            format!("--cert={}", tls.cert),
            format!("--key={}", tls.key),
        ];
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (stop, service, flags) = (stop.clone(), service.clone(), flags.clone());
            let bin = env.plane.kubelet().etcd().etcdctl.clone();
            tokio::spawn(async move {
                let mut log: Vec<(u32, std::time::Instant, Result<(), String>)> = Vec::new();
                let mut i = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    i += 1;
                    let out = tokio::process::Command::new(&bin)
                        .arg(format!("--endpoints={service}"))
                        .args(["--dial-timeout=2s", "--command-timeout=3s"])
                        .args(&flags)
                        .args(["put", "/steward/rotation", &i.to_string()])
                        .output()
                        .await
                        .expect("running etcdctl");
                    let result = if out.status.success() {
                        Ok(())
                    } else {
                        Err(String::from_utf8_lossy(&out.stderr).into_owned())
                    };
                    log.push((i, std::time::Instant::now(), result));
                }
                log
            })
        };
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;

        let renewed = EtcdCerts::issue(&tls.pki, "rot", NS, "2").unwrap();
        let ca = tls.pki.ca_pem();
        let renewed_at = jiff::Timestamp::now();
        env.renew_tls("rot", &tls, &renewed).await;
        // Verified again after the renewal, with the renewed operator
        // certificate (the operator reconnects when its Secret changes).
        env.wait_for("rot", "verified after the renewal", |c| {
            condition(c, "Available") == Some("True")
                && c.status
                    .as_ref()
                    .and_then(|s| s.last_verified_time.as_ref())
                    .is_some_and(|t| t.0 > renewed_at)
        })
        .await;
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let log = writer.await.unwrap();

        let failed: Vec<_> = log.iter().filter(|(_, _, r)| r.is_err()).collect();
        assert!(
            failed.is_empty(),
            "writes failed during the renewal: {failed:?}"
        );
        let longest = log
            .windows(2)
            .map(|w| w[1].1 - w[0].1)
            .max()
            .unwrap_or_default();
        eprintln!(
            "rotation: {} writes through the client Service, none failed; longest gap between successful writes {} ms",
            log.len(),
            longest.as_millis()
        );
        assert_eq!(pod_lives(&env, "rot").await, lives, "no member restarted");
        assert_eq!(env.member_names("rot").await, members);
        let endpoints = members
            .iter()
            .map(|m| format!("https://{m}.rot.{NS}.svc:2379"))
            .collect::<Vec<_>>()
            .join(",");
        let get: Vec<&str> = flags
            .iter()
            .map(String::as_str)
            .chain(["get", "/steward/rotation", "--print-value-only"])
            .collect();
        assert_eq!(
            env.etcdctl(&endpoints, &get).await.trim(),
            log.last().unwrap().0.to_string(),
            "the last write is there"
        );

        // Broken serving certificates, each put in and taken out again.
        let other = steward_testbed::pki::Pki::create(&env.dir().join("rot-other-pki")).unwrap();
        let names = EtcdCerts::server_names("rot", NS);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let faults = [
            (
                tls.pki
                    .expired_serving_and_client("rot-expired", "etcd", &names)
                    .unwrap(),
                "serving certificate expired",
            ),
            (
                other
                    .serving_and_client("rot-stranger", "etcd", &names)
                    .unwrap(),
                "serving certificate not signed by the CA",
            ),
            (
                tls.pki
                    .serving_and_client("rot-elsewhere", "etcd", &["elsewhere.invalid"])
                    .unwrap(),
                "serving certificate does not name",
            ),
        ];
        let events: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(env.client.clone(), NS);
        for (bad, says) in &faults {
            let began = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1);
            env.put_tls_secret("rot-server", bad, ca).await;
            let c = env
                .wait_for("rot", says, |c| {
                    condition_reason(c, "Available") == Some("TLSHandshakeFailed")
                        && condition_message(c, "Available").is_some_and(|m| m.contains(says))
                })
                .await;
            assert_eq!(condition(&c, "Available"), Some("False"));
            assert_eq!(ready_members(&c), 0, "{}", conditions_line(&c));
            // kube's recorder folds a repeat of an Event (same reason,
            // type, action and object) into the first one's series, keeping
            // its note: the first fault's note names it, the later ones
            // show as a newer observation of the series.
            let start = std::time::Instant::now();
            while !events
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|e| {
                    let seen = e
                        .series
                        .as_ref()
                        .map(|s| s.last_observed_time.0)
                        .or(e.event_time.as_ref().map(|t| t.0));
                    e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some("TLSHandshakeFailed")
                        && seen.is_some_and(|t| t >= began)
                        && (e.series.is_some()
                            || e.note.as_deref().is_some_and(|n| n.contains(says)))
                })
            {
                assert!(
                    start.elapsed() < EVENTUALLY,
                    "no Warning Event for {says:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            assert_eq!(
                env.member_names("rot").await,
                members,
                "no membership change"
            );
            assert_eq!(pod_lives(&env, "rot").await, lives, "no member restarted");

            env.put_tls_secret("rot-server", &renewed.server, ca).await;
            env.wait_available("rot", 3).await;
            assert_eq!(
                env.etcdctl(&endpoints, &get).await.trim(),
                log.last().unwrap().0.to_string(),
                "the data is kept"
            );
        }

        // An operator certificate that still works but expires in about a
        // week: Degraded says which Secret and when (the policy sees its
        // validity, steward:status@0.4.0); Available stays True.
        let soon = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(8 * 24))
            .to_zoned(jiff::tz::TimeZone::UTC)
            .date();
        let expiring = tls
            .pki
            .client_valid_until(
                "rot-operator-expiring",
                "etcd-steward",
                (i32::from(soon.year()), soon.month() as u8, soon.day() as u8),
            )
            .unwrap();
        env.put_tls_secret("rot-operator", &expiring, ca).await;
        let c = env
            .wait_for("rot", "CertificateExpiringSoon", |c| {
                condition_reason(c, "Degraded") == Some("CertificateExpiringSoon")
            })
            .await;
        assert_eq!(condition(&c, "Degraded"), Some("True"));
        assert_eq!(
            condition(&c, "Available"),
            Some("True"),
            "{}",
            conditions_line(&c)
        );
        let message = condition_message(&c, "Degraded").unwrap();
        assert!(
            message.starts_with(
                "the operator's client certificate in Secret rot-operator expires in 7d"
            ),
            "{message}"
        );
        env.put_tls_secret("rot-operator", &renewed.operator, ca)
            .await;
        env.wait_for("rot", "no certificate expiring", |c| {
            condition(c, "Degraded") == Some("False")
        })
        .await;
        env.shutdown().await;
    });
}

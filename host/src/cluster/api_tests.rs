//! The cluster reconcile ([`super::reconcile_cluster`]: observe -> evaluate
//! -> plan -> write status -> act) against the scripted mock apiserver of
//! [`crate::mock_api`]: every request it sends, with its verb, path and
//! body, in order, and what it does when one fails.
//!
//! The stages run for real, with the embedded default policy. etcd is never
//! reached: a cluster without members is not probed, and the members of the
//! others have names that do not resolve here (`*.main.prod.svc`), with a
//! short probe deadline.

use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Resource;
use kube::runtime::controller::Action;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use super::reconcile_cluster;
use crate::api::{EtcdCluster, EtcdClusterStatus, MemberRole, MemberSummary};
use crate::context::{Context, OperatorConfig};
use crate::error::Error;
use crate::etcd::{ClientConfig, EtcdClient};
use crate::mock_api::{
    APPLY_PATCH, Exchange, MERGE_PATCH, api_error, conflict, echo, not_found, ok, pair,
};
use crate::policy::{EngineConfig, PolicyEngine};
use crate::resources::{self, fixtures};
use crate::watch::Writers;

const CLUSTER_STATUS: &str =
    "/apis/etcd.steward.dev/v1alpha1/namespaces/prod/etcdclusters/main/status";
const MEMBERS: &str = "/apis/etcd.steward.dev/v1alpha1/namespaces/prod/etcdmembers";
/// The seed guard's LIST: the cluster's EtcdMembers, by its instance label.
const LIST_MEMBERS: &str = "/apis/etcd.steward.dev/v1alpha1/namespaces/prod/etcdmembers?labelSelector=app.kubernetes.io%2Finstance%3Dmain";
const PDB: &str = "/apis/policy/v1/namespaces/prod/poddisruptionbudgets/main";
const HEADLESS: &str = "/api/v1/namespaces/prod/services/main";
const CLIENT: &str = "/api/v1/namespaces/prod/services/main-client";
/// How the operator applies its children: server-side apply, forced.
const APPLY: &str = "?fieldManager=etcd-steward&force=true";

/// The default policy compiles once for every test here.
static ENGINE: LazyLock<PolicyEngine> =
    LazyLock::new(|| PolicyEngine::new(EngineConfig::default()).expect("the default policy loads"));

/// A test context on `client`, with empty caches to fill through the writers.
fn context(client: kube::Client) -> (Arc<Context>, Writers) {
    let etcd = Arc::new(EtcdClient::new(ClientConfig {
        deadline: Duration::from_millis(300),
        ..ClientConfig::default()
    }));
    Context::for_tests(
        client,
        etcd,
        ENGINE.clone(),
        OperatorConfig {
            probe_deadline: Duration::from_millis(300),
            ..OperatorConfig::default()
        },
    )
}

/// A cluster just created: no status, no members.
fn new_cluster() -> EtcdCluster {
    fixtures::cluster(fixtures::spec())
}

const MEMBER_NAMES: [&str; 3] = ["main-a", "main-b", "main-c"];

/// A cluster last seen healthy with three voters, whose members no longer
/// resolve: etcd is down.
fn cluster_last_seen_healthy() -> EtcdCluster {
    let mut c = fixtures::cluster(fixtures::spec());
    let at = Time(jiff::Timestamp::from_second(1_800_000_000).unwrap());
    c.status = Some(EtcdClusterStatus {
        observed_generation: Some(1),
        ready_members: 3,
        cluster_id: Some("abc".into()),
        last_verified_time: Some(at.clone()),
        members: MEMBER_NAMES
            .iter()
            .enumerate()
            .map(|(i, n)| MemberSummary {
                last_defrag: None,
                name: (*n).into(),
                id: Some(format!("{:x}", i + 1)),
                role: MemberRole::Voter,
                version: Some(crate::api::DEFAULT_ETCD_VERSION.into()),
                leader: i == 0,
                healthy: true,
            })
            .collect(),
        conditions: vec![Condition {
            type_: "Available".into(),
            status: "True".into(),
            reason: "QuorumVerified".into(),
            message: "3 of 3 voters answered".into(),
            observed_generation: Some(1),
            last_transition_time: at,
        }],
        ..Default::default()
    });
    c
}

/// Fills the member cache with the three members of
/// [`cluster_last_seen_healthy`].
fn cache_members(writers: &mut Writers) {
    for name in MEMBER_NAMES {
        writers
            .members
            .apply_watcher_event(&Event::Apply(fixtures::member(name, name == "main-a")));
    }
}

/// `cluster` as the apiserver stores it after the merge patch `patch`
/// (a `null` removes its field), as the watch then delivers it.
fn stored(cluster: &EtcdCluster, patch: &Value) -> EtcdCluster {
    let mut status = patch["status"].clone();
    status
        .as_object_mut()
        .expect("the patch holds a status")
        .retain(|_, v| !v.is_null());
    let mut c = cluster.clone();
    c.status = Some(serde_json::from_value(status).expect("the written status reads back"));
    c
}

/// `obj` as the apiserver answers an apply: with a resourceVersion.
fn with_version<K: Resource + Clone>(obj: &K, version: &str) -> K {
    let mut obj = obj.clone();
    obj.meta_mut().resource_version = Some(version.into());
    obj
}

fn pdb(cluster: &EtcdCluster, voters: usize, version: &str) -> PodDisruptionBudget {
    with_version(
        &resources::pod_disruption_budget(cluster, voters).unwrap(),
        version,
    )
}

fn headless(cluster: &EtcdCluster, version: &str) -> Service {
    with_version(&resources::headless_service(cluster).unwrap(), version)
}

fn client_service(cluster: &EtcdCluster, version: &str) -> Service {
    with_version(&resources::client_service(cluster).unwrap(), version)
}

fn empty_member_list() -> Value {
    json!({
        "apiVersion": "etcd.steward.dev/v1alpha1",
        "kind": "EtcdMemberList",
        "metadata": {"resourceVersion": "1"},
        "items": [],
    })
}

/// Keeps a request's body for the test to read after the scenario.
#[derive(Clone, Default)]
struct Kept(Arc<Mutex<Option<Value>>>);

impl Kept {
    fn keep(&self) -> impl FnOnce(&Value) + Send + 'static {
        let slot = self.0.clone();
        move |body| *slot.lock().unwrap() = Some(body.clone())
    }

    fn body(&self) -> Value {
        self.0.lock().unwrap().clone().expect("the request came")
    }
}

/// The condition of `type_` in a written status.
fn condition<'a>(body: &'a Value, type_: &str) -> &'a Value {
    body["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {body}"))
}

/// The three applies of every reconcile of `cluster`, answered with the
/// objects at `versions` (PDB, headless Service, client Service).
fn children_applied(cluster: &EtcdCluster, voters: usize, versions: [&str; 3]) -> [Exchange; 3] {
    let min_available = if voters == 0 {
        0
    } else {
        steward_policy_sdk::quorum(voters)
    };
    [
        Exchange::patch(format!("{PDB}{APPLY}"))
            .content_type(APPLY_PATCH)
            .body_includes(json!({
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {
                    "name": "main",
                    "namespace": "prod",
                    "ownerReferences": [{
                        "kind": "EtcdCluster", "name": "main", "uid": "uid-cluster",
                        "controller": true,
                    }],
                },
                "spec": {
                    "minAvailable": min_available,
                    "selector": {"matchLabels": {"etcd.steward.dev/role": "voter"}},
                },
            }))
            .respond(ok(pdb(cluster, voters, versions[0]))),
        Exchange::patch(format!("{HEADLESS}{APPLY}"))
            .content_type(APPLY_PATCH)
            .body_includes(json!({
                "kind": "Service",
                "metadata": {"name": "main", "ownerReferences": [{"kind": "EtcdCluster", "name": "main"}]},
                "spec": {"clusterIP": "None", "publishNotReadyAddresses": true},
            }))
            .respond(ok(headless(cluster, versions[1]))),
        Exchange::patch(format!("{CLIENT}{APPLY}"))
            .content_type(APPLY_PATCH)
            .body_includes(json!({
                "kind": "Service",
                "metadata": {"name": "main-client"},
                "spec": {"type": "ClusterIP"},
            }))
            .respond(ok(client_service(cluster, versions[2]))),
    ]
}

/// A cluster that was deleted, with a finalizer (another controller's, or
/// `foregroundDeletion`) holding it.
fn being_deleted(mut cluster: EtcdCluster) -> EtcdCluster {
    cluster.metadata.deletion_timestamp =
        Some(Time(jiff::Timestamp::from_second(1_800_000_100).unwrap()));
    cluster.metadata.finalizers = Some(vec!["foregroundDeletion".into()]);
    cluster
}

#[tokio::test]
async fn a_status_write_under_a_409_fails_the_reconcile_and_takes_no_action() {
    // A new cluster: without the conflict, a seed would be created.
    let cluster = new_cluster();
    let (client, apiserver) = pair();
    let (ctx, _writers) = context(client);

    let scenario = apiserver.run(vec![
        Exchange::patch(CLUSTER_STATUS)
            .content_type(MERGE_PATCH)
            .respond(conflict("etcdclusters.etcd.steward.dev \"main\"")),
        // No PDB, no Service, no EtcdMember: anything more is unexpected.
    ]);

    let err = reconcile_cluster(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap_err();
    let served = scenario.finish().await;
    assert!(
        matches!(&err, Error::StatusWrite(kube::Error::Api(s)) if s.code == 409),
        "{err:?}"
    );
    assert_eq!(err.metric_label(), "status_write");
    assert_eq!(served.log, [format!("PATCH {CLUSTER_STATUS}")]);
    assert!(
        served.events.is_empty(),
        "no Event announces an unwritten status"
    );
    assert_eq!(
        ctx.last_action_error(&cluster),
        None,
        "not an action failure"
    );
}

#[tokio::test]
async fn a_new_cluster_whose_seed_create_is_forbidden_shows_the_error_in_its_next_status() {
    let cluster = new_cluster();
    let (client, apiserver) = pair();
    let (ctx, mut writers) = context(client);
    let refused = "etcdmembers.etcd.steward.dev is forbidden: User \"system:serviceaccount:etcd-steward-system:etcd-steward\" cannot create resource \"etcdmembers\"";
    let status = Kept::default();
    let seed = Kept::default();

    let [pdb_applied, headless_applied, client_applied] =
        children_applied(&cluster, 0, ["11", "12", "13"]);
    let scenario = apiserver.run(vec![
        // The first reconcile. The status announces the seed before
        // anything is created.
        Exchange::patch(CLUSTER_STATUS)
            .content_type(MERGE_PATCH)
            .body_includes(json!({"status": {
                "observedGeneration": 1,
                "readyMembers": 0,
                "selector": "app.kubernetes.io/instance=main,app.kubernetes.io/managed-by=etcd-steward,app.kubernetes.io/name=etcd",
                // The name and the first 8 characters of the UID.
                "clusterToken": "main-uid-clus",
                "observed": {"replicas": 3, "version": crate::api::DEFAULT_ETCD_VERSION},
                "policy": {"name": "steward-default-policy"},
                "unverifiedStreak": 1,
                // Nothing yet: cleared rather than left out.
                "clusterID": null,
                "members": null,
                "lastActionError": null,
            }}))
            .body(|body| {
                for type_ in ["Reconciling", "Progressing"] {
                    let c = condition(body, type_);
                    assert_eq!(
                        (c["status"].as_str(), c["reason"].as_str()),
                        (Some("True"), Some("Bootstrapping")),
                        "{c}"
                    );
                }
                assert_eq!(
                    condition(body, "Reconciling")["message"],
                    "starting the seed member; next: create the seed member"
                );
                assert_eq!(condition(body, "Stalled")["status"], "False");
                assert!(
                    body["status"]["progressDeadline"].is_string(),
                    "the bootstrap's deadline starts"
                );
            })
            .body(status.keep())
            .respond(ok(&cluster)),
        // No voter yet: the PDB protects nothing, but exists.
        pdb_applied,
        headless_applied,
        client_applied,
        // The seed guard asks the apiserver, not the cache.
        Exchange::get(LIST_MEMBERS).respond(ok(empty_member_list())),
        Exchange::post(MEMBERS)
            .content_type("application/json")
            .body_includes(json!({
                "apiVersion": "etcd.steward.dev/v1alpha1",
                "kind": "EtcdMember",
                "metadata": {
                    "namespace": "prod",
                    "labels": {"app.kubernetes.io/instance": "main"},
                    "ownerReferences": [{"kind": "EtcdCluster", "name": "main", "uid": "uid-cluster"}],
                },
                "spec": {
                    "cluster": "main",
                    "version": crate::api::DEFAULT_ETCD_VERSION,
                    "bootstrap": true,
                    "dormant": false,
                    "clusterToken": "main-uid-clus",
                },
            }))
            .body(seed.keep())
            .respond(api_error(403, "Forbidden", refused)),
        // The next reconcile, once the watch delivered the written status
        // and the applied children: the error is in the status, then the
        // seed is tried again, and created.
        Exchange::patch(CLUSTER_STATUS)
            .content_type(MERGE_PATCH)
            .body_includes(json!({"status": {"unverifiedStreak": 2}}))
            .body(move |body| {
                let error = body["status"]["lastActionError"].as_str().unwrap_or_default();
                assert!(error.starts_with("creating seed EtcdMember main-"), "{error}");
                assert!(error.contains(refused), "{error}");
            })
            .respond(ok(&cluster)),
        Exchange::get(LIST_MEMBERS).respond(ok(empty_member_list())),
        Exchange::post(MEMBERS)
            .body_includes(json!({"kind": "EtcdMember", "spec": {"bootstrap": true}}))
            .respond(echo()),
    ]);

    let action = reconcile_cluster(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(ctx.config.busy_resync));

    // The seed: a fresh name, an initial cluster of only itself.
    let seed = seed.body();
    let name = seed["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(
        name.starts_with("main-") && name.len() == "main-".len() + 5,
        "{name}"
    );
    assert_eq!(
        seed["spec"]["initialCluster"],
        format!("{name}=http://{name}.main.prod.svc:2380")
    );
    let recorded = ctx
        .last_action_error(&cluster)
        .expect("the failure is recorded");
    assert!(
        recorded.starts_with(&format!("creating seed EtcdMember {name}: ")),
        "{recorded}"
    );
    assert!(recorded.contains(refused), "{recorded}");

    let stored = stored(&cluster, &status.body());
    writers
        .pdbs
        .apply_watcher_event(&Event::Apply(pdb(&stored, 0, "11")));
    writers
        .services
        .apply_watcher_event(&Event::Apply(headless(&stored, "12")));
    writers
        .services
        .apply_watcher_event(&Event::Apply(client_service(&stored, "13")));
    reconcile_cluster(Arc::new(stored), ctx.clone())
        .await
        .unwrap();
    let served = scenario.finish().await;
    assert_eq!(
        ctx.last_action_error(&cluster),
        None,
        "cleared by the success"
    );

    // One Warning, after the first status's own Events.
    let reasons = served.event_reasons();
    let failed: Vec<usize> = (0..reasons.len())
        .filter(|&i| reasons[i] == "ActionFailed")
        .collect();
    assert_eq!(failed.len(), 1, "{reasons:?}");
    let event = &served.events[failed[0]];
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["regarding"]["kind"], "EtcdCluster");
    assert_eq!(event["regarding"]["name"], "main");
    assert!(event["note"].as_str().unwrap().contains(refused), "{event}");
    // Published at once, after the create that failed.
    let create = served
        .log
        .iter()
        .position(|l| l.starts_with(&format!("POST {MEMBERS}")))
        .unwrap();
    assert!(
        served.log[create + 1].starts_with("POST /apis/events.k8s.io/"),
        "{:#?}",
        served.log
    );
}

#[tokio::test]
async fn a_cluster_being_deleted_gets_no_seed() {
    // Without its deletionTimestamp, this cluster would get a seed.
    let cluster = being_deleted(new_cluster());
    let (client, apiserver) = pair();
    let (ctx, _writers) = context(client);

    let mut script = vec![
        Exchange::patch(CLUSTER_STATUS)
            .content_type(MERGE_PATCH)
            .body_includes(json!({"status": {"lastActionError": null, "members": null}}))
            .body(|body| {
                for type_ in ["Reconciling", "Progressing"] {
                    let c = condition(body, type_);
                    assert_eq!(
                        (c["status"].as_str(), c["reason"].as_str()),
                        (Some("False"), Some("Deleting")),
                        "{c}"
                    );
                }
                assert_eq!(
                    condition(body, "Reconciling")["message"],
                    "the cluster is being deleted",
                    "no next step is announced"
                );
            })
            .respond(ok(&cluster)),
    ];
    // What act does today for a cluster being deleted: it still applies
    // the children that the garbage collector is removing.
    script.extend(children_applied(&cluster, 0, ["1", "2", "3"]));
    // No LIST, no POST of a seed.
    let scenario = apiserver.run(script);

    reconcile_cluster(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();
    let served = scenario.finish().await;
    assert!(
        !served.log.iter().any(|l| l.contains("/etcdmembers")),
        "{:#?}",
        served.log
    );
    assert_eq!(ctx.last_action_error(&cluster), None);
}

#[tokio::test]
async fn a_cluster_being_deleted_leaves_its_members_to_the_garbage_collector() {
    let cluster = being_deleted(cluster_last_seen_healthy());
    let (client, apiserver) = pair();
    let (ctx, mut writers) = context(client);
    cache_members(&mut writers);

    let mut script = vec![
        Exchange::patch(CLUSTER_STATUS)
            .content_type(MERGE_PATCH)
            .body(|body| {
                assert_eq!(condition(body, "Reconciling")["reason"], "Deleting");
                assert_eq!(
                    body["status"]["members"].as_array().map(Vec::len),
                    Some(3),
                    "{body}"
                );
            })
            .respond(ok(&cluster)),
    ];
    script.extend(children_applied(&cluster, 3, ["1", "2", "3"]));
    // No DELETE of a member (its finalizer would run MemberRemove against
    // an etcd that is going away), no create.
    let scenario = apiserver.run(script);

    reconcile_cluster(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();
    let served = scenario.finish().await;
    assert!(
        !served.log.iter().any(|l| l.contains("/etcdmembers")),
        "{:#?}",
        served.log
    );
}

#[tokio::test]
async fn a_cluster_deleted_before_its_status_write_ends_the_reconcile_at_the_404() {
    let cluster = new_cluster();
    let (client, apiserver) = pair();
    let (ctx, _writers) = context(client);

    let scenario = apiserver.run(vec![
        Exchange::patch(CLUSTER_STATUS).respond(not_found()),
        // Nothing is applied to, or created for, a cluster that is gone.
    ]);

    let err = reconcile_cluster(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap_err();
    let served = scenario.finish().await;
    assert!(
        matches!(&err, Error::StatusWrite(kube::Error::Api(s)) if s.is_not_found()),
        "{err:?}"
    );
    assert_eq!(served.log, [format!("PATCH {CLUSTER_STATUS}")]);
    assert!(served.events.is_empty());
    assert_eq!(ctx.last_action_error(&cluster), None);
}

#[tokio::test]
async fn the_pdb_and_services_are_applied_once_and_not_again_while_their_cached_copy_is_the_applied_one()
 {
    let cluster = cluster_last_seen_healthy();
    let (client, apiserver) = pair();
    let (ctx, mut writers) = context(client);
    cache_members(&mut writers);
    let first = Kept::default();
    let second = Kept::default();

    let mut script = vec![
        Exchange::patch(CLUSTER_STATUS)
            .body(first.keep())
            .respond(ok(&cluster)),
    ];
    script.extend(children_applied(&cluster, 3, ["21", "22", "23"]));
    // The second reconcile: the status only (etcd still down, the streak
    // of unverified reconciles grows).
    script.push(
        Exchange::patch(CLUSTER_STATUS)
            .body_includes(json!({"status": {"unverifiedStreak": 2}}))
            .body(second.keep())
            .respond(ok(&cluster)),
    );
    // The third: someone edited the client Service; it alone is applied.
    let [_, _, client_applied] = children_applied(&cluster, 3, ["21", "22", "31"]);
    script.push(
        Exchange::patch(CLUSTER_STATUS)
            .body_includes(json!({"status": {"unverifiedStreak": 3}}))
            .respond(ok(&cluster)),
    );
    script.push(client_applied);
    let scenario = apiserver.run(script);

    reconcile_cluster(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();
    // The watch delivers the written status and what the applies produced.
    writers
        .pdbs
        .apply_watcher_event(&Event::Apply(pdb(&cluster, 3, "21")));
    writers
        .services
        .apply_watcher_event(&Event::Apply(headless(&cluster, "22")));
    writers
        .services
        .apply_watcher_event(&Event::Apply(client_service(&cluster, "23")));
    let cluster = stored(&cluster, &first.body());
    reconcile_cluster(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();

    // Another writer changed the client Service: its version moved.
    let mut edited = client_service(&cluster, "30");
    edited
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("someone".into(), "was here".into());
    writers.services.apply_watcher_event(&Event::Apply(edited));
    let cluster = stored(&cluster, &second.body());
    reconcile_cluster(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();

    let served = scenario.finish().await;
    let applies: Vec<&String> = served
        .log
        .iter()
        .filter(|l| l.contains("fieldManager="))
        .collect();
    assert_eq!(applies.len(), 4, "{:#?}", served.log);
}

#[tokio::test]
async fn the_pdb_is_still_applied_while_etcd_is_down() {
    let cluster = cluster_last_seen_healthy();
    let (client, apiserver) = pair();
    let (ctx, mut writers) = context(client);
    cache_members(&mut writers);

    let mut script = vec![
        // The outage is written first: nothing answered.
        Exchange::patch(CLUSTER_STATUS)
            .content_type(MERGE_PATCH)
            .body_includes(json!({"status": {
                "readyMembers": 0,
                "clusterID": "abc",
                "unverifiedStreak": 1,
                "lastActionError": null,
            }}))
            .body(|body| {
                let available = condition(body, "Available");
                assert_eq!(available["status"], "False", "{available}");
                assert_eq!(condition(body, "Ready")["status"], "False");
                let members = body["status"]["members"].as_array().unwrap();
                assert_eq!(members.len(), 3);
                for m in members {
                    assert_eq!(
                        (&m["role"], &m["healthy"]),
                        (&json!("voter"), &json!(false)),
                        "{m}"
                    );
                }
                assert!(
                    body["status"]["lastVerifiedTime"].is_string(),
                    "the last verification is kept: {body}"
                );
            })
            .respond(ok(&cluster)),
    ];
    // The PDB still holds the voters' quorum: 2 of the 3 the status shows.
    script.extend(children_applied(&cluster, 3, ["1", "2", "3"]));
    // No membership step without a verified quorum.
    let scenario = apiserver.run(script);

    let action = reconcile_cluster(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();
    let served = scenario.finish().await;
    assert_eq!(action, Action::requeue(ctx.config.busy_resync));
    assert_eq!(ctx.last_action_error(&cluster), None);
    assert!(
        served.event_reasons().iter().all(|r| *r != "ActionFailed"),
        "{:?}",
        served.event_reasons()
    );
}

#[tokio::test]
async fn a_pdb_the_apiserver_refuses_does_not_hold_back_the_services_or_the_seed() {
    let cluster = new_cluster();
    let (client, apiserver) = pair();
    let (ctx, _writers) = context(client);

    let [_, headless_applied, client_applied] = children_applied(&cluster, 0, ["1", "2", "3"]);
    let scenario = apiserver.run(vec![
        Exchange::patch(CLUSTER_STATUS).respond(ok(&cluster)),
        Exchange::patch(format!("{PDB}{APPLY}")).respond(api_error(
            403,
            "Forbidden",
            "poddisruptionbudgets.policy is forbidden",
        )),
        headless_applied,
        client_applied,
        Exchange::get(LIST_MEMBERS).respond(ok(empty_member_list())),
        Exchange::post(MEMBERS).respond(echo()),
    ]);

    reconcile_cluster(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();
    let served = scenario.finish().await;
    // Logged only: not an action error, no Warning.
    assert_eq!(ctx.last_action_error(&cluster), None);
    assert!(!served.event_reasons().contains(&"ActionFailed"));
}

#[tokio::test]
async fn a_service_the_apiserver_refuses_stops_the_act_before_the_seed() {
    let cluster = new_cluster();
    let (client, apiserver) = pair();
    let (ctx, _writers) = context(client);

    let [pdb_applied, _, _] = children_applied(&cluster, 0, ["1", "2", "3"]);
    let scenario = apiserver.run(vec![
        Exchange::patch(CLUSTER_STATUS).respond(ok(&cluster)),
        pdb_applied,
        Exchange::patch(format!("{HEADLESS}{APPLY}")).respond(api_error(
            422,
            "Invalid",
            "Service \"main\" is invalid: spec.clusterIP: Invalid value",
        )),
        // Neither the client Service nor the seed.
    ]);

    let action = reconcile_cluster(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();
    let served = scenario.finish().await;
    assert_eq!(action, Action::requeue(ctx.config.busy_resync));
    let recorded = ctx.last_action_error(&cluster).expect("recorded");
    assert!(
        recorded.starts_with("applying Service main: "),
        "{recorded}"
    );
    assert!(
        recorded.contains("spec.clusterIP: Invalid value"),
        "{recorded}"
    );
    assert_eq!(
        served
            .event_reasons()
            .iter()
            .filter(|r| **r == "ActionFailed")
            .count(),
        1
    );
}

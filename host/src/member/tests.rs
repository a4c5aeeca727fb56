//! The member reconcile ([`super::apply`]: observe -> write status -> act)
//! against the scripted mock apiserver of [`crate::mock_api`]: which
//! requests it makes, in which order, and what it does when one fails.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use kube::runtime::controller::Action;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use super::observe::Observed;
use super::{apply, status};
use crate::api::{EtcdCluster, EtcdClusterStatus, EtcdMember, MemberRole, MemberSummary};
use crate::context::{Context, OperatorConfig};
use crate::error::Error;
use crate::etcd::{ClientConfig, EtcdClient};
use crate::facts::pod_facts;
use crate::mock_api::{
    Exchange, MERGE_PATCH, already_exists, api_error, conflict, echo, not_found, ok, pair,
};
use crate::policy::{EngineConfig, PolicyEngine};
use crate::resources::{self, fixtures};

const CLUSTER: &str = "/apis/etcd.steward.dev/v1alpha1/namespaces/prod/etcdclusters/main";
const PVCS: &str = "/api/v1/namespaces/prod/persistentvolumeclaims";
const PODS: &str = "/api/v1/namespaces/prod/pods";
const IMAGE: &str = "quay.io/coreos/etcd";

fn member_status(name: &str) -> String {
    format!("/apis/etcd.steward.dev/v1alpha1/namespaces/prod/etcdmembers/{name}/status")
}

fn pod_path(name: &str) -> String {
    format!("{PODS}/{name}")
}

/// Compiling the default policy takes a while; the member stages never
/// evaluate it, so every test shares one engine.
static ENGINE: LazyLock<PolicyEngine> =
    LazyLock::new(|| PolicyEngine::new(EngineConfig::default()).expect("the default policy loads"));

/// A test context on `client` whose Pod cache holds `pods`.
fn context(client: kube::Client, pods: &[Pod]) -> Arc<Context> {
    context_with(client, pods, &[])
}

/// The same, with `pvcs` in the PVC cache.
fn context_with(
    client: kube::Client,
    pods: &[Pod],
    pvcs: &[k8s_openapi::api::core::v1::PersistentVolumeClaim],
) -> Arc<Context> {
    // Never called: the member stages do not talk to etcd.
    let etcd = Arc::new(EtcdClient::new(ClientConfig {
        deadline: Duration::from_millis(300),
        ..ClientConfig::default()
    }));
    let config = OperatorConfig {
        etcd_image: IMAGE.into(),
        ..OperatorConfig::default()
    };
    let (ctx, mut writers) = Context::for_tests(client, etcd, ENGINE.clone(), config);
    for pod in pods {
        writers.pods.apply_watcher_event(&Event::Apply(pod.clone()));
    }
    for pvc in pvcs {
        writers.pvcs.apply_watcher_event(&Event::Apply(pvc.clone()));
    }
    ctx
}

/// `data-<member>` as the provisioner left it: bound, `size` requested and
/// provided.
fn bound_pvc(
    cluster: &EtcdCluster,
    member: &EtcdMember,
    size: &str,
) -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
    let mut pvc = resources::member_pvc(cluster, member)
        .expect("the PVC builds")
        .expect("a disk member has one");
    let value = serde_json::to_value(&pvc).unwrap();
    let mut value = value;
    value["spec"]["resources"]["requests"]["storage"] = json!(size);
    value["status"] = json!({"phase": "Bound", "capacity": {"storage": size}});
    pvc = serde_json::from_value(value).unwrap();
    pvc
}

/// A bigger spec.storage.size: the PVC's request is patched to it (a
/// quantity comparison: 1024Mi is not smaller than 1Gi), and the API
/// server's refusal (a StorageClass without allowVolumeExpansion) shows in
/// the member's StorageResized condition on the next status.
#[tokio::test]
async fn a_larger_storage_size_patches_the_claim_and_a_refusal_is_named_in_the_status() {
    let mut cluster = cluster();
    let member = fixtures::member("main-0", true);
    let pod = running_pod(&cluster, &member);
    cluster.spec.storage.size =
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("2Gi".into());
    let pvc = bound_pvc(&cluster, &member, "1024Mi");
    let (client, apiserver) = pair();
    let ctx = context_with(client, &[pod], &[pvc]);
    let refused = "persistentvolumeclaims \"data-main-0\" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize";

    let scenario = apiserver.run(vec![
        Exchange::get(CLUSTER).respond(ok(&cluster)),
        Exchange::patch(member_status("main-0"))
            .body(|body| {
                let conditions = body["status"]["conditions"].as_array().unwrap();
                let resized = conditions.iter().find(|c| c["type"] == "StorageResized");
                assert_eq!(resized.unwrap()["reason"], "Resizing", "{body}");
            })
            .respond(ok(&member)),
        Exchange::patch(format!("{PVCS}/data-main-0"))
            .body_includes(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}))
            .respond(api_error(403, "Forbidden", refused)),
        Exchange::get(CLUSTER).respond(ok(&cluster)),
        Exchange::patch(member_status("main-0"))
            .body(move |body| {
                let refusal = body["status"]["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["type"] == "StorageResized")
                    .cloned()
                    .unwrap();
                assert_eq!(refusal["reason"], "ExpansionRefused", "{refusal}");
                let message = refusal["message"].as_str().unwrap();
                assert!(
                    message.starts_with(
                        "growing data-main-0 to 2Gi was refused: growing PVC data-main-0 to 2Gi: "
                    ),
                    "{message}"
                );
                assert!(message.contains("must support resize"), "{message}");
            })
            .respond(ok(&member)),
        Exchange::patch(format!("{PVCS}/data-main-0")).respond(api_error(
            403,
            "Forbidden",
            refused,
        )),
    ]);
    apply(Arc::new(member.clone()), &ctx).await.unwrap();
    apply(Arc::new(member.clone()), &ctx).await.unwrap();
    scenario.finish().await;
}

fn cluster() -> EtcdCluster {
    fixtures::cluster(fixtures::spec())
}

/// The member's Pod as the builder makes it, as the apiserver stores it.
fn running_pod(cluster: &EtcdCluster, member: &EtcdMember) -> Pod {
    let mut pod = resources::member_pod(cluster, member, IMAGE).expect("the Pod builds");
    pod.metadata.uid = Some(format!(
        "uid-pod-{}",
        member.metadata.name.as_deref().unwrap()
    ));
    pod.status = Some(PodStatus {
        phase: Some("Running".into()),
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    pod
}

fn error_message(body: &Value) -> String {
    body["status"]["lastActionError"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_new_members_status_is_written_before_its_pvc_and_pod_are_created() {
    let cluster = cluster();
    let member = fixtures::member("main-0", true);
    let (client, apiserver) = pair();
    let ctx = context(client, &[]);

    let scenario = apiserver.run(vec![
        Exchange::get(CLUSTER).respond(ok(&cluster)),
        Exchange::patch(member_status("main-0"))
            .content_type(MERGE_PATCH)
            .body_includes(json!({"status": {
                "isVoter": true,
                "pvcName": "data-main-0",
                "podRestarts": 0,
                "consecutiveFailures": 0,
                // No Pod yet, no error, no ID: cleared, not left out.
                "podName": null,
                "podUID": null,
                "memberID": null,
                "lastActionError": null,
            }}))
            .body(|body| {
                let ready = body["status"]["conditions"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                    .expect("a Ready condition");
                assert_eq!(ready["status"], "False");
            })
            .respond(ok(&member)),
        Exchange::post(PVCS)
            .content_type("application/json")
            .body_includes(json!({
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": "data-main-0",
                    "namespace": "prod",
                    "ownerReferences": [{"kind": "EtcdMember", "name": "main-0", "uid": "uid-main-0"}],
                },
            }))
            .respond(echo()),
        Exchange::post(PODS)
            .body_includes(json!({
                "kind": "Pod",
                "metadata": {"name": "main-0", "namespace": "prod"},
            }))
            .respond(echo()),
    ]);

    let action = apply(Arc::new(member.clone()), &ctx).await.unwrap();
    let served = scenario.finish().await;
    assert_eq!(action, Action::requeue(Duration::from_secs(10)));
    assert_eq!(ctx.last_action_error(&member), None);
    assert!(served.events.is_empty(), "{:?}", served.events);
}

#[tokio::test]
async fn a_failing_pvc_create_leaves_the_status_written_and_the_next_status_shows_it() {
    let cluster = cluster();
    let member = fixtures::member("main-0", true);
    let (client, apiserver) = pair();
    let ctx = context(client, &[]);
    let refused = "persistentvolumeclaims \"data-main-0\" is forbidden: exceeded quota";

    let scenario = apiserver.run(vec![
        // The first reconcile: the status, then the PVC, refused.
        Exchange::get(CLUSTER).respond(ok(&cluster)),
        Exchange::patch(member_status("main-0"))
            .body_includes(json!({"status": {"lastActionError": null}}))
            .respond(ok(&member)),
        Exchange::post(PVCS).respond(api_error(403, "Forbidden", refused)),
        // (no Pod without its PVC)
        // The next one writes the error into the status before trying again.
        Exchange::get(CLUSTER).respond(ok(&cluster)),
        Exchange::patch(member_status("main-0"))
            .body(move |body| {
                let error = error_message(body);
                assert!(error.starts_with("creating PVC data-main-0: "), "{error}");
                assert!(error.contains(refused), "{error}");
            })
            .respond(ok(&member)),
        Exchange::post(PVCS).respond(echo()),
        Exchange::post(PODS).respond(echo()),
    ]);

    let first = apply(Arc::new(member.clone()), &ctx).await.unwrap();
    assert_eq!(first, Action::requeue(ctx.config.busy_resync));
    let recorded = ctx
        .last_action_error(&member)
        .expect("the failure is recorded");
    assert!(recorded.contains(refused), "{recorded}");

    let second = apply(Arc::new(member.clone()), &ctx).await.unwrap();
    assert_eq!(second, Action::requeue(Duration::from_secs(10)));
    assert_eq!(
        ctx.last_action_error(&member),
        None,
        "cleared by the success"
    );

    let served = scenario.finish().await;
    assert_eq!(served.event_reasons(), ["ActionFailed"]);
    let event = &served.events[0];
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["regarding"]["name"], "main-0");
    assert!(event["note"].as_str().unwrap().contains(refused), "{event}");
}

#[tokio::test]
async fn a_409_on_the_status_write_fails_the_reconcile_and_creates_nothing() {
    let cluster = cluster();
    let member = fixtures::member("main-0", true);
    let (client, apiserver) = pair();
    let ctx = context(client, &[]);

    let scenario = apiserver.run(vec![
        Exchange::get(CLUSTER).respond(ok(&cluster)),
        Exchange::patch(member_status("main-0"))
            .respond(conflict("etcdmembers.etcd.steward.dev \"main-0\"")),
        // Anything after this fails the scenario as unexpected.
    ]);

    let err = apply(Arc::new(member.clone()), &ctx).await.unwrap_err();
    let served = scenario.finish().await;
    assert!(
        matches!(&err, Error::StatusWrite(kube::Error::Api(s)) if s.code == 409),
        "{err:?}"
    );
    assert_eq!(err.metric_label(), "status_write");
    assert_eq!(served.log.len(), 2);
    assert!(served.events.is_empty());
    // Not an action failure: nothing for the next status to show.
    assert_eq!(ctx.last_action_error(&member), None);
}

#[tokio::test]
async fn an_unchanged_status_is_not_written_again_and_a_settled_pod_is_left_alone() {
    let cluster = cluster();
    let mut member = fixtures::member("main-0", true);
    let pod = running_pod(&cluster, &member);
    // The status this very observation implies, as if written last time.
    let observed = Observed {
        member: Arc::new(member.clone()),
        cluster: Ok(cluster.clone()),
        pod: Some(Arc::new(pod.clone())),
        pvc: None,
        facts: pod_facts(Some(&pod)),
        newly_terminated: false,
        prior_failures: 0,
    };
    member.status = Some(status::next_status(&observed, None));
    let (client, apiserver) = pair();
    let ctx = context(client, &[pod]);

    let scenario = apiserver.run(vec![Exchange::get(CLUSTER).respond(ok(&cluster))]);

    let action = apply(Arc::new(member), &ctx).await.unwrap();
    let served = scenario.finish().await;
    assert_eq!(action, Action::requeue(Duration::from_secs(10)));
    assert_eq!(served.log, [format!("GET {CLUSTER}")]);
}

#[tokio::test]
async fn a_dormant_members_pod_is_deleted_by_uid_and_a_404_counts_as_done() {
    let cluster = cluster();
    let mut member = fixtures::member("main-0", true);
    let pod = running_pod(&cluster, &member);
    member.spec.dormant = true;
    let (client, apiserver) = pair();
    let ctx = context(client, &[pod]);

    let scenario = apiserver.run(vec![
        Exchange::get(CLUSTER).respond(ok(&cluster)),
        Exchange::patch(member_status("main-0"))
            .body_includes(json!({"status": {"podName": "main-0", "podUID": "uid-pod-main-0"}}))
            .respond(ok(&member)),
        // Only this Pod, never a newer one by the same name.
        Exchange::delete(pod_path("main-0"))
            .body_includes(json!({"preconditions": {"uid": "uid-pod-main-0"}}))
            .respond(not_found()),
    ]);

    let action = apply(Arc::new(member.clone()), &ctx).await.unwrap();
    let served = scenario.finish().await;
    assert_eq!(action, Action::requeue(Duration::from_secs(10)));
    assert_eq!(ctx.last_action_error(&member), None);
    assert!(served.events.is_empty());
}

#[tokio::test]
async fn a_promoted_learners_pod_is_relabelled_voter_after_the_status_says_so() {
    let mut cluster = cluster();
    cluster.status = Some(EtcdClusterStatus {
        members: vec![MemberSummary {
            last_defrag: None,
            name: "main-1".into(),
            id: Some("2".into()),
            role: MemberRole::Voter,
            version: Some("3.5.1".into()),
            leader: false,
            healthy: true,
        }],
        ..Default::default()
    });
    let member = fixtures::member("main-1", false);
    let pod = running_pod(&cluster, &member);
    assert_eq!(
        pod.metadata.labels.as_ref().unwrap()[resources::LABEL_ROLE],
        resources::ROLE_LEARNER
    );
    let (client, apiserver) = pair();
    let ctx = context(client, std::slice::from_ref(&pod));

    let scenario = apiserver.run(vec![
        Exchange::get(CLUSTER).respond(ok(&cluster)),
        Exchange::patch(member_status("main-1"))
            .body_includes(
                json!({"status": {"isVoter": true, "memberID": "2", "version": "3.5.1"}}),
            )
            .respond(ok(&member)),
        Exchange::patch(pod_path("main-1"))
            .content_type(MERGE_PATCH)
            .body(|body| {
                assert_eq!(
                    body,
                    &json!({"metadata": {"labels": {"etcd.steward.dev/role": "voter"}}})
                );
            })
            .respond(ok(&pod)),
    ]);

    let action = apply(Arc::new(member), &ctx).await.unwrap();
    scenario.finish().await;
    assert_eq!(action, Action::requeue(Duration::from_secs(10)));
}

#[tokio::test]
async fn an_unreadable_cluster_is_written_into_the_status_and_nothing_is_created() {
    let member = fixtures::member("main-0", true);
    let (client, apiserver) = pair();
    let ctx = context(client, &[]);

    let scenario = apiserver.run(vec![
        Exchange::get(CLUSTER).respond(api_error(
            403,
            "Forbidden",
            "etcdclusters.etcd.steward.dev \"main\" is forbidden",
        )),
        Exchange::patch(member_status("main-0"))
            .body(|body| {
                let error = error_message(body);
                assert!(
                    error.starts_with("reading EtcdCluster prod/main: "),
                    "{error}"
                );
                assert!(error.contains("is forbidden"), "{error}");
            })
            .respond(ok(&member)),
    ]);

    let action = apply(Arc::new(member), &ctx).await.unwrap();
    let served = scenario.finish().await;
    assert_eq!(action, Action::requeue(ctx.config.busy_resync));
    assert!(served.events.is_empty());
}

#[tokio::test]
async fn a_pvc_that_already_exists_counts_as_created() {
    let cluster = cluster();
    let member = fixtures::member("main-0", true);
    let (client, apiserver) = pair();
    let ctx = context(client, &[]);

    let scenario = apiserver.run(vec![
        Exchange::get(CLUSTER).respond(ok(&cluster)),
        Exchange::patch(member_status("main-0")).respond(ok(&member)),
        Exchange::post(PVCS).respond(already_exists("persistentvolumeclaims \"data-main-0\"")),
        Exchange::post(PODS).respond(echo()),
    ]);

    let action = apply(Arc::new(member.clone()), &ctx).await.unwrap();
    let served = scenario.finish().await;
    assert_eq!(action, Action::requeue(Duration::from_secs(10)));
    assert_eq!(ctx.last_action_error(&member), None);
    assert!(served.events.is_empty());
}

#[tokio::test]
async fn a_missing_cluster_ends_the_reconcile_without_a_write() {
    let member = fixtures::member("main-0", true);
    let (client, apiserver) = pair();
    let ctx = context(client, &[]);

    let scenario = apiserver.run(vec![Exchange::get(CLUSTER).respond(not_found())]);

    let action = apply(Arc::new(member), &ctx).await.unwrap();
    scenario.finish().await;
    assert_eq!(action, Action::await_change());
}

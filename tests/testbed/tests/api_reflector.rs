//! kube-runtime against the real kube-apiserver: a reflector's store
//! converges on creates, updates and deletes and survives every watch being
//! cut (by the fault proxy); a
//! Controller with a finalizer and an event Recorder runs its full cycle.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use steward_testbed::ControlPlane;

const EVENTUALLY: Duration = Duration::from_secs(60);

fn cm(name: &str, v: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": "r"}}, "data": {"v": v}}),
    )
    .unwrap()
}

fn snapshot(store: &reflector::Store<ConfigMap>) -> BTreeMap<String, String> {
    store
        .state()
        .iter()
        .map(|o| {
            (
                o.name_any(),
                o.data
                    .as_ref()
                    .and_then(|d| d.get("v").cloned())
                    .unwrap_or_default(),
            )
        })
        .collect()
}

async fn converges(store: &reflector::Store<ConfigMap>, want: &[(&str, &str)], what: &str) {
    let want: BTreeMap<String, String> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let start = Instant::now();
    while start.elapsed() < EVENTUALLY {
        if snapshot(store) == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: store is {:?}, want {want:?}", snapshot(store));
}

async fn reflector_scenario(config: watcher::Config) {
    let dir = tempfile::tempdir().unwrap();
    let server = ControlPlane::start_api_only(dir.path()).await.unwrap();
    let proxy = server.fault_proxy().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    cms.create(&PostParams::default(), &cm("pre", "0"))
        .await
        .unwrap();

    let (reader, writer) = reflector::store();
    let watched: Api<ConfigMap> = Api::default_namespaced(proxy.client().unwrap());
    let stream = reflector(writer, watcher(watched, config))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {}
    });
    converges(&reader, &[("pre", "0")], "initial list").await;

    cms.create(&PostParams::default(), &cm("a", "1"))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("b", "1"))
        .await
        .unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .unwrap();
    cms.delete("pre", &DeleteParams::default()).await.unwrap();
    converges(
        &reader,
        &[("a", "2"), ("b", "1")],
        "after create/update/delete",
    )
    .await;

    // every open watch is cut; changes made meanwhile still arrive
    proxy.faults().drop_watches();
    cms.delete("b", &DeleteParams::default()).await.unwrap();
    cms.create(&PostParams::default(), &cm("c", "3"))
        .await
        .unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "4"}})),
    )
    .await
    .unwrap();
    converges(&reader, &[("a", "4"), ("c", "3")], "after drop_watches").await;

    task.abort();
}

#[tokio::test]
async fn reflector_converges_with_list_then_watch() {
    reflector_scenario(watcher::Config::default().timeout(30)).await;
}

#[tokio::test]
async fn reflector_converges_with_streaming_lists() {
    reflector_scenario(watcher::Config::default().streaming_lists().timeout(30)).await;
}

#[tokio::test]
async fn watcher_filters_by_label_selector_transitions() {
    let dir = tempfile::tempdir().unwrap();
    let server = ControlPlane::start_api_only(dir.path()).await.unwrap();
    let client = server.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default().labels("app=r")),
    )
    .default_backoff()
    .applied_objects();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {}
    });
    cms.create(&PostParams::default(), &cm("in", "1"))
        .await
        .unwrap();
    converges(&reader, &[("in", "1")], "labelled object seen").await;
    // relabelling out of the selector reads as a deletion to this watcher
    cms.patch(
        "in",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
    )
    .await
    .unwrap();
    converges(&reader, &[], "relabelled object gone").await;
    cms.patch(
        "in",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "r"}}})),
    )
    .await
    .unwrap();
    converges(&reader, &[("in", "1")], "relabelled object back").await;
    task.abort();
}

struct Ctx {
    api: Api<ConfigMap>,
    recorder: Recorder,
    applied: AtomicUsize,
    cleaned: AtomicUsize,
}

#[derive(Debug, thiserror::Error)]
enum ReconcileError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(String),
}

async fn reconcile(obj: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let api = ctx.api.clone();
    let ctx2 = ctx.clone();
    finalizer(&api, "testbed.io/cleanup", obj, |event| async move {
        match event {
            FinalizerEvent::Apply(o) => {
                ctx2.applied.fetch_add(1, Ordering::SeqCst);
                let status = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": o.name_any()}, "data": {"reconciled": "yes"}});
                ctx2.api.patch(&o.name_any(), &PatchParams::apply("testbed-controller").force(), &Patch::Apply(&status)).await?;
                ctx2.recorder
                    .publish(
                        &Event { type_: EventType::Normal, reason: "Reconciled".into(), note: Some("all good".into()), action: "Reconcile".into(), secondary: None },
                        &o.object_ref(&()),
                    )
                    .await?;
                Ok(Action::await_change())
            }
            FinalizerEvent::Cleanup(_) => {
                ctx2.cleaned.fetch_add(1, Ordering::SeqCst);
                Ok::<_, kube::Error>(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| ReconcileError::Finalizer(e.to_string()))
}

fn error_policy(_obj: Arc<ConfigMap>, _err: &ReconcileError, _ctx: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < EVENTUALLY {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not within {EVENTUALLY:?}: {what}");
}

#[tokio::test]
async fn controller_with_finalizer_and_events_runs_its_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let server = ControlPlane::start_api_only(dir.path()).await.unwrap();
    let client: Client = server.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let ctx = Arc::new(Ctx {
        api: cms.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "testbed-controller".into(),
                instance: None,
            },
        ),
        applied: AtomicUsize::new(0),
        cleaned: AtomicUsize::new(0),
    });
    let controller = Controller::new(cms.clone(), watcher::Config::default())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| async {});
    let task = tokio::spawn(controller);

    cms.create(&PostParams::default(), &cm("managed", "1"))
        .await
        .unwrap();
    eventually("finalizer added and object reconciled", || async {
        let o = cms.get("managed").await.unwrap();
        o.finalizers().iter().any(|f| f == "testbed.io/cleanup")
            && o.data
                .unwrap_or_default()
                .get("reconciled")
                .map(String::as_str)
                == Some("yes")
    })
    .await;
    let events: Api<K8sEvent> = Api::default_namespaced(client.clone());
    eventually("event recorded", || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Reconciled"))
    })
    .await;

    cms.delete("managed", &DeleteParams::default())
        .await
        .unwrap();
    eventually("cleanup ran and the object is gone", || async {
        cms.get_opt("managed").await.unwrap().is_none()
    })
    .await;
    assert_eq!(ctx.cleaned.load(Ordering::SeqCst), 1);
    assert!(ctx.applied.load(Ordering::SeqCst) >= 1);
    task.abort();
}

#[tokio::test]
async fn metadata_api_and_metadata_watcher_see_partial_objects() {
    let dir = tempfile::tempdir().unwrap();
    let server = ControlPlane::start_api_only(dir.path()).await.unwrap();
    let client = server.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("m1", "1"))
        .await
        .unwrap();
    let meta = cms.get_metadata("m1").await.unwrap();
    assert_eq!(
        meta.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    assert_eq!(meta.labels().get("app").map(String::as_str), Some("r"));
    let list = cms.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);

    // Api<PartialObjectMeta<K>> makes metadata-only requests
    let metas: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::default_namespaced(client.clone());
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(metas, watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {}
    });
    cms.create(&PostParams::default(), &cm("m2", "2"))
        .await
        .unwrap();
    let start = Instant::now();
    loop {
        let mut names: Vec<String> = reader.state().iter().map(|o| o.name_any()).collect();
        names.sort();
        if names == ["m1", "m2"] {
            break;
        }
        assert!(start.elapsed() < EVENTUALLY, "metadata store is {names:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    task.abort();
}

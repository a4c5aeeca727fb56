//! Conformance-style scenarios for the API stand-in, driven through kube-rs
//! exactly as the operator talks to a real apiserver.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use steward_testbed::ApiServer;
use steward_testbed::apiserver::{ApiServerOptions, FailWith, Verb};

const EVENTUALLY: Duration = Duration::from_secs(10);

fn sample_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "samples.conformance.testbed.io"},
        "spec": {
            "group": "conformance.testbed.io",
            "scope": "Namespaced",
            "names": {"plural": "samples", "singular": "sample", "kind": "Sample", "shortNames": ["smp"]},
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["size"],
                            "x-kubernetes-validations": [
                                {"rule": "!has(self.backup)", "message": "spec.backup is not implemented"},
                                {"rule": "self.mode == oldSelf.mode", "message": "mode is immutable"}
                            ],
                            "properties": {
                                "size": {"type": "integer", "minimum": 1, "maximum": 7},
                                "version": {"type": "string", "default": "3.5.1", "pattern": "^3\\.5\\.[0-9]+$"},
                                "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe"},
                                "backup": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                            }
                        },
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }}
            }]
        }
    })
}

async fn setup() -> (tempfile::TempDir, ApiServer, Client) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(dir.path()).expect("start the stand-in");
    let client = server.client().await.expect("client");
    (dir, server, client)
}

async fn samples(client: &Client) -> Api<DynamicObject> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(sample_crd()).expect("CRD parses");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create CRD");
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("conformance.testbed.io", "v1", "Sample"),
        "samples",
    );
    Api::namespaced_with(client.clone(), "default", &ar)
}

fn sample(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "conformance.testbed.io/v1",
        "kind": "Sample",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("sample parses")
}

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data}))
        .expect("configmap parses")
}

fn api_error(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
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
async fn create_sets_server_fields_and_honours_generate_name() {
    let (_dir, _server, client) = setup().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mut obj = cm("", &[("a", "1")]);
    obj.metadata.name = None;
    obj.metadata.generate_name = Some("gen-".into());
    let created = cms.create(&PostParams::default(), &obj).await.unwrap();
    let name = created.name_any();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    let rv: u64 = created.resource_version().unwrap().parse().unwrap();
    assert!(rv > 0);

    let again = cms
        .create(&PostParams::default(), &cm(&name, &[]))
        .await
        .unwrap_err();
    let status = api_error(again);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "AlreadyExists")
    );
    let missing = api_error(cms.get("nope").await.unwrap_err());
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));

    let elsewhere: Api<ConfigMap> = Api::namespaced(client.clone(), "no-such-ns");
    let err = api_error(
        elsewhere
            .create(&PostParams::default(), &cm("x", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 404, "creating in a missing namespace: {err:?}");
}

#[tokio::test]
async fn list_then_watch_resumes_from_the_list_version() {
    let (_dir, _server, client) = setup().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("a", &[("v", "1")]))
        .await
        .unwrap();
    let list = cms.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let rv = list.metadata.resource_version.clone().unwrap();

    cms.create(&PostParams::default(), &cm("b", &[]))
        .await
        .unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();

    let stream = cms
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap();
    let events: Vec<WatchEvent<ConfigMap>> = stream.take(3).try_collect().await.unwrap();
    let seen: Vec<(String, String)> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(o) => ("ADDED".into(), o.name_any()),
            WatchEvent::Modified(o) => ("MODIFIED".into(), o.name_any()),
            WatchEvent::Deleted(o) => ("DELETED".into(), o.name_any()),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let want: Vec<(String, String)> = [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "a")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(seen, want);
    // versions strictly increase along the stream
    let rvs: Vec<u64> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                o.resource_version().unwrap().parse().unwrap()
            }
            _ => 0,
        })
        .collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "{rvs:?}");
    assert!(rvs[0] > rv.parse::<u64>().unwrap());
}

#[tokio::test]
async fn watch_with_initial_events_ends_them_with_a_bookmark() {
    let (_dir, _server, client) = setup().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("one", &[]))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("two", &[]))
        .await
        .unwrap();
    let mut stream = cms
        .watch(&WatchParams::streaming_lists().timeout(5), "")
        .await
        .unwrap()
        .boxed();
    let mut names = Vec::new();
    loop {
        match stream
            .try_next()
            .await
            .unwrap()
            .expect("stream ends only after the bookmark")
        {
            WatchEvent::Added(o) => names.push(o.name_any()),
            WatchEvent::Bookmark(b) => {
                assert_eq!(
                    b.metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .map(String::as_str),
                    Some("true")
                );
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(names, ["one", "two"]);
}

#[tokio::test]
async fn stale_resource_version_conflicts() {
    let (_dir, _server, client) = setup().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let created = cms
        .create(&PostParams::default(), &cm("c", &[("k", "0")]))
        .await
        .unwrap();
    let mut first = created.clone();
    first.data.as_mut().unwrap().insert("k".into(), "1".into());
    let updated = cms
        .replace("c", &PostParams::default(), &first)
        .await
        .unwrap();
    assert_ne!(updated.resource_version(), created.resource_version());

    let mut stale = created.clone();
    stale.data.as_mut().unwrap().insert("k".into(), "2".into());
    let err = api_error(
        cms.replace("c", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(cms.get("c").await.unwrap().data.unwrap()["k"], "1");

    // a merge patch carrying a stale version is a precondition too
    let patch =
        json!({"metadata": {"resourceVersion": created.resource_version()}, "data": {"k": "3"}});
    let err = api_error(
        cms.patch("c", &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
}

#[tokio::test]
async fn generation_moves_only_with_spec() {
    let (_dir, _server, client) = setup().await;
    let api = samples(&client).await;
    let s = api
        .create(&PostParams::default(), &sample("g", json!({"size": 3})))
        .await
        .unwrap();
    assert_eq!(s.metadata.generation, Some(1));
    assert_eq!(s.data["spec"]["version"], "3.5.1", "schema default applied");

    let s = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        s.metadata.generation,
        Some(1),
        "metadata change keeps generation"
    );
    let s = api
        .patch_status(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "x"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        s.metadata.generation,
        Some(1),
        "status change keeps generation"
    );
    let s = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(
        s.metadata.generation,
        Some(2),
        "spec change bumps generation"
    );
    let before = s.resource_version();
    let s = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(s.metadata.generation, Some(2));
    assert_eq!(s.resource_version(), before, "a no-op write is not a write");
}

#[tokio::test]
async fn status_subresource_isolates_both_ways() {
    let (_dir, _server, client) = setup().await;
    let api = samples(&client).await;
    let mut with_status = sample("s", json!({"size": 3}));
    with_status.data["status"] = json!({"phase": "ignored-on-create"});
    let s = api
        .create(&PostParams::default(), &with_status)
        .await
        .unwrap();
    assert!(
        s.data.get("status").is_none(),
        "create drops status: {:?}",
        s.data
    );

    // status endpoint: spec changes are ignored
    let mut obj = api.get("s").await.unwrap();
    obj.data["status"] = json!({"phase": "Ready"});
    obj.data["spec"]["size"] = json!(7);
    let after = api
        .replace_status("s", &PostParams::default(), &obj)
        .await
        .unwrap();
    assert_eq!(after.data["status"]["phase"], "Ready");
    assert_eq!(after.data["spec"]["size"], 3);

    // main endpoint: status changes are ignored
    let mut obj = api.get("s").await.unwrap();
    obj.data["status"] = json!({"phase": "Hacked"});
    obj.data["spec"]["size"] = json!(5);
    let after = api
        .replace("s", &PostParams::default(), &obj)
        .await
        .unwrap();
    assert_eq!(after.data["status"]["phase"], "Ready");
    assert_eq!(after.data["spec"]["size"], 5);
    let fetched = api.get("s").await.unwrap();
    assert_eq!(fetched.data["status"]["phase"], "Ready");
}

#[tokio::test]
async fn finalizers_hold_deletion_until_emptied() {
    let (_dir, _server, client) = setup().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mut obj = cm("f", &[]);
    obj.metadata.finalizers = Some(vec!["testbed.io/hold".into()]);
    cms.create(&PostParams::default(), &obj).await.unwrap();
    cms.delete("f", &DeleteParams::default()).await.unwrap();
    let held = cms.get("f").await.unwrap();
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "deletionTimestamp set"
    );

    let err = api_error(
        cms.patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["testbed.io/hold", "new"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422, "no new finalizers on a deleting object");

    let patch = json!([{"op": "test", "path": "/metadata/finalizers", "value": ["testbed.io/hold"]}, {"op": "remove", "path": "/metadata/finalizers"}]);
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::<()>::Json(serde_json::from_value(patch).unwrap()),
    )
    .await
    .unwrap();
    let err = api_error(cms.get("f").await.unwrap_err());
    assert_eq!(err.code, 404, "gone once finalizers are empty");
}

async fn owned_by(
    cms: &Api<ConfigMap>,
    name: &str,
    owner: &ConfigMap,
    block: bool,
    finalizer: bool,
) -> ConfigMap {
    let mut obj = cm(name, &[]);
    obj.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "name": owner.name_any(), "uid": owner.uid().unwrap(), "blockOwnerDeletion": block
    }))
    .unwrap()]);
    if finalizer {
        obj.metadata.finalizers = Some(vec!["testbed.io/hold".into()]);
    }
    cms.create(&PostParams::default(), &obj).await.unwrap()
}

#[tokio::test]
async fn owner_references_collect_garbage_per_propagation_policy() {
    let (_dir, _server, client) = setup().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());

    // background: dependents follow their owner
    let owner = cms
        .create(&PostParams::default(), &cm("owner", &[]))
        .await
        .unwrap();
    owned_by(&cms, "child", &owner, false, false).await;
    owned_by(&cms, "child2", &owner, false, false).await;
    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually("dependents collected", || async {
        cms.get_opt("child").await.unwrap().is_none()
            && cms.get_opt("child2").await.unwrap().is_none()
    })
    .await;

    // a dependent whose owner is already gone is collected too
    let ghost: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "ghost-owner", "uid": "00000000-0000-0000-0000-000000000000"}}),
    )
    .unwrap();
    owned_by(&cms, "stray", &ghost, false, false).await;
    eventually("dependent of a missing owner collected", || async {
        cms.get_opt("stray").await.unwrap().is_none()
    })
    .await;

    // orphan: dependents stay, without the owner reference
    let owner = cms
        .create(&PostParams::default(), &cm("owner", &[]))
        .await
        .unwrap();
    owned_by(&cms, "orphan", &owner, false, false).await;
    cms.delete("owner", &DeleteParams::orphan()).await.unwrap();
    assert!(cms.get_opt("owner").await.unwrap().is_none());
    let orphan = cms.get("orphan").await.unwrap();
    assert!(
        orphan
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );

    // foreground: the owner waits for its blocking dependent
    let owner = cms
        .create(&PostParams::default(), &cm("fg", &[]))
        .await
        .unwrap();
    owned_by(&cms, "fg-child", &owner, true, true).await;
    cms.delete("fg", &DeleteParams::foreground()).await.unwrap();
    let waiting = cms.get("fg").await.unwrap();
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert!(
        waiting
            .finalizers()
            .iter()
            .any(|f| f == "foregroundDeletion")
    );
    let child = cms.get("fg-child").await.unwrap();
    assert!(
        child.metadata.deletion_timestamp.is_some(),
        "dependent is being deleted"
    );
    cms.patch(
        "fg-child",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("foreground owner removed after its dependent", || async {
        cms.get_opt("fg").await.unwrap().is_none()
    })
    .await;
}

#[tokio::test]
async fn namespace_deletion_removes_its_contents() {
    let (_dir, _server, client) = setup().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "doomed"}})).unwrap(),
    )
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    cms.create(&PostParams::default(), &cm("inside", &[]))
        .await
        .unwrap();
    nss.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    eventually("namespace and contents gone", || async {
        nss.get_opt("doomed").await.unwrap().is_none()
    })
    .await;
    assert!(cms.get_opt("inside").await.unwrap().is_none());
}

#[tokio::test]
async fn schema_invalid_custom_resources_get_422_with_the_field_path() {
    let (_dir, _server, client) = setup().await;
    let api = samples(&client).await;
    let cases = [
        (json!({"size": "three"}), "spec.size"),
        (json!({"size": 9}), "spec.size"),
        (json!({}), "spec.size"),
        (json!({"size": 3, "mode": "reckless"}), "spec.mode"),
        (json!({"size": 3, "version": "3.4.0"}), "spec.version"),
        (json!({"size": 3, "backup": {"schedule": "daily"}}), "spec"),
    ];
    for (i, (spec, field)) in cases.into_iter().enumerate() {
        let err = api_error(
            api.create(
                &PostParams::default(),
                &sample(&format!("bad{i}"), spec.clone()),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(
            (err.code, err.reason.as_str()),
            (422, "Invalid"),
            "{spec}: {err:?}"
        );
        let causes = err
            .details
            .as_ref()
            .map(|d| d.causes.clone())
            .unwrap_or_default();
        assert!(
            causes.iter().any(|c| c.field == field),
            "{spec}: causes {causes:?}"
        );
        assert!(err.message.contains(field), "{spec}: {}", err.message);
    }
    let err = api_error(
        api.create(
            &PostParams::default(),
            &sample("bad-cel", json!({"size": 3, "backup": {}})),
        )
        .await
        .unwrap_err(),
    );
    assert!(
        err.message.contains("spec.backup is not implemented"),
        "{}",
        err.message
    );

    // transition rule: mode may not change once set
    api.create(
        &PostParams::default(),
        &sample("ok", json!({"size": 3, "mode": "fast"})),
    )
    .await
    .unwrap();
    let err = api_error(
        api.patch(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "safe"}})),
        )
        .await
        .unwrap_err(),
    );
    assert!(err.message.contains("mode is immutable"), "{}", err.message);

    // unknown fields are pruned, as the real apiserver does by default
    let s = api
        .create(
            &PostParams::default(),
            &sample("pruned", json!({"size": 3, "surprise": true})),
        )
        .await
        .unwrap();
    assert!(s.data["spec"].get("surprise").is_none());
}

#[tokio::test]
async fn label_and_field_selectors_filter_lists() {
    let (_dir, _server, client) = setup().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for (name, labels) in [
        ("a", json!({"app": "etcd", "tier": "db"})),
        ("b", json!({"app": "web"})),
        ("c", json!({})),
    ] {
        let obj: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
        cms.create(&PostParams::default(), &obj).await.unwrap();
    }
    let names = |sel: &'static str, field: bool| {
        let cms = cms.clone();
        async move {
            let lp = if field {
                ListParams::default().fields(sel)
            } else {
                ListParams::default().labels(sel)
            };
            cms.list(&lp)
                .await
                .unwrap()
                .items
                .iter()
                .map(|o| o.name_any())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(names("app=etcd", false).await, ["a"]);
    assert_eq!(names("app!=etcd", false).await, ["b", "c"]);
    assert_eq!(names("app in (etcd,web)", false).await, ["a", "b"]);
    assert_eq!(names("app notin (etcd)", false).await, ["b", "c"]);
    assert_eq!(names("tier", false).await, ["a"]);
    assert_eq!(names("!app", false).await, ["c"]);
    assert_eq!(names("metadata.name=b", true).await, ["b"]);
    assert_eq!(names("metadata.name!=b", true).await, ["a", "c"]);
    assert_eq!(names("metadata.namespace=default", true).await.len(), 3);
    let err = api_error(
        cms.list(&ListParams::default().labels("app in etcd"))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 400);
}

#[tokio::test]
async fn too_old_resource_version_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let options = ApiServerOptions {
        event_log_capacity: 3,
        ..Default::default()
    };
    let server = ApiServer::start_with(dir.path(), options).unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let first = cms
        .create(&PostParams::default(), &cm("x", &[]))
        .await
        .unwrap();
    let old_rv = first.resource_version().unwrap();
    for i in 0..5 {
        cms.patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"i": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    let mut stream = cms
        .watch(&WatchParams::default().timeout(5), &old_rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(status)) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
        }
        other => panic!("expected 410, got {other:?}"),
    }
    // the most recent versions are still watchable
    let recent = cms.get("x").await.unwrap().resource_version().unwrap();
    cms.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"i": "last"}})),
    )
    .await
    .unwrap();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(5), &recent)
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        stream.try_next().await.unwrap(),
        Some(WatchEvent::Modified(_))
    ));

    server.compact();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(5), &recent)
        .await
        .unwrap()
        .boxed();
    assert!(
        matches!(stream.try_next().await.unwrap(), Some(WatchEvent::Error(s)) if s.code == 410)
    );
}

#[tokio::test]
async fn scale_subresource_maps_to_the_declared_paths() {
    let (_dir, _server, client) = setup().await;
    let api = samples(&client).await;
    api.create(&PostParams::default(), &sample("sc", json!({"size": 3})))
        .await
        .unwrap();
    api.patch_status(
        "sc",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"size": 2}})),
    )
    .await
    .unwrap();
    let scale = api.get_scale("sc").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(3));
    assert_eq!(scale.status.unwrap().replicas, 2);
    api.patch_scale(
        "sc",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .unwrap();
    assert_eq!(api.get("sc").await.unwrap().data["spec"]["size"], 5);
}

#[tokio::test]
async fn server_side_apply_merges_and_reports_conflicts() {
    let (_dir, _server, client) = setup().await;
    let api = samples(&client).await;
    let applied = json!({"apiVersion": "conformance.testbed.io/v1", "kind": "Sample", "metadata": {"name": "ssa", "labels": {"by": "one"}}, "spec": {"size": 3}});
    let s = api
        .patch("ssa", &PatchParams::apply("one"), &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(s.data["spec"]["size"], 3);
    let managers: Vec<String> = s
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, ["one"]);

    // another manager may add fields without a conflict
    let theirs = json!({"apiVersion": "conformance.testbed.io/v1", "kind": "Sample", "metadata": {"name": "ssa"}, "spec": {"version": "3.5.2"}});
    let s = api
        .patch("ssa", &PatchParams::apply("two"), &Patch::Apply(&theirs))
        .await
        .unwrap();
    assert_eq!(
        (
            s.data["spec"]["size"].clone(),
            s.data["spec"]["version"].clone()
        ),
        (json!(3), json!("3.5.2"))
    );
    assert_eq!(
        s.labels().get("by").map(String::as_str),
        Some("one"),
        "fields the patch does not mention survive"
    );

    // but changing a field "one" owns is a conflict unless forced
    let grab = json!({"apiVersion": "conformance.testbed.io/v1", "kind": "Sample", "metadata": {"name": "ssa"}, "spec": {"size": 5}});
    let err = api_error(
        api.patch("ssa", &PatchParams::apply("two"), &Patch::Apply(&grab))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    assert!(err.message.contains(".spec.size"), "{}", err.message);
    let s = api
        .patch(
            "ssa",
            &PatchParams::apply("two").force(),
            &Patch::Apply(&grab),
        )
        .await
        .unwrap();
    assert_eq!(s.data["spec"]["size"], 5);

    // status through apply on the status endpoint
    let status = json!({"apiVersion": "conformance.testbed.io/v1", "kind": "Sample", "metadata": {"name": "ssa"}, "status": {"phase": "Ready"}});
    let s = api
        .patch_status(
            "ssa",
            &PatchParams::apply("ctl").force(),
            &Patch::Apply(&status),
        )
        .await
        .unwrap();
    assert_eq!(s.data["status"]["phase"], "Ready");
    assert_eq!(s.data["spec"]["size"], 5);
}

#[tokio::test]
async fn crd_resources_appear_in_discovery_and_go_with_the_crd() {
    let (_dir, _server, client) = setup().await;
    let api = samples(&client).await;
    api.create(&PostParams::default(), &sample("d", json!({"size": 1})))
        .await
        .unwrap();
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let (ar, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.plural == "samples")
        .expect("samples discovered");
    assert_eq!(ar.kind, "Sample");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    assert!(
        discovery.groups().any(|g| g.name() == "policy"),
        "policy group served"
    );

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("samples.conformance.testbed.io", &DeleteParams::default())
        .await
        .unwrap();
    let err = api_error(api.get("d").await.unwrap_err());
    assert_eq!(err.code, 404);
}

#[tokio::test]
async fn running_pods_delete_gracefully_for_their_kubelet() {
    let (_dir, _server, client) = setup().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"nodeName": "local", "containers": [{"name": "c", "image": "etcd"}]}})).unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    pods.delete("p", &DeleteParams::default()).await.unwrap();
    let terminating = pods.get("p").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    pods.delete("p", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert!(pods.get_opt("p").await.unwrap().is_none());

    // an unscheduled Pod goes at once
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "q"}, "spec": {"containers": [{"name": "c", "image": "etcd"}]}})).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.delete("q", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("q").await.unwrap().is_none());
}

#[tokio::test]
async fn injected_failures_hit_the_next_n_requests_only() {
    let (_dir, server, client) = setup().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let faults = server.faults();

    // kube's default client retries a 429 (honouring Retry-After) ...
    faults.fail_next(Verb::Create, "configmaps", 1, FailWith::TooManyRequests);
    cms.create(&PostParams::default(), &cm("retried", &[]))
        .await
        .unwrap();
    assert_eq!(faults.injected(), 1);
    // ... so see the 429 itself through a client without retries
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.default_retry = false;
    let raw: Api<ConfigMap> = Api::default_namespaced(Client::try_from(config).unwrap());
    faults.fail_next(Verb::Create, "configmaps", 1, FailWith::TooManyRequests);
    let err = api_error(
        raw.create(&PostParams::default(), &cm("x", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (429, "TooManyRequests"));
    assert!(
        cms.get_opt("x").await.unwrap().is_none(),
        "the failed create wrote nothing"
    );
    cms.create(&PostParams::default(), &cm("x", &[]))
        .await
        .unwrap();
    cms.delete("retried", &DeleteParams::default())
        .await
        .unwrap();

    faults.fail_next(Verb::List, "configmaps", 2, FailWith::Internal);
    for _ in 0..2 {
        assert_eq!(
            api_error(cms.list(&ListParams::default()).await.unwrap_err()).code,
            500
        );
    }
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    faults.fail_next(Verb::Patch, "configmaps", 1, FailWith::Conflict);
    let patch = Patch::Merge(json!({"data": {"a": "1"}}));
    assert_eq!(
        api_error(
            cms.patch("x", &PatchParams::default(), &patch)
                .await
                .unwrap_err()
        )
        .code,
        409
    );
    cms.patch("x", &PatchParams::default(), &patch)
        .await
        .unwrap();

    // a rule on another resource or verb does not fire here
    faults.fail_next(Verb::Delete, "secrets", 1, FailWith::Internal);
    faults.fail_next(Verb::Get, "configmaps", 1, FailWith::Internal);
    cms.delete("x", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_error(cms.get("x").await.unwrap_err()).code, 500);
    assert_eq!(faults.injected(), 6);
    assert_eq!(faults.pending(), 1);
    faults.clear();
    assert_eq!(faults.pending(), 0);

    // group-qualified and subresource rules
    let api = samples(&client).await;
    api.create(&PostParams::default(), &sample("f", json!({"size": 1})))
        .await
        .unwrap();
    faults.fail_next(
        Verb::Patch,
        "samples.conformance.testbed.io/status",
        1,
        FailWith::Internal,
    );
    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 2}})),
    )
    .await
    .unwrap();
    let st = Patch::Merge(json!({"status": {"phase": "x"}}));
    assert_eq!(
        api_error(
            api.patch_status("f", &PatchParams::default(), &st)
                .await
                .unwrap_err()
        )
        .code,
        500
    );
    api.patch_status("f", &PatchParams::default(), &st)
        .await
        .unwrap();

    faults.fail_next(Verb::Watch, "configmaps", 1, FailWith::Internal);
    let err = cms
        .watch(&WatchParams::default(), "0")
        .await
        .err()
        .expect("the watch fails");
    assert_eq!(api_error(err).code, 500);
    assert!(
        cms.watch(&WatchParams::default().timeout(1), "0")
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn latency_delays_every_request() {
    let (_dir, server, client) = setup().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.list(&ListParams::default()).await.unwrap();
    let delay = Duration::from_millis(300);
    server.faults().set_latency(delay);
    let start = Instant::now();
    cms.list(&ListParams::default()).await.unwrap();
    assert!(start.elapsed() >= delay, "took {:?}", start.elapsed());
    server.faults().set_latency(Duration::ZERO);
}

#[tokio::test]
async fn dropping_watches_ends_every_open_stream() {
    let (_dir, server, client) = setup().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let list = cms.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let mut a = cms
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .unwrap()
        .boxed();
    let mut b = cms
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &cm("seen", &[]))
        .await
        .unwrap();
    assert!(matches!(
        a.try_next().await.unwrap(),
        Some(WatchEvent::Added(_))
    ));
    server.faults().drop_watches();
    let ended = tokio::time::timeout(EVENTUALLY, async {
        let a_end = a.try_next().await;
        let b_first = b.try_next().await;
        let b_end = b.try_next().await;
        (
            a_end.ok().flatten().is_none(),
            matches!(b_first, Ok(Some(WatchEvent::Added(_)))),
            b_end.ok().flatten().is_none(),
        )
    })
    .await
    .expect("streams end after drop_watches");
    assert_eq!(ended, (true, true, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_inside_the_test_runtime_and_shuts_down() {
    let dir = tempfile::tempdir().unwrap();
    let server = ApiServer::start_in_runtime(dir.path(), ApiServerOptions::default())
        .await
        .unwrap();
    let url = server.url().to_string();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    cms.create(&PostParams::default(), &cm("here", &[]))
        .await
        .unwrap();
    assert!(server.resource_version() > 1);
    let kubeconfig = std::fs::read_to_string(dir.path().join("kubeconfig")).unwrap();
    assert!(
        kubeconfig.contains(&url) && kubeconfig.contains("namespace: default"),
        "{kubeconfig}"
    );
    server.shutdown().await;
    let addr = url.trim_start_matches("http://").to_string();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "nothing listens after shutdown"
    );
}

#[tokio::test]
async fn dropping_the_server_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = ApiServer::start(dir.path()).unwrap();
    let addr = server.url().trim_start_matches("http://").to_string();
    assert!(tokio::net::TcpStream::connect(&addr).await.is_ok());
    drop(server);
    assert!(
        tokio::net::TcpStream::connect(&addr).await.is_err(),
        "nothing listens after drop"
    );
}

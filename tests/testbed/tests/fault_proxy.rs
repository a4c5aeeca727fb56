//! The fault proxy in front of the real kube-apiserver: the next N requests
//! of a verb and resource fail as asked, with the apiserver's Status shape,
//! and everything else passes through.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use steward_testbed::{ControlPlane, FailWith, Verb};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": "1"}})).unwrap()
}

fn code(r: Result<impl std::fmt::Debug, kube::Error>) -> u16 {
    match r {
        Err(kube::Error::Api(s)) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A GET through the proxy; returns the whole response as text.
async fn raw_get(base: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_requests_fail_as_asked_and_the_rest_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    let plane = ControlPlane::start_api_only(dir.path()).await.unwrap();
    let proxy = plane.fault_proxy().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(proxy.client().unwrap(), "default");
    let faults = proxy.faults();

    faults.fail_next(Verb::Create, "configmaps", 2, FailWith::Internal);
    assert_eq!(
        code(cms.create(&PostParams::default(), &cm("a")).await),
        500
    );
    assert_eq!(
        code(cms.create(&PostParams::default(), &cm("a")).await),
        500
    );
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    assert_eq!(faults.injected(), 2);

    faults.fail_next(Verb::Patch, "configmaps", 1, FailWith::Conflict);
    let patch = Patch::Merge(json!({"data": {"v": "2"}}));
    assert_eq!(
        code(cms.patch("a", &PatchParams::default(), &patch).await),
        409
    );
    cms.patch("a", &PatchParams::default(), &patch)
        .await
        .unwrap();

    // A rule for another resource leaves configmaps alone.
    faults.fail_next(Verb::Get, "secrets", 1, FailWith::TooManyRequests);
    assert_eq!(
        cms.get("a").await.unwrap().data.unwrap()["v"],
        "2",
        "the write went through to the real apiserver"
    );
    // Raw HTTP, because kube-rs retries a 429 by itself.
    let head = raw_get(proxy.url(), "/api/v1/namespaces/default/secrets/missing").await;
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    // The rule is used up: the real answer, no such Secret.
    let head = raw_get(proxy.url(), "/api/v1/namespaces/default/secrets/missing").await;
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    assert!(head.contains(r#"secrets \"missing\" not found"#), "{head}");
    assert_eq!(faults.injected(), 4);
    plane.shutdown().await;
}

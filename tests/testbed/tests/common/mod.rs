//! Helpers shared by the kubelet's integration tests.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

/// A generous bound: these are correctness tests, not timing tests.
pub const EVENTUALLY: Duration = Duration::from_secs(120);

/// Polls the Pod until `pred` holds; panics with its last status if it
/// never does within [`EVENTUALLY`].
pub async fn wait_pod(api: &Api<Pod>, name: &str, what: &str, pred: impl Fn(&Pod) -> bool) -> Pod {
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    let mut last = None;
    loop {
        if let Ok(Some(p)) = api.get_opt(name).await {
            if pred(&p) {
                return p;
            }
            last = Some(p);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pod {name} never became {what}; last status: {}",
            last.and_then(|p| p.status)
                .map(|s| serde_json::to_string_pretty(&s).unwrap())
                .unwrap_or_else(|| "none".into())
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

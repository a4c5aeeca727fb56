//! The operator's own health, as its Pod's probes read it, and the HTTP
//! endpoints that serve it beside the metrics.
//!
//! - `/healthz` (liveness): the process answers. Nothing the operator
//!   waits on (the API, etcd, the Lease) makes it fail, since a restart
//!   would not fix any of them and would drop the warm caches.
//! - `/readyz` (readiness): the watch caches have synced and this replica
//!   knows whether it leads (it has read the Lease once, or runs without
//!   leader election). A standby replica is ready: it is what a rollout
//!   waits for before stopping the old leader, which then hands the Lease
//!   over.
//! - `/metrics`: Prometheus text, see [`crate::metrics`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use axum::routing::get;

use crate::metrics::Metrics;

/// What `/readyz` waits for; set once each, never unset (losing the Lease
/// ends the process).
#[derive(Debug, Default)]
pub struct Readiness {
    caches_synced: AtomicBool,
    leader_known: AtomicBool,
}

impl Readiness {
    pub fn caches_synced(&self) {
        self.caches_synced.store(true, Ordering::Release);
    }

    pub fn leader_known(&self) {
        self.leader_known.store(true, Ordering::Release);
    }

    /// `Ok` when ready, else what is still missing, for the probe's body.
    pub fn check(&self) -> Result<(), String> {
        let mut missing = Vec::new();
        if !self.caches_synced.load(Ordering::Acquire) {
            missing.push("the watch caches have not synced");
        }
        if !self.leader_known.load(Ordering::Acquire) {
            missing.push("the leader Lease has not been read");
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("not ready: {}", missing.join("; ")))
        }
    }
}

pub fn router(metrics: Arc<Metrics>, readiness: Arc<Readiness>) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let readiness = readiness.clone();
                async move {
                    match readiness.check() {
                        Ok(()) => (StatusCode::OK, "ok".to_owned()),
                        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move { m.encode() }
            }),
        )
}

/// Serves [`router`] on `listener` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
) -> std::io::Result<()> {
    axum::serve(listener, router(metrics, readiness)).await
}

/// Binds `addr` now, so a taken port fails `run` at startup instead of
/// leaving a Pod whose probes reach nothing.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    use anyhow::Context as _;
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot serve /metrics, /healthz and /readyz on {addr}"))
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// One real HTTP/1.0 request against the real server.
    async fn get_path(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut raw = String::new();
        tcp.read_to_string(&mut raw).await.unwrap();
        let code = raw.split(' ').nth(1).unwrap().parse().unwrap();
        let body = raw.split_once("\r\n\r\n").unwrap().1.to_owned();
        (code, body)
    }

    #[tokio::test]
    async fn readyz_waits_for_the_caches_and_the_lease_and_says_which() {
        let readiness = Arc::new(Readiness::default());
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(
            listener,
            Arc::new(Metrics::default()),
            readiness.clone(),
        ));

        let (code, body) = get_path(addr, "/readyz").await;
        assert_eq!(code, 503);
        assert!(body.contains("caches") && body.contains("Lease"), "{body}");
        assert_eq!(get_path(addr, "/healthz").await, (200, "ok".into()));

        readiness.caches_synced();
        let (code, body) = get_path(addr, "/readyz").await;
        assert_eq!(code, 503);
        assert!(!body.contains("caches") && body.contains("Lease"), "{body}");

        readiness.leader_known();
        assert_eq!(get_path(addr, "/readyz").await, (200, "ok".into()));
        let (code, body) = get_path(addr, "/metrics").await;
        assert_eq!(code, 200);
        assert!(body.contains("etcd_steward_"), "{body}");
    }

    #[tokio::test]
    async fn a_taken_port_is_an_error_that_names_the_address() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let err = bind(addr).await.unwrap_err();
        assert!(format!("{err:#}").contains(&addr.to_string()), "{err:#}");
    }
}

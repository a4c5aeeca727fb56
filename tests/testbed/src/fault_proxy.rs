//! A fault-injecting reverse proxy in front of the real kube-apiserver: the
//! API faults tests need (fail the next N requests of a verb and resource
//! with 409, 429 or 500; add latency; cut open watches) without an API
//! server of our own. Everything else passes through untouched.
//!
//! Clients speak plain HTTP to the proxy on loopback; the proxy speaks TLS to
//! the apiserver as the control plane's admin. So a client behind it is an
//! admin: RBAC tests talk to the apiserver directly.

use std::convert::Infallible;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::task::JoinHandle;

type Body = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;
type Upstream = HttpClient<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Incoming,
>;

/// The verbs faults can target, as the apiserver's authorizer names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
        }
    }
}

/// How an injected failure answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailWith {
    /// 409 Conflict, as after a concurrent write.
    Conflict,
    /// 500 InternalError.
    Internal,
    /// 429 TooManyRequests with `Retry-After: 1`.
    TooManyRequests,
}

#[derive(Debug)]
struct Rule {
    verb: Verb,
    plural: String,
    group: Option<String>,
    subresource: Option<String>,
    remaining: usize,
    with: FailWith,
}

/// Shared by the proxy and the test; every method takes `&self`.
#[derive(Debug)]
pub struct Faults {
    rules: Mutex<Vec<Rule>>,
    latency: Mutex<Duration>,
    watch_epoch: tokio::sync::watch::Sender<u64>,
    injected: AtomicU64,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            rules: Mutex::new(Vec::new()),
            latency: Mutex::new(Duration::ZERO),
            watch_epoch: tokio::sync::watch::channel(0).0,
            injected: AtomicU64::new(0),
        }
    }
}

impl Faults {
    /// Fails the next `count` requests of `verb` on `resource`: `plural` or
    /// `plural.group` (`etcdclusters.etcd.steward.dev`), optionally followed
    /// by `/subresource`. Without a subresource the rule also matches the
    /// resource's subresources; without a group, the plural in every group.
    pub fn fail_next(&self, verb: Verb, resource: &str, count: usize, with: FailWith) {
        let (res, sub) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_string())),
            None => (resource, None),
        };
        let (plural, group) = match res.split_once('.') {
            Some((p, g)) => (p.to_string(), Some(g.to_string())),
            None => (res.to_string(), None),
        };
        self.rules.lock().expect("faults lock").push(Rule {
            verb,
            plural,
            group,
            subresource: sub,
            remaining: count,
            with,
        });
    }

    /// Delays every request by `latency` before forwarding it.
    pub fn set_latency(&self, latency: Duration) {
        *self.latency.lock().expect("faults lock") = latency;
    }

    /// Ends every watch open through the proxy right now; clients re-watch.
    pub fn drop_watches(&self) {
        self.watch_epoch.send_modify(|e| *e += 1);
    }

    /// Removes every pending failure and the latency.
    pub fn clear(&self) {
        self.rules.lock().expect("faults lock").clear();
        self.set_latency(Duration::ZERO);
    }

    /// How many requests have been failed on purpose so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    fn latency(&self) -> Duration {
        *self.latency.lock().expect("faults lock")
    }

    /// The failure this request must get, consuming one from its rule.
    fn take(&self, req: &Target) -> Option<(StatusCode, &'static str, String)> {
        let mut rules = self.rules.lock().expect("faults lock");
        let rule = rules.iter_mut().find(|r| {
            r.remaining > 0
                && r.verb == req.verb
                && r.plural == req.plural
                && r.group.as_deref().is_none_or(|g| g == req.group)
                && r.subresource
                    .as_deref()
                    .is_none_or(|s| Some(s) == req.subresource.as_deref())
        })?;
        rule.remaining -= 1;
        let with = rule.with;
        rules.retain(|r| r.remaining > 0);
        self.injected.fetch_add(1, Ordering::SeqCst);
        let what = format!("injected fault: {} {}", req.verb.as_str(), req.plural);
        Some(match with {
            FailWith::Conflict => (
                StatusCode::CONFLICT,
                "Conflict",
                format!(
                    "{what}: the object has been modified; please apply your changes to the latest version and try again"
                ),
            ),
            FailWith::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                format!("Internal error occurred: {what}"),
            ),
            FailWith::TooManyRequests => (
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                format!(
                    "{what}: the server has received too many requests and has asked us to try again later"
                ),
            ),
        })
    }
}

/// What a request asks for, in the authorizer's terms.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    verb: Verb,
    group: String,
    plural: String,
    subresource: Option<String>,
}

impl Target {
    /// `None` for non-resource paths (`/version`, `/openapi/v3`, …).
    fn of(method: &hyper::Method, path: &str, query: Option<&str>) -> Option<Target> {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, rest) = match parts.as_slice() {
            ["api", _version, rest @ ..] => (String::new(), rest),
            ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
            _ => return None,
        };
        let rest = match rest {
            ["namespaces", _ns, more @ ..] if !more.is_empty() => more,
            other => other,
        };
        let (plural, name, subresource) = match rest {
            [plural] => (*plural, None, None),
            [plural, name] => (*plural, Some(*name), None),
            [plural, name, sub, ..] => (*plural, Some(*name), Some(sub.to_string())),
            [] => return None,
        };
        let watch =
            query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
        let verb = match (method.as_str(), name) {
            ("GET", _) if watch => Verb::Watch,
            ("GET", Some(_)) => Verb::Get,
            ("GET", None) => Verb::List,
            ("POST", _) => Verb::Create,
            ("PUT", _) => Verb::Update,
            ("PATCH", _) => Verb::Patch,
            ("DELETE", _) => Verb::Delete,
            _ => return None,
        };
        Some(Target {
            verb,
            group,
            plural: plural.to_string(),
            subresource,
        })
    }
}

/// A running proxy; dropping it stops it.
pub struct FaultProxy {
    url: String,
    faults: Arc<Faults>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream`, authenticating with the client
    /// certificate and key at `cert`/`key` and trusting the CA at `ca`.
    pub async fn start(upstream: &str, ca: &Path, cert: &Path, key: &Path) -> Result<FaultProxy> {
        let client = upstream_client(ca, cert, key)?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the fault proxy")?;
        let url = format!("http://{}", listener.local_addr()?);
        let faults = Arc::new(Faults::default());
        let upstream: hyper::Uri = upstream.parse().context("the apiserver URL")?;
        let state = Arc::new(State {
            client,
            upstream,
            faults: faults.clone(),
        });
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(state.handle(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(FaultProxy { url, faults, task })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// A client that talks to the apiserver through this proxy.
    pub fn client(&self) -> Result<kube::Client> {
        let config = kube::Config::new(self.url.parse().context("the proxy URL")?);
        kube::Client::try_from(config).context("a client for the fault proxy")
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct State {
    client: Upstream,
    upstream: hyper::Uri,
    faults: Arc<Faults>,
}

impl State {
    async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        let target = Target::of(req.method(), req.uri().path(), req.uri().query());
        let latency = self.faults.latency();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if let Some((code, reason, message)) = target.as_ref().and_then(|t| self.faults.take(t)) {
            return status(code, reason, &message);
        }
        let watch = target.as_ref().is_some_and(|t| t.verb == Verb::Watch);
        let (mut parts, body) = req.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let mut uri = self.upstream.clone().into_parts();
        uri.path_and_query = path.parse().ok();
        parts.uri = match hyper::Uri::from_parts(uri) {
            Ok(u) => u,
            Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string()),
        };
        parts.headers.remove(hyper::header::HOST);
        let epoch = self.faults.watch_epoch.subscribe();
        match self.client.request(Request::from_parts(parts, body)).await {
            Ok(resp) if watch => resp.map(|b| cut_on_drop_watches(b, epoch)),
            Ok(resp) => resp.map(|b| b.map_err(|e| Box::new(e) as _).boxed()),
            Err(e) => status(
                StatusCode::BAD_GATEWAY,
                "InternalError",
                &format!("fault proxy: the apiserver did not answer: {e}"),
            ),
        }
    }
}

/// A watch body that ends when [`Faults::drop_watches`] is called.
fn cut_on_drop_watches(body: Incoming, mut epoch: tokio::sync::watch::Receiver<u64>) -> Body {
    epoch.mark_unchanged();
    let frames = http_body_util::BodyStream::new(body).map(|f| f.map_err(|e| Box::new(e) as _));
    let cut = async move {
        let _ = epoch.changed().await;
    };
    let stream = frames.take_until(cut);
    BodyExt::boxed(StreamBody::new(stream))
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    let mut resp = Response::new(
        http_body_util::Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    if code == StatusCode::TOO_MANY_REQUESTS {
        resp.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            hyper::header::HeaderValue::from_static("1"),
        );
    }
    resp
}

fn upstream_client(ca: &Path, cert: &Path, key: &Path) -> Result<Upstream> {
    tls_client(ca, cert, key)
}

/// An HTTPS client that trusts `ca` and authenticates with `cert`/`key`.
pub(crate) fn tls_client<B>(
    ca: &Path,
    cert: &Path,
    key: &Path,
) -> Result<
    HttpClient<hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>, B>,
>
where
    B: hyper::body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).context("reading the CA")? {
        roots.add(c.context("parsing the CA")?)?;
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .context("reading the client certificate")?
        .collect::<Result<_, _>>()
        .context("parsing the client certificate")?;
    let key = PrivateKeyDer::from_pem_file(key).context("reading the client key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)?;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    Ok(HttpClient::builder(TokioExecutor::new()).build(https))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(method: &str, path: &str, query: Option<&str>) -> Option<Target> {
        Target::of(&method.parse().unwrap(), path, query)
    }

    #[test]
    fn requests_are_named_as_the_authorizer_names_them() {
        let watch = t(
            "GET",
            "/api/v1/namespaces/default/configmaps",
            Some("watch=true&resourceVersion=5"),
        )
        .unwrap();
        assert_eq!(
            (watch.verb, watch.plural.as_str(), watch.group.as_str()),
            (Verb::Watch, "configmaps", "")
        );
        let status = t(
            "PATCH",
            "/apis/etcd.steward.dev/v1alpha1/namespaces/x/etcdclusters/a/status",
            None,
        )
        .unwrap();
        assert_eq!(status.verb, Verb::Patch);
        assert_eq!(status.group, "etcd.steward.dev");
        assert_eq!(status.subresource.as_deref(), Some("status"));
        assert_eq!(
            t("GET", "/api/v1/nodes/local", None).unwrap().verb,
            Verb::Get
        );
        assert_eq!(
            t("GET", "/api/v1/namespaces", None).unwrap().plural,
            "namespaces"
        );
        assert_eq!(
            t("GET", "/api/v1/namespaces/default", None).unwrap().verb,
            Verb::Get
        );
        assert!(t("GET", "/version", None).is_none());
    }
}

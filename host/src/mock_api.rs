//! A scripted mock apiserver behind a real [`kube::Client`], for fast tests
//! of the stages that write to the Kubernetes API (as kube-rs's
//! controller-rs does with `tower-test`).
//!
//! A scenario lists, in order, every request the apiserver must see and
//! what it answers:
//!
//! ```ignore
//! let (client, apiserver) = mock_api::pair();
//! let scenario = apiserver.run(vec![
//!     Exchange::get(CLUSTER).respond(ok(&cluster)),
//!     Exchange::patch(MEMBER_STATUS)
//!         .content_type(MERGE_PATCH)
//!         .body_includes(json!({"status": {"lastActionError": null}}))
//!         .respond(ok(&member)),
//!     Exchange::post(PVCS).respond(api_error(403, "Forbidden", "no")),
//! ]);
//! // ... run the code under test with `client` ...
//! let served = scenario.finish().await;
//! assert_eq!(served.event_reasons(), ["ActionFailed"]);
//! ```
//!
//! - Requests are matched in order, by method and by path with its query:
//!   the path exactly, the query's parameters in any order (kube's empty
//!   `?` and `?&` are ignored). A request that is not the next one
//!   expected, or comes after the script ended, fails the scenario with a
//!   message naming what was expected, what came and everything served
//!   before. Content type and body are checked when the exchange asks.
//! - [`Scenario::finish`], called once the code under test has returned,
//!   fails if an expected request never came: at once, not after a long
//!   timeout. It re-raises a failure of the mock as the test's own panic.
//!   A backstop besides: a request not seen within [`ApiServer::deadline`]
//!   (5 s) of the start fails the scenario too, naming it; from then on the
//!   client's calls fail at once.
//! - After a failure the mock answers nothing more: the client's call that
//!   failed it, and every later one, returns an error at once, so the code
//!   under test returns rather than hangs.
//! - Events (the [`kube::runtime::events::Recorder`]'s writes under
//!   `/apis/events.k8s.io/v1/`) are *not* part of the script by default:
//!   any number of them are answered (echoing the Event back) and kept in
//!   [`Served::events`], for the test to assert on or ignore. Call
//!   [`ApiServer::scripted_events`] to have them matched like any other
//!   request instead (answer them with [`echo`]).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::time::Duration;

use axum::http::{Method, Request, Response, header};
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// The content type of a JSON merge patch (`Patch::Merge`).
pub(crate) const MERGE_PATCH: &str = "application/merge-patch+json";
/// The content type of a server-side apply (`Patch::Apply`).
pub(crate) const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// Where the event Recorder writes.
pub(crate) const EVENTS_PREFIX: &str = "/apis/events.k8s.io/v1/";

/// How long [`Scenario::finish`] still waits for requests already under way
/// once the code under test has returned.
const GRACE: Duration = Duration::from_millis(20);

/// A client whose every request goes to the returned mock apiserver.
/// Call it inside a Tokio runtime (`#[tokio::test]`).
pub(crate) fn pair() -> (kube::Client, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (
        kube::Client::new(service, "default"),
        ApiServer {
            handle,
            scripted_events: false,
            deadline: Duration::from_secs(5),
        },
    )
}

/// The apiserver end of [`pair`]: give it its script with [`ApiServer::run`].
pub(crate) struct ApiServer {
    handle: Handle,
    scripted_events: bool,
    deadline: Duration,
}

impl ApiServer {
    /// Events are matched against the script like any other request,
    /// rather than answered and collected.
    pub(crate) fn scripted_events(mut self) -> Self {
        self.scripted_events = true;
        self
    }

    /// How long the whole script may take before the request it waits for
    /// is reported missing, should [`Scenario::finish`] never be called.
    pub(crate) fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Serves `script` in the background.
    pub(crate) fn run(self, script: Vec<Exchange>) -> Scenario {
        for (i, e) in script.iter().enumerate() {
            assert!(
                e.reply.is_some(),
                "mock apiserver: exchange #{} ({} {}) has no .respond(..)",
                i + 1,
                e.method,
                e.path
            );
        }
        let (done, finished) = oneshot::channel();
        let task = tokio::spawn(serve(self, script.into(), finished));
        Scenario {
            task,
            done: Some(done),
        }
    }
}

/// A running script. Call [`Scenario::finish`] once the code under test
/// has returned.
#[must_use = "call .finish().await, or a missing request goes unnoticed"]
pub(crate) struct Scenario {
    task: JoinHandle<Served>,
    done: Option<oneshot::Sender<()>>,
}

impl Scenario {
    /// Checks that every expected request came and returns what was served;
    /// panics with the mock's own message if a request was unexpected,
    /// mismatched or missing.
    pub(crate) async fn finish(mut self) -> Served {
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
        match (&mut self.task).await {
            Ok(served) => served,
            Err(e) if e.is_panic() => resume_unwind(e.into_panic()),
            Err(e) => panic!("mock apiserver: {e}"),
        }
    }
}

/// What the mock apiserver saw.
#[derive(Debug, Default)]
pub(crate) struct Served {
    /// Every request in order, Events included, as `METHOD path?query`
    /// (the query's parameters sorted).
    pub log: Vec<String>,
    /// The Events written, in order (unless [`ApiServer::scripted_events`]).
    pub events: Vec<Value>,
}

impl Served {
    /// The `reason` of every Event written, in order.
    pub(crate) fn event_reasons(&self) -> Vec<&str> {
        self.events
            .iter()
            .map(|e| e["reason"].as_str().unwrap_or_default())
            .collect()
    }
}

/// Checks a request body; panics (with `assert!`) when it is wrong.
type BodyCheck = Box<dyn FnOnce(&Value) + Send>;

/// One request the apiserver must see next, and its answer.
pub(crate) struct Exchange {
    method: Method,
    path: String,
    content_type: Option<String>,
    includes: Vec<Value>,
    checks: Vec<BodyCheck>,
    reply: Option<Reply>,
}

impl Exchange {
    /// A request with this method and path (with its query, if any, its
    /// parameters in any order: `"/api/v1/namespaces/prod/pods?dryRun=All"`).
    pub(crate) fn new(method: Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            content_type: None,
            includes: Vec::new(),
            checks: Vec::new(),
            reply: None,
        }
    }

    pub(crate) fn get(path: impl Into<String>) -> Self {
        Self::new(Method::GET, path)
    }

    pub(crate) fn post(path: impl Into<String>) -> Self {
        Self::new(Method::POST, path)
    }

    pub(crate) fn patch(path: impl Into<String>) -> Self {
        Self::new(Method::PATCH, path)
    }

    pub(crate) fn delete(path: impl Into<String>) -> Self {
        Self::new(Method::DELETE, path)
    }

    /// The request's Content-Type must be this ([`MERGE_PATCH`], ...).
    pub(crate) fn content_type(mut self, content_type: &str) -> Self {
        self.content_type = Some(content_type.to_owned());
        self
    }

    /// The body must contain `subset`: every key of every object in it with
    /// the same value (a `null` must be there as `null`), arrays of the same
    /// length matched element by element. Other keys may be present.
    pub(crate) fn body_includes(mut self, subset: Value) -> Self {
        self.includes.push(subset);
        self
    }

    /// Runs `check` on the body (JSON; `null` when empty). Assert in it.
    pub(crate) fn body(mut self, check: impl FnOnce(&Value) + Send + 'static) -> Self {
        self.checks.push(Box::new(check));
        self
    }

    /// What the apiserver answers.
    pub(crate) fn respond(mut self, reply: Reply) -> Self {
        self.reply = Some(reply);
        self
    }

    fn describe(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// An answer of the mock apiserver.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub status: u16,
    /// None: the request's own body, sent back.
    pub body: Option<Value>,
}

fn to_json(body: impl serde::Serialize) -> Value {
    serde_json::to_value(body).expect("a reply body serializes to JSON")
}

/// 200 with `body` (an object, or any JSON).
pub(crate) fn ok(body: impl serde::Serialize) -> Reply {
    Reply {
        status: 200,
        body: Some(to_json(body)),
    }
}

/// 201 with the request's own body: a create that stored what it was given.
pub(crate) fn echo() -> Reply {
    Reply {
        status: 201,
        body: None,
    }
}

/// A failure as the apiserver sends it: a `metav1.Status` body, which
/// kube returns as `kube::Error::Api`.
pub(crate) fn api_error(code: u16, reason: &str, message: &str) -> Reply {
    Reply {
        status: code,
        body: Some(json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        })),
    }
}

/// 409 Conflict: the write was based on an outdated resourceVersion.
pub(crate) fn conflict(what: &str) -> Reply {
    api_error(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {what}: the object has been modified; \
             please apply your changes to the latest version and try again"
        ),
    )
}

/// 409 AlreadyExists: a create of an object that exists.
pub(crate) fn already_exists(what: &str) -> Reply {
    api_error(409, "AlreadyExists", &format!("{what} already exists"))
}

/// 404 NotFound.
pub(crate) fn not_found() -> Reply {
    api_error(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// Whether `actual` contains `expected` (see [`Exchange::body_includes`]);
/// the error names the first differing path.
pub(crate) fn includes(actual: &Value, expected: &Value) -> Result<(), String> {
    fn walk(actual: &Value, expected: &Value, at: &str) -> Result<(), String> {
        let at_or_root = if at.is_empty() { "(the body)" } else { at };
        match (expected, actual) {
            (Value::Object(want), Value::Object(have)) => {
                for (key, w) in want {
                    let path = if at.is_empty() {
                        key.clone()
                    } else {
                        format!("{at}.{key}")
                    };
                    match have.get(key) {
                        Some(h) => walk(h, w, &path)?,
                        None => return Err(format!("{path}: missing, expected {w}")),
                    }
                }
                Ok(())
            }
            (Value::Array(want), Value::Array(have)) if want.len() == have.len() => want
                .iter()
                .zip(have)
                .enumerate()
                .try_for_each(|(i, (w, h))| walk(h, w, &format!("{at}[{i}]"))),
            (want, have) if want == have => Ok(()),
            (want, have) => Err(format!("{at_or_root}: expected {want}, got {have}")),
        }
    }
    walk(actual, expected, "")
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "(a panic without a message)".into())
}

/// `path?query` with the query's parameters sorted and empty ones (kube
/// writes `?&force=true`) dropped: the order of parameters means nothing.
fn normalize(target: &str) -> String {
    let Some((path, query)) = target.split_once('?') else {
        return target.to_owned();
    };
    let mut params: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    if params.is_empty() {
        return path.to_owned();
    }
    params.sort_unstable();
    format!("{path}?{}", params.join("&"))
}

/// The served log, for a failure message.
fn history(log: &[String]) -> String {
    if log.is_empty() {
        return "\n  served before: nothing".into();
    }
    let mut out = String::from("\n  served before:");
    for line in log {
        let _ = write!(out, "\n    {line}");
    }
    out
}

fn pretty(body: &Value) -> String {
    serde_json::to_string_pretty(body).unwrap_or_default()
}

async fn serve(
    server: ApiServer,
    mut script: VecDeque<Exchange>,
    mut finished: oneshot::Receiver<()>,
) -> Served {
    let ApiServer {
        mut handle,
        scripted_events,
        deadline,
    } = server;
    let total = script.len();
    let mut served = Served::default();
    let timer = tokio::time::sleep(deadline);
    tokio::pin!(timer);
    let mut finishing = false;
    loop {
        let next = if finishing {
            // The code under test returned: take what is still under way.
            match tokio::time::timeout(GRACE, handle.next_request()).await {
                Ok(next) => next,
                Err(_) => break,
            }
        } else {
            tokio::select! {
                // Requests first, then the deadline, then the end.
                biased;
                next = handle.next_request() => next,
                _ = &mut timer => {
                    if let Some(waiting) = script.front() {
                        panic!(
                            "mock apiserver: expected request #{} of {total}, {}, did not come within {deadline:?}{}",
                            total - script.len() + 1,
                            waiting.describe(),
                            history(&served.log),
                        );
                    }
                    timer.as_mut().reset(tokio::time::Instant::now() + deadline);
                    continue;
                }
                _ = &mut finished => {
                    finishing = true;
                    continue;
                }
            }
        };
        // None: every copy of the client is gone.
        let Some((request, respond)) = next else {
            break;
        };
        let (parts, body) = request.into_parts();
        let target = parts
            .uri
            .path_and_query()
            .map(|pq| pq.as_str())
            .unwrap_or_else(|| parts.uri.path());
        let target = normalize(target);
        let line = format!("{} {target}", parts.method);
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = body
            .collect_bytes()
            .await
            .unwrap_or_else(|e| panic!("mock apiserver: reading the body of {line}: {e}"));
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };

        let reply = if !scripted_events && target.starts_with(EVENTS_PREFIX) {
            served.events.push(body.clone());
            Reply {
                status: if parts.method == Method::POST {
                    201
                } else {
                    200
                },
                body: None,
            }
        } else {
            let n = total - script.len() + 1;
            let Some(expected) = script.pop_front() else {
                panic!(
                    "mock apiserver: unexpected request {line}: the script of {total} requests had ended\n  body: {}{}",
                    pretty(&body),
                    history(&served.log),
                );
            };
            if expected.method != parts.method || normalize(&expected.path) != target {
                panic!(
                    "mock apiserver: unexpected request #{n} of {total}\n  expected: {}\n  got:      {line}\n  body: {}{}",
                    expected.describe(),
                    pretty(&body),
                    history(&served.log),
                );
            }
            if let Some(want) = &expected.content_type
                && content_type.as_deref() != Some(want.as_str())
            {
                panic!(
                    "mock apiserver: request #{n} {line}: content type {content_type:?}, expected {want:?}"
                );
            }
            for subset in &expected.includes {
                if let Err(why) = includes(&body, subset) {
                    panic!(
                        "mock apiserver: request #{n} {line}: body mismatch at {why}\n  body: {}",
                        pretty(&body)
                    );
                }
            }
            for check in expected.checks {
                if let Err(payload) = catch_unwind(AssertUnwindSafe(|| check(&body))) {
                    panic!(
                        "mock apiserver: request #{n} {line}: body check failed: {}\n  body: {}",
                        panic_message(payload.as_ref()),
                        pretty(&body)
                    );
                }
            }
            expected.reply.expect("checked by run")
        };
        served.log.push(line);
        let payload = reply.body.unwrap_or(body);
        let response = Response::builder()
            .status(reply.status)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(
                serde_json::to_vec(&payload).expect("JSON serializes"),
            ))
            .expect("a valid response");
        respond.send_response(response);
    }
    if let Some(missing) = script.front() {
        let rest: Vec<String> = script.iter().map(Exchange::describe).collect();
        panic!(
            "mock apiserver: expected request #{} of {total}, {}, never came (still expected: {}){}",
            total - script.len() + 1,
            missing.describe(),
            rest.join(", "),
            history(&served.log),
        );
    }
    served
}

#[cfg(test)]
mod tests {
    use kube::api::{Api, PostParams};

    use super::*;
    use crate::api::write_whole_status;
    use crate::api::{EtcdCluster, EtcdClusterStatus, EtcdMember, EtcdMemberStatus, WholeStatus};
    use crate::resources::fixtures;

    const MEMBER_STATUS: &str =
        "/apis/etcd.steward.dev/v1alpha1/namespaces/prod/etcdmembers/main-0/status";
    const CLUSTER_STATUS: &str =
        "/apis/etcd.steward.dev/v1alpha1/namespaces/prod/etcdclusters/main/status";

    fn member_with(status: EtcdMemberStatus) -> EtcdMember {
        let mut m = fixtures::member("main-0", true);
        m.status = Some(status);
        m
    }

    #[tokio::test]
    async fn write_whole_status_sends_a_merge_patch_naming_every_field() {
        let (client, apiserver) = pair();
        let status = EtcdMemberStatus {
            pod_name: Some("main-0".into()),
            is_voter: true,
            ..Default::default()
        };
        let scenario = apiserver.run(vec![
            Exchange::patch(MEMBER_STATUS)
                .content_type(MERGE_PATCH)
                .body_includes(json!({"status": {
                    "podName": "main-0",
                    "isVoter": true,
                    "podRestarts": 0,
                    // Empty fields are cleared, not left out.
                    "memberID": null,
                    "lastActionError": null,
                    "conditions": null,
                }}))
                .body(|body| {
                    let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
                    assert_eq!(keys, ["status"], "only the status is written");
                    let written = body["status"].as_object().unwrap();
                    for field in EtcdMemberStatus::fields() {
                        assert!(written.contains_key(field), "{field} is not in the patch");
                    }
                    assert_eq!(written.len(), EtcdMemberStatus::fields().len());
                })
                .respond(ok(member_with(status.clone()))),
        ]);

        let api: Api<EtcdMember> = Api::namespaced(client, "prod");
        let stored = write_whole_status(&api, "main-0", &status).await.unwrap();
        assert_eq!(stored.status, Some(status));
        let served = scenario.finish().await;
        assert_eq!(served.log, [format!("PATCH {MEMBER_STATUS}")]);
    }

    #[tokio::test]
    async fn write_whole_status_of_a_cluster_clears_its_broken_members() {
        let (client, apiserver) = pair();
        let scenario = apiserver.run(vec![
            Exchange::patch(CLUSTER_STATUS)
                .content_type(MERGE_PATCH)
                .body_includes(json!({"status": {
                    "readyMembers": 3,
                    "brokenMembers": null,
                    "lastActionError": null,
                }}))
                .respond(ok(fixtures::cluster(fixtures::spec()))),
        ]);
        let api: Api<EtcdCluster> = Api::namespaced(client, "prod");
        let status = EtcdClusterStatus {
            ready_members: 3,
            ..Default::default()
        };
        write_whole_status(&api, "main", &status).await.unwrap();
        scenario.finish().await;
    }

    #[tokio::test]
    async fn a_server_side_apply_is_matched_with_its_query() {
        use k8s_openapi::api::core::v1::Service;
        use kube::api::{Patch, PatchParams};

        let (client, apiserver) = pair();
        let service =
            crate::resources::client_service(&fixtures::cluster(fixtures::spec())).unwrap();
        let scenario = apiserver.run(vec![
            Exchange::patch(
                "/api/v1/namespaces/prod/services/main-client?fieldManager=etcd-steward&force=true",
            )
            .content_type(APPLY_PATCH)
            .body_includes(json!({"kind": "Service", "metadata": {"name": "main-client"}}))
            .respond(ok(&service)),
        ]);
        let api: Api<Service> = Api::namespaced(client, "prod");
        let params = PatchParams::apply(crate::resources::FIELD_MANAGER).force();
        api.patch("main-client", &params, &Patch::Apply(&service))
            .await
            .unwrap();
        scenario.finish().await;
    }

    #[tokio::test]
    async fn write_whole_status_returns_a_409_conflict_as_an_api_error() {
        let (client, apiserver) = pair();
        let scenario = apiserver
            .run(vec![Exchange::patch(MEMBER_STATUS).respond(conflict(
                "etcdmembers.etcd.steward.dev \"main-0\"",
            ))]);
        let api: Api<EtcdMember> = Api::namespaced(client, "prod");
        let err = write_whole_status(&api, "main-0", &EtcdMemberStatus::default())
            .await
            .unwrap_err();
        let kube::Error::Api(status) = &err else {
            panic!("an API error, not {err:?}");
        };
        assert!(status.is_conflict(), "{status:?}");
        assert_eq!(status.code, 409);
        assert!(
            status.message.contains("the object has been modified"),
            "{}",
            status.message
        );
        scenario.finish().await;
    }

    #[tokio::test]
    async fn write_whole_status_returns_a_404_when_the_object_is_gone() {
        let (client, apiserver) = pair();
        let scenario = apiserver.run(vec![Exchange::patch(MEMBER_STATUS).respond(not_found())]);
        let api: Api<EtcdMember> = Api::namespaced(client, "prod");
        let err = write_whole_status(&api, "main-0", &EtcdMemberStatus::default())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.is_not_found() && s.code == 404),
            "{err:?}"
        );
        scenario.finish().await;
    }

    // The harness itself.

    #[tokio::test]
    #[should_panic(
        expected = "expected: PATCH /apis/etcd.steward.dev/v1alpha1/namespaces/prod/etcdmembers/main-0/status\n  got:      POST /api/v1/namespaces/prod/pods"
    )]
    async fn a_request_out_of_order_fails_the_scenario_naming_both() {
        let (client, apiserver) = pair();
        let scenario = apiserver.run(vec![Exchange::patch(MEMBER_STATUS).respond(ok(json!({})))]);
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, "prod");
        let created = pods
            .create(&PostParams::default(), &Default::default())
            .await;
        assert!(created.is_err(), "the mock answers nothing after a failure");
        scenario.finish().await;
    }

    #[tokio::test]
    #[should_panic(expected = "the script of 0 requests had ended")]
    async fn a_request_after_the_script_fails_the_scenario() {
        let (client, apiserver) = pair();
        let scenario = apiserver.run(vec![]);
        let api: Api<EtcdMember> = Api::namespaced(client, "prod");
        let _ = api.get("main-0").await;
        scenario.finish().await;
    }

    #[tokio::test]
    #[should_panic(expected = "expected request #1 of 1, PATCH")]
    async fn a_missing_request_fails_at_finish_without_waiting_for_the_deadline() {
        let (_client, apiserver) = pair();
        let scenario = apiserver
            .deadline(Duration::from_secs(600))
            .run(vec![Exchange::patch(MEMBER_STATUS).respond(ok(json!({})))]);
        scenario.finish().await;
    }

    #[tokio::test]
    #[should_panic(expected = "did not come within 20ms")]
    async fn a_request_that_never_comes_fails_at_the_deadline() {
        let (_client, apiserver) = pair();
        let scenario = apiserver
            .deadline(Duration::from_millis(20))
            .run(vec![Exchange::patch(MEMBER_STATUS).respond(ok(json!({})))]);
        // Longer than the deadline, as code under test that hangs.
        tokio::time::sleep(Duration::from_millis(100)).await;
        scenario.finish().await;
    }

    #[tokio::test]
    #[should_panic(expected = "body mismatch at status.memberID: expected \"1\", got null")]
    async fn a_body_mismatch_names_the_field() {
        let (client, apiserver) = pair();
        let scenario = apiserver.run(vec![
            Exchange::patch(MEMBER_STATUS)
                .body_includes(json!({"status": {"memberID": "1"}}))
                .respond(ok(member_with(Default::default()))),
        ]);
        let api: Api<EtcdMember> = Api::namespaced(client, "prod");
        let _ = write_whole_status(&api, "main-0", &EtcdMemberStatus::default()).await;
        scenario.finish().await;
    }

    #[tokio::test]
    async fn events_are_answered_and_kept_outside_the_script_unless_scripted() {
        use kube::Resource;
        use kube::runtime::events::{Event, EventType, Recorder, Reporter};

        let member = fixtures::member("main-0", true);
        let event = Event {
            type_: EventType::Warning,
            reason: "ActionFailed".into(),
            note: Some("boom".into()),
            action: "Reconcile".into(),
            secondary: None,
        };
        let reporter = || Reporter {
            controller: "test".into(),
            instance: None,
        };

        let (client, apiserver) = pair();
        let scenario = apiserver.run(vec![]);
        let recorder = Recorder::new(client, reporter());
        recorder
            .publish(&event, &member.object_ref(&()))
            .await
            .unwrap();
        let served = scenario.finish().await;
        assert_eq!(served.event_reasons(), ["ActionFailed"]);
        assert_eq!(served.events[0]["note"], "boom");
        assert_eq!(served.events[0]["regarding"]["name"], "main-0");
        assert_eq!(
            served.log,
            ["POST /apis/events.k8s.io/v1/namespaces/prod/events"]
        );

        let (client, apiserver) = pair();
        let scenario = apiserver.scripted_events().run(vec![
            Exchange::post("/apis/events.k8s.io/v1/namespaces/prod/events")
                .body_includes(json!({"type": "Warning", "reason": "ActionFailed"}))
                .respond(echo()),
        ]);
        let recorder = Recorder::new(client, reporter());
        recorder
            .publish(&event, &member.object_ref(&()))
            .await
            .unwrap();
        let served = scenario.finish().await;
        assert!(served.events.is_empty());
    }

    #[test]
    fn a_query_is_compared_by_its_parameters_in_any_order() {
        assert_eq!(normalize("/api/v1/pods?"), "/api/v1/pods");
        assert_eq!(normalize("/api/v1/pods?&"), "/api/v1/pods");
        assert_eq!(
            normalize("/x?&force=true&fieldManager=etcd-steward"),
            normalize("/x?fieldManager=etcd-steward&force=true")
        );
        assert_ne!(normalize("/x?force=true"), normalize("/x"));
    }

    #[test]
    fn includes_matches_subsets_and_requires_nulls_to_be_there() {
        let body = json!({"a": {"b": [1, {"c": null, "d": 2}]}, "e": "x"});
        assert_eq!(includes(&body, &json!({"a": {"b": [1, {"d": 2}]}})), Ok(()));
        assert_eq!(
            includes(&body, &json!({"a": {"b": [1, {"c": null}]}})),
            Ok(())
        );
        assert_eq!(
            includes(&body, &json!({"a": {"x": null}})),
            Err("a.x: missing, expected null".into())
        );
        assert_eq!(
            includes(&body, &json!({"a": {"b": [1]}})),
            Err("a.b: expected [1], got [1,{\"c\":null,\"d\":2}]".into())
        );
        assert_eq!(
            includes(&body, &json!({"e": "y"})),
            Err("e: expected \"y\", got \"x\"".into())
        );
    }
}

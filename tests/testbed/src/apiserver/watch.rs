//! Watch streams: newline-delimited `{"type", "object"}` events from a
//! resourceVersion, with the initial events kube-runtime's watcher asks
//! for, BOOKMARKs, 410 for compacted history, and selector transitions.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::SinkExt;
use futures::channel::mpsc;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::error::{ApiError, ApiResult};
use super::http::{App, Params, Target, present, stream_response};
use super::selector::{FieldSelector, LabelSelector};
use super::store::{Event, EventType};
use super::table::{self, IncludeObject};

struct Filter {
    target: Target,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        let ns_ok = self
            .target
            .namespace
            .as_deref()
            .is_none_or(|ns| obj["metadata"]["namespace"].as_str() == Some(ns));
        ns_ok && self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// What this watcher sees of an event, if anything.
    fn view(&self, e: &Event) -> Option<(EventType, Value)> {
        if e.key != self.target.rt.key() {
            return None;
        }
        let now = self.matches(&e.object);
        let before = e.old.as_ref().is_some_and(|o| self.matches(o));
        match e.kind {
            EventType::Modified if now && !before => Some((EventType::Added, e.object.clone())),
            EventType::Modified if !now && before => Some((EventType::Deleted, e.object.clone())),
            _ if now => Some((e.kind, e.object.clone())),
            _ => None,
        }
    }
}

struct Encoder {
    target: Target,
    table: Option<IncludeObject>,
    metadata_only: bool,
}

impl Encoder {
    fn event(&self, kind: &str, obj: Value, rv: u64) -> Bytes {
        let obj = present(&self.target, obj);
        let obj = match self.table {
            Some(include) => {
                table::table(&self.target.rt, &self.target.version, &[obj], rv, include)
            }
            None if self.metadata_only => table::partial(&obj),
            None => obj,
        };
        line(&json!({"type": kind, "object": obj}))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut md = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.target.rt.kind, "apiVersion": self.target.rt.api_version(&self.target.version), "metadata": md});
        line(&json!({"type": "BOOKMARK", "object": obj}))
    }
}

fn line(v: &Value) -> Bytes {
    let mut b = serde_json::to_vec(v).expect("JSON values serialize");
    b.push(b'\n');
    Bytes::from(b)
}

pub fn serve(
    app: &Arc<App>,
    t: &Target,
    params: &Params,
    table: Option<IncludeObject>,
    metadata_only: bool,
) -> ApiResult<Response> {
    let filter = Filter {
        target: t.clone(),
        labels: LabelSelector::parse(
            params
                .get("labelSelector")
                .map(String::as_str)
                .unwrap_or(""),
        )?,
        fields: FieldSelector::parse(
            params
                .get("fieldSelector")
                .map(String::as_str)
                .unwrap_or(""),
        )?,
    };
    let enc = Encoder {
        target: t.clone(),
        table,
        metadata_only,
    };
    let bookmarks = params
        .get("allowWatchBookmarks")
        .is_some_and(|b| b == "true");
    let send_initial = params.get("sendInitialEvents").is_some_and(|b| b == "true");
    let rv_param = params
        .get("resourceVersion")
        .filter(|r| !r.is_empty())
        .cloned();
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    let from: Option<u64> = match rv_param.as_deref() {
        None | Some("0") => None,
        Some(r) => Some(
            r.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {r:?}")))?,
        ),
    };

    let mut first: Vec<Bytes> = Vec::new();
    let (mut rx, start_rv) = {
        let store = app.lock();
        let rx = store.subscribe();
        let start_rv = store.current_rv();
        if send_initial || from.is_none() {
            // "Get state and start at most recent": synthetic ADDED events.
            for o in store
                .list(&t.rt.key(), t.namespace.as_deref())
                .filter(|o| filter.matches(o))
            {
                first.push(enc.event("ADDED", o.clone(), start_rv));
            }
            if send_initial {
                first.push(enc.bookmark(start_rv, true));
            }
        } else if let Some(rv) = from {
            match store.since(&t.rt.key(), rv) {
                Ok(events) => {
                    for e in events {
                        if let Some((kind, obj)) = filter.view(&e) {
                            first.push(enc.event(kind.as_str(), obj, e.rv));
                        }
                    }
                }
                Err(too_old) => {
                    let err = ApiError::expired(format!(
                        "too old resource version: {} ({})",
                        too_old.requested, too_old.oldest
                    ));
                    first.push(line(&json!({"type": "ERROR", "object": err.to_status()})));
                    let (mut tx, out) = mpsc::channel::<Result<Bytes, std::convert::Infallible>>(4);
                    tokio::spawn(async move {
                        for b in first {
                            let _ = tx.send(Ok(b)).await;
                        }
                    });
                    return Ok(stream_response(Body::from_stream(out)));
                }
            }
        }
        (rx, start_rv)
    };

    let (mut tx, out) = mpsc::channel::<Result<Bytes, std::convert::Infallible>>(64);
    let mut dropper = app.faults.watch_epoch();
    let interval = app.bookmark_interval;
    tokio::spawn(async move {
        for b in first {
            if tx.send(Ok(b)).await.is_err() {
                return;
            }
        }
        let deadline = timeout.map(|d| tokio::time::Instant::now() + d);
        let mut progress = start_rv;
        let mut ticker = tokio::time::interval(interval);
        ticker.tick().await;
        loop {
            let until_deadline = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = until_deadline => return,
                _ = dropper.changed() => return,
                _ = ticker.tick() => {
                    // Also notices a client that went away while idle.
                    if tx.is_closed() {
                        return;
                    }
                    if bookmarks && tx.send(Ok(enc.bookmark(progress, false))).await.is_err() {
                        return;
                    }
                }
                got = rx.recv() => match got {
                    Ok(e) => {
                        progress = progress.max(e.rv);
                        if e.rv <= start_rv {
                            continue;
                        }
                        if let Some((kind, obj)) = filter.view(&e)
                            && tx.send(Ok(enc.event(kind.as_str(), obj, e.rv))).await.is_err() {
                                return;
                            }
                    }
                    // A watcher too slow to keep up is cut off, as the real
                    // apiserver does; it resumes from its last version.
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
                },
            }
        }
    });
    Ok(stream_response(Body::from_stream(out)))
}

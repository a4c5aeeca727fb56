//! Fault injection for tests: fail the next N requests of a verb on a
//! resource, slow every request down, or cut every open watch.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::error::ApiError;

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

/// Shared by the server and the test; every method takes `&self`.
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
    /// Fails the next `count` requests of `verb` on `resource`.
    ///
    /// `resource` is `plural`, `plural.group` (`etcdclusters.etcd.steward.io`),
    /// optionally followed by `/subresource`. Without a subresource the rule
    /// also matches requests to the resource's subresources; without a group
    /// it matches the plural in every group.
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

    /// Delays every request (before it touches the store) by `latency`.
    pub fn set_latency(&self, latency: Duration) {
        *self.latency.lock().expect("faults lock") = latency;
    }

    /// Ends every watch that is open right now; clients must re-watch.
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

    /// Failures still queued.
    pub fn pending(&self) -> usize {
        self.rules
            .lock()
            .expect("faults lock")
            .iter()
            .map(|r| r.remaining)
            .sum()
    }

    pub(crate) fn latency(&self) -> Duration {
        *self.latency.lock().expect("faults lock")
    }

    pub(crate) fn watch_epoch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.watch_epoch.subscribe()
    }

    /// The failure this request must get, consuming one from its rule.
    pub(crate) fn take(
        &self,
        verb: Verb,
        group: &str,
        plural: &str,
        subresource: Option<&str>,
    ) -> Option<ApiError> {
        let mut rules = self.rules.lock().expect("faults lock");
        let rule = rules.iter_mut().find(|r| {
            r.remaining > 0
                && r.verb == verb
                && r.plural == plural
                && r.group.as_deref().is_none_or(|g| g == group)
                && r.subresource
                    .as_deref()
                    .is_none_or(|s| Some(s) == subresource)
        })?;
        rule.remaining -= 1;
        let with = rule.with;
        rules.retain(|r| r.remaining > 0);
        self.injected.fetch_add(1, Ordering::SeqCst);
        let what = format!("injected fault: {} {plural}", verb.as_str());
        Some(match with {
            FailWith::Conflict => ApiError::new(
                409,
                "Conflict",
                format!(
                    "{what}: the object has been modified; please apply your changes to the latest version and try again"
                ),
            ),
            FailWith::Internal => ApiError::internal(what),
            FailWith::TooManyRequests => ApiError::new(
                429,
                "TooManyRequests",
                format!(
                    "{what}: the server has received too many requests and has asked us to try again later"
                ),
            ),
        })
    }
}

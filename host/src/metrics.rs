//! Prometheus metrics, served on `/metrics` by `etcd-steward run`.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::policy::PolicyError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    reconcile_seconds: Histogram,
    reconcile_errors: Family<KindLabel, Counter>,
    policy_evaluations: Counter,
    policy_failures: Family<KindLabel, Counter>,
    leading: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("etcd_steward");
        let reconcile_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        let reconcile_errors = Family::<KindLabel, Counter>::default();
        let policy_evaluations = Counter::default();
        let policy_failures = Family::<KindLabel, Counter>::default();
        let leading = Gauge::default();
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one EtcdCluster reconcile (observe, evaluate, write status, act)",
            reconcile_seconds.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that ended in an error, by kind",
            reconcile_errors.clone(),
        );
        registry.register(
            "policy_evaluations",
            "Status policy evaluations",
            policy_evaluations.clone(),
        );
        registry.register(
            "policy_failures",
            "Status policy evaluations that fell back to the host's verdict, by kind",
            policy_failures.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease (or runs without leader election)",
            leading.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            reconcile_seconds,
            reconcile_errors,
            policy_evaluations,
            policy_failures,
            leading,
        }
    }
}

impl Metrics {
    pub fn observe_reconcile(&self, took: Duration) {
        self.reconcile_seconds.observe(took.as_secs_f64());
    }

    pub fn count_error(&self, kind: &str) {
        self.reconcile_errors
            .get_or_create(&KindLabel { kind: kind.into() })
            .inc();
    }

    pub fn observe_policy(&self, error: Option<&PolicyError>) {
        self.policy_evaluations.inc();
        if let Some(e) = error {
            self.policy_failures
                .get_or_create(&KindLabel {
                    kind: e.kind().as_str().into(),
                })
                .inc();
        }
    }

    /// A verdict the host rejected because it claimed a verified quorum
    /// that etcd did not confirm.
    pub fn count_rejected_verdict(&self) {
        self.policy_failures
            .get_or_create(&KindLabel {
                kind: "UnconfirmedVerification".into(),
            })
            .inc();
    }

    pub fn set_leading(&self, leading: bool) {
        self.leading.set(i64::from(leading));
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().expect("poisoned");
        prometheus_client::encoding::text::encode(&mut out, &registry)
            .expect("writing to a String cannot fail");
        out
    }
}

//! Prometheus metrics, served on `/metrics` by `etcd-steward run`: the
//! operator's own (reconciles, policy evaluations, leadership) and, per
//! EtcdCluster, the health a platform team alerts on (`etcd_steward_cluster_*`).

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use crate::policy::PolicyError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ClusterLabels {
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaderLabels {
    namespace: String,
    name: String,
    member: String,
    member_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    namespace: String,
    name: String,
    member: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScheduleLabels {
    pub namespace: String,
    /// The cluster, as in every per-cluster series.
    pub name: String,
    pub schedule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    namespace: String,
    name: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AlarmLabels {
    namespace: String,
    name: String,
    alarm: String,
}

/// What one reconcile learned about one cluster's health, for the metrics.
#[derive(Clone, Debug, Default)]
pub struct ClusterHealth {
    pub available: bool,
    pub ready_members: i64,
    pub desired_members: i64,
    /// Milliseconds since the epoch of the last verification, if any.
    pub last_verified_ms: Option<i64>,
    pub now_ms: i64,
    /// (member name, member ID) of the leader this observation saw.
    pub leader: Option<(String, u64)>,
    /// The policy's verdict was replaced by the host's fallback.
    pub policy_failed: bool,
    /// `spec.options.quotaBackendBytes` (etcd's default, 2 GiB, when unset).
    pub quota_bytes: i64,
    /// (member name, DB size in bytes) of each member that answered.
    pub db_sizes: Vec<(String, i64)>,
    /// (alarm name, members raising it) for every alarm kind.
    pub alarms: Vec<(&'static str, i64)>,
}

/// A cluster's series whose labels change: its leader and its members.
type Series = (Option<LeaderLabels>, Vec<MemberLabels>);

/// Every per-cluster family; a cluster's series are replaced whole.
#[derive(Default)]
struct ClusterFamilies {
    available: Family<ClusterLabels, Gauge>,
    ready: Family<ClusterLabels, Gauge>,
    desired: Family<ClusterLabels, Gauge>,
    since_verified: Family<ClusterLabels, Gauge<f64, AtomicU64>>,
    leader: Family<LeaderLabels, Gauge>,
    policy_failures: Family<ClusterLabels, Counter>,
    quota: Family<ClusterLabels, Gauge>,
    db_size: Family<MemberLabels, Gauge>,
    alarms: Family<AlarmLabels, Gauge>,
    // Snapshots (EtcdSnapshot), by the cluster they were taken of.
    snapshots: Family<ClusterLabels, Counter>,
    snapshot_failures: Family<FailureLabels, Counter>,
    snapshot_last_success: Family<ClusterLabels, Gauge<f64, AtomicU64>>,
    snapshot_duration: Family<ClusterLabels, Gauge<f64, AtomicU64>>,
    snapshot_size: Family<ClusterLabels, Gauge>,
    schedule_interval: Family<ScheduleLabels, Gauge<f64, AtomicU64>>,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    reconcile_seconds: Histogram,
    reconcile_errors: Family<KindLabel, Counter>,
    policy_evaluations: Counter,
    policy_failures: Family<KindLabel, Counter>,
    leading: Gauge,
    clusters: ClusterFamilies,
    /// The leader and member series each cluster has now, so a change
    /// removes the old ones rather than leaving them behind.
    cluster_series: Mutex<BTreeMap<ClusterLabels, Series>>,
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
        let clusters = ClusterFamilies::default();
        let c = &clusters;
        registry.register(
            "cluster_available",
            "1 while the cluster's Available condition is True",
            c.available.clone(),
        );
        registry.register(
            "cluster_ready_members",
            "Members the status policy counts as ready",
            c.ready.clone(),
        );
        registry.register(
            "cluster_desired_members",
            "spec.replicas",
            c.desired.clone(),
        );
        registry.register(
            "cluster_seconds_since_verified",
            "Seconds since etcd last confirmed the cluster healthy, as of the last reconcile (absent: never)",
            c.since_verified.clone(),
        );
        registry.register(
            "cluster_leader",
            "1 for the member etcd reports as leader (labels member and member_id, hex)",
            c.leader.clone(),
        );
        registry.register(
            "cluster_policy_failures",
            "Reconciles whose policy verdict was replaced by the host's fallback",
            c.policy_failures.clone(),
        );
        registry.register(
            "cluster_quota_backend_bytes",
            "The backend quota etcd enforces (--quota-backend-bytes; 2 GiB by default)",
            c.quota.clone(),
        );
        registry.register(
            "cluster_member_db_size_bytes",
            "Size of each member's backend database, as the member reports it",
            c.db_size.clone(),
        );
        registry.register(
            "cluster_alarms",
            "Members raising each etcd alarm (NOSPACE, CORRUPT)",
            c.alarms.clone(),
        );
        registry.register(
            "cluster_snapshots",
            "Snapshots of the cluster uploaded and read back (EtcdSnapshot Complete)",
            c.snapshots.clone(),
        );
        registry.register(
            "cluster_snapshot_failures",
            "Failed snapshot attempts, by the reason the EtcdSnapshot's Ready condition gave",
            c.snapshot_failures.clone(),
        );
        registry.register(
            "cluster_snapshot_last_success_timestamp_seconds",
            "When the cluster's last verified snapshot completed (Unix time; absent: none since the operator started)",
            c.snapshot_last_success.clone(),
        );
        registry.register(
            "cluster_snapshot_last_duration_seconds",
            "How long the last verified snapshot took, stream, upload and read-back",
            c.snapshot_duration.clone(),
        );
        registry.register(
            "backup_schedule_interval_seconds",
            "The interval between two runs of each active EtcdBackupSchedule (absent while suspended or invalid)",
            c.schedule_interval.clone(),
        );
        registry.register(
            "cluster_snapshot_last_size_bytes",
            "Size of the last verified snapshot",
            c.snapshot_size.clone(),
        );
        Self {
            clusters,
            cluster_series: Mutex::default(),
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

    /// A verdict an SDK made of an exception in the policy's code.
    pub fn count_caught_policy_error(&self) {
        self.policy_failures
            .get_or_create(&KindLabel {
                kind: crate::conditions::reason::POLICY_ERROR.into(),
            })
            .inc();
    }

    /// A verdict the host rejected because it claimed a verified quorum
    /// that etcd did not confirm.
    /// A verdict the host rejected, by the check that rejected it
    /// (`UnconfirmedVerification`, `UnconfirmedAvailability`).
    pub fn count_rejected_verdict(&self, check: &str) {
        self.policy_failures
            .get_or_create(&KindLabel { kind: check.into() })
            .inc();
    }

    pub fn set_leading(&self, leading: bool) {
        self.leading.set(i64::from(leading));
    }

    /// Records one reconcile's view of a cluster.
    pub fn observe_cluster(&self, id: &ClusterLabels, h: &ClusterHealth) {
        let c = &self.clusters;
        c.available.get_or_create(id).set(i64::from(h.available));
        c.ready.get_or_create(id).set(h.ready_members);
        c.desired.get_or_create(id).set(h.desired_members);
        match h.last_verified_ms {
            Some(at) => {
                c.since_verified
                    .get_or_create(id)
                    .set((h.now_ms - at).max(0) as f64 / 1000.0);
            }
            None => {
                c.since_verified.remove(id);
            }
        }
        if h.policy_failed {
            c.policy_failures.get_or_create(id).inc();
        } else {
            // Present from the first reconcile, so rate() works at once.
            let _ = c.policy_failures.get_or_create(id);
        }
        c.quota.get_or_create(id).set(h.quota_bytes);
        for (alarm, count) in &h.alarms {
            c.alarms
                .get_or_create(&AlarmLabels {
                    namespace: id.namespace.clone(),
                    name: id.name.clone(),
                    alarm: (*alarm).to_owned(),
                })
                .set(*count);
        }
        let leader = h.leader.as_ref().map(|(member, member_id)| LeaderLabels {
            namespace: id.namespace.clone(),
            name: id.name.clone(),
            member: member.clone(),
            member_id: format!("{member_id:x}"),
        });
        let members: Vec<MemberLabels> = h
            .db_sizes
            .iter()
            .map(|(member, size)| {
                let labels = MemberLabels {
                    namespace: id.namespace.clone(),
                    name: id.name.clone(),
                    member: member.clone(),
                };
                c.db_size.get_or_create(&labels).set(*size);
                labels
            })
            .collect();
        if let Some(l) = &leader {
            c.leader.get_or_create(l).set(1);
        }
        let mut series = self.cluster_series.lock().expect("poisoned");
        if let Some((old_leader, old_members)) =
            series.insert(id.clone(), (leader.clone(), members.clone()))
        {
            if old_leader != leader
                && let Some(old) = old_leader
            {
                c.leader.remove(&old);
            }
            for old in old_members.iter().filter(|m| !members.contains(m)) {
                c.db_size.remove(old);
            }
        }
    }

    /// A snapshot of cluster `id` completed and was read back.
    pub fn observe_snapshot(&self, id: &ClusterLabels, done_at_s: f64, took: Duration, size: u64) {
        let c = &self.clusters;
        c.snapshots.get_or_create(id).inc();
        c.snapshot_last_success.get_or_create(id).set(done_at_s);
        c.snapshot_duration
            .get_or_create(id)
            .set(took.as_secs_f64());
        c.snapshot_size
            .get_or_create(id)
            .set(i64::try_from(size).unwrap_or(i64::MAX));
    }

    /// A schedule of cluster `id` saw its newest verified run complete at
    /// `at_s` (Unix seconds): the last-success series moves forward only,
    /// so after a restart it is back as soon as the schedules are read.
    pub fn observe_backup_success(&self, id: &ClusterLabels, at_s: f64) {
        let g = self.clusters.snapshot_last_success.get_or_create(id);
        if g.get() < at_s {
            g.set(at_s);
        }
    }

    /// A schedule's interval; None removes its series (suspended, invalid,
    /// deleted).
    pub fn set_schedule_interval(&self, id: &ScheduleLabels, seconds: Option<f64>) {
        match seconds {
            Some(s) => {
                self.clusters.schedule_interval.get_or_create(id).set(s);
            }
            None => {
                self.clusters.schedule_interval.remove(id);
            }
        }
    }

    /// A snapshot attempt of cluster `id` failed with `reason`.
    pub fn count_snapshot_failure(&self, id: &ClusterLabels, reason: &str) {
        self.clusters
            .snapshot_failures
            .get_or_create(&FailureLabels {
                namespace: id.namespace.clone(),
                name: id.name.clone(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Drops the series of a deleted cluster: it must not keep alerting.
    pub fn forget_cluster(&self, id: &ClusterLabels) {
        let c = &self.clusters;
        let mut series = self.cluster_series.lock().expect("poisoned");
        {
            let (leader, members) = series.remove(id).unwrap_or_default();
            c.available.remove(id);
            c.ready.remove(id);
            c.desired.remove(id);
            c.since_verified.remove(id);
            c.policy_failures.remove(id);
            c.quota.remove(id);
            c.snapshots.remove(id);
            c.snapshot_last_success.remove(id);
            c.snapshot_duration.remove(id);
            c.snapshot_size.remove(id);
            if let Some(l) = leader {
                c.leader.remove(&l);
            }
            for m in members {
                c.db_size.remove(&m);
            }
            for alarm in ["NOSPACE", "CORRUPT"] {
                c.alarms.remove(&AlarmLabels {
                    namespace: id.namespace.clone(),
                    name: id.name.clone(),
                    alarm: alarm.to_owned(),
                });
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> ClusterLabels {
        ClusterLabels {
            namespace: "prod".into(),
            name: "main".into(),
        }
    }

    #[test]
    fn a_clusters_health_is_exported_and_replaced_and_removed_whole() {
        let m = Metrics::default();
        let mut h = ClusterHealth {
            available: true,
            ready_members: 3,
            desired_members: 3,
            last_verified_ms: Some(10_000),
            now_ms: 12_500,
            leader: Some(("main-a".into(), 0xabc)),
            quota_bytes: 2 << 30,
            db_sizes: vec![("main-a".into(), 20480), ("main-b".into(), 16384)],
            alarms: vec![("NOSPACE", 0), ("CORRUPT", 0)],
            ..Default::default()
        };
        m.observe_cluster(&id(), &h);
        let text = m.encode();
        for line in [
            r#"etcd_steward_cluster_available{namespace="prod",name="main"} 1"#,
            r#"etcd_steward_cluster_ready_members{namespace="prod",name="main"} 3"#,
            r#"etcd_steward_cluster_seconds_since_verified{namespace="prod",name="main"} 2.5"#,
            r#"etcd_steward_cluster_leader{namespace="prod",name="main",member="main-a",member_id="abc"} 1"#,
            r#"etcd_steward_cluster_member_db_size_bytes{namespace="prod",name="main",member="main-b"} 16384"#,
            r#"etcd_steward_cluster_policy_failures_total{namespace="prod",name="main"} 0"#,
            r#"etcd_steward_cluster_alarms{namespace="prod",name="main",alarm="NOSPACE"} 0"#,
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        // A new leader replaces the old series; a gone member's size goes.
        h.leader = Some(("main-b".into(), 0xdef));
        h.db_sizes.truncate(1);
        h.available = false;
        h.policy_failed = true;
        m.observe_cluster(&id(), &h);
        let text = m.encode();
        assert!(
            !text.contains(r#"member="main-a",member_id="abc""#),
            "{text}"
        );
        assert!(
            text.contains(r#"member="main-b",member_id="def"} 1"#),
            "{text}"
        );
        assert!(!text.contains(r#"db_size_bytes{namespace="prod",name="main",member="main-b"}"#));
        assert!(text.contains(r#"etcd_steward_cluster_available{namespace="prod",name="main"} 0"#));
        assert!(text.contains(r#"policy_failures_total{namespace="prod",name="main"} 1"#));
        m.count_caught_policy_error();
        assert!(
            m.encode()
                .contains(r#"etcd_steward_policy_failures_total{kind="PolicyError"} 1"#)
        );
        m.forget_cluster(&ClusterLabels {
            namespace: "prod".into(),
            name: "main".into(),
        });
        assert!(!m.encode().contains(r#"name="main""#), "{}", m.encode());
    }
}

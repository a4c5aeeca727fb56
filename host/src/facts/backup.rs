//! What a status policy knows of a cluster's backups: the active
//! EtcdBackupSchedule that runs most often, and when the newest verified
//! EtcdSnapshot of the cluster completed. Times, not ages: the policy has
//! `now`, and decides itself what is overdue.

use std::sync::Arc;

use kube::ResourceExt;
use steward_policy_sdk::BackupFacts;

use crate::api::{EtcdBackupSchedule, EtcdCluster, EtcdSnapshot, SnapshotPhase};
use crate::context::Context;
use crate::facts::ms;
use crate::schedule;

/// The backup facts of `cluster`, from the watch caches.
pub fn observe_backup(
    ctx: &Context,
    cluster: &EtcdCluster,
    now: jiff::Timestamp,
) -> Option<BackupFacts> {
    backup_facts(
        cluster,
        &ctx.watches.schedules.store().state(),
        &ctx.watches.snapshots.store().state(),
        now,
    )
}

/// None when no schedule of the cluster's is active (not suspended, and
/// its cron expression valid): no backup is expected then. Otherwise the
/// schedule with the shortest interval (as the metric
/// `backup_schedule_interval_seconds` computes it: [`schedule::interval`]),
/// the first by name on a tie, and the newest completion among the
/// cluster's Complete and Verified snapshots.
pub fn backup_facts(
    cluster: &EtcdCluster,
    schedules: &[Arc<EtcdBackupSchedule>],
    snapshots: &[Arc<EtcdSnapshot>],
    now: jiff::Timestamp,
) -> Option<BackupFacts> {
    let ns = cluster.namespace();
    let name = cluster.name_any();
    let (interval, chosen) = schedules
        .iter()
        .filter(|s| s.namespace() == ns && s.spec.cluster_ref.name == name && !s.spec.suspend)
        .filter_map(|s| {
            let cron = schedule::cron(s).ok()?;
            Some((schedule::interval(&cron, now)?, s))
        })
        .min_by(|(a, s), (b, t)| a.cmp(b).then_with(|| s.name_any().cmp(&t.name_any())))?;
    let last_success = verified_snapshots(cluster, snapshots)
        .first()
        .map(|(_, t)| *t);
    Some(BackupFacts {
        schedule: chosen.name_any(),
        // Every stored object has a creation time; without one, the
        // schedule counts as new, so nothing is overdue yet.
        schedule_created: chosen
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now.as_millisecond(), ms),
        interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
        last_success,
    })
}

/// The cluster's Complete and Verified snapshots with when each completed,
/// newest first: the backups to count on, and to restore from.
pub fn verified_snapshots(
    cluster: &EtcdCluster,
    snapshots: &[Arc<EtcdSnapshot>],
) -> Vec<(Arc<EtcdSnapshot>, i64)> {
    let ns = cluster.namespace();
    let name = cluster.name_any();
    // A snapshot that completed before this EtcdCluster existed is of an
    // earlier cluster of the same name, not a backup of this one.
    let born = cluster.metadata.creation_timestamp.as_ref().map(ms);
    let mut v: Vec<(Arc<EtcdSnapshot>, i64)> = snapshots
        .iter()
        .filter(|s| s.namespace() == ns && s.spec.cluster_ref.name == name)
        .filter_map(|s| Some((s.clone(), verified_completion(s)?)))
        .filter(|(_, t)| born.is_none_or(|b| *t >= b))
        .collect();
    v.sort_by(|(a, t), (b, u)| u.cmp(t).then_with(|| a.name_any().cmp(&b.name_any())));
    v
}

/// When a snapshot completed, if it is a backup to count on: Complete, and
/// its object read back and matched (`Verified=True`).
fn verified_completion(s: &EtcdSnapshot) -> Option<i64> {
    let status = s.status.as_ref()?;
    let verified = status
        .condition("Verified")
        .is_some_and(|c| c.status == "True");
    if status.phase != Some(SnapshotPhase::Complete) || !verified {
        return None;
    }
    status.completion_time.as_ref().map(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    fn cluster() -> EtcdCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": "main", "namespace": "ns", "creationTimestamp": "2026-12-01T00:00:00Z"},
            "spec": {},
        }))
        .unwrap()
    }

    fn schedule(name: &str, cluster: &str, cron: &str, suspend: bool) -> Arc<EtcdBackupSchedule> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "etcd.steward.dev/v1alpha1",
                "kind": "EtcdBackupSchedule",
                "metadata": {"name": name, "namespace": "ns",
                             "creationTimestamp": "2026-12-02T00:00:00Z"},
                "spec": {"clusterRef": {"name": cluster}, "schedule": cron, "suspend": suspend,
                         "destination": {"s3": {"endpoint": "http://s3", "bucket": "bkt",
                                                "credentialsSecretRef": {"name": "c"}}}},
            }))
            .unwrap(),
        )
    }

    fn snapshot(
        namespace: &str,
        cluster: &str,
        phase: &str,
        verified: &str,
        done: &str,
    ) -> Arc<EtcdSnapshot> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "etcd.steward.dev/v1alpha1",
                "kind": "EtcdSnapshot",
                "metadata": {"name": "snap", "namespace": namespace},
                "spec": {"clusterRef": {"name": cluster},
                         "destination": {"s3": {"endpoint": "http://s3", "bucket": "bkt",
                                                "credentialsSecretRef": {"name": "c"}}}},
                "status": {"phase": phase, "completionTime": done,
                           "conditions": [{"type": "Verified", "status": verified, "reason": "R",
                                           "message": "", "lastTransitionTime": done}]},
            }))
            .unwrap(),
        )
    }

    const NOW: &str = "2026-12-06T07:20:00Z";

    #[test]
    fn the_most_frequent_active_schedule_of_the_cluster_is_taken() {
        let schedules = [
            schedule("daily", "main", "0 3 * * *", false),
            schedule("hourly", "main", "0 * * * *", false),
            schedule("paused", "main", "* * * * *", true),
            schedule("broken", "main", "not a cron", false),
            schedule("other", "elsewhere", "*/5 * * * *", false),
        ];
        let facts = backup_facts(&cluster(), &schedules, &[], at(NOW)).unwrap();
        assert_eq!(facts.schedule, "hourly");
        assert_eq!(facts.interval_ms, 3_600_000);
        assert_eq!(
            facts.schedule_created,
            at("2026-12-02T00:00:00Z").as_millisecond()
        );
        assert_eq!(facts.last_success, None);
    }

    #[test]
    fn the_interval_is_the_one_the_schedule_metric_shows() {
        // Weekdays at 09:00: on a Thursday after the run, the next two
        // (Friday, Monday) are three days apart.
        let thursday = at("2026-12-03T10:00:00Z");
        let s = schedule("weekdays", "main", "0 9 * * 1-5", false);
        let facts = backup_facts(&cluster(), std::slice::from_ref(&s), &[], thursday).unwrap();
        let cron = schedule::cron(&s).unwrap();
        assert_eq!(
            Some(std::time::Duration::from_millis(facts.interval_ms)),
            schedule::interval(&cron, thursday)
        );
        assert_eq!(facts.interval_ms, 3 * 86_400_000);
    }

    #[test]
    fn a_tie_goes_to_the_first_schedule_by_name() {
        let schedules = [
            schedule("b-hourly", "main", "0 * * * *", false),
            schedule("a-hourly", "main", "30 * * * *", false),
        ];
        let facts = backup_facts(&cluster(), &schedules, &[], at(NOW)).unwrap();
        assert_eq!(facts.schedule, "a-hourly");
    }

    #[test]
    fn no_active_schedule_means_no_facts_whatever_the_snapshots() {
        let snapshots = [snapshot(
            "ns",
            "main",
            "Complete",
            "True",
            "2026-12-05T00:00:00Z",
        )];
        let suspended = [schedule("hourly", "main", "0 * * * *", true)];
        let other = [schedule("hourly", "elsewhere", "0 * * * *", false)];
        for schedules in [&[][..], &suspended[..], &other[..]] {
            assert_eq!(
                backup_facts(&cluster(), schedules, &snapshots, at(NOW)),
                None
            );
        }
    }

    #[test]
    fn only_complete_verified_snapshots_of_this_cluster_count() {
        let schedules = [schedule("hourly", "main", "0 * * * *", false)];
        let snapshots = [
            snapshot("ns", "main", "Complete", "True", "2026-12-05T00:00:00Z"),
            snapshot("ns", "main", "Complete", "True", "2026-12-04T00:00:00Z"),
            // Newer, but none of them a backup of this cluster to count on.
            snapshot("ns", "main", "Complete", "False", "2026-12-06T01:00:00Z"),
            snapshot("ns", "main", "Failed", "False", "2026-12-06T02:00:00Z"),
            snapshot("ns", "main", "Started", "False", "2026-12-06T03:00:00Z"),
            snapshot("ns", "other", "Complete", "True", "2026-12-06T04:00:00Z"),
            snapshot("ns2", "main", "Complete", "True", "2026-12-06T05:00:00Z"),
        ];
        let facts = backup_facts(&cluster(), &schedules, &snapshots, at(NOW)).unwrap();
        assert_eq!(
            facts.last_success,
            Some(at("2026-12-05T00:00:00Z").as_millisecond())
        );
    }

    #[test]
    fn a_snapshot_older_than_the_cluster_is_of_an_earlier_one() {
        let schedules = [schedule("hourly", "main", "0 * * * *", false)];
        // The cluster was created 2026-12-01: a cluster of the same name before it.
        let snapshots = [snapshot(
            "ns",
            "main",
            "Complete",
            "True",
            "2026-11-30T00:00:00Z",
        )];
        let facts = backup_facts(&cluster(), &schedules, &snapshots, at(NOW)).unwrap();
        assert_eq!(facts.last_success, None);
    }
}

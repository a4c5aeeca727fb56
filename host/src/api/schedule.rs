//! `EtcdBackupSchedule`: EtcdSnapshots of one cluster on a cron schedule,
//! with retention.
//!
//! A kind of its own rather than a `spec.backup` on the cluster: a cluster
//! may have several schedules (hourly to one store, daily to another); the
//! team that owns the backup credentials can own the schedule without
//! editing the cluster; and suspending or retuning backups never moves the
//! cluster's generation (which a rollout or a status reader watches). The
//! anchor's `clusterRef`, `schedule`, `destination` and status
//! `lastScheduleTime`/`lastSuccessfulBackupTime` keep their names.

use k8s_openapi::api::core::v1::LocalObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::snapshot::{SnapshotLocation, VerifyMode};

/// Labels every EtcdSnapshot a schedule creates with the schedule's name.
pub const LABEL_SCHEDULE: &str = "etcd.steward.dev/schedule";

// Each printcolumn repeats `type_`; clippy reads that as a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "etcd.steward.dev",
    version = "v1alpha1",
    kind = "EtcdBackupSchedule",
    namespaced,
    shortname = "ebs",
    status = "EtcdBackupScheduleStatus",
    derive = "PartialEq",
    doc = "EtcdSnapshots of an EtcdCluster on a cron schedule, with retention. Each snapshot is verified by reading it back; retention deletes only the snapshots (and objects) this schedule created.",
    printcolumn(
        name = "CLUSTER",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(name = "SCHEDULE", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(name = "SUSPEND", type_ = "boolean", json_path = ".spec.suspend"),
    printcolumn(name = "KEPT", type_ = "integer", json_path = ".status.kept"),
    printcolumn(
        name = "LAST BACKUP",
        type_ = "date",
        json_path = ".status.lastSuccessfulBackupTime"
    ),
    printcolumn(name = "NEXT", type_ = "date", json_path = ".status.nextScheduleTime"),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupScheduleSpec {
    /// The EtcdCluster (same namespace) to back up.
    pub cluster_ref: LocalObjectReference,
    /// A cron expression in UTC: five fields (minute hour day month
    /// weekday), or six with seconds first. `@hourly`, `@daily` and the
    /// like are accepted too.
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(
        validation = Rule::new("self.startsWith('@') || self.trim().split(' ').filter(f, f != '').size() in [5, 6]")
            .message("spec.schedule must be a cron expression of 5 fields (minute hour day month weekday) or 6 (seconds first), or a macro such as @daily"),
    )]
    pub schedule: String,
    /// No new snapshots while true; retention still runs.
    #[serde(default)]
    pub suspend: bool,
    /// Where each snapshot goes: as an EtcdSnapshot's. The object (or file)
    /// of a run is `<key>/<schedule>-<UTC time of the run>.db`
    /// (`<subPath>/…` on a claim).
    pub destination: SnapshotLocation,
    /// How each run is verified: as an EtcdSnapshot's `spec.verify`.
    #[serde(default)]
    pub verify: VerifyMode,
    #[serde(default)]
    pub retention: Retention,
    /// Failed snapshots (EtcdSnapshot objects, with their conditions) kept
    /// for inspection; at least 1, so the newest failure stays visible.
    #[serde(default = "default_failed_history")]
    #[schemars(range(min = 1, max = 100))]
    #[schemars(extend("format" = "int32"))]
    pub failed_history_limit: u32,
}

/// Which completed snapshots are kept: the union of every rule. Nothing
/// else is deleted, and the newest completed snapshot never is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Retention {
    /// The newest N.
    #[serde(default = "default_keep_last")]
    #[schemars(range(min = 1, max = 1000))]
    #[schemars(extend("format" = "int32"))]
    pub keep_last: u32,
    /// The newest in each of the last N hours (UTC).
    #[serde(default)]
    #[schemars(range(min = 0, max = 1000))]
    #[schemars(extend("format" = "int32"))]
    pub hourly: u32,
    /// The newest in each of the last N days.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1000))]
    #[schemars(extend("format" = "int32"))]
    pub daily: u32,
    /// The newest in each of the last N weeks.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1000))]
    #[schemars(extend("format" = "int32"))]
    pub weekly: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            keep_last: default_keep_last(),
            hourly: 0,
            daily: 0,
            weekly: 0,
        }
    }
}

fn default_keep_last() -> u32 {
    7
}

fn default_failed_history() -> u32 {
    3
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupScheduleStatus {
    /// The scheduled time of the last run started (the anchor's field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When the last snapshot of this schedule completed and was verified
    /// (the anchor's field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_backup_time: Option<Time>,
    /// The newest completed snapshot: its EtcdSnapshot and URI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_snapshot: Option<ScheduledSnapshot>,
    /// The newest failed snapshot, and why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_snapshot: Option<ScheduledSnapshot>,
    /// The EtcdSnapshot of the run in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
    /// When the next run is due (unset while suspended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// Completed snapshots retention keeps.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub kept: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (the schedule runs and its last run completed), Stalled (the
    /// schedule cannot run: InvalidSchedule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledSnapshot {
    /// The EtcdSnapshot.
    pub name: String,
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// For a failed one: its Ready reason and message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

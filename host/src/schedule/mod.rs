//! The EtcdBackupSchedule controller: an EtcdSnapshot per scheduled run,
//! and retention of the ones it created.
//!
//! ```text
//! observe  ->  plan (pure)  ->  write status  ->  act
//! ```
//!
//! - [`observe`] reads the schedule's own EtcdSnapshots from the watch
//!   cache: those that carry its label and name it as controlling owner.
//! - [`plan`] decides, from those facts and the clock alone: the run to
//!   start (at most one: a schedule whose runs were missed while the
//!   operator was down takes one snapshot on return, for the latest missed
//!   time), which snapshots retention drops, and the status.
//! - The status is written before any snapshot is created or deleted.
//! - [`act`] creates the run's EtcdSnapshot (its controller takes, uploads
//!   and verifies it) and deletes what retention drops: the object first,
//!   and only if its metadata names the EtcdSnapshot that wrote it, then
//!   the EtcdSnapshot. Nothing else in the bucket is ever touched. On a
//!   claim, a remove Pod deletes the run's file only if its sha256 is the
//!   run's checksum (another file is left alone, with a Warning Event),
//!   and the EtcdSnapshot goes once that Pod has succeeded.
//!
//! A run is not started while the previous one is still in progress (as a
//! CronJob's `concurrencyPolicy: Forbid`); the slot it missed is taken once
//! the previous run ends.

pub mod retention;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType as KubeEventType;
use kube::{Resource, ResourceExt};
use steward_policy_sdk::{Condition, ConditionStatus};

use crate::api::{
    EtcdBackupSchedule, EtcdBackupScheduleStatus, EtcdSnapshot, LABEL_SCHEDULE, ScheduledSnapshot,
    SnapshotPhase, write_whole_status,
};
use crate::context::Context;
use crate::error::Error;
use crate::snapshot::{Problem, pod, reason};

/// The longest schedule name: it is the value of [`LABEL_SCHEDULE`].
const MAX_NAME: usize = 63;

/// The annotation on a scheduled EtcdSnapshot: the run's scheduled time.
pub const SCHEDULED_TIME: &str = "etcd.steward.dev/scheduled-time";

/// One of the schedule's EtcdSnapshots, as the planner sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub name: String,
    pub phase: Option<SnapshotPhase>,
    /// Unix seconds: completion (or failure), else creation.
    pub at: i64,
    pub uri: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// The scheduled time it was created for (its annotation).
    pub slot: Option<jiff::Timestamp>,
}

impl Run {
    fn of(s: &EtcdSnapshot) -> Self {
        let status = s.status.clone().unwrap_or_default();
        let created = s
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second());
        let ready = status.condition("Ready");
        Self {
            name: s.name_any(),
            phase: status.phase,
            at: status
                .completion_time
                .as_ref()
                .map_or(created, |t| t.0.as_second()),
            uri: status.artifact.as_ref().map(|a| a.uri.clone()),
            reason: ready.map(|c| c.reason.clone()),
            message: ready.map(|c| c.message.clone()),
            slot: s
                .annotations()
                .get(SCHEDULED_TIME)
                .and_then(|t| t.parse().ok()),
        }
    }

    fn finished(&self) -> bool {
        matches!(
            self.phase,
            Some(SnapshotPhase::Complete | SnapshotPhase::Failed)
        )
    }
}

/// What one reconcile found.
pub struct Observed {
    pub schedule: Arc<EtcdBackupSchedule>,
    pub runs: Vec<Run>,
    pub now: jiff::Timestamp,
}

/// What to do, and the status that says so.
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub status: EtcdBackupScheduleStatus,
    /// The EtcdSnapshot to create, and its scheduled time.
    pub start: Option<(String, jiff::Timestamp)>,
    /// Completed runs retention drops (object and EtcdSnapshot).
    pub expire: Vec<String>,
    /// Failed runs beyond the history limit (EtcdSnapshot only).
    pub prune: Vec<String>,
    /// When to look again without any change.
    pub requeue: Duration,
    /// Seconds between two runs (the next two slots), for the metrics;
    /// None while suspended or invalid.
    pub interval: Option<f64>,
}

pub async fn reconcile_schedule(
    schedule: Arc<EtcdBackupSchedule>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let observed = observe(schedule, &ctx);
    let plan = plan(&observed);
    report(&observed.schedule, &plan, &ctx);
    write_status(&observed.schedule, &plan.status, &ctx).await?;
    act(&observed.schedule, &plan, &ctx).await;
    Ok(Action::requeue(plan.requeue))
}

pub fn observe(schedule: Arc<EtcdBackupSchedule>, ctx: &Context) -> Observed {
    let ns = schedule.namespace();
    let uid = schedule.uid();
    let name = schedule.name_any();
    let runs = ctx
        .watches
        .snapshots
        .store()
        .state()
        .iter()
        .filter(|s| {
            s.namespace() == ns
                && s.labels().get(LABEL_SCHEDULE) == Some(&name)
                && s.owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
        })
        .map(|s| Run::of(s))
        .collect();
    Observed {
        schedule,
        runs,
        now: jiff::Timestamp::now(),
    }
}

/// The name of the run scheduled at `at`: `<schedule>-<YYYYMMDDhhmmss>`.
pub fn run_name(schedule: &str, at: jiff::Timestamp) -> String {
    format!("{schedule}-{}", at.strftime("%Y%m%d%H%M%S"))
}

pub fn plan(o: &Observed) -> Plan {
    let s = &o.schedule;
    let prev = s.status.clone().unwrap_or_default();
    let now_zoned = o.now.to_zoned(jiff::tz::TimeZone::UTC);
    let cron = cron(s);

    let active = o
        .runs
        .iter()
        .find(|r| !r.finished())
        .map(|r| r.name.clone());
    // The runs that exist say which slots were taken: a run whose creation
    // failed is tried again, and a status written from a stale cache
    // cannot move the schedule back. The newest run always exists (the
    // newest complete one is kept by keepLast, the newest failed one by
    // failedHistoryLimit, both at least 1); the status stands in only
    // while there are none.
    let created = s
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(o.now, |t| t.0);
    let last_scheduled = o
        .runs
        .iter()
        .filter_map(|r| r.slot)
        .max()
        .or_else(|| prev.last_schedule_time.as_ref().map(|t| t.0))
        .unwrap_or(created);
    let due = cron.as_ref().ok().and_then(|c| {
        c.find_previous_occurrence(&now_zoned, true)
            .ok()
            .map(|z| z.timestamp())
            .filter(|slot| *slot > last_scheduled)
    });
    let start = match (due, &active, s.spec.suspend) {
        (Some(slot), None, false) => {
            let name = run_name(&s.name_any(), slot);
            // Already created (a status write lost before): not again.
            (!o.runs.iter().any(|r| r.name == name)).then_some((name, slot))
        }
        _ => None,
    };
    let next = cron.as_ref().ok().and_then(|c| {
        c.find_next_occurrence(&now_zoned, false)
            .ok()
            .map(|z| z.timestamp())
    });

    // Retention, over completed runs only.
    let complete: Vec<&Run> = o
        .runs
        .iter()
        .filter(|r| r.phase == Some(SnapshotPhase::Complete))
        .collect();
    let times: Vec<i64> = complete.iter().map(|r| r.at).collect();
    let kept = retention::keep(&times, &s.spec.retention, o.now.as_second());
    let expire = complete
        .iter()
        .enumerate()
        .filter(|(i, _)| !kept.contains(i))
        .map(|(_, r)| r.name.clone())
        .collect();
    let mut failed: Vec<&Run> = o
        .runs
        .iter()
        .filter(|r| r.phase == Some(SnapshotPhase::Failed))
        .collect();
    failed.sort_by_key(|r| std::cmp::Reverse(r.at));
    let prune = failed
        .iter()
        .skip(s.spec.failed_history_limit as usize)
        .map(|r| r.name.clone())
        .collect();

    let newest = |phase| {
        o.runs
            .iter()
            .filter(|r| r.phase == Some(phase))
            .max_by_key(|r| r.at)
            .map(|r| ScheduledSnapshot {
                name: r.name.clone(),
                time: Time(jiff::Timestamp::from_second(r.at).unwrap_or_default()),
                uri: r.uri.clone(),
                reason: (phase == SnapshotPhase::Failed)
                    .then(|| r.reason.clone())
                    .flatten(),
                message: (phase == SnapshotPhase::Failed)
                    .then(|| r.message.clone())
                    .flatten(),
            })
    };
    let last_ok = newest(SnapshotPhase::Complete);
    let last_failed = newest(SnapshotPhase::Failed);
    let active = start.as_ref().map(|(n, _)| n.clone()).or(active);

    // The newest finished run decides.
    let failed_last = last_failed
        .as_ref()
        .filter(|f| last_ok.as_ref().is_none_or(|ok| ok.time.0 < f.time.0));
    let ready = match (&cron, &last_ok, failed_last) {
        (Err(why), _, _) => cond(
            "Ready",
            ConditionStatus::False,
            "InvalidSchedule",
            why.clone(),
        ),
        (Ok(_), _, Some(f)) => cond(
            "Ready",
            ConditionStatus::False,
            "LastRunFailed",
            format!(
                "the last run, {}, failed: {}: {}",
                f.name,
                f.reason.clone().unwrap_or_default(),
                f.message.clone().unwrap_or_default()
            ),
        ),
        (Ok(_), Some(ok), _) => cond(
            "Ready",
            ConditionStatus::True,
            "LastRunComplete",
            format!(
                "the last run, {}, completed and was verified: {}",
                ok.name,
                ok.uri.clone().unwrap_or_default()
            ),
        ),
        (Ok(_), None, None) => cond(
            "Ready",
            ConditionStatus::True,
            "Scheduled",
            "no run has finished yet".into(),
        ),
    };
    let desired = [
        ready,
        match &cron {
            Err(why) => cond(
                "Stalled",
                ConditionStatus::True,
                "InvalidSchedule",
                why.clone(),
            ),
            Ok(_) => cond(
                "Stalled",
                ConditionStatus::False,
                "ScheduleValid",
                String::new(),
            ),
        },
        match &active {
            Some(name) => cond(
                "Reconciling",
                ConditionStatus::True,
                "RunInProgress",
                format!("{name} is being taken"),
            ),
            None => cond("Reconciling", ConditionStatus::False, "Idle", String::new()),
        },
    ];
    let status = EtcdBackupScheduleStatus {
        last_schedule_time: start
            .as_ref()
            .map(|(_, slot)| *slot)
            .or(o.runs.iter().filter_map(|r| r.slot).max())
            .or(prev.last_schedule_time.as_ref().map(|t| t.0))
            .map(Time),
        last_successful_backup_time: last_ok.as_ref().map(|r| r.time.clone()),
        last_successful_snapshot: last_ok,
        last_failed_snapshot: last_failed,
        active,
        next_schedule_time: next.filter(|_| !s.spec.suspend).map(Time),
        kept: kept.len() as u32,
        observed_generation: s.metadata.generation,
        conditions: crate::conditions::merge(
            &prev.conditions,
            &desired,
            s.metadata.generation.unwrap_or_default(),
            o.now,
        ),
    };
    let requeue = next
        .map(|n| {
            let secs = (n.as_millisecond() - o.now.as_millisecond()).max(0) as u64;
            Duration::from_millis(secs).min(Duration::from_secs(60))
        })
        .unwrap_or(Duration::from_secs(60))
        .max(Duration::from_millis(200));
    let interval = cron
        .as_ref()
        .ok()
        .filter(|_| !s.spec.suspend)
        .and_then(|c| interval(c, o.now))
        .map(|d| d.as_secs_f64());
    Plan {
        status,
        start,
        expire,
        prune,
        requeue,
        interval,
    }
}

/// The schedule's cron expression, or why it has none: an expression that
/// does not parse, or a name too long for the label its runs carry (such a
/// schedule never runs).
pub fn cron(s: &EtcdBackupSchedule) -> Result<croner::Cron, String> {
    let name = s.name_any();
    if name.len() > MAX_NAME {
        return Err(format!(
            "the schedule's name has {} characters; at most {MAX_NAME} fit the label its runs carry",
            name.len()
        ));
    }
    s.spec
        .schedule
        .parse::<croner::Cron>()
        .map_err(|e| format!("spec.schedule {:?} does not parse: {e}", s.spec.schedule))
}

/// The time between the schedule's next two runs after `now`: the one
/// definition of its interval, for the metric and the status policy's
/// backup facts alike. None when the expression has no two runs ahead.
pub fn interval(cron: &croner::Cron, now: jiff::Timestamp) -> Option<Duration> {
    let now = now.to_zoned(jiff::tz::TimeZone::UTC);
    let first = cron.find_next_occurrence(&now, false).ok()?;
    let second = cron.find_next_occurrence(&first, false).ok()?;
    let ms = second.timestamp().as_millisecond() - first.timestamp().as_millisecond();
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// The schedule's series: its interval, and its newest verified run as
/// the cluster's last success (which a restart would otherwise lose).
fn report(s: &EtcdBackupSchedule, plan: &Plan, ctx: &Context) {
    let cluster = crate::metrics::ClusterLabels {
        namespace: s.namespace().unwrap_or_default(),
        name: s.spec.cluster_ref.name.clone(),
    };
    ctx.metrics
        .set_schedule_interval(&schedule_labels(s), plan.interval);
    if let Some(t) = &plan.status.last_successful_backup_time {
        ctx.metrics
            .observe_backup_success(&cluster, t.0.as_millisecond() as f64 / 1000.0);
    }
}

pub fn schedule_labels(s: &EtcdBackupSchedule) -> crate::metrics::ScheduleLabels {
    crate::metrics::ScheduleLabels {
        namespace: s.namespace().unwrap_or_default(),
        name: s.spec.cluster_ref.name.clone(),
        schedule: s.name_any(),
    }
}

fn cond(type_: &str, status: ConditionStatus, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message,
    }
}

async fn write_status(
    s: &EtcdBackupSchedule,
    status: &EtcdBackupScheduleStatus,
    ctx: &Context,
) -> Result<(), Error> {
    // Quiet at rest: an unchanged status is not written again.
    if s.status.as_ref() == Some(status) {
        return Ok(());
    }
    let api: Api<EtcdBackupSchedule> =
        Api::namespaced(ctx.client.clone(), &s.namespace().unwrap_or_default());
    write_whole_status(&api, &s.name_any(), status)
        .await
        .map_err(Error::StatusWrite)?;
    Ok(())
}

/// Creates the run and deletes what retention drops. Each failure is an
/// Event and is tried again on the next reconcile; the status was written.
async fn act(s: &EtcdBackupSchedule, plan: &Plan, ctx: &Context) {
    let ns = s.namespace().unwrap_or_default();
    let api: Api<EtcdSnapshot> = Api::namespaced(ctx.client.clone(), &ns);
    if let Some((name, slot)) = &plan.start {
        let snapshot = scheduled_snapshot(s, name, *slot);
        match api.create(&PostParams::default(), &snapshot).await {
            Ok(_) => {
                event(
                    s,
                    KubeEventType::Normal,
                    "RunStarted",
                    &format!("created EtcdSnapshot {name} for the run scheduled at {slot}"),
                    ctx,
                )
                .await
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                event(
                    s,
                    KubeEventType::Warning,
                    "RunNotStarted",
                    &format!("creating EtcdSnapshot {name}: {e}"),
                    ctx,
                )
                .await
            }
        }
    }
    let store = ctx.watches.snapshots.store();
    // A run a cluster is being restored from stays until that cluster has
    // formed: its seed's Pod fetches the object.
    let restoring_from = |name: &str| {
        ctx.watches.clusters.store().state().iter().any(|c| {
            c.namespace().as_deref() == Some(ns.as_str())
                && c.status
                    .as_ref()
                    .and_then(|s| s.cluster_id.as_ref())
                    .is_none()
                && crate::restore::source(c)
                    .and_then(|s| s.snapshot_ref)
                    .is_some_and(|r| r.name == name)
        })
    };
    for name in &plan.expire {
        if restoring_from(name) {
            continue;
        }
        let Some(snap) = store.get(&kube::runtime::reflector::ObjectRef::new(name).within(&ns))
        else {
            continue;
        };
        // Already going (the cache may lag its deletion): no remove Pod
        // is made for a run that is gone.
        if snap.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match expire_object(s, &snap, ctx).await {
            Ok(Expired::Gone) => {}
            Ok(Expired::LeftAlone(why)) => {
                event(
                    s,
                    KubeEventType::Warning,
                    reason::OBJECT_EXISTS,
                    &format!("retention left the file of {name} alone: {why}"),
                    ctx,
                )
                .await
            }
            // A file on a claim is deleted by a Pod: the EtcdSnapshot goes
            // once it has succeeded (its end wakes this schedule).
            Ok(Expired::InProgress) => continue,
            Err(problem) => {
                event(
                    s,
                    KubeEventType::Warning,
                    problem.reason,
                    &format!(
                        "retention could not delete the object of {name}; kept for now: {}",
                        problem.message
                    ),
                    ctx,
                )
                .await;
                continue;
            }
        }
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
    for name in &plan.prune {
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
}

enum Expired {
    Gone,
    /// A file on a claim that the run did not write: left alone, and the
    /// run goes (as an S3 object another writer replaced).
    LeftAlone(String),
    InProgress,
}

/// Deletes the snapshot's object or file, if that snapshot wrote it.
async fn expire_object(
    schedule: &EtcdBackupSchedule,
    snap: &EtcdSnapshot,
    ctx: &Context,
) -> Result<Expired, Problem> {
    if snap.spec.destination.pvc.is_some() {
        return expire_file(schedule, snap, ctx).await;
    }
    let Some(location) = snap.spec.destination.s3.as_ref() else {
        return Ok(Expired::Gone);
    };
    let ns = snap.namespace().unwrap_or_default();
    let credentials = crate::snapshot::credentials(ctx, &ns, location).await?;
    let dest = crate::snapshot::store::Destination::new(location, &snap.name_any(), &credentials)?;
    dest.delete_if_written_by(&snap.uid().unwrap_or_default())
        .await
        .map(|_| Expired::Gone)
}

/// How long a failed remove Pod is kept before it is replaced: a failure
/// that repeats is retried (and reported) once a minute, not on every
/// wake-up.
const REMOVE_RETRY: Duration = Duration::from_secs(60);

/// A run's file on a claim: deleted by a remove Pod of the run's, only if
/// its sha256 is the run's checksum.
async fn expire_file(
    schedule: &EtcdBackupSchedule,
    snap: &EtcdSnapshot,
    ctx: &Context,
) -> Result<Expired, Problem> {
    let Some(artifact) = snap.status.as_ref().and_then(|s| s.artifact.clone()) else {
        return Ok(Expired::Gone);
    };
    let Some(file) = pod::parse_pvc_uri(&artifact.uri) else {
        return Ok(Expired::Gone);
    };
    // Only ever the claim the run was written to.
    if snap.spec.destination.pvc.as_ref().map(|p| &p.claim_name) != Some(&file.claim_name) {
        return Ok(Expired::Gone);
    }
    let ns = snap.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let name = pod::remove_pod_name(&snap.name_any());
    let kube_problem =
        |e: kube::Error| Problem::retry(reason::POD_FAILED, format!("Pod {name}: {e}"));
    let Some(existing) = pods.get_opt(&name).await.map_err(kube_problem)? else {
        let mut remove = pod::remove_pod(
            &schedule.name_any(),
            snap,
            &file,
            &artifact.checksum,
            &ctx.config.operator_image,
        );
        let cluster = ctx.watches.clusters.store().get(
            &kube::runtime::reflector::ObjectRef::new(&snap.spec.cluster_ref.name).within(&ns),
        );
        pod::stamp(
            &mut remove,
            0,
            cluster.and_then(|c| c.spec.image_pull_secrets.clone()),
        );
        match pods.create(&PostParams::default(), &remove).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(kube_problem(e)),
        }
        return Ok(Expired::InProgress);
    };
    let ours = existing
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == snap.metadata.uid.as_ref());
    if !ours {
        return Err(Problem::retry(
            reason::POD_FAILED,
            format!(
                "Pod {name} exists and is not controlled by EtcdSnapshot {}; delete or rename it",
                snap.name_any()
            ),
        ));
    }
    if existing.metadata.deletion_timestamp.is_some() {
        return Ok(Expired::InProgress);
    }
    match pod::outcome(&existing) {
        pod::Outcome::Running => match pod::stuck(&existing, REMOVE_RETRY * 5) {
            None => Ok(Expired::InProgress),
            // Replaced on the next pass, with an Event for this one.
            Some(why) => {
                let _ = pods.delete(&name, &DeleteParams::background()).await;
                Err(Problem::retry(reason::POD_FAILED, why))
            }
        },
        // The run is deleted next, and the Pod with it.
        pod::Outcome::Succeeded(message) => Ok(match pod::report(&message) {
            Some(pod::Report::LeftAlone { message }) => Expired::LeftAlone(message),
            _ => Expired::Gone,
        }),
        pod::Outcome::Failed { problem, .. } => {
            let failed_for = pod::finished_at(&existing)
                .and_then(|t| Duration::try_from(jiff::Timestamp::now().duration_since(t)).ok())
                .unwrap_or(REMOVE_RETRY);
            if failed_for < REMOVE_RETRY {
                return Ok(Expired::InProgress);
            }
            let _ = pods.delete(&name, &DeleteParams::background()).await;
            Err(problem)
        }
    }
}

/// The EtcdSnapshot of one run: owned by the schedule, labelled with it,
/// annotated with the scheduled time, to the schedule's destination.
pub fn scheduled_snapshot(
    s: &EtcdBackupSchedule,
    name: &str,
    slot: jiff::Timestamp,
) -> EtcdSnapshot {
    let mut snap = EtcdSnapshot::new(
        name,
        crate::api::EtcdSnapshotSpec {
            cluster_ref: s.spec.cluster_ref.clone(),
            destination: s.spec.destination.clone(),
            verify: s.spec.verify,
        },
    );
    snap.metadata.namespace = s.namespace();
    snap.metadata.labels = Some(BTreeMap::from([(LABEL_SCHEDULE.to_owned(), s.name_any())]));
    snap.metadata.annotations = Some(BTreeMap::from([(
        SCHEDULED_TIME.to_owned(),
        slot.to_string(),
    )]));
    snap.metadata.owner_references = s.controller_owner_ref(&()).map(|o| vec![o]);
    snap
}

async fn event(
    s: &EtcdBackupSchedule,
    type_: KubeEventType,
    reason: &str,
    note: &str,
    ctx: &Context,
) {
    ctx.publish_event(s, type_, reason, note, "Schedule").await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(cron: &str, status: Option<serde_json::Value>) -> Arc<EtcdBackupSchedule> {
        let mut v = serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdBackupSchedule",
            "metadata": {"name": "nightly", "namespace": "ns", "uid": "u1", "generation": 1,
                          "creationTimestamp": "2026-12-01T00:00:00Z"},
            "spec": {"clusterRef": {"name": "main"}, "schedule": cron,
                     "destination": {"s3": {"endpoint": "http://s3", "bucket": "b",
                                            "credentialsSecretRef": {"name": "c"}}},
                     "retention": {"keepLast": 2}},
        });
        if let Some(s) = status {
            v["status"] = s;
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn at(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    fn run(name: &str, phase: SnapshotPhase, at_: &str) -> Run {
        Run {
            name: name.into(),
            phase: Some(phase),
            at: at(at_).as_second(),
            uri: Some(format!("s3://b/{name}.db")),
            reason: (phase == SnapshotPhase::Failed).then(|| "AccessDenied".into()),
            message: None,
            slot: None,
        }
    }

    #[test]
    fn missed_runs_give_one_snapshot_for_the_latest_slot() {
        // Hourly; last run at 03:00; the operator was down until 07:20.
        let o = Observed {
            schedule: schedule(
                "0 * * * *",
                Some(serde_json::json!({"lastScheduleTime": "2026-12-06T03:00:00Z"})),
            ),
            runs: vec![run(
                "nightly-20261206030000",
                SnapshotPhase::Complete,
                "2026-12-06T03:00:09Z",
            )],
            now: at("2026-12-06T07:20:00Z"),
        };
        let p = plan(&o);
        assert_eq!(
            p.start,
            Some(("nightly-20261206070000".into(), at("2026-12-06T07:00:00Z")))
        );
        assert_eq!(
            p.status.last_schedule_time,
            Some(Time(at("2026-12-06T07:00:00Z")))
        );
        assert_eq!(
            p.status.next_schedule_time,
            Some(Time(at("2026-12-06T08:00:00Z")))
        );
        assert_eq!(p.status.active.as_deref(), Some("nightly-20261206070000"));
        // The status after that write starts nothing more.
        let again = Observed {
            schedule: schedule("0 * * * *", Some(serde_json::to_value(&p.status).unwrap())),
            runs: o.runs.clone(),
            now: at("2026-12-06T07:20:05Z"),
        };
        assert_eq!(plan(&again).start, None);
    }

    #[test]
    fn a_run_whose_creation_failed_is_tried_again() {
        // The status says 07:00 was started, but no run for it exists
        // (the create was refused): the runs say 06:00 was the last.
        let mut six = run(
            "nightly-20261206060000",
            SnapshotPhase::Complete,
            "2026-12-06T06:00:09Z",
        );
        six.slot = Some(at("2026-12-06T06:00:00Z"));
        let o = Observed {
            schedule: schedule(
                "0 * * * *",
                Some(serde_json::json!({"lastScheduleTime": "2026-12-06T07:00:00Z"})),
            ),
            runs: vec![six],
            now: at("2026-12-06T07:00:40Z"),
        };
        assert_eq!(
            plan(&o).start,
            Some(("nightly-20261206070000".into(), at("2026-12-06T07:00:00Z")))
        );
    }

    #[test]
    fn a_name_too_long_for_its_runs_label_is_refused() {
        let mut s = (*schedule("0 * * * *", None)).clone();
        s.metadata.name = Some("n".repeat(64));
        let p = plan(&Observed {
            schedule: Arc::new(s),
            runs: vec![],
            now: at("2026-12-06T07:00:40Z"),
        });
        assert_eq!(p.start, None);
        let stalled = p
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Stalled")
            .unwrap();
        assert!(
            stalled.message.contains("at most 63"),
            "{}",
            stalled.message
        );
    }

    #[test]
    fn no_run_while_one_is_in_progress_or_suspended() {
        let mut running = run(
            "nightly-20261206060000",
            SnapshotPhase::Started,
            "2026-12-06T06:00:01Z",
        );
        running.phase = Some(SnapshotPhase::Started);
        let o = Observed {
            schedule: schedule(
                "0 * * * *",
                Some(serde_json::json!({"lastScheduleTime": "2026-12-06T06:00:00Z"})),
            ),
            runs: vec![running],
            now: at("2026-12-06T07:00:30Z"),
        };
        assert_eq!(plan(&o).start, None, "Forbid: the 07:00 slot waits");
        let mut s = (*schedule("0 * * * *", None)).clone();
        s.spec.suspend = true;
        let o = Observed {
            schedule: Arc::new(s),
            runs: vec![],
            now: at("2026-12-06T07:00:30Z"),
        };
        let p = plan(&o);
        assert_eq!(p.start, None);
        assert_eq!(p.status.next_schedule_time, None);
    }

    #[test]
    fn retention_drops_only_older_completed_runs_and_prunes_failed_history() {
        let o = Observed {
            schedule: schedule(
                "0 * * * *",
                Some(serde_json::json!({"lastScheduleTime": "2026-12-06T07:00:00Z"})),
            ),
            runs: vec![
                run("a", SnapshotPhase::Complete, "2026-12-06T04:00:05Z"),
                run("b", SnapshotPhase::Complete, "2026-12-06T05:00:05Z"),
                run("c", SnapshotPhase::Failed, "2026-12-06T05:30:05Z"),
                run("d", SnapshotPhase::Complete, "2026-12-06T06:00:05Z"),
                run("e", SnapshotPhase::Complete, "2026-12-06T07:00:05Z"),
                run("f", SnapshotPhase::Failed, "2026-12-06T06:30:05Z"),
                run("g", SnapshotPhase::Failed, "2026-12-06T06:40:05Z"),
                run("h", SnapshotPhase::Failed, "2026-12-06T06:50:05Z"),
            ],
            now: at("2026-12-06T07:10:00Z"),
        };
        let p = plan(&o);
        let mut expire = p.expire.clone();
        expire.sort();
        assert_eq!(expire, ["a", "b"], "keepLast 2 keeps d and e");
        assert_eq!(p.prune, ["c"], "three failed runs are kept");
        assert_eq!(p.status.kept, 2);
        let ok = p.status.last_successful_snapshot.unwrap();
        assert_eq!(ok.name, "e");
        assert_eq!(p.status.last_failed_snapshot.unwrap().name, "h");
        // The newest finished run completed: Ready.
        let ready = p
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "LastRunComplete")
        );
    }

    #[test]
    fn an_unparsable_schedule_is_stalled_with_the_parsers_reason() {
        let o = Observed {
            schedule: schedule("61 * * * *", None),
            runs: vec![],
            now: at("2026-12-06T07:10:00Z"),
        };
        let p = plan(&o);
        assert_eq!(p.start, None);
        let stalled = p
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Stalled")
            .unwrap();
        assert_eq!(
            (stalled.status.as_str(), stalled.reason.as_str()),
            ("True", "InvalidSchedule")
        );
        assert!(
            stalled.message.contains("61 * * * *"),
            "{}",
            stalled.message
        );
    }

    #[test]
    fn seconds_schedules_run_at_their_second() {
        let o = Observed {
            schedule: schedule("*/10 * * * * *", None),
            runs: vec![],
            now: at("2026-12-01T00:00:25Z"),
        };
        let p = plan(&o);
        assert_eq!(p.start.map(|(_, t)| t), Some(at("2026-12-01T00:00:20Z")));
        assert_eq!(p.requeue, Duration::from_secs(5));
        assert_eq!(p.interval, Some(10.0));
    }
}

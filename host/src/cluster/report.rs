//! After the status is computed: tell monitors and people what this
//! reconcile saw. The metrics are recorded before the status write, so they
//! follow etcd whatever the apiserver does with it; the Events after it,
//! so an Event never announces a status that was not written.
//!
//! Nothing here can fail a reconcile or change its status.

use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType};
use kube::{Resource, ResourceExt};
use steward_policy_sdk::{self as sdk, EventType};

use super::evaluate::Evaluated;
use super::status::StatusWritten;
use crate::api::EtcdClusterStatus;
use crate::conditions;
use crate::context::Context;

/// etcd's default `--quota-backend-bytes`: 2 GiB.
const DEFAULT_QUOTA_BACKEND_BYTES: i64 = 2 << 30;

/// Records this reconcile's view in the cluster's metrics. Called before
/// the status write, so the metrics follow etcd even while the apiserver
/// refuses the write.
pub fn metrics(e: &Evaluated, status: &EtcdClusterStatus, ctx: &Context) {
    let cluster = &e.observed.cluster;
    ctx.metrics.observe_cluster(
        &crate::metrics::ClusterLabels {
            namespace: cluster.namespace().unwrap_or_default(),
            name: cluster.name_any(),
        },
        &health(e, status),
    );
}

/// The metrics' view of this reconcile.
pub(crate) fn health(e: &Evaluated, status: &EtcdClusterStatus) -> crate::metrics::ClusterHealth {
    let answered = e.observed.answered();
    let leader_id = e.observed.leader_id();
    let alarm_count = |kind: sdk::AlarmKind| {
        answered
            .values()
            .filter(|s| s.alarms.contains(&kind))
            .count() as i64
    };
    crate::metrics::ClusterHealth {
        available: status
            .condition(conditions::AVAILABLE)
            .is_some_and(|c| c.status == "True"),
        ready_members: i64::from(status.ready_members),
        desired_members: i64::from(e.observed.cluster.spec.replicas),
        last_verified_ms: status
            .last_verified_time
            .as_ref()
            .map(|t| t.0.as_millisecond()),
        now_ms: e.observed.now.as_millisecond(),
        leader: leader_id.and_then(|id| {
            answered
                .iter()
                .find(|(_, s)| s.member_id == id)
                .map(|(name, _)| ((*name).to_owned(), id))
        }),
        policy_failed: e.problem.is_some() || super::evaluate::caught_by_sdk(&e.verdict),
        quota_bytes: e
            .observed
            .observation
            .spec
            .quota_backend_bytes
            .filter(|&q| q > 0)
            .map_or(DEFAULT_QUOTA_BACKEND_BYTES, |q| q as i64),
        db_sizes: answered
            .iter()
            .map(|(name, s)| ((*name).to_owned(), s.db_size as i64))
            .collect(),
        alarms: vec![
            ("NOSPACE", alarm_count(sdk::AlarmKind::Nospace)),
            ("CORRUPT", alarm_count(sdk::AlarmKind::Corrupt)),
        ],
    }
}

/// The Events of a written status: each condition transition, the
/// host's stand-in for a policy that failed, a deprecated policy form, and
/// the policy's own Events. A failed publish is logged, never retried: the
/// status already says it all.
pub async fn events(written: &StatusWritten, ctx: &Context) {
    let (e, status) = (&written.evaluated, &written.status);
    let cluster = &e.observed.cluster;
    let reference = cluster.object_ref(&());
    let prev = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let mut events: Vec<KubeEvent> = conditions::transitions(prev, &status.conditions)
        .into_iter()
        .map(|t| KubeEvent {
            type_: match t.event_type() {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: t.reason.clone(),
            note: Some(t.note()),
            action: "UpdateStatus".into(),
            secondary: None,
        })
        .collect();
    if let Some(p) = &e.problem {
        events.push(KubeEvent {
            type_: KubeEventType::Warning,
            reason: p.reason().into(),
            note: Some(crate::text::truncate(
                &p.message(),
                conditions::MAX_MESSAGE_BYTES,
            )),
            action: "EvaluatePolicy".into(),
            secondary: None,
        });
    }
    match &e.observed.issuance {
        crate::certificates::Issuance::NotInstalled => events.push(KubeEvent {
            type_: KubeEventType::Warning,
            reason: crate::certificates::REASON_NOT_INSTALLED.into(),
            note: Some(crate::certificates::not_installed_message()),
            action: "IssueCertificate".into(),
            secondary: None,
        }),
        crate::certificates::Issuance::Unknown(why) => events.push(KubeEvent {
            type_: KubeEventType::Warning,
            reason: crate::certificates::REASON_NOT_READY.into(),
            note: Some(crate::text::truncate(
                &format!("cannot list cert-manager Certificates: {why}"),
                conditions::MAX_MESSAGE_BYTES,
            )),
            action: "ListCertificates".into(),
            secondary: None,
        }),
        // One Event per Certificate, related to it: the recorder folds
        // repeats of a reason on the same pair of objects into one series
        // that keeps its first note.
        issuance => {
            let ns = e.observed.cluster.namespace();
            for c in issuance.reported_not_ready() {
                events.push(KubeEvent {
                    type_: KubeEventType::Warning,
                    reason: crate::certificates::REASON_NOT_READY.into(),
                    note: Some(crate::text::truncate(
                        &c.describe(),
                        conditions::MAX_MESSAGE_BYTES,
                    )),
                    action: "IssueCertificate".into(),
                    secondary: Some(k8s_openapi::api::core::v1::ObjectReference {
                        api_version: Some("cert-manager.io/v1".into()),
                        kind: Some("Certificate".into()),
                        name: Some(c.name.clone()),
                        namespace: ns.clone(),
                        ..Default::default()
                    }),
                });
            }
        }
    }
    if let Some(why) = &e.observed.tls.stale {
        events.push(KubeEvent {
            type_: KubeEventType::Warning,
            reason: "TLSSecretInvalid".into(),
            note: Some(crate::text::truncate(
                &format!("{why}; calling etcd with the TLS configuration read before"),
                conditions::MAX_MESSAGE_BYTES,
            )),
            action: "ReadSecret".into(),
            secondary: None,
        });
    }
    if let Some(note) = &e.deprecation {
        events.push(KubeEvent {
            type_: KubeEventType::Warning,
            reason: "DeprecatedPolicySource".into(),
            note: Some(note.clone()),
            action: "EvaluatePolicy".into(),
            secondary: None,
        });
    }
    events.extend(e.verdict.events.iter().map(|ev| KubeEvent {
        type_: match ev.type_ {
            EventType::Normal => KubeEventType::Normal,
            EventType::Warning => KubeEventType::Warning,
        },
        reason: ev.reason.clone(),
        note: Some(ev.message.clone()),
        action: "EvaluatePolicy".into(),
        secondary: None,
    }));
    for ev in events {
        if let Err(err) = ctx.recorder.publish(&ev, &reference).await {
            tracing::debug!(error = %err, reason = %ev.reason, "publishing an event failed");
        }
    }
}

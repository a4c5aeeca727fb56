//! The component glue for policies written in Rust: wit-bindgen's bindings
//! of `wit/` live here, once, with their conversion to this crate's plain
//! types, so a policy is only its decisions:
//!
//! ```ignore
//! use steward_policy_sdk::{Observation, PolicyInfo, Verdict, guest::Policy};
//!
//! struct MyPolicy;
//!
//! impl Policy for MyPolicy {
//!     fn describe() -> PolicyInfo { /* name, version, condition types, settings schema */ }
//!     fn validate_settings(settings: &str) -> Result<(), String> { /* ... */ }
//!     fn evaluate(observation: Observation) -> Verdict { /* ... */ }
//! }
//!
//! steward_policy_sdk::export_policy!(MyPolicy);
//! ```
//!
//! Build with `cargo build --target wasm32-wasip2 --release`; the crate must
//! be a `cdylib`. The decisions stay plain Rust, so they can be unit-tested
//! natively and run against the YAML cases with the `testing` feature.

use std::marker::PhantomData;

use crate as sdk;
use crate::{Observation, PolicyInfo, Verdict};

/// wit-bindgen's bindings of the `status-policy` world. A policy rarely
/// needs them: [`Policy`] speaks this crate's types.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "status-policy",
        pub_export_macro: true,
        default_bindings_module: "steward_policy_sdk::guest::bindings",
    });
}

use bindings::exports::steward::status::policy::Guest;
use bindings::steward::status::types as w;

/// What a status policy does, in this crate's types. Each call runs in a
/// fresh instance: keep no state between calls (the host would discard it).
pub trait Policy {
    /// Name, version, the condition types the policy writes and the JSON
    /// Schema of its settings. Called once, when the host loads the policy.
    fn describe() -> PolicyInfo;

    /// Whether the policy accepts these settings (JSON text, "{}" when the
    /// cluster sets none). The message of an error is shown to the user in a
    /// condition, so name the field and what is wrong with it. The host
    /// never calls [`Policy::evaluate`] with settings refused here.
    fn validate_settings(settings: &str) -> Result<(), String> {
        let _ = settings;
        Ok(())
    }

    /// The verdict on one observation of one cluster.
    fn evaluate(observation: Observation) -> Verdict;
}

/// Adapts a [`Policy`] to the generated export trait; used by
/// [`export_policy!`](crate::export_policy).
#[doc(hidden)]
pub struct Exported<P>(PhantomData<P>);

impl<P: Policy> Guest for Exported<P> {
    fn describe() -> w::PolicyInfo {
        let info = P::describe();
        w::PolicyInfo {
            name: info.name,
            version: info.version,
            condition_types: info.condition_types,
            settings_schema: info.settings_schema,
        }
    }

    fn validate_settings(settings: String) -> Result<(), String> {
        P::validate_settings(&settings)
    }

    fn evaluate(observation: w::Observation) -> w::Verdict {
        verdict_to_wit(P::evaluate(observation_from_wit(observation)))
    }
}

fn observation_from_wit(o: w::Observation) -> Observation {
    sdk::Observation {
        cluster: sdk::ClusterRef {
            namespace: o.cluster.namespace,
            name: o.cluster.name,
            uid: o.cluster.uid,
            generation: o.cluster.generation,
        },
        spec: sdk::ClusterSpec {
            desired_replicas: o.spec.desired_replicas,
            version: o.spec.version,
            quota_backend_bytes: o.spec.quota_backend_bytes,
        },
        phase: match o.phase {
            w::HostPhase::Bootstrapping => sdk::HostPhase::Bootstrapping,
            w::HostPhase::ScalingUp => sdk::HostPhase::ScalingUp,
            w::HostPhase::ScalingDown => sdk::HostPhase::ScalingDown,
            w::HostPhase::Steady => sdk::HostPhase::Steady,
            w::HostPhase::Paused => sdk::HostPhase::Paused,
            w::HostPhase::Deleting => sdk::HostPhase::Deleting,
        },
        members: o.members.into_iter().map(member_from_wit).collect(),
        probing: match o.probing {
            w::Probing::Attempted(report) => sdk::Probing::Attempted(sdk::ProbeReport {
                endpoints: report.endpoints.into_iter().map(probe_from_wit).collect(),
                member_list: match report.member_list {
                    w::MemberListOutcome::Listed(list) => sdk::MemberListOutcome::Listed(
                        list.into_iter().map(etcd_member_from_wit).collect(),
                    ),
                    w::MemberListOutcome::Failed(e) => {
                        sdk::MemberListOutcome::Failed(error_from_wit(e))
                    }
                    w::MemberListOutcome::NotAttempted => sdk::MemberListOutcome::NotAttempted,
                },
                quorum_read: match report.quorum_read {
                    w::QuorumReadOutcome::Succeeded => sdk::QuorumReadOutcome::Succeeded,
                    w::QuorumReadOutcome::Failed(e) => {
                        sdk::QuorumReadOutcome::Failed(error_from_wit(e))
                    }
                    w::QuorumReadOutcome::NotAttempted => sdk::QuorumReadOutcome::NotAttempted,
                },
            }),
            w::Probing::Skipped(why) => sdk::Probing::Skipped(why),
        },
        // The host's finding, as the host made it: a policy built against
        // another SDK version sees the same verdict on verification.
        quorum: match o.quorum {
            w::QuorumFinding::Verified(q) => sdk::QuorumFinding::Verified(sdk::VerifiedQuorum {
                leader: q.leader,
                voters: q.voters,
                agreeing: q.agreeing,
            }),
            w::QuorumFinding::Unverified(u) => {
                sdk::QuorumFinding::Unverified(sdk::UnverifiedQuorum {
                    kind: match u.kind {
                        w::UnverifiedKind::NotProbed => sdk::UnverifiedKind::NotProbed,
                        w::UnverifiedKind::Unreachable => sdk::UnverifiedKind::Unreachable,
                        w::UnverifiedKind::NoQuorum => sdk::UnverifiedKind::NoQuorum,
                    },
                    message: u.message,
                })
            }
        },
        history: sdk::History {
            last_verified: o.history.last_verified,
            unverified_streak: o.history.unverified_streak,
            previous_conditions: o
                .history
                .previous_conditions
                .into_iter()
                .map(|c| sdk::PreviousCondition {
                    type_: c.type_,
                    status: status_from_wit(c.status),
                    reason: c.reason,
                    since: c.since,
                })
                .collect(),
        },
        backup: o.backup.map(|b| sdk::BackupFacts {
            schedule: b.schedule,
            schedule_created: b.schedule_created,
            interval_ms: b.interval_ms,
            last_success: b.last_success,
        }),
        tls: sdk::TlsFacts {
            client: o.tls.client,
            client_cert_auth: o.tls.client_cert_auth,
            peer: o.tls.peer,
            certificates: o
                .tls
                .certificates
                .into_iter()
                .map(|c| sdk::CertificateFacts {
                    role: match c.role {
                        w::CertificateRole::Serving => sdk::CertificateRole::Serving,
                        w::CertificateRole::Peer => sdk::CertificateRole::Peer,
                        w::CertificateRole::OperatorClient => sdk::CertificateRole::OperatorClient,
                    },
                    secret: c.secret,
                    not_before: c.not_before,
                    not_after: c.not_after,
                })
                .collect(),
        },
        now: o.now,
        settings: o.settings,
    }
}

fn member_from_wit(m: w::Member) -> sdk::Member {
    sdk::Member {
        name: m.name,
        role: match m.role {
            w::MemberRole::Voter => sdk::MemberRole::Voter,
            w::MemberRole::Learner => sdk::MemberRole::Learner,
        },
        member_id: m.member_id,
        endpoint: m.endpoint,
        pod_phase: match m.pod_phase {
            w::PodPhase::Pending => sdk::PodPhase::Pending,
            w::PodPhase::Running => sdk::PodPhase::Running,
            w::PodPhase::Succeeded => sdk::PodPhase::Succeeded,
            w::PodPhase::Failed => sdk::PodPhase::Failed,
            w::PodPhase::Unknown => sdk::PodPhase::Unknown,
            w::PodPhase::Absent => sdk::PodPhase::Absent,
        },
        pod_ready: m.pod_ready,
        pod_ready_since: m.pod_ready_since,
        restarts: m.restarts,
        last_termination: m.last_termination.map(|t| sdk::Termination {
            reason: t.reason,
            exit_code: t.exit_code,
            finished_at: t.finished_at,
        }),
        pod_deleting: m.pod_deleting,
    }
}

fn probe_from_wit(p: w::EndpointProbe) -> sdk::EndpointProbe {
    sdk::EndpointProbe {
        member: p.member,
        endpoint: p.endpoint,
        outcome: match p.outcome {
            w::ProbeOutcome::Answered(s) => sdk::ProbeOutcome::Answered(sdk::EndpointStatus {
                member_id: s.member_id,
                leader_id: s.leader_id,
                raft_term: s.raft_term,
                raft_index: s.raft_index,
                raft_applied_index: s.raft_applied_index,
                revision: s.revision,
                db_size: s.db_size,
                db_size_in_use: s.db_size_in_use,
                version: s.version,
                alarms: s
                    .alarms
                    .into_iter()
                    .map(|a| match a {
                        w::AlarmKind::Nospace => sdk::AlarmKind::Nospace,
                        w::AlarmKind::Corrupt => sdk::AlarmKind::Corrupt,
                    })
                    .collect(),
                is_learner: s.is_learner,
            }),
            w::ProbeOutcome::Failed(e) => sdk::ProbeOutcome::Failed(error_from_wit(e)),
        },
    }
}

fn etcd_member_from_wit(m: w::EtcdMember) -> sdk::EtcdMember {
    sdk::EtcdMember {
        id: m.id,
        name: m.name,
        peer_urls: m.peer_urls,
        client_urls: m.client_urls,
        is_learner: m.is_learner,
    }
}

fn error_from_wit(e: w::ProbeError) -> sdk::ProbeError {
    sdk::ProbeError {
        kind: match e.kind {
            w::ProbeErrorKind::Timeout => sdk::ProbeErrorKind::Timeout,
            w::ProbeErrorKind::Dns => sdk::ProbeErrorKind::Dns,
            w::ProbeErrorKind::Refused => sdk::ProbeErrorKind::Refused,
            w::ProbeErrorKind::Tls => sdk::ProbeErrorKind::Tls,
            w::ProbeErrorKind::Auth => sdk::ProbeErrorKind::Auth,
            w::ProbeErrorKind::Other => sdk::ProbeErrorKind::Other,
        },
        message: e.message,
    }
}

fn status_from_wit(s: w::ConditionStatus) -> sdk::ConditionStatus {
    match s {
        w::ConditionStatus::True => sdk::ConditionStatus::True,
        w::ConditionStatus::False => sdk::ConditionStatus::False,
        w::ConditionStatus::Unknown => sdk::ConditionStatus::Unknown,
    }
}

fn verdict_to_wit(v: sdk::Verdict) -> w::Verdict {
    w::Verdict {
        conditions: v
            .conditions
            .into_iter()
            .map(|c| w::Condition {
                type_: c.type_,
                status: match c.status {
                    sdk::ConditionStatus::True => w::ConditionStatus::True,
                    sdk::ConditionStatus::False => w::ConditionStatus::False,
                    sdk::ConditionStatus::Unknown => w::ConditionStatus::Unknown,
                },
                reason: c.reason,
                message: c.message,
            })
            .collect(),
        ready_members: v.ready_members,
        decline_verification: v.decline_verification,
        requeue_after_ms: v.requeue_after_ms,
        events: v
            .events
            .into_iter()
            .map(|e| w::Event {
                type_: match e.type_ {
                    sdk::EventType::Normal => w::EventType::Normal,
                    sdk::EventType::Warning => w::EventType::Warning,
                },
                reason: e.reason,
                message: e.message,
            })
            .collect(),
    }
}

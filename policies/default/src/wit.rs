//! The WIT boundary: converts wit-bindgen's types to and from the sdk's plain
//! types and hands over to [`crate::logic`]. No decisions are made here.

wit_bindgen::generate!({ path: "../../wit", world: "status-policy" });

use exports::steward::status::policy::Guest;
use steward::status::types as w;
use steward_policy_sdk as sdk;

struct DefaultPolicy;

impl Guest for DefaultPolicy {
    fn describe() -> w::PolicyInfo {
        let info = crate::logic::describe();
        w::PolicyInfo {
            name: info.name,
            version: info.version,
            condition_types: info.condition_types,
            settings_schema: info.settings_schema,
        }
    }

    fn validate_settings(settings: String) -> Result<(), String> {
        crate::Settings::parse(&settings).map(drop)
    }

    fn evaluate(observation: w::Observation) -> w::Verdict {
        let observation = observation_from_wit(observation);
        verdict_to_wit(crate::logic::evaluate_json_settings(&observation))
    }
}

export!(DefaultPolicy);

fn observation_from_wit(o: w::Observation) -> sdk::Observation {
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
        verified: v.verified,
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

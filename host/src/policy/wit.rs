//! The WIT boundary: the only place that sees the `wasmtime` bindings for
//! `wit/status-policy.wit`. Everything else in the host speaks the plain
//! `steward_policy_sdk` types, converted here in both directions.

use steward_policy_sdk as sdk;

wasmtime::component::bindgen!({
    world: "status-policy",
    path: "../wit",
});

use steward::status::types as wit;

impl From<&sdk::Observation> for wit::Observation {
    fn from(o: &sdk::Observation) -> Self {
        Self {
            cluster: wit::ClusterRef {
                namespace: o.cluster.namespace.clone(),
                name: o.cluster.name.clone(),
                uid: o.cluster.uid.clone(),
                generation: o.cluster.generation,
            },
            spec: wit::ClusterSpec {
                desired_replicas: o.spec.desired_replicas,
                version: o.spec.version.clone(),
                quota_backend_bytes: o.spec.quota_backend_bytes,
            },
            phase: o.phase.into(),
            members: o.members.iter().map(Into::into).collect(),
            probing: match &o.probing {
                sdk::Probing::Attempted(report) => wit::Probing::Attempted(report.into()),
                sdk::Probing::Skipped(why) => wit::Probing::Skipped(why.clone()),
            },
            history: wit::History {
                last_verified: o.history.last_verified,
                unverified_streak: o.history.unverified_streak,
                previous_conditions: o
                    .history
                    .previous_conditions
                    .iter()
                    .map(|c| wit::PreviousCondition {
                        type_: c.type_.clone(),
                        status: c.status.into(),
                        reason: c.reason.clone(),
                        since: c.since,
                    })
                    .collect(),
            },
            now: o.now,
            settings: o.settings.clone(),
        }
    }
}

impl From<sdk::HostPhase> for wit::HostPhase {
    fn from(p: sdk::HostPhase) -> Self {
        match p {
            sdk::HostPhase::Bootstrapping => Self::Bootstrapping,
            sdk::HostPhase::ScalingUp => Self::ScalingUp,
            sdk::HostPhase::ScalingDown => Self::ScalingDown,
            sdk::HostPhase::Steady => Self::Steady,
            sdk::HostPhase::Paused => Self::Paused,
            sdk::HostPhase::Deleting => Self::Deleting,
        }
    }
}

impl From<&sdk::Member> for wit::Member {
    fn from(m: &sdk::Member) -> Self {
        Self {
            name: m.name.clone(),
            role: match m.role {
                sdk::MemberRole::Voter => wit::MemberRole::Voter,
                sdk::MemberRole::Learner => wit::MemberRole::Learner,
            },
            member_id: m.member_id,
            endpoint: m.endpoint.clone(),
            pod_phase: match m.pod_phase {
                sdk::PodPhase::Pending => wit::PodPhase::Pending,
                sdk::PodPhase::Running => wit::PodPhase::Running,
                sdk::PodPhase::Succeeded => wit::PodPhase::Succeeded,
                sdk::PodPhase::Failed => wit::PodPhase::Failed,
                sdk::PodPhase::Unknown => wit::PodPhase::Unknown,
                sdk::PodPhase::Absent => wit::PodPhase::Absent,
            },
            pod_ready: m.pod_ready,
            pod_ready_since: m.pod_ready_since,
            restarts: m.restarts,
            last_termination: m.last_termination.as_ref().map(|t| wit::Termination {
                reason: t.reason.clone(),
                exit_code: t.exit_code,
                finished_at: t.finished_at,
            }),
            pod_deleting: m.pod_deleting,
        }
    }
}

impl From<&sdk::ProbeReport> for wit::ProbeReport {
    fn from(r: &sdk::ProbeReport) -> Self {
        Self {
            endpoints: r
                .endpoints
                .iter()
                .map(|p| wit::EndpointProbe {
                    member: p.member.clone(),
                    endpoint: p.endpoint.clone(),
                    outcome: match &p.outcome {
                        sdk::ProbeOutcome::Answered(s) => wit::ProbeOutcome::Answered(s.into()),
                        sdk::ProbeOutcome::Failed(e) => wit::ProbeOutcome::Failed(e.into()),
                    },
                })
                .collect(),
            member_list: match &r.member_list {
                sdk::MemberListOutcome::Listed(members) => wit::MemberListOutcome::Listed(
                    members
                        .iter()
                        .map(|m| wit::EtcdMember {
                            id: m.id,
                            name: m.name.clone(),
                            peer_urls: m.peer_urls.clone(),
                            client_urls: m.client_urls.clone(),
                            is_learner: m.is_learner,
                        })
                        .collect(),
                ),
                sdk::MemberListOutcome::Failed(e) => wit::MemberListOutcome::Failed(e.into()),
                sdk::MemberListOutcome::NotAttempted => wit::MemberListOutcome::NotAttempted,
            },
            quorum_read: match &r.quorum_read {
                sdk::QuorumReadOutcome::Succeeded => wit::QuorumReadOutcome::Succeeded,
                sdk::QuorumReadOutcome::Failed(e) => wit::QuorumReadOutcome::Failed(e.into()),
                sdk::QuorumReadOutcome::NotAttempted => wit::QuorumReadOutcome::NotAttempted,
            },
        }
    }
}

impl From<&sdk::EndpointStatus> for wit::EndpointStatus {
    fn from(s: &sdk::EndpointStatus) -> Self {
        Self {
            member_id: s.member_id,
            leader_id: s.leader_id,
            raft_term: s.raft_term,
            raft_index: s.raft_index,
            raft_applied_index: s.raft_applied_index,
            db_size: s.db_size,
            db_size_in_use: s.db_size_in_use,
            version: s.version.clone(),
            alarms: s
                .alarms
                .iter()
                .map(|a| match a {
                    sdk::AlarmKind::Nospace => wit::AlarmKind::Nospace,
                    sdk::AlarmKind::Corrupt => wit::AlarmKind::Corrupt,
                })
                .collect(),
            is_learner: s.is_learner,
        }
    }
}

impl From<&sdk::ProbeError> for wit::ProbeError {
    fn from(e: &sdk::ProbeError) -> Self {
        Self {
            kind: match e.kind {
                sdk::ProbeErrorKind::Timeout => wit::ProbeErrorKind::Timeout,
                sdk::ProbeErrorKind::Dns => wit::ProbeErrorKind::Dns,
                sdk::ProbeErrorKind::Refused => wit::ProbeErrorKind::Refused,
                sdk::ProbeErrorKind::Tls => wit::ProbeErrorKind::Tls,
                sdk::ProbeErrorKind::Auth => wit::ProbeErrorKind::Auth,
                sdk::ProbeErrorKind::Other => wit::ProbeErrorKind::Other,
            },
            message: e.message.clone(),
        }
    }
}

impl From<sdk::ConditionStatus> for wit::ConditionStatus {
    fn from(s: sdk::ConditionStatus) -> Self {
        match s {
            sdk::ConditionStatus::True => Self::True,
            sdk::ConditionStatus::False => Self::False,
            sdk::ConditionStatus::Unknown => Self::Unknown,
        }
    }
}

impl From<wit::ConditionStatus> for sdk::ConditionStatus {
    fn from(s: wit::ConditionStatus) -> Self {
        match s {
            wit::ConditionStatus::True => Self::True,
            wit::ConditionStatus::False => Self::False,
            wit::ConditionStatus::Unknown => Self::Unknown,
        }
    }
}

impl From<wit::Verdict> for sdk::Verdict {
    fn from(v: wit::Verdict) -> Self {
        Self {
            conditions: v
                .conditions
                .into_iter()
                .map(|c| sdk::Condition {
                    type_: c.type_,
                    status: c.status.into(),
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
                .map(|e| sdk::Event {
                    type_: match e.type_ {
                        wit::EventType::Normal => sdk::EventType::Normal,
                        wit::EventType::Warning => sdk::EventType::Warning,
                    },
                    reason: e.reason,
                    message: e.message,
                })
                .collect(),
        }
    }
}

impl From<wit::PolicyInfo> for sdk::PolicyInfo {
    fn from(i: wit::PolicyInfo) -> Self {
        Self {
            name: i.name,
            version: i.version,
            condition_types: i.condition_types,
            settings_schema: i.settings_schema,
        }
    }
}

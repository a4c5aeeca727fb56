//! The WIT boundary: the only place that sees the `wasmtime` bindings of
//! the status-policy contract. Everything else in the host speaks the plain
//! `steward_policy_sdk` types, converted here in both directions.
//!
//! Two versions are linked, as `wit/README.md` promises: `steward:status@0.2.0`
//! (`wit/`), and `0.1.0` (`wit/0.1.0/`), so components built against 0.1.0
//! still load. A component is bound to whichever it exports. A 0.1.0
//! component does not receive the host's quorum finding, and its verdict's
//! `verified` is a claim the host checks after the fact ([`Returned`]); a
//! 0.2.0 verdict can only decline verification, never claim it.

use steward_policy_sdk as sdk;
use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::sandbox::HostState;

/// `steward:status@0.2.0`, the current contract.
pub mod v0_2 {
    wasmtime::component::bindgen!({
        world: "status-policy",
        path: "../wit",
    });
    pub use steward::status::types::*;
}

/// `steward:status@0.1.0`, still loaded.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        world: "status-policy",
        path: "../wit/0.1.0",
    });
    pub use steward::status::types::*;
}

/// A verdict as a component returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Returned {
    pub verdict: sdk::Verdict,
    /// A 0.1.0 verdict said `verified: true`: a claim the host must check
    /// against its own finding. A 0.2.0 verdict cannot claim.
    pub claims_verified: bool,
}

/// A compiled component, linked to the contract version it exports.
#[derive(Clone)]
pub enum Bound {
    V0_2(v0_2::StatusPolicyPre<HostState>),
    V0_1(v0_1::StatusPolicyPre<HostState>),
}

/// One instance of a [`Bound`] component, for one call.
pub enum Instance {
    V0_2(v0_2::StatusPolicy),
    V0_1(v0_1::StatusPolicy),
}

impl Bound {
    /// Binds `pre` to the newest contract version it exports; the error
    /// says which it lacks.
    pub fn new(pre: InstancePre<HostState>) -> Result<Self, wasmtime::Error> {
        match v0_2::StatusPolicyPre::new(pre.clone()) {
            Ok(bound) => Ok(Self::V0_2(bound)),
            Err(newest) => match v0_1::StatusPolicyPre::new(pre) {
                Ok(bound) => Ok(Self::V0_1(bound)),
                Err(_) => Err(newest),
            },
        }
    }

    /// The contract version the component exports.
    pub fn contract(&self) -> &'static str {
        match self {
            Self::V0_2(_) => "steward:status@0.2.0",
            Self::V0_1(_) => "steward:status@0.1.0",
        }
    }

    pub fn engine(&self) -> &wasmtime::Engine {
        match self {
            Self::V0_2(pre) => pre.engine(),
            Self::V0_1(pre) => pre.engine(),
        }
    }

    pub fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Instance> {
        Ok(match self {
            Self::V0_2(pre) => Instance::V0_2(pre.instantiate(store)?),
            Self::V0_1(pre) => Instance::V0_1(pre.instantiate(store)?),
        })
    }
}

impl Instance {
    pub fn describe(&self, store: &mut Store<HostState>) -> wasmtime::Result<sdk::PolicyInfo> {
        Ok(match self {
            Self::V0_2(p) => p.steward_status_policy().call_describe(store)?.into(),
            Self::V0_1(p) => p.steward_status_policy().call_describe(store)?.into(),
        })
    }

    pub fn validate_settings(
        &self,
        store: &mut Store<HostState>,
        json: &str,
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            Self::V0_2(p) => p
                .steward_status_policy()
                .call_validate_settings(store, json),
            Self::V0_1(p) => p
                .steward_status_policy()
                .call_validate_settings(store, json),
        }
    }

    pub fn evaluate(
        &self,
        store: &mut Store<HostState>,
        observation: &sdk::Observation,
    ) -> wasmtime::Result<Returned> {
        Ok(match self {
            Self::V0_2(p) => p
                .steward_status_policy()
                .call_evaluate(store, &observation.into())?
                .into(),
            Self::V0_1(p) => p
                .steward_status_policy()
                .call_evaluate(store, &observation.into())?
                .into(),
        })
    }
}

/// The conversions both versions share: their records are the same there.
macro_rules! shared_conversions {
    ($wit:ident) => {
        impl From<sdk::HostPhase> for $wit::HostPhase {
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

        impl From<&sdk::Member> for $wit::Member {
            fn from(m: &sdk::Member) -> Self {
                Self {
                    name: m.name.clone(),
                    role: match m.role {
                        sdk::MemberRole::Voter => $wit::MemberRole::Voter,
                        sdk::MemberRole::Learner => $wit::MemberRole::Learner,
                    },
                    member_id: m.member_id,
                    endpoint: m.endpoint.clone(),
                    pod_phase: match m.pod_phase {
                        sdk::PodPhase::Pending => $wit::PodPhase::Pending,
                        sdk::PodPhase::Running => $wit::PodPhase::Running,
                        sdk::PodPhase::Succeeded => $wit::PodPhase::Succeeded,
                        sdk::PodPhase::Failed => $wit::PodPhase::Failed,
                        sdk::PodPhase::Unknown => $wit::PodPhase::Unknown,
                        sdk::PodPhase::Absent => $wit::PodPhase::Absent,
                    },
                    pod_ready: m.pod_ready,
                    pod_ready_since: m.pod_ready_since,
                    restarts: m.restarts,
                    last_termination: m.last_termination.as_ref().map(|t| $wit::Termination {
                        reason: t.reason.clone(),
                        exit_code: t.exit_code,
                        finished_at: t.finished_at,
                    }),
                    pod_deleting: m.pod_deleting,
                }
            }
        }

        impl From<&sdk::ProbeReport> for $wit::ProbeReport {
            fn from(r: &sdk::ProbeReport) -> Self {
                Self {
                    endpoints: r
                        .endpoints
                        .iter()
                        .map(|p| $wit::EndpointProbe {
                            member: p.member.clone(),
                            endpoint: p.endpoint.clone(),
                            outcome: match &p.outcome {
                                sdk::ProbeOutcome::Answered(s) => {
                                    $wit::ProbeOutcome::Answered(s.into())
                                }
                                sdk::ProbeOutcome::Failed(e) => {
                                    $wit::ProbeOutcome::Failed(e.into())
                                }
                            },
                        })
                        .collect(),
                    member_list: match &r.member_list {
                        sdk::MemberListOutcome::Listed(members) => $wit::MemberListOutcome::Listed(
                            members
                                .iter()
                                .map(|m| $wit::EtcdMember {
                                    id: m.id,
                                    name: m.name.clone(),
                                    peer_urls: m.peer_urls.clone(),
                                    client_urls: m.client_urls.clone(),
                                    is_learner: m.is_learner,
                                })
                                .collect(),
                        ),
                        sdk::MemberListOutcome::Failed(e) => {
                            $wit::MemberListOutcome::Failed(e.into())
                        }
                        sdk::MemberListOutcome::NotAttempted => {
                            $wit::MemberListOutcome::NotAttempted
                        }
                    },
                    quorum_read: match &r.quorum_read {
                        sdk::QuorumReadOutcome::Succeeded => $wit::QuorumReadOutcome::Succeeded,
                        sdk::QuorumReadOutcome::Failed(e) => {
                            $wit::QuorumReadOutcome::Failed(e.into())
                        }
                        sdk::QuorumReadOutcome::NotAttempted => {
                            $wit::QuorumReadOutcome::NotAttempted
                        }
                    },
                }
            }
        }

        impl From<&sdk::EndpointStatus> for $wit::EndpointStatus {
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
                            sdk::AlarmKind::Nospace => $wit::AlarmKind::Nospace,
                            sdk::AlarmKind::Corrupt => $wit::AlarmKind::Corrupt,
                        })
                        .collect(),
                    is_learner: s.is_learner,
                }
            }
        }

        impl From<&sdk::ProbeError> for $wit::ProbeError {
            fn from(e: &sdk::ProbeError) -> Self {
                Self {
                    kind: match e.kind {
                        sdk::ProbeErrorKind::Timeout => $wit::ProbeErrorKind::Timeout,
                        sdk::ProbeErrorKind::Dns => $wit::ProbeErrorKind::Dns,
                        sdk::ProbeErrorKind::Refused => $wit::ProbeErrorKind::Refused,
                        sdk::ProbeErrorKind::Tls => $wit::ProbeErrorKind::Tls,
                        sdk::ProbeErrorKind::Auth => $wit::ProbeErrorKind::Auth,
                        sdk::ProbeErrorKind::Other => $wit::ProbeErrorKind::Other,
                    },
                    message: e.message.clone(),
                }
            }
        }

        impl From<sdk::ConditionStatus> for $wit::ConditionStatus {
            fn from(s: sdk::ConditionStatus) -> Self {
                match s {
                    sdk::ConditionStatus::True => Self::True,
                    sdk::ConditionStatus::False => Self::False,
                    sdk::ConditionStatus::Unknown => Self::Unknown,
                }
            }
        }

        impl From<$wit::ConditionStatus> for sdk::ConditionStatus {
            fn from(s: $wit::ConditionStatus) -> Self {
                match s {
                    $wit::ConditionStatus::True => Self::True,
                    $wit::ConditionStatus::False => Self::False,
                    $wit::ConditionStatus::Unknown => Self::Unknown,
                }
            }
        }

        impl From<&sdk::ClusterRef> for $wit::ClusterRef {
            fn from(c: &sdk::ClusterRef) -> Self {
                Self {
                    namespace: c.namespace.clone(),
                    name: c.name.clone(),
                    uid: c.uid.clone(),
                    generation: c.generation,
                }
            }
        }

        impl From<&sdk::ClusterSpec> for $wit::ClusterSpec {
            fn from(s: &sdk::ClusterSpec) -> Self {
                Self {
                    desired_replicas: s.desired_replicas,
                    version: s.version.clone(),
                    quota_backend_bytes: s.quota_backend_bytes,
                }
            }
        }

        impl From<&sdk::Probing> for $wit::Probing {
            fn from(p: &sdk::Probing) -> Self {
                match p {
                    sdk::Probing::Attempted(report) => Self::Attempted(report.into()),
                    sdk::Probing::Skipped(why) => Self::Skipped(why.clone()),
                }
            }
        }

        impl From<&sdk::History> for $wit::History {
            fn from(h: &sdk::History) -> Self {
                Self {
                    last_verified: h.last_verified,
                    unverified_streak: h.unverified_streak,
                    previous_conditions: h
                        .previous_conditions
                        .iter()
                        .map(|c| $wit::PreviousCondition {
                            type_: c.type_.clone(),
                            status: c.status.into(),
                            reason: c.reason.clone(),
                            since: c.since,
                        })
                        .collect(),
                }
            }
        }

        impl From<$wit::Condition> for sdk::Condition {
            fn from(c: $wit::Condition) -> Self {
                Self {
                    type_: c.type_,
                    status: c.status.into(),
                    reason: c.reason,
                    message: c.message,
                }
            }
        }

        impl From<$wit::Event> for sdk::Event {
            fn from(e: $wit::Event) -> Self {
                Self {
                    type_: match e.type_ {
                        $wit::EventType::Normal => sdk::EventType::Normal,
                        $wit::EventType::Warning => sdk::EventType::Warning,
                    },
                    reason: e.reason,
                    message: e.message,
                }
            }
        }

        impl From<$wit::PolicyInfo> for sdk::PolicyInfo {
            fn from(i: $wit::PolicyInfo) -> Self {
                Self {
                    name: i.name,
                    version: i.version,
                    condition_types: i.condition_types,
                    settings_schema: i.settings_schema,
                }
            }
        }
    };
}

shared_conversions!(v0_2);
shared_conversions!(v0_1);

impl From<&sdk::Observation> for v0_2::Observation {
    fn from(o: &sdk::Observation) -> Self {
        Self {
            cluster: (&o.cluster).into(),
            spec: (&o.spec).into(),
            phase: o.phase.into(),
            members: o.members.iter().map(Into::into).collect(),
            probing: (&o.probing).into(),
            quorum: (&o.quorum).into(),
            history: (&o.history).into(),
            now: o.now,
            settings: o.settings.clone(),
        }
    }
}

impl From<&sdk::Observation> for v0_1::Observation {
    fn from(o: &sdk::Observation) -> Self {
        Self {
            cluster: (&o.cluster).into(),
            spec: (&o.spec).into(),
            phase: o.phase.into(),
            members: o.members.iter().map(Into::into).collect(),
            probing: (&o.probing).into(),
            history: (&o.history).into(),
            now: o.now,
            settings: o.settings.clone(),
        }
    }
}

impl From<&sdk::QuorumFinding> for v0_2::QuorumFinding {
    fn from(f: &sdk::QuorumFinding) -> Self {
        match f {
            sdk::QuorumFinding::Verified(q) => Self::Verified(v0_2::VerifiedQuorum {
                leader: q.leader,
                voters: q.voters.clone(),
                agreeing: q.agreeing.clone(),
            }),
            sdk::QuorumFinding::Unverified(u) => Self::Unverified(v0_2::UnverifiedQuorum {
                kind: match u.kind {
                    sdk::UnverifiedKind::NotProbed => v0_2::UnverifiedKind::NotProbed,
                    sdk::UnverifiedKind::Unreachable => v0_2::UnverifiedKind::Unreachable,
                    sdk::UnverifiedKind::NoQuorum => v0_2::UnverifiedKind::NoQuorum,
                },
                message: u.message.clone(),
            }),
        }
    }
}

impl From<v0_2::Verdict> for Returned {
    fn from(v: v0_2::Verdict) -> Self {
        let verdict = sdk::Verdict {
            conditions: v.conditions.into_iter().map(Into::into).collect(),
            ready_members: v.ready_members,
            decline_verification: v.decline_verification,
            requeue_after_ms: v.requeue_after_ms,
            events: v.events.into_iter().map(Into::into).collect(),
        };
        Returned {
            verdict,
            claims_verified: false,
        }
    }
}

impl From<v0_1::Verdict> for Returned {
    fn from(v: v0_1::Verdict) -> Self {
        let claims_verified = v.verified;
        let verdict = sdk::Verdict {
            conditions: v.conditions.into_iter().map(Into::into).collect(),
            ready_members: v.ready_members,
            // 0.1.0 could only claim or not; not claiming is declining.
            decline_verification: (!claims_verified)
                .then(|| "the policy (steward:status@0.1.0) did not verify the cluster".to_owned()),
            requeue_after_ms: v.requeue_after_ms,
            events: v.events.into_iter().map(Into::into).collect(),
        };
        Returned {
            verdict,
            claims_verified,
        }
    }
}

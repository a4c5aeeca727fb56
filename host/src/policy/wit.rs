//! The WIT boundary: the only place that sees the `wasmtime` bindings of
//! the status-policy contract. Everything else in the host speaks the plain
//! `steward_policy_sdk` types, converted here in both directions.
//!
//! Four versions are linked, as `wit/README.md` promises:
//! `steward:status@0.4.0` (`wit/`), `0.3.0` (`wit/0.3.0/`), `0.2.0`
//! (`wit/0.2.0/`) and `0.1.0` (`wit/0.1.0/`), so components built against
//! an older contract still load. A component is bound to the newest it
//! exports. A 0.3.0 component does not receive the TLS facts; a 0.2.0 one
//! not the backup facts or the endpoints' revisions either; a 0.1.0 one
//! does not receive the host's quorum finding either, and its verdict's
//! `verified` is a claim the host checks after the fact ([`Returned`]); a
//! later verdict can only decline verification, never claim it.

use steward_policy_sdk as sdk;
use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::sandbox::HostState;

/// `steward:status@0.4.0`, the current contract.
pub mod v0_4 {
    wasmtime::component::bindgen!({
        world: "status-policy",
        path: "../wit",
    });
    pub use steward::status::types::*;
}

/// `steward:status@0.3.0`, still loaded.
pub mod v0_3 {
    wasmtime::component::bindgen!({
        world: "status-policy",
        path: "../wit/0.3.0",
    });
    pub use steward::status::types::*;
}

/// `steward:status@0.2.0`, still loaded.
pub mod v0_2 {
    wasmtime::component::bindgen!({
        world: "status-policy",
        path: "../wit/0.2.0",
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
    /// against its own finding. A later verdict cannot claim.
    pub claims_verified: bool,
}

/// A compiled component, linked to the contract version it exports.
#[derive(Clone)]
pub enum Bound {
    V0_4(v0_4::StatusPolicyPre<HostState>),
    V0_3(v0_3::StatusPolicyPre<HostState>),
    V0_2(v0_2::StatusPolicyPre<HostState>),
    V0_1(v0_1::StatusPolicyPre<HostState>),
}

/// One instance of a [`Bound`] component, for one call.
pub enum Instance {
    V0_4(v0_4::StatusPolicy),
    V0_3(v0_3::StatusPolicy),
    V0_2(v0_2::StatusPolicy),
    V0_1(v0_1::StatusPolicy),
}

impl Bound {
    /// Binds `pre` to the newest contract version it exports; the error
    /// says what the newest lacks.
    pub fn new(pre: InstancePre<HostState>) -> Result<Self, wasmtime::Error> {
        let newest = match v0_4::StatusPolicyPre::new(pre.clone()) {
            Ok(bound) => return Ok(Self::V0_4(bound)),
            Err(newest) => newest,
        };
        if let Ok(bound) = v0_3::StatusPolicyPre::new(pre.clone()) {
            return Ok(Self::V0_3(bound));
        }
        if let Ok(bound) = v0_2::StatusPolicyPre::new(pre.clone()) {
            return Ok(Self::V0_2(bound));
        }
        match v0_1::StatusPolicyPre::new(pre) {
            Ok(bound) => Ok(Self::V0_1(bound)),
            Err(_) => Err(newest),
        }
    }

    /// The contract version the component exports.
    pub fn contract(&self) -> &'static str {
        match self {
            Self::V0_4(_) => "steward:status@0.4.0",
            Self::V0_3(_) => "steward:status@0.3.0",
            Self::V0_2(_) => "steward:status@0.2.0",
            Self::V0_1(_) => "steward:status@0.1.0",
        }
    }

    pub fn engine(&self) -> &wasmtime::Engine {
        match self {
            Self::V0_4(pre) => pre.engine(),
            Self::V0_3(pre) => pre.engine(),
            Self::V0_2(pre) => pre.engine(),
            Self::V0_1(pre) => pre.engine(),
        }
    }

    pub fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Instance> {
        Ok(match self {
            Self::V0_4(pre) => Instance::V0_4(pre.instantiate(store)?),
            Self::V0_3(pre) => Instance::V0_3(pre.instantiate(store)?),
            Self::V0_2(pre) => Instance::V0_2(pre.instantiate(store)?),
            Self::V0_1(pre) => Instance::V0_1(pre.instantiate(store)?),
        })
    }
}

impl Instance {
    pub fn describe(&self, store: &mut Store<HostState>) -> wasmtime::Result<sdk::PolicyInfo> {
        Ok(match self {
            Self::V0_4(p) => p.steward_status_policy().call_describe(store)?.into(),
            Self::V0_3(p) => p.steward_status_policy().call_describe(store)?.into(),
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
            Self::V0_4(p) => p
                .steward_status_policy()
                .call_validate_settings(store, json),
            Self::V0_3(p) => p
                .steward_status_policy()
                .call_validate_settings(store, json),
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
            Self::V0_4(p) => p
                .steward_status_policy()
                .call_evaluate(store, &observation.into())?
                .into(),
            Self::V0_3(p) => p
                .steward_status_policy()
                .call_evaluate(store, &observation.into())?
                .into(),
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

/// The conversions every version shares: their records are the same there.
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

shared_conversions!(v0_4);
shared_conversions!(v0_3);
shared_conversions!(v0_2);
shared_conversions!(v0_1);

/// `endpoint-status`: the fields every version has, plus those listed after
/// the version. 0.3.0 added `revision` (0.4.0 kept it); 0.2.0 and 0.1.0 drop it.
macro_rules! endpoint_status_conversion {
    ($wit:ident $(, $added:ident)*) => {
        impl From<&sdk::EndpointStatus> for $wit::EndpointStatus {
            fn from(s: &sdk::EndpointStatus) -> Self {
                Self {
                    member_id: s.member_id,
                    leader_id: s.leader_id,
                    raft_term: s.raft_term,
                    raft_index: s.raft_index,
                    raft_applied_index: s.raft_applied_index,
                    $($added: s.$added,)*
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
    };
}

endpoint_status_conversion!(v0_4, revision);
endpoint_status_conversion!(v0_3, revision);
endpoint_status_conversion!(v0_2);
endpoint_status_conversion!(v0_1);

/// What 0.2.0 added and later versions kept: the host's finding, and a verdict that
/// can only decline verification.
macro_rules! finding_conversions {
    ($wit:ident) => {
        impl From<&sdk::QuorumFinding> for $wit::QuorumFinding {
            fn from(f: &sdk::QuorumFinding) -> Self {
                match f {
                    sdk::QuorumFinding::Verified(q) => Self::Verified($wit::VerifiedQuorum {
                        leader: q.leader,
                        voters: q.voters.clone(),
                        agreeing: q.agreeing.clone(),
                    }),
                    sdk::QuorumFinding::Unverified(u) => Self::Unverified($wit::UnverifiedQuorum {
                        kind: match u.kind {
                            sdk::UnverifiedKind::NotProbed => $wit::UnverifiedKind::NotProbed,
                            sdk::UnverifiedKind::Unreachable => $wit::UnverifiedKind::Unreachable,
                            sdk::UnverifiedKind::NoQuorum => $wit::UnverifiedKind::NoQuorum,
                        },
                        message: u.message.clone(),
                    }),
                }
            }
        }

        impl From<$wit::Verdict> for Returned {
            fn from(v: $wit::Verdict) -> Self {
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
    };
}

finding_conversions!(v0_4);
finding_conversions!(v0_3);
finding_conversions!(v0_2);

impl From<&sdk::Observation> for v0_4::Observation {
    fn from(o: &sdk::Observation) -> Self {
        Self {
            cluster: (&o.cluster).into(),
            spec: (&o.spec).into(),
            phase: o.phase.into(),
            members: o.members.iter().map(Into::into).collect(),
            probing: (&o.probing).into(),
            quorum: (&o.quorum).into(),
            history: (&o.history).into(),
            backup: o.backup.as_ref().map(|b| v0_4::BackupFacts {
                schedule: b.schedule.clone(),
                schedule_created: b.schedule_created,
                interval_ms: b.interval_ms,
                last_success: b.last_success,
            }),
            tls: v0_4::TlsFacts {
                client: o.tls.client,
                client_cert_auth: o.tls.client_cert_auth,
                peer: o.tls.peer,
                certificates: o
                    .tls
                    .certificates
                    .iter()
                    .map(|c| v0_4::CertificateFacts {
                        role: match c.role {
                            sdk::CertificateRole::Serving => v0_4::CertificateRole::Serving,
                            sdk::CertificateRole::Peer => v0_4::CertificateRole::Peer,
                            sdk::CertificateRole::OperatorClient => {
                                v0_4::CertificateRole::OperatorClient
                            }
                        },
                        secret: c.secret.clone(),
                        not_before: c.not_before,
                        not_after: c.not_after,
                    })
                    .collect(),
            },
            now: o.now,
            settings: o.settings.clone(),
        }
    }
}

/// 0.3.0 has no TLS facts: they are dropped.
impl From<&sdk::Observation> for v0_3::Observation {
    fn from(o: &sdk::Observation) -> Self {
        Self {
            cluster: (&o.cluster).into(),
            spec: (&o.spec).into(),
            phase: o.phase.into(),
            members: o.members.iter().map(Into::into).collect(),
            probing: (&o.probing).into(),
            quorum: (&o.quorum).into(),
            history: (&o.history).into(),
            backup: o.backup.as_ref().map(|b| v0_3::BackupFacts {
                schedule: b.schedule.clone(),
                schedule_created: b.schedule_created,
                interval_ms: b.interval_ms,
                last_success: b.last_success,
            }),
            now: o.now,
            settings: o.settings.clone(),
        }
    }
}

/// 0.2.0 has no backup facts: they are dropped.
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

/// 0.1.0 has neither the finding nor the backup facts.
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

#[cfg(test)]
mod tests {
    use steward_policy_sdk::{
        BackupFacts, CertificateFacts, CertificateRole, ClusterSpec, ConditionStatus,
        EndpointProbe, EndpointStatus, EtcdMember, Member, MemberListOutcome, Observation,
        PodPhase, ProbeOutcome, ProbeReport, Probing, QuorumFinding, QuorumReadOutcome, TlsFacts,
    };

    use crate::cluster::evaluate::judge;
    use crate::policy::{EngineConfig, PolicyEngine};

    /// One healthy member whose linearizable read went through, and a
    /// nightly backup two days and an hour old.
    fn observation() -> Observation {
        let probing = Probing::Attempted(ProbeReport {
            endpoints: vec![EndpointProbe {
                member: "etcd-a".into(),
                endpoint: "https://etcd-a:2379".into(),
                outcome: ProbeOutcome::Answered(EndpointStatus {
                    member_id: 0xa1,
                    leader_id: 0xa1,
                    ..EndpointStatus::default()
                }),
            }],
            member_list: MemberListOutcome::Listed(vec![EtcdMember {
                id: 0xa1,
                name: "etcd-a".into(),
                ..EtcdMember::default()
            }]),
            quorum_read: QuorumReadOutcome::Succeeded,
        });
        let now = 1_796_169_600_000;
        Observation {
            cluster: Default::default(),
            spec: ClusterSpec {
                desired_replicas: 1,
                ..ClusterSpec::default()
            },
            phase: Default::default(),
            members: vec![Member {
                name: "etcd-a".into(),
                member_id: Some(0xa1),
                pod_phase: PodPhase::Running,
                pod_ready: true,
                ..Member::default()
            }],
            quorum: QuorumFinding::of(&probing),
            probing,
            history: Default::default(),
            backup: Some(BackupFacts {
                schedule: "nightly".into(),
                schedule_created: now - 30 * 86_400_000,
                interval_ms: 86_400_000,
                last_success: Some(now - 2 * 86_400_000 - 3_600_000),
            }),
            tls: TlsFacts {
                client: true,
                client_cert_auth: true,
                peer: true,
                certificates: vec![CertificateFacts {
                    role: CertificateRole::Peer,
                    secret: "etcd-peer".into(),
                    not_before: now - 80 * 86_400_000,
                    not_after: now + 5 * 86_400_000,
                }],
            },
            now,
            settings: "{}".into(),
        }
    }

    /// The default policy is built against the current contract and sees
    /// the TLS facts (an expiring certificate outranks the overdue backup);
    /// a 0.3.0 component still loads and gets the backup facts; components
    /// of 0.2.0 and 0.1.0 still load and evaluate the same observation,
    /// without them.
    #[test]
    fn each_contract_version_loads_and_evaluates_an_observation_with_tls_and_backup_facts() {
        let engine = PolicyEngine::new(EngineConfig::default()).unwrap();
        let obs = observation();

        let current = engine.default_policy();
        assert_eq!(current.contract(), "steward:status@0.4.0");
        let judged = judge(&obs, current.evaluate(&obs));
        assert!(judged.problem.is_none(), "{:?}", judged.problem);
        let degraded = judged.verdict.condition("Degraded").unwrap();
        assert_eq!(
            (degraded.status, degraded.reason.as_str()),
            (ConditionStatus::True, "CertificateExpiringSoon"),
            "{degraded:?}"
        );
        assert!(
            degraded
                .message
                .starts_with("the peer certificate in Secret etcd-peer expires in 5d"),
            "{degraded:?}"
        );

        let v0_3 = engine
            .load_file(env!("STEWARD_COMPAT_V0_3_POLICY_WASM"))
            .expect("a 0.3.0 component loads");
        assert_eq!(v0_3.contract(), "steward:status@0.3.0");
        let judged = judge(&obs, v0_3.evaluate(&obs));
        assert!(judged.problem.is_none(), "{:?}", judged.problem);
        assert!(judged.verified);
        let degraded = judged.verdict.condition("Degraded").unwrap();
        assert_eq!(degraded.message, "backup schedule nightly");

        let v0_2 = engine
            .load_file(env!("STEWARD_COMPAT_V0_2_POLICY_WASM"))
            .expect("a 0.2.0 component loads");
        assert_eq!(v0_2.contract(), "steward:status@0.2.0");
        let evaluation = v0_2.evaluate(&obs);
        assert!(!evaluation.claims_verified);
        let judged = judge(&obs, evaluation);
        assert!(judged.problem.is_none(), "{:?}", judged.problem);
        assert!(judged.verified);
        let available = judged.verdict.condition("Available").unwrap();
        assert_eq!(available.status, ConditionStatus::True);
        assert_eq!(available.message, "verified: leader a1, 1 voters");

        let v0_1 = engine
            .load_file(env!("STEWARD_COMPAT_V0_1_POLICY_WASM"))
            .expect("a 0.1.0 component loads");
        assert_eq!(v0_1.contract(), "steward:status@0.1.0");
        let evaluation = v0_1.evaluate(&obs);
        assert_eq!(evaluation.error, None);
        assert!(evaluation.claims_verified, "the read went through");
        let judged = judge(&obs, evaluation);
        assert!(judged.problem.is_none(), "{:?}", judged.problem);
        assert!(judged.verified);
    }

    /// The member's revision reaches a 0.3.0 observation's
    /// `endpoint-status`; 0.2.0 and 0.1.0 have no field for it.
    #[test]
    fn the_revision_reaches_a_0_3_0_observation() {
        let mut obs = observation();
        let Probing::Attempted(report) = &mut obs.probing else {
            unreachable!("the observation probed")
        };
        let ProbeOutcome::Answered(status) = &mut report.endpoints[0].outcome else {
            unreachable!("etcd-a answered")
        };
        status.revision = 48_213_377;
        status.raft_applied_index = 900;

        let current = super::v0_3::Observation::from(&obs);
        let super::v0_3::Probing::Attempted(report) = &current.probing else {
            panic!("not attempted: {:?}", current.probing)
        };
        let super::v0_3::ProbeOutcome::Answered(status) = &report.endpoints[0].outcome else {
            panic!("not answered: {:?}", report.endpoints[0].outcome)
        };
        assert_eq!(
            (status.revision, status.raft_applied_index),
            (48_213_377, 900)
        );

        // The older contracts still get the rest of the record.
        let older = super::v0_2::Observation::from(&obs);
        let super::v0_2::Probing::Attempted(report) = &older.probing else {
            panic!("not attempted: {:?}", older.probing)
        };
        let super::v0_2::ProbeOutcome::Answered(status) = &report.endpoints[0].outcome else {
            panic!("not answered: {:?}", report.endpoints[0].outcome)
        };
        assert_eq!(status.raft_applied_index, 900);
    }
}

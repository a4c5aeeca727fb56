//! Plain Rust types for the `steward:status@0.4.0` contract (`wit/status-policy.wit`).
//!
//! They mirror the WIT records one to one, and carry the serde shape of
//! observation and test-case YAML files: every field camelCase, every enum
//! and variant case PascalCase (`Steady`, `ScalingUp`, `{Answered: ...}`),
//! member IDs as hex strings, settings as a mapping, unknown keys rejected.
//! The host converts between these and its `wasmtime` bindings. A Rust
//! policy implements [`guest::Policy`] over them (feature `guest`), so its
//! decisions stay plain Rust, unit-tested and benchmarked natively.
//!
//! A policy written in another language needs none of this: `wit/` is the
//! whole contract (and `policies/python`, `policies/js` hold those SDKs).

use serde::{Deserialize, Serialize};

mod finding;
#[cfg(feature = "guest")]
pub mod guest;
mod member_id;
mod settings;
#[cfg(feature = "testing")]
pub mod testing;

pub use finding::{QuorumFinding, UnverifiedKind, UnverifiedQuorum, VerifiedQuorum};

/// Unix time in milliseconds. The host is the only clock.
pub type TimestampMs = i64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
pub enum HostPhase {
    Bootstrapping,
    ScalingUp,
    ScalingDown,
    #[default]
    Steady,
    Paused,
    Deleting,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterRef {
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub generation: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    pub desired_replicas: u32,
    #[serde(default)]
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_backend_bytes: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
pub enum MemberRole {
    #[default]
    Voter,
    Learner,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
pub enum PodPhase {
    #[default]
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
    /// No Pod exists for the member.
    Absent,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Termination {
    pub reason: String,
    pub exit_code: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<TimestampMs>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Member {
    pub name: String,
    #[serde(default)]
    pub role: MemberRole,
    #[serde(
        default,
        with = "member_id::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "testing", schemars(with = "Option<member_id::Hex>"))]
    pub member_id: Option<u64>,
    #[serde(default)]
    pub endpoint: String,
    #[serde(default)]
    pub pod_phase: PodPhase,
    #[serde(default)]
    pub pod_ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_ready_since: Option<TimestampMs>,
    #[serde(default)]
    pub restarts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_termination: Option<Termination>,
    #[serde(default)]
    pub pod_deleting: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
pub enum ProbeErrorKind {
    Timeout,
    Dns,
    Refused,
    Tls,
    Auth,
    Other,
}

impl ProbeErrorKind {
    /// The lower-case word messages use for it, in the host and in policies.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Dns => "dns",
            Self::Refused => "refused",
            Self::Tls => "tls",
            Self::Auth => "auth",
            Self::Other => "other",
        }
    }
}

impl std::fmt::Display for ProbeErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeError {
    pub kind: ProbeErrorKind,
    #[serde(default)]
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
pub enum AlarmKind {
    Nospace,
    Corrupt,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointStatus {
    #[serde(with = "member_id")]
    #[cfg_attr(feature = "testing", schemars(with = "member_id::Hex"))]
    pub member_id: u64,
    /// `"0"` when the member knows of no leader.
    #[serde(default, with = "member_id")]
    #[cfg_attr(feature = "testing", schemars(with = "member_id::Hex"))]
    pub leader_id: u64,
    #[serde(default)]
    pub raft_term: u64,
    #[serde(default)]
    pub raft_index: u64,
    #[serde(default)]
    pub raft_applied_index: u64,
    /// The member's own current revision (the Status response header's):
    /// local, so it answers even without quorum.
    #[serde(default)]
    pub revision: i64,
    #[serde(default)]
    pub db_size: u64,
    #[serde(default)]
    pub db_size_in_use: u64,
    #[serde(default)]
    pub version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alarms: Vec<AlarmKind>,
    #[serde(default)]
    pub is_learner: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
pub enum ProbeOutcome {
    Answered(EndpointStatus),
    Failed(ProbeError),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointProbe {
    pub member: String,
    #[serde(default)]
    pub endpoint: String,
    pub outcome: ProbeOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdMember {
    #[serde(with = "member_id")]
    #[cfg_attr(feature = "testing", schemars(with = "member_id::Hex"))]
    pub id: u64,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub peer_urls: Vec<String>,
    #[serde(default)]
    pub client_urls: Vec<String>,
    #[serde(default)]
    pub is_learner: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
pub enum MemberListOutcome {
    Listed(Vec<EtcdMember>),
    Failed(ProbeError),
    #[default]
    NotAttempted,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
pub enum QuorumReadOutcome {
    Succeeded,
    Failed(ProbeError),
    #[default]
    NotAttempted,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeReport {
    #[serde(default)]
    pub endpoints: Vec<EndpointProbe>,
    #[serde(default)]
    pub member_list: MemberListOutcome,
    #[serde(default)]
    pub quorum_read: QuorumReadOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
pub enum Probing {
    Attempted(ProbeReport),
    /// The host could not probe at all; the text says why.
    Skipped(String),
}

/// Written `True`, `False` or `Unknown`. YAML 1.2 reads an unquoted `True`
/// or `False` (and `true`, `false`) as a boolean, so an editor validating
/// against the schema sees one: those four spellings are accepted, and no
/// other (not YAML 1.1's `yes` or `on`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl<'de> Deserialize<'de> for ConditionStatus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ConditionStatus;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("True, False or Unknown")
            }

            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(if v {
                    ConditionStatus::True
                } else {
                    ConditionStatus::False
                })
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                match v {
                    "True" | "true" => Ok(ConditionStatus::True),
                    "False" | "false" => Ok(ConditionStatus::False),
                    "Unknown" => Ok(ConditionStatus::Unknown),
                    other => Err(E::unknown_variant(other, &["True", "False", "Unknown"])),
                }
            }
        }
        // As text, so the YAML reader hands over the scalar as written
        // rather than its own idea of a boolean.
        d.deserialize_str(Visitor)
    }
}

#[cfg(feature = "testing")]
impl schemars::JsonSchema for ConditionStatus {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ConditionStatus".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "True, False or Unknown (YAML reads unquoted True/False as booleans; both are accepted)",
            "anyOf": [
                {"type": "string", "enum": ["True", "False", "Unknown"]},
                {"type": "boolean"}
            ]
        })
    }
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreviousCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub since: TimestampMs,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct History {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified: Option<TimestampMs>,
    #[serde(default)]
    pub unverified_streak: u32,
    #[serde(default)]
    pub previous_conditions: Vec<PreviousCondition>,
}

/// What the host knows of the cluster's backups (`backup-facts` in the
/// WIT): the schedule that runs most often and the newest verified
/// snapshot. Times, not ages: the policy has `now`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackupFacts {
    /// The EtcdBackupSchedule `interval_ms` comes from.
    pub schedule: String,
    /// When that schedule was created: while no backup has succeeded, the
    /// cluster has been expected to have one since then.
    pub schedule_created: TimestampMs,
    /// The time between the schedule's next two runs, in milliseconds.
    pub interval_ms: u64,
    /// When the newest Complete and verified EtcdSnapshot of the cluster
    /// completed; None when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success: Option<TimestampMs>,
}

/// Which certificate of spec.tls (`certificate-role` in the WIT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
pub enum CertificateRole {
    /// spec.tls.client.serverSecretRef: what members serve to clients.
    Serving,
    /// spec.tls.peer.secretRef: what members present to each other.
    Peer,
    /// spec.tls.client.operatorClientSecretRef: what the host presents.
    OperatorClient,
}

/// The leaf certificate of a Secret's `tls.crt` (`certificate-facts`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CertificateFacts {
    pub role: CertificateRole,
    /// The Secret's name, in the cluster's namespace.
    pub secret: String,
    pub not_before: TimestampMs,
    pub not_after: TimestampMs,
}

/// spec.tls as the host found it (`tls-facts`); the default is a cluster
/// without TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TlsFacts {
    /// Members serve https on the client port.
    #[serde(default)]
    pub client: bool,
    /// Members require client certificates.
    #[serde(default)]
    pub client_cert_auth: bool,
    /// Members talk to each other over mutual TLS.
    #[serde(default)]
    pub peer: bool,
    /// Each certificate the host could read and parse.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<CertificateFacts>,
}

impl TlsFacts {
    fn is_off(&self) -> bool {
        *self == TlsFacts::default()
    }
}

/// What the host saw of one cluster: the policy's whole input.
///
/// `quorum` is the host's finding from `probing` ([`QuorumFinding::of`]),
/// computed when an observation is made or read: a file may leave it out,
/// and one that states a finding `probing` does not show is refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "ObservationFile")]
pub struct Observation {
    pub cluster: ClusterRef,
    pub spec: ClusterSpec,
    pub phase: HostPhase,
    pub members: Vec<Member>,
    pub probing: Probing,
    pub quorum: QuorumFinding,
    pub history: History,
    /// None when no active EtcdBackupSchedule names the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupFacts>,
    /// The cluster's TLS; the default without spec.tls.
    #[serde(default, skip_serializing_if = "TlsFacts::is_off")]
    pub tls: TlsFacts,
    pub now: TimestampMs,
    /// The cluster's settings for its policy, as JSON text ("{}" when it
    /// sets none). Files write them as a YAML mapping.
    #[serde(with = "settings")]
    pub settings: String,
}

/// An observation as a file writes it: `quorum` optional.
#[derive(Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "testing", schemars(rename = "Observation"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ObservationFile {
    #[serde(default)]
    cluster: ClusterRef,
    spec: ClusterSpec,
    #[serde(default)]
    phase: HostPhase,
    #[serde(default)]
    members: Vec<Member>,
    probing: Probing,
    /// The host's finding from `probing`; computed when left out.
    #[serde(default)]
    quorum: Option<QuorumFinding>,
    #[serde(default)]
    history: History,
    /// The cluster's backups; absent when no active schedule names it.
    #[serde(default)]
    backup: Option<BackupFacts>,
    /// The cluster's TLS; absent without spec.tls.
    #[serde(default)]
    tls: TlsFacts,
    now: TimestampMs,
    /// The cluster's settings for its policy (a mapping).
    #[serde(default = "settings::empty", with = "settings")]
    #[cfg_attr(
        feature = "testing",
        schemars(with = "serde_json::Map<String, serde_json::Value>")
    )]
    settings: String,
}

impl TryFrom<ObservationFile> for Observation {
    type Error = String;

    fn try_from(f: ObservationFile) -> Result<Self, String> {
        let found = QuorumFinding::of(&f.probing);
        if let Some(stated) = f.quorum
            && stated != found
        {
            return Err(format!(
                "quorum is the host's finding from probing, which shows {}; the file states {}: \
                 leave quorum out, or make it match",
                found.summary(),
                stated.summary()
            ));
        }
        Ok(Observation {
            cluster: f.cluster,
            spec: f.spec,
            phase: f.phase,
            members: f.members,
            quorum: found,
            probing: f.probing,
            history: f.history,
            backup: f.backup,
            tls: f.tls,
            now: f.now,
            settings: f.settings,
        })
    }
}

#[cfg(feature = "testing")]
impl schemars::JsonSchema for Observation {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Observation".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        ObservationFile::json_schema(generator)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

impl Condition {
    pub fn new(
        type_: impl Into<String>,
        status: ConditionStatus,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
pub enum EventType {
    Normal,
    Warning,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Event {
    #[serde(rename = "type")]
    pub type_: EventType,
    pub reason: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Verdict {
    pub conditions: Vec<Condition>,
    pub ready_members: u32,
    /// Verification is the host's (`observation.quorum`); a policy may only
    /// decline it, saying why. The status shows the cluster verified when
    /// the host verified a quorum and the policy did not decline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decline_verification: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
}

impl Verdict {
    /// The condition of the given type, if the verdict has one.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "testing", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyInfo {
    pub name: String,
    pub version: String,
    pub condition_types: Vec<String>,
    /// JSON Schema, as text.
    pub settings_schema: String,
}

/// Exports a `guest::Policy` as the component's `steward:status/policy`
/// interface. Call it once, at the crate root. It does nothing outside
/// wasm32 (where the `guest` feature need not be on), so the same crate also
/// builds natively for tests.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            type StewardExportedPolicy = $crate::guest::Exported<$policy>;
            $crate::guest::bindings::export!(
                StewardExportedPolicy with_types_in $crate::guest::bindings
            );
        };
    };
}

/// Voters needed for a quorum among `voters` voting members.
pub fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

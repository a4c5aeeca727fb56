//! The operator's view of etcd: every RPC it makes, as one object-safe trait.
//!
//! Everything above this module (observe, act) talks to `Arc<dyn EtcdApi>`,
//! never to etcd-client directly, so each RPC can be faulted in tests
//! (see [`super::FaultyEtcd`]) and every failure arrives as an [`RpcError`]
//! that already says what kind of failure it was.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use secrecy::SecretString;

use super::client::Credentials;
use steward_policy_sdk::{AlarmKind, EndpointStatus, EtcdMember, ProbeError, ProbeErrorKind};

/// Every etcd RPC the operator makes. Adding a call to [`EtcdApi`] means
/// adding its variant here, so the fault injector and the "fail each RPC"
/// tests cover it without anyone remembering to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rpc {
    Status,
    MemberList,
    QuorumRead,
    MemberAddAsLearner,
    MemberPromote,
    MemberRemove,
    MoveLeader,
    Defragment,
    AlarmDisarm,
    Snapshot,
    HashKv,
    UserAdd,
    UserChangePassword,
    RoleAdd,
    UserGrantRole,
    AuthEnable,
    AuthDisable,
}

impl Rpc {
    pub const ALL: [Rpc; 17] = [
        Rpc::Status,
        Rpc::MemberList,
        Rpc::QuorumRead,
        Rpc::MemberAddAsLearner,
        Rpc::MemberPromote,
        Rpc::MemberRemove,
        Rpc::MoveLeader,
        Rpc::Defragment,
        Rpc::AlarmDisarm,
        Rpc::Snapshot,
        Rpc::HashKv,
        Rpc::UserAdd,
        Rpc::UserChangePassword,
        Rpc::RoleAdd,
        Rpc::UserGrantRole,
        Rpc::AuthEnable,
        Rpc::AuthDisable,
    ];

    /// The calls that set up who may use the cluster.
    pub const AUTH: [Rpc; 6] = [
        Rpc::UserAdd,
        Rpc::UserChangePassword,
        Rpc::RoleAdd,
        Rpc::UserGrantRole,
        Rpc::AuthEnable,
        Rpc::AuthDisable,
    ];

    /// The etcd API name, as operators know it from etcdctl and etcd's logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Rpc::Status => "Status",
            Rpc::MemberList => "MemberList",
            Rpc::QuorumRead => "QuorumRead",
            Rpc::MemberAddAsLearner => "MemberAddAsLearner",
            Rpc::MemberPromote => "MemberPromote",
            Rpc::MemberRemove => "MemberRemove",
            Rpc::MoveLeader => "MoveLeader",
            Rpc::Defragment => "Defragment",
            Rpc::AlarmDisarm => "AlarmDisarm",
            Rpc::Snapshot => "Snapshot",
            Rpc::HashKv => "HashKV",
            Rpc::UserAdd => "UserAdd",
            Rpc::UserChangePassword => "UserChangePassword",
            Rpc::RoleAdd => "RoleAdd",
            Rpc::UserGrantRole => "UserGrantRole",
            Rpc::AuthEnable => "AuthEnable",
            Rpc::AuthDisable => "AuthDisable",
        }
    }

    /// Whether the RPC changes membership, leadership, a member's state or
    /// who may use the cluster.
    /// Such calls are never retried on another endpoint once they may have
    /// reached a server, and never made without verified quorum.
    pub fn is_mutation(self) -> bool {
        matches!(
            self,
            Rpc::MemberAddAsLearner
                | Rpc::MemberPromote
                | Rpc::MemberRemove
                | Rpc::MoveLeader
                | Rpc::Defragment
                | Rpc::AlarmDisarm
        ) || Rpc::AUTH.contains(&self)
    }
}

impl fmt::Display for Rpc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed RPC, classified. `message` is safe to log and to show in a
/// status: it never carries credentials (see `classify::redact`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcError {
    pub rpc: Rpc,
    pub endpoint: String,
    pub kind: ProbeErrorKind,
    pub message: String,
}

impl RpcError {
    pub fn new(
        rpc: Rpc,
        endpoint: impl Into<String>,
        kind: ProbeErrorKind,
        message: impl Into<String>,
    ) -> Self {
        Self {
            rpc,
            endpoint: endpoint.into(),
            kind,
            message: message.into(),
        }
    }

    /// The policy-facing form. The RPC and endpoint lead the message so a
    /// condition message built from it says where the fault was; a TLS
    /// hint (what is wrong with which certificate) goes before them, so a
    /// policy that quotes only the start keeps it whole.
    pub fn to_probe_error(&self) -> ProbeError {
        let message = match super::classify::leading_tls_hint(&self.message) {
            Some(hint) if self.kind == ProbeErrorKind::Tls => format!(
                "{hint}: {} {}: {}",
                self.rpc,
                self.endpoint,
                &self.message[hint.len() + 2..]
            ),
            _ => format!("{} {}: {}", self.rpc, self.endpoint, self.message),
        };
        ProbeError {
            kind: self.kind,
            message,
        }
    }
}

/// etcd's answers to a membership change it will accept a little later.
/// With `--strict-reconfig-check` (the default) etcd refuses any change
/// until every member has been connected for 5 s, as right after a
/// promotion; a learner's promotion waits until it is in sync.
const REFUSED_FOR_NOW: [&str; 2] = [
    "etcdserver: unhealthy cluster",
    "etcdserver: can only promote a learner member which is in sync with leader",
];

impl RpcError {
    /// etcd refused a membership change that it will take once the cluster
    /// settles: a reason to wait, not a failure to report.
    pub fn is_refused_for_now(&self) -> bool {
        self.rpc.is_mutation() && REFUSED_FOR_NOW.iter().any(|m| self.message.contains(m))
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at {} failed ({}): {}",
            self.rpc,
            self.endpoint,
            self.kind.as_str(),
            self.message
        )
    }
}

impl std::error::Error for RpcError {}

/// What one member says about itself (the Maintenance.Status RPC).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct StatusInfo {
    pub cluster_id: u64,
    pub member_id: u64,
    /// 0 when the member knows no leader.
    pub leader_id: u64,
    pub raft_term: u64,
    /// The member's committed index.
    pub raft_index: u64,
    pub raft_applied_index: u64,
    /// The member's own current revision (the Status response header's):
    /// local, so it answers even without quorum.
    pub revision: i64,
    pub db_size: u64,
    pub db_size_in_use: u64,
    pub version: String,
    pub is_learner: bool,
    /// etcd's own error strings, verbatim ("etcdserver: no leader",
    /// alarm descriptions, ...).
    pub errors: Vec<String>,
    /// Alarms raised for this member, parsed from `errors`.
    pub alarms: Vec<AlarmKind>,
}

impl StatusInfo {
    pub fn is_leader(&self) -> bool {
        self.member_id != 0 && self.member_id == self.leader_id
    }
}

impl From<&StatusInfo> for EndpointStatus {
    fn from(s: &StatusInfo) -> Self {
        EndpointStatus {
            member_id: s.member_id,
            leader_id: s.leader_id,
            raft_term: s.raft_term,
            raft_index: s.raft_index,
            raft_applied_index: s.raft_applied_index,
            revision: s.revision,
            db_size: s.db_size,
            db_size_in_use: s.db_size_in_use,
            version: s.version.clone(),
            alarms: s.alarms.clone(),
            is_learner: s.is_learner,
        }
    }
}

/// The result of MemberAdd: the new member's id and etcd's member list
/// right after the add, which is where a new member's initial cluster
/// must come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddedMember {
    pub id: u64,
    pub members: Vec<EtcdMember>,
}

/// An open Maintenance.Snapshot stream.
/// etcd's HashKV answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvHash {
    /// The revision hashed up to.
    pub revision: i64,
    pub hash: u32,
    /// The member's compact revision: hashes compare only between copies
    /// compacted alike.
    pub compact_revision: i64,
}

pub struct SnapshotStream {
    /// The member's revision just before the stream opened (etcd's
    /// snapshot messages carry none): the snapshot holds at least this
    /// revision, exactly this one unless a write raced the stream's start.
    pub revision: i64,
    /// The snapshot's bytes, in order, the first message's included. Each
    /// message must arrive within the client's deadline of the previous
    /// one; a stall ends the stream with a timeout error.
    pub chunks: futures::stream::BoxStream<'static, Result<bytes::Bytes, RpcError>>,
}

impl fmt::Debug for SnapshotStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotStream")
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

/// Every etcd RPC the operator makes.
///
/// Reads are addressed to one endpoint: the caller decides whom to ask,
/// because which member answers is itself an observation. Membership
/// changes take a list of endpoints: an implementation tries them in order
/// (put the leader first) and moves on only while the call cannot have
/// reached a server (refused, DNS, TLS); after a timeout it returns the
/// error, because the change may have been applied and the next observation
/// must find out.
///
/// Every call is bounded by [`EtcdApi::deadline`], including name
/// resolution and connecting.
#[async_trait]
pub trait EtcdApi: Send + Sync {
    /// The per-RPC deadline this client enforces.
    fn deadline(&self) -> Duration;

    /// The etcd user to be on every endpoint whose host lies in `domain`
    /// (one cluster's members: `<cluster>.<namespace>.svc`), or none.
    /// Changed credentials drop that cluster's connections, so the next
    /// call authenticates with them. No RPC: it cannot fail.
    fn set_credentials(&self, domain: &str, credentials: Option<Credentials>);

    /// The TLS configuration (trusted CA, client certificate) for every
    /// `https://` endpoint in `domain`, or none (the client's default).
    /// A changed configuration drops that cluster's connections.
    fn set_tls(&self, domain: &str, tls: Option<crate::tls::ClusterTls>);

    /// Whether the client's connection to `endpoint` authenticated. Read
    /// right after a call on it succeeded, `Some(true)` means etcd has
    /// authentication on and took the credentials, `Some(false)` that it
    /// has it off. `None` when nothing connected yet.
    fn authenticated(&self, endpoint: &str) -> Option<bool>;

    async fn status(&self, endpoint: &str) -> Result<StatusInfo, RpcError>;

    async fn member_list(&self, endpoint: &str) -> Result<Vec<EtcdMember>, RpcError>;

    /// A linearizable read (through raft's read index): it succeeds only
    /// while a quorum of voters exists and has a leader.
    async fn quorum_read(&self, endpoint: &str) -> Result<(), RpcError>;

    async fn member_add_as_learner(
        &self,
        endpoints: &[String],
        peer_urls: &[String],
    ) -> Result<AddedMember, RpcError>;

    /// Returns etcd's member list after the promotion.
    async fn member_promote(
        &self,
        endpoints: &[String],
        id: u64,
    ) -> Result<Vec<EtcdMember>, RpcError>;

    /// Returns etcd's member list after the removal.
    async fn member_remove(
        &self,
        endpoints: &[String],
        id: u64,
    ) -> Result<Vec<EtcdMember>, RpcError>;

    /// Asks the leader at `leader_endpoint` to hand leadership to voter
    /// `target` (etcd's MoveLeader, which only the leader accepts).
    async fn move_leader(&self, leader_endpoint: &str, target: u64) -> Result<(), RpcError>;

    /// Defragments the database of the member at `endpoint` (and only that
    /// member). It blocks that member's reads and writes while it runs, so
    /// it gets `deadline` of its own rather than the per-RPC one.
    async fn defragment(&self, endpoint: &str, deadline: Duration) -> Result<(), RpcError>;

    /// Disarms the NOSPACE alarm raised for member `member` (asked of the
    /// member at `endpoint`; the alarm is cluster state).
    async fn disarm_no_space(&self, endpoint: &str, member: u64) -> Result<(), RpcError>;

    /// Opens a snapshot of the backend of the member at `endpoint`. The
    /// stream is not bounded by the per-RPC deadline as a whole (a large
    /// database takes minutes), only each message is.
    async fn snapshot(&self, endpoint: &str) -> Result<SnapshotStream, RpcError>;

    /// The keyspace hash of the member at `endpoint` at `revision` (etcd's
    /// HashKV, the one its own corruption check compares across members).
    /// It reads the whole keyspace, so it gets `deadline` of its own.
    async fn hash_kv(
        &self,
        endpoint: &str,
        revision: i64,
        deadline: Duration,
    ) -> Result<KvHash, RpcError>;

    /// Creates user `name` (etcd's UserAdd). `Ok(false)` when a user of
    /// that name already exists: its password is then left as it was, so
    /// set it with [`EtcdApi::user_change_password`].
    async fn user_add(
        &self,
        endpoints: &[String],
        name: &str,
        password: &SecretString,
    ) -> Result<bool, RpcError>;

    async fn user_change_password(
        &self,
        endpoints: &[String],
        name: &str,
        password: &SecretString,
    ) -> Result<(), RpcError>;

    /// Creates role `name`; `Ok(false)` when it already exists.
    async fn role_add(&self, endpoints: &[String], name: &str) -> Result<bool, RpcError>;

    /// Grants `role` to `user`; granting a role the user has is no error.
    async fn user_grant_role(
        &self,
        endpoints: &[String],
        user: &str,
        role: &str,
    ) -> Result<(), RpcError>;

    /// Turns authentication on. etcd refuses it until a user `root` with
    /// the role `root` exists, and accepts it when it is already on.
    async fn auth_enable(&self, endpoints: &[String]) -> Result<(), RpcError>;

    /// Turns authentication off; only `root` may. Accepted when it is off.
    async fn auth_disable(&self, endpoints: &[String]) -> Result<(), RpcError>;
}

/// Lets a shared client be wrapped (`FaultyEtcd<Arc<dyn EtcdApi>>`) or
/// passed where an `EtcdApi` is expected.
#[async_trait]
impl<T: EtcdApi + ?Sized> EtcdApi for std::sync::Arc<T> {
    fn deadline(&self) -> Duration {
        (**self).deadline()
    }

    fn set_credentials(&self, domain: &str, credentials: Option<Credentials>) {
        (**self).set_credentials(domain, credentials)
    }

    fn set_tls(&self, domain: &str, tls: Option<crate::tls::ClusterTls>) {
        (**self).set_tls(domain, tls)
    }

    fn authenticated(&self, endpoint: &str) -> Option<bool> {
        (**self).authenticated(endpoint)
    }

    async fn status(&self, endpoint: &str) -> Result<StatusInfo, RpcError> {
        (**self).status(endpoint).await
    }

    async fn member_list(&self, endpoint: &str) -> Result<Vec<EtcdMember>, RpcError> {
        (**self).member_list(endpoint).await
    }

    async fn quorum_read(&self, endpoint: &str) -> Result<(), RpcError> {
        (**self).quorum_read(endpoint).await
    }

    async fn member_add_as_learner(
        &self,
        endpoints: &[String],
        peer_urls: &[String],
    ) -> Result<AddedMember, RpcError> {
        (**self).member_add_as_learner(endpoints, peer_urls).await
    }

    async fn member_promote(
        &self,
        endpoints: &[String],
        id: u64,
    ) -> Result<Vec<EtcdMember>, RpcError> {
        (**self).member_promote(endpoints, id).await
    }

    async fn member_remove(
        &self,
        endpoints: &[String],
        id: u64,
    ) -> Result<Vec<EtcdMember>, RpcError> {
        (**self).member_remove(endpoints, id).await
    }

    async fn move_leader(&self, leader_endpoint: &str, target: u64) -> Result<(), RpcError> {
        (**self).move_leader(leader_endpoint, target).await
    }

    async fn defragment(&self, endpoint: &str, deadline: Duration) -> Result<(), RpcError> {
        (**self).defragment(endpoint, deadline).await
    }

    async fn disarm_no_space(&self, endpoint: &str, member: u64) -> Result<(), RpcError> {
        (**self).disarm_no_space(endpoint, member).await
    }

    async fn snapshot(&self, endpoint: &str) -> Result<SnapshotStream, RpcError> {
        (**self).snapshot(endpoint).await
    }

    async fn hash_kv(
        &self,
        endpoint: &str,
        revision: i64,
        deadline: Duration,
    ) -> Result<KvHash, RpcError> {
        (**self).hash_kv(endpoint, revision, deadline).await
    }

    async fn user_add(
        &self,
        endpoints: &[String],
        name: &str,
        password: &SecretString,
    ) -> Result<bool, RpcError> {
        (**self).user_add(endpoints, name, password).await
    }

    async fn user_change_password(
        &self,
        endpoints: &[String],
        name: &str,
        password: &SecretString,
    ) -> Result<(), RpcError> {
        (**self)
            .user_change_password(endpoints, name, password)
            .await
    }

    async fn role_add(&self, endpoints: &[String], name: &str) -> Result<bool, RpcError> {
        (**self).role_add(endpoints, name).await
    }

    async fn user_grant_role(
        &self,
        endpoints: &[String],
        user: &str,
        role: &str,
    ) -> Result<(), RpcError> {
        (**self).user_grant_role(endpoints, user, role).await
    }

    async fn auth_enable(&self, endpoints: &[String]) -> Result<(), RpcError> {
        (**self).auth_enable(endpoints).await
    }

    async fn auth_disable(&self, endpoints: &[String]) -> Result<(), RpcError> {
        (**self).auth_disable(endpoints).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TLS hint leads the policy's message, whole within the 120 bytes
    /// the default policy quotes; other errors keep the RPC first.
    #[test]
    fn a_tls_hint_leads_the_policys_message() {
        let err = etcd_client::Error::GRpcStatus(tonic::Status::unavailable(
            "transport error: invalid peer certificate: UnknownIssuer",
        ));
        let (kind, message) = super::super::classify::classify(&err);
        let e = RpcError::new(
            Rpc::Status,
            "https://a-cluster-with-a-long-name-1a2b3c.a-cluster-with-a-long-name.production-namespace.svc:2379",
            kind,
            message,
        )
        .to_probe_error();
        let quoted: String = e.message.chars().take(120).collect();
        assert!(
            quoted.contains("ca.crt of spec.tls.client.serverSecretRef"),
            "{quoted}"
        );
        assert!(
            e.message.contains(": Status https://a-cluster"),
            "{}",
            e.message
        );
        assert!(e.message.ends_with("UnknownIssuer"), "{}", e.message);
        let plain = RpcError::new(
            Rpc::Status,
            "http://x:2379",
            ProbeErrorKind::Refused,
            "refused",
        );
        assert_eq!(
            plain.to_probe_error().message,
            "Status http://x:2379: refused"
        );
    }

    #[test]
    fn etcds_not_yet_answers_to_a_membership_change_are_waits() {
        let unhealthy = RpcError::new(
            Rpc::MemberAddAsLearner,
            "http://a:2379",
            ProbeErrorKind::Other,
            "etcdserver: unhealthy cluster",
        );
        assert!(unhealthy.is_refused_for_now());
        let lagging = RpcError::new(
            Rpc::MemberPromote,
            "http://a:2379",
            ProbeErrorKind::Other,
            "etcdserver: can only promote a learner member which is in sync with leader",
        );
        assert!(lagging.is_refused_for_now());
        // A timeout is a failure, and a probe is no membership change.
        let timeout = RpcError::new(
            Rpc::MemberAddAsLearner,
            "http://a:2379",
            ProbeErrorKind::Timeout,
            "deadline has elapsed",
        );
        assert!(!timeout.is_refused_for_now());
        let status = RpcError {
            rpc: Rpc::Status,
            ..unhealthy
        };
        assert!(!status.is_refused_for_now());
    }
}

//! `EtcdCluster`: what the user asks for (spec) and what the operator last
//! saw and concluded (status).
//!
//! The spec is field-compatible with the cozystack etcd-operator `v1alpha2`
//! spec, so a manifest written for it parses here unchanged. A change the
//! operator does not carry out (switching TLS on an existing cluster) is
//! rejected by a CEL rule with a message saying so, never accepted and
//! ignored.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, ResourceRequirements, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema::preserve_unknown_object;

/// Replicas when the spec leaves them out.
pub const DEFAULT_REPLICAS: i32 = 3;
/// Seconds the operator works towards one target before declaring it stuck.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;
/// The etcd version when the spec leaves it out: the newest 3.6 release the
/// operator is tested with (tests/etcd/3.6/go.mod pins it; a unit test
/// keeps the two equal).
pub const DEFAULT_ETCD_VERSION: &str = "3.6.17";
/// The minor versions the operator runs, oldest first. docs/api.md#versions
/// says which release of each the tests run.
pub const SUPPORTED_ETCD_MINORS: [&str; 3] = ["3.5", "3.6", "3.7"];
/// Per-member storage when the spec leaves it out.
pub const DEFAULT_STORAGE_SIZE: &str = "1Gi";

/// Desired state of an etcd cluster.
// Each printcolumn repeats `type_`; clippy reads that as a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "etcd.steward.dev",
    version = "v1alpha1",
    kind = "EtcdCluster",
    namespaced,
    shortname = "ec",
    shortname = "etcd",
    status = "EtcdClusterStatus",
    derive = "PartialEq",
    doc = "An etcd cluster managed by etcd-steward. Its status verdict (conditions, ready members, verification) comes from a status policy evaluated on every reconcile.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.readyMembers",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "VERSION", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "REPLICAS", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "READY", type_ = "integer", json_path = ".status.readyMembers"),
    printcolumn(
        name = "AVAILABLE",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status"
    ),
    printcolumn(
        name = "VERIFIED",
        type_ = "date",
        json_path = ".status.lastVerifiedTime",
        description = "When etcd last confirmed the cluster healthy"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new(
        "!has(self.tls) || !has(self.tls.client) || has(self.tls.client.certManager) != has(self.tls.client.serverSecretRef)"
    ).message(
        "spec.tls.client needs exactly one of serverSecretRef (the members' serving certificate and the CA the operator trusts it by, as a Secret) and certManager (the issuer cert-manager makes it with)"
    ).reason(Reason::FieldValueRequired),
    validation = Rule::new(
        "!has(self.tls) || !has(self.tls.client) || !has(self.tls.client.certManager) || !has(self.tls.client.operatorClientSecretRef)"
    ).message(
        "spec.tls.client.operatorClientSecretRef goes with serverSecretRef; with certManager, name the operator's issuer in certManager.operatorClientIssuerRef"
    ).reason(Reason::FieldValueForbidden),
    validation = Rule::new(
        "!has(self.tls) || !has(self.tls.peer) || has(self.tls.peer.certManager) != has(self.tls.peer.secretRef)"
    ).message("spec.tls.peer needs exactly one of secretRef and certManager").reason(Reason::FieldValueRequired),
    validation = Rule::new(
        "has(self.tls) == has(oldSelf.tls) && (!has(self.tls) || self.tls == oldSelf.tls)"
    ).message(
        "spec.tls cannot be added, removed or changed yet: that takes a rolling restart of every member with both schemes, which the operator does not do yet. Rotate certificates by changing the Secrets' contents; to switch TLS, create a new cluster restored from a snapshot (spec.bootstrap.restore)"
    ).reason(Reason::FieldValueForbidden),
    validation = Rule::new(
        "!has(self.auth) || !has(self.auth.enabled) || !self.auth.enabled || has(self.auth.rootCredentialsSecretRef)"
    ).message(
        "spec.auth.enabled needs spec.auth.rootCredentialsSecretRef: the operator creates etcd's root user with the password in that Secret"
    ).reason(Reason::FieldValueRequired),
    validation = Rule::new(
        "!has(oldSelf.auth) || !has(oldSelf.auth.enabled) || !oldSelf.auth.enabled || (has(self.auth) && has(self.auth.rootCredentialsSecretRef))"
    ).message(
        "to turn etcd authentication off, set spec.auth.enabled to false and keep spec.auth.rootCredentialsSecretRef: only root may turn it off, so the operator needs the password; remove spec.auth once status.authEnabled is false"
    ),
    validation = Rule::new(
        "(has(self.bootstrap) && has(self.bootstrap.restore)) == (has(oldSelf.bootstrap) && has(oldSelf.bootstrap.restore)) && (!(has(self.bootstrap) && has(self.bootstrap.restore)) || self.bootstrap.restore == oldSelf.bootstrap.restore)"
    ).message(
        "spec.bootstrap.restore is immutable: it says what the cluster was created from"
    ),
    validation = Rule::new("!has(self.replicas) || self.replicas <= 7").message(
        "spec.replicas must be at most 7: every write waits for a majority of the voters, so more members make writes slower without useful extra fault tolerance (etcd recommends at most 7)"
    ),
    validation = Rule::new(
        "!(has(self.replicas) && self.replicas == 0 && has(self.storage) && has(self.storage.medium) && self.storage.medium == 'Memory')"
    ).message(
        "spec.replicas=0 with spec.storage.medium=Memory is unsupported: a paused member keeps no Pod, so its tmpfs data would be lost. Delete the cluster instead."
    ),
    validation = Rule::new(
        "!(has(self.storage) && has(self.storage.medium) && self.storage.medium == 'Memory') || (has(self.storage.size) && quantity(string(self.storage.size)).isGreaterThan(quantity('0')))"
    ).message(
        "spec.storage.size must be greater than 0 when spec.storage.medium=Memory (it is the tmpfs size limit)"
    ),
    validation = Rule::new(
        "(has(self.storage) && has(self.storage.medium) ? self.storage.medium : '') == (has(oldSelf.storage) && has(oldSelf.storage.medium) ? oldSelf.storage.medium : '')"
    ).message(
        "spec.storage.medium is immutable; delete and recreate the cluster to change the storage backend"
    ),
    validation = Rule::new(
        "(has(self.storage) && has(self.storage.storageClassName)) == (has(oldSelf.storage) && has(oldSelf.storage.storageClassName)) && (!(has(self.storage) && has(self.storage.storageClassName)) || self.storage.storageClassName == oldSelf.storage.storageClassName)"
    ).message(
        "spec.storage.storageClassName cannot be added, removed or changed (a PVC's storage class is immutable); delete and recreate the cluster to change it"
    ),
    // The equality short-cut keeps quantity() (Kubernetes >= 1.29 only) off
    // the path of every update that does not touch the size.
    validation = Rule::new(
        "!has(self.storage) || !has(oldSelf.storage) || !has(self.storage.size) || !has(oldSelf.storage.size) || self.storage.size == oldSelf.storage.size || quantity(string(self.storage.size)).compareTo(quantity(string(oldSelf.storage.size))) >= 0"
    ).message("spec.storage.size cannot shrink (a PVC cannot shrink)"),
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterSpec {
    /// Desired number of members, at most 7; should be odd (an even count
    /// tolerates no more failures than one fewer). 0 pauses the cluster:
    /// the last member stays dormant (no Pod) and keeps its data volume.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0))]
    pub replicas: i32,

    /// etcd version, X.Y.Z: a release of 3.5 (3.5.3 or later), 3.6 or 3.7.
    /// Defaults to the newest 3.6 release the operator is tested with.
    /// A change rolls the members to it one at a time, along etcd's
    /// supported upgrade paths; `status.version` says what they run.
    #[serde(default = "default_version")]
    #[schemars(regex(pattern = r"^\d+\.\d+\.\d+$"), length(max = 32))]
    #[x_kube(
        // Keep the minors in step with SUPPORTED_ETCD_MINORS (a unit test does).
        validation = Rule::new("self.matches('^3[.](5|6|7)[.](0|[1-9][0-9]*)$')").message(
            "spec.version must be a release of etcd 3.5, 3.6 or 3.7 (X.Y.Z without leading zeros), the minor versions this operator supports (docs/api.md#versions)"
        ),
        validation = Rule::new("!(self in ['3.5.0', '3.5.1', '3.5.2'])").message(
            "spec.version 3.5.0, 3.5.1 and 3.5.2 are refused: they have a data-inconsistency bug that etcd fixed in 3.5.3 (use 3.5.26 or later, or 3.6)"
        ).reason(Reason::FieldValueForbidden),
    )]
    pub version: String,

    /// Per-member data directory.
    #[serde(default)]
    pub storage: StorageSpec,

    /// How long the operator works towards one target (replicas, version)
    /// before it reports Stalled with reason ProgressDeadlineExceeded.
    #[serde(default = "default_progress_deadline")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: i32,

    /// TLS for the client and peer APIs, from Secrets (docs/api.md#tls).
    /// Fixed at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,

    /// etcd authentication: a root user from a Secret, then auth enabled
    /// (docs/api.md#auth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSpec>,

    /// One-time initialisation: `restore` creates the cluster from a snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<BootstrapSpec>,

    /// Resources of the etcd container. Applies to members created from now on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Scheduling affinity of member Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Topology spread of member Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,

    /// Pull secrets for the etcd image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,

    /// Extra labels and annotations put on every member Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_metadata: Option<AdditionalMetadata>,

    /// A closed set of etcd flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<EtcdOptions>,

    /// Maintenance the operator does on its own. Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceSpec>,

    /// Which status policy derives this cluster's verdict, and its settings.
    /// Unset: the embedded default policy with default settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_policy: Option<StatusPolicyRef>,

    /// What the operator does when a majority of the voters' data is gone
    /// for good (docs/backup.md, "Quorum loss"). Unset: Manual.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoverySpec>,
}

/// Recovery from permanent quorum loss.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoverySpec {
    /// Manual: the status names the survivor to recover from and the one
    /// command that does it; nothing happens until a person runs it.
    /// Automatic: after `gracePeriodSeconds` without quorum, the operator
    /// recovers from the surviving voter with the highest applied raft
    /// index.
    #[serde(default)]
    pub quorum_loss: QuorumLossMode,
    /// How long the cluster must have been without a verified quorum
    /// before Automatic recovers (Manual shows the command at once).
    #[serde(default = "default_recovery_grace")]
    #[schemars(range(min = 0, max = 86400))]
    pub grace_period_seconds: i32,
}

impl Default for RecoverySpec {
    fn default() -> Self {
        Self {
            quorum_loss: QuorumLossMode::Manual,
            grace_period_seconds: default_recovery_grace(),
        }
    }
}

fn default_recovery_grace() -> i32 {
    300
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum QuorumLossMode {
    #[default]
    Manual,
    Automatic,
}

/// The annotation a person sets on the EtcdCluster to recover from
/// permanent quorum loss in Manual mode: its value names the surviving
/// member to recover from, or `EtcdSnapshot/<name>` when none survives.
pub const ANNOTATION_RECOVER_FROM: &str = "etcd.steward.dev/recover-from";

/// The prefix of a recover-from value that names an EtcdSnapshot.
pub const RECOVER_FROM_SNAPSHOT: &str = "EtcdSnapshot/";

/// Put on an EtcdMember whose whole cluster is being restored from a
/// snapshot because no voter's data survived: its finalizer does not wait
/// for a quorum to run MemberRemove in, since that cluster is gone.
pub const ANNOTATION_ABANDONED: &str = "etcd.steward.dev/abandoned";

fn default_replicas() -> i32 {
    DEFAULT_REPLICAS
}

fn default_version() -> String {
    DEFAULT_ETCD_VERSION.to_owned()
}

fn default_progress_deadline() -> i32 {
    DEFAULT_PROGRESS_DEADLINE_SECONDS
}

fn default_storage_size() -> Quantity {
    Quantity(DEFAULT_STORAGE_SIZE.to_owned())
}

/// Where a member keeps its data.
///
/// Its immutability rules live on `EtcdClusterSpec`, not here: this type is
/// also the member's storage and part of `status.observed`, which must not
/// carry transition rules; and only at the parent can a rule see an
/// optional field being added or removed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Requested capacity per member: the PVC size, or the tmpfs size limit
    /// for medium Memory. It may grow (each member's PVC is expanded, when
    /// its StorageClass allows it) but not shrink: a PVC cannot shrink (an
    /// equal quantity written differently, 2Gi as 2048Mi, is accepted).
    #[serde(default = "default_storage_size")]
    pub size: Quantity,

    /// "" (a PVC per member) or "Memory" (tmpfs, lost with the Pod). Immutable.
    #[serde(default)]
    pub medium: StorageMedium,

    /// StorageClass of the member PVCs; unset uses the default class, ""
    /// disables dynamic provisioning. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

impl Default for StorageSpec {
    fn default() -> Self {
        Self {
            size: default_storage_size(),
            medium: StorageMedium::default(),
            storage_class_name: None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum StorageMedium {
    /// A PersistentVolumeClaim per member.
    #[default]
    #[serde(rename = "")]
    Default,
    /// A tmpfs emptyDir per member.
    Memory,
}

/// TLS for the client API (2379) and the peer API (2380): the members
/// serve https and require client certificates from the Secret's CA.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientTls>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerTls>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientTls {
    /// Secret (kubernetes.io/tls with ca.crt) holding the members' serving
    /// certificate; the operator trusts them by its ca.crt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_secret_ref: Option<LocalObjectReference>,
    /// Secret holding the operator's client certificate (tls.crt,
    /// tls.key); enables client mTLS: the members then require a client
    /// certificate from the serving Secret's CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_client_secret_ref: Option<LocalObjectReference>,
    /// Instead of the Secrets: cert-manager issues the certificates. The
    /// operator creates Certificate `<cluster>-server` (Secret
    /// `<cluster>-server-tls`) and, with operatorClientIssuerRef,
    /// `<cluster>-operator-client` (Secret `<cluster>-operator-client-tls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_manager: Option<ClientCertManagerTls>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientCertManagerTls {
    /// Issues the members' serving certificate; its CA (ca.crt) is the one
    /// everybody trusts.
    pub server_issuer_ref: IssuerReference,
    /// Issues the operator's client certificate; enables client mTLS. Must
    /// be signed by the CA of serverIssuerRef (the same issuer, simplest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_client_issuer_ref: Option<IssuerReference>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeerTls {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// Instead of the Secret: cert-manager issues the peer certificate
    /// (Certificate `<cluster>-peer`, Secret `<cluster>-peer-tls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_manager: Option<PeerCertManagerTls>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeerCertManagerTls {
    pub issuer_ref: IssuerReference,
}

/// A cert-manager Issuer (in the cluster's namespace) or ClusterIssuer;
/// kind defaults to Issuer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuerReference {
    #[schemars(length(min = 1))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<IssuerKind>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum IssuerKind {
    Issuer,
    ClusterIssuer,
}

/// etcd authentication. Once the cluster is verified and its membership
/// settled, the operator creates the user `root` with the role `root` and
/// turns authentication on; from then on every RPC it makes authenticates.
/// `enabled: false` (keeping the Secret) turns it off again. A changed
/// password in the Secret is set in etcd.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthSpec {
    #[serde(default)]
    pub enabled: bool,
    /// Secret (kubernetes.io/basic-auth) with the etcd root password under
    /// `password`; `username`, if present, must be `root`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_credentials_secret_ref: Option<LocalObjectReference>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreSpec>,
}

/// Create the cluster from a snapshot, once: the seed member starts from
/// it, and the others join the restored seed as learners.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSpec {
    pub source: RestoreSource,
}

/// A snapshot to restore: a Complete, verified EtcdSnapshot, or an S3
/// object or a file on a PVC, with its sha256.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(
    validation = Rule::new("[has(self.snapshotRef), has(self.s3), has(self.pvc)].filter(x, x).size() == 1")
        .message("spec.bootstrap.restore.source needs exactly one of snapshotRef, s3 or pvc"),
    validation = Rule::new("!has(self.s3) || has(self.sha256)").message(
        "spec.bootstrap.restore.source.s3 needs sha256: the object's checksum, checked before anything starts"
    ),
    validation = Rule::new("!has(self.pvc) || has(self.sha256)").message(
        "spec.bootstrap.restore.source.pvc needs sha256: the file's checksum, checked before etcd starts"
    ),
    validation = Rule::new("!has(self.pvc) || (has(self.pvc.subPath) && size(self.pvc.subPath) > 0)").message(
        "spec.bootstrap.restore.source.pvc.subPath must be the snapshot file's path in the volume"
    ),
)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSource {
    /// An EtcdSnapshot in the cluster's namespace; it must be Complete and
    /// Verified. Its artifact's URI and checksum are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_ref: Option<LocalObjectReference>,
    /// An object in an S3-compatible store. Here `key` is the object's
    /// whole key (not a prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<super::S3Location>,
    /// The sha256 of the `s3` object or `pvc` file, `sha256:<hex>` or `<hex>` (an
    /// EtcdSnapshot's `artifact.checksum`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(sha256:)?[0-9a-f]{64}$"))]
    pub sha256: Option<String>,
    /// A file on a PersistentVolumeClaim in the cluster's namespace:
    /// `subPath` is the file's path in the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<super::PvcLocation>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Maintenance the operator does on its own.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceSpec {
    /// Defragment members' databases, one member at a time. Unset: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defrag: Option<DefragSpec>,
}

/// When a member's database is defragmented. A member qualifies once at
/// least 1 MiB of its database file is free and either threshold is met,
/// or while it has a NOSPACE alarm.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefragSpec {
    /// Percent of the database file that is free (dbSize - dbSizeInUse,
    /// against dbSize) at which a member is defragmented.
    #[serde(default = "default_fragmented_percent")]
    #[schemars(range(min = 1, max = 100))]
    pub fragmented_percent: i32,
    /// Percent of the backend quota (options.quotaBackendBytes, or etcd's
    /// default of 2 GiB) the database file may reach before the member is
    /// defragmented, whatever its fragmentation.
    #[serde(default = "default_quota_percent")]
    #[schemars(range(min = 1, max = 100))]
    pub quota_percent: i32,
    /// A cron schedule (5 fields, UTC). Set: each qualifying member is
    /// defragmented once within the hour after each scheduled time. Unset:
    /// whenever it qualifies, at most once every 10 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub schedule: Option<String>,
    /// After a defragmentation, disarm the cluster's NOSPACE alarm when
    /// every member's database is back under the quota.
    #[serde(default = "default_true")]
    pub clear_no_space_alarm: bool,
}

fn default_fragmented_percent() -> i32 {
    50
}

fn default_quota_percent() -> i32 {
    80
}

fn default_true() -> bool {
    true
}

/// The etcd flags a user may set. A closed set on purpose: a free-form map
/// would let a typo or an unsafe flag through unnoticed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdOptions {
    /// `--quota-backend-bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub quota_backend_bytes: Option<i64>,
    /// `--auto-compaction-mode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compaction_mode: Option<AutoCompactionMode>,
    /// `--auto-compaction-retention`: a duration ("1h", "30m") for periodic,
    /// a revision count for revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub auto_compaction_retention: Option<String>,
    /// `--snapshot-count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub snapshot_count: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AutoCompactionMode {
    Periodic,
    Revision,
}

impl AutoCompactionMode {
    pub fn as_flag_value(self) -> &'static str {
        match self {
            Self::Periodic => "periodic",
            Self::Revision => "revision",
        }
    }
}

/// Which status policy to run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusPolicyRef {
    /// The EtcdStatusPolicy to run. Unset: the policy embedded in the
    /// operator. Deprecated form, kept until v1alpha2: when no
    /// EtcdStatusPolicy has this name, a ConfigMap of the name in the
    /// cluster's namespace whose `policy.wasm` binaryData key holds the
    /// component (unpinned; a Warning Event says so on every change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
    /// Settings handed to the policy as JSON; the policy's own settings
    /// schema validates them when it is loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub settings: Option<serde_json::Value>,
}

/// The ConfigMap key a status policy is read from in the deprecated
/// ConfigMap form of `spec.statusPolicy.name`.
pub const POLICY_CONFIGMAP_KEY: &str = super::DEFAULT_POLICY_KEY;

/// What the operator last saw and concluded.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterStatus {
    /// The `metadata.generation` this status was derived from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Members the policy counts as ready (healthy and serving).
    #[serde(default)]
    pub ready_members: i32,

    /// Label selector of the member Pods, for the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,

    /// etcd cluster ID in hex, latched once the seed member is confirmed.
    #[serde(default, rename = "clusterID", skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,

    /// The `--initial-cluster-token` every member of this cluster gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_token: Option<String>,

    /// The etcd version the cluster runs, as its members report it: the
    /// oldest when they differ (VersionDrifted then says so). Kept from the
    /// last observation in which a member answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,

    /// The target being worked towards: the spec's replicas, version,
    /// storage and resources. Each step is planned against the current
    /// spec (one membership change at a time), so a spec changed mid-way
    /// redirects the next step; a changed target restarts the progress
    /// deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<ObservedClusterSpec>,

    /// When etcd last confirmed the cluster healthy (a verified verdict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified_time: Option<Time>,

    /// Consecutive reconciles whose verdict was not verified.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub unverified_streak: u32,

    /// The status policy that produced this verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyStatus>,

    /// One entry per member, as etcd and the Pods report them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub members: Vec<MemberSummary>,

    /// Members in a crash loop: their Pod failed `--crash-loop-threshold`
    /// times in a row without becoming Ready. Each is replaced once the
    /// other voters hold quorum.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub broken_members: Vec<String>,

    /// The error of the last membership action, until one succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action_error: Option<String>,

    /// Set while a majority of the voters' data is gone for good: which
    /// members are lost, which survive, and how to recover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum_loss: Option<QuorumLossStatus>,

    /// The last recovery from permanent quorum loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_recovery: Option<RecoveryRecord>,

    /// The highest revision the operator read with a verified quorum: what
    /// a recovery measures the revisions it lost against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified_revision: Option<i64>,

    /// When the in-flight target is declared stuck. Unset when no target is in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline: Option<Time>,

    /// Whether etcd has authentication on, as the operator last saw it
    /// answer: true only once etcd took the root credentials. Kept from
    /// the last observation in which a member answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_enabled: Option<bool>,

    /// Available, Degraded, Progressing (from the policy); Ready, Reconciling,
    /// Stalled (kstatus) and VersionDrifted, derived by the operator.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// A majority of the voters is gone for good.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuorumLossStatus {
    /// Voters whose data is gone, and why the operator knows.
    pub lost: Vec<LostMember>,
    /// Voters whose data remains, with what each last answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub survivors: Vec<SurvivingMember>,
    /// The survivor a recovery starts from: the one with the highest
    /// applied raft index that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recover_from: Option<String>,
    /// The one command that recovers (Manual), or what Automatic does.
    pub action: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LostMember {
    pub name: String,
    pub reason: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SurvivingMember {
    pub name: String,
    /// Unset when the member did not answer this reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "int64"))]
    pub raft_applied_index: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
}

/// What a recovery from permanent quorum loss did.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryRecord {
    pub time: Time,
    pub mode: QuorumLossMode,
    /// The member whose data the cluster continues from, when one survived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_member: Option<String>,
    /// The EtcdSnapshot the cluster was restored from, when no voter's data
    /// survived. While `clusterID` is unset, the new seed is being restored
    /// from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_snapshot: Option<String>,
    /// The member's applied raft index when it was chosen (0 for a snapshot).
    #[serde(default)]
    #[schemars(extend("format" = "int64"))]
    pub raft_applied_index: u64,
    /// The member's revision, or the snapshot's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Revisions the operator had read with quorum that the survivor does
    /// not have (`lastVerifiedRevision` minus its revision; 0 when it was
    /// up to date). Unset when either is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_revisions: Option<i64>,
    /// The voters whose data was gone.
    pub lost_members: Vec<String>,
}

/// The locked target of the operator.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedClusterSpec {
    pub replicas: i32,
    pub version: String,
    pub storage: StorageSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// Identity of the policy in use.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// The name the policy reports for itself.
    pub name: String,
    /// The version the policy reports for itself.
    #[serde(default)]
    pub version: String,
    /// `sha256:<hex>` of the component bytes.
    pub digest: String,
    /// Where the component came from: `embedded`, `EtcdStatusPolicy
    /// <name>`, or the deprecated `ConfigMap <namespace>/<name>`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberSummary {
    /// The EtcdMember (and Pod) name.
    pub name: String,
    /// The last defragmentation the operator ran on this member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_defrag: Option<LastDefrag>,
    /// etcd member ID in hex; unset until etcd reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub role: MemberRole,
    /// The etcd version the member reported in this observation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default)]
    pub leader: bool,
    #[serde(default)]
    pub healthy: bool,
}

/// One defragmentation, as the operator ran it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastDefrag {
    /// When it finished.
    pub time: Time,
    /// dbSize before, less dbSize after (0 if it grew meanwhile).
    pub reclaimed_bytes: i64,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum MemberRole {
    Voter,
    Learner,
}

impl EtcdClusterStatus {
    /// The condition of the given type, if the status has one.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The release tests/etcd/<minor>/go.mod pins for that minor.
    fn pinned(minor: &str) -> Option<String> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let go_mod =
            std::fs::read_to_string(root.join(format!("tests/etcd/{minor}/go.mod"))).ok()?;
        go_mod.lines().find_map(|l| {
            let rest = l.trim().strip_prefix("go.etcd.io/etcd/server/v3 v")?;
            Some(rest.split_whitespace().next()?.to_owned())
        })
    }

    #[test]
    fn the_default_is_the_3_6_release_the_tests_build_and_every_supported_minor_is_built() {
        assert_eq!(pinned("3.6").as_deref(), Some(DEFAULT_ETCD_VERSION));
        for minor in SUPPORTED_ETCD_MINORS {
            let release = pinned(minor).unwrap_or_else(|| panic!("no tests/etcd/{minor} module"));
            assert!(
                release.starts_with(&format!("{minor}.")),
                "{minor}: {release}"
            );
        }
    }

    #[test]
    fn the_version_rule_names_exactly_the_supported_minors() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_string(&EtcdCluster::crd()).unwrap();
        let alternatives = SUPPORTED_ETCD_MINORS
            .iter()
            .map(|m| m.strip_prefix("3.").expect("all 3.x"))
            .collect::<Vec<_>>()
            .join("|");
        assert!(
            crd.contains(&format!("^3[.]({alternatives})[.](0|[1-9][0-9]*)$")),
            "the spec.version rule and SUPPORTED_ETCD_MINORS differ"
        );
    }
}

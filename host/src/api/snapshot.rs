//! `EtcdSnapshot`: one snapshot of an EtcdCluster, taken once, to an
//! S3-compatible object store or a PersistentVolumeClaim.
//!
//! The spec is field-compatible with the cozystack etcd-operator's
//! `EtcdSnapshot` (`clusterRef`, `destination.s3{endpoint, bucket, key,
//! credentialsSecretRef, region, forcePathStyle}`, `destination.pvc`), so
//! its manifests apply with only the apiVersion changed. The status carries
//! the anchor's `phase` and `artifact{uri, sizeBytes, checksum}` and its
//! `Ready` condition, plus what a restore needs to trust the object: the
//! revision and etcd version it was taken at, the member it came from, and
//! how it was verified (`spec.verify`: read back, or also restored).

use k8s_openapi::api::core::v1::LocalObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The keys of the credentials Secret (the anchor's, and the AWS CLI's
/// environment names).
pub const ACCESS_KEY_ID_KEY: &str = "AWS_ACCESS_KEY_ID";
pub const SECRET_ACCESS_KEY_KEY: &str = "AWS_SECRET_ACCESS_KEY";

/// A one-shot snapshot of an EtcdCluster.
// Each printcolumn repeats `type_`; clippy reads that as a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "etcd.steward.dev",
    version = "v1alpha1",
    kind = "EtcdSnapshot",
    namespaced,
    shortname = "esnap",
    status = "EtcdSnapshotStatus",
    derive = "PartialEq",
    doc = "A one-shot snapshot of an EtcdCluster, streamed from the leader of a verified quorum to an S3-compatible store or to a file on a PersistentVolumeClaim, and read back before it is called Complete.",
    printcolumn(
        name = "CLUSTER",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(name = "PHASE", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "VERIFIED",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Verified\")].status"
    ),
    printcolumn(
        name = "SIZE",
        type_ = "integer",
        json_path = ".status.artifact.sizeBytes"
    ),
    printcolumn(name = "REVISION", type_ = "integer", json_path = ".status.revision"),
    printcolumn(
        name = "URI",
        type_ = "string",
        json_path = ".status.artifact.uri",
        priority = 1
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("self == oldSelf").message(
        "an EtcdSnapshot's spec is immutable: create a new EtcdSnapshot to take another snapshot"
    ),
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdSnapshotSpec {
    /// The EtcdCluster (same namespace) to snapshot.
    pub cluster_ref: LocalObjectReference,
    /// Where the snapshot is stored.
    pub destination: SnapshotLocation,
    /// How the snapshot is verified before it is called Complete.
    /// `ReadBack` (the default): the stored object is read back whole and
    /// its size, sha256 and etcd's trailing sha256 checked. `Restore`: also
    /// restored with `etcdutl snapshot restore` into a scratch directory
    /// and served by etcd there; the restored member's revision, and its
    /// keyspace hash at the snapshot's revision, must match the source's.
    #[serde(default)]
    pub verify: VerifyMode,
}

/// How a snapshot is verified (`spec.verify`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum VerifyMode {
    #[default]
    ReadBack,
    Restore,
}

/// Where a snapshot is stored, or read from. Exactly one of `s3` or `pvc`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(
    validation = Rule::new("has(self.s3) != has(self.pvc)")
        .message("exactly one of destination.s3 or destination.pvc must be set"),
)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotLocation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Location>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcLocation>,
}

/// An S3-compatible object store.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Location {
    /// The endpoint URL, `https://...` (or `http://...` for a store inside
    /// the cluster network).
    #[schemars(length(min = 1))]
    #[x_kube(
        validation = Rule::new("self.startsWith('https://') || self.startsWith('http://')")
            .message("destination.s3.endpoint must be an http:// or https:// URL"),
    )]
    pub endpoint: String,
    #[schemars(length(min = 3, max = 63))]
    pub bucket: String,
    /// A key prefix inside the bucket: the object is `<key>/<snapshot name>.db`
    /// (`<snapshot name>.db` without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A Secret in the snapshot's namespace with `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY`.
    pub credentials_secret_ref: LocalObjectReference,
    /// The signing region; `us-east-1` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Path-style addressing (`endpoint/bucket/key`), as most self-hosted
    /// stores need. Virtual-hosted style (`bucket.endpoint/key`) otherwise.
    #[serde(default)]
    pub force_path_style: bool,
    /// PEM certificates trusted for the endpoint's TLS, in addition to the
    /// system's roots: for a store whose certificate a private CA signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
}

/// A PersistentVolumeClaim in the snapshot's (or cluster's) namespace. As
/// a destination, `subPath` is a directory in the volume and the file is
/// `<subPath>/<snapshot name>.db`; as a restore source it is the file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(
    validation = Rule::new("!has(self.subPath) || (!self.subPath.startsWith('/') && !self.subPath.matches('(^|/)[.][.](/|$)'))")
        .message("pvc.subPath must be a relative path inside the volume, without '..'"),
)]
#[serde(rename_all = "camelCase")]
pub struct PvcLocation {
    #[schemars(length(min = 1, max = 253))]
    pub claim_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub sub_path: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SnapshotPhase {
    /// Waiting for the next attempt after a failed one (the cluster, its
    /// quorum, the credentials or the claim missing, say). The retries
    /// last about 75 s with the defaults; then the phase is Failed.
    Pending,
    /// Streaming to the store (the status is written before it starts).
    Started,
    /// Uploaded and read back; `Verified=True`.
    Complete,
    /// Given up; the Ready condition says why.
    Failed,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EtcdSnapshotStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SnapshotPhase>,
    /// The stored object, once it is uploaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<SnapshotArtifact>,
    /// The member's etcd revision just before the snapshot stream opened:
    /// the snapshot holds at least this revision, and exactly this one
    /// unless a write raced the stream's start (`etcdutl snapshot status`
    /// of the object gives the exact one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The source member's keyspace hash (etcd's HashKV) at `revision`,
    /// taken right after the stream: what `verify: Restore` compares the
    /// restored copy's with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyspace_hash: Option<KeyspaceHash>,
    /// The etcd server version of the member it was taken from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version: Option<String>,
    /// The member (EtcdMember name) it was taken from: the leader of a
    /// quorum the operator verified just before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// When the next attempt may start, while the phase is Pending after a
    /// failed one (the backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_time: Option<Time>,
    /// Attempts started so far; a failed attempt is retried with backoff
    /// until `--snapshot-attempts`, then the phase is Failed.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (the anchor's: True once Complete), Verified, and kstatus's
    /// Reconciling and Stalled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

impl EtcdSnapshotStatus {
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// etcd's HashKV of a member at a revision.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyspaceHash {
    pub revision: i64,
    pub hash: u32,
    /// The member's compact revision then: hashes compare only between
    /// copies compacted alike.
    pub compact_revision: i64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotArtifact {
    /// `s3://<bucket>/<key>`, or `pvc://<claim>/<path in the volume>`.
    pub uri: String,
    pub size_bytes: i64,
    /// `sha256:<hex>` of the object as stored (the snapshot stream,
    /// including etcd's own trailing sha256).
    pub checksum: String,
}

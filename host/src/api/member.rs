//! `EtcdMember`: one etcd member, created only by the operator and owned by
//! its `EtcdCluster`. It owns the member's Pod and PVC.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::cluster::StorageSpec;

/// Desired state of one etcd member. Written by the cluster controller.
// Each printcolumn repeats `type_`; clippy reads that as a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "etcd.steward.dev",
    version = "v1alpha1",
    kind = "EtcdMember",
    namespaced,
    shortname = "em",
    status = "EtcdMemberStatus",
    derive = "PartialEq",
    doc = "One member of an EtcdCluster. Created and deleted only by etcd-steward; do not edit.",
    printcolumn(name = "CLUSTER", type_ = "string", json_path = ".spec.cluster"),
    printcolumn(name = "VERSION", type_ = "string", json_path = ".spec.version"),
    printcolumn(
        name = "READY",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "ID", type_ = "string", json_path = ".status.memberID"),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("self.cluster == oldSelf.cluster").message("spec.cluster is immutable"),
    validation = Rule::new("self.bootstrap == oldSelf.bootstrap").message("spec.bootstrap is immutable"),
    validation = Rule::new("has(self.restore) == has(oldSelf.restore) && (!has(self.restore) || self.restore == oldSelf.restore)").message("spec.restore is immutable"),
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdMemberSpec {
    /// Name of the owning EtcdCluster.
    #[schemars(length(min = 1))]
    pub cluster: String,
    /// etcd version of this member's Pod.
    #[schemars(regex(pattern = r"^\d+\.\d+\.\d+$"))]
    pub version: String,
    /// The cluster's storage at the time this member was created.
    #[serde(default)]
    pub storage: StorageSpec,
    /// `--initial-cluster`: for a joining member, taken from etcd's own
    /// member list (peer URLs) right after MemberAddAsLearner.
    pub initial_cluster: String,
    /// `--initial-cluster-token`.
    pub cluster_token: String,
    /// The seed: the one member started with `--initial-cluster-state=new`.
    #[serde(default)]
    pub bootstrap: bool,
    /// Paused (cluster at 0 replicas): no Pod, the PVC is kept.
    #[serde(default)]
    pub dormant: bool,
    /// The seed of a restored cluster: the snapshot its data starts from,
    /// resolved and checked by the cluster controller before the member
    /// was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<MemberRestore>,
    /// Recovery from permanent quorum loss: the member's next Pod starts
    /// etcd once with `--force-new-cluster`, making it the only member of
    /// its cluster on its own data. Set by the cluster controller only
    /// (docs/backup.md, "Quorum loss"), and cleared by it once etcd lists
    /// this member alone, so no later Pod starts with the flag.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force_new_cluster: bool,
}

/// A snapshot object a seed member is restored from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberRestore {
    /// The store, with `key` the object's whole key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<super::S3Location>,
    /// Or a claim, with `subPath` the file's path in the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<super::PvcLocation>,
    /// The object's sha256, hex.
    pub sha256: String,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EtcdMemberStatus {
    /// etcd member ID in hex, once etcd reports it.
    #[serde(default, rename = "memberID", skip_serializing_if = "Option::is_none")]
    pub member_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// UID of the Pod last seen for this member.
    #[serde(default, rename = "podUID", skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// etcd counts this member towards quorum (not a learner).
    #[serde(default)]
    pub is_voter: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_name: Option<String>,
    /// UID of the PVC this member's data lives on, recorded the first time
    /// the claim is seen. A claim gone or replaced (another UID) means the
    /// data is gone for good: the member's Pod is not started on an empty
    /// volume under its old etcd identity.
    #[serde(default, rename = "pvcUID", skip_serializing_if = "Option::is_none")]
    pub pvc_uid: Option<String>,
    /// Pods of this member that terminated (each is then replaced on the
    /// same volume). Pods run with `restartPolicy: Never`, so the kubelet's
    /// restart count stays 0.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub pod_restarts: u32,
    /// Pod failures (phase Failed, OOM kills not counted) since the member
    /// was last Ready, each Pod counted once. Each recreation waits longer (1 s doubling to 60 s);
    /// at the operator's `--crash-loop-threshold` the cluster replaces the
    /// member, once the others hold quorum.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub consecutive_failures: u32,
    /// The spec.version the counted failures happened on. A rollout (or
    /// its rollback) that gives the member another version starts the
    /// count afresh: failures of one version say nothing of the next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures_version: Option<String>,
    /// UID of the last terminated Pod counted in podRestarts (and
    /// consecutiveFailures): a Pod is counted once however often it is seen.
    #[serde(
        default,
        rename = "lastTerminatedPodUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_terminated_pod_uid: Option<String>,
    /// Why the last step on the member's Pod or PVC failed (cleared when
    /// one succeeds). The status is written before the step, so this
    /// shows on the reconcile after the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action_error: Option<String>,
    /// The version etcd itself reports for this member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Ready and VersionDrifted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

impl EtcdMemberStatus {
    /// consecutiveFailures, if they happened on `version`; else 0.
    pub fn failures_on(&self, version: &str) -> u32 {
        match &self.failures_version {
            Some(v) if v != version => 0,
            _ => self.consecutive_failures,
        }
    }

    /// The condition of the given type, if the status has one.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

impl EtcdMember {
    /// Whether the member's Pod should carry the voter role label: the seed
    /// is a voter from the start; a joining member once etcd promotes it.
    pub fn is_voter(&self) -> bool {
        self.spec.bootstrap || self.status.as_ref().is_some_and(|s| s.is_voter)
    }
}

//! `EtcdStatusPolicy`: a status policy a platform team ships to every
//! namespace. Cluster-scoped; an EtcdCluster selects one by name in
//! `spec.statusPolicy`. Its component is fetched from a ConfigMap or an OCI
//! registry, and runs only if its sha256 is the one `spec.digest` pins.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The ConfigMap key a policy component is read from when none is named.
pub const DEFAULT_POLICY_KEY: &str = "policy.wasm";

/// A status policy component, pinned by digest, with the limits it runs under.
// Each printcolumn repeats `type_`; clippy reads that as a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "etcd.steward.dev",
    version = "v1alpha1",
    kind = "EtcdStatusPolicy",
    shortname = "esp",
    status = "EtcdStatusPolicyStatus",
    derive = "PartialEq",
    doc = "A status policy (a WebAssembly component of the steward:status world) that EtcdClusters in any namespace select by name. It runs only if its sha256 digest is the one spec.digest pins.",
    printcolumn(
        name = "READY",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "REASON",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "VERSION",
        type_ = "string",
        json_path = ".status.policy.version"
    ),
    printcolumn(
        name = "CLUSTERS",
        type_ = "integer",
        json_path = ".status.clusters",
        description = "EtcdClusters that select this policy"
    ),
    printcolumn(
        name = "FAILING",
        type_ = "integer",
        json_path = ".status.failingEvaluations",
        description = "Clusters whose last evaluation by the running version failed"
    ),
    printcolumn(
        name = "POLICY",
        type_ = "string",
        json_path = ".status.policy.name",
        priority = 1
    ),
    printcolumn(
        name = "DIGEST",
        type_ = "string",
        json_path = ".spec.digest",
        priority = 1
    ),
    printcolumn(
        name = "DRIFTED",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"SourceDrifted\")].status",
        description = "Whether the source holds another component than the pinned one that runs",
        priority = 1
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdStatusPolicySpec {
    /// `sha256:<64 hex digits>` of the component's bytes, as `etcd-steward
    /// policy inspect` prints it. A component with any other digest is
    /// never run, wherever it came from.
    #[schemars(regex(pattern = r"^sha256:[0-9a-f]{64}$"))]
    pub digest: String,

    /// Where the component is fetched from: exactly one of configMap and oci.
    pub source: PolicySource,

    /// What one evaluation may consume. Each unset field takes the
    /// operator's default; none may exceed the operator's maximum
    /// (`etcd-steward run --policy-max-*`).
    #[serde(default, skip_serializing_if = "PolicyLimits::is_empty")]
    pub limits: PolicyLimits,
}

/// Where a policy component comes from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("has(self.configMap) != has(self.oci)")
        .message("spec.source needs exactly one of configMap and oci")
)]
#[serde(rename_all = "camelCase")]
pub struct PolicySource {
    /// A ConfigMap in the operator's namespace (`--policy-namespace`),
    /// for components that fit in one (a ConfigMap holds at most 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapPolicySource>,
    /// An OCI artifact in a registry, as Kubewarden ships its policies: the
    /// manifest's layer of media type `application/wasm` is the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciPolicySource>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapPolicySource {
    /// The ConfigMap's name, in the operator's namespace.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The binaryData key holding the component; default `policy.wasm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(
    validation = Rule::new("!(has(self.insecure) && self.insecure && has(self.pullSecret))")
        .message("spec.source.oci: a pullSecret's credentials would travel over plain HTTP with insecure: true; use a registry with TLS"),
    validation = Rule::new("!(has(self.insecure) && self.insecure && has(self.caConfigMap))")
        .message("spec.source.oci: caConfigMap verifies a TLS registry, but insecure: true speaks plain HTTP; drop one of them")
)]
#[serde(rename_all = "camelCase")]
pub struct OciPolicySource {
    /// `registry/repository:tag` or `registry/repository@sha256:...` (the
    /// manifest's digest). The component's own digest is pinned by
    /// `spec.digest` either way.
    #[schemars(length(min = 1))]
    pub reference: String,
    /// Speak plain HTTP to the registry (a registry inside the cluster
    /// without TLS), as Flux's OCIRepository `insecure` does. The digest pin
    /// still guards the content; a pullSecret is refused with it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
    /// A Secret of type kubernetes.io/dockerconfigjson in the operator's
    /// namespace, holding the registry's credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<String>,
    /// A ConfigMap in the operator's namespace whose `ca.crt` key holds the
    /// PEM certificates of a private CA the registry's certificate chains
    /// to (as trust-manager and `kube-root-ca.crt` lay them out). They are
    /// trusted besides the system's roots, for this policy's pulls only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_config_map: Option<String>,
}

/// The key of `spec.source.oci.caConfigMap` that holds the CA bundle.
pub const CA_BUNDLE_KEY: &str = "ca.crt";

/// Limits of one evaluation (instantiation included). Unset fields take the
/// operator's defaults.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyLimits {
    /// Wall time of one call into the policy, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub deadline_milliseconds: Option<i32>,
    /// Linear memory of one evaluation, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 65536))]
    pub memory_bytes: Option<i64>,
    /// Size of the component itself, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 8))]
    pub component_bytes: Option<i64>,
    /// Core WebAssembly instances one evaluation may create (a Rust policy
    /// needs a handful; a Python one built with componentize-py dozens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub instances: Option<i32>,
}

impl PolicyLimits {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What the operator made of the policy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EtcdStatusPolicyStatus {
    /// The `metadata.generation` this status is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `sha256:<hex>` of the component now running for this policy; unset
    /// while none is (it failed to load, or has not loaded yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,

    /// What the running component says of itself (its `describe()`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<DescribedPolicy>,

    /// The limits in force: the spec's, the operator's defaults for the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<EffectiveLimits>,

    /// EtcdClusters that select this policy.
    #[serde(default)]
    pub clusters: i32,

    /// Clusters that select this policy whose last evaluation by the
    /// running version failed (a trap, the deadline, the memory cap, an
    /// invalid verdict, a verdict claiming what etcd did not confirm, or an
    /// exception the SDK caught): they show the host's fallback verdict
    /// (PolicyFailed), or the SDK's (PolicyError).
    #[serde(default)]
    pub failing_evaluations: i32,

    /// Which clusters fail, and how: at most 10, by namespace and name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing_clusters: Vec<FailingCluster>,

    /// Ready (the pinned component is loaded and running) and Stalled (it
    /// cannot be, and why), in kstatus' sense; SourceDrifted (the source
    /// now holds another component than the pinned one that runs) and
    /// Degraded (some cluster's last evaluation failed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// A cluster whose last evaluation by the running version failed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailingCluster {
    pub namespace: String,
    pub name: String,
    /// How it failed: `Trap`, `Deadline`, `Memory`, `InvalidVerdict`,
    /// `Instantiate`; the check that rejected its verdict,
    /// `UnconfirmedVerification` or `UnconfirmedAvailability`; or
    /// `PolicyError`, an exception its SDK caught.
    pub reason: String,
    /// The start of the failure's message, as the cluster's status has it.
    #[serde(default)]
    pub message: String,
}

/// A component's answer to `describe()`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DescribedPolicy {
    pub name: String,
    #[serde(default)]
    pub version: String,
    /// The condition types it writes.
    #[serde(default)]
    pub condition_types: Vec<String>,
    /// The JSON Schema of its settings, as the text it returned.
    #[serde(default)]
    pub settings_schema: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveLimits {
    pub deadline_milliseconds: i64,
    pub memory_bytes: i64,
    pub component_bytes: i64,
    pub instances: i64,
}

impl EtcdStatusPolicyStatus {
    /// The condition of the given type, if the status has one.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

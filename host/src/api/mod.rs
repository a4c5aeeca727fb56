//! The Kubernetes API of etcd-steward: group `etcd.steward.dev`, version
//! `v1alpha1`, kinds `EtcdCluster`, `EtcdMember`, `EtcdStatusPolicy`,
//! `EtcdSnapshot` and `EtcdBackupSchedule`.

mod cluster;
mod member;
mod schedule;
mod schema;
mod snapshot;
mod status_patch;
mod status_policy;

pub use cluster::*;
pub use member::{EtcdMember, EtcdMemberSpec, EtcdMemberStatus, MemberRestore};
pub use schedule::*;
pub use snapshot::*;
pub use status_patch::{WholeStatus, write_whole_status};
pub use status_policy::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

pub const GROUP: &str = "etcd.steward.dev";
pub const VERSION: &str = "v1alpha1";

/// Where the generated CRDs are committed, relative to the repository root.
pub const CRDS_PATH: &str = "crds/etcd-steward.yaml";

/// The CRDs of every kind this operator serves.
pub fn crds() -> Vec<CustomResourceDefinition> {
    [
        EtcdCluster::crd(),
        EtcdMember::crd(),
        EtcdStatusPolicy::crd(),
        EtcdSnapshot::crd(),
        EtcdBackupSchedule::crd(),
    ]
    .into_iter()
    .map(without_null_enum_values)
    .collect()
}

/// schemars writes an `Option<Enum>` as `enum: [.., null]` plus
/// `nullable: true`; `nullable` alone already admits null, and this keeps
/// the schema in the form controller-gen emits and every tool expects.
fn without_null_enum_values(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::Array(values)) = map.get_mut("enum") {
                    values.retain(|e| !e.is_null());
                }
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(&crd).expect("a CRD always serializes to JSON");
    strip(&mut value);
    serde_json::from_value(value).expect("removing enum entries keeps a valid CRD")
}

/// The CRDs as one multi-document YAML text, the form committed in
/// [`CRDS_PATH`]. Keys are sorted, so the text depends on the types only,
/// not on serde_json features or build flags.
pub fn crds_yaml() -> String {
    let docs: Vec<serde_json::Value> = crds()
        .iter()
        .map(|crd| serde_json::to_value(crd).expect("a CRD always serializes to JSON"))
        .collect();
    let mut out =
        String::from("# Generated from host/src/api by `etcd-steward crd`. Do not edit by hand.\n");
    for doc in &docs {
        out.push_str("---\n");
        out.push_str(
            &serde_saphyr::to_string(&Sorted(doc)).expect("JSON values always serialize to YAML"),
        );
    }
    out
}

/// A JSON value serialized with object keys in sorted order.
struct Sorted<'a>(&'a serde_json::Value);

impl Serialize for Sorted<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            serde_json::Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                let mut out = serializer.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    out.serialize_entry(k, &Sorted(v))?;
                }
                out.end()
            }
            serde_json::Value::Array(items) => {
                let mut out = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    out.serialize_element(&Sorted(item))?;
                }
                out.end()
            }
            scalar => scalar.serialize(serializer),
        }
    }
}

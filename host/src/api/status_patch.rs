//! Writing a whole status with a JSON merge patch.
//!
//! The operator owns every field of its statuses, and lists (members,
//! conditions) must be replaced, never merged, so the status is written as
//! a merge patch of all of it. A merge patch only deletes a key it sets to
//! null, though, while serde leaves out empty fields (`lastActionError`
//! once an action succeeds, `brokenMembers` once none is broken): without
//! the nulls those would keep their last value forever.

use std::sync::LazyLock;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};

use super::{
    EtcdBackupScheduleStatus, EtcdClusterStatus, EtcdMemberStatus, EtcdSnapshotStatus,
    EtcdStatusPolicyStatus,
};

/// A status type the operator writes whole.
pub trait WholeStatus: Serialize + JsonSchema {
    /// Every top-level field name of the type, from its schema.
    fn fields() -> &'static [String];

    /// `{"status": …}` naming every field: a merge patch that leaves the
    /// stored status equal to `self`.
    fn merge_patch(&self) -> Value {
        let mut status = match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        for field in Self::fields() {
            status.entry(field.clone()).or_insert(Value::Null);
        }
        serde_json::json!({ "status": status })
    }
}

/// Writes `status` as the whole status of `name`: the one way the operator
/// writes a status.
pub async fn write_whole_status<K, S>(api: &kube::Api<K>, name: &str, status: &S) -> kube::Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: WholeStatus,
{
    let patch = kube::api::Patch::Merge(status.merge_patch());
    api.patch_status(name, &kube::api::PatchParams::default(), &patch)
        .await
}

fn field_names<T: JsonSchema>() -> Vec<String> {
    schemars::schema_for!(T)
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

impl WholeStatus for EtcdClusterStatus {
    fn fields() -> &'static [String] {
        static FIELDS: LazyLock<Vec<String>> = LazyLock::new(field_names::<EtcdClusterStatus>);
        &FIELDS
    }
}

impl WholeStatus for EtcdMemberStatus {
    fn fields() -> &'static [String] {
        static FIELDS: LazyLock<Vec<String>> = LazyLock::new(field_names::<EtcdMemberStatus>);
        &FIELDS
    }
}

impl WholeStatus for EtcdBackupScheduleStatus {
    fn fields() -> &'static [String] {
        static FIELDS: LazyLock<Vec<String>> =
            LazyLock::new(field_names::<EtcdBackupScheduleStatus>);
        &FIELDS
    }
}

impl WholeStatus for EtcdSnapshotStatus {
    fn fields() -> &'static [String] {
        static FIELDS: LazyLock<Vec<String>> = LazyLock::new(field_names::<EtcdSnapshotStatus>);
        &FIELDS
    }
}

impl WholeStatus for EtcdStatusPolicyStatus {
    fn fields() -> &'static [String] {
        static FIELDS: LazyLock<Vec<String>> = LazyLock::new(field_names::<EtcdStatusPolicyStatus>);
        &FIELDS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_left_out_when_empty_are_cleared_by_the_patch() {
        let patch = EtcdClusterStatus::default().merge_patch();
        let status = patch["status"].as_object().unwrap();
        for field in [
            "lastActionError",
            "brokenMembers",
            "progressDeadline",
            "clusterID",
        ] {
            assert_eq!(status.get(field), Some(&Value::Null), "{field}");
        }
        assert_eq!(status["readyMembers"], 0);

        let patch = EtcdMemberStatus::default().merge_patch();
        assert_eq!(patch["status"]["memberID"], Value::Null);
        assert_eq!(patch["status"]["consecutiveFailures"], 0);
    }

    #[test]
    fn set_fields_are_written_as_they_are() {
        let status = EtcdClusterStatus {
            broken_members: vec!["main-x".into()],
            last_action_error: Some("boom".into()),
            ..Default::default()
        };
        let patch = status.merge_patch();
        assert_eq!(patch["status"]["brokenMembers"][0], "main-x");
        assert_eq!(patch["status"]["lastActionError"], "boom");
    }
}

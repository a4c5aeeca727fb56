//! Growing a member's volume to `spec.storage.size`.
//!
//! Pure: compares the member's PVC (its request and the capacity its
//! status reports) with the size the cluster asks for. The act stage
//! patches the request when it is smaller; the StorageClass must allow
//! expansion, or the API server's admission refuses the patch and the
//! member's status carries that refusal. The volume's resizer (a CSI
//! external-resizer; the testbed's provisioner) then grows the volume and
//! sets `status.capacity`, which is what the status reports as done.
//! Shrinking is refused by the CRD's rules before it gets here.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_quantity::ParsedQuantity;
use steward_policy_sdk::{Condition, ConditionStatus};

/// Where one member's volume stands against the size asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeState {
    pub claim: String,
    /// `spec.storage.size` of the cluster.
    pub wanted: String,
    /// The claim's `spec.resources.requests.storage`.
    pub requested: Option<String>,
    /// The claim's `status.capacity.storage` (None until bound).
    pub capacity: Option<String>,
    /// The request is below `wanted`: the act stage patches it.
    pub needs_request: bool,
    /// The capacity has reached `wanted`.
    pub resized: bool,
}

fn storage(map: Option<&std::collections::BTreeMap<String, Quantity>>) -> Option<&Quantity> {
    map?.get("storage")
}

fn parsed(q: Option<&Quantity>) -> Option<ParsedQuantity> {
    ParsedQuantity::try_from(q?).ok()
}

/// The state of `claim` against `wanted`; None when `wanted` does not parse
/// (the CRD's schema keeps it a quantity).
pub fn volume_state(claim: &PersistentVolumeClaim, wanted: &Quantity) -> Option<VolumeState> {
    let want = ParsedQuantity::try_from(wanted).ok()?;
    let requested = storage(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref()),
    );
    let capacity = storage(claim.status.as_ref().and_then(|s| s.capacity.as_ref()));
    // The API server refuses a larger request on a claim not bound yet.
    let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    Some(VolumeState {
        claim: claim.metadata.name.clone().unwrap_or_default(),
        wanted: wanted.0.clone(),
        requested: requested.map(|q| q.0.clone()),
        capacity: capacity.map(|q| q.0.clone()),
        needs_request: bound && parsed(requested).is_some_and(|r| r < want),
        resized: parsed(capacity).is_some_and(|c| c >= want),
    })
}

/// Why `member`'s data is gone for good, if it is: the PVC its status
/// recorded (`pvcUID`) is deleted, being deleted, or replaced by another
/// claim of the same name. A member that merely does not answer is never
/// lost by this; nor is one whose claim was never recorded (just created,
/// or Memory, which has none).
pub fn data_lost(
    member: &crate::api::EtcdMember,
    pvc: Option<&PersistentVolumeClaim>,
) -> Option<String> {
    if matches!(
        member.spec.storage.medium,
        crate::api::StorageMedium::Memory
    ) {
        return None;
    }
    let status = member.status.as_ref()?;
    let name = crate::resources::pvc_name(&member.metadata.name.clone().unwrap_or_default());
    let Some(recorded) = status.pvc_uid.as_deref() else {
        // From before claims were recorded: a member etcd knew (it has an
        // ID, so it ran on a claim) whose claim is gone lost its data too.
        return (status.member_id.is_some() && pvc.is_none())
            .then(|| format!("PVC {name} was deleted (the member had joined etcd)"));
    };
    match pvc {
        None => Some(format!("PVC {name} was deleted")),
        Some(c) if c.metadata.uid.as_deref() != Some(recorded) => Some(format!(
            "PVC {name} was replaced: its data was on the claim with UID {recorded}"
        )),
        Some(c) if c.metadata.deletion_timestamp.is_some() => {
            Some(format!("PVC {name} is being deleted"))
        }
        Some(_) => None,
    }
}

/// How the act stage's failed resize begins, so the status can tell it
/// from other failed steps.
pub const RESIZE_ACTION: &str = "growing PVC";

/// The member condition that reports the volume's size.
pub const STORAGE_RESIZED: &str = "StorageResized";

/// StorageResized: True once the capacity reached the size asked for;
/// False while the request or the resizer is behind, or with the API
/// server's refusal (`refused`, the last failed patch) when the
/// StorageClass does not allow expansion.
pub fn condition(v: &VolumeState, refused: Option<&str>) -> Condition {
    let have = v.capacity.as_deref().unwrap_or("no capacity yet");
    if v.resized {
        return Condition::new(
            STORAGE_RESIZED,
            ConditionStatus::True,
            "AtRequestedSize",
            format!("{} has {have}; spec.storage.size is {}", v.claim, v.wanted),
        );
    }
    match refused {
        Some(why) if v.needs_request => Condition::new(
            STORAGE_RESIZED,
            ConditionStatus::False,
            "ExpansionRefused",
            format!("growing {} to {} was refused: {why}", v.claim, v.wanted),
        ),
        _ => Condition::new(
            STORAGE_RESIZED,
            ConditionStatus::False,
            "Resizing",
            format!(
                "{} has {have} of {} (requested {}); waiting for the volume's resizer",
                v.claim,
                v.wanted,
                v.requested.as_deref().unwrap_or("nothing")
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(requested: &str, capacity: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data-main-a"},
            "spec": {"resources": {"requests": {"storage": requested}}},
            "status": capacity.map(|c| serde_json::json!({"phase": "Bound", "capacity": {"storage": c}})),
        }))
        .unwrap()
    }

    #[test]
    fn data_is_lost_only_with_the_recorded_claim_gone_or_replaced() {
        let mut member: crate::api::EtcdMember = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1", "kind": "EtcdMember",
            "metadata": {"name": "main-a"},
            "spec": {"cluster": "main", "version": "3.6.17", "initialCluster": "", "clusterToken": ""},
        }))
        .unwrap();
        let pvc = |uid: &str, deleting: bool| -> PersistentVolumeClaim {
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": "data-main-a", "uid": uid,
                    "deletionTimestamp": deleting.then_some("2026-12-07T00:00:00Z"),
                },
            }))
            .unwrap()
        };
        assert_eq!(data_lost(&member, None), None, "no claim recorded yet");
        member.status = Some(crate::api::EtcdMemberStatus {
            member_id: Some("8e9e05c52164694d".into()),
            ..Default::default()
        });
        assert!(
            data_lost(&member, None).is_some(),
            "a member etcd knew, whose claim was never recorded and is gone"
        );
        assert_eq!(data_lost(&member, Some(&pvc("u9", false))), None);
        member.status = Some(crate::api::EtcdMemberStatus {
            pvc_uid: Some("u1".into()),
            ..Default::default()
        });
        assert_eq!(data_lost(&member, Some(&pvc("u1", false))), None);
        assert_eq!(
            data_lost(&member, None).as_deref(),
            Some("PVC data-main-a was deleted")
        );
        assert!(
            data_lost(&member, Some(&pvc("u2", false)))
                .unwrap()
                .contains("replaced")
        );
        assert!(
            data_lost(&member, Some(&pvc("u1", true)))
                .unwrap()
                .contains("being deleted")
        );
    }

    #[test]
    fn sizes_compare_as_quantities_not_as_text() {
        let want = Quantity("2Gi".into());
        let s = volume_state(&claim("1Gi", Some("1Gi")), &want).unwrap();
        assert!(s.needs_request && !s.resized);
        let s = volume_state(&claim("2048Mi", Some("1Gi")), &want).unwrap();
        assert!(!s.needs_request && !s.resized, "requested, not yet grown");
        let s = volume_state(&claim("2Gi", Some("2048Mi")), &want).unwrap();
        assert!(!s.needs_request && s.resized);
        let s = volume_state(&claim("1Gi", None), &want).unwrap();
        assert!(!s.needs_request && !s.resized, "not bound yet: not patched");
    }

    #[test]
    fn the_condition_says_done_in_progress_or_refused() {
        let want = Quantity("2Gi".into());
        let c = |req, cap, refused| {
            let s = volume_state(&claim(req, cap), &want).unwrap();
            let c = condition(&s, refused);
            (c.status, c.reason, c.message)
        };
        assert_eq!(c("2Gi", Some("2Gi"), None).1, "AtRequestedSize");
        let (status, reason, message) = c("1Gi", Some("1Gi"), Some("forbidden: no resize"));
        assert_eq!(
            (status, reason.as_str()),
            (ConditionStatus::False, "ExpansionRefused")
        );
        assert_eq!(
            message,
            "growing data-main-a to 2Gi was refused: forbidden: no resize"
        );
        let (_, reason, message) = c("2Gi", Some("1Gi"), None);
        assert_eq!(reason, "Resizing");
        assert_eq!(
            message,
            "data-main-a has 1Gi of 2Gi (requested 2Gi); waiting for the volume's resizer"
        );
    }
}

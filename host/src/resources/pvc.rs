//! The data PVC of one member, `data-<member>`, owned by the EtcdMember.
//!
//! Owned by the member, not the Pod: a Pod deleted and recreated (terminal
//! phase, self-heal) finds its data again, and a dormant member (cluster
//! paused at 0) keeps it. It goes when the member goes, through the garbage
//! collector, so the operator needs no delete permission on PVCs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{BuildError, MemberContext, member_labels, owner_of};
use crate::api::{EtcdCluster, EtcdMember, StorageMedium};

pub fn pvc_name(member: &str) -> String {
    format!("data-{member}")
}

/// The member's PVC, or None for medium Memory (tmpfs, no claim).
pub fn member_pvc(
    cluster: &EtcdCluster,
    member: &EtcdMember,
) -> Result<Option<PersistentVolumeClaim>, BuildError> {
    let cx = MemberContext::new(cluster, member)?;
    let storage = &member.spec.storage;
    if storage.medium == StorageMedium::Memory {
        return Ok(None);
    }
    let owner = owner_of(member, "EtcdMember")?;
    let mut labels = member_labels(&cx.cluster_name, &cx.member_name, member.is_voter());
    // The role changes on promotion; a PVC label would only go stale.
    labels.remove(super::LABEL_ROLE);
    Ok(Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(pvc_name(&cx.member_name)),
            namespace: Some(cx.namespace.clone()),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            storage_class_name: storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    storage.size.clone(),
                )])),
                limits: None,
            }),
            ..Default::default()
        }),
        status: None,
    }))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::resources::{LABEL_MEMBER, LABEL_ROLE, fixtures};

    #[test]
    fn the_pvc_is_named_for_the_member_sized_from_its_spec_and_owned_by_it() {
        let cluster = fixtures::cluster(fixtures::spec());
        let mut member = fixtures::member("main-1", false);
        member.spec.storage.size = Quantity("8Gi".into());
        member.spec.storage.storage_class_name = Some("fast".into());
        let pvc = member_pvc(&cluster, &member).unwrap().unwrap();
        assert_eq!(pvc.metadata.name.as_deref(), Some("data-main-1"));
        assert_eq!(pvc.metadata.namespace.as_deref(), Some("prod"));
        let labels = pvc.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_MEMBER], "main-1");
        assert!(!labels.contains_key(LABEL_ROLE));
        let owner = &pvc.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("EtcdMember", "main-1")
        );
        let spec = pvc.spec.unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(spec.access_modes.unwrap(), ["ReadWriteOnce"]);
        assert_eq!(
            spec.resources.unwrap().requests.unwrap()["storage"],
            Quantity("8Gi".into())
        );
    }

    #[test]
    fn an_unset_storage_class_stays_unset_so_the_default_class_applies() {
        let cluster = fixtures::cluster(fixtures::spec());
        let pvc = member_pvc(&cluster, &fixtures::member("main-0", true))
            .unwrap()
            .unwrap();
        assert_eq!(pvc.spec.unwrap().storage_class_name, None);
    }

    #[test]
    fn a_memory_member_has_no_pvc() {
        let cluster = fixtures::cluster(fixtures::spec());
        let mut member = fixtures::member("main-0", true);
        member.spec.storage.medium = StorageMedium::Memory;
        assert_eq!(member_pvc(&cluster, &member).unwrap(), None);
    }
}

//! The Kubernetes objects the operator owns, built from an `EtcdCluster`
//! (and an `EtcdMember`) without any API call: Pods, PVCs, Services, the
//! PodDisruptionBudget, plus the names, labels and URLs they share.
//!
//! Ownership: Services and the PDB belong to the EtcdCluster; a member's Pod
//! and PVC belong to its EtcdMember, so the garbage collector removes them
//! with the member, and a dormant member keeps its PVC.

mod member;
mod names;
mod pdb;
mod pod;
mod pvc;
mod service;

pub use member::{cluster_token, etcd_member};
pub use names::{
    client_scheme, cluster_domain, joining_initial_cluster, listed_member_name, member_client_url,
    member_host, member_name_from_peer_url, member_peer_url, new_member_name, own_peer_url,
    peer_scheme, seed_initial_cluster,
};
pub use pdb::pod_disruption_budget;
pub use pod::{
    DATA_DIR, TLS_CA, TLS_CERT, TLS_KEY, is_ready, is_terminal, member_pod, pod_forces_new_cluster,
    pod_version,
};
pub use pvc::{member_pvc, pvc_name};
pub use service::{client_service, client_service_name, headless_service};

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use crate::api::{EtcdCluster, EtcdMember};

pub const CLIENT_PORT: i32 = 2379;
pub const PEER_PORT: i32 = 2380;
pub const METRICS_PORT: i32 = 2381;

pub const LABEL_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const LABEL_MEMBER: &str = "etcd.steward.dev/member";
/// `voter` or `learner`; the PDB counts voters only.
/// On a member Pod: the etcd version it was built for (its image tag says
/// the same); the member controller replaces a Pod whose version is not
/// its EtcdMember's.
pub const ANNOTATION_VERSION: &str = "etcd.steward.dev/version";
pub const LABEL_ROLE: &str = "etcd.steward.dev/role";
pub const ROLE_VOTER: &str = "voter";
pub const ROLE_LEARNER: &str = "learner";
pub const MANAGER: &str = "etcd-steward";
/// The field manager of everything the operator writes with server-side apply.
pub const FIELD_MANAGER: &str = MANAGER;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// Objects read from the API always have these; a hand-built one may not.
    #[error(
        "{kind} {name:?} has no {field}; only objects read from the API server can own resources"
    )]
    MissingMetadata {
        kind: &'static str,
        name: String,
        field: &'static str,
    },
    #[error("EtcdMember {member:?} belongs to cluster {actual:?}, not {expected:?}")]
    WrongCluster {
        member: String,
        expected: String,
        actual: String,
    },
}

/// Labels every object of the cluster carries; also its selector.
pub fn cluster_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.to_owned(), "etcd".to_owned()),
        (LABEL_INSTANCE.to_owned(), cluster.to_owned()),
        (LABEL_MANAGED_BY.to_owned(), MANAGER.to_owned()),
    ])
}

/// Labels of a member's Pod and PVC. The role label must be patched when
/// etcd promotes a learner; [`member_pod`] sets it from the member status.
pub fn member_labels(cluster: &str, member: &str, voter: bool) -> BTreeMap<String, String> {
    let mut labels = cluster_labels(cluster);
    labels.insert(LABEL_MEMBER.to_owned(), member.to_owned());
    labels.insert(
        LABEL_ROLE.to_owned(),
        if voter { ROLE_VOTER } else { ROLE_LEARNER }.to_owned(),
    );
    labels
}

/// The cluster's Pod selector in label-selector syntax (`status.selector`).
pub fn cluster_selector(cluster: &str) -> String {
    cluster_labels(cluster)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn namespace_of<K: Resource<DynamicType = ()>>(
    obj: &K,
    kind: &'static str,
) -> Result<String, BuildError> {
    obj.namespace().ok_or_else(|| BuildError::MissingMetadata {
        kind,
        name: obj.name_any(),
        field: "namespace",
    })
}

pub(crate) fn owner_of<K: Resource<DynamicType = ()>>(
    obj: &K,
    kind: &'static str,
) -> Result<OwnerReference, BuildError> {
    obj.controller_owner_ref(&())
        .ok_or_else(|| BuildError::MissingMetadata {
            kind,
            name: obj.name_any(),
            field: "uid",
        })
}

/// Cluster and namespace facts every member object needs, checked once.
struct MemberContext<'a> {
    cluster: &'a EtcdCluster,
    member: &'a EtcdMember,
    cluster_name: String,
    member_name: String,
    namespace: String,
}

impl<'a> MemberContext<'a> {
    fn new(cluster: &'a EtcdCluster, member: &'a EtcdMember) -> Result<Self, BuildError> {
        let cluster_name = cluster.name_any();
        if member.spec.cluster != cluster_name {
            return Err(BuildError::WrongCluster {
                member: member.name_any(),
                expected: cluster_name,
                actual: member.spec.cluster.clone(),
            });
        }
        Ok(Self {
            cluster,
            member,
            member_name: member.name_any(),
            namespace: namespace_of(member, "EtcdMember")?,
            cluster_name,
        })
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! An EtcdCluster and EtcdMember as the API server would return them.

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use crate::api::*;

    /// A Secret with these `data` keys and values.
    pub fn secret(pairs: &[(&str, &str)]) -> k8s_openapi::api::core::v1::Secret {
        k8s_openapi::api::core::v1::Secret {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.to_string(),
                            k8s_openapi::ByteString(v.as_bytes().to_vec()),
                        )
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    pub fn cluster(spec: EtcdClusterSpec) -> EtcdCluster {
        let mut c = EtcdCluster::new("main", spec);
        c.metadata = ObjectMeta {
            name: Some("main".into()),
            namespace: Some("prod".into()),
            uid: Some("uid-cluster".into()),
            generation: Some(1),
            ..Default::default()
        };
        c
    }

    pub fn spec() -> EtcdClusterSpec {
        serde_json::from_value(serde_json::json!({"version": "3.6.17"})).unwrap()
    }

    pub fn member(name: &str, bootstrap: bool) -> EtcdMember {
        let mut m = EtcdMember::new(
            name,
            EtcdMemberSpec {
                cluster: "main".into(),
                version: "3.6.17".into(),
                storage: StorageSpec::default(),
                initial_cluster: format!("{name}=http://{name}.main.prod.svc:2380"),
                cluster_token: "main-uid-cluster".into(),
                bootstrap,
                dormant: false,
                restore: None,
                force_new_cluster: false,
            },
        );
        m.metadata.namespace = Some("prod".into());
        m.metadata.uid = Some(format!("uid-{name}"));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_matches_the_labels_of_every_member() {
        assert_eq!(
            cluster_selector("main"),
            "app.kubernetes.io/instance=main,app.kubernetes.io/managed-by=etcd-steward,app.kubernetes.io/name=etcd"
        );
        let member = member_labels("main", "main-1", false);
        for (k, v) in cluster_labels("main") {
            assert_eq!(member.get(&k), Some(&v));
        }
        assert_eq!(member[LABEL_ROLE], "learner");
        assert_eq!(member[LABEL_MEMBER], "main-1");
    }

    #[test]
    fn a_member_of_another_cluster_is_refused() {
        let cluster = fixtures::cluster(fixtures::spec());
        let mut member = fixtures::member("other-0", true);
        member.spec.cluster = "other".into();
        let err = member_pod(&cluster, &member, "gcr.io/etcd-development/etcd").unwrap_err();
        assert_eq!(
            err.to_string(),
            "EtcdMember \"other-0\" belongs to cluster \"other\", not \"main\""
        );
    }

    #[test]
    fn an_object_without_uid_cannot_own_anything() {
        let mut cluster = fixtures::cluster(fixtures::spec());
        cluster.metadata.uid = None;
        let err = headless_service(&cluster).unwrap_err();
        assert_eq!(
            err.to_string(),
            "EtcdCluster \"main\" has no uid; only objects read from the API server can own resources"
        );
    }
}

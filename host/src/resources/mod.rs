//! The Kubernetes objects the operator owns, built from an `EtcdCluster`
//! (and an `EtcdMember`) without any API call: Pods, PVCs, Services, the
//! PodDisruptionBudget, plus the names, labels and URLs they share.
//!
//! Ownership: Services and the PDB belong to the EtcdCluster; a member's Pod
//! and PVC belong to its EtcdMember, so the garbage collector removes them
//! with the member, and a dormant member keeps its PVC.

mod member;
mod pdb;
mod pod;
mod pvc;
mod service;

pub use member::{cluster_token, etcd_member};
pub use pdb::pod_disruption_budget;
pub use pod::{DATA_DIR, is_ready, is_terminal, member_pod};
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
pub const LABEL_ROLE: &str = "etcd.steward.dev/role";
pub const ROLE_VOTER: &str = "voter";
pub const ROLE_LEARNER: &str = "learner";
pub const MANAGER: &str = "etcd-steward";

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

/// A member's stable DNS name through the headless Service.
pub fn member_host(member: &str, cluster: &str, namespace: &str) -> String {
    format!("{member}.{cluster}.{namespace}.svc")
}

pub fn member_client_url(member: &str, cluster: &str, namespace: &str) -> String {
    format!(
        "http://{}:{CLIENT_PORT}",
        member_host(member, cluster, namespace)
    )
}

pub fn member_peer_url(member: &str, cluster: &str, namespace: &str) -> String {
    format!(
        "http://{}:{PEER_PORT}",
        member_host(member, cluster, namespace)
    )
}

/// `--initial-cluster` for a seed: just itself.
pub fn seed_initial_cluster(member: &str, cluster: &str, namespace: &str) -> String {
    format!("{member}={}", member_peer_url(member, cluster, namespace))
}

/// `--initial-cluster` for a member joining after MemberAddAsLearner, from
/// etcd's own member list: each listed member by name and peer URL. The
/// joining member is listed already but nameless (it has not started), so
/// it is recognised by its peer URL. Any other nameless member gets the
/// first DNS label of its peer URL, which is its name for members this
/// operator created. None when the list does not contain the joining
/// member's peer URL: etcd would refuse such a flag, so the member must not
/// be created from it.
pub fn joining_initial_cluster(
    listed: &[steward_policy_sdk::EtcdMember],
    joining: &str,
    joining_peer_url: &str,
) -> Option<String> {
    if !listed
        .iter()
        .any(|m| m.peer_urls.iter().any(|u| u == joining_peer_url))
    {
        return None;
    }
    let mut entries = Vec::new();
    for member in listed {
        for url in &member.peer_urls {
            let name = if url == joining_peer_url {
                joining.to_owned()
            } else if !member.name.is_empty() {
                member.name.clone()
            } else {
                host_label(url).to_owned()
            };
            entries.push(format!("{name}={url}"));
        }
    }
    Some(entries.join(","))
}

fn host_label(url: &str) -> &str {
    let host = url.split("://").nth(1).unwrap_or(url);
    host.split(['.', ':', '/']).next().unwrap_or(host)
}

fn namespace_of<K: Resource<DynamicType = ()>>(
    obj: &K,
    kind: &'static str,
) -> Result<String, BuildError> {
    obj.namespace().ok_or_else(|| BuildError::MissingMetadata {
        kind,
        name: obj.name_any(),
        field: "namespace",
    })
}

fn owner_of<K: Resource<DynamicType = ()>>(
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
        serde_json::from_value(serde_json::json!({"version": "3.5.1"})).unwrap()
    }

    pub fn member(name: &str, bootstrap: bool) -> EtcdMember {
        let mut m = EtcdMember::new(
            name,
            EtcdMemberSpec {
                cluster: "main".into(),
                version: "3.5.1".into(),
                storage: StorageSpec::default(),
                initial_cluster: format!("{name}=http://{name}.main.prod.svc:2380"),
                cluster_token: "main-uid-cluster".into(),
                bootstrap,
                dormant: false,
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
    fn member_urls_go_through_the_headless_service() {
        assert_eq!(
            member_client_url("main-0", "main", "prod"),
            "http://main-0.main.prod.svc:2379"
        );
        assert_eq!(
            member_peer_url("main-0", "main", "prod"),
            "http://main-0.main.prod.svc:2380"
        );
        assert_eq!(
            seed_initial_cluster("main-0", "main", "prod"),
            "main-0=http://main-0.main.prod.svc:2380"
        );
    }

    #[test]
    fn a_joining_member_gets_every_listed_peer_and_its_own_name() {
        let listed = |id: u64, name: &str, url: &str| steward_policy_sdk::EtcdMember {
            id,
            name: name.into(),
            peer_urls: vec![url.into()],
            client_urls: vec![],
            is_learner: name.is_empty(),
        };
        let members = [
            listed(1, "main-0", "http://main-0.main.prod.svc:2380"),
            listed(2, "main-1", "http://main-1.main.prod.svc:2380"),
            // Added as a learner a moment ago: etcd knows no name yet.
            listed(3, "", "http://main-3.main.prod.svc:2380"),
        ];
        assert_eq!(
            joining_initial_cluster(
                &members,
                "main-3",
                &member_peer_url("main-3", "main", "prod")
            )
            .as_deref(),
            Some(
                "main-0=http://main-0.main.prod.svc:2380,main-1=http://main-1.main.prod.svc:2380,main-3=http://main-3.main.prod.svc:2380"
            )
        );
        // A nameless member that is not the one joining still gets a name.
        let mut four = members.to_vec();
        four.push(listed(4, "", "http://main-4.main.prod.svc:2380"));
        let flag = joining_initial_cluster(&four, "main-4", "http://main-4.main.prod.svc:2380");
        assert!(
            flag.as_deref()
                .unwrap()
                .contains("main-3=http://main-3.main.prod.svc:2380,main-4="),
            "{flag:?}"
        );
        // MemberAdd not visible in the list (yet): no flag to start from.
        assert_eq!(
            joining_initial_cluster(&members, "main-5", "http://main-5.main.prod.svc:2380"),
            None
        );
    }

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

//! The EtcdMember object the cluster controller creates for each member.

use kube::ResourceExt;
use kube::api::ObjectMeta;

use super::{BuildError, cluster_labels, namespace_of, owner_of};
use crate::api::{EtcdCluster, EtcdMember, EtcdMemberSpec};

/// `--initial-cluster-token`: unique per cluster incarnation, so members of
/// a deleted and re-created cluster of the same name never join each other.
pub fn cluster_token(cluster: &EtcdCluster) -> String {
    let uid = cluster.uid().unwrap_or_default();
    format!("{}-{}", cluster.name_any(), &uid[..uid.len().min(8)])
}

pub fn etcd_member(
    cluster: &EtcdCluster,
    name: &str,
    initial_cluster: &str,
    bootstrap: bool,
) -> Result<EtcdMember, BuildError> {
    let mut member = EtcdMember::new(
        name,
        EtcdMemberSpec {
            cluster: cluster.name_any(),
            version: cluster.spec.version.clone(),
            storage: cluster.spec.storage.clone(),
            initial_cluster: initial_cluster.to_owned(),
            cluster_token: cluster_token(cluster),
            bootstrap,
            dormant: false,
            restore: None,
            force_new_cluster: false,
        },
    );
    member.metadata = ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace_of(cluster, "EtcdCluster")?),
        labels: Some(cluster_labels(&cluster.name_any())),
        owner_references: Some(vec![owner_of(cluster, "EtcdCluster")?]),
        ..ObjectMeta::default()
    };
    Ok(member)
}

//! The PodDisruptionBudget `<cluster>`: voluntary evictions may never take
//! the voters below quorum.
//!
//! `minAvailable` is an integer on purpose: with an integer the disruption
//! controller counts the selected Pods directly and never needs a scale
//! subresource on the Pods' controller (the EtcdMember has none).

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use steward_policy_sdk::quorum;

use super::{BuildError, LABEL_ROLE, ROLE_VOTER, cluster_labels, namespace_of, owner_of};
use crate::api::EtcdCluster;

/// The PDB for a cluster with `voters` voting members (as etcd last listed
/// them). With no voters (paused) nothing is protected: minAvailable 0.
pub fn pod_disruption_budget(
    cluster: &EtcdCluster,
    voters: usize,
) -> Result<PodDisruptionBudget, BuildError> {
    let name = cluster.name_any();
    let labels = cluster_labels(&name);
    let mut selector = labels.clone();
    selector.insert(LABEL_ROLE.to_owned(), ROLE_VOTER.to_owned());
    let min_available = if voters == 0 { 0 } else { quorum(voters) };
    Ok(PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace_of(cluster, "EtcdCluster")?),
            labels: Some(labels),
            owner_references: Some(vec![owner_of(cluster, "EtcdCluster")?]),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(
                i32::try_from(min_available).unwrap_or(i32::MAX),
            )),
            selector: Some(LabelSelector {
                match_labels: Some(selector),
                match_expressions: None,
            }),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{fixtures, member_labels};

    fn min_available(voters: usize) -> IntOrString {
        let cluster = fixtures::cluster(fixtures::spec());
        pod_disruption_budget(&cluster, voters)
            .unwrap()
            .spec
            .unwrap()
            .min_available
            .unwrap()
    }

    #[test]
    fn min_available_is_the_quorum_of_voters() {
        assert_eq!(min_available(0), IntOrString::Int(0));
        assert_eq!(min_available(1), IntOrString::Int(1));
        assert_eq!(min_available(2), IntOrString::Int(2));
        assert_eq!(min_available(3), IntOrString::Int(2));
        assert_eq!(min_available(4), IntOrString::Int(3));
        assert_eq!(min_available(5), IntOrString::Int(3));
        assert_eq!(min_available(7), IntOrString::Int(4));
    }

    #[test]
    fn the_pdb_selects_voters_of_this_cluster_only() {
        let cluster = fixtures::cluster(fixtures::spec());
        let pdb = pod_disruption_budget(&cluster, 3).unwrap();
        assert_eq!(pdb.metadata.name.as_deref(), Some("main"));
        let selector = pdb.spec.unwrap().selector.unwrap().match_labels.unwrap();
        let matches = |labels: std::collections::BTreeMap<String, String>| {
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        };
        assert!(matches(member_labels("main", "main-0", true)));
        assert!(
            !matches(member_labels("main", "main-3", false)),
            "a learner"
        );
        assert!(
            !matches(member_labels("other", "other-0", true)),
            "another cluster"
        );
    }
}

//! The cluster's two Services.
//!
//! - `<cluster>`, headless, publishing not-ready addresses: it gives each
//!   member its DNS name, which peers need *before* the member is Ready
//!   (a joining member must resolve and be resolvable to catch up).
//! - `<cluster>-client`: a ClusterIP Service over the Ready members, for
//!   clients.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::{BuildError, CLIENT_PORT, PEER_PORT, cluster_labels, namespace_of, owner_of};
use crate::api::EtcdCluster;

pub fn client_service_name(cluster: &str) -> String {
    format!("{cluster}-client")
}

pub fn headless_service(cluster: &EtcdCluster) -> Result<Service, BuildError> {
    let name = cluster.name_any();
    service(
        cluster,
        name,
        ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![port("client", CLIENT_PORT), port("peer", PEER_PORT)]),
            ..Default::default()
        },
    )
}

pub fn client_service(cluster: &EtcdCluster) -> Result<Service, BuildError> {
    let name = client_service_name(&cluster.name_any());
    service(
        cluster,
        name,
        ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            ports: Some(vec![port("client", CLIENT_PORT)]),
            ..Default::default()
        },
    )
}

fn service(cluster: &EtcdCluster, name: String, spec: ServiceSpec) -> Result<Service, BuildError> {
    let labels = cluster_labels(&cluster.name_any());
    Ok(Service {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace_of(cluster, "EtcdCluster")?),
            labels: Some(labels.clone()),
            owner_references: Some(vec![owner_of(cluster, "EtcdCluster")?]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(labels),
            ..spec
        }),
        status: None,
    })
}

fn port(name: &str, port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.to_owned()),
        port,
        target_port: Some(IntOrString::String(name.to_owned())),
        protocol: Some("TCP".to_owned()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{cluster_labels, fixtures, member_labels};

    fn ports(svc: &Service) -> Vec<(String, i32)> {
        svc.spec
            .as_ref()
            .unwrap()
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .map(|p| (p.name.clone().unwrap(), p.port))
            .collect()
    }

    #[test]
    fn the_headless_service_names_members_even_before_they_are_ready() {
        let cluster = fixtures::cluster(fixtures::spec());
        let svc = headless_service(&cluster).unwrap();
        assert_eq!(svc.metadata.name.as_deref(), Some("main"));
        assert_eq!(svc.metadata.namespace.as_deref(), Some("prod"));
        let spec = svc.spec.as_ref().unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        assert_eq!(
            ports(&svc),
            [("client".to_owned(), 2379), ("peer".to_owned(), 2380)]
        );
        let owner = &svc.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("EtcdCluster", "uid-cluster")
        );
    }

    #[test]
    fn the_client_service_serves_only_port_2379_of_this_clusters_members() {
        let cluster = fixtures::cluster(fixtures::spec());
        let svc = client_service(&cluster).unwrap();
        assert_eq!(svc.metadata.name.as_deref(), Some("main-client"));
        let spec = svc.spec.as_ref().unwrap();
        assert_eq!(spec.cluster_ip, None);
        assert_eq!(spec.publish_not_ready_addresses, None);
        assert_eq!(ports(&svc), [("client".to_owned(), 2379)]);
        let selector = spec.selector.as_ref().unwrap();
        assert_eq!(selector, &cluster_labels("main"));
        // Every member, voter or learner, matches.
        for voter in [true, false] {
            let labels = member_labels("main", "main-0", voter);
            assert!(selector.iter().all(|(k, v)| labels.get(k) == Some(v)));
        }
        assert!(
            selector
                .iter()
                .any(|(k, v)| member_labels("other", "other-0", true).get(k) != Some(v))
        );
    }
}

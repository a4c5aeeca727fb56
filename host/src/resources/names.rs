//! Names and URLs of members: how an EtcdMember, its DNS name, its peer
//! URL and its entry in etcd's member list find each other. The cluster and
//! the member controller both go through here, so the mapping exists once.

use steward_policy_sdk::EtcdMember as EtcdListed;

use crate::api::EtcdCluster;

use super::{CLIENT_PORT, PEER_PORT};

/// A member's stable DNS name through the headless Service.
pub fn member_host(member: &str, cluster: &str, namespace: &str) -> String {
    format!("{member}.{}", cluster_domain(cluster, namespace))
}

/// The domain every member's name ends in: the headless Service's.
pub fn cluster_domain(cluster: &str, namespace: &str) -> String {
    format!("{cluster}.{namespace}.svc")
}

/// `https` when the cluster's members serve their client API with TLS
/// (`spec.tls.client`), else `http`.
pub fn client_scheme(cluster: &EtcdCluster) -> &'static str {
    if cluster
        .spec
        .tls
        .as_ref()
        .is_some_and(|t| t.client.is_some())
    {
        "https"
    } else {
        "http"
    }
}

/// The same for the peer API (`spec.tls.peer`).
pub fn peer_scheme(cluster: &EtcdCluster) -> &'static str {
    if cluster.spec.tls.as_ref().is_some_and(|t| t.peer.is_some()) {
        "https"
    } else {
        "http"
    }
}

/// `scheme` is [`client_scheme`] of the member's cluster.
pub fn member_client_url(scheme: &str, member: &str, cluster: &str, namespace: &str) -> String {
    format!(
        "{scheme}://{}:{CLIENT_PORT}",
        member_host(member, cluster, namespace)
    )
}

/// `scheme` is [`peer_scheme`] of the member's cluster.
pub fn member_peer_url(scheme: &str, member: &str, cluster: &str, namespace: &str) -> String {
    format!(
        "{scheme}://{}:{PEER_PORT}",
        member_host(member, cluster, namespace)
    )
}

/// `--initial-cluster` for a seed: just itself.
pub fn seed_initial_cluster(scheme: &str, member: &str, cluster: &str, namespace: &str) -> String {
    format!(
        "{member}={}",
        member_peer_url(scheme, member, cluster, namespace)
    )
}

/// A member's own peer URL in its `--initial-cluster`.
pub fn own_peer_url<'a>(initial_cluster: &'a str, member: &str) -> Option<&'a str> {
    initial_cluster
        .split(',')
        .find_map(|e| e.strip_prefix(member)?.strip_prefix('='))
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
    listed: &[EtcdListed],
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
                member_name_from_peer_url(url).unwrap_or(url).to_owned()
            };
            entries.push(format!("{name}={url}"));
        }
    }
    Some(entries.join(","))
}

/// The member name a peer URL belongs to: `http://<member>.<cluster>.<ns>.svc:2380`.
pub fn member_name_from_peer_url(url: &str) -> Option<&str> {
    let host = url.split("://").nth(1)?;
    let name = host.split(['.', ':', '/']).next()?;
    (!name.is_empty()).then_some(name)
}

/// The EtcdMember an entry of etcd's member list belongs to: its name, or
/// (a learner that has not started yet has none) its peer URL's.
pub fn listed_member_name(m: &EtcdListed) -> Option<&str> {
    if !m.name.is_empty() {
        return Some(m.name.as_str());
    }
    m.peer_urls
        .iter()
        .find_map(|u| member_name_from_peer_url(u))
}

/// `<cluster>-<5 random consonants and digits>`, like generateName, but
/// chosen before the create: etcd needs the peer URL (which holds the
/// name) in MemberAdd, before the object exists.
pub fn new_member_name(cluster: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let raw = uuid::Uuid::new_v4();
    let suffix: String = raw
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    format!("{cluster}-{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_urls_go_through_the_headless_service() {
        assert_eq!(
            member_client_url("http", "main-0", "main", "prod"),
            "http://main-0.main.prod.svc:2379"
        );
        assert_eq!(
            member_peer_url("http", "main-0", "main", "prod"),
            "http://main-0.main.prod.svc:2380"
        );
        assert_eq!(
            seed_initial_cluster("http", "main-0", "main", "prod"),
            "main-0=http://main-0.main.prod.svc:2380"
        );
    }

    #[test]
    fn tls_makes_the_urls_https_and_a_member_finds_its_own_peer_url() {
        let cluster: EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1", "kind": "EtcdCluster",
            "metadata": {"name": "main", "namespace": "prod"},
            "spec": {"tls": {"client": {"serverSecretRef": {"name": "s"},
                                        "operatorClientSecretRef": {"name": "o"}}}},
        }))
        .unwrap();
        assert_eq!(client_scheme(&cluster), "https");
        assert_eq!(peer_scheme(&cluster), "http");
        let initial =
            "main-0=https://main-0.main.prod.svc:2380,main-1=https://main-1.main.prod.svc:2380";
        assert_eq!(
            own_peer_url(initial, "main-1"),
            Some("https://main-1.main.prod.svc:2380")
        );
        assert_eq!(own_peer_url(initial, "main-"), None);
        assert_eq!(
            member_name_from_peer_url("https://main-1.main.prod.svc:2380"),
            Some("main-1")
        );
    }

    #[test]
    fn a_joining_member_gets_every_listed_peer_and_its_own_name() {
        let listed = |id: u64, name: &str, url: &str| EtcdListed {
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
                &member_peer_url("http", "main-3", "main", "prod")
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
    fn a_peer_url_names_its_member() {
        assert_eq!(
            member_name_from_peer_url("http://etcd-abcde.etcd.ns.svc:2380"),
            Some("etcd-abcde")
        );
        assert_eq!(member_name_from_peer_url("garbage"), None);
        assert!(new_member_name("main").starts_with("main-"));
        assert_eq!(new_member_name("main").len(), "main-".len() + 5);
    }
}

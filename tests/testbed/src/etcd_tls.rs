//! The certificates of a TLS EtcdCluster, made as a platform team makes
//! them by hand: one CA; a serving certificate that names every member and
//! the client Service; a peer certificate; the operator's client
//! certificate; each in a `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`,
//! `ca.crt`), the form `spec.tls` takes. The sandbox's `--tls` and the e2e
//! tests make their TLS clusters with this, so what the sandbox shows is
//! what the tests check.

use anyhow::Result;
use k8s_openapi::api::core::v1::Secret;
use serde_json::{Value, json};

use crate::pki::{CertFiles, Pki};

/// One generation of a cluster's certificates, all from one CA.
pub struct EtcdCerts {
    pub server: CertFiles,
    pub peer: CertFiles,
    pub operator: CertFiles,
}

impl EtcdCerts {
    /// The names the serving certificate carries: every member's address
    /// (`<member>.<cluster>.<namespace>.svc`, what the operator dials) and
    /// the client Service's.
    pub fn server_names(cluster: &str, namespace: &str) -> [String; 3] {
        [
            format!("*.{cluster}.{namespace}.svc"),
            format!("{cluster}-client.{namespace}.svc"),
            format!("{cluster}-client"),
        ]
    }

    /// Generation `generation` (a suffix of the files' names in the CA's
    /// directory).
    pub fn issue(pki: &Pki, cluster: &str, namespace: &str, generation: &str) -> Result<Self> {
        Self::issue_with_peer_hosts(pki, cluster, namespace, generation, &[])
    }

    /// As [`EtcdCerts::issue`], the peer certificate naming `peer_hosts`
    /// too. etcd checks a peer's client certificate against the address
    /// the connection comes from; where Pods share the machine's loopback
    /// (the sandbox), that address is 127.0.0.1.
    pub fn issue_with_peer_hosts(
        pki: &Pki,
        cluster: &str,
        namespace: &str,
        generation: &str,
        peer_hosts: &[&str],
    ) -> Result<Self> {
        let names = Self::server_names(cluster, namespace);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        // Serving and client: etcd's gateway presents its serving
        // certificate as a client when members require client certificates.
        let server =
            pki.serving_and_client(&format!("{cluster}-server-{generation}"), "etcd", &names)?;
        // The peer port is dialled by member address only.
        let peer_names: Vec<&str> = names[..1].iter().chain(peer_hosts).copied().collect();
        let peer = pki.serving_and_client(
            &format!("{cluster}-peer-{generation}"),
            "etcd-peer",
            &peer_names,
        )?;
        let operator = pki.client(
            &format!("{cluster}-operator-{generation}"),
            "etcd-steward",
            &[],
        )?;
        Ok(EtcdCerts {
            server,
            peer,
            operator,
        })
    }

    /// The Secrets `<cluster>-server`, `<cluster>-peer` and
    /// `<cluster>-operator`.
    pub fn secrets(&self, cluster: &str, namespace: &str, ca_pem: &str) -> Vec<Secret> {
        [
            ("server", &self.server),
            ("peer", &self.peer),
            ("operator", &self.operator),
        ]
        .into_iter()
        .map(|(suffix, files)| secret(&format!("{cluster}-{suffix}"), namespace, files, ca_pem))
        .collect()
    }
}

/// A `kubernetes.io/tls` Secret holding `files` and the CA.
pub fn secret(name: &str, namespace: &str, files: &CertFiles, ca_pem: &str) -> Secret {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": files.cert_pem, "tls.key": files.key_pem, "ca.crt": ca_pem},
    }))
    .expect("a Secret")
}

/// `spec.tls` naming the Secrets of [`EtcdCerts::secrets`]: client TLS
/// with client certificates required, and peer TLS.
pub fn spec(cluster: &str) -> Value {
    json!({
        "client": {"serverSecretRef": {"name": format!("{cluster}-server")},
                   "operatorClientSecretRef": {"name": format!("{cluster}-operator")}},
        "peer": {"secretRef": {"name": format!("{cluster}-peer")}},
    })
}

//! TLS of a cluster (`spec.tls`) as the operator's etcd client sees it,
//! per cluster, with the anchor operator's meaning: the CA it trusts is
//! `ca.crt` of `spec.tls.client.serverSecretRef`; the certificate it
//! presents, if any, is `tls.crt`/`tls.key` of
//! `spec.tls.client.operatorClientSecretRef` (the members then require
//! client certificates; without it they serve TLS only).
//!
//! Guarantees:
//! - Of the serving Secret only `ca.crt` is used (its key is the
//!   members'). The operator's private key goes from its Secret into the
//!   client's TLS configuration only; [`ClusterTls`] prints nothing but a fingerprint,
//!   and no message names more than the Secret and its keys.
//! - The Secret is read again at most every [`SECRET_RECHECK`]; a changed
//!   certificate, key or CA drops the cluster's connections, so the next
//!   call presents the new certificate.
//! - The validity of each certificate it can read (the leaf of `tls.crt`
//!   in the serving, peer and operator Secrets) goes to the policy
//!   ([`Prepared::facts`]); nothing else of a Secret does. A peer Secret
//!   that cannot be read only leaves its certificate out: the operator
//!   never presents it.
//! - Without a usable CA or client certificate, and none read before, the
//!   cluster is not probed: the status says why ([`prepare`]) rather than
//!   reporting every member as refusing a handshake. With one read before,
//!   it is probed with that, and a Warning Event names the problem.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use sha2::{Digest, Sha256};
use steward_policy_sdk as sdk;

use crate::api::EtcdCluster;
use crate::certificates::TlsSecret;
use crate::context::Context;
use crate::resources::{TLS_CA, TLS_CERT, TLS_KEY};

/// How long a read of the TLS Secrets stands (`get` only, no watch, as
/// for every Secret the operator reads).
pub const SECRET_RECHECK: Duration = Duration::from_secs(10);

/// The TLS configuration for one cluster's endpoints.
#[derive(Clone)]
pub struct ClusterTls {
    /// sha256 over the CA, certificate and key: what tells a change.
    pub fingerprint: [u8; 32],
    /// Private: tonic's Debug of it prints the key.
    options: etcd_client::TlsOptions,
}

impl ClusterTls {
    pub fn options(&self) -> &etcd_client::TlsOptions {
        &self.options
    }
}

impl std::fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterTls")
            .field("fingerprint", &hex::encode(&self.fingerprint[..8]))
            .finish_non_exhaustive()
    }
}

/// A good read of a cluster's TLS Secrets, and when it was made.
type Read = (Instant, ClusterTls, Vec<sdk::CertificateFacts>);

/// The last good read of each cluster's TLS Secrets, by cluster UID.
/// Failed reads are not kept: they are tried again on the next reconcile.
#[derive(Default)]
pub struct Registry {
    reads: Mutex<HashMap<String, Read>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Read>> {
        self.reads.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }
}

/// What [`prepare`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prepared {
    /// There is no usable configuration, and never was: the cluster is not
    /// probed, and this says why.
    pub unusable: Option<String>,
    /// The Secrets cannot be read or used now, but an earlier read can:
    /// the cluster is probed with that, and a Warning Event says this.
    pub stale: Option<String>,
    /// What the policy is told of the cluster's TLS.
    pub facts: sdk::TlsFacts,
}

/// Before the probe: sets the TLS configuration the cluster's members are
/// called with.
pub async fn prepare(cluster: &EtcdCluster, ctx: &Context) -> Prepared {
    let domain = crate::resources::cluster_domain(
        &cluster.name_any(),
        &cluster.namespace().unwrap_or_default(),
    );
    let secrets = crate::certificates::secrets(cluster);
    let mut prepared = Prepared {
        facts: sdk::TlsFacts {
            // CEL: spec.tls.client always names a serving certificate.
            client: secrets.server.is_some(),
            client_cert_auth: secrets.operator_client.is_some(),
            peer: secrets.peer.is_some(),
            certificates: Vec::new(),
        },
        ..Prepared::default()
    };
    let Some(server) = secrets.server.as_ref() else {
        ctx.etcd.set_tls(&domain, None);
        return prepared;
    };
    let uid = cluster.uid().unwrap_or_default();
    let ns = cluster.namespace().unwrap_or_default();
    let known = ctx.tls.lock().get(&uid).cloned();
    if let Some((at, tls, certificates)) = &known
        && at.elapsed() < SECRET_RECHECK
    {
        ctx.etcd.set_tls(&domain, Some(tls.clone()));
        prepared.facts.certificates = certificates.clone();
        return prepared;
    }
    let names = Names {
        server,
        operator: secrets.operator_client.as_ref(),
        peer: secrets.peer.as_ref(),
    };
    match read_secrets(ctx, &ns, names).await {
        Ok((tls, certificates)) => {
            ctx.tls
                .lock()
                .insert(uid, (Instant::now(), tls.clone(), certificates.clone()));
            ctx.etcd.set_tls(&domain, Some(tls));
            prepared.facts.certificates = certificates;
        }
        // A Secret being replaced, or a moment of API trouble, does not
        // hide a cluster the configuration read before still reaches.
        Err(why) => match known {
            Some((_, tls, certificates)) => {
                ctx.etcd.set_tls(&domain, Some(tls));
                prepared.facts.certificates = certificates;
                prepared.stale = Some(why);
            }
            None => prepared.unusable = Some(why),
        },
    }
    prepared
}

/// The names of a cluster's TLS Secrets.
struct Names<'a> {
    server: &'a TlsSecret,
    operator: Option<&'a TlsSecret>,
    peer: Option<&'a TlsSecret>,
}

async fn get(ctx: &Context, ns: &str, secret: &TlsSecret) -> Result<Secret, String> {
    let TlsSecret { name, source } = secret;
    Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("reading Secret {ns}/{name} ({source}): {e}"))?
        .ok_or_else(|| format!("Secret {ns}/{name} ({source}) does not exist"))
}

async fn read_secrets(
    ctx: &Context,
    ns: &str,
    names: Names<'_>,
) -> Result<(ClusterTls, Vec<sdk::CertificateFacts>), String> {
    let server = get(ctx, ns, names.server).await?;
    let operator = match names.operator {
        Some(name) => Some((get(ctx, ns, name).await?, name)),
        None => None,
    };
    let tls = from_secrets(
        ns,
        (&server, names.server),
        operator.as_ref().map(|(s, n)| (s, *n)),
    )?;
    let mut certificates: Vec<_> = [(
        Some(&server),
        names.server.name.as_str(),
        sdk::CertificateRole::Serving,
    )]
    .into_iter()
    .chain(operator.as_ref().map(|(s, n)| {
        (
            Some(s),
            n.name.as_str(),
            sdk::CertificateRole::OperatorClient,
        )
    }))
    .filter_map(|(secret, name, role)| certificate(secret?, name, role))
    .collect();
    if let Some(name) = names.peer
        && let Ok(peer) = get(ctx, ns, name).await
    {
        certificates.extend(certificate(&peer, &name.name, sdk::CertificateRole::Peer));
    }
    Ok((tls, certificates))
}

/// The validity of the first certificate of `tls.crt` in `secret`; None
/// when there is none that parses (the members or the handshake then say
/// what is wrong).
pub fn certificate(
    secret: &Secret,
    name: &str,
    role: sdk::CertificateRole,
) -> Option<sdk::CertificateFacts> {
    let pem = secret.data.as_ref()?.get(TLS_CERT)?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem.0).ok()?;
    let cert = pem.parse_x509().ok()?;
    let validity = cert.validity();
    Some(sdk::CertificateFacts {
        role,
        secret: name.to_owned(),
        not_before: validity.not_before.timestamp().saturating_mul(1000),
        not_after: validity.not_after.timestamp().saturating_mul(1000),
    })
}

/// PEM values of `keys` in `secret`, or what is missing or malformed.
/// Only PEM framing is checked here; a certificate the other side rejects
/// shows as a TLS fault of the probe.
fn pem_values(
    secret: &Secret,
    ns: &str,
    TlsSecret {
        name,
        source: field,
    }: &TlsSecret,
    keys: &[&str],
) -> Result<Vec<Vec<u8>>, String> {
    let data = secret.data.clone().unwrap_or_default();
    let missing: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| data.get(*k).is_none_or(|v| v.0.is_empty()))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "Secret {ns}/{name} ({field}) has no non-empty {}; it needs {}",
            missing.join(", "),
            keys.join(", ")
        ));
    }
    keys.iter()
        .map(|k| {
            let value = data[*k].0.clone();
            let what = if *k == TLS_KEY {
                "PRIVATE KEY"
            } else {
                "CERTIFICATE"
            };
            let text = String::from_utf8_lossy(&value);
            if text.contains("-----BEGIN ") && text.contains(what) {
                Ok(value)
            } else {
                Err(format!(
                    "Secret {ns}/{name} ({field}): {k} is not a PEM {}",
                    what.to_lowercase()
                ))
            }
        })
        .collect()
}

/// The client configuration from the serving Secret (its `ca.crt`) and
/// the operator's Secret (`tls.crt`, `tls.key`), if the cluster has one.
pub fn from_secrets(
    ns: &str,
    server: (&Secret, &TlsSecret),
    operator: Option<(&Secret, &TlsSecret)>,
) -> Result<ClusterTls, String> {
    let ca = pem_values(server.0, ns, server.1, &[TLS_CA])?.remove(0);
    let identity = match operator {
        Some((secret, name)) => {
            let mut v = pem_values(secret, ns, name, &[TLS_CERT, TLS_KEY])?;
            let key = v.remove(1);
            Some((v.remove(0), key))
        }
        None => None,
    };
    let mut digest = Sha256::new();
    let empty = Vec::new();
    let (cert, key) = identity.as_ref().map_or((&empty, &empty), |(c, k)| (c, k));
    for part in [&ca, cert, key] {
        digest.update((part.len() as u64).to_be_bytes());
        digest.update(part);
    }
    let mut options =
        etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(&ca));
    if let Some((cert, key)) = identity {
        options = options.identity(etcd_client::Identity::from_pem(cert, key));
    }
    Ok(ClusterTls {
        fingerprint: digest.finalize().into(),
        options,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::fixtures::secret;

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nsecretkeybytes\n-----END PRIVATE KEY-----\n";

    fn srv() -> TlsSecret {
        TlsSecret {
            name: "srv".into(),
            source: "spec.tls.client.serverSecretRef".into(),
        }
    }

    fn op() -> TlsSecret {
        TlsSecret {
            name: "op".into(),
            source: "spec.tls.client.operatorClientSecretRef".into(),
        }
    }

    /// The validity of `tls.crt`'s first certificate reaches the facts;
    /// a Secret without one, or with a value that is not a certificate,
    /// gives none.
    #[test]
    fn a_certificates_validity_is_read_from_its_secret() {
        let mut params = rcgen::CertificateParams::new(vec!["etcd".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2026, 1, 1);
        params.not_after = rcgen::date_time_ymd(2026, 12, 16);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap().pem();
        let facts = certificate(
            &secret(&[("tls.crt", &cert), ("tls.key", &key.serialize_pem())]),
            "etcd-peer",
            sdk::CertificateRole::Peer,
        )
        .unwrap();
        assert_eq!(
            facts,
            sdk::CertificateFacts {
                role: sdk::CertificateRole::Peer,
                secret: "etcd-peer".into(),
                not_before: 1_767_225_600_000,
                not_after: 1_797_379_200_000,
            }
        );
        let none = |pairs: &[(&str, &str)]| {
            certificate(&secret(pairs), "s", sdk::CertificateRole::Serving)
        };
        assert_eq!(none(&[("ca.crt", &cert)]), None);
        assert_eq!(none(&[("tls.crt", CERT)]), None);
    }

    #[test]
    fn the_servers_ca_and_the_operators_certificate_give_a_client_configuration() {
        let server = secret(&[("tls.crt", CERT), ("tls.key", KEY), ("ca.crt", CERT)]);
        let operator = secret(&[("tls.crt", CERT), ("tls.key", KEY)]);
        let mtls = from_secrets("ns", (&server, &srv()), Some((&operator, &op()))).unwrap();
        let shown = format!("{mtls:?}");
        assert!(!shown.contains("secretkeybytes"), "{shown}");
        // Server TLS only: the CA alone, and another fingerprint.
        let only = from_secrets("ns", (&server, &srv()), None).unwrap();
        assert_ne!(only.fingerprint, mtls.fingerprint);
    }

    #[test]
    fn missing_keys_and_non_pem_values_are_named_without_their_contents() {
        let server = secret(&[("tls.crt", CERT), ("tls.key", KEY)]);
        let e = from_secrets("ns", (&server, &srv()), None).unwrap_err();
        assert_eq!(
            e,
            "Secret ns/srv (spec.tls.client.serverSecretRef) has no non-empty ca.crt; it needs ca.crt"
        );
        let server = secret(&[("ca.crt", CERT)]);
        let operator = secret(&[("tls.crt", CERT)]);
        let e = from_secrets("ns", (&server, &srv()), Some((&operator, &op()))).unwrap_err();
        assert!(
            e.ends_with("has no non-empty tls.key; it needs tls.crt, tls.key"),
            "{e}"
        );
        let operator = secret(&[("tls.crt", CERT), ("tls.key", "secretkeybytes")]);
        let e = from_secrets("ns", (&server, &srv()), Some((&operator, &op()))).unwrap_err();
        assert_eq!(
            e,
            "Secret ns/op (spec.tls.client.operatorClientSecretRef): tls.key is not a PEM private key"
        );
    }
}

//! Where a cluster's certificates come from: Secrets the user gives
//! (`spec.tls.client.serverSecretRef`, `operatorClientSecretRef`,
//! `spec.tls.peer.secretRef`), or cert-manager Certificates the operator
//! creates from the issuers the spec names (`spec.tls.*.certManager`),
//! with the anchor operator's names: Certificate `<cluster>-server` into
//! Secret `<cluster>-server-tls`, `<cluster>-operator-client` into
//! `<cluster>-operator-client-tls`, `<cluster>-peer` into `<cluster>-peer-tls`.
//! Everything else (the Pods' volumes, the operator's client, the snapshot
//! Pods) reads the Secrets through [`secrets`], so both sources are used
//! the same way, and renewal by cert-manager is renewal in place.
//!
//! Guarantees:
//! - Certificates are observed (one `list` per reconcile, no watch: the
//!   Certificate kind may not exist) before the policy runs, and applied
//!   only in the act stage, after the status.
//! - cert-manager not being installed (its `Certificate` kind not served)
//!   and a Certificate not Ready are facts of the observation, with
//!   cert-manager's own reason and message; neither is an error of the
//!   reconcile. A cluster with no member yet is not seeded until its
//!   Certificates are Ready ([`Issuance::blocks_seed`]): a Pod that cannot
//!   mount its Secret would only fail. Members already running keep the
//!   certificates their Secrets hold.
//! - Nothing of a Secret is read here.

use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

use crate::api::{EtcdCluster, IssuerKind, IssuerReference};
use crate::resources::{self, BuildError, FIELD_MANAGER};

/// A Secret holding one of the cluster's certificates, and what in the
/// spec names it (for messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSecret {
    pub name: String,
    pub source: String,
}

/// The Secrets of a cluster's certificates, as [`secrets`] resolves them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSecrets {
    /// The members' serving certificate and the CA (`ca.crt`) everybody
    /// trusts; set whenever `spec.tls.client` is.
    pub server: Option<TlsSecret>,
    /// The certificate the operator presents; its presence makes the
    /// members require client certificates.
    pub operator_client: Option<TlsSecret>,
    pub peer: Option<TlsSecret>,
}

/// The suffixes of the Certificates' names, and of their Secrets'
/// (`<cluster>-<suffix>-tls`).
const SERVER: &str = "server";
const OPERATOR_CLIENT: &str = "operator-client";
const PEER: &str = "peer";

pub fn secret_name(cluster: &str, suffix: &str) -> String {
    format!("{cluster}-{suffix}-tls")
}

pub fn secrets(cluster: &EtcdCluster) -> TlsSecrets {
    let name = cluster.name_any();
    let tls = cluster.spec.tls.as_ref();
    let client = tls.and_then(|t| t.client.as_ref());
    let peer = tls.and_then(|t| t.peer.as_ref());
    let issued = |suffix: &str, field: &str| TlsSecret {
        name: secret_name(&name, suffix),
        source: format!("issued by cert-manager Certificate {name}-{suffix}, {field}"),
    };
    let given = |r: &k8s_openapi::api::core::v1::LocalObjectReference, field: &str| TlsSecret {
        name: r.name.clone(),
        source: field.to_owned(),
    };
    TlsSecrets {
        server: client.and_then(|c| match &c.cert_manager {
            Some(_) => Some(issued(
                SERVER,
                "spec.tls.client.certManager.serverIssuerRef",
            )),
            None => c
                .server_secret_ref
                .as_ref()
                .map(|r| given(r, "spec.tls.client.serverSecretRef")),
        }),
        operator_client: client.and_then(|c| match &c.cert_manager {
            Some(cm) => cm.operator_client_issuer_ref.as_ref().map(|_| {
                issued(
                    OPERATOR_CLIENT,
                    "spec.tls.client.certManager.operatorClientIssuerRef",
                )
            }),
            None => c
                .operator_client_secret_ref
                .as_ref()
                .map(|r| given(r, "spec.tls.client.operatorClientSecretRef")),
        }),
        peer: peer.and_then(|p| match &p.cert_manager {
            Some(_) => Some(issued(PEER, "spec.tls.peer.certManager.issuerRef")),
            None => p
                .secret_ref
                .as_ref()
                .map(|r| given(r, "spec.tls.peer.secretRef")),
        }),
    }
}

/// The `cert-manager.io/v1` `Certificate` kind.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate"),
        "certificates",
    )
}

/// The cert-manager Certificates the spec asks for, owned by the cluster.
///
/// The serving certificate names every member (`*.<cluster>.<ns>.svc`:
/// member names are chosen when a member is added, so a wildcard keeps one
/// certificate good for every scale), the client Service in each form a
/// client in the cluster uses, and `localhost`/`127.0.0.1` for a client in
/// the member's own Pod; the `.svc.cluster.local` forms assume the default
/// cluster domain. It is for client auth too: etcd's gateway presents it
/// when the members require client certificates. The peer certificate
/// names the members only. Key and lifetime are cert-manager's defaults
/// (RSA 2048, 90 days, renewed at two thirds).
pub fn desired(cluster: &EtcdCluster) -> Result<Vec<DynamicObject>, BuildError> {
    let Some(tls) = cluster.spec.tls.as_ref() else {
        return Ok(Vec::new());
    };
    let name = cluster.name_any();
    let ns = resources::namespace_of(cluster, "EtcdCluster")?;
    let owner = resources::owner_of(cluster, "EtcdCluster")?;
    let members = [
        format!("*.{}", resources::cluster_domain(&name, &ns)),
        format!("*.{}.cluster.local", resources::cluster_domain(&name, &ns)),
    ];
    let client_service = resources::client_service_name(&name);
    let mut out = Vec::new();
    let mut add = |suffix: &str,
                   issuer: &IssuerReference,
                   names: Vec<String>,
                   ips: &[&str],
                   usages: &[&str]| {
        let mut spec = json!({
            "secretName": secret_name(&name, suffix),
            "commonName": common_name(&name, suffix),
            "issuerRef": {
                "group": "cert-manager.io",
                "kind": match issuer.kind.unwrap_or(IssuerKind::Issuer) {
                    IssuerKind::Issuer => "Issuer",
                    IssuerKind::ClusterIssuer => "ClusterIssuer",
                },
                "name": issuer.name,
            },
            "usages": usages,
            "secretTemplate": {"labels": resources::cluster_labels(&name)},
        });
        if !names.is_empty() {
            spec["dnsNames"] = json!(names);
        }
        if !ips.is_empty() {
            spec["ipAddresses"] = json!(ips);
        }
        let mut object = DynamicObject::new(&format!("{name}-{suffix}"), &api_resource())
            .within(&ns)
            .data(json!({"spec": spec}));
        object.metadata.labels = Some(resources::cluster_labels(&name));
        object.metadata.owner_references = Some(vec![owner.clone()]);
        out.push(object);
    };
    const SERVING: &[&str] = &[
        "server auth",
        "client auth",
        "digital signature",
        "key encipherment",
    ];
    if let Some(cm) = tls.client.as_ref().and_then(|c| c.cert_manager.as_ref()) {
        let mut names = members.to_vec();
        names.extend([
            client_service.clone(),
            format!("{client_service}.{ns}"),
            format!("{client_service}.{ns}.svc"),
            format!("{client_service}.{ns}.svc.cluster.local"),
            "localhost".to_owned(),
        ]);
        add(
            SERVER,
            &cm.server_issuer_ref,
            names,
            &["127.0.0.1", "::1"],
            SERVING,
        );
        if let Some(issuer) = &cm.operator_client_issuer_ref {
            add(
                OPERATOR_CLIENT,
                issuer,
                Vec::new(),
                &[],
                &["client auth", "digital signature", "key encipherment"],
            );
        }
    }
    if let Some(cm) = tls.peer.as_ref().and_then(|p| p.cert_manager.as_ref()) {
        add(PEER, &cm.issuer_ref, members.to_vec(), &[], SERVING);
    }
    Ok(out)
}

/// `<cluster>-<suffix>`, cut to the 64 bytes X.509 allows a CN (cert-manager
/// refuses a longer one); cluster names are ASCII DNS labels.
fn common_name(cluster: &str, suffix: &str) -> String {
    let mut cn = format!("{cluster}-{suffix}");
    cn.truncate(64);
    cn
}

/// A Certificate as cert-manager reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateState {
    pub name: String,
    pub secret: String,
    /// Its `Ready` condition: None while it has none (not created yet,
    /// or cert-manager has not looked at it).
    pub ready: Option<bool>,
    /// cert-manager's reason and message of `Ready`, or why there is none.
    pub reason: String,
    pub message: String,
    /// Its spec differs from the desired one (or it does not exist).
    pub outdated: bool,
}

impl CertificateState {
    pub fn describe(&self) -> String {
        format!(
            "Certificate {} (Secret {}) is not Ready: {}: {}",
            self.name, self.secret, self.reason, self.message
        )
    }
}

/// The cert-manager side of a cluster's TLS, as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Issuance {
    /// The spec names no issuer.
    #[default]
    NotUsed,
    /// The API serves no `cert-manager.io/v1` `Certificate`.
    NotInstalled,
    /// The Certificates could not be listed (another API error).
    Unknown(String),
    Listed(Vec<CertificateState>),
}

pub const REASON_NOT_INSTALLED: &str = "CertManagerNotInstalled";
pub const REASON_NOT_READY: &str = "CertificateNotReady";

impl Issuance {
    fn listed(&self) -> &[CertificateState] {
        match self {
            Issuance::Listed(certs) => certs,
            _ => &[],
        }
    }

    /// Certificates that are not Ready, in words.
    pub fn not_ready(&self) -> Vec<String> {
        self.listed()
            .iter()
            .filter(|c| c.ready != Some(true))
            .map(CertificateState::describe)
            .collect()
    }

    /// Certificates cert-manager reports not Ready: what a Warning Event
    /// is for. One the operator has not created yet, or cert-manager has
    /// not looked at yet, is not a fault.
    pub fn reported_not_ready(&self) -> impl Iterator<Item = &CertificateState> {
        self.listed().iter().filter(|c| c.ready == Some(false))
    }

    /// Why a cluster with no member yet must not be seeded, as the
    /// planner's (reason, message, retry): `retry` false asks for a change
    /// outside the operator (installing cert-manager).
    pub fn blocks_seed(&self) -> Option<(&'static str, String, bool)> {
        match self {
            Issuance::NotUsed => None,
            Issuance::NotInstalled => Some((REASON_NOT_INSTALLED, not_installed_message(), false)),
            Issuance::Unknown(why) => Some((
                REASON_NOT_READY,
                format!("cannot list cert-manager Certificates: {why}"),
                true,
            )),
            Issuance::Listed(_) => {
                let waiting = self.not_ready();
                (!waiting.is_empty()).then(|| {
                    (
                        REASON_NOT_READY,
                        format!(
                            "cert-manager has not issued every certificate yet: {}",
                            waiting.join("; ")
                        ),
                        true,
                    )
                })
            }
        }
    }
}

/// Action first: the policy quotes only the first 120 bytes of why a
/// cluster was not probed.
pub fn not_installed_message() -> String {
    "cert-manager is not installed: the API serves no cert-manager.io/v1 Certificate; install it, or give spec.tls the certificates as Secrets".to_owned()
}

/// Reads the cluster's Certificates (by the cluster's labels) and compares
/// them with [`desired`].
pub async fn observe(cluster: &EtcdCluster, client: &kube::Client) -> Issuance {
    let Ok(desired) = desired(cluster) else {
        return Issuance::NotUsed;
    };
    if desired.is_empty() {
        return Issuance::NotUsed;
    }
    let ns = cluster.namespace().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &api_resource());
    let selector = resources::cluster_selector(&cluster.name_any());
    let listed = match api.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list.items,
        // A list of a kind the API does not serve is a 404; of a kind it
        // serves, an empty list.
        Err(kube::Error::Api(e)) if e.code == 404 => return Issuance::NotInstalled,
        Err(e) => return Issuance::Unknown(e.to_string()),
    };
    Issuance::Listed(
        desired
            .iter()
            .map(|want| {
                state(
                    want,
                    listed.iter().find(|c| c.name_any() == want.name_any()),
                )
            })
            .collect(),
    )
}

fn state(want: &DynamicObject, seen: Option<&DynamicObject>) -> CertificateState {
    let secret = want.data["spec"]["secretName"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let Some(seen) = seen else {
        return CertificateState {
            name: want.name_any(),
            secret,
            ready: None,
            reason: "NotCreated".into(),
            message: "the operator has not created it yet".into(),
            outdated: true,
        };
    };
    let ready = seen.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    let text = |c: Option<&Value>, key: &str| {
        c.and_then(|c| c[key].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let outdated = match (want.data["spec"].as_object(), seen.data["spec"].as_object()) {
        (Some(want), Some(seen)) => want.iter().any(|(k, v)| seen.get(k) != Some(v)),
        _ => true,
    };
    CertificateState {
        name: want.name_any(),
        secret,
        ready: ready.map(|c| c["status"] == "True"),
        reason: match ready {
            Some(c) => text(Some(c), "reason"),
            None => "NoReadyCondition".into(),
        },
        message: match ready {
            Some(c) => text(Some(c), "message"),
            None => "cert-manager has not reported on it yet".into(),
        },
        outdated,
    }
}

/// Creates or updates, by server-side apply, each Certificate the
/// observation found missing or outdated. A cluster whose API has no
/// Certificate kind gets none (the status says so already).
pub async fn apply(
    cluster: &EtcdCluster,
    issuance: &Issuance,
    client: &kube::Client,
) -> Result<(), kube::Error> {
    let Issuance::Listed(states) = issuance else {
        return Ok(());
    };
    let Ok(desired) = desired(cluster) else {
        return Ok(());
    };
    let ns = cluster.namespace().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &api_resource());
    for want in desired {
        if states
            .iter()
            .any(|s| s.name == want.name_any() && !s.outdated)
        {
            continue;
        }
        // `DynamicObject::new` set apiVersion and kind, as apply needs.
        api.patch(
            &want.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&want),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;

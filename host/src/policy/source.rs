//! Where an EtcdStatusPolicy's component comes from: a ConfigMap in the
//! operator's namespace, or an OCI artifact in a registry. Fetching only
//! gets bytes; whether they may run (the digest pin, the limits) is decided
//! by the caller, the same way for both.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use super::catalog::reason;
use crate::api::{CA_BUNDLE_KEY, ConfigMapPolicySource, DEFAULT_POLICY_KEY, OciPolicySource};

/// The media type of a component layer (the CNCF "Wasm OCI Artifact" layout
/// that oras, wkg and Kubewarden use).
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";

/// The type of a pull Secret: a `.dockerconfigjson` key, as
/// `kubectl create secret docker-registry` writes it.
pub const PULL_SECRET_TYPE: &str = "kubernetes.io/dockerconfigjson";

/// How long one pull may take, manifest and blob together.
const PULL_DEADLINE: Duration = Duration::from_secs(60);

/// Why a component could not be had. Each one names its condition reason
/// and whether it may pass by itself ([`Self::reason`],
/// [`Self::is_transient`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// Only a human can fix it: a missing object, key or layer.
    #[error("{0}")]
    Missing(String),
    /// The registry, or the apiserver holding what the source names, did
    /// not answer; it may pass.
    #[error("{0}")]
    Unreachable(String),
    /// The registry refused the credentials, or anonymous access.
    #[error("{0}")]
    Unauthorized(String),
    /// The registry's certificate was refused (an unknown CA, a name that
    /// does not match, an expired certificate): retrying changes nothing.
    #[error("{0}")]
    Untrusted(String),
    /// The artifact's component is not the pinned one; nothing was downloaded.
    #[error("{0}")]
    DigestMismatch(String),
    /// The artifact is larger than the policy may be.
    #[error("{0}")]
    TooLarge(String),
}

impl FetchError {
    /// CamelCase, for the policy's conditions and Event.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Missing(_) => reason::SOURCE_MISSING,
            Self::Unreachable(_) => reason::SOURCE_UNREACHABLE,
            Self::Unauthorized(_) => reason::SOURCE_UNAUTHORIZED,
            Self::Untrusted(_) => reason::SOURCE_UNTRUSTED,
            Self::DigestMismatch(_) => reason::DIGEST_MISMATCH,
            Self::TooLarge(_) => reason::LIMITS_EXCEEDED,
        }
    }

    /// Whether asking again soon may succeed. Only a source that did not
    /// answer: the others wait for a human to change the spec, the
    /// source, the Secret or the registry, and asking again changes nothing.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable(_) => true,
            Self::Missing(_)
            | Self::Unauthorized(_)
            | Self::Untrusted(_)
            | Self::DigestMismatch(_)
            | Self::TooLarge(_) => false,
        }
    }
}

/// The component in `cm` (the ConfigMap `source` names, if it exists), and
/// the resourceVersion it was read at.
pub fn from_config_map(
    cm: Option<&ConfigMap>,
    namespace: &str,
    source: &ConfigMapPolicySource,
) -> Result<(Vec<u8>, String), FetchError> {
    let key = source.key.as_deref().unwrap_or(DEFAULT_POLICY_KEY);
    let cm = cm.ok_or_else(|| {
        FetchError::Missing(format!(
            "ConfigMap {namespace}/{} (spec.source.configMap) not found",
            source.name
        ))
    })?;
    let bytes = cm
        .binary_data
        .as_ref()
        .and_then(|d| d.get(key))
        .ok_or_else(|| {
            FetchError::Missing(format!(
                "ConfigMap {namespace}/{} has no binaryData key {key:?}",
                source.name
            ))
        })?;
    let version = cm.metadata.resource_version.clone().unwrap_or_default();
    Ok((bytes.0.clone(), version))
}

/// Pulls the component layer of an OCI artifact. The manifest is read
/// first: a layer whose digest is not `pinned` is refused before a byte of
/// it is downloaded, and one larger than `max_bytes` likewise.
/// `secret` and `ca` are the pull Secret and CA ConfigMap `source` names,
/// if it names them and they exist.
pub async fn from_oci(
    source: &OciPolicySource,
    pinned: &str,
    max_bytes: usize,
    secret: Option<&Secret>,
    ca: Option<&ConfigMap>,
    namespace: &str,
) -> Result<Vec<u8>, FetchError> {
    let reference: Reference = source.reference.parse().map_err(|e| {
        FetchError::Missing(format!(
            "spec.source.oci.reference {:?} is not an OCI reference: {e}",
            source.reference
        ))
    })?;
    let auth = match &source.pull_secret {
        None => RegistryAuth::Anonymous,
        Some(name) => pull_auth(secret, namespace, name, reference.resolve_registry())?,
    };
    let extra_roots = match &source.ca_config_map {
        None => Vec::new(),
        Some(name) => ca_bundle(ca, namespace, name)?,
    };
    // Not `Client::new`: on a bad configuration it falls back to the
    // defaults, which would drop the CA (or turn plain HTTP into HTTPS).
    let client = Client::try_from(ClientConfig {
        protocol: if source.insecure {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        extra_root_certificates: extra_roots,
        ..ClientConfig::default()
    })
    .map_err(|e| FetchError::Missing(format!("configuring the registry client: {e}")))?;
    let at = &source.reference;
    let unreachable = |e: oci_client::errors::OciDistributionError| {
        use oci_client::errors::{OciDistributionError as E, OciErrorCode};
        let said = crate::text::one_line(&crate::text::error_chain(&e));
        let refused = match &e {
            E::UnauthorizedError { .. } | E::ServerError { code: 403, .. } => true,
            E::RegistryError { envelope, .. } => envelope
                .errors
                .iter()
                .any(|o| matches!(o.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)),
            _ => false,
        };
        if refused {
            // oci-client retries a failed token exchange anonymously, so on
            // a token registry a token server that failed reads as a 401
            // too: the message keeps the registry's own words.
            return FetchError::Unauthorized(match &source.pull_secret {
                None if source.insecure => format!(
                    "pulling {at}: the registry refused anonymous access (a pullSecret needs a registry with TLS, not insecure: true): {said}"
                ),
                None => format!(
                    "pulling {at}: the registry refused anonymous access (spec.source.oci has no pullSecret): {said}"
                ),
                Some(name) => format!(
                    "pulling {at}: the registry refused the credentials in Secret {namespace}/{name}: {said}"
                ),
            });
        }
        if certificate_refused(&said) {
            let hint = if source.ca_config_map.is_some() {
                "check that spec.source.oci.caConfigMap holds the CA that signed it"
            } else {
                "if a private CA signed it, name a ConfigMap holding that CA in spec.source.oci.caConfigMap"
            };
            return FetchError::Untrusted(format!(
                "pulling {at}: the registry's certificate was refused ({hint}): {said}"
            ));
        }
        FetchError::Unreachable(format!("pulling {at}: {said}"))
    };
    let pull = async {
        let (manifest, _) = client
            .pull_image_manifest(&reference, &auth)
            .await
            .map_err(unreachable)?;
        let wasm: Vec<_> = manifest
            .layers
            .iter()
            .filter(|l| l.media_type == WASM_LAYER_MEDIA_TYPE)
            .collect();
        let layer = match wasm.as_slice() {
            [one] => *one,
            [] => {
                return Err(FetchError::Missing(format!(
                    "{at} has no layer of media type {WASM_LAYER_MEDIA_TYPE} (layers: {})",
                    manifest
                        .layers
                        .iter()
                        .map(|l| l.media_type.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            _ => {
                return Err(FetchError::Missing(format!(
                    "{at} has {} layers of media type {WASM_LAYER_MEDIA_TYPE}; a policy artifact has one",
                    wasm.len()
                )));
            }
        };
        if layer.digest != pinned {
            return Err(FetchError::DigestMismatch(format!(
                "the component in {at} is {}, but spec.digest pins {pinned}; it was not downloaded",
                layer.digest
            )));
        }
        if layer.size < 0 || layer.size as u64 > max_bytes as u64 {
            return Err(FetchError::TooLarge(format!(
                "the component in {at} is {} bytes, above its limit of {max_bytes} (componentBytes)",
                layer.size
            )));
        }
        // The manifest's size is the registry's word; the writer holds it
        // to the limit whatever arrives. pull_blob checks the digest of
        // what it wrote when the stream ends.
        let mut capped = Capped {
            bytes: Vec::new(),
            max: max_bytes,
        };
        client
            .pull_blob(&reference, layer, &mut capped)
            .await
            .map_err(unreachable)?;
        let bytes = capped.bytes;
        Ok(bytes)
    };
    tokio::time::timeout(PULL_DEADLINE, pull)
        .await
        .unwrap_or_else(|_| {
            Err(FetchError::Unreachable(format!(
                "pulling {at} took longer than {} s",
                PULL_DEADLINE.as_secs()
            )))
        })
}

/// A download target that refuses to grow past `max` bytes.
struct Capped {
    bytes: Vec<u8>,
    max: usize,
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.bytes.len() + buf.len() > self.max {
            return std::task::Poll::Ready(Err(std::io::Error::other(format!(
                "the component is larger than its limit of {} bytes (componentBytes)",
                self.max
            ))));
        }
        self.bytes.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Whether TLS refused the registry's certificate, read from the error's
/// chain (`crate::text::error_chain`): rustls' own words for
/// InvalidCertificate. Not by type, because the connector layers between
/// reqwest and rustls box it where `source()` does not reach it.
fn certificate_refused(chain: &str) -> bool {
    chain.contains("invalid peer certificate: ")
}

/// The certificates under `ca.crt` of the CA ConfigMap: every PEM
/// `CERTIFICATE` block (other blocks are skipped), so a bundle without one
/// is reported as such rather than as a registry that cannot be verified.
/// A block that is not DER of a certificate fails when the client is built.
fn ca_bundle(
    cm: Option<&ConfigMap>,
    namespace: &str,
    name: &str,
) -> Result<Vec<Certificate>, FetchError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let cm = cm.ok_or_else(|| {
        FetchError::Missing(format!(
            "ConfigMap {namespace}/{name} (spec.source.oci.caConfigMap) not found"
        ))
    })?;
    let pem = cm
        .data
        .as_ref()
        .and_then(|d| d.get(CA_BUNDLE_KEY))
        .ok_or_else(|| {
            FetchError::Missing(format!(
                "ConfigMap {namespace}/{name} has no {CA_BUNDLE_KEY} key (spec.source.oci.caConfigMap)"
            ))
        })?;
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|c| {
            c.map(|der| Certificate {
                encoding: CertificateEncoding::Der,
                data: der.to_vec(),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            FetchError::Missing(format!(
                "ConfigMap {namespace}/{name} key {CA_BUNDLE_KEY} is not a PEM certificate bundle: {e}"
            ))
        })?;
    if certs.is_empty() {
        return Err(FetchError::Missing(format!(
            "ConfigMap {namespace}/{name} key {CA_BUNDLE_KEY} holds no PEM certificate"
        )));
    }
    Ok(certs)
}

/// Credentials for `registry` from a kubernetes.io/dockerconfigjson Secret.
fn pull_auth(
    secret: Option<&Secret>,
    namespace: &str,
    name: &str,
    registry: &str,
) -> Result<RegistryAuth, FetchError> {
    let secret = secret.ok_or_else(|| {
        FetchError::Missing(format!(
            "Secret {namespace}/{name} (spec.source.oci.pullSecret) not found"
        ))
    })?;
    // The only type the operator watches (the watch has this field
    // selector), so another one would never be seen to change.
    if secret.type_.as_deref() != Some(PULL_SECRET_TYPE) {
        return Err(FetchError::Missing(format!(
            "Secret {namespace}/{name} is of type {}, not {PULL_SECRET_TYPE} (kubectl create secret docker-registry makes one)",
            secret.type_.as_deref().unwrap_or("Opaque")
        )));
    }
    let config = secret
        .data
        .as_ref()
        .and_then(|d| d.get(".dockerconfigjson"))
        .ok_or_else(|| {
            FetchError::Missing(format!(
                "Secret {namespace}/{name} has no .dockerconfigjson key"
            ))
        })?;
    docker_config_auth(&config.0, registry).ok_or_else(|| {
        // Never the Secret's content: only where the credentials were looked for.
        FetchError::Missing(format!(
            "Secret {namespace}/{name} holds no credentials for registry {registry}"
        ))
    })
}

/// The entry for `registry` in a docker config.json: `username` and
/// `password`, or `auth` (base64 of `user:password`).
fn docker_config_auth(json: &[u8], registry: &str) -> Option<RegistryAuth> {
    use base64::Engine as _;
    #[derive(serde::Deserialize)]
    struct DockerConfig {
        auths: std::collections::HashMap<String, Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        username: Option<String>,
        password: Option<String>,
        auth: Option<String>,
    }
    let config: DockerConfig = serde_json::from_slice(json).ok()?;
    // Keys are written many ways (`https://index.docker.io/v1/`,
    // `docker.io`, `registry:5000`): compare hosts, Docker Hub's under one name.
    let hub = |host: &str| match host {
        "docker.io" | "registry-1.docker.io" => "index.docker.io".to_owned(),
        other => other.to_owned(),
    };
    let entry = config.auths.iter().find_map(|(key, entry)| {
        let host = key
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default();
        (hub(host) == hub(registry)).then_some(entry)
    })?;
    match (&entry.username, &entry.password, &entry.auth) {
        (Some(user), Some(password), _) => {
            Some(RegistryAuth::Basic(user.clone(), password.clone()))
        }
        (_, _, Some(auth)) => {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth)
                .ok()?;
            let text = String::from_utf8(decoded).ok()?;
            let (user, password) = text.split_once(':')?;
            Some(RegistryAuth::Basic(user.to_owned(), password.to_owned()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_fetch_error_names_its_reason_and_only_an_unreachable_source_is_retried() {
        let table = [
            (FetchError::Missing("m".into()), "SourceMissing", false),
            (
                FetchError::Unreachable("u".into()),
                "SourceUnreachable",
                true,
            ),
            (
                FetchError::Unauthorized("a".into()),
                "SourceUnauthorized",
                false,
            ),
            (FetchError::Untrusted("t".into()), "SourceUntrusted", false),
            (
                FetchError::DigestMismatch("d".into()),
                "DigestMismatch",
                false,
            ),
            (FetchError::TooLarge("l".into()), "LimitsExceeded", false),
        ];
        for (error, reason, transient) in table {
            assert_eq!(error.reason(), reason, "{error:?}");
            assert_eq!(error.is_transient(), transient, "{error:?}");
        }
    }

    #[tokio::test]
    async fn a_download_stops_at_the_limit() {
        use tokio::io::AsyncWriteExt as _;
        let mut capped = Capped {
            bytes: Vec::new(),
            max: 4,
        };
        capped.write_all(b"abcd").await.unwrap();
        let err = capped.write_all(b"e").await.unwrap_err();
        assert!(err.to_string().contains("limit of 4 bytes"), "{err}");
        assert_eq!(capped.bytes, b"abcd");
    }

    #[test]
    fn a_refused_certificate_is_found_inside_the_io_error_that_carries_it() {
        #[derive(Debug, thiserror::Error)]
        #[error("error sending request")]
        struct Outer(#[source] std::io::Error);
        let refused_by_tls = Outer(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        ));
        let refused = |e: &Outer| certificate_refused(&crate::text::error_chain(e));
        assert!(refused(&refused_by_tls));
        let other = Outer(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        ));
        assert!(!refused(&other));
        let handshake = Outer(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::HandshakeNotComplete,
        ));
        assert!(!refused(&handshake), "only the certificate's refusal");
    }

    fn pull_secret(type_: &str) -> Secret {
        Secret {
            type_: Some(type_.to_owned()),
            data: Some(
                [(
                    ".dockerconfigjson".to_owned(),
                    k8s_openapi::ByteString(
                        br#"{"auths": {"r.example": {"username": "u", "password": "p"}}}"#.to_vec(),
                    ),
                )]
                .into(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_pull_secret_must_be_a_dockerconfigjson_one() {
        assert!(pull_auth(Some(&pull_secret(PULL_SECRET_TYPE)), "ns", "s", "r.example").is_ok());
        let err = pull_auth(Some(&pull_secret("Opaque")), "ns", "s", "r.example")
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "Secret ns/s is of type Opaque, not kubernetes.io/dockerconfigjson (kubectl create secret docker-registry makes one)"
        );
    }

    fn ca_map(pem: &str) -> ConfigMap {
        ConfigMap {
            data: Some([(CA_BUNDLE_KEY.to_owned(), pem.to_owned())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_ca_bundle_is_read_whole_and_refused_when_it_holds_no_certificate() {
        let one = |cn: &str| {
            let key = rcgen::KeyPair::generate().unwrap();
            rcgen::CertificateParams::new(vec![cn.to_owned()])
                .unwrap()
                .self_signed(&key)
                .unwrap()
                .pem()
        };
        let bundle = format!("{}{}", one("a.example"), one("b.example"));
        let certs = ca_bundle(Some(&ca_map(&bundle)), "ns", "ca").unwrap();
        assert_eq!(certs.len(), 2, "every certificate of the bundle");

        let err = ca_bundle(Some(&ca_map("not a certificate")), "ns", "ca").unwrap_err();
        assert_eq!(
            err.to_string(),
            "ConfigMap ns/ca key ca.crt holds no PEM certificate"
        );
        let err = ca_bundle(Some(&ConfigMap::default()), "ns", "ca").unwrap_err();
        assert!(err.to_string().contains("has no ca.crt key"), "{err}");
        let err = ca_bundle(None, "ns", "ca").unwrap_err();
        assert!(err.to_string().contains("not found"), "{err}");
    }

    #[test]
    fn docker_config_credentials_are_found_by_registry() {
        let json = br#"{"auths": {
            "https://registry.example:5000/": {"username": "u", "password": "p"},
            "other.example": {"auth": "YWxpY2U6czNjcmV0"}
        }}"#;
        assert!(matches!(
            docker_config_auth(json, "registry.example:5000"),
            Some(RegistryAuth::Basic(u, p)) if u == "u" && p == "p"
        ));
        assert!(matches!(
            docker_config_auth(json, "other.example"),
            Some(RegistryAuth::Basic(u, p)) if u == "alice" && p == "s3cret"
        ));
        assert!(docker_config_auth(json, "missing.example").is_none());
        let hub =
            br#"{"auths": {"https://index.docker.io/v1/": {"username": "h", "password": "p"}}}"#;
        assert!(matches!(
            docker_config_auth(hub, "index.docker.io"),
            Some(RegistryAuth::Basic(u, _)) if u == "h"
        ));
        assert!(docker_config_auth(b"not json", "other.example").is_none());
    }
}

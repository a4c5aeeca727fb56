//! Image pulls from OCI registries, as a kubelet has its runtime do them.
//!
//! A container whose image lives in one of [`super::KubeletConfig::registries`]
//! is pulled before it starts: the reference (tag or digest) is resolved to
//! a manifest (an image index picks linux/amd64), with credentials from the
//! Pod's `imagePullSecrets`, every blob is checked against its descriptor's
//! sha256, and the layers are unpacked in order (OCI whiteouts applied) into
//! `<kubelet root>/images/sha256-<manifest hex>/rootfs`, the image config
//! beside it. `imagePullPolicy` decides whether a reference already pulled is
//! used as it is ([`PullPolicy`]).
//!
//! The process is not confined to the rootfs (no chroot): its program is
//! taken from there (see `launch::plan_pulled`), and it sees the machine's
//! filesystem plus its volumes. A static binary is what runs faithfully.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use kube::api::Api;
use oci_client::Reference;
use oci_client::client::{
    Certificate, CertificateEncoding, ClientConfig, ClientProtocol, linux_amd64_resolver,
};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// How long one pull may take before it counts as failed.
const PULL_DEADLINE: Duration = Duration::from_secs(300);

/// A registry the kubelet pulls from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryAccess {
    /// `host:port` as image references name it, e.g. `127.0.0.1:5000`.
    pub host: String,
    /// The PEM CA that signed its certificate; `None`: plain HTTP.
    pub ca_pem: Option<String>,
}

impl RegistryAccess {
    /// Access to a test [`crate::registry::Registry`]: plain HTTP for
    /// [`crate::registry::Registry::start`], its own CA for `start_private`.
    pub fn of(registry: &crate::registry::Registry) -> Self {
        RegistryAccess {
            host: registry.addr.clone(),
            ca_pem: registry.private.as_ref().map(|p| p.ca_pem.clone()),
        }
    }
}

/// `imagePullPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    /// Resolve the reference again on every container start.
    Always,
    /// Use the image already pulled for this reference, else pull.
    IfNotPresent,
    /// Use only an image already pulled for this reference.
    Never,
}

impl PullPolicy {
    /// The container's policy, or the default the API server would give it.
    pub fn of(container: &Container) -> PullPolicy {
        match container.image_pull_policy.as_deref() {
            Some("Always") => PullPolicy::Always,
            Some("IfNotPresent") => PullPolicy::IfNotPresent,
            Some("Never") => PullPolicy::Never,
            _ => PullPolicy::default_for(container.image.as_deref().unwrap_or("")),
        }
    }

    /// As Kubernetes defaults it: `Always` when the tag is `latest` or
    /// there is no tag (and no digest), else `IfNotPresent`.
    pub fn default_for(image: &str) -> PullPolicy {
        let (name, digest) = match image.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (image, None),
        };
        let last = name.rsplit('/').next().unwrap_or(name);
        let tag = match last.split_once(':') {
            Some((_, t)) => Some(t),
            None if digest.is_none() => Some("latest"),
            None => None,
        };
        if tag == Some("latest") {
            PullPolicy::Always
        } else {
            PullPolicy::IfNotPresent
        }
    }
}

/// The parts of an image's config a container start uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `NAME=value` entries, in order.
    pub env: Vec<String>,
    /// `uid[:gid]` (or a name); empty: as the runtime's default (root).
    pub user: String,
    pub working_dir: String,
}

impl ImageConfig {
    /// From an OCI/Docker image config blob (`{"config": {"Entrypoint": …}}`).
    pub fn parse(blob: &[u8]) -> Result<Self, String> {
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "PascalCase", default)]
        struct Inner {
            entrypoint: Option<Vec<String>>,
            cmd: Option<Vec<String>>,
            env: Option<Vec<String>>,
            user: Option<String>,
            working_dir: Option<String>,
        }
        #[derive(Deserialize)]
        struct Outer {
            #[serde(default)]
            config: Option<Inner>,
        }
        let outer: Outer =
            serde_json::from_slice(blob).map_err(|e| format!("the image config: {e}"))?;
        let c = outer.config.unwrap_or_default();
        Ok(ImageConfig {
            entrypoint: c.entrypoint.unwrap_or_default(),
            cmd: c.cmd.unwrap_or_default(),
            env: c.env.unwrap_or_default(),
            user: c.user.unwrap_or_default(),
            working_dir: c.working_dir.unwrap_or_default(),
        })
    }
}

/// An image unpacked on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledImage {
    /// The reference as the container spec wrote it.
    pub reference: String,
    /// `<host>/<repository>@sha256:<digest>`: the digest the reference
    /// resolved to, as a kubelet reports `imageID`.
    pub image_id: String,
    /// The (linux/amd64) image manifest's digest, which names the directory.
    pub manifest_digest: String,
    pub rootfs: PathBuf,
    pub config: ImageConfig,
}

/// What a failed pull shows as the container's waiting state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PullError {
    /// `ErrImagePull`, `ErrImageNeverPull` or `InvalidImageName`.
    pub reason: &'static str,
    pub message: String,
}

impl PullError {
    fn pull(image: &str, why: impl std::fmt::Display) -> Self {
        PullError {
            reason: "ErrImagePull",
            message: format!("Failed to pull image {image:?}: {why}"),
        }
    }
}

/// The images of one kubelet, under `<root>/images`.
pub(crate) struct ImageStore {
    dir: PathBuf,
    registries: Vec<RegistryAccess>,
    /// Keep the layers' file owners (possible as real root only).
    preserve_owners: bool,
}

/// What `<image dir>/image.json` and `refs/<hash>.json` record.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    manifest_digest: String,
    /// For a ref: the `imageID` the reference resolved to.
    #[serde(default)]
    image_id: String,
    #[serde(default)]
    config: ImageConfig,
}

impl ImageStore {
    pub(crate) fn new(root: &Path, registries: Vec<RegistryAccess>) -> Self {
        ImageStore {
            dir: root.join("images"),
            registries,
            preserve_owners: super::exec::can_switch_users(),
        }
    }

    /// The registry `image` is pulled from, if this kubelet pulls from it.
    pub(crate) fn access(&self, image: &str) -> Option<&RegistryAccess> {
        access_for(&self.registries, image)
    }

    fn image_dir(&self, manifest_digest: &str) -> Result<PathBuf, String> {
        let hex = sha256_hex(manifest_digest)?;
        Ok(self.dir.join(format!("sha256-{hex}")))
    }

    fn ref_path(&self, reference: &Reference) -> PathBuf {
        let key = hex::encode(Sha256::digest(reference.whole().as_bytes()));
        self.dir.join("refs").join(format!("{key}.json"))
    }

    /// The image already pulled for `reference`, if any.
    fn present(&self, written: &str, reference: &Reference) -> Option<PulledImage> {
        let text = std::fs::read(self.ref_path(reference)).ok()?;
        let r: Record = serde_json::from_slice(&text).ok()?;
        let dir = self.image_dir(&r.manifest_digest).ok()?;
        let text = std::fs::read(dir.join("image.json")).ok()?;
        let stored: Record = serde_json::from_slice(&text).ok()?;
        Some(PulledImage {
            reference: written.to_owned(),
            image_id: r.image_id,
            manifest_digest: r.manifest_digest,
            rootfs: dir.join("rootfs"),
            config: stored.config,
        })
    }

    fn remember(&self, reference: &Reference, image: &PulledImage) -> Result<(), String> {
        let path = self.ref_path(reference);
        let record = Record {
            manifest_digest: image.manifest_digest.clone(),
            image_id: image.image_id.clone(),
            config: ImageConfig::default(),
        };
        write_atomically(
            &path,
            &serde_json::to_vec(&record).map_err(|e| e.to_string())?,
        )
    }
}

/// The registry of `registries` that `image` names, if any.
pub(crate) fn access_for<'a>(
    registries: &'a [RegistryAccess],
    image: &str,
) -> Option<&'a RegistryAccess> {
    if registries.is_empty() {
        return None;
    }
    let reference: Reference = image.parse().ok()?;
    registries.iter().find(|r| r.host == reference.registry())
}

/// Makes sure the container's image is on this node, per `policy`, and
/// returns it. Runs as its own task; the worker waits for it.
pub(crate) async fn ensure(
    store: Arc<ImageStore>,
    client: kube::Client,
    pod: Pod,
    image: String,
    policy: PullPolicy,
) -> Result<PulledImage, PullError> {
    let reference: Reference = image.parse().map_err(|e| PullError {
        reason: "InvalidImageName",
        message: format!(
            "Failed to apply default image tag {image:?}: couldn't parse image name {image:?}: {e}"
        ),
    })?;
    let access = store
        .access(&image)
        .cloned()
        .ok_or_else(|| PullError::pull(&image, "this kubelet pulls from no such registry"))?;
    if policy != PullPolicy::Always
        && let Some(found) = store.present(&image, &reference)
    {
        return Ok(found);
    }
    if policy == PullPolicy::Never {
        return Err(PullError {
            reason: "ErrImageNeverPull",
            message: format!("Container image {image:?} is not present with pull policy of Never"),
        });
    }
    let (candidates, notes) = pull_credentials(&client, &pod, &access.host).await;
    let passwords: Vec<String> = candidates.iter().map(|c| c.password.clone()).collect();
    let pulled = tokio::time::timeout(
        PULL_DEADLINE,
        pull(&store, &access, &image, &reference, candidates, &notes),
    )
    .await
    .unwrap_or_else(|_| {
        Err(PullError::pull(
            &image,
            format!("the pull took longer than {} s", PULL_DEADLINE.as_secs()),
        ))
    });
    // Whatever a registry or a library put in an error, a password never
    // reaches the Pod's status.
    pulled.map_err(|mut e| {
        for p in passwords.iter().filter(|p| !p.is_empty()) {
            e.message = e.message.replace(p.as_str(), "<redacted>");
        }
        e
    })
}

/// One set of credentials from a pull Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credential {
    /// `namespace/name` of the Secret it came from.
    pub secret: String,
    pub username: String,
    pub password: String,
}

/// The credentials the Pod's `imagePullSecrets` hold for `host`, in order,
/// and notes on Secrets that could not be used.
async fn pull_credentials(
    client: &kube::Client,
    pod: &Pod,
    host: &str,
) -> (Vec<Credential>, Vec<String>) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut creds = Vec::new();
    let mut notes = Vec::new();
    let names = pod
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref())
        .into_iter()
        .flatten()
        .map(|r| r.name.clone());
    for name in names {
        match api.get_opt(&name).await {
            Ok(Some(secret)) => {
                let data = secret.data.unwrap_or_default();
                match credentials_in(&data, host) {
                    Ok(found) => {
                        creds.extend(found.into_iter().map(|(username, password)| Credential {
                            secret: format!("{ns}/{name}"),
                            username,
                            password,
                        }))
                    }
                    Err(e) => notes.push(format!("imagePullSecret {ns}/{name}: {e}")),
                }
            }
            Ok(None) => notes.push(format!("imagePullSecret {ns}/{name} not found")),
            Err(e) => notes.push(format!("reading imagePullSecret {ns}/{name}: {e}")),
        }
    }
    (creds, notes)
}

/// The (username, password) pairs a pull Secret's data holds for `host`:
/// `.dockerconfigjson` (`{"auths": {host: …}}`) or the older `.dockercfg`
/// (`{host: …}`); each entry gives `username`/`password` or `auth`
/// (base64 `user:password`). Keys may carry a scheme or path.
pub(crate) fn credentials_in(
    data: &BTreeMap<String, ByteString>,
    host: &str,
) -> Result<Vec<(String, String)>, String> {
    let entries = if let Some(ByteString(json)) = data.get(".dockerconfigjson") {
        let v: serde_json::Value =
            serde_json::from_slice(json).map_err(|e| format!(".dockerconfigjson: {e}"))?;
        v.get("auths").cloned().unwrap_or_default()
    } else if let Some(ByteString(json)) = data.get(".dockercfg") {
        serde_json::from_slice(json).map_err(|e| format!(".dockercfg: {e}"))?
    } else {
        return Err("neither .dockerconfigjson nor .dockercfg".into());
    };
    let mut out = Vec::new();
    for (key, entry) in entries.as_object().into_iter().flatten() {
        let key_host = key
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or("");
        if key_host != host {
            continue;
        }
        let field = |k: &str| entry.get(k).and_then(|v| v.as_str()).unwrap_or("");
        let (mut user, mut pass) = (field("username").to_owned(), field("password").to_owned());
        if (user.is_empty() || pass.is_empty()) && !field("auth").is_empty() {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(field("auth"))
                .map_err(|e| format!("{key}: auth is not base64: {e}"))?;
            let decoded =
                String::from_utf8(decoded).map_err(|_| format!("{key}: auth is not UTF-8"))?;
            let (u, p) = decoded
                .split_once(':')
                .ok_or_else(|| format!("{key}: auth is not user:password"))?;
            (user, pass) = (u.to_owned(), p.to_owned());
        }
        out.push((user, pass));
    }
    Ok(out)
}

fn registry_client(access: &RegistryAccess) -> Result<oci_client::Client, String> {
    // The registry client's TLS takes the process-wide provider; an error
    // means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (protocol, roots) = match &access.ca_pem {
        None => (ClientProtocol::Http, Vec::new()),
        Some(pem) => (
            ClientProtocol::Https,
            vec![Certificate {
                encoding: CertificateEncoding::Pem,
                data: pem.as_bytes().to_vec(),
            }],
        ),
    };
    // Not `Client::new`: on a bad configuration it falls back to defaults.
    oci_client::Client::try_from(ClientConfig {
        protocol,
        extra_root_certificates: roots,
        platform_resolver: Some(Box::new(linux_amd64_resolver)),
        connect_timeout: Some(Duration::from_secs(10)),
        read_timeout: Some(Duration::from_secs(60)),
        ..ClientConfig::default()
    })
    .map_err(|e| format!("configuring the registry client: {e}"))
}

fn refused(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => true,
        OciDistributionError::ServerError { code, .. } => matches!(code, 401 | 403),
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|o| matches!(o.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)),
        _ => false,
    }
}

fn not_found(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::ServerError { code: 404, .. } => true,
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|o| {
            matches!(
                o.code,
                OciErrorCode::ManifestUnknown
                    | OciErrorCode::NameUnknown
                    | OciErrorCode::NotFound
                    | OciErrorCode::BlobUnknown
            )
        }),
        _ => false,
    }
}

/// An error and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        source = cause.source();
    }
    s.replace('\n', " ")
}

async fn pull(
    store: &ImageStore,
    access: &RegistryAccess,
    image: &str,
    reference: &Reference,
    candidates: Vec<Credential>,
    notes: &[String],
) -> Result<PulledImage, PullError> {
    let host = &access.host;
    let noted = if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    };
    let anonymous = candidates.is_empty();
    let attempts: Vec<(Option<&Credential>, RegistryAuth)> = if anonymous {
        vec![(None, RegistryAuth::Anonymous)]
    } else {
        candidates
            .iter()
            .map(|c| {
                (
                    Some(c),
                    RegistryAuth::Basic(c.username.clone(), c.password.clone()),
                )
            })
            .collect()
    };
    let mut refusals = Vec::new();
    for (cred, auth) in attempts {
        let oci = registry_client(access).map_err(|e| PullError::pull(image, e))?;
        match oci
            .pull_image_manifest_and_list_digest(reference, &auth)
            .await
        {
            Ok((manifest, digest, list_digest)) => {
                let resolved = list_digest.unwrap_or_else(|| digest.clone());
                let image_id = format!("{host}/{}@{resolved}", reference.repository());
                let pulled = fetch(store, &oci, reference, &manifest, &digest)
                    .await
                    .map_err(|e| PullError::pull(image, e))?;
                let pulled = PulledImage {
                    reference: image.to_owned(),
                    image_id,
                    ..pulled
                };
                store
                    .remember(reference, &pulled)
                    .map_err(|e| PullError::pull(image, e))?;
                return Ok(pulled);
            }
            Err(e) if refused(&e) => match cred {
                Some(c) => refusals.push(format!("Secret {} (user {:?})", c.secret, c.username)),
                None => {
                    return Err(PullError::pull(
                        image,
                        format!(
                            "the registry {host} refused anonymous access: the Pod has no imagePullSecrets with credentials for {host}{noted}"
                        ),
                    ));
                }
            },
            Err(e) if not_found(&e) => {
                let what = match (reference.digest(), reference.tag()) {
                    (Some(d), _) => format!("{}@{d}", reference.repository()),
                    (None, Some(t)) => format!("{}:{t}", reference.repository()),
                    (None, None) => reference.repository().to_owned(),
                };
                return Err(PullError::pull(
                    image,
                    format!("not found: the registry {host} has no image {what}"),
                ));
            }
            Err(e @ OciDistributionError::DigestError(_)) => {
                return Err(PullError::pull(
                    image,
                    format!(
                        "the manifest the registry {host} sent does not match its digest: {}",
                        chain(&e)
                    ),
                ));
            }
            Err(e) => {
                return Err(PullError::pull(
                    image,
                    format!("registry {host}: {}", chain(&e)),
                ));
            }
        }
    }
    Err(PullError::pull(
        image,
        format!(
            "the registry {host} refused the credentials in {}{noted}",
            refusals.join(", ")
        ),
    ))
}

/// Downloads and unpacks the image `manifest` describes, unless it is here.
async fn fetch(
    store: &ImageStore,
    oci: &oci_client::Client,
    reference: &Reference,
    manifest: &OciImageManifest,
    digest: &str,
) -> Result<PulledImage, String> {
    let dir = store.image_dir(digest)?;
    if !dir.join("image.json").exists() {
        let tmp = store.dir.join("tmp");
        std::fs::create_dir_all(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
        set_mode(&store.dir, 0o755)?;
        let staging = tempfile::tempdir_in(&tmp).map_err(|e| e.to_string())?;
        let mut config = Vec::new();
        oci.pull_blob(reference, &manifest.config, &mut config)
            .await
            .map_err(|e| format!("the image config {}: {}", manifest.config.digest, chain(&e)))?;
        verify(&manifest.config, Sha256::digest(&config).as_slice())?;
        let parsed = ImageConfig::parse(&config)?;
        let mut layers = Vec::new();
        for (i, layer) in manifest.layers.iter().enumerate() {
            let path = staging.path().join(format!("layer-{i}"));
            let mut file = tokio::fs::File::create(&path)
                .await
                .map_err(|e| format!("creating {}: {e}", path.display()))?;
            oci.pull_blob(reference, layer, &mut file)
                .await
                .map_err(|e| format!("layer {}: {}", layer.digest, chain(&e)))?;
            drop(file);
            layers.push((path, layer.clone()));
        }
        let image_dir = staging.path().join("image");
        let preserve = store.preserve_owners;
        let record = Record {
            manifest_digest: digest.to_owned(),
            image_id: String::new(),
            config: parsed,
        };
        let config_blob = config;
        let built = image_dir.clone();
        tokio::task::spawn_blocking(move || -> Result<(), String> {
            let rootfs = built.join("rootfs");
            std::fs::create_dir_all(&rootfs).map_err(|e| e.to_string())?;
            set_mode(&built, 0o755)?;
            set_mode(&rootfs, 0o755)?;
            for (path, layer) in &layers {
                verify_file(path, layer)?;
                unpack_layer(&rootfs, path, &layer.media_type, preserve)
                    .map_err(|e| format!("layer {}: {e}", layer.digest))?;
            }
            std::fs::write(built.join("config.json"), &config_blob).map_err(|e| e.to_string())?;
            std::fs::write(
                built.join("image.json"),
                serde_json::to_vec(&record).map_err(|e| e.to_string())?,
            )
            .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| format!("unpacking: {e}"))??;
        // Another Pod may have unpacked the same image meanwhile: then
        // the rename fails and its copy is as good as this one.
        if let Err(e) = std::fs::rename(&image_dir, &dir)
            && !dir.join("image.json").exists()
        {
            return Err(format!("moving the image into {}: {e}", dir.display()));
        }
    }
    let text = std::fs::read(dir.join("image.json")).map_err(|e| e.to_string())?;
    let stored: Record = serde_json::from_slice(&text).map_err(|e| e.to_string())?;
    Ok(PulledImage {
        reference: String::new(),
        image_id: String::new(),
        manifest_digest: digest.to_owned(),
        rootfs: dir.join("rootfs"),
        config: stored.config,
    })
}

fn sha256_hex(digest: &str) -> Result<&str, String> {
    digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| format!("digest {digest:?} is not a sha256 digest"))
}

/// Checks a blob's sha256 against its descriptor (whatever the client did).
fn verify(descriptor: &OciDescriptor, sha256: &[u8]) -> Result<(), String> {
    let want = sha256_hex(&descriptor.digest)?;
    let got = hex::encode(sha256);
    if got != want.to_ascii_lowercase() {
        return Err(format!(
            "blob {} has digest sha256:{got}: it does not match its descriptor",
            descriptor.digest
        ));
    }
    Ok(())
}

fn verify_file(path: &Path, descriptor: &OciDescriptor) -> Result<(), String> {
    let mut file =
        std::fs::File::open(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|e| e.to_string())?;
    verify(descriptor, hasher.finalize().as_slice())
}

/// A relative path with no `..`: an archive entry that stays inside the rootfs.
fn safe_relative(path: &Path) -> Result<PathBuf, String> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(format!("entry {} escapes the rootfs (..)", path.display()));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "entry {} is an absolute path; layer entries are relative",
                    path.display()
                ));
            }
        }
    }
    Ok(out)
}

const WHITEOUT: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

fn open_layer(blob: &Path, media_type: &str) -> Result<Box<dyn Read>, String> {
    let file = std::fs::File::open(blob).map_err(|e| e.to_string())?;
    if media_type.ends_with("gzip") {
        Ok(Box::new(flate2::read::GzDecoder::new(
            std::io::BufReader::new(file),
        )))
    } else if media_type.ends_with(".tar") || media_type.ends_with("tar") {
        Ok(Box::new(std::io::BufReader::new(file)))
    } else {
        Err(format!(
            "media type {media_type} is not supported (gzip or plain tar layers only)"
        ))
    }
}

/// Applies one layer to `rootfs`: first its whiteouts, which delete what
/// lower layers put there (`.wh.<name>` the path, `.wh..wh..opq` the
/// directory's contents), then its entries. Entries that are absolute or
/// climb out with `..` fail the pull; so does anything that would be
/// written through a symlink pointing outside the rootfs.
pub(crate) fn unpack_layer(
    rootfs: &Path,
    blob: &Path,
    media_type: &str,
    preserve_owners: bool,
) -> Result<(), String> {
    let root = std::fs::canonicalize(rootfs).map_err(|e| e.to_string())?;
    let mut archive = tar::Archive::new(open_layer(blob, media_type)?);
    for entry in archive.entries().map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        let path = safe_relative(&entry.path().map_err(|e| e.to_string())?)?;
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(target) = name.strip_prefix(WHITEOUT) else {
            continue;
        };
        let parent = path.parent().unwrap_or(Path::new(""));
        let Some(dir) = inside(&root, parent)? else {
            continue;
        };
        if name == OPAQUE {
            for child in std::fs::read_dir(&dir).map_err(|e| e.to_string())? {
                remove(&child.map_err(|e| e.to_string())?.path())?;
            }
        } else if target.is_empty() || target == "." || target == ".." {
            // `.wh..` would remove the directory itself, `.wh...` its parent.
            return Err(format!("whiteout {} names no entry", path.display()));
        } else {
            remove(&dir.join(target))?;
        }
    }
    let mut archive = tar::Archive::new(open_layer(blob, media_type)?);
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(preserve_owners);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    for entry in archive.entries().map_err(|e| e.to_string())? {
        let mut entry = entry.map_err(|e| e.to_string())?;
        let path = safe_relative(&entry.path().map_err(|e| e.to_string())?)?;
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(WHITEOUT))
        {
            continue;
        }
        if entry.header().entry_type().is_hard_link()
            && let Some(link) = entry.link_name().map_err(|e| e.to_string())?
        {
            safe_relative(&link)?;
        }
        if path.as_os_str().is_empty() {
            continue;
        }
        let unpacked = entry
            .unpack_in(&root)
            .map_err(|e| format!("{}: {}", path.display(), chain(&e)))?;
        if !unpacked {
            return Err(format!("entry {} escapes the rootfs", path.display()));
        }
    }
    Ok(())
}

/// `rel` under `root`, with symlinks resolved, if it exists and stays inside.
fn inside(root: &Path, rel: &Path) -> Result<Option<PathBuf>, String> {
    match std::fs::canonicalize(root.join(rel)) {
        Ok(p) if p.starts_with(root) => Ok(Some(p)),
        Ok(p) => Err(format!(
            "whiteout under {} resolves outside the rootfs ({})",
            rel.display(),
            p.display()
        )),
        Err(_) => Ok(None),
    }
}

fn remove(path: &Path) -> Result<(), String> {
    let r = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(_) => return Ok(()),
    };
    r.map_err(|e| format!("applying a whiteout to {}: {e}", path.display()))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", path.display()))
}

fn write_atomically(path: &Path, data: &[u8]) -> Result<(), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let tmp = dir.join(format!(".{}.tmp", uuid::Uuid::new_v4().simple()));
    std::fs::write(&tmp, data).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_defaults_as_kubernetes() {
        use PullPolicy::*;
        for (image, want) in [
            ("127.0.0.1:5000/app", Always),
            ("127.0.0.1:5000/app:latest", Always),
            ("app:latest@sha256:abc", Always),
            ("127.0.0.1:5000/app:v1", IfNotPresent),
            ("127.0.0.1:5000/app@sha256:abc", IfNotPresent),
            ("127.0.0.1:5000/team/app:1.2@sha256:abc", IfNotPresent),
        ] {
            assert_eq!(PullPolicy::default_for(image), want, "{image}");
        }
        let mut c = Container {
            image: Some("127.0.0.1:5000/app:v1".into()),
            ..Default::default()
        };
        assert_eq!(PullPolicy::of(&c), IfNotPresent);
        c.image_pull_policy = Some("Never".into());
        assert_eq!(PullPolicy::of(&c), Never);
        c.image_pull_policy = Some("Always".into());
        assert_eq!(PullPolicy::of(&c), Always);
    }

    #[test]
    fn only_images_of_listed_registries_are_pullable() {
        let regs = [RegistryAccess {
            host: "127.0.0.1:5000".into(),
            ca_pem: None,
        }];
        assert!(access_for(&regs, "127.0.0.1:5000/app:v1").is_some());
        assert!(access_for(&regs, "127.0.0.1:5000/team/app@sha256:0000000000000000000000000000000000000000000000000000000000000000").is_some());
        assert!(access_for(&regs, "127.0.0.1:5001/app:v1").is_none());
        assert!(access_for(&regs, "app:v1").is_none(), "docker.io");
        assert!(access_for(&[], "127.0.0.1:5000/app:v1").is_none());
    }

    #[test]
    fn pull_secrets_give_credentials_for_their_host_only() {
        let auth = base64::engine::general_purpose::STANDARD.encode("bob:s3cret");
        let json = serde_json::json!({"auths": {
            "127.0.0.1:5000": {"username": "alice", "password": "pw"},
            "https://127.0.0.1:5000/v1/": {"auth": auth},
            "127.0.0.1:6000": {"username": "eve", "password": "x"},
        }});
        let data = BTreeMap::from([(
            ".dockerconfigjson".to_string(),
            ByteString(json.to_string().into_bytes()),
        )]);
        let mut got = credentials_in(&data, "127.0.0.1:5000").unwrap();
        got.sort();
        assert_eq!(
            got,
            [
                ("alice".into(), "pw".into()),
                ("bob".into(), "s3cret".into())
            ]
        );
        let old = BTreeMap::from([(
            ".dockercfg".to_string(),
            ByteString(br#"{"127.0.0.1:6000": {"auth": "ZTp4"}}"#.to_vec()),
        )]);
        assert_eq!(
            credentials_in(&old, "127.0.0.1:6000").unwrap(),
            [("e".into(), "x".into())]
        );
        assert!(credentials_in(&BTreeMap::new(), "h").is_err());
    }

    #[test]
    fn the_image_config_gives_entrypoint_cmd_env_user_and_workdir() {
        let blob = br#"{"architecture":"amd64","os":"linux","config":{
            "Entrypoint":["/bin/app"],"Cmd":null,"Env":["PATH=/bin","A=1"],
            "User":"65534:65534","WorkingDir":"/srv"}}"#;
        let c = ImageConfig::parse(blob).unwrap();
        assert_eq!(c.entrypoint, ["/bin/app"]);
        assert!(c.cmd.is_empty());
        assert_eq!(c.env, ["PATH=/bin", "A=1"]);
        assert_eq!(c.user, "65534:65534");
        assert_eq!(c.working_dir, "/srv");
        assert_eq!(ImageConfig::parse(b"{}").unwrap(), ImageConfig::default());
    }

    #[test]
    fn a_blob_whose_content_does_not_match_its_digest_is_refused() {
        let data = b"layer bytes";
        let good = OciDescriptor {
            digest: format!("sha256:{}", hex::encode(Sha256::digest(data))),
            ..Default::default()
        };
        assert_eq!(verify(&good, Sha256::digest(data).as_slice()), Ok(()));
        let err = verify(&good, Sha256::digest(b"tampered").as_slice()).unwrap_err();
        assert!(err.contains("does not match its descriptor"), "{err}");
        let md5 = OciDescriptor {
            digest: "md5:abc".into(),
            ..Default::default()
        };
        assert!(verify(&md5, &[]).is_err());
    }

    /// A gzip tar layer from (path, content, kind) entries.
    fn layer(dir: &Path, name: &str, entries: &[(&str, &str, tar::EntryType)]) -> PathBuf {
        let path = dir.join(name);
        let gz = flate2::write::GzEncoder::new(
            std::fs::File::create(&path).unwrap(),
            flate2::Compression::fast(),
        );
        let mut b = tar::Builder::new(gz);
        for (p, content, kind) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_uid(0);
            h.set_gid(0);
            h.set_entry_type(*kind);
            h.set_mode(if *kind == tar::EntryType::Directory {
                0o755
            } else {
                0o644
            });
            if *kind == tar::EntryType::Symlink {
                h.set_size(0);
                // set_link_name refuses nothing, but append_data sets the path
                // through the long-name extension; names here are short.
                h.set_link_name(content).unwrap();
                b.append_data(&mut h, p, std::io::empty()).unwrap();
            } else {
                h.set_size(content.len() as u64);
                // Header::set_path refuses `..` and absolute paths, so raw
                // bytes go in the name field for the escape cases.
                let raw = p.as_bytes();
                let name = &mut h.as_old_mut().name;
                name[..raw.len()].copy_from_slice(raw);
                h.set_cksum();
                b.append(&h, content.as_bytes()).unwrap();
            }
        }
        b.into_inner().unwrap().finish().unwrap();
        path
    }

    const GZ: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

    #[test]
    fn layers_apply_in_order_with_whiteouts() {
        use tar::EntryType::{Directory, Regular, Symlink};
        let t = tempfile::tempdir().unwrap();
        let rootfs = t.path().join("rootfs");
        std::fs::create_dir(&rootfs).unwrap();
        let lower = layer(
            t.path(),
            "lower",
            &[
                ("etc/", "", Directory),
                ("etc/keep", "k", Regular),
                ("etc/gone", "g", Regular),
                ("var/", "", Directory),
                ("var/cache/", "", Directory),
                ("var/cache/a", "a", Regular),
                ("bin/", "", Directory),
                ("bin/app", "v1", Regular),
                ("bin/sh", "app", Symlink),
            ],
        );
        let upper = layer(
            t.path(),
            "upper",
            &[
                ("etc/.wh.gone", "", Regular),
                ("var/cache/.wh..wh..opq", "", Regular),
                ("var/cache/b", "b", Regular),
                ("bin/app", "v2", Regular),
            ],
        );
        unpack_layer(&rootfs, &lower, GZ, super::super::exec::can_switch_users()).unwrap();
        unpack_layer(&rootfs, &upper, GZ, false).unwrap();
        let read = |p: &str| std::fs::read_to_string(rootfs.join(p)).ok();
        assert_eq!(read("etc/keep").as_deref(), Some("k"));
        assert_eq!(read("etc/gone"), None, "whited out");
        assert!(!rootfs.join("etc/.wh.gone").exists(), "no marker files");
        assert_eq!(read("var/cache/a"), None, "opaque directory");
        assert_eq!(
            read("var/cache/b").as_deref(),
            Some("b"),
            "the same layer's own file stays"
        );
        assert_eq!(read("bin/app").as_deref(), Some("v2"), "upper layer wins");
        assert_eq!(read("bin/sh").as_deref(), Some("v2"), "symlink kept");
    }

    #[test]
    fn entries_that_escape_the_rootfs_fail_the_pull() {
        use tar::EntryType::{Directory, Regular, Symlink};
        let t = tempfile::tempdir().unwrap();
        let rootfs = t.path().join("rootfs");
        std::fs::create_dir(&rootfs).unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("victim"), "safe").unwrap();

        let dotdot = layer(
            t.path(),
            "dotdot",
            &[("../outside/victim", "pwned", Regular)],
        );
        let err = unpack_layer(&rootfs, &dotdot, GZ, false).unwrap_err();
        assert!(err.contains("escapes the rootfs"), "{err}");

        let absolute = layer(t.path(), "abs", &[("/tmp/x", "pwned", Regular)]);
        let err = unpack_layer(&rootfs, &absolute, GZ, false).unwrap_err();
        assert!(err.contains("absolute"), "{err}");

        // Through a symlink that points outside: refused, nothing written.
        let link = outside.to_str().unwrap().to_owned();
        let through = layer(
            t.path(),
            "through",
            &[
                ("d/", "", Directory),
                ("d/l", &link, Symlink),
                ("d/l/victim", "pwned", Regular),
            ],
        );
        assert!(unpack_layer(&rootfs, &through, GZ, false).is_err());
        let whiteout = layer(t.path(), "wh", &[("d/l/.wh.victim", "", Regular)]);
        assert!(unpack_layer(&rootfs, &whiteout, GZ, false).is_err());
        std::fs::create_dir_all(rootfs.join("d")).unwrap();
        for dots in ["d/.wh..", "d/.wh...", ".wh..."] {
            let w = layer(t.path(), "dots", &[(dots, "", Regular)]);
            let err = unpack_layer(&rootfs, &w, GZ, false).unwrap_err();
            assert!(err.contains("names no entry"), "{dots}: {err}");
        }
        assert!(rootfs.join("d").is_dir(), "`d/.wh..` did not remove d");
        assert_eq!(
            std::fs::read_to_string(outside.join("victim")).unwrap(),
            "safe"
        );
    }
}

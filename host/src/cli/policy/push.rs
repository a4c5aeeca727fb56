//! `etcd-steward policy push`: puts a component where an EtcdStatusPolicy
//! can read it (a ConfigMap in the operator's namespace, or an OCI
//! registry) and prints the EtcdStatusPolicy that pins it, on stdout and
//! nothing else there, so `... | kubectl apply -f -` ships it.
//!
//! What it guarantees:
//! - the printed pin is the sha256 of the very bytes pushed;
//! - a ConfigMap is created or replaced with server-side apply, in one
//!   request: client-side apply (`kubectl apply`) would copy the component
//!   into its last-applied annotation, which holds at most 256 KiB;
//! - a component larger than a ConfigMap can hold (1 MiB) is refused before
//!   anything is sent, pointing at `--oci`; so is a file that is not a
//!   WebAssembly component;
//! - an OCI artifact has the layout oras and wkg push and the operator
//!   pulls (the CNCF "Wasm OCI Artifact": config
//!   `application/vnd.wasm.config.v0+json`, one layer `application/wasm`),
//!   and is read back before the pin is printed: the registry holds it;
//! - no credential is printed or written: the registry password is read
//!   from the environment, and the EtcdStatusPolicy names a pull Secret.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{ArgGroup, Args};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use oci_client::client::{
    Certificate, CertificateEncoding, ClientConfig, ClientProtocol, Config, ImageLayer,
};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use crate::api::{
    ConfigMapPolicySource, DEFAULT_POLICY_KEY, EtcdStatusPolicy, EtcdStatusPolicySpec,
    OciPolicySource, PolicySource,
};
use crate::policy::source::WASM_LAYER_MEDIA_TYPE;

/// The config media type of a Wasm OCI artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";

/// Where the registry password is read from: never a flag, which `ps` and
/// shell histories would show.
pub const PASSWORD_ENV: &str = "ETCD_STEWARD_REGISTRY_PASSWORD";

/// The most a ConfigMap holds, keys and values together: the apiserver
/// refuses more.
const CONFIG_MAP_BYTES: usize = 1024 * 1024;

/// The field manager of the ConfigMap's server-side apply.
const FIELD_MANAGER: &str = "etcd-steward-policy-push";

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("destination").required(true).args(["configmap", "oci"])))]
pub struct PushArgs {
    /// The component (.wasm).
    #[arg(value_name = "FILE.wasm")]
    pub file: PathBuf,
    /// Create or replace this ConfigMap, the component under binaryData
    /// (up to 1 MiB: a Rust component; Python and JavaScript ones need
    /// --oci).
    #[arg(long, value_name = "NAME")]
    pub configmap: Option<String>,
    /// The ConfigMap's namespace: the operator's, where it reads policy
    /// sources [default: etcd-steward-system].
    #[arg(long, short = 'n', value_name = "NS", conflicts_with = "oci")]
    pub namespace: Option<String>,
    /// The binaryData key [default: policy.wasm].
    #[arg(long, value_name = "KEY", conflicts_with = "oci")]
    pub key: Option<String>,
    /// Push it as an OCI artifact to this reference
    /// (`registry/repository:tag`), any size.
    #[arg(long, value_name = "REF")]
    pub oci: Option<String>,
    /// Speak plain HTTP to the registry (the sandbox's, or one inside the
    /// cluster without TLS); the EtcdStatusPolicy says `insecure: true` too.
    // Not `requires = "oci"`: clap lets a required argument be missing when
    // it conflicts with one present, and --oci conflicts with --configmap.
    #[arg(long, conflicts_with = "configmap")]
    pub insecure: bool,
    /// PEM certificates of the private CA the registry's certificate
    /// chains to.
    #[arg(long, value_name = "PEM", conflicts_with_all = ["configmap", "insecure"])]
    pub ca_file: Option<PathBuf>,
    /// The registry account to push as; the password is read from
    /// $ETCD_STEWARD_REGISTRY_PASSWORD.
    #[arg(long, value_name = "USER", conflicts_with_all = ["configmap", "insecure"])]
    pub username: Option<String>,
    /// Named in the EtcdStatusPolicy as spec.source.oci.pullSecret: a
    /// kubernetes.io/dockerconfigjson Secret in the operator's namespace
    /// the operator pulls with.
    #[arg(long, value_name = "SECRET", conflicts_with_all = ["configmap", "insecure"])]
    pub pull_secret: Option<String>,
    /// Named in the EtcdStatusPolicy as spec.source.oci.caConfigMap: a
    /// ConfigMap in the operator's namespace whose ca.crt holds the
    /// registry's CA.
    #[arg(long, value_name = "CONFIGMAP", conflicts_with_all = ["configmap", "insecure"])]
    pub ca_config_map: Option<String>,
    /// The EtcdStatusPolicy's name [default: the ConfigMap's name, or the
    /// repository's last path segment].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
}

pub fn run(args: PushArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let policy = runtime.block_on(push(&args))?;
    print!("{}", serde_saphyr::to_string(&policy)?);
    Ok(ExitCode::SUCCESS)
}

/// Pushes the component and returns the EtcdStatusPolicy that pins it.
pub async fn push(args: &PushArgs) -> anyhow::Result<EtcdStatusPolicy> {
    let bytes =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    check_component(&args.file, &bytes)?;
    let digest = format!("sha256:{}", crate::policy::digest(&bytes));
    let source = match (&args.configmap, &args.oci) {
        (Some(name), None) => {
            let namespace = args.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
            let key = args.key.as_deref().unwrap_or(DEFAULT_POLICY_KEY);
            to_config_map(namespace, name, key, &args.file, bytes).await?;
            PolicySource {
                config_map: Some(ConfigMapPolicySource {
                    name: name.clone(),
                    key: (key != DEFAULT_POLICY_KEY).then(|| key.to_owned()),
                }),
                oci: None,
            }
        }
        (None, Some(reference)) => {
            to_registry(args, reference, bytes, &digest).await?;
            PolicySource {
                config_map: None,
                oci: Some(OciPolicySource {
                    reference: reference.clone(),
                    insecure: args.insecure,
                    pull_secret: args.pull_secret.clone(),
                    ca_config_map: args.ca_config_map.clone(),
                }),
            }
        }
        // clap's group makes it exactly one.
        _ => bail!("name exactly one of --configmap and --oci"),
    };
    let name = match &args.name {
        Some(name) => name.clone(),
        None => default_name(args.configmap.as_deref(), args.oci.as_deref())?,
    };
    Ok(EtcdStatusPolicy::new(
        &name,
        EtcdStatusPolicySpec {
            digest,
            source,
            limits: Default::default(),
        },
    ))
}

/// The operator's namespace unless it was deployed elsewhere.
const DEFAULT_NAMESPACE: &str = "etcd-steward-system";

/// A WebAssembly component, by its header: `\0asm`, then a version whose
/// layer field is 1 (a core module's is 0). What it is beyond that is the
/// operator's to find when it loads it, as it would for any source.
fn check_component(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let file = path.display();
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        bail!("{file} is not WebAssembly (no \\0asm header)");
    }
    if bytes[6..8] != [1, 0] {
        bail!(
            "{file} is a core WebAssembly module, not a component: build it for the \
             steward:status/status-policy world (cargo build --target wasm32-wasip2, \
             componentize-py, componentize-js)"
        );
    }
    Ok(())
}

/// The EtcdStatusPolicy's name when none is given: the ConfigMap's, or the
/// repository's last path segment (`policies/voters-down:v1` →
/// `voters-down`).
fn default_name(configmap: Option<&str>, oci: Option<&str>) -> anyhow::Result<String> {
    if let Some(name) = configmap {
        return Ok(name.to_owned());
    }
    let reference: Reference = oci.unwrap_or_default().parse()?;
    Ok(reference
        .repository()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned())
}

/// Creates or replaces the ConfigMap with server-side apply: other keys of
/// an existing ConfigMap, owned by other managers, stay.
async fn to_config_map(
    namespace: &str,
    name: &str,
    key: &str,
    file: &Path,
    bytes: Vec<u8>,
) -> anyhow::Result<()> {
    if bytes.len() + key.len() > CONFIG_MAP_BYTES {
        bail!(
            "{} is {} bytes, more than a ConfigMap holds (1 MiB; the apiserver refuses it): \
             push it to a registry with --oci REF",
            file.display(),
            bytes.len()
        );
    }
    let size = bytes.len();
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            key.to_owned(),
            k8s_openapi::ByteString(bytes),
        )])),
        ..Default::default()
    };
    let client = kube::Client::try_default()
        .await
        .context("connecting to the cluster of the current kubeconfig")?;
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    // The apply sends apiVersion and kind, which the typed object leaves out.
    let mut body = serde_json::to_value(&cm)?;
    body["apiVersion"] = "v1".into();
    body["kind"] = "ConfigMap".into();
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(|e| match &e {
        kube::Error::Api(s) if s.code == 404 => anyhow::anyhow!(
            "namespace {namespace} not found: policy sources live in the operator's namespace \
             (deploy/00-namespace.yaml creates etcd-steward-system; --namespace names another)"
        ),
        _ => anyhow::Error::new(e).context(format!("writing ConfigMap {namespace}/{name}")),
    })?;
    eprintln!("wrote {size} bytes to ConfigMap {namespace}/{name}, binaryData key {key}");
    Ok(())
}

/// Pushes the component as a Wasm OCI artifact, then reads the manifest
/// back to check the registry holds the pinned layer.
async fn to_registry(
    args: &PushArgs,
    reference: &str,
    bytes: Vec<u8>,
    digest: &str,
) -> anyhow::Result<()> {
    let parsed: Reference = reference
        .parse()
        .with_context(|| format!("{reference:?} is not an OCI reference"))?;
    let auth = match &args.username {
        None => RegistryAuth::Anonymous,
        Some(user) => {
            let password = std::env::var(PASSWORD_ENV).with_context(|| {
                format!("--username {user} needs the password in ${PASSWORD_ENV}")
            })?;
            RegistryAuth::Basic(user.clone(), password)
        }
    };
    let extra_roots = match &args.ca_file {
        None => Vec::new(),
        Some(path) => vec![Certificate {
            encoding: CertificateEncoding::Pem,
            data: std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        }],
    };
    // The registry client's TLS takes the process-wide provider, as in
    // `run`; an error means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Not `Client::new`: on a bad configuration it falls back to the
    // defaults, which would drop the CA (or turn plain HTTP into HTTPS).
    let client = Client::try_from(ClientConfig {
        protocol: if args.insecure {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        extra_root_certificates: extra_roots,
        ..ClientConfig::default()
    })
    .context("configuring the registry client")?;
    let title = args.file.file_name().map_or_else(
        || "policy.wasm".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let size = bytes.len();
    let layer = ImageLayer::new(
        bytes,
        WASM_LAYER_MEDIA_TYPE.to_owned(),
        Some(BTreeMap::from([(
            oci_client::annotations::ORG_OPENCONTAINERS_IMAGE_TITLE.to_owned(),
            title,
        )])),
    );
    let config = Config::new(
        wasm_config(digest).into_bytes(),
        WASM_CONFIG_MEDIA_TYPE.to_owned(),
        None,
    );
    let mut manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
    manifest.media_type = Some(OCI_IMAGE_MEDIA_TYPE.to_owned());
    client
        .push(&parsed, &[layer], config, &auth, Some(manifest))
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "pushing {reference}: {}",
                crate::text::one_line(&crate::text::error_chain(&e))
            )
        })?;
    let (pushed, manifest_digest) = client
        .pull_image_manifest(&parsed, &auth)
        .await
        .with_context(|| format!("reading back the manifest of {reference}"))?;
    let holds: Vec<&str> = pushed
        .layers
        .iter()
        .filter(|l| l.media_type == WASM_LAYER_MEDIA_TYPE)
        .map(|l| l.digest.as_str())
        .collect();
    if holds != [digest] {
        bail!(
            "{reference} holds {holds:?} after the push, not {digest}: someone pushed to it meanwhile"
        );
    }
    eprintln!("pushed {size} bytes to {reference} (manifest {manifest_digest})");
    Ok(())
}

/// The artifact's config: what the CNCF Wasm OCI Artifact layout asks for,
/// and no time, so the same component pushes as the same manifest.
fn wasm_config(layer_digest: &str) -> String {
    serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_component_is_pushed() {
        let path = Path::new("p.wasm");
        assert!(check_component(path, b"\0asm\x0d\0\x01\0rest").is_ok());
        let core = check_component(path, b"\0asm\x01\0\0\0").unwrap_err();
        assert!(
            core.to_string().contains("core WebAssembly module"),
            "{core}"
        );
        let text = check_component(path, b"#!/bin/sh\n").unwrap_err();
        assert_eq!(
            text.to_string(),
            "p.wasm is not WebAssembly (no \\0asm header)"
        );
    }

    #[test]
    fn the_policy_is_named_after_its_source_unless_told() {
        assert_eq!(default_name(Some("raft-lag"), None).unwrap(), "raft-lag");
        assert_eq!(
            default_name(None, Some("127.0.0.1:5000/policies/voters-down:v1")).unwrap(),
            "voters-down"
        );
        let by_digest = format!("registry.example.com/voters-down@sha256:{}", "0".repeat(64));
        assert_eq!(default_name(None, Some(&by_digest)).unwrap(), "voters-down");
    }

    fn parse(args: &[&str]) -> Result<PushArgs, clap::Error> {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            push: PushArgs,
        }
        Cli::try_parse_from(std::iter::once("push").chain(args.iter().copied())).map(|c| c.push)
    }

    #[test]
    fn a_push_goes_to_exactly_one_destination_with_its_own_options() {
        let cm = parse(&["--configmap", "raft-lag", "p.wasm"]).unwrap();
        assert_eq!(cm.configmap.as_deref(), Some("raft-lag"));
        assert!(!cm.insecure);
        let oci = parse(&["--oci", "r.example/p:v1", "--insecure", "p.wasm"]).unwrap();
        assert!(oci.insecure);
        for wrong in [
            &["p.wasm"][..],
            &["--configmap", "a", "--oci", "r.example/p:v1", "p.wasm"],
            &["--configmap", "a", "--insecure", "p.wasm"],
            &["--configmap", "a", "--pull-secret", "s", "p.wasm"],
            &["--oci", "r.example/p:v1", "--namespace", "ops", "p.wasm"],
            &[
                "--oci",
                "r.example/p:v1",
                "--insecure",
                "--username",
                "u",
                "p.wasm",
            ],
        ] {
            assert!(parse(wrong).is_err(), "{wrong:?} is accepted");
        }
    }

    /// A component over a ConfigMap's size is refused before any request:
    /// no kubeconfig is read, so this runs without a cluster.
    #[tokio::test]
    async fn a_component_too_large_for_a_config_map_is_refused_before_it_is_sent() {
        let big = vec![0u8; CONFIG_MAP_BYTES];
        let err = to_config_map("ops", "big", "policy.wasm", Path::new("big.wasm"), big)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "big.wasm is {CONFIG_MAP_BYTES} bytes, more than a ConfigMap holds (1 MiB; the \
                 apiserver refuses it): push it to a registry with --oci REF"
            )
        );
    }

    #[test]
    fn the_config_is_the_wasm_artifact_one_and_has_no_time() {
        let config: serde_json::Value = serde_json::from_str(&wasm_config("sha256:aa")).unwrap();
        assert_eq!(
            config,
            serde_json::json!({"architecture": "wasm", "os": "wasip2", "layerDigests": ["sha256:aa"]})
        );
    }

    /// What is printed is an EtcdStatusPolicy the CRD accepts: the pin, the
    /// source, and for a ConfigMap the key only when it is not the default.
    #[test]
    fn the_printed_policy_pins_the_digest_and_names_the_source() {
        let policy = EtcdStatusPolicy::new(
            "raft-lag",
            EtcdStatusPolicySpec {
                digest: format!("sha256:{}", "a".repeat(64)),
                source: PolicySource {
                    config_map: Some(ConfigMapPolicySource {
                        name: "raft-lag".into(),
                        key: None,
                    }),
                    oci: None,
                },
                limits: Default::default(),
            },
        );
        let yaml = serde_saphyr::to_string(&policy).unwrap();
        let back: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(
            back,
            serde_json::json!({
                "apiVersion": "etcd.steward.dev/v1alpha1",
                "kind": "EtcdStatusPolicy",
                "metadata": {"name": "raft-lag"},
                "spec": {
                    "digest": format!("sha256:{}", "a".repeat(64)),
                    "source": {"configMap": {"name": "raft-lag"}}
                }
            })
        );
    }
}

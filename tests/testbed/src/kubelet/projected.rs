//! Projected volumes, as the kubelet fills them: ServiceAccount tokens
//! (TokenRequest, bound to the Pod), ConfigMaps, Secrets and the downward
//! API. This is what the ServiceAccount admission plugin's
//! `kube-api-access-*` volume needs, so a Pod that runs the operator finds
//! its token, CA and namespace at the standard path.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;

use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{
    ConfigMap, KeyToPath, Pod, ProjectedVolumeSource, Secret, ServiceAccount,
};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

/// The kubelet's default token lifetime for a projected token without one
/// (the ServiceAccount admission plugin asks for 3607 s).
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

/// Writes every source of `volume` into `dir`. An error is retried by the
/// caller, as a kubelet retries a volume that cannot be set up yet.
pub(crate) async fn populate(
    client: &Client,
    pod: &Pod,
    volume: &ProjectedVolumeSource,
    dir: &Path,
    ip: Ipv4Addr,
    host_ip: Ipv4Addr,
) -> Result<(), String> {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for source in volume.sources.iter().flatten() {
        if let Some(t) = &source.service_account_token {
            let sa = pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_else(|| "default".into());
            let request: TokenRequest = serde_json::from_value(json!({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "audiences": t.audience.iter().collect::<Vec<_>>(),
                    "expirationSeconds": t.expiration_seconds.unwrap_or(DEFAULT_EXPIRATION_SECONDS),
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod.metadata.name,
                        "uid": pod.metadata.uid,
                    },
                },
            }))
            .map_err(|e| e.to_string())?;
            let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
            let token = api
                .create_token_request(&sa, &PostParams::default(), &request)
                .await
                .map_err(|e| format!("requesting a token for serviceaccount {sa:?}: {e}"))?;
            let token = token
                .status
                .map(|s| s.token)
                .unwrap_or_default()
                .unwrap_or_default();
            files.insert(t.path.clone(), token.into_bytes());
        }
        if let Some(c) = &source.config_map {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
            match api.get_opt(&c.name).await {
                Ok(Some(cm)) => {
                    let data: BTreeMap<String, Vec<u8>> = cm
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.into_bytes()))
                        .chain(
                            cm.binary_data
                                .unwrap_or_default()
                                .into_iter()
                                .map(|(k, ByteString(v))| (k, v)),
                        )
                        .collect();
                    project(&mut files, data, c.items.as_deref(), &c.name)?;
                }
                Ok(None) if c.optional == Some(true) => {}
                Ok(None) => return Err(format!("configmap {:?} not found", c.name)),
                Err(e) => return Err(format!("reading configmap {:?}: {e}", c.name)),
            }
        }
        if let Some(s) = &source.secret {
            let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
            match api.get_opt(&s.name).await {
                Ok(Some(secret)) => {
                    let data = secret
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, ByteString(v))| (k, v))
                        .collect();
                    project(&mut files, data, s.items.as_deref(), &s.name)?;
                }
                Ok(None) if s.optional == Some(true) => {}
                Ok(None) => return Err(format!("secret {:?} not found", s.name)),
                Err(e) => return Err(format!("reading secret {:?}: {e}", s.name)),
            }
        }
        if let Some(d) = &source.downward_api {
            for item in d.items.iter().flatten() {
                let Some(f) = &item.field_ref else {
                    return Err(format!(
                        "downwardAPI {:?}: only fieldRef is supported by the local kubelet",
                        item.path
                    ));
                };
                let value =
                    super::launch::field(pod, &f.field_path, ip, host_ip).ok_or_else(|| {
                        format!("downwardAPI fieldRef {} is not supported", f.field_path)
                    })?;
                files.insert(item.path.clone(), value.into_bytes());
            }
        }
        if source.cluster_trust_bundle.is_some() || source.pod_certificate.is_some() {
            return Err("clusterTrustBundle and podCertificate projections are not supported by the local kubelet".into());
        }
    }
    write_all(dir, &files, volume.default_mode.unwrap_or(0o644))
}

fn project(
    files: &mut BTreeMap<String, Vec<u8>>,
    mut data: BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    source: &str,
) -> Result<(), String> {
    match items {
        None => files.extend(data),
        Some(items) => {
            for item in items {
                let value = data
                    .remove(&item.key)
                    .ok_or_else(|| format!("{source:?} has no key {:?}", item.key))?;
                files.insert(item.path.clone(), value);
            }
        }
    }
    Ok(())
}

fn write_all(dir: &Path, files: &BTreeMap<String, Vec<u8>>, mode: i32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    // Directories 0755 and files defaultMode (0644 unless the Pod says
    // otherwise), as a kubelet writes them: readable by any user a
    // container runs as.
    let mkdir = |d: &Path| -> Result<(), String> {
        std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("chmod {}: {e}", d.display()))
    };
    mkdir(dir)?;
    for (path, data) in files {
        // Paths come from the Pod spec, which the apiserver validated:
        // relative, no `..`.
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            mkdir(parent)?;
        }
        std::fs::write(&file, data).map_err(|e| format!("writing {}: {e}", file.display()))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode as u32))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

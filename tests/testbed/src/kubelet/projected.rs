//! Projected volumes, as the kubelet fills them: ServiceAccount tokens
//! (TokenRequest, bound to the Pod), ConfigMaps, Secrets and the downward
//! API. This is what the ServiceAccount admission plugin's
//! `kube-api-access-*` volume needs, so a Pod that runs the operator finds
//! its token, CA and namespace at the standard path.
//!
//! Files are written as the kubelet's AtomicWriter writes them: the payload
//! in a fresh hidden directory, `..data` a symlink to it, and every visible
//! name a symlink through `..data`. An update swaps `..data` with one
//! rename, so a reader never sees a half-written file or a payload mixed
//! from two versions by the writer; a process that opens `tls.crt` before
//! the swap and `tls.key` after it still gets a mismatched pair, as on a
//! real node. The worker calls [`populate`] again every
//! sync period, so a changed Secret reaches running containers, as it does
//! with a real kubelet; an unchanged payload writes nothing.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

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

/// The tokens a volume holds, by path, with when to ask again: after 80 %
/// of the lifetime the apiserver granted, as the kubelet's token manager
/// refreshes them, so a resync does not ask for a token every period.
#[derive(Default)]
pub(crate) struct Tokens(BTreeMap<String, (Instant, Vec<u8>)>);

/// Writes every source of `volume` into `dir`, replacing the previous
/// payload atomically if it changed; says whether it did. An error is
/// retried by the caller, as a kubelet retries a volume that cannot be set
/// up yet, and leaves the previous payload in place.
pub(crate) async fn populate(
    client: &Client,
    pod: &Pod,
    volume: &ProjectedVolumeSource,
    dir: &Path,
    (ip, host_ip): (Ipv4Addr, Ipv4Addr),
    tokens: &mut Tokens,
) -> Result<bool, String> {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for source in volume.sources.iter().flatten() {
        if let Some(t) = &source.service_account_token {
            let lifetime = t.expiration_seconds.unwrap_or(DEFAULT_EXPIRATION_SECONDS);
            if let Some((refresh_at, token)) = tokens.0.get(&t.path)
                && Instant::now() < *refresh_at
            {
                files.insert(t.path.clone(), token.clone());
                continue;
            }
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
                    "expirationSeconds": lifetime,
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
            let status = token.status.unwrap_or_default();
            // The lifetime granted, which the apiserver may have capped.
            let granted = status
                .expiration_timestamp
                .map(|e| e.0.as_second() - jiff::Timestamp::now().as_second())
                .unwrap_or(lifetime)
                .max(1);
            let token = status.token.unwrap_or_default();
            tokens.0.insert(
                t.path.clone(),
                (
                    Instant::now() + Duration::from_secs(granted as u64 * 8 / 10),
                    token.clone().into_bytes(),
                ),
            );
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

/// The kubelet's AtomicWriter: `dir/..<stamp>/` holds the payload,
/// `dir/..data` points at it, and each top-level name of the payload is a
/// symlink `name -> ..data/name`. Relative links, so they resolve inside a
/// container's bind mount of `dir` too.
fn write_all(dir: &Path, files: &BTreeMap<String, Vec<u8>>, mode: i32) -> Result<bool, String> {
    use std::os::unix::fs::PermissionsExt;
    let io = |what: &str, p: &Path| -> Box<dyn FnOnce(std::io::Error) -> String> {
        let what = what.to_owned();
        let p = p.display().to_string();
        Box::new(move |e: std::io::Error| format!("{what} {p}: {e}"))
    };
    // Directories 0755 and files defaultMode (0644 unless the Pod says
    // otherwise), as a kubelet writes them: readable by any user a
    // container runs as.
    let mkdir = |d: &Path| -> Result<(), String> {
        std::fs::create_dir_all(d).map_err(io("creating", d))?;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).map_err(io("chmod", d))
    };
    mkdir(dir)?;
    let data = dir.join(DATA);
    let previous = std::fs::read_link(&data).ok();
    if previous.is_some() && same_payload(&data, files) {
        return Ok(false);
    }
    // The kubelet's name for a payload: its time, to the nanosecond.
    let stamp = jiff::Timestamp::now()
        .strftime("..%Y_%m_%d_%H_%M_%S.%9f")
        .to_string();
    let payload = dir.join(&stamp);
    let written = write_payload(&payload, files, mode, &mkdir, &io);
    if let Err(e) = written {
        // No half payload (with a key in it) left behind for each retry.
        let _ = std::fs::remove_dir_all(&payload);
        return Err(e);
    }
    swap(dir, &data, &stamp, files, previous, &io)
}

type IoErr = dyn Fn(&str, &Path) -> Box<dyn FnOnce(std::io::Error) -> String>;

fn write_payload(
    payload: &Path,
    files: &BTreeMap<String, Vec<u8>>,
    mode: i32,
    mkdir: &dyn Fn(&Path) -> Result<(), String>,
    io: &IoErr,
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    mkdir(payload)?;
    for (path, bytes) in files {
        // Paths come from the Pod spec, which the apiserver validated:
        // relative, no `..`.
        let file = payload.join(path);
        if let Some(parent) = file.parent() {
            mkdir(parent)?;
        }
        std::fs::write(&file, bytes).map_err(io("writing", &file))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode as u32))
            .map_err(io("chmod", &file))?;
    }
    Ok(())
}

/// Points `..data` at the new payload `stamp`, links its names, and drops
/// the names and the payload it no longer has.
fn swap(
    dir: &Path,
    data: &Path,
    stamp: &str,
    files: &BTreeMap<String, Vec<u8>>,
    previous: Option<std::path::PathBuf>,
    io: &IoErr,
) -> Result<bool, String> {
    // The swap: a new link beside `..data`, renamed over it.
    let next = dir.join(DATA_TMP);
    let _ = std::fs::remove_file(&next);
    std::os::unix::fs::symlink(stamp, &next).map_err(io("linking", &next))?;
    std::fs::rename(&next, data).map_err(io("renaming", &next))?;
    let wanted: std::collections::BTreeSet<&str> =
        files.keys().filter_map(|p| p.split('/').next()).collect();
    for name in &wanted {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new(DATA).join(name), &link)
                .map_err(io("linking", &link))?;
        }
    }
    // Names the new payload no longer has, and the old payload.
    for entry in std::fs::read_dir(dir).map_err(io("reading", dir))? {
        let entry = entry.map_err(io("reading", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !wanted.contains(name.as_str()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = previous.filter(|old| *old != Path::new(stamp)) {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(true)
}

const DATA: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

/// The payload under `data` is exactly `files`.
fn same_payload(data: &Path, files: &BTreeMap<String, Vec<u8>>) -> bool {
    let mut found = 0;
    let mut pending = vec![data.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            return false;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let Ok(rel) = path.strip_prefix(data) else {
                return false;
            };
            let Some(want) = rel.to_str().and_then(|r| files.get(r)) else {
                return false;
            };
            if std::fs::read(&path).ok().as_ref() != Some(want) {
                return false;
            }
            found += 1;
        }
    }
    found == files.len()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    fn payload(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    /// As the kubelet's AtomicWriter: visible names are links through
    /// `..data`, an update swaps the payload and drops names it no longer
    /// has, and an unchanged payload writes nothing.
    #[test]
    fn payloads_are_swapped_whole_through_the_data_link() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("tls");
        let first = payload(&[("tls.crt", "one"), ("tls.key", "k1"), ("ca.crt", "ca")]);
        assert!(super::write_all(&dir, &first, 0o400).unwrap());
        let read = |n: &str| std::fs::read_to_string(dir.join(n)).ok();
        assert_eq!(read("tls.crt").as_deref(), Some("one"));
        assert!(
            std::fs::symlink_metadata(dir.join("tls.crt"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let old = std::fs::read_link(dir.join("..data")).unwrap();

        assert!(!super::write_all(&dir, &first, 0o400).unwrap(), "unchanged");
        assert_eq!(std::fs::read_link(dir.join("..data")).unwrap(), old);

        let second = payload(&[("tls.crt", "two"), ("tls.key", "k2")]);
        assert!(super::write_all(&dir, &second, 0o400).unwrap());
        assert_eq!(read("tls.crt").as_deref(), Some("two"));
        assert_eq!(read("tls.key").as_deref(), Some("k2"));
        assert_eq!(read("ca.crt"), None, "a key the Secret lost is gone");
        assert!(!dir.join(&old).exists(), "the old payload is removed");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 4, "..data, one payload, two links: {names:?}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("tls.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o400);
    }
}

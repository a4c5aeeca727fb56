//! The local volume provisioner: an external provisioner in the sense of
//! the Kubernetes storage docs, like rancher's local-path-provisioner.
//!
//! It owns the default StorageClass [`STORAGE_CLASS`] (WaitForFirstConsumer,
//! reclaimPolicy Delete). The real parts do the rest: the scheduler picks
//! the node and annotates the claim, the PV controller asks for a volume,
//! this provisioner creates a `local` PersistentVolume on a directory under
//! the kubelet's root, and the PV controller binds it. When the claim is
//! deleted the PV controller marks the volume Released, and this
//! provisioner deletes its directory and then the PV.
//!
//! It also does an external resizer's part, as a CSI driver's
//! external-resizer would for a volume that needs no node-side step: the
//! StorageClass allows expansion, the API server's admission lets a claim's
//! request grow, and this provisioner sets the PV's capacity and then the
//! claim's `status.capacity` to the new size. A directory has no size to
//! grow; the capacities are what the operator and `kubectl` read.
//!
//! A second class, [`CAPPED_STORAGE_CLASS`], gives volumes a real size, so
//! that a claim can fill up: its directory is a tmpfs of exactly the
//! requested bytes, and a write beyond them fails with ENOSPC as on a full
//! disk. Growing the claim remounts the tmpfs with the new size before the
//! capacities change; reclaiming unmounts it (lazily, if something still
//! has it open) before the directory goes. The mounts live in the private
//! mount namespace the testbed runs in (scripts/in-namespace.sh) and vanish
//! with it; outside one the provisioner refuses to mount, and the claim
//! stays Pending.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use kube_quantity::ParsedQuantity;
use serde_json::json;
use tokio::task::JoinHandle;

/// The default StorageClass every claim without a class gets.
pub const STORAGE_CLASS: &str = "standard";
/// A StorageClass of the same provisioner whose volumes hold no more than
/// their claim requests (a tmpfs of that size): a claim that can be full.
pub const CAPPED_STORAGE_CLASS: &str = "capped";
/// The provisioner name the StorageClass names.
pub const PROVISIONER: &str = "testbed.etcd-steward.dev/local";

const ANN_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
const ANN_PROVISIONER_BETA: &str = "volume.beta.kubernetes.io/storage-provisioner";
const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";

/// Where a claim's data lives: `<root>/pvc/<namespace>/<claim>/<claim uid>`.
/// One directory per claim uid, so a claim recreated under the same name
/// starts empty, as a new disk would.
pub fn claim_dir(root: &Path, namespace: &str, claim: &str, claim_uid: &str) -> PathBuf {
    root.join("pvc").join(namespace).join(claim).join(claim_uid)
}

/// The running provisioner; dropping it stops it.
pub struct Provisioner {
    tasks: Vec<JoinHandle<()>>,
}

impl Provisioner {
    /// Installs the StorageClass and starts provisioning under `root`.
    pub async fn start(client: Client, root: &Path) -> Result<Provisioner> {
        std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
        let root = std::fs::canonicalize(root)?;
        for (name, default) in [(STORAGE_CLASS, true), (CAPPED_STORAGE_CLASS, false)] {
            let mut class = json!({
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": name},
                "provisioner": PROVISIONER,
                "volumeBindingMode": "WaitForFirstConsumer",
                "reclaimPolicy": "Delete",
                "allowVolumeExpansion": true,
            });
            if default {
                class["metadata"]["annotations"] =
                    json!({"storageclass.kubernetes.io/is-default-class": "true"});
            }
            let class: StorageClass = serde_json::from_value(class)?;
            Api::<StorageClass>::all(client.clone())
                .patch(
                    name,
                    &PatchParams::apply("steward-testbed").force(),
                    &Patch::Apply(&class),
                )
                .await
                .with_context(|| format!("installing the StorageClass {name}"))?;
        }
        let claims = tokio::spawn(provision_claims(client.clone(), root.clone()));
        let resizes = tokio::spawn(resize_claims(client.clone()));
        let volumes = tokio::spawn(reclaim_volumes(client, root));
        Ok(Provisioner {
            tasks: vec![claims, resizes, volumes],
        })
    }
}

impl Drop for Provisioner {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn provision_claims(client: Client, root: PathBuf) {
    let api: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let mut claims = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(claim) = claims.next().await {
        match claim {
            Ok(claim) => {
                if let Err(e) = provision(&client, &root, &claim).await {
                    tracing::warn!(
                        "provisioning a volume for {}/{}: {e:#}",
                        claim.namespace().unwrap_or_default(),
                        claim.name_any()
                    );
                }
            }
            Err(e) => tracing::debug!("claim watch: {e}"),
        }
    }
}

/// Creates the PV for a claim the PV controller handed to this provisioner
/// once the scheduler has chosen its node; a claim already served is left
/// alone (the PV's name is derived from the claim's uid).
async fn provision(client: &Client, root: &Path, claim: &PersistentVolumeClaim) -> Result<()> {
    let ann = claim.annotations();
    let ours = [ANN_PROVISIONER, ANN_PROVISIONER_BETA]
        .iter()
        .any(|k| ann.get(*k).map(String::as_str) == Some(PROVISIONER));
    let Some(node) = ann.get(ANN_SELECTED_NODE) else {
        return Ok(());
    };
    let spec = claim.spec.clone().unwrap_or_default();
    let bound = spec.volume_name.as_deref().is_some_and(|v| !v.is_empty());
    if !ours || bound || claim.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let (ns, name, uid) = (
        claim.namespace().unwrap_or_default(),
        claim.name_any(),
        claim.uid().unwrap_or_default(),
    );
    let dir = claim_dir(root, &ns, &name, &uid);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let size = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "1Gi".into());
    if spec.storage_class_name.as_deref() == Some(CAPPED_STORAGE_CLASS) {
        // No PV without its size: the claim stays Pending, as when a real
        // provisioner fails.
        mount_capped(&dir, &size)?;
    }
    let capacity: BTreeMap<&str, String> = [("storage", size)].into();
    let pv: PersistentVolume = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": format!("pvc-{uid}"),
            "annotations": {ANN_PROVISIONED_BY: PROVISIONER},
        },
        "spec": {
            "capacity": capacity,
            "accessModes": spec.access_modes,
            "volumeMode": spec.volume_mode.unwrap_or_else(|| "Filesystem".into()),
            "storageClassName": spec.storage_class_name,
            "persistentVolumeReclaimPolicy": "Delete",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": ns,
                "name": name,
                "uid": uid,
            },
            "local": {"path": dir},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{
                "key": "kubernetes.io/hostname",
                "operator": "In",
                "values": [node],
            }]}]}},
        },
    }))?;
    match Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await
    {
        Ok(_) => {
            tracing::info!(claim = %format!("{ns}/{name}"), path = %dir.display(), "provisioned a local volume");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).context("creating the PersistentVolume"),
    }
}

async fn resize_claims(client: Client) {
    let api: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let mut claims = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(claim) = claims.next().await {
        let Ok(claim) = claim else { continue };
        if let Err(e) = resize(&client, &claim).await {
            tracing::warn!(
                "resizing {}/{}: {e:#}",
                claim.namespace().unwrap_or_default(),
                claim.name_any()
            );
        }
    }
}

fn storage(resources: Option<&BTreeMap<String, Quantity>>) -> Option<ParsedQuantity> {
    ParsedQuantity::try_from(resources?.get("storage")?).ok()
}

/// Grows a bound claim of ours whose request exceeds its capacity: the
/// PV's capacity first, then the claim's status, as the external-resizer
/// does for a volume that needs no node-side expansion.
async fn resize(client: &Client, claim: &PersistentVolumeClaim) -> Result<()> {
    let spec = claim.spec.clone().unwrap_or_default();
    let Some(volume) = spec.volume_name.filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    let Some(Quantity(requested)) = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .cloned()
    else {
        return Ok(());
    };
    let want = ParsedQuantity::try_from(requested.as_str())
        .with_context(|| format!("claim requests {requested:?}"))?;
    let has = storage(claim.status.as_ref().and_then(|s| s.capacity.as_ref()));
    if has.is_some_and(|has| has >= want) || claim.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = pvs.get(&volume).await.context("reading the claim's PV")?;
    if pv.annotations().get(ANN_PROVISIONED_BY).map(String::as_str) != Some(PROVISIONER) {
        return Ok(());
    }
    let pv_spec = pv.spec.clone().unwrap_or_default();
    if pv_spec.storage_class_name.as_deref() == Some(CAPPED_STORAGE_CLASS)
        && let Some(local) = &pv_spec.local
    {
        // The node-side step comes first: the capacities then tell the truth.
        remount_capped(Path::new(&local.path), &requested)?;
    }
    let patch = json!({"spec": {"capacity": {"storage": requested}}});
    pvs.patch(&volume, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("setting the PV's capacity")?;
    let claims: Api<PersistentVolumeClaim> =
        Api::namespaced(client.clone(), &claim.namespace().unwrap_or_default());
    let patch = json!({"status": {"capacity": {"storage": requested}}});
    claims
        .patch_status(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .context("setting the claim's status.capacity")?;
    tracing::info!(claim = %claim.name_any(), size = %requested, "resized a local volume");
    Ok(())
}

async fn reclaim_volumes(client: Client, root: PathBuf) {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    let mut volumes = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(pv) = volumes.next().await {
        let Ok(pv) = pv else { continue };
        if let Err(e) = reclaim(&api, &root, &pv).await {
            tracing::warn!("reclaiming {}: {e:#}", pv.name_any());
        }
    }
}

/// Deletes the data of a Released volume of ours, then the volume.
async fn reclaim(api: &Api<PersistentVolume>, root: &Path, pv: &PersistentVolume) -> Result<()> {
    let ours = pv.annotations().get(ANN_PROVISIONED_BY).map(String::as_str) == Some(PROVISIONER);
    let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    let spec = pv.spec.clone().unwrap_or_default();
    let delete = spec.persistent_volume_reclaim_policy.as_deref() == Some("Delete");
    if !(ours && released && delete) || pv.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    if let Some(local) = spec.local {
        let path = PathBuf::from(local.path);
        // Only ever a directory this provisioner made.
        if path.starts_with(root.join("pvc")) && path.exists() {
            unmount_capped(&path)?;
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("deleting {}", path.display()))?;
        }
    }
    match api.delete(&pv.name_any(), &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e).context("deleting the PersistentVolume"),
    }
}

/// Whether `dir` is the root of a mount (its device differs from its
/// parent's): a capped volume already mounted.
fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let parent = dir.parent().unwrap_or(dir);
    match (std::fs::metadata(dir), std::fs::metadata(parent)) {
        (Ok(d), Ok(p)) => d.dev() != p.dev(),
        _ => false,
    }
}

/// A capped volume's size in bytes.
fn bytes(size: &str) -> Result<u64> {
    ParsedQuantity::try_from(size)
        .ok()
        .and_then(|q| q.to_bytes_u64())
        .filter(|b| *b > 0)
        .with_context(|| format!("a capped volume needs a size in bytes, not {size:?}"))
}

/// Refuses to mount in the machine's own mount namespace: a tmpfs left
/// there would outlive the tests.
fn ensure_private_mounts() -> Result<()> {
    let own = std::fs::read_link("/proc/self/ns/mnt").context("reading /proc/self/ns/mnt")?;
    match std::fs::read_link("/proc/1/ns/mnt") {
        Ok(init) if init == own => anyhow::bail!(
            "refusing to mount a capped volume in PID 1's mount namespace; run under scripts/in-namespace.sh"
        ),
        _ => Ok(()),
    }
}

/// Mounts a tmpfs of `size` on `dir` (once), with the directory's own mode
/// and owner, so the volume looks as a `standard` one does but fills up.
fn mount_capped(dir: &Path, size: &str) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if is_mount_point(dir) {
        return Ok(());
    }
    ensure_private_mounts()?;
    let bytes = bytes(size)?;
    let meta = std::fs::metadata(dir)?;
    let options = format!(
        "size={bytes},mode={:o},uid={},gid={}",
        meta.mode() & 0o7777,
        meta.uid(),
        meta.gid()
    );
    nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .with_context(|| format!("mounting a tmpfs of {size} on {}", dir.display()))?;
    tracing::info!(path = %dir.display(), %size, "mounted a capped volume");
    Ok(())
}

/// Gives a capped volume its new size. The superblock is shared, so the
/// containers' mount namespaces see it too.
fn remount_capped(dir: &Path, size: &str) -> Result<()> {
    if !is_mount_point(dir) {
        anyhow::bail!("{} is not a mounted capped volume", dir.display());
    }
    let options = format!("size={}", bytes(size)?);
    nix::mount::mount(
        None::<&str>,
        dir,
        None::<&str>,
        nix::mount::MsFlags::MS_REMOUNT
            | nix::mount::MsFlags::MS_NOSUID
            | nix::mount::MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .with_context(|| format!("remounting {} with {size}", dir.display()))
}

/// Unmounts a capped volume before its directory is deleted; lazily when a
/// process still uses it, which then keeps what it has open.
fn unmount_capped(dir: &Path) -> Result<()> {
    use nix::mount::{MntFlags, umount2};
    if !is_mount_point(dir) {
        return Ok(());
    }
    match umount2(dir, MntFlags::empty()) {
        Err(nix::errno::Errno::EBUSY) => umount2(dir, MntFlags::MNT_DETACH),
        r => r,
    }
    .with_context(|| format!("unmounting {}", dir.display()))
}

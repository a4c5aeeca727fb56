//! Where a Pod's volumes live on the local node: emptyDir and projected
//! volumes under the Pod's directory, a claim at the path of the `local`
//! (or hostPath) PersistentVolume the PV controller bound it to.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Container, PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;

use super::super::projected::{Tokens, populate};
use super::Worker;

pub(super) enum VolumeError {
    /// Not ready yet; retried.
    NotYet(String),
    /// Never going to work for this Pod.
    Unsupported(String),
}

/// (mountPath, directory) for each of `container`'s volumeMounts, given
/// the directory of each volume.
pub(super) fn mounts_for(
    container: &Container,
    dirs: &BTreeMap<String, PathBuf>,
) -> Result<Vec<(String, PathBuf)>, String> {
    let mut mounts = Vec::new();
    for vm in container.volume_mounts.iter().flatten() {
        let mut dir = dirs
            .get(&vm.name)
            .cloned()
            .ok_or_else(|| format!("volumeMount {:?} names no volume of the Pod", vm.name))?;
        if let Some(sub) = vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
            dir = dir.join(sub);
        }
        mounts.push((vm.mount_path.clone(), dir));
    }
    Ok(mounts)
}

impl Worker {
    /// The directory of each volume the Pod's containers (init and regular)
    /// mount, by volume name; each is set up once. Projected volumes are
    /// remembered for [`Worker::sync_projected`].
    pub(super) async fn volumes(&mut self) -> Result<BTreeMap<String, PathBuf>, VolumeError> {
        let spec = self.pod.spec.as_ref();
        let mut dirs = BTreeMap::new();
        let mounts = self
            .inits
            .iter()
            .chain(std::iter::once(&self.main))
            .flat_map(|s| s.container.volume_mounts.iter().flatten());
        for vm in mounts {
            if dirs.contains_key(&vm.name) {
                continue;
            }
            let volume = spec
                .and_then(|s| s.volumes.as_ref())
                .and_then(|vs| vs.iter().find(|v| v.name == vm.name))
                .ok_or_else(|| {
                    VolumeError::Unsupported(format!(
                        "volumeMount {:?} names no volume of the Pod",
                        vm.name
                    ))
                })?;
            let dir = if let Some(pvc) = &volume.persistent_volume_claim {
                let dir = self.claim_dir(&pvc.claim_name).await?;
                if let Some(sc) = spec.and_then(|s| s.security_context.as_ref())
                    && let Some(gid) = sc.fs_group
                {
                    let only_on_mismatch =
                        sc.fs_group_change_policy.as_deref() == Some("OnRootMismatch");
                    if let Err(e) = std::fs::create_dir_all(&dir)
                        .and_then(|()| set_volume_ownership(&dir, gid as u32, only_on_mismatch))
                    {
                        // E.g. under `unshare -r`, where that group does not
                        // exist; containers run as the kubelet's user there.
                        tracing::warn!("fsGroup {gid} on {}: {e}; left as it is", dir.display());
                    }
                }
                dir
            } else if volume.empty_dir.is_some() {
                // World-writable, as a kubelet makes an emptyDir, so a
                // container running as any user can write to it.
                let dir = self.dir.join("volumes").join(&volume.name);
                std::fs::create_dir_all(&dir)
                    .and_then(|()| {
                        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                    })
                    .map_err(|e| {
                        VolumeError::Unsupported(format!("creating {}: {e}", dir.display()))
                    })?;
                dir
            } else if let Some(projected) = &volume.projected {
                let dir = self.dir.join("volumes").join(&volume.name);
                let (_, tokens) = self
                    .projected
                    .entry(volume.name.clone())
                    .or_insert_with(|| (dir.clone(), Tokens::default()));
                populate(
                    &self.node.client,
                    &self.pod,
                    projected,
                    &dir,
                    (self.ip, self.node.host_ip),
                    tokens,
                )
                .await
                .map_err(VolumeError::NotYet)?;
                dir
            } else {
                return Err(VolumeError::Unsupported(format!(
                    "volume {:?}: only persistentVolumeClaim, emptyDir and projected volumes are supported by the local kubelet",
                    volume.name
                )));
            };
            dirs.insert(vm.name.clone(), dir);
        }
        Ok(dirs)
    }

    /// Fills every projected volume again from the API, as a kubelet's
    /// periodic sync does: a Secret or ConfigMap that changed reaches the
    /// running container through an atomic swap of the files. A source that
    /// cannot be read now leaves the files as they are.
    pub(super) async fn sync_projected(&mut self) {
        let volumes = self.pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
        for (name, (dir, tokens)) in &mut self.projected {
            let Some(projected) = volumes
                .and_then(|vs| vs.iter().find(|v| &v.name == name))
                .and_then(|v| v.projected.as_ref())
            else {
                continue;
            };
            let synced = populate(
                &self.node.client,
                &self.pod,
                projected,
                dir,
                (self.ip, self.node.host_ip),
                tokens,
            )
            .await;
            match synced {
                Ok(true) => {
                    tracing::info!("pod {}/{}: volume {name:?} updated", self.ns, self.name)
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    "pod {}/{}: volume {name:?} not synced: {e}; the files stay as they were",
                    self.ns,
                    self.name
                ),
            }
        }
    }

    /// The directory of the volume bound to `claim`: the provisioner made a
    /// `local` PersistentVolume for it and the PV controller bound it.
    async fn claim_dir(&self, claim: &str) -> Result<PathBuf, VolumeError> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.node.client.clone(), &self.ns);
        let pvc = match api.get_opt(claim).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(VolumeError::NotYet(format!(
                    "persistentvolumeclaim {claim:?} not found"
                )));
            }
            Err(e) => {
                return Err(VolumeError::NotYet(format!(
                    "reading persistentvolumeclaim {claim:?}: {e}"
                )));
            }
        };
        let volume = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty());
        let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        let Some(volume) = volume.filter(|_| bound) else {
            return Err(VolumeError::NotYet(format!(
                "persistentvolumeclaim {claim:?} is not bound yet"
            )));
        };
        let pvs: Api<PersistentVolume> = Api::all(self.node.client.clone());
        let pv = pvs.get(&volume).await.map_err(|e| {
            VolumeError::NotYet(format!("reading persistentvolume {volume:?}: {e}"))
        })?;
        let spec = pv.spec.unwrap_or_default();
        match (spec.local, spec.host_path) {
            (Some(local), _) => Ok(PathBuf::from(local.path)),
            (None, Some(host)) => Ok(PathBuf::from(host.path)),
            (None, None) => Err(VolumeError::Unsupported(format!(
                "persistentvolume {volume:?}: only local and hostPath volumes are supported by the local kubelet"
            ))),
        }
    }
}

/// The Pod's `fsGroup` on a volume that supports ownership management (a
/// `local` PersistentVolume does), as the kubelet's SetVolumeOwnership:
/// every file and directory gets the group, group read/write, and
/// directories also group execute and the setgid bit, so a container
/// running as another user in that group can use the claim. With
/// `fsGroupChangePolicy: OnRootMismatch` nothing is done when the root
/// already has the group and those bits.
fn set_volume_ownership(
    dir: &std::path::Path,
    gid: u32,
    only_on_mismatch: bool,
) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    const RW: u32 = 0o660;
    const DIR: u32 = 0o2110;
    if only_on_mismatch {
        let m = std::fs::metadata(dir)?;
        if m.gid() == gid && m.mode() & (RW | DIR) == RW | DIR {
            return Ok(());
        }
    }
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let m = std::fs::symlink_metadata(&path)?;
        std::os::unix::fs::lchown(&path, None, Some(gid))?;
        if m.file_type().is_symlink() {
            continue;
        }
        let mut mode = m.mode() & 0o7777 | RW;
        if m.is_dir() {
            mode |= DIR;
            for e in std::fs::read_dir(&path)? {
                pending.push(e?.path());
            }
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn fs_group_makes_a_claim_usable_by_the_group() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("claim");
        std::fs::create_dir_all(dir.join("member")).unwrap();
        std::fs::write(dir.join("member/db"), "").unwrap();
        std::fs::set_permissions(
            dir.join("member/db"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::fs::set_permissions(dir.join("member"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        // The kubelet's own group: chown to it works as any user.
        let gid = std::fs::metadata(t.path()).unwrap().gid();
        super::set_volume_ownership(&dir, gid, false).unwrap();
        let mode = |p: &str| std::fs::metadata(dir.join(p)).unwrap().mode() & 0o7777;
        assert_eq!(mode("member"), 0o2770);
        assert_eq!(mode("member/db"), 0o660);
        assert_eq!(mode(""), 0o2775);
    }
}

//! Where a Pod's volumes live on the local node: emptyDir and projected
//! volumes under the Pod's directory, a claim at the path of the `local`
//! (or hostPath) PersistentVolume the PV controller bound it to.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;

use super::Worker;

pub(super) enum VolumeError {
    /// Not ready yet; retried.
    NotYet(String),
    /// Never going to work for this Pod.
    Unsupported(String),
}

impl Worker {
    /// (mountPath, directory) for each of the container's volumeMounts.
    pub(super) async fn volumes(&self) -> Result<Vec<(String, PathBuf)>, VolumeError> {
        let spec = self.pod.spec.as_ref();
        let mut mounts = Vec::new();
        for vm in self.container.volume_mounts.iter().flatten() {
            let volume = spec
                .and_then(|s| s.volumes.as_ref())
                .and_then(|vs| vs.iter().find(|v| v.name == vm.name))
                .ok_or_else(|| {
                    VolumeError::Unsupported(format!(
                        "volumeMount {:?} names no volume of the Pod",
                        vm.name
                    ))
                })?;
            let mut dir = if let Some(pvc) = &volume.persistent_volume_claim {
                self.claim_dir(&pvc.claim_name).await?
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
                super::super::projected::populate(
                    &self.node.client,
                    &self.pod,
                    projected,
                    &dir,
                    self.ip,
                    self.node.host_ip,
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
            if let Some(sub) = vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
                dir = dir.join(sub);
            }
            mounts.push((vm.mount_path.clone(), dir));
        }
        Ok(mounts)
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

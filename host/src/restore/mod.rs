//! Restoring a new cluster from a snapshot (`spec.bootstrap.restore`).
//!
//! Guarantees:
//! - Nothing starts from an S3 object the operator has not read whole
//!   first: before the seed EtcdMember is created, [`resolve`] reads the
//!   object, and its sha256 must be the one it was named with (an
//!   EtcdSnapshot's checksum, or `source.sha256`) and etcd's own trailing
//!   sha256 must match its bytes. A mismatch is
//!   `Stalled=True`/`RestoreChecksumMismatch`, and no member is created.
//! - A file on a claim can only be read by a Pod that mounts it: the
//!   seed's `fetch-snapshot` step makes the same two checks before
//!   etcdutl or etcd run, and a mismatch stops the seed's Pod in that
//!   init container (its termination message names
//!   `RestoreChecksumMismatch`); etcd never starts from it.
//! - The seed's Pod checks the sha256 again as it downloads
//!   ([`crate::cli::snapshot`]), so an object swapped in between is caught.
//! - Only the seed restores (`etcdutl snapshot restore` with the seed alone
//!   in its initial cluster, so the cluster and member IDs are new); the
//!   other members join it as learners, as in any bootstrap, and receive
//!   the data from it. One copy of the snapshot is read, and every member
//!   ends with the same data by raft, not by N restores that must agree.
//! - Existing data is never replaced: the restore is installed into the
//!   data directory only if it holds no member yet ([`pod`]).

pub mod pod;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::api::{EtcdCluster, MemberRestore, RestoreSource, SnapshotPhase};
use crate::context::Context;
use crate::snapshot::store::Destination;
use crate::snapshot::{Problem, reason};

/// The snapshot a recovery from total quorum loss restores the cluster
/// from: `status.lastRecovery.fromSnapshot`, while no cluster ID is
/// latched (once the restored seed forms, the recovery is over).
pub fn recovering_from(cluster: &EtcdCluster) -> Option<&str> {
    let status = cluster.status.as_ref()?;
    if status.cluster_id.is_some() {
        return None;
    }
    status.last_recovery.as_ref()?.from_snapshot.as_deref()
}

/// What the seed is restored from: the snapshot of a recovery in
/// progress, else the source `spec.bootstrap.restore` names, if any.
pub fn source(cluster: &EtcdCluster) -> Option<RestoreSource> {
    if let Some(name) = recovering_from(cluster) {
        return Some(RestoreSource {
            snapshot_ref: Some(k8s_openapi::api::core::v1::LocalObjectReference {
                name: name.to_owned(),
            }),
            s3: None,
            sha256: None,
            pvc: None,
        });
    }
    Some(
        cluster
            .spec
            .bootstrap
            .as_ref()?
            .restore
            .as_ref()?
            .source
            .clone(),
    )
}

/// The object and checksum `source` stands for, without reading it.
pub fn locate(source: &RestoreSource, ns: &str, ctx: &Context) -> Result<MemberRestore, Problem> {
    if let Some(r) = &source.snapshot_ref {
        let snap = ctx
            .watches
            .snapshots
            .store()
            .get(&ObjectRef::new(&r.name).within(ns))
            .ok_or_else(|| {
                Problem::retry(
                    reason::OBJECT_NOT_FOUND,
                    format!("EtcdSnapshot {ns}/{} does not exist", r.name),
                )
            })?;
        let status = snap.status.clone().unwrap_or_default();
        let verified = status
            .condition("Verified")
            .is_some_and(|c| c.status == "True");
        let (Some(SnapshotPhase::Complete), true, Some(artifact)) =
            (status.phase, verified, status.artifact.as_ref())
        else {
            return Err(Problem::retry(
                reason::NOT_VERIFIED_SOURCE,
                format!(
                    "EtcdSnapshot {ns}/{} is not Complete and Verified (phase {:?}); only a verified snapshot is restored",
                    r.name, status.phase
                ),
            ));
        };
        if snap.spec.destination.pvc.is_some() {
            let pvc = crate::snapshot::pod::parse_pvc_uri(&artifact.uri).ok_or_else(|| {
                Problem::fatal(
                    reason::INVALID_SPEC,
                    format!(
                        "EtcdSnapshot {ns}/{}: artifact {} is no pvc:// URI",
                        r.name, artifact.uri
                    ),
                )
            })?;
            return Ok(MemberRestore {
                s3: None,
                pvc: Some(pvc),
                sha256: hex_of(&artifact.checksum),
            });
        }
        let Some(s3) = snap.spec.destination.s3.as_ref() else {
            return Err(Problem::fatal(
                reason::INVALID_SPEC,
                "the EtcdSnapshot has no destination",
            ));
        };
        let key = artifact
            .uri
            .strip_prefix(&format!("s3://{}/", s3.bucket))
            .ok_or_else(|| {
                Problem::fatal(
                    reason::INVALID_SPEC,
                    format!(
                        "EtcdSnapshot {ns}/{}: artifact {} is not in bucket {}",
                        r.name, artifact.uri, s3.bucket
                    ),
                )
            })?;
        return Ok(MemberRestore {
            s3: Some(crate::api::S3Location {
                key: Some(key.to_owned()),
                ..s3.clone()
            }),
            pvc: None,
            sha256: hex_of(&artifact.checksum),
        });
    }
    match (&source.s3, &source.pvc, &source.sha256) {
        (Some(s3), _, Some(sha)) if s3.key.as_deref().is_some_and(|k| !k.is_empty()) => {
            Ok(MemberRestore {
                s3: Some(s3.clone()),
                pvc: None,
                sha256: hex_of(sha),
            })
        }
        (None, Some(pvc), Some(sha)) if pvc.sub_path.as_deref().is_some_and(|p| !p.is_empty()) => {
            Ok(MemberRestore {
                s3: None,
                pvc: Some(pvc.clone()),
                sha256: hex_of(sha),
            })
        }
        _ => Err(Problem::fatal(
            reason::INVALID_SPEC,
            "spec.bootstrap.restore.source needs snapshotRef, or s3 with the object's key (or pvc with the file's subPath) and sha256",
        )),
    }
}

/// What the seed's volume must hold at once while it restores: the
/// downloaded snapshot, the restored database (about as large), and the
/// WAL etcdutl preallocates.
pub fn restore_needs(snapshot_bytes: u64) -> u64 {
    snapshot_bytes.saturating_mul(2).saturating_add(WAL_BYTES)
}

const WAL_BYTES: u64 = 64 << 20;

/// Refuses a snapshot the seed's volume (`spec.storage.size`) cannot hold
/// while it restores: otherwise the restore fails for want of space
/// inside the seed's Pod.
fn fits(cluster: &EtcdCluster, snapshot_bytes: u64) -> Result<(), Problem> {
    let size = &cluster.spec.storage.size;
    let Some(volume) = kube_quantity::ParsedQuantity::try_from(size)
        .ok()
        .and_then(|q| q.to_bytes_i128())
    else {
        return Ok(());
    };
    let needs = restore_needs(snapshot_bytes);
    if i128::from(needs) > volume {
        return Err(Problem::fatal(
            reason::VOLUME_TOO_SMALL,
            format!(
                "the snapshot is {snapshot_bytes} bytes; restoring it needs {needs} bytes on the seed's volume (the snapshot, the restored database and its WAL), more than spec.storage.size {}",
                size.0
            ),
        ));
    }
    Ok(())
}

/// `sha256:<hex>` or `<hex>`, as hex.
fn hex_of(checksum: &str) -> String {
    checksum
        .strip_prefix("sha256:")
        .unwrap_or(checksum)
        .to_ascii_lowercase()
}

/// Locates the source and reads it whole: the restore the seed may start
/// from, or why none.
pub async fn resolve(
    cluster: &EtcdCluster,
    ctx: &Context,
) -> Option<Result<MemberRestore, Problem>> {
    let source = source(cluster)?;
    let ns = cluster.namespace().unwrap_or_default();
    // A recovery's source is another than the bootstrap's: checked apart.
    let uid = match recovering_from(cluster) {
        Some(name) => format!("{}/recovery/{name}", cluster.uid().unwrap_or_default()),
        None => cluster.uid().unwrap_or_default(),
    };
    if let Some(known) = ctx.restore_checked(&uid) {
        return Some(known);
    }
    let outcome = async {
        let restore = locate(&source, &ns, ctx)?;
        // A claim is read by the seed's own Pod, which checks the sha256
        // before etcdutl or etcd run (see the module doc).
        let Some(s3) = &restore.s3 else {
            return Ok(restore);
        };
        let credentials = crate::snapshot::credentials(ctx, &ns, s3).await?;
        let key = s3.key.clone().unwrap_or_default();
        let object = Destination::object(s3, key, &credentials)?;
        let size = object.verify(&restore.sha256).await?;
        fits(cluster, size)?;
        Ok(restore)
    }
    .await;
    ctx.record_restore_check(&uid, &outcome);
    Some(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_the_seeds_volume_cannot_hold_is_refused() {
        let mut cluster = crate::resources::fixtures::cluster(crate::resources::fixtures::spec());
        cluster.spec.storage.size =
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into());
        assert!(fits(&cluster, 400 << 20).is_ok());
        let err = fits(&cluster, 600 << 20).unwrap_err();
        assert_eq!(err.reason, reason::VOLUME_TOO_SMALL);
        assert!(err.message.contains("1Gi"), "{}", err.message);
    }

    #[test]
    fn checksums_are_compared_as_lowercase_hex() {
        assert_eq!(hex_of("sha256:ABCD"), "abcd");
        assert_eq!(hex_of("abcd"), "abcd");
    }
}

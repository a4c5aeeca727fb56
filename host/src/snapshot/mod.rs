//! The EtcdSnapshot controller: one snapshot of a cluster, taken from a
//! member in quorum, stored, read back, and (with `verify: Restore`)
//! restored once before it is called Complete.
//!
//! The same order as the other reconciles:
//!
//! ```text
//! observe  ->  write status  ->  act  ->  write status
//! ```
//!
//! - [`observe`] finds the source and the destination, or the [`Problem`]
//!   that stops this attempt. The source is the leader of a quorum the
//!   host verified itself, by the same probe and rule as the cluster's
//!   status ([`crate::facts::quorum`]); no snapshot is taken without one.
//! - The status is written before streaming (phase `Started`), and again
//!   with the outcome; a failure of the upload never skips the second write.
//! - An attempt that does not complete counts against `--snapshot-attempts`
//!   and is retried with backoff; the last one makes the phase `Failed`
//!   (`Stalled=True`, which kstatus reads as Failed).
//! - `Complete` means read back: the object's size and sha256 matched what
//!   was streamed, and etcd's own trailing sha256 matched the stream
//!   ([`stream`]). With `verify: Restore` it also means that a copy
//!   restored by `etcdutl snapshot restore` answered the operator with the
//!   snapshot's revision and keyspace hash ([`pod`]). Until then
//!   `Verified` is False; a snapshot that fails verification is `Failed`
//!   and never offered for restore.
//!
//! Who streams: to S3, the operator itself. The quorum check and the
//! stream use the same etcd client and the same verified facts at the same
//! moment; no image, scheduling or Pod has to work for a backup to be
//! taken; and memory stays bounded ([`store::PARTS_IN_FLIGHT`] parts). To
//! a PVC, a Pod of the operator's image ([`pod::save_pod`]), because only
//! a Pod can mount the claim; it streams from the leader the operator has
//! just verified and reports what it wrote and read back in its
//! termination message.

pub mod pod;
pub mod problem;
pub mod store;
pub mod stream;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType as KubeEventType;
use kube::runtime::reflector::ObjectRef;
use steward_policy_sdk::{self as sdk, Condition, ConditionStatus};

use crate::api::{
    EtcdSnapshot, EtcdSnapshotStatus, KeyspaceHash, PvcLocation, SnapshotArtifact, SnapshotPhase,
    VerifyMode, write_whole_status,
};
use crate::context::Context;
use crate::error::Error;
use crate::facts::quorum;
use crate::facts::{ProbeTarget, cluster_members, probe_cluster};
use crate::metrics::ClusterLabels;
pub use problem::{Problem, reason};
use store::{Credentials, Destination};

/// Where this attempt streams from and to.
pub struct Source {
    pub member: String,
    pub endpoint: String,
    pub version: String,
    /// Where the snapshot goes: `s3://...` or `pvc://...`.
    pub uri: String,
    /// The store, for an S3 destination (a PVC is written by a Pod).
    pub destination: Option<Destination>,
    /// The Secrets a save Pod calls etcd with (`spec.auth`, `spec.tls`).
    pub access: pod::EtcdAccess,
}

/// What one reconcile found.
pub struct Observed {
    pub snapshot: Arc<EtcdSnapshot>,
    pub source: Result<Source, Problem>,
}

/// What a completed attempt produced.
struct Taken {
    artifact: SnapshotArtifact,
    revision: i64,
    keyspace_hash: Option<KeyspaceHash>,
    took: Duration,
}

pub async fn reconcile_snapshot(
    snap: Arc<EtcdSnapshot>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let terminal = |s: &EtcdSnapshot| {
        matches!(
            s.status.as_ref().and_then(|s| s.phase),
            Some(SnapshotPhase::Complete | SnapshotPhase::Failed)
        )
    };
    if terminal(&snap) {
        sweep_pods(&snap, &ctx).await;
        return Ok(Action::await_change());
    }
    // The watch cache can lag this controller's own last write: its Pods
    // wake it right after it wrote. What it acts on is the live object.
    let api: Api<EtcdSnapshot> =
        Api::namespaced(ctx.client.clone(), &snap.namespace().unwrap_or_default());
    let Some(live) = api.get_opt(&snap.name_any()).await.map_err(Error::Kube)? else {
        return Ok(Action::await_change());
    };
    let snap = Arc::new(live);
    if terminal(&snap) {
        return Ok(Action::await_change());
    }
    let prev = snap.status.clone().unwrap_or_default();
    if prev.phase == Some(SnapshotPhase::Started) && prev.artifact.is_some() {
        return verify_by_restore(&snap, &ctx).await;
    }
    // A wake-up before the backoff is over (a failed attempt's Pod going
    // away) waits for it.
    if prev.phase == Some(SnapshotPhase::Pending)
        && let Some(at) = &prev.next_attempt_time
        && let Ok(wait) = Duration::try_from(at.0.duration_since(jiff::Timestamp::now()))
        && !wait.is_zero()
    {
        return Ok(Action::requeue(wait));
    }
    if let Some(location) = snap.spec.destination.pvc.clone() {
        return save_to_claim(snap, &location, ctx).await;
    }
    if prev.phase == Some(SnapshotPhase::Started) {
        // No reconcile of this object runs while another does, and each
        // one that writes Started for an S3 stream writes the outcome
        // before it returns: a live Started status without an artifact is
        // an attempt the operator stopped in.
        let cut = Problem::retry(
            reason::INTERRUPTED,
            format!(
                "attempt {} was cut off before it finished (the operator stopped); its upload was never completed",
                prev.attempts
            ),
        );
        return fail(&snap, &cut, &ctx).await;
    }
    let observed = observe(snap, &ctx).await;
    let source = match observed.source {
        Ok(source) => source,
        Err(problem) => return fail(&observed.snapshot, &problem, &ctx).await,
    };
    let snap = observed.snapshot;
    let started = started_status(&snap, &source);
    write(&snap, &started, &ctx).await?;

    match take(&snap, &source, &ctx).await {
        Ok(taken) => stored(&snap, started, &source.member, taken, &ctx).await,
        Err(problem) => {
            let mut snap = (*snap).clone();
            snap.status = Some(started);
            fail(&snap, &problem, &ctx).await
        }
    }
}

/// The snapshot is stored and read back: Complete, or on to a restore.
async fn stored(
    snap: &EtcdSnapshot,
    started: EtcdSnapshotStatus,
    member: &str,
    taken: Taken,
    ctx: &Context,
) -> Result<Action, Error> {
    if snap.spec.verify != VerifyMode::Restore {
        return complete(snap, started, member, taken, ReadBackOnly, ctx).await;
    }
    let desired = [
        cond(
            READY,
            ConditionStatus::False,
            reason::VERIFYING,
            format!(
                "{} is stored and read back; restoring a copy to verify it",
                taken.artifact.uri
            ),
        ),
        cond(
            VERIFIED,
            ConditionStatus::False,
            reason::VERIFYING,
            "read back; not restored yet".into(),
        ),
        cond(
            RECONCILING,
            ConditionStatus::True,
            reason::VERIFYING,
            "restoring a copy in a scratch Pod".into(),
        ),
        cond(
            STALLED,
            ConditionStatus::False,
            reason::VERIFYING,
            String::new(),
        ),
    ];
    let status = EtcdSnapshotStatus {
        artifact: Some(taken.artifact),
        revision: Some(taken.revision),
        keyspace_hash: taken.keyspace_hash,
        conditions: merged(snap, &started, &desired),
        ..started
    };
    write(snap, &status, ctx).await?;
    let mut snap = snap.clone();
    snap.status = Some(status);
    verify_by_restore(&snap, ctx).await
}

/// How often a Pod doing a snapshot's work is looked at, besides its
/// own changes (which the Pod watch delivers).
const POD_POLL: Duration = Duration::from_secs(5);

fn pods(snap: &EtcdSnapshot, ctx: &Context) -> Api<Pod> {
    Api::namespaced(ctx.client.clone(), &snap.namespace().unwrap_or_default())
}

/// The Pod of that name, if it is this snapshot's: one that another owner
/// controls is never read as this snapshot's report, nor deleted (`Err`
/// says whose it is not).
async fn own_pod(
    snap: &EtcdSnapshot,
    name: &str,
    ctx: &Context,
) -> Result<Result<Option<Pod>, String>, Error> {
    let Some(pod) = pods(snap, ctx).get_opt(name).await.map_err(Error::Kube)? else {
        return Ok(Ok(None));
    };
    let ours = pod
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == snap.metadata.uid.as_ref());
    Ok(if ours {
        Ok(Some(pod))
    } else {
        Err(format!(
            "Pod {name} exists and is not controlled by EtcdSnapshot {}; delete or rename it",
            snap.name_any()
        ))
    })
}

async fn delete_pod(snap: &EtcdSnapshot, name: &str, ctx: &Context) {
    match pods(snap, ctx)
        .delete(name, &DeleteParams::background())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => {
            tracing::warn!(snapshot = %snap.name_any(), pod = name, "deleting a snapshot's Pod: {e}")
        }
    }
}

/// How long a snapshot's Pod may take to start any container (an image
/// that cannot be pulled, a Pod that cannot be scheduled, a claim that
/// cannot attach) before the attempt counts as failed.
const POD_START_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a save Pod may run in all: beyond it (its node lost, say, so
/// it never ends) the attempt is `Interrupted` and tried again.
const SAVE_DEADLINE: Duration = Duration::from_secs(3600);
/// How long a deleted Pod may stay terminating before it is deleted with
/// no grace (its node is gone and will never confirm), so its name frees.
const TERMINATING_LIMIT: Duration = Duration::from_secs(120);
/// HashKV reads the whole keyspace: the deadline of that one call.
pub const HASH_KV_DEADLINE: Duration = Duration::from_secs(120);

fn age(t: Option<&Time>) -> Duration {
    since(t)
}

/// Waits for a Pod that is being deleted; one stuck terminating longer
/// than [`TERMINATING_LIMIT`] is deleted with no grace.
async fn wait_gone(snap: &EtcdSnapshot, p: &Pod, ctx: &Context) -> Action {
    if age(p.metadata.deletion_timestamp.as_ref()) > TERMINATING_LIMIT {
        let name = p.metadata.name.clone().unwrap_or_default();
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::background()
        };
        if let Err(e) = pods(snap, ctx).delete(&name, &force).await {
            tracing::warn!(snapshot = %snap.name_any(), pod = %name, "force-deleting a Pod stuck terminating: {e}");
        }
    }
    Action::requeue(POD_POLL)
}

/// A finished snapshot's Pods that are left (a delete that failed, or the
/// operator stopping between the status write and the delete): deleted,
/// so no restored copy keeps serving once its snapshot is done.
async fn sweep_pods(snap: &EtcdSnapshot, ctx: &Context) {
    let ns = snap.namespace().unwrap_or_default();
    let name = snap.name_any();
    for pod_name in [pod::save_pod_name(&name), pod::verify_pod_name(&name)] {
        let Some(p) = ctx
            .watches
            .pods
            .store()
            .get(&ObjectRef::new(&pod_name).within(&ns))
        else {
            continue;
        };
        let ours = p
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == snap.metadata.uid.as_ref());
        if ours && p.metadata.deletion_timestamp.is_none() {
            delete_pod(snap, &pod_name, ctx).await;
        }
    }
}

/// The cluster's pull Secrets, for a snapshot's Pods.
fn pull_secrets(
    snap: &EtcdSnapshot,
    ctx: &Context,
) -> Option<Vec<k8s_openapi::api::core::v1::LocalObjectReference>> {
    let ns = snap.namespace().unwrap_or_default();
    ctx.watches
        .clusters
        .store()
        .get(&ObjectRef::new(&snap.spec.cluster_ref.name).within(&ns))?
        .spec
        .image_pull_secrets
        .clone()
}

/// Creates a snapshot's Pod for the current attempt.
async fn create_pod(snap: &EtcdSnapshot, mut pod: Pod, ctx: &Context) -> Result<(), kube::Error> {
    let attempt = snap.status.as_ref().map_or(0, |s| s.attempts);
    pod::stamp(&mut pod, attempt, pull_secrets(snap, ctx));
    match pods(snap, ctx).create(&PostParams::default(), &pod).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// This attempt's Pod of that name: a Pod of an earlier attempt (its
/// delete failed) is deleted and reported as none yet.
async fn attempt_pod(
    snap: &EtcdSnapshot,
    name: &str,
    ctx: &Context,
) -> Result<Result<Option<Pod>, String>, Error> {
    let attempt = snap.status.as_ref().map_or(0, |s| s.attempts);
    Ok(match own_pod(snap, name, ctx).await? {
        Ok(Some(p)) if p.metadata.deletion_timestamp.is_some() => Ok(Some(p)),
        Ok(Some(p)) if pod::attempt_of(&p) != Some(attempt) => {
            delete_pod(snap, name, ctx).await;
            Ok(Some(p))
        }
        other => other,
    })
}

/// A `pvc` destination: the save Pod streams it; this reads its report.
/// Every outcome is written to the status before the Pod is deleted.
async fn save_to_claim(
    snap: Arc<EtcdSnapshot>,
    location: &PvcLocation,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let prev = snap.status.clone().unwrap_or_default();
    let name = pod::save_pod_name(&snap.name_any());
    let started = prev.phase == Some(SnapshotPhase::Started);
    let existing = match attempt_pod(&snap, &name, &ctx).await? {
        Ok(pod) => pod,
        Err(why) => return fail(&snap, &Problem::retry(reason::POD_FAILED, why), &ctx).await,
    };
    // A Pod being deleted, or one left from an earlier attempt (deleted
    // just now): wait until it is gone.
    if let Some(p) = &existing
        && (!started
            || p.metadata.deletion_timestamp.is_some()
            || pod::attempt_of(p) != Some(prev.attempts))
    {
        if p.metadata.deletion_timestamp.is_none() {
            delete_pod(&snap, &name, &ctx).await;
            return Ok(Action::requeue(POD_POLL));
        }
        return Ok(wait_gone(&snap, p, &ctx).await);
    }
    let Some(existing) = existing else {
        if started {
            let cut = Problem::retry(
                reason::INTERRUPTED,
                format!(
                    "attempt {}: its Pod {name} is gone before it reported",
                    prev.attempts
                ),
            );
            return fail(&snap, &cut, &ctx).await;
        }
        let observed = observe(snap, &ctx).await;
        let source = match observed.source {
            Ok(source) => source,
            Err(problem) => return fail(&observed.snapshot, &problem, &ctx).await,
        };
        let mut snap = (*observed.snapshot).clone();
        let started = started_status(&snap, &source);
        write(&snap, &started, &ctx).await?;
        snap.status = Some(started);
        let pod = pod::save_pod(
            &snap,
            location,
            &source.endpoint,
            &source.access,
            &ctx.config.operator_image,
        );
        if let Err(e) = create_pod(&snap, pod, &ctx).await {
            let problem = Problem::retry(reason::POD_FAILED, format!("creating Pod {name}: {e}"));
            return fail(&snap, &problem, &ctx).await;
        }
        return Ok(Action::requeue(POD_POLL));
    };
    let action = match pod::outcome(&existing) {
        pod::Outcome::Running => {
            if let Some(why) = pod::stuck(&existing, POD_START_TIMEOUT) {
                fail(&snap, &Problem::retry(reason::POD_FAILED, why), &ctx).await
            } else if age(existing.metadata.creation_timestamp.as_ref()) > SAVE_DEADLINE {
                let cut = Problem::retry(
                    reason::INTERRUPTED,
                    format!("Pod {name} did not finish within {SAVE_DEADLINE:?} (its node lost?)"),
                );
                fail(&snap, &cut, &ctx).await
            } else {
                return Ok(Action::requeue(POD_POLL));
            }
        }
        pod::Outcome::Failed { problem, .. } => fail(&snap, &problem, &ctx).await,
        pod::Outcome::Succeeded(message) => match pod::report(&message) {
            Some(pod::Report::Saved {
                size_bytes,
                sha256,
                revision,
                keyspace_hash,
            }) => {
                let file = pod::destination_file(location, &snap.name_any());
                let taken = Taken {
                    artifact: SnapshotArtifact {
                        uri: pod::pvc_uri(&location.claim_name, &file),
                        size_bytes: i64::try_from(size_bytes).unwrap_or(i64::MAX),
                        checksum: format!("sha256:{sha256}"),
                    },
                    revision,
                    keyspace_hash,
                    took: since(prev.start_time.as_ref()),
                };
                let member = prev.member.clone().unwrap_or_default();
                stored(&snap, prev, &member, taken, &ctx).await
            }
            _ => {
                let problem = Problem::retry(
                    reason::POD_FAILED,
                    format!("Pod {name} succeeded without a report the operator can read"),
                );
                fail(&snap, &problem, &ctx).await
            }
        },
    };
    // The outcome is in the status before the Pod, its only other record,
    // goes.
    if action.is_ok() {
        delete_pod(&snap, &name, &ctx).await;
    }
    action
}

fn since(t: Option<&Time>) -> Duration {
    t.and_then(|t| jiff::Timestamp::now().duration_since(t.0).try_into().ok())
        .unwrap_or_default()
}

/// What the stored artifact is, for the verify Pod to fetch.
fn stored_at<'a>(snap: &'a EtcdSnapshot, artifact: &SnapshotArtifact) -> Option<pod::Stored<'a>> {
    if let Some(s3) = &snap.spec.destination.s3 {
        let key = artifact.uri.strip_prefix(&format!("s3://{}/", s3.bucket))?;
        return Some(pod::Stored::S3 {
            location: s3,
            key: key.to_owned(),
        });
    }
    let pvc = snap.spec.destination.pvc.as_ref()?;
    let at = pod::parse_pvc_uri(&artifact.uri)?;
    (at.claim_name == pvc.claim_name).then(|| pod::Stored::Pvc {
        claim: &pvc.claim_name,
        file: at.sub_path.unwrap_or_default(),
    })
}

/// How long the restored copy may take to answer once its etcd runs: 2
/// minutes, plus a second per 16 MiB of snapshot (etcd opens and checks
/// its database before it serves).
fn verify_timeout(size_bytes: i64) -> Duration {
    Duration::from_secs(120 + (size_bytes.max(0) as u64 >> 24))
}

/// How long a verify Pod may take in all, from its creation: 10 minutes,
/// plus a second per 8 MiB (the download and the restore).
fn verify_deadline(size_bytes: i64) -> Duration {
    Duration::from_secs(600 + (size_bytes.max(0) as u64 >> 23))
}

/// `verify: Restore`: a scratch Pod restores the stored artifact and
/// serves it; the operator asks it for its revision and keyspace hash.
///
/// Final at once (`RestoreCheckFailed`): the fetched copy's checksum or
/// etcd's integrity hash, etcdutl exiting with an error of its own, the
/// revision or the hash. A Pod that cannot start, is killed, fails
/// otherwise or never answers is a failed attempt like any other
/// (`PodFailed`), retried from the stream, so one scheduling or registry
/// hiccup does not fail a backup; once the attempts run out the snapshot
/// is Failed like any other, and its object goes with it.
async fn verify_by_restore(snap: &EtcdSnapshot, ctx: &Context) -> Result<Action, Error> {
    let status = snap.status.clone().unwrap_or_default();
    let Some(artifact) = status.artifact.clone() else {
        return Ok(Action::await_change());
    };
    let name = pod::verify_pod_name(&snap.name_any());
    let bad_copy = |message: String| Problem::fatal(reason::RESTORE_CHECK_FAILED, message);
    let existing = match attempt_pod(snap, &name, ctx).await? {
        Ok(pod) => pod,
        Err(why) => return fail(snap, &Problem::retry(reason::POD_FAILED, why), ctx).await,
    };
    if let Some(p) = &existing
        && (p.metadata.deletion_timestamp.is_some() || pod::attempt_of(p) != Some(status.attempts))
    {
        return Ok(wait_gone(snap, p, ctx).await);
    }
    let Some(existing) = existing else {
        let Some(stored) = stored_at(snap, &artifact) else {
            return fail(
                snap,
                &bad_copy(format!(
                    "{} is not where the spec says it is stored",
                    artifact.uri
                )),
                ctx,
            )
            .await;
        };
        let version = status.etcd_version.clone().or_else(|| {
            let ns = snap.namespace().unwrap_or_default();
            ctx.watches
                .clusters
                .store()
                .get(&ObjectRef::new(&snap.spec.cluster_ref.name).within(&ns))
                .map(|c| c.spec.version.clone())
        });
        let image = format!(
            "{}:v{}",
            ctx.config.etcd_image.trim_end_matches(':'),
            version.unwrap_or_else(|| crate::api::DEFAULT_ETCD_VERSION.to_owned())
        );
        let pod = pod::verify_pod(
            snap,
            &stored,
            &artifact.checksum,
            &image,
            &ctx.config.operator_image,
        );
        if let Err(e) = create_pod(snap, pod, ctx).await {
            let problem = Problem::retry(reason::POD_FAILED, format!("creating Pod {name}: {e}"));
            return fail(snap, &problem, ctx).await;
        }
        return Ok(Action::requeue(POD_POLL));
    };
    let verdict = match pod::outcome(&existing) {
        pod::Outcome::Failed {
            container,
            problem,
            killed,
        } => {
            // etcdutl exiting with an error of its own is about the data;
            // killed (OOM, eviction, a signal) it is about the node.
            let about_the_data = matches!(
                problem.reason,
                reason::CHECKSUM_MISMATCH | reason::INTEGRITY_CHECK_FAILED
            ) || (container.as_deref() == Some("restore-snapshot") && !killed);
            Err(if about_the_data {
                bad_copy(format!("restoring {}: {}", artifact.uri, problem.message))
            } else {
                problem
            })
        }
        pod::Outcome::Succeeded(_) => Err(Problem::retry(
            reason::POD_FAILED,
            format!("the restored etcd of Pod {name} exited"),
        )),
        pod::Outcome::Running => {
            let deadline = verify_deadline(artifact.size_bytes);
            if let Some(why) = pod::stuck(&existing, POD_START_TIMEOUT) {
                Err(Problem::retry(reason::POD_FAILED, why))
            } else if age(existing.metadata.creation_timestamp.as_ref()) > deadline {
                // A later container that cannot start (etcd's image not
                // pulled), or a node that no longer reports.
                Err(Problem::retry(
                    reason::POD_FAILED,
                    format!(
                        "Pod {name} did not serve the restored copy within {deadline:?} of its creation"
                    ),
                ))
            } else if let Some(since) = pod::running_since(&existing, "etcd") {
                match check_restored(&existing, &status, ctx).await {
                    Ok(Some(verdict)) => Ok(verdict),
                    Err(problem) => Err(problem),
                    Ok(None) => {
                        let ran = Duration::try_from(jiff::Timestamp::now().duration_since(since))
                            .unwrap_or_default();
                        let timeout = verify_timeout(artifact.size_bytes);
                        if ran < timeout {
                            return Ok(Action::requeue(POD_POLL));
                        }
                        Err(Problem::retry(
                            reason::POD_FAILED,
                            format!(
                                "the restored copy in Pod {name} did not answer within {timeout:?} of starting"
                            ),
                        ))
                    }
                }
            } else {
                // Still fetching or restoring.
                return Ok(Action::requeue(POD_POLL));
            }
        }
    };
    let action = match verdict {
        Ok(message) => {
            let taken = Taken {
                artifact,
                revision: status.revision.unwrap_or_default(),
                keyspace_hash: status.keyspace_hash,
                took: since(status.start_time.as_ref()),
            };
            let member = status.member.clone().unwrap_or_default();
            complete(snap, status, &member, taken, Restored(message), ctx).await
        }
        Err(problem) => fail(snap, &problem, ctx).await,
    };
    if action.is_ok() {
        delete_pod(snap, &name, ctx).await;
    }
    action
}

/// Asks the restored copy: `Ok(None)` while it does not answer yet, `Err`
/// only for a copy that is not the snapshot.
async fn check_restored(
    pod: &Pod,
    status: &EtcdSnapshotStatus,
    ctx: &Context,
) -> Result<Option<String>, Problem> {
    let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
        return Ok(None);
    };
    let endpoint = format!("http://{ip}:{}", crate::resources::CLIENT_PORT);
    let Ok(answer) = ctx.etcd.status(&endpoint).await else {
        return Ok(None);
    };
    let bad_copy = |message: String| Problem::fatal(reason::RESTORE_CHECK_FAILED, message);
    let want = status.revision.unwrap_or_default();
    if answer.revision < want {
        return Err(bad_copy(format!(
            "the restored copy is at revision {}, older than the snapshot's {want}",
            answer.revision
        )));
    }
    let Some(source) = status.keyspace_hash else {
        return Ok(Some(format!(
            "restored by etcdutl and served at revision {} (the source's keyspace hash was not recorded, so only the revision was compared)",
            answer.revision
        )));
    };
    let Ok(restored) = ctx
        .etcd
        .hash_kv(&endpoint, source.revision, HASH_KV_DEADLINE)
        .await
    else {
        return Ok(None);
    };
    Ok(Some(compare_hashes(answer.revision, &source, &restored)?))
}

/// The restored copy's HashKV against the source's.
fn compare_hashes(
    served_at: i64,
    source: &KeyspaceHash,
    restored: &crate::etcd::KvHash,
) -> Result<String, Problem> {
    if restored.compact_revision != source.compact_revision {
        return Ok(format!(
            "restored by etcdutl and served at revision {served_at}; compacted at {} there and {} at the source, so only the revision was compared",
            restored.compact_revision, source.compact_revision
        ));
    }
    if restored.hash != source.hash {
        return Err(Problem::fatal(
            reason::RESTORE_CHECK_FAILED,
            format!(
                "the restored copy's keyspace hash at revision {} is {}, the source's was {}",
                source.revision, restored.hash, source.hash
            ),
        ));
    }
    Ok(format!(
        "restored by etcdutl and served at revision {served_at}; its keyspace hash at revision {} matches the source's ({})",
        source.revision, source.hash
    ))
}

/// The cluster, the credentials and a verified quorum's leader.
pub async fn observe(snapshot: Arc<EtcdSnapshot>, ctx: &Context) -> Observed {
    let source = find_source(&snapshot, ctx).await;
    Observed { snapshot, source }
}

async fn find_source(snap: &EtcdSnapshot, ctx: &Context) -> Result<Source, Problem> {
    let ns = snap.namespace().unwrap_or_default();
    let cluster_name = &snap.spec.cluster_ref.name;
    let cluster = ctx
        .watches
        .clusters
        .store()
        .get(&ObjectRef::new(cluster_name).within(&ns))
        .ok_or_else(|| {
            Problem::retry(
                reason::CLUSTER_NOT_FOUND,
                format!("EtcdCluster {ns}/{cluster_name} does not exist"),
            )
        })?;
    let (uri, destination) = match (&snap.spec.destination.s3, &snap.spec.destination.pvc) {
        (Some(location), _) => {
            let credentials = credentials(ctx, &ns, location).await?;
            let destination = Destination::new(location, &snap.name_any(), &credentials)?;
            (destination.uri.clone(), Some(destination))
        }
        (None, Some(pvc)) => {
            let claim = Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
                ctx.client.clone(),
                &ns,
            )
            .get_opt(&pvc.claim_name)
            .await
            .map_err(|e| {
                Problem::retry(
                    reason::CLAIM_NOT_FOUND,
                    format!("reading PersistentVolumeClaim {ns}/{}: {e}", pvc.claim_name),
                )
            })?;
            if claim.is_none() {
                return Err(Problem::retry(
                    reason::CLAIM_NOT_FOUND,
                    format!(
                        "PersistentVolumeClaim {ns}/{} (destination.pvc.claimName) does not exist",
                        pvc.claim_name
                    ),
                ));
            }
            let file = pod::destination_file(pvc, &snap.name_any());
            (pod::pvc_uri(&pvc.claim_name, &file), None)
        }
        (None, None) => {
            return Err(Problem::fatal(
                reason::INVALID_SPEC,
                "spec.destination names neither s3 nor pvc",
            ));
        }
    };

    let targets: Vec<ProbeTarget> = cluster_members(ctx, &cluster)
        .into_iter()
        .filter(|m| !m.spec.dormant)
        .map(|m| ProbeTarget {
            endpoint: crate::resources::member_client_url(
                crate::resources::client_scheme(&cluster),
                &m.name_any(),
                cluster_name,
                &ns,
            ),
            member: m.name_any(),
        })
        .collect();
    // The cluster's credentials and TLS are set by its own reconcile (only
    // there, so no other controller races it); until then the probe fails
    // and the attempt is retried.
    let report = probe_cluster(ctx.etcd.as_ref(), &targets, ctx.config.probe_deadline).await;
    let quorum = quorum::confirmed(&report).map_err(|why| {
        Problem::retry(
            reason::QUORUM_UNVERIFIED,
            format!("no snapshot is taken without a quorum the operator verified: {why}"),
        )
    })?;
    let leader = quorum.leader.ok_or_else(|| {
        Problem::retry(
            reason::QUORUM_UNVERIFIED,
            "the verified quorum names no leader",
        )
    })?;
    let (member, endpoint, version) = report
        .endpoints
        .iter()
        .find_map(|e| match &e.outcome {
            sdk::ProbeOutcome::Answered(s) if s.member_id == leader => {
                Some((e.member.clone(), e.endpoint.clone(), s.version.clone()))
            }
            _ => None,
        })
        .ok_or_else(|| {
            Problem::retry(
                reason::QUORUM_UNVERIFIED,
                format!("the leader {leader:x} did not answer this probe"),
            )
        })?;
    Ok(Source {
        member,
        endpoint,
        version,
        uri,
        destination,
        access: pod::EtcdAccess::of(&cluster),
    })
}

/// The access key pair `location` names, read by name (no list or watch).
pub async fn credentials(
    ctx: &Context,
    ns: &str,
    location: &crate::api::S3Location,
) -> Result<Credentials, Problem> {
    let secret_name = &location.credentials_secret_ref.name;
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(secret_name)
        .await
        .map_err(|e| {
            Problem::retry(
                reason::CREDENTIALS_NOT_FOUND,
                format!("reading Secret {ns}/{secret_name}: {e}"),
            )
        })?
        .ok_or_else(|| {
            Problem::retry(
                reason::CREDENTIALS_NOT_FOUND,
                format!(
                    "Secret {ns}/{secret_name} (destination.s3.credentialsSecretRef) does not exist"
                ),
            )
        })?;
    Credentials::from_secret(&secret)
}

/// Streams, uploads and reads back.
async fn take(snap: &EtcdSnapshot, source: &Source, ctx: &Context) -> Result<Taken, Problem> {
    let begun = Instant::now();
    let uid = snap.uid().unwrap_or_default();
    let Some(dest) = &source.destination else {
        return Err(Problem::fatal(
            reason::INVALID_SPEC,
            "no S3 destination to stream to",
        ));
    };
    dest.check_not_foreign(&uid).await?;
    let stream = ctx.etcd.snapshot(&source.endpoint).await.map_err(|e| {
        Problem::retry(
            reason::SNAPSHOT_STREAM_FAILED,
            format!(
                "opening the snapshot stream of member {}: {e}",
                source.member
            ),
        )
    })?;
    let written = dest.upload(stream.chunks, &uid).await?;
    dest.read_back(&written, &uid).await?;
    // What a restored copy must hash to; only asked for when one will be
    // made. Best effort: a compaction since the stream opened makes it
    // unanswerable, and the restore check then compares revisions only.
    let keyspace_hash = if snap.spec.verify == VerifyMode::Restore {
        ctx.etcd
            .hash_kv(&source.endpoint, stream.revision, HASH_KV_DEADLINE)
            .await
            .ok()
            .map(|h| KeyspaceHash {
                revision: h.revision,
                hash: h.hash,
                compact_revision: h.compact_revision,
            })
    } else {
        None
    };
    Ok(Taken {
        artifact: SnapshotArtifact {
            uri: dest.uri.clone(),
            size_bytes: i64::try_from(written.size).unwrap_or(i64::MAX),
            checksum: format!("sha256:{}", written.sha256),
        },
        revision: stream.revision,
        keyspace_hash,
        took: begun.elapsed(),
    })
}

fn started_status(snap: &EtcdSnapshot, source: &Source) -> EtcdSnapshotStatus {
    let prev = snap.status.clone().unwrap_or_default();
    let attempt = prev.attempts + 1;
    let desired = [
        cond(
            READY,
            ConditionStatus::False,
            reason::STARTED,
            format!(
                "attempt {attempt}: streaming from member {} to {}",
                source.member, source.uri
            ),
        ),
        not_verified(),
        cond(
            RECONCILING,
            ConditionStatus::True,
            reason::STARTED,
            format!("attempt {attempt} is streaming"),
        ),
        cond(
            STALLED,
            ConditionStatus::False,
            reason::STARTED,
            String::new(),
        ),
    ];
    EtcdSnapshotStatus {
        phase: Some(SnapshotPhase::Started),
        attempts: attempt,
        next_attempt_time: None,
        start_time: prev.start_time.clone().or_else(|| Some(now())),
        member: Some(source.member.clone()),
        etcd_version: Some(source.version.clone()).filter(|v| !v.is_empty()),
        conditions: merged(snap, &prev, &desired),
        observed_generation: snap.metadata.generation,
        ..prev
    }
}

/// How a Complete snapshot was verified.
enum Verification {
    ReadBackOnly,
    /// With what the restored copy answered.
    Restored(String),
}
use Verification::{ReadBackOnly, Restored};

async fn complete(
    snap: &EtcdSnapshot,
    started: EtcdSnapshotStatus,
    member: &str,
    taken: Taken,
    verification: Verification,
    ctx: &Context,
) -> Result<Action, Error> {
    let message = format!(
        "{} ({} bytes, {}) taken from member {member} at revision {}",
        taken.artifact.uri, taken.artifact.size_bytes, taken.artifact.checksum, taken.revision
    );
    let read_back = "read back whole: its size and sha256 match the stream, whose trailing sha256 (etcd's own) matched its bytes";
    let verified = match verification {
        ReadBackOnly => cond(
            VERIFIED,
            ConditionStatus::True,
            reason::READ_BACK,
            read_back.into(),
        ),
        Restored(how) => cond(
            VERIFIED,
            ConditionStatus::True,
            reason::RESTORED,
            format!("{read_back}; {how}"),
        ),
    };
    let desired = [
        cond(
            READY,
            ConditionStatus::True,
            reason::COMPLETE,
            message.clone(),
        ),
        verified,
        cond(
            RECONCILING,
            ConditionStatus::False,
            reason::COMPLETE,
            String::new(),
        ),
        cond(
            STALLED,
            ConditionStatus::False,
            reason::COMPLETE,
            String::new(),
        ),
    ];
    let status = EtcdSnapshotStatus {
        phase: Some(SnapshotPhase::Complete),
        artifact: Some(taken.artifact.clone()),
        revision: Some(taken.revision),
        keyspace_hash: taken.keyspace_hash,
        completion_time: Some(now()),
        conditions: merged(snap, &started, &desired),
        ..started
    };
    write(snap, &status, ctx).await?;
    ctx.metrics.observe_snapshot(
        &cluster_labels(snap),
        jiff::Timestamp::now().as_millisecond() as f64 / 1000.0,
        taken.took,
        taken.artifact.size_bytes.max(0) as u64,
    );
    event(snap, KubeEventType::Normal, reason::COMPLETE, &message, ctx).await;
    Ok(Action::await_change())
}

/// Records a failed attempt: Pending with a backoff while attempts remain,
/// else Failed.
async fn fail(snap: &EtcdSnapshot, problem: &Problem, ctx: &Context) -> Result<Action, Error> {
    let prev = snap.status.clone().unwrap_or_default();
    // An attempt that got as far as Started was counted when it started.
    let attempts = if prev.phase == Some(SnapshotPhase::Started) {
        prev.attempts
    } else {
        prev.attempts + 1
    };
    let last = !problem.retry || attempts >= ctx.config.snapshot_attempts;
    let message = if last && problem.retry {
        format!(
            "attempt {attempts} of {} failed, no more attempts: {}",
            ctx.config.snapshot_attempts, problem.message
        )
    } else if last {
        problem.message.clone()
    } else {
        format!(
            "attempt {attempts} of {} failed, retrying: {}",
            ctx.config.snapshot_attempts, problem.message
        )
    };
    let desired = [
        cond(
            READY,
            ConditionStatus::False,
            problem.reason,
            message.clone(),
        ),
        not_verified(),
        cond(
            RECONCILING,
            if last {
                ConditionStatus::False
            } else {
                ConditionStatus::True
            },
            problem.reason,
            if last { String::new() } else { message.clone() },
        ),
        cond(
            STALLED,
            if last {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            },
            problem.reason,
            if last { message.clone() } else { String::new() },
        ),
    ];
    let status = EtcdSnapshotStatus {
        phase: Some(if last {
            SnapshotPhase::Failed
        } else {
            SnapshotPhase::Pending
        }),
        attempts,
        completion_time: last.then(now),
        observed_generation: snap.metadata.generation,
        conditions: merged(snap, &prev, &desired),
        // A stored artifact that failed its restore check is nobody's
        // backup: the status no longer points at it.
        artifact: None,
        keyspace_hash: None,
        revision: None,
        next_attempt_time: (!last).then(|| {
            let wait =
                jiff::SignedDuration::try_from(backoff(ctx.config.snapshot_backoff, attempts))
                    .unwrap_or_default();
            Time(jiff::Timestamp::now() + wait)
        }),
        ..prev.clone()
    };
    write(snap, &status, ctx).await?;
    if last {
        discard_object(snap, ctx).await;
    }
    ctx.metrics
        .count_snapshot_failure(&cluster_labels(snap), problem.reason);
    event(snap, KubeEventType::Warning, problem.reason, &message, ctx).await;
    Ok(if last {
        Action::await_change()
    } else {
        Action::requeue(backoff(ctx.config.snapshot_backoff, attempts))
    })
}

/// Deletes what a failed snapshot may have uploaded (an attempt that failed
/// its read-back, or was cut off after completing): a Failed snapshot's
/// object is nobody's backup, and retention only ever looks at Complete
/// ones. Only an object whose metadata names this snapshot is deleted.
async fn discard_object(snap: &EtcdSnapshot, ctx: &Context) {
    let Some(location) = snap.spec.destination.s3.as_ref() else {
        return;
    };
    let ns = snap.namespace().unwrap_or_default();
    let Ok(credentials) = credentials(ctx, &ns, location).await else {
        return;
    };
    if let Ok(dest) = Destination::new(location, &snap.name_any(), &credentials)
        && let Err(p) = dest
            .delete_if_written_by(&snap.uid().unwrap_or_default())
            .await
    {
        tracing::warn!(snapshot = %snap.name_any(), reason = p.reason, message = %p.message, "a failed snapshot's object could not be deleted");
    }
}

/// The wait after `attempts` failed attempts: doubling, at most 5 minutes.
pub fn backoff(first: Duration, attempts: u32) -> Duration {
    first
        .saturating_mul(1 << attempts.saturating_sub(1).min(10))
        .min(Duration::from_secs(300))
}

const READY: &str = "Ready";
const VERIFIED: &str = "Verified";
const RECONCILING: &str = "Reconciling";
const STALLED: &str = "Stalled";

fn cond(type_: &str, status: ConditionStatus, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message,
    }
}

fn not_verified() -> Condition {
    cond(
        VERIFIED,
        ConditionStatus::False,
        reason::NOT_VERIFIED,
        "not read back yet".into(),
    )
}

fn merged(
    snap: &EtcdSnapshot,
    prev: &EtcdSnapshotStatus,
    desired: &[Condition],
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    crate::conditions::merge(
        &prev.conditions,
        desired,
        snap.metadata.generation.unwrap_or_default(),
        jiff::Timestamp::now(),
    )
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

fn cluster_labels(snap: &EtcdSnapshot) -> ClusterLabels {
    ClusterLabels {
        namespace: snap.namespace().unwrap_or_default(),
        name: snap.spec.cluster_ref.name.clone(),
    }
}

async fn write(
    snap: &EtcdSnapshot,
    status: &EtcdSnapshotStatus,
    ctx: &Context,
) -> Result<(), Error> {
    let api: Api<EtcdSnapshot> =
        Api::namespaced(ctx.client.clone(), &snap.namespace().unwrap_or_default());
    write_whole_status(&api, &snap.name_any(), status)
        .await
        .map_err(Error::StatusWrite)?;
    Ok(())
}

/// A failed publish is logged, never retried: the status already says it.
async fn event(snap: &EtcdSnapshot, type_: KubeEventType, reason: &str, note: &str, ctx: &Context) {
    ctx.publish_event(snap, type_, reason, note, "TakeSnapshot")
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restored_copy_passes_only_with_the_sources_hash_when_compacted_alike() {
        let source = KeyspaceHash {
            revision: 40,
            hash: 7,
            compact_revision: 10,
        };
        let kv = |hash, compact_revision| crate::etcd::KvHash {
            revision: 40,
            hash,
            compact_revision,
        };
        let ok = compare_hashes(42, &source, &kv(7, 10)).unwrap();
        assert!(ok.contains("matches the source's"), "{ok}");
        let err = compare_hashes(42, &source, &kv(8, 10)).unwrap_err();
        assert_eq!(err.reason, reason::RESTORE_CHECK_FAILED);
        assert!(!err.retry, "a copy that is not the snapshot is final");
        let other = compare_hashes(42, &source, &kv(8, 12)).unwrap();
        assert!(other.contains("only the revision was compared"), "{other}");
    }

    #[test]
    fn attempts_back_off_doubling_to_five_minutes() {
        let first = Duration::from_secs(5);
        assert_eq!(backoff(first, 1), Duration::from_secs(5));
        assert_eq!(backoff(first, 2), Duration::from_secs(10));
        assert_eq!(backoff(first, 4), Duration::from_secs(40));
        assert_eq!(backoff(first, 40), Duration::from_secs(300));
    }
}

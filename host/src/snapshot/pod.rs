//! The Pods that do a snapshot's work where the operator cannot: on a
//! PersistentVolumeClaim, and in a scratch etcd for `verify: Restore`.
//!
//! - **Save** (`<snapshot>-save`, destination `pvc`): the operator's image
//!   runs `etcd-steward snapshot save` against the leader the operator has
//!   just verified. It writes `<file>.part`, fsyncs it, reads it back whole
//!   and checks its size, sha256 and etcd's trailing sha256, and only then
//!   renames it into place. It reports a [`Report`] in its termination
//!   message; a failure leaves no file and reports a reason (`VolumeFull`
//!   when the volume ran out of space).
//! - **Verify** (`<snapshot>-verify`): `snapshot fetch` copies the object
//!   (S3 or PVC) to an emptyDir and checks its sha256; etcd's own
//!   `etcdutl snapshot restore` restores it there (it checks etcd's
//!   integrity hash); etcd then serves the restored copy on the Pod's
//!   address. The operator itself asks that etcd for its revision and
//!   keyspace hash: the verdict is the operator's, from its own RPCs.
//!
//! - **Remove** (`<snapshot>-remove`, retention of a schedule writing to a
//!   claim): deletes the run's file, only if its sha256 is the run's.
//!
//! All three are owned by their EtcdSnapshot (a remove Pod also carries
//! its schedule's label, so its end wakes the schedule, which deletes the
//! run only after it), carry the managed-by label (so the operator's Pod
//! watch sees them), run once (`restartPolicy: Never`) and are deleted
//! once read.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, KeyToPath,
    PersistentVolumeClaimVolumeSource, Pod, PodSpec, ProjectedVolumeSource, SecretKeySelector,
    SecretProjection, SecurityContext, Volume, VolumeMount, VolumeProjection,
};
use kube::Resource;
use kube::api::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::api::{
    ACCESS_KEY_ID_KEY, EtcdSnapshot, KeyspaceHash, PvcLocation, S3Location, SECRET_ACCESS_KEY_KEY,
};
use crate::resources::{CLIENT_PORT, LABEL_MANAGED_BY, MANAGER};

use super::problem::{Problem, reason};

/// Where a container of these Pods writes its [`Report`] (Kubernetes'
/// default `terminationMessagePath`); [`reporting`] sets it.
pub const TERMINATION_LOG: &str = "/dev/termination-log";
/// Where the claim is mounted in a save, verify or restoring Pod. Under
/// `/var/lib`, as the member's data directory is: a directory every image
/// has, so no runtime has to make a top-level one.
pub const BACKUP_MOUNT: &str = "/var/lib/etcd-steward/backup";
/// The verify Pod's scratch space (an emptyDir).
pub const SCRATCH: &str = "/var/lib/etcd-steward/scratch";

/// What `snapshot save` reports in its termination message.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Report {
    /// Written, fsynced and read back.
    Saved {
        size_bytes: u64,
        sha256: String,
        revision: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        keyspace_hash: Option<KeyspaceHash>,
    },
    /// `snapshot remove`: the file is gone (or was already).
    Removed {
        existed: bool,
    },
    /// `snapshot remove`: a file is there that the run did not write
    /// (another checksum); it is left alone.
    LeftAlone {
        message: String,
    },
    Failed {
        reason: String,
        message: String,
    },
}

/// The file a `pvc` destination holds the snapshot in, relative to the
/// volume: `<subPath>/<snapshot name>.db`.
pub fn destination_file(location: &PvcLocation, snapshot: &str) -> String {
    match location.sub_path.as_deref().map(|p| p.trim_matches('/')) {
        Some(dir) if !dir.is_empty() => format!("{dir}/{snapshot}.db"),
        _ => format!("{snapshot}.db"),
    }
}

/// `pvc://<claim>/<file>`.
pub fn pvc_uri(claim: &str, file: &str) -> String {
    format!("pvc://{claim}/{file}")
}

/// The claim and file a `pvc://` URI names; none for a path that would
/// leave the volume (the URI comes from a status anyone with write access
/// to it could have edited).
pub fn parse_pvc_uri(uri: &str) -> Option<PvcLocation> {
    let (claim, file) = uri.strip_prefix("pvc://")?.split_once('/')?;
    if file.is_empty() || file.starts_with('/') || file.split('/').any(|p| p == "..") {
        return None;
    }
    Some(PvcLocation {
        claim_name: claim.to_owned(),
        sub_path: Some(file.to_owned()),
    })
}

pub fn save_pod_name(snapshot: &str) -> String {
    format!("{snapshot}-save")
}

pub fn verify_pod_name(snapshot: &str) -> String {
    format!("{snapshot}-verify")
}

pub fn remove_pod_name(snapshot: &str) -> String {
    format!("{snapshot}-remove")
}

fn metadata(snap: &EtcdSnapshot, name: String) -> ObjectMeta {
    owned_by(
        snap.controller_owner_ref(&()),
        snap.meta().namespace.clone(),
        name,
    )
}

fn owned_by(
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    namespace: Option<String>,
    name: String,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace,
        labels: Some(BTreeMap::from([(
            LABEL_MANAGED_BY.to_owned(),
            MANAGER.to_owned(),
        )])),
        owner_references: owner.map(|o| vec![o]),
        ..Default::default()
    }
}

/// The Pod that deletes a scheduled run's file from its claim, for
/// retention: only if the file's sha256 is the run's checksum, so a file
/// the run did not write is left alone. Owned by the run's EtcdSnapshot
/// (deleting the run deletes it, so none outlives its run) and labelled
/// with the schedule, whose controller it wakes; the schedule deletes the
/// run only once this Pod succeeded.
pub fn remove_pod(
    schedule: &str,
    snap: &EtcdSnapshot,
    claim: &PvcLocation,
    sha256: &str,
    operator_image: &str,
) -> Pod {
    let name = snap.meta().name.clone().unwrap_or_default();
    let file = claim.sub_path.clone().unwrap_or_default();
    let mut metadata = metadata(snap, remove_pod_name(&name));
    metadata
        .labels
        .get_or_insert_default()
        .insert(crate::api::LABEL_SCHEDULE.to_owned(), schedule.to_owned());
    Pod {
        metadata,
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_owned()),
            containers: vec![reporting(Container {
                name: "remove".to_owned(),
                image: Some(operator_image.to_owned()),
                args: Some(vec![
                    "snapshot".to_owned(),
                    "remove".to_owned(),
                    format!("--file={BACKUP_MOUNT}/{}", file.trim_start_matches('/')),
                    format!("--sha256={sha256}"),
                    format!("--report={TERMINATION_LOG}"),
                ]),
                volume_mounts: Some(vec![mount("backup", BACKUP_MOUNT, false)]),
                security_context: Some(as_root()),
                ..Default::default()
            })],
            volumes: Some(vec![claim_volume(claim, false)]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The claim and the operator's image write as root: a fresh volume's
/// root directory is root's, as the member's data volume is.
fn as_root() -> SecurityContext {
    SecurityContext {
        run_as_user: Some(0),
        run_as_non_root: Some(false),
        ..Default::default()
    }
}

fn claim_volume(location: &PvcLocation, read_only: bool) -> Volume {
    Volume {
        name: "backup".to_owned(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: location.claim_name.clone(),
            read_only: Some(read_only),
        }),
        ..Default::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: Some(read_only),
        ..Default::default()
    }
}

pub fn reporting(mut c: Container) -> Container {
    c.termination_message_path = Some(TERMINATION_LOG.to_owned());
    // A panic or a crash before the report still says something.
    c.termination_message_policy = Some("FallbackToLogsOnError".to_owned());
    c
}

/// What a Pod needs to call a cluster's etcd as the operator does: the
/// root Secret (`spec.auth`), and the TLS Secrets (`spec.tls.client`).
/// Secrets by name only: the Pod spec never holds a value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdAccess {
    pub root_secret: Option<String>,
    /// `serverSecretRef`: its `ca.crt` only.
    pub server_tls_secret: Option<String>,
    /// `operatorClientSecretRef`: its `tls.crt` and `tls.key`.
    pub operator_tls_secret: Option<String>,
}

impl EtcdAccess {
    pub fn of(cluster: &crate::api::EtcdCluster) -> Self {
        let tls = crate::certificates::secrets(cluster);
        EtcdAccess {
            root_secret: cluster
                .spec
                .auth
                .as_ref()
                .and_then(|a| a.root_credentials_secret_ref.as_ref())
                .map(|r| r.name.clone()),
            server_tls_secret: tls.server.map(|s| s.name),
            operator_tls_secret: tls.operator_client.map(|s| s.name),
        }
    }
}

/// Where a save Pod finds the CA and client certificate.
const TLS_MOUNT: &str = "/etc/etcd-steward/tls";

/// The Pod that streams the snapshot from `endpoint` onto the claim.
pub fn save_pod(
    snap: &EtcdSnapshot,
    location: &PvcLocation,
    endpoint: &str,
    access: &EtcdAccess,
    operator_image: &str,
) -> Pod {
    use crate::resources::{TLS_CA, TLS_CERT, TLS_KEY};
    let name = snap.meta().name.clone().unwrap_or_default();
    let file = destination_file(location, &name);
    let mut args = vec![
        "snapshot".to_owned(),
        "save".to_owned(),
        format!("--endpoint={endpoint}"),
        format!("--out={BACKUP_MOUNT}/{file}"),
        format!("--report={TERMINATION_LOG}"),
    ];
    // The password by reference: the Pod spec names the Secret, never
    // holds the value.
    let env = access.root_secret.as_ref().map(|secret| {
        args.push(format!("--user={}", crate::auth::ROOT));
        vec![EnvVar {
            name: crate::cli::snapshot::PASSWORD_ENV.to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.to_owned(),
                    key: crate::auth::PASSWORD_KEY.to_owned(),
                    optional: Some(false),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]
    });
    let mut volumes = vec![claim_volume(location, false)];
    let mut mounts = vec![mount("backup", BACKUP_MOUNT, false)];
    if let Some(server) = &access.server_tls_secret {
        let item = |k: &str| KeyToPath {
            key: k.to_owned(),
            path: k.to_owned(),
            ..Default::default()
        };
        let mut sources = vec![VolumeProjection {
            secret: Some(SecretProjection {
                name: server.clone(),
                items: Some(vec![item(TLS_CA)]),
                optional: Some(false),
            }),
            ..Default::default()
        }];
        args.push(format!("--cacert={TLS_MOUNT}/{TLS_CA}"));
        if let Some(operator) = &access.operator_tls_secret {
            sources.push(VolumeProjection {
                secret: Some(SecretProjection {
                    name: operator.clone(),
                    items: Some(vec![item(TLS_CERT), item(TLS_KEY)]),
                    optional: Some(false),
                }),
                ..Default::default()
            });
            args.push(format!("--cert={TLS_MOUNT}/{TLS_CERT}"));
            args.push(format!("--key={TLS_MOUNT}/{TLS_KEY}"));
        }
        volumes.push(Volume {
            name: "etcd-tls".to_owned(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(sources),
                default_mode: Some(0o400),
                ..Default::default()
            }),
            ..Default::default()
        });
        mounts.push(mount("etcd-tls", TLS_MOUNT, true));
    }
    Pod {
        metadata: metadata(snap, save_pod_name(&name)),
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_owned()),
            containers: vec![reporting(Container {
                name: "save".to_owned(),
                image: Some(operator_image.to_owned()),
                args: Some(args),
                env,
                volume_mounts: Some(mounts),
                security_context: Some(as_root()),
                ..Default::default()
            })],
            volumes: Some(volumes),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Where the verify Pod's `snapshot fetch` reads the object from.
pub enum Stored<'a> {
    S3 {
        location: &'a S3Location,
        key: String,
    },
    Pvc {
        claim: &'a str,
        file: String,
    },
}

/// The arguments and environment of `snapshot fetch` for `stored`, and the
/// claim to mount if it is on one. Shared by the verify Pod and a restored
/// seed's Pod.
pub fn fetch_step(
    stored: &Stored<'_>,
    sha256: &str,
    out: &str,
) -> (Vec<String>, Vec<EnvVar>, Option<PvcLocation>) {
    let mut args = vec!["snapshot".to_owned(), "fetch".to_owned()];
    let mut env = Vec::new();
    let mut claim = None;
    match stored {
        Stored::S3 { location, key } => {
            args.extend([
                format!("--endpoint={}", location.endpoint),
                format!("--bucket={}", location.bucket),
                format!("--key={key}"),
                format!(
                    "--region={}",
                    location.region.as_deref().unwrap_or("us-east-1")
                ),
            ]);
            if location.force_path_style {
                args.push("--force-path-style".to_owned());
            }
            let secret = |key: &str| EnvVar {
                name: key.to_owned(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: location.credentials_secret_ref.name.clone(),
                        key: key.to_owned(),
                        optional: Some(false),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            env.extend([secret(ACCESS_KEY_ID_KEY), secret(SECRET_ACCESS_KEY_KEY)]);
            if let Some(ca) = &location.ca_bundle {
                env.push(EnvVar {
                    name: crate::restore::pod::CA_BUNDLE_ENV.to_owned(),
                    value: Some(ca.clone()),
                    ..Default::default()
                });
            }
        }
        Stored::Pvc { claim: name, file } => {
            args.push(format!(
                "--file={BACKUP_MOUNT}/{}",
                file.trim_start_matches('/')
            ));
            claim = Some(PvcLocation {
                claim_name: (*name).to_owned(),
                sub_path: None,
            });
        }
    }
    args.extend([
        format!("--sha256={sha256}"),
        format!("--out={out}"),
        format!("--report={TERMINATION_LOG}"),
    ]);
    (args, env, claim)
}

/// The Pod that restores `stored` into scratch space and serves it with
/// etcd `image` (the release the snapshot was taken with).
pub fn verify_pod(
    snap: &EtcdSnapshot,
    stored: &Stored<'_>,
    sha256: &str,
    etcd_image: &str,
    operator_image: &str,
) -> Pod {
    let name = snap.meta().name.clone().unwrap_or_default();
    let file = format!("{SCRATCH}/snapshot.db");
    let data = format!("{SCRATCH}/data");
    let (args, env, claim) = fetch_step(stored, sha256, &file);
    let mut fetch_mounts = vec![mount("scratch", SCRATCH, false)];
    let mut volumes = vec![Volume {
        name: "scratch".to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }];
    if let Some(claim) = &claim {
        fetch_mounts.push(mount("backup", BACKUP_MOUNT, true));
        volumes.push(claim_volume(claim, true));
    }
    let peer = "http://localhost:2380";
    Pod {
        metadata: metadata(snap, verify_pod_name(&name)),
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_owned()),
            init_containers: Some(vec![
                reporting(Container {
                    name: "fetch-snapshot".to_owned(),
                    image: Some(operator_image.to_owned()),
                    args: Some(args),
                    env: (!env.is_empty()).then_some(env),
                    volume_mounts: Some(fetch_mounts),
                    security_context: Some(as_root()),
                    ..Default::default()
                }),
                reporting(Container {
                    name: "restore-snapshot".to_owned(),
                    image: Some(etcd_image.to_owned()),
                    command: Some(vec!["etcdutl".to_owned()]),
                    args: Some(vec![
                        "snapshot".to_owned(),
                        "restore".to_owned(),
                        file,
                        format!("--data-dir={data}"),
                        "--name=verify".to_owned(),
                        format!("--initial-cluster=verify={peer}"),
                        format!("--initial-advertise-peer-urls={peer}"),
                    ]),
                    volume_mounts: Some(vec![mount("scratch", SCRATCH, false)]),
                    ..Default::default()
                }),
            ]),
            containers: vec![Container {
                name: "etcd".to_owned(),
                image: Some(etcd_image.to_owned()),
                command: Some(vec!["etcd".to_owned()]),
                args: Some(vec![
                    "--name=verify".to_owned(),
                    format!("--data-dir={data}"),
                    format!("--listen-client-urls=http://0.0.0.0:{CLIENT_PORT}"),
                    format!("--advertise-client-urls=http://localhost:{CLIENT_PORT}"),
                    "--listen-peer-urls=http://0.0.0.0:2380".to_owned(),
                    format!("--initial-advertise-peer-urls={peer}"),
                ]),
                volume_mounts: Some(vec![mount("scratch", SCRATCH, false)]),
                ..Default::default()
            }],
            volumes: Some(volumes),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The annotation that ties a save or verify Pod to the attempt that made
/// it: a Pod of an earlier attempt is never read as this one's.
pub const ATTEMPT: &str = "etcd.steward.dev/attempt";

/// Stamps a built Pod with its attempt and the cluster's pull Secrets (the
/// operator's and etcd's images come from the same registries as the
/// members').
pub fn stamp(
    pod: &mut Pod,
    attempt: u32,
    pull_secrets: Option<Vec<k8s_openapi::api::core::v1::LocalObjectReference>>,
) {
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert(ATTEMPT.to_owned(), attempt.to_string());
    if let Some(spec) = pod.spec.as_mut() {
        spec.image_pull_secrets = pull_secrets;
    }
}

/// The attempt a Pod was made for.
pub fn attempt_of(pod: &Pod) -> Option<u32> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(ATTEMPT)?
        .parse()
        .ok()
}

/// A report in a termination message. A kubelet may put its own text
/// before the container's, so it is read from the first `{`.
pub fn report(message: &str) -> Option<Report> {
    let at = message.find('{')?;
    serde_json::from_str(message[at..].trim()).ok()
}

/// When the Pod's last container finished, if one has.
pub fn finished_at(pod: &Pod) -> Option<jiff::Timestamp> {
    pod.status
        .as_ref()?
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| {
            Some(
                c.state
                    .as_ref()?
                    .terminated
                    .as_ref()?
                    .finished_at
                    .as_ref()?
                    .0,
            )
        })
        .max()
}

/// When the named container started running, if it runs.
pub fn running_since(pod: &Pod, container: &str) -> Option<jiff::Timestamp> {
    let status = pod.status.as_ref()?;
    let c = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == container)?;
    Some(c.state.as_ref()?.running.as_ref()?.started_at.as_ref()?.0)
}

/// Why a Pod has not started any container yet, once it has waited
/// longer than `limit` since it was created (an image that cannot be
/// pulled, a Pod that cannot be scheduled, a claim that cannot attach).
pub fn stuck(pod: &Pod, limit: std::time::Duration) -> Option<String> {
    let status = pod.status.as_ref();
    let statuses = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .collect::<Vec<_>>();
    let begun = statuses.iter().any(|c| {
        c.state
            .as_ref()
            .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
    });
    let created = pod.metadata.creation_timestamp.as_ref()?.0;
    let waited =
        std::time::Duration::try_from(jiff::Timestamp::now().duration_since(created)).ok()?;
    if begun || waited < limit {
        return None;
    }
    let why = statuses
        .iter()
        .find_map(|c| {
            let w = c.state.as_ref()?.waiting.as_ref()?;
            Some(format!(
                "{}: {} {}",
                c.name,
                w.reason.as_deref().unwrap_or_default(),
                w.message.as_deref().unwrap_or_default()
            ))
        })
        .or_else(|| {
            status?.conditions.iter().flatten().find_map(|c| {
                (c.status == "False").then(|| {
                    format!(
                        "{}: {}",
                        c.reason.as_deref().unwrap_or(&c.type_),
                        c.message.as_deref().unwrap_or_default()
                    )
                })
            })
        })
        .unwrap_or_else(|| "no container started".to_owned());
    Some(format!(
        "Pod {} started nothing within {limit:?}: {}",
        pod.meta().name.clone().unwrap_or_default(),
        why.trim()
    ))
}

/// How a run-once Pod's work ended, if it has.
pub enum Outcome {
    Running,
    /// Phase Succeeded; the container's termination message.
    Succeeded(String),
    /// Phase Failed: the container that failed (if one did) and the
    /// problem its report (or exit) names.
    Failed {
        container: Option<String>,
        problem: Problem,
        /// Killed from outside rather than exiting with an error of its
        /// own: a signal (exit 128+), the OOM killer, or an eviction.
        killed: bool,
    },
}

pub fn outcome(pod: &Pod) -> Outcome {
    let status = pod.status.clone().unwrap_or_default();
    let terminated = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .filter_map(|c| {
            let t = c.state.as_ref()?.terminated.as_ref()?;
            Some((c.name.clone(), t.exit_code, t.message.clone()))
        })
        .collect::<Vec<_>>();
    let oom = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .any(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .and_then(|t| t.reason.as_deref())
                == Some("OOMKilled")
        });
    let evicted = status.reason.as_deref() == Some("Evicted");
    match status.phase.as_deref() {
        Some("Succeeded") => Outcome::Succeeded(
            terminated
                .last()
                .and_then(|(_, _, m)| m.clone())
                .unwrap_or_default(),
        ),
        Some("Failed") => {
            let failed = terminated.iter().find(|(_, code, _)| *code != 0);
            let problem = match failed {
                Some((container, code, message)) => {
                    let message = message.clone().unwrap_or_default();
                    match report(&message) {
                        // A full volume does not empty itself in the
                        // minutes retries take: grow it and take a new one.
                        Some(Report::Failed { reason, message })
                            if reason::known(&reason) == reason::VOLUME_FULL =>
                        {
                            Problem::fatal(reason::VOLUME_FULL, format!("{container}: {message}"))
                        }
                        Some(Report::Failed { reason, message }) => Problem::retry(
                            reason::known(&reason),
                            format!("{container}: {message}"),
                        ),
                        _ => Problem::retry(
                            reason::POD_FAILED,
                            format!(
                                "container {container} exited with code {code}: {}",
                                last_line(&message)
                            ),
                        ),
                    }
                }
                None => Problem::retry(
                    reason::POD_FAILED,
                    format!(
                        "Pod {} failed: {}",
                        pod.meta().name.clone().unwrap_or_default(),
                        status.message.unwrap_or_default()
                    ),
                ),
            };
            Outcome::Failed {
                container: failed.map(|(c, _, _)| c.clone()),
                problem,
                killed: oom || evicted || failed.is_none_or(|(_, code, _)| *code >= 128),
            }
        }
        _ => Outcome::Running,
    }
}

/// The last non-empty line of a log tail, at most 512 bytes of it.
fn last_line(log: &str) -> String {
    let line = log
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no output)")
        .trim();
    let mut end = line.len().min(512);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };

    fn snap() -> EtcdSnapshot {
        let mut s = EtcdSnapshot::new(
            "nightly",
            serde_json::from_value(serde_json::json!({
                "clusterRef": {"name": "main"},
                "destination": {"pvc": {"claimName": "backups", "subPath": "etcd/main"}},
            }))
            .unwrap(),
        );
        s.metadata.namespace = Some("prod".into());
        s.metadata.uid = Some("uid-1".into());
        s
    }

    fn exited(pod: &mut Pod, phase: &str, init: bool, name: &str, code: i32, message: &str) {
        let status = pod.status.get_or_insert_with(PodStatus::default);
        status.phase = Some(phase.into());
        let c = ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    message: Some(message.into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        if init {
            status
                .init_container_statuses
                .get_or_insert_default()
                .push(c);
        } else {
            status.container_statuses.get_or_insert_default().push(c);
        }
    }

    #[test]
    fn a_save_pod_of_a_tls_and_auth_cluster_gets_the_secrets_by_reference() {
        let s = snap();
        let loc = s.spec.destination.pvc.clone().unwrap();
        let access = EtcdAccess {
            root_secret: Some("root".into()),
            server_tls_secret: Some("srv".into()),
            operator_tls_secret: Some("op".into()),
        };
        let pod = save_pod(&s, &loc, "https://m.c.ns.svc:2379", &access, "steward:1");
        let spec = pod.spec.unwrap();
        let c = &spec.containers[0];
        let args = c.args.clone().unwrap();
        for want in [
            "--user=root",
            "--cacert=/etc/etcd-steward/tls/ca.crt",
            "--cert=/etc/etcd-steward/tls/tls.crt",
            "--key=/etc/etcd-steward/tls/tls.key",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
        let env = c.env.clone().unwrap();
        assert!(env[0].value.is_none(), "the password by reference only");
        let tls = spec
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "etcd-tls")
            .unwrap()
            .projected
            .unwrap();
        let secrets: Vec<(String, Vec<String>)> = tls
            .sources
            .unwrap()
            .into_iter()
            .map(|p| {
                let s = p.secret.unwrap();
                (
                    s.name,
                    s.items.unwrap().into_iter().map(|i| i.key).collect(),
                )
            })
            .collect();
        assert_eq!(
            secrets,
            vec![
                ("srv".to_owned(), vec!["ca.crt".to_owned()]),
                (
                    "op".to_owned(),
                    vec!["tls.crt".to_owned(), "tls.key".to_owned()]
                ),
            ],
            "of the serving Secret, only the CA"
        );
    }

    #[test]
    fn the_save_pod_writes_under_the_sub_path_and_is_owned_by_its_snapshot() {
        let s = snap();
        let loc = s.spec.destination.pvc.clone().unwrap();
        let pod = save_pod(
            &s,
            &loc,
            "http://main-0.main.prod.svc:2379",
            &EtcdAccess::default(),
            "steward:1",
        );
        assert_eq!(pod.metadata.name.as_deref(), Some("nightly-save"));
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("EtcdSnapshot", Some(true))
        );
        let spec = pod.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let args = spec.containers[0].args.clone().unwrap();
        assert!(
            args.contains(&format!("--out={BACKUP_MOUNT}/etcd/main/nightly.db")),
            "{args:?}"
        );
        assert_eq!(
            spec.volumes.unwrap()[0]
                .persistent_volume_claim
                .as_ref()
                .unwrap()
                .claim_name,
            "backups"
        );
    }

    #[test]
    fn pvc_uris_round_trip() {
        let uri = pvc_uri("backups", "etcd/main/nightly.db");
        let loc = parse_pvc_uri(&uri).unwrap();
        assert_eq!(loc.claim_name, "backups");
        assert_eq!(loc.sub_path.as_deref(), Some("etcd/main/nightly.db"));
        assert!(parse_pvc_uri("s3://b/k").is_none());
    }

    #[test]
    fn a_failed_pod_reports_its_reason_or_its_last_log_line() {
        let s = snap();
        let loc = s.spec.destination.pvc.clone().unwrap();
        let mut pod = save_pod(
            &s,
            &loc,
            "http://x:2379",
            &EtcdAccess::default(),
            "steward:1",
        );
        let report = serde_json::to_string(&Report::Failed {
            reason: reason::VOLUME_FULL.into(),
            message: "no space left on device".into(),
        })
        .unwrap();
        exited(&mut pod, "Failed", false, "save", 1, &report);
        let Outcome::Failed { problem: p, .. } = outcome(&pod) else {
            panic!("not failed")
        };
        assert_eq!(p.reason, reason::VOLUME_FULL);

        let mut pod = save_pod(
            &s,
            &loc,
            "http://x:2379",
            &EtcdAccess::default(),
            "steward:1",
        );
        exited(
            &mut pod,
            "Failed",
            true,
            "restore-snapshot",
            2,
            "x\nError: snapshot file integrity check failed\n\n",
        );
        let Outcome::Failed {
            container,
            problem: p,
            killed,
        } = outcome(&pod)
        else {
            panic!("not failed")
        };
        assert!(!killed, "exit 2 is the container's own error");
        assert_eq!(container.as_deref(), Some("restore-snapshot"));
        assert_eq!(p.reason, reason::POD_FAILED);
        assert!(
            p.message.contains("integrity check failed"),
            "{}",
            p.message
        );
        assert!(p.message.contains("restore-snapshot"), "{}", p.message);
    }

    #[test]
    fn a_report_names_no_reason_it_does_not_know() {
        let s = snap();
        let loc = s.spec.destination.pvc.clone().unwrap();
        let mut pod = save_pod(
            &s,
            &loc,
            "http://x:2379",
            &EtcdAccess::default(),
            "steward:1",
        );
        let report = r#"{"failed":{"reason":"Anything <script>","message":"m"}}"#;
        exited(&mut pod, "Failed", false, "save", 1, report);
        let Outcome::Failed { problem: p, .. } = outcome(&pod) else {
            panic!("not failed")
        };
        assert_eq!(p.reason, reason::POD_FAILED);
    }

    #[test]
    fn a_report_is_read_after_a_kubelets_own_text_and_paths_stay_in_the_volume() {
        let json = serde_json::to_string(&Report::Removed { existed: true }).unwrap();
        assert_eq!(
            report(&format!("killed by SIGTERM: {json}")),
            Some(Report::Removed { existed: true })
        );
        assert_eq!(report("no json here"), None);
        assert!(parse_pvc_uri("pvc://backups/../../etc/passwd").is_none());
        assert!(parse_pvc_uri("pvc://backups//etc/passwd").is_none());
        assert!(parse_pvc_uri("pvc://backups/").is_none());
    }
}

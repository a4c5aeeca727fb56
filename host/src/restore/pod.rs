//! The init containers of a restored seed's Pod.
//!
//! 1. `fetch-snapshot` (the operator's image, `etcd-steward snapshot
//!    fetch`): downloads the object (or copies the file from the backup
//!    claim, mounted read-only for this step alone) to
//!    `restore/snapshot.db` on the data volume, checking its sha256 and
//!    etcd's trailing sha256, and clears any earlier staging directory.
//! 2. `restore-snapshot` (the member's own etcd image, `etcdutl snapshot
//!    restore`): restores it into the staging directory `restore/data`,
//!    with the seed alone in its initial cluster: new cluster and member
//!    IDs, the snapshot's keys and revision. The release that restores is
//!    the one that will run it.
//! 3. `install-snapshot` (the operator's image, `etcd-steward snapshot
//!    install`): moves the staged `member` directory into the data
//!    directory, only if the data directory has no `member` yet, and
//!    removes the staging area either way.
//!
//! They are added only while the cluster ID is not latched: once the
//! restored seed has answered, a recreated Pod starts from its volume like
//! any member's, and step 3 guarantees a Pod recreated before that never
//! replaces data a member already has.

use k8s_openapi::api::core::v1::{
    Container, EnvVar, PersistentVolumeClaimVolumeSource, Pod, SecurityContext, Volume, VolumeMount,
};

use crate::api::{EtcdCluster, EtcdMember};
use crate::resources::{DATA_DIR, member_peer_url, own_peer_url};
use crate::snapshot::pod::{BACKUP_MOUNT, Stored, fetch_step, reporting};

/// Where the snapshot and the staged restore live, on the data volume.
pub const RESTORE_DIR: &str = "/var/lib/etcd/restore";
/// The environment variable that carries `caBundle` to `snapshot fetch`.
pub const CA_BUNDLE_ENV: &str = "ETCD_STEWARD_S3_CA_BUNDLE";

/// Adds the restore's init containers to a seed Pod built by
/// [`crate::resources::member_pod`], if the member restores and the
/// cluster ID is not latched yet.
pub fn add_init_containers(
    pod: &mut Pod,
    cluster: &EtcdCluster,
    member: &EtcdMember,
    operator_image: &str,
) {
    let Some(restore) = member.spec.restore.as_ref() else {
        return;
    };
    let latched = cluster
        .status
        .as_ref()
        .is_some_and(|s| s.cluster_id.is_some());
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let Some(etcd) = spec.containers.first().cloned() else {
        return;
    };
    if latched {
        return;
    }
    let name = member.metadata.name.clone().unwrap_or_default();
    let ns = member.metadata.namespace.clone().unwrap_or_default();
    let mounts = etcd.volume_mounts.clone();
    let snapshot = format!("{RESTORE_DIR}/snapshot.db");
    let staging = format!("{RESTORE_DIR}/data");
    let stored = match (&restore.s3, &restore.pvc) {
        (Some(s3), _) => Stored::S3 {
            location: s3,
            key: s3.key.clone().unwrap_or_default(),
        },
        (None, Some(pvc)) => Stored::Pvc {
            claim: &pvc.claim_name,
            file: pvc.sub_path.clone().unwrap_or_default(),
        },
        (None, None) => return,
    };
    let (mut fetch_args, env, claim) = fetch_step(&stored, &restore.sha256, &snapshot);
    fetch_args.push(format!("--clear={staging}"));
    let mut fetch_mounts = mounts.clone().unwrap_or_default();
    if let Some(claim) = &claim {
        // Read-only, and only for this step: the claim is the backup.
        fetch_mounts.push(VolumeMount {
            name: "backup".to_owned(),
            mount_path: BACKUP_MOUNT.to_owned(),
            read_only: Some(true),
            ..Default::default()
        });
        spec.volumes.get_or_insert_default().push(Volume {
            name: "backup".to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.claim_name.clone(),
                read_only: Some(true),
            }),
            ..Default::default()
        });
    }
    // The operator's image runs as 65532; the data volume, and the staging
    // directory etcdutl (root, as etcd itself) creates with mode 0700, are
    // root's. These two steps write there, so they run as root too, as
    // the member's etcd container does.
    let as_root = SecurityContext {
        run_as_user: Some(0),
        run_as_non_root: Some(false),
        ..Default::default()
    };
    let operator = |container: &str, args: Vec<String>, env: Vec<EnvVar>| Container {
        name: container.to_owned(),
        image: Some(operator_image.to_owned()),
        args: Some(args),
        env: (!env.is_empty()).then_some(env),
        volume_mounts: mounts.clone(),
        security_context: Some(as_root.clone()),
        ..Default::default()
    };
    let restore_container = Container {
        name: "restore-snapshot".to_owned(),
        image: etcd.image.clone(),
        command: Some(vec!["etcdutl".to_owned()]),
        args: Some(vec![
            "snapshot".to_owned(),
            "restore".to_owned(),
            snapshot.clone(),
            format!("--data-dir={staging}"),
            format!("--name={name}"),
            format!("--initial-cluster={}", member.spec.initial_cluster),
            format!("--initial-cluster-token={}", member.spec.cluster_token),
            // The URL the member itself advertises, scheme included.
            format!(
                "--initial-advertise-peer-urls={}",
                own_peer_url(&member.spec.initial_cluster, &name)
                    .map(str::to_owned)
                    .unwrap_or_else(|| {
                        // Not listed (never so for a member the operator
                        // made): the scheme its peers use.
                        let scheme = if member.spec.initial_cluster.contains("https://") {
                            "https"
                        } else {
                            "http"
                        };
                        member_peer_url(scheme, &name, &member.spec.cluster, &ns)
                    })
            ),
        ]),
        volume_mounts: mounts.clone(),
        ..Default::default()
    };
    let mut fetch = reporting(operator("fetch-snapshot", fetch_args, env));
    fetch.volume_mounts = Some(fetch_mounts);
    spec.init_containers = Some(vec![
        fetch,
        restore_container,
        operator(
            "install-snapshot",
            vec![
                "snapshot".to_owned(),
                "install".to_owned(),
                format!("--staging={staging}"),
                format!("--data-dir={DATA_DIR}"),
                format!("--clear={RESTORE_DIR}"),
            ],
            Vec::new(),
        ),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ACCESS_KEY_ID_KEY, MemberRestore, SECRET_ACCESS_KEY_KEY};
    use crate::resources::fixtures;

    fn restoring_seed() -> EtcdMember {
        let mut seed = fixtures::member("main-0", true);
        seed.spec.restore = Some(MemberRestore {
            pvc: None,
            s3: serde_json::from_value(serde_json::json!({
                "endpoint": "https://s3.example.com", "bucket": "bkt", "key": "prod/main/nightly.db",
                "credentialsSecretRef": {"name": "s3-creds"}, "forcePathStyle": true,
                "caBundle": "-----BEGIN CERTIFICATE-----\n",
            }))
            .unwrap(),
            sha256: "ab".repeat(32),
        });
        seed
    }

    #[test]
    fn a_restoring_seed_fetches_restores_and_installs_before_etcd_starts() {
        let cluster = fixtures::cluster(fixtures::spec());
        let seed = restoring_seed();
        let mut pod = crate::resources::member_pod(&cluster, &seed, "quay.io/coreos/etcd").unwrap();
        add_init_containers(
            &mut pod,
            &cluster,
            &seed,
            "registry.example/etcd-steward:0.1.0",
        );
        let spec = pod.spec.unwrap();
        let init = spec.init_containers.unwrap();
        let names: Vec<&str> = init.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["fetch-snapshot", "restore-snapshot", "install-snapshot"]
        );
        // The operator's image for its own steps, etcd's (the member's
        // version) for etcdutl; every step on the data volume.
        assert_eq!(
            init[0].image.as_deref(),
            Some("registry.example/etcd-steward:0.1.0")
        );
        assert_eq!(init[1].image, spec.containers[0].image);
        assert_eq!(
            init[1].command.as_deref(),
            Some(&["etcdutl".to_owned()][..])
        );
        for c in &init {
            assert_eq!(
                c.volume_mounts, spec.containers[0].volume_mounts,
                "{}",
                c.name
            );
        }
        let fetch = init[0].args.clone().unwrap();
        assert!(fetch.contains(&format!("--sha256={}", "ab".repeat(32))));
        assert!(fetch.contains(&"--key=prod/main/nightly.db".to_owned()));
        assert!(fetch.contains(&"--force-path-style".to_owned()));
        // Credentials only by reference, never as values in the Pod.
        let env = init[0].env.clone().unwrap();
        for key in [ACCESS_KEY_ID_KEY, SECRET_ACCESS_KEY_KEY] {
            let e = env.iter().find(|e| e.name == key).unwrap();
            assert!(e.value.is_none());
            let r = e
                .value_from
                .as_ref()
                .unwrap()
                .secret_key_ref
                .as_ref()
                .unwrap();
            assert_eq!((r.name.as_str(), r.key.as_str()), ("s3-creds", key));
        }
        assert!(env.iter().any(|e| e.name == CA_BUNDLE_ENV));
        // The seed restores alone, under the cluster's token.
        let restore = init[1].args.clone().unwrap();
        assert!(restore.contains(&format!("--initial-cluster={}", seed.spec.initial_cluster)));
        assert!(restore.contains(&format!(
            "--initial-cluster-token={}",
            seed.spec.cluster_token
        )));
        assert!(restore.contains(&"--data-dir=/var/lib/etcd/restore/data".to_owned()));
        for c in [&init[0], &init[2]] {
            let sc = c.security_context.as_ref().unwrap();
            assert_eq!(sc.run_as_user, Some(0), "{} writes root's volume", c.name);
        }
    }

    #[test]
    fn a_seed_restoring_from_a_claim_mounts_it_read_only_for_the_fetch_alone() {
        let cluster = fixtures::cluster(fixtures::spec());
        let mut seed = fixtures::member("main-0", true);
        seed.spec.restore = Some(MemberRestore {
            s3: None,
            pvc: Some(crate::api::PvcLocation {
                claim_name: "backups".into(),
                sub_path: Some("etcd/nightly.db".into()),
            }),
            sha256: "cd".repeat(32),
        });
        let mut pod = crate::resources::member_pod(&cluster, &seed, "quay.io/coreos/etcd").unwrap();
        add_init_containers(&mut pod, &cluster, &seed, "etcd-steward:0.1.0");
        let spec = pod.spec.unwrap();
        let init = spec.init_containers.unwrap();
        let fetch = &init[0];
        let args = fetch.args.clone().unwrap();
        assert!(
            args.contains(&format!("--file={BACKUP_MOUNT}/etcd/nightly.db")),
            "{args:?}"
        );
        assert!(
            !args.iter().any(|a| a.starts_with("--endpoint")),
            "{args:?}"
        );
        assert!(fetch.env.is_none(), "no S3 credentials for a claim");
        let backup = fetch
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.name == "backup")
            .unwrap();
        assert_eq!(backup.read_only, Some(true));
        for c in init.iter().skip(1).chain(&spec.containers) {
            assert!(
                !c.volume_mounts.iter().flatten().any(|m| m.name == "backup"),
                "{} must not see the backup claim",
                c.name
            );
        }
        let volume = spec
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "backup")
            .unwrap();
        let claim = volume.persistent_volume_claim.unwrap();
        assert_eq!(
            (claim.claim_name.as_str(), claim.read_only),
            ("backups", Some(true))
        );
    }

    #[test]
    fn no_restore_once_the_cluster_id_is_latched_or_for_other_members() {
        let mut cluster = fixtures::cluster(fixtures::spec());
        cluster.status = Some(crate::api::EtcdClusterStatus {
            cluster_id: Some("abc".into()),
            ..Default::default()
        });
        let seed = restoring_seed();
        let mut pod = crate::resources::member_pod(&cluster, &seed, "quay.io/coreos/etcd").unwrap();
        add_init_containers(&mut pod, &cluster, &seed, "etcd-steward:0.1.0");
        assert!(
            pod.spec.unwrap().init_containers.is_none(),
            "latched: start from the volume"
        );

        let cluster = fixtures::cluster(fixtures::spec());
        let joiner = fixtures::member("main-1", false);
        let mut pod =
            crate::resources::member_pod(&cluster, &joiner, "quay.io/coreos/etcd").unwrap();
        add_init_containers(&mut pod, &cluster, &joiner, "etcd-steward:0.1.0");
        assert!(pod.spec.unwrap().init_containers.is_none());
    }
}

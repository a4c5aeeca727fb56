//! The Pod of one etcd member: a bare Pod (no StatefulSet), named after the
//! member, resolvable as `<member>.<cluster>.<ns>.svc` via the headless
//! Service.
//!
//! `restartPolicy: Never`: a member whose etcd exits ends in phase
//! Succeeded/Failed and the operator deletes and recreates the Pod on the
//! same PVC. The anchor operator let such Pods sit forever (its #368);
//! recreating them is the operator's job, so the kubelet must not hide the
//! exit by restarting the container in place.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, HTTPGetAction, KeyToPath,
    PersistentVolumeClaimVolumeSource, Pod, PodSpec, Probe, ProjectedVolumeSource,
    SecretProjection, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use kube::ResourceExt;

use super::{
    ANNOTATION_VERSION, BuildError, CLIENT_PORT, METRICS_PORT, MemberContext, PEER_PORT,
    client_scheme, member_client_url, member_labels, member_peer_url, owner_of, pvc_name,
};
use crate::api::{EtcdCluster, EtcdMember, StorageMedium};

/// Where etcd keeps its data inside the container.
pub const DATA_DIR: &str = "/var/lib/etcd";
const DATA_VOLUME: &str = "data";
const CONTAINER: &str = "etcd";

/// The Pod for `member` of `cluster`; `etcd_image` is the image repository
/// (the CLI's `--etcd-image`), tagged here with `v<member version>`.
///
/// Labels and annotations from `spec.additionalMetadata` are applied first,
/// so they can never replace the labels the Services and PDB select on.
pub fn member_pod(
    cluster: &EtcdCluster,
    member: &EtcdMember,
    etcd_image: &str,
) -> Result<Pod, BuildError> {
    let cx = MemberContext::new(cluster, member)?;
    let owner = owner_of(member, "EtcdMember")?;
    let spec = &cx.cluster.spec;

    let (mut labels, mut annotations) = match &spec.additional_metadata {
        Some(extra) => (extra.labels.clone(), extra.annotations.clone()),
        None => (BTreeMap::new(), BTreeMap::new()),
    };
    labels.extend(member_labels(
        &cx.cluster_name,
        &cx.member_name,
        member.is_voter(),
    ));
    annotations.insert(ANNOTATION_VERSION.to_owned(), member.spec.version.clone());

    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(cx.member_name.clone()),
            namespace: Some(cx.namespace.clone()),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            hostname: Some(cx.member_name.clone()),
            subdomain: Some(cx.cluster_name.clone()),
            restart_policy: Some("Never".to_owned()),
            // etcd never talks to the Kubernetes API.
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            containers: vec![etcd_container(&cx, etcd_image)],
            volumes: Some(
                std::iter::once(data_volume(&cx))
                    .chain(tls_mounts(cx.cluster).into_iter().map(|m| m.volume()))
                    .collect(),
            ),
            affinity: spec.affinity.clone(),
            topology_spread_constraints: spec.topology_spread_constraints.clone(),
            image_pull_secrets: spec.image_pull_secrets.clone(),
            ..Default::default()
        }),
        status: None,
    })
}

/// The etcd version `pod` was built for: its annotation, else (a Pod made
/// before the annotation existed) its etcd image's `v` tag.
/// The Pod runs etcd with `--force-new-cluster` (quorum-loss recovery).
pub fn pod_forces_new_cluster(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.containers
            .iter()
            .filter(|c| c.name == CONTAINER)
            .flat_map(|c| c.args.iter().flatten().chain(c.command.iter().flatten()))
            .any(|a| a == FORCE_NEW_CLUSTER)
    })
}

const FORCE_NEW_CLUSTER: &str = "--force-new-cluster";

pub fn pod_version(pod: &Pod) -> Option<&str> {
    if let Some(v) = pod.annotations().get(ANNOTATION_VERSION) {
        return Some(v);
    }
    let image = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == CONTAINER)?
        .image
        .as_deref()?;
    image.rsplit_once(":v").map(|(_, v)| v)
}

/// The Pod has terminated for good (phase Succeeded or Failed): with
/// `restartPolicy: Never` it will not run again, so the operator deletes it
/// and creates it anew on the same PVC.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The Pod's Ready condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn etcd_container(cx: &MemberContext<'_>, etcd_image: &str) -> Container {
    Container {
        name: CONTAINER.to_owned(),
        image: Some(format!(
            "{}:v{}",
            etcd_image.trim_end_matches(':'),
            cx.member.spec.version
        )),
        command: Some(vec!["etcd".to_owned()]),
        args: Some(etcd_args(cx)),
        ports: Some(vec![
            port("client", CLIENT_PORT),
            port("peer", PEER_PORT),
            port("metrics", METRICS_PORT),
        ]),
        volume_mounts: Some(
            std::iter::once(VolumeMount {
                name: DATA_VOLUME.to_owned(),
                mount_path: DATA_DIR.to_owned(),
                ..Default::default()
            })
            .chain(tls_mounts(cx.cluster).into_iter().map(|m| m.mount()))
            .collect(),
        ),
        readiness_probe: Some(Probe {
            http_get: Some(http_get("/health")),
            period_seconds: Some(5),
            timeout_seconds: Some(2),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        // Not /health: etcd 3.5 answers it with 503 "RAFT NO LEADER" on every
        // member while quorum is lost (`?serializable=true` too), so a
        // liveness probe there would kill all members during an outage —
        // and with medium Memory, their data. /metrics answers while the
        // process serves at all, which is what liveness is about.
        liveness_probe: Some(Probe {
            http_get: Some(http_get("/metrics")),
            initial_delay_seconds: Some(15),
            period_seconds: Some(10),
            timeout_seconds: Some(5),
            failure_threshold: Some(8),
            ..Default::default()
        }),
        resources: cx.cluster.spec.resources.clone(),
        ..Default::default()
    }
}

fn etcd_args(cx: &MemberContext<'_>) -> Vec<String> {
    let (member, cluster, ns) = (&cx.member_name, &cx.cluster_name, &cx.namespace);
    let spec = &cx.member.spec;
    // The seed starts a new cluster once. After the cluster ID is latched, a
    // seed Pod recreated on a volume that lost its data must not bootstrap
    // a second, empty cluster under the same identity: with "existing" and
    // nobody else in its initial cluster it fails to start, and crash-loop
    // self-heal replaces it with a member that joins the real cluster.
    let latched = cx
        .cluster
        .status
        .as_ref()
        .is_some_and(|s| s.cluster_id.is_some());
    let state = if spec.bootstrap && !latched {
        "new"
    } else {
        "existing"
    };
    let (client, peer) = (
        client_scheme(cx.cluster),
        super::names::peer_scheme(cx.cluster),
    );
    let mut args = vec![
        format!("--name={member}"),
        format!("--data-dir={DATA_DIR}"),
        format!("--listen-client-urls={client}://0.0.0.0:{CLIENT_PORT}"),
        format!("--listen-peer-urls={peer}://0.0.0.0:{PEER_PORT}"),
        // Plain, with TLS too: the kubelet's probes and Prometheus read
        // /health and /metrics here without a client certificate.
        format!("--listen-metrics-urls=http://0.0.0.0:{METRICS_PORT}"),
        format!(
            "--advertise-client-urls={}",
            member_client_url(client, member, cluster, ns)
        ),
        format!(
            "--initial-advertise-peer-urls={}",
            member_peer_url(peer, member, cluster, ns)
        ),
        format!("--initial-cluster={}", spec.initial_cluster),
        format!("--initial-cluster-state={state}"),
        format!("--initial-cluster-token={}", spec.cluster_token),
    ];
    for m in tls_mounts(cx.cluster) {
        let dir = m.dir;
        let flag = if m.peer { "--peer-" } else { "--" };
        args.extend([
            format!("{flag}cert-file={dir}/{TLS_CERT}"),
            format!("{flag}key-file={dir}/{TLS_KEY}"),
        ]);
        // Only holders of a certificate from the Secret's CA may talk to
        // etcd: always between peers; on the client port once the operator
        // has a client certificate of its own (the anchor's meaning of
        // operatorClientSecretRef), else the members serve TLS only.
        if m.peer || m.client_auth {
            args.extend([
                format!("{flag}trusted-ca-file={dir}/{TLS_CA}"),
                format!("{flag}client-cert-auth"),
            ]);
        }
    }
    if spec.force_new_cluster {
        args.push(FORCE_NEW_CLUSTER.to_owned());
    }
    if let Some(options) = &cx.cluster.spec.options {
        if let Some(bytes) = options.quota_backend_bytes {
            args.push(format!("--quota-backend-bytes={bytes}"));
        }
        if let Some(mode) = options.auto_compaction_mode {
            args.push(format!("--auto-compaction-mode={}", mode.as_flag_value()));
        }
        if let Some(retention) = &options.auto_compaction_retention {
            args.push(format!("--auto-compaction-retention={retention}"));
        }
        if let Some(count) = options.snapshot_count {
            args.push(format!("--snapshot-count={count}"));
        }
    }
    args
}

/// The keys of a `kubernetes.io/tls` Secret with its CA, as the anchor
/// operator and cert-manager write them.
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const TLS_CA: &str = "ca.crt";

/// A TLS Secret mounted into the etcd container.
struct TlsMount {
    volume: &'static str,
    dir: &'static str,
    secret: String,
    peer: bool,
    /// Clients must present a certificate from the Secret's CA.
    client_auth: bool,
}

/// The serving Secret and the peer Secret ([`crate::certificates::secrets`]),
/// each as a projected volume of its three keys, read-only.
fn tls_mounts(cluster: &EtcdCluster) -> Vec<TlsMount> {
    let secrets = crate::certificates::secrets(cluster);
    let client = secrets.server.map(|s| TlsMount {
        volume: "client-tls",
        dir: "/etc/etcd/tls/client",
        secret: s.name,
        peer: false,
        client_auth: secrets.operator_client.is_some(),
    });
    let peer = secrets.peer.map(|s| TlsMount {
        volume: "peer-tls",
        dir: "/etc/etcd/tls/peer",
        secret: s.name,
        peer: true,
        client_auth: true,
    });
    client.into_iter().chain(peer).collect()
}

impl TlsMount {
    fn volume(&self) -> Volume {
        let items = [TLS_CERT, TLS_KEY, TLS_CA]
            .into_iter()
            .map(|k| KeyToPath {
                key: k.to_owned(),
                path: k.to_owned(),
                ..Default::default()
            })
            .collect();
        Volume {
            name: self.volume.to_owned(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(vec![VolumeProjection {
                    secret: Some(SecretProjection {
                        name: self.secret.clone(),
                        items: Some(items),
                        optional: Some(false),
                    }),
                    ..Default::default()
                }]),
                // etcd runs as root; the key is for its eyes only.
                default_mode: Some(0o400),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn mount(&self) -> VolumeMount {
        VolumeMount {
            name: self.volume.to_owned(),
            mount_path: self.dir.to_owned(),
            read_only: Some(true),
            ..Default::default()
        }
    }
}

fn data_volume(cx: &MemberContext<'_>) -> Volume {
    let storage = &cx.member.spec.storage;
    match storage.medium {
        StorageMedium::Default => Volume {
            name: DATA_VOLUME.to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: pvc_name(&cx.member_name),
                read_only: None,
            }),
            ..Default::default()
        },
        StorageMedium::Memory => Volume {
            name: DATA_VOLUME.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_owned()),
                size_limit: Some(storage.size.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

fn port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..Default::default()
    }
}

fn http_get(path: &str) -> HTTPGetAction {
    HTTPGetAction {
        path: Some(path.to_owned()),
        port: IntOrString::Int(METRICS_PORT),
        scheme: Some("HTTP".to_owned()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::api::{AdditionalMetadata, EtcdMemberStatus, EtcdOptions};
    use crate::resources::fixtures;
    use crate::resources::{LABEL_INSTANCE, LABEL_ROLE};

    const IMAGE: &str = "gcr.io/etcd-development/etcd";

    fn args(pod: &Pod) -> Vec<String> {
        pod.spec.as_ref().unwrap().containers[0]
            .args
            .clone()
            .unwrap()
    }

    #[test]
    fn tls_from_secrets_serves_https_and_mounts_each_secret_read_only() {
        let mut spec = fixtures::spec();
        spec.tls = Some(serde_json::from_value(serde_json::json!({
            "client": {"serverSecretRef": {"name": "srv"}, "operatorClientSecretRef": {"name": "op"}},
            "peer": {"secretRef": {"name": "peer"}},
        })).unwrap());
        let cluster = fixtures::cluster(spec.clone());
        let pod = member_pod(&cluster, &fixtures::member("main-0", true), IMAGE).unwrap();
        let a = args(&pod);
        for want in [
            "--listen-client-urls=https://0.0.0.0:2379",
            "--listen-peer-urls=https://0.0.0.0:2380",
            "--listen-metrics-urls=http://0.0.0.0:2381",
            "--advertise-client-urls=https://main-0.main.prod.svc:2379",
            "--initial-advertise-peer-urls=https://main-0.main.prod.svc:2380",
            "--cert-file=/etc/etcd/tls/client/tls.crt",
            "--key-file=/etc/etcd/tls/client/tls.key",
            "--trusted-ca-file=/etc/etcd/tls/client/ca.crt",
            "--client-cert-auth",
            "--peer-cert-file=/etc/etcd/tls/peer/tls.crt",
            "--peer-trusted-ca-file=/etc/etcd/tls/peer/ca.crt",
            "--peer-client-cert-auth",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} in {a:?}");
        }
        let spec_of = pod.spec.as_ref().unwrap();
        let volumes = spec_of.volumes.as_ref().unwrap();
        let secret_of = |name: &str| {
            let v = volumes.iter().find(|v| v.name == name).unwrap();
            let p = v.projected.as_ref().unwrap();
            assert_eq!(p.default_mode, Some(0o400));
            p.sources.as_ref().unwrap()[0]
                .secret
                .as_ref()
                .unwrap()
                .name
                .clone()
        };
        assert_eq!(secret_of("client-tls"), "srv");
        assert_eq!(secret_of("peer-tls"), "peer");
        let mounts = spec_of.containers[0].volume_mounts.as_ref().unwrap();
        assert!(
            mounts
                .iter()
                .filter(|m| m.name.ends_with("-tls"))
                .all(|m| m.read_only == Some(true))
        );

        // Server TLS alone (no operator certificate): no client certificates
        // required, as in the anchor.
        spec.tls = Some(
            serde_json::from_value(serde_json::json!({
                "client": {"serverSecretRef": {"name": "srv"}},
            }))
            .unwrap(),
        );
        let cluster = fixtures::cluster(spec);
        let a = args(&member_pod(&cluster, &fixtures::member("main-0", true), IMAGE).unwrap());
        assert!(a.contains(&"--cert-file=/etc/etcd/tls/client/tls.crt".to_owned()));
        assert!(
            !a.iter()
                .any(|x| x == "--client-cert-auth" || x.starts_with("--trusted-ca-file"))
        );
        assert!(a.contains(&"--listen-peer-urls=http://0.0.0.0:2380".to_owned()));
    }

    #[test]
    fn the_seed_starts_a_new_cluster_with_every_address_through_the_headless_service() {
        let cluster = fixtures::cluster(fixtures::spec());
        let seed = fixtures::member("main-0", true);
        let pod = member_pod(&cluster, &seed, IMAGE).unwrap();

        assert_eq!(pod.metadata.name.as_deref(), Some("main-0"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("prod"));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("main-0"));
        assert_eq!(spec.subdomain.as_deref(), Some("main"));
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let c = &spec.containers[0];
        assert_eq!(c.name, "etcd");
        assert_eq!(
            c.image.as_deref(),
            Some("gcr.io/etcd-development/etcd:v3.6.17")
        );
        assert_eq!(c.command.as_deref(), Some(&["etcd".to_owned()][..]));
        assert_eq!(
            args(&pod),
            [
                "--name=main-0",
                "--data-dir=/var/lib/etcd",
                "--listen-client-urls=http://0.0.0.0:2379",
                "--listen-peer-urls=http://0.0.0.0:2380",
                "--listen-metrics-urls=http://0.0.0.0:2381",
                "--advertise-client-urls=http://main-0.main.prod.svc:2379",
                "--initial-advertise-peer-urls=http://main-0.main.prod.svc:2380",
                "--initial-cluster=main-0=http://main-0.main.prod.svc:2380",
                "--initial-cluster-state=new",
                "--initial-cluster-token=main-uid-cluster",
            ]
        );
    }

    #[test]
    fn a_seed_pod_made_after_the_cluster_id_latched_never_starts_a_new_cluster() {
        let mut cluster = fixtures::cluster(fixtures::spec());
        cluster.status = Some(crate::api::EtcdClusterStatus {
            cluster_id: Some("8e9e05c52164694d".into()),
            ..Default::default()
        });
        let seed = fixtures::member("main-0", true);
        let a = args(&member_pod(&cluster, &seed, IMAGE).unwrap());
        assert!(
            a.contains(&"--initial-cluster-state=existing".to_owned()),
            "{a:?}"
        );
    }

    #[test]
    fn a_joining_member_uses_the_initial_cluster_etcd_gave_and_state_existing() {
        let cluster = fixtures::cluster(fixtures::spec());
        let mut joiner = fixtures::member("main-1", false);
        joiner.spec.initial_cluster =
            "main-0=http://main-0.main.prod.svc:2380,main-1=http://main-1.main.prod.svc:2380"
                .into();
        let a = args(&member_pod(&cluster, &joiner, IMAGE).unwrap());
        assert!(a.contains(&"--initial-cluster-state=existing".to_owned()));
        assert!(a.contains(&"--initial-cluster=main-0=http://main-0.main.prod.svc:2380,main-1=http://main-1.main.prod.svc:2380".to_owned()));
    }

    #[test]
    fn options_become_etcd_flags() {
        let mut spec = fixtures::spec();
        spec.options = Some(EtcdOptions {
            quota_backend_bytes: Some(8 << 30),
            auto_compaction_mode: Some(crate::api::AutoCompactionMode::Periodic),
            auto_compaction_retention: Some("1h".into()),
            snapshot_count: Some(10_000),
        });
        let cluster = fixtures::cluster(spec);
        let a = args(&member_pod(&cluster, &fixtures::member("main-0", true), IMAGE).unwrap());
        assert_eq!(
            a[10..],
            [
                "--quota-backend-bytes=8589934592",
                "--auto-compaction-mode=periodic",
                "--auto-compaction-retention=1h",
                "--snapshot-count=10000",
            ]
        );
    }

    #[test]
    fn data_lives_on_the_member_pvc_or_in_a_sized_tmpfs() {
        let cluster = fixtures::cluster(fixtures::spec());
        let mut member = fixtures::member("main-2", false);
        let pod = member_pod(&cluster, &member, IMAGE).unwrap();
        let spec = pod.spec.unwrap();
        let mount = &spec.containers[0].volume_mounts.as_ref().unwrap()[0];
        assert_eq!(
            (mount.name.as_str(), mount.mount_path.as_str()),
            ("data", DATA_DIR)
        );
        let volume = &spec.volumes.as_ref().unwrap()[0];
        assert_eq!(volume.name, "data");
        assert_eq!(
            volume.persistent_volume_claim.as_ref().unwrap().claim_name,
            "data-main-2"
        );

        member.spec.storage.medium = StorageMedium::Memory;
        member.spec.storage.size = Quantity("512Mi".into());
        let pod = member_pod(&cluster, &member, IMAGE).unwrap();
        let volume = &pod.spec.unwrap().volumes.unwrap()[0];
        assert!(volume.persistent_volume_claim.is_none());
        let empty_dir = volume.empty_dir.as_ref().unwrap();
        assert_eq!(empty_dir.medium.as_deref(), Some("Memory"));
        assert_eq!(empty_dir.size_limit, Some(Quantity("512Mi".into())));
    }

    #[test]
    fn terminal_and_ready_pods_are_told_apart() {
        use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
        let with = |phase: &str, ready: &str| Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(is_terminal(&with("Succeeded", "False")));
        assert!(is_terminal(&with("Failed", "False")));
        assert!(!is_terminal(&with("Running", "True")));
        assert!(!is_terminal(&Pod::default()));
        assert!(is_ready(&with("Running", "True")));
        assert!(!is_ready(&with("Running", "False")));
        assert!(!is_ready(&Pod::default()));
    }

    #[test]
    fn probes_hit_the_metrics_listener() {
        let cluster = fixtures::cluster(fixtures::spec());
        let pod = member_pod(&cluster, &fixtures::member("main-0", true), IMAGE).unwrap();
        let c = &pod.spec.unwrap().containers[0];
        let readiness = c.readiness_probe.as_ref().unwrap();
        let get = readiness.http_get.as_ref().unwrap();
        assert_eq!(
            (get.path.as_deref(), &get.port),
            (Some("/health"), &IntOrString::Int(2381))
        );
        assert_eq!(readiness.period_seconds, Some(5));
        let liveness = c.liveness_probe.as_ref().unwrap();
        assert_eq!(
            liveness.http_get.as_ref().unwrap().port,
            IntOrString::Int(2381)
        );
        // Generous: a slow disk or a long apply must not kill a member.
        let window = liveness.period_seconds.unwrap() * liveness.failure_threshold.unwrap();
        assert!(window >= 60, "liveness gives up after {window}s");
    }

    #[test]
    fn user_metadata_and_scheduling_are_applied_but_cannot_replace_selector_labels() {
        let mut spec: crate::api::EtcdClusterSpec = serde_json::from_value(serde_json::json!({
            "version": "3.6.17",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname",
                 "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "main"}}}
            ]}},
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
            "imagePullSecrets": [{"name": "regcred"}],
        }))
        .unwrap();
        spec.additional_metadata = Some(AdditionalMetadata {
            labels: BTreeMap::from([
                ("team".to_owned(), "storage".to_owned()),
                (LABEL_INSTANCE.to_owned(), "hijack".to_owned()),
            ]),
            annotations: BTreeMap::from([("note".to_owned(), "hello".to_owned())]),
        });
        let cluster = fixtures::cluster(spec);
        let pod = member_pod(&cluster, &fixtures::member("main-0", true), IMAGE).unwrap();
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["team"], "storage");
        assert_eq!(labels[LABEL_INSTANCE], "main");
        assert_eq!(pod.metadata.annotations.as_ref().unwrap()["note"], "hello");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            spec.containers[0]
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["cpu"],
            Quantity("100m".into())
        );
        assert!(spec.affinity.as_ref().unwrap().pod_anti_affinity.is_some());
        assert_eq!(spec.topology_spread_constraints.as_ref().unwrap().len(), 1);
        assert_eq!(spec.image_pull_secrets.as_ref().unwrap()[0].name, "regcred");
    }

    #[test]
    fn the_pod_is_owned_by_its_member_and_labelled_with_its_role() {
        let cluster = fixtures::cluster(fixtures::spec());
        let mut learner = fixtures::member("main-3", false);
        let pod = member_pod(&cluster, &learner, IMAGE).unwrap();
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("EtcdMember", "main-3", "uid-main-3")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[LABEL_ROLE], "learner");

        learner.status = Some(EtcdMemberStatus {
            is_voter: true,
            ..Default::default()
        });
        let pod = member_pod(&cluster, &learner, IMAGE).unwrap();
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[LABEL_ROLE], "voter");
    }
}

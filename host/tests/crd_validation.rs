//! The committed CRDs, applied with the real kubectl to the real
//! kube-apiserver: it accepts them (structural schema, CEL cost budget), and
//! every schema and CEL rule on our own fields accepts one object and
//! rejects another with the apiserver's own message.

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use steward_testbed::ControlPlane;

struct Crds {
    plane: ControlPlane,
    clusters: Api<DynamicObject>,
    members: Api<DynamicObject>,
    policies: Api<DynamicObject>,
    snapshots: Api<DynamicObject>,
    schedules: Api<DynamicObject>,
    _dir: tempfile::TempDir,
}

async fn applied() -> Crds {
    let dir = tempfile::tempdir().unwrap();
    let plane = ControlPlane::start_api_only(dir.path())
        .await
        .expect("the control plane starts (run the tests through `make test`)");
    let crds = steward_testbed::repo::root().join("crds/");
    let out = Command::new(&plane.binaries().kubectl)
        .args(["apply", "--server-side", "-f"])
        .arg(&crds)
        .env("KUBECONFIG", plane.kubeconfig_path())
        .output()
        .expect("running kubectl");
    assert!(
        out.status.success(),
        "kubectl apply -f crds/: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let api: Api<CustomResourceDefinition> = Api::all(plane.client());
    for name in [
        "etcdclusters.etcd.steward.dev",
        "etcdmembers.etcd.steward.dev",
        "etcdstatuspolicies.etcd.steward.dev",
        "etcdsnapshots.etcd.steward.dev",
        "etcdbackupschedules.etcd.steward.dev",
    ] {
        established(&api, name).await;
    }
    let resource = |kind: &str, plural: &str| ApiResource {
        group: "etcd.steward.dev".into(),
        version: "v1alpha1".into(),
        api_version: "etcd.steward.dev/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    Crds {
        clusters: Api::namespaced_with(
            plane.client(),
            "default",
            &resource("EtcdCluster", "etcdclusters"),
        ),
        members: Api::namespaced_with(
            plane.client(),
            "default",
            &resource("EtcdMember", "etcdmembers"),
        ),
        policies: Api::all_with(
            plane.client(),
            &resource("EtcdStatusPolicy", "etcdstatuspolicies"),
        ),
        snapshots: Api::namespaced_with(
            plane.client(),
            "default",
            &resource("EtcdSnapshot", "etcdsnapshots"),
        ),
        schedules: Api::namespaced_with(
            plane.client(),
            "default",
            &resource("EtcdBackupSchedule", "etcdbackupschedules"),
        ),
        plane,
        _dir: dir,
    }
}

/// Waits for Established; a NonStructuralSchema or a rejected CEL rule would
/// show up as a condition instead.
async fn established(api: &Api<CustomResourceDefinition>, name: &str) {
    let start = Instant::now();
    loop {
        let crd = api.get(name).await.unwrap();
        let conditions = crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        assert!(
            !conditions
                .iter()
                .any(|c| c.type_ == "NonStructuralSchema" && c.status == "True"),
            "{name}: {conditions:?}"
        );
        if conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{name} never Established: {conditions:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn cluster(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "etcd.steward.dev/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

fn member(name: &str, cluster: &str, bootstrap: bool) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "etcd.steward.dev/v1alpha1",
        "kind": "EtcdMember",
        "metadata": {"name": name},
        "spec": {
            "cluster": cluster,
            "version": "3.6.17",
            "initialCluster": format!("{name}=http://{name}.{cluster}.default.svc:2380"),
            "clusterToken": "t",
            "bootstrap": bootstrap,
        },
    }))
    .unwrap()
}

/// The apiserver's message for a rejected write; panics if it was accepted.
fn rejected<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{s:?}");
            s.message
        }
        other => panic!("expected a 422 rejection, got {other:?}"),
    }
}

impl Crds {
    async fn create(&self, name: &str, spec: Value) -> Result<DynamicObject, kube::Error> {
        self.clusters
            .create(&PostParams::default(), &cluster(name, spec))
            .await
    }

    async fn patch_spec(&self, name: &str, spec: Value) -> Result<DynamicObject, kube::Error> {
        self.clusters
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
    }

    async fn reject_create(&self, spec: Value, expected: &str) {
        let message = rejected(self.create("rejected", spec.clone()).await);
        assert!(
            message.contains(expected),
            "creating {spec}: expected {expected:?} in {message:?}"
        );
    }
}

#[tokio::test]
async fn the_schema_rules_accept_and_reject_with_the_apiservers_messages() {
    let crds = applied().await;
    // Accepted: a minimal cluster, defaulted by the apiserver from the schema.
    let made = crds
        .create("minimal", json!({"version": "3.6.17"}))
        .await
        .unwrap();
    assert_eq!(made.data["spec"]["replicas"], 3, "{:?}", made.data);
    // No version: the operator's default, shown in the stored object.
    let bare = crds.create("bare", json!({})).await.unwrap();
    assert_eq!(
        bare.data["spec"]["version"],
        etcd_steward::api::DEFAULT_ETCD_VERSION,
        "{:?}",
        bare.data
    );
    assert_eq!(made.data["spec"]["storage"]["size"], "1Gi");
    crds.create(
        "full",
        json!({"version": "3.6.17", "replicas": 5, "progressDeadlineSeconds": 1,
               "storage": {"medium": "Memory", "size": "256Mi"},
               "options": {"autoCompactionMode": "revision", "snapshotCount": 1, "quotaBackendBytes": 0}}),
    )
    .await
    .unwrap();

    let cases = [
        (
            json!({"version": "3.5"}),
            r#"spec.version: Invalid value: "3.5": spec.version in body should match '^\d+\.\d+\.\d+$'"#,
        ),
        (
            json!({"replicas": 9}),
            "spec.replicas must be at most 7: every write waits for a majority of the voters",
        ),
        (
            json!({"version": "3.6.17", "replicas": -1}),
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
        ),
        (
            json!({"version": "3.6.17", "progressDeadlineSeconds": 0}),
            "spec.progressDeadlineSeconds in body should be greater than or equal to 1",
        ),
        (
            json!({"version": "3.6.17", "storage": {"medium": "Disk"}}),
            r#"spec.storage.medium: Unsupported value: "Disk": supported values: "", "Memory""#,
        ),
        (
            json!({"version": "3.6.17", "options": {"autoCompactionMode": "hourly"}}),
            r#"spec.options.autoCompactionMode: Unsupported value: "hourly": supported values: "periodic", "revision""#,
        ),
        (
            json!({"version": "3.6.17", "options": {"snapshotCount": 0}}),
            "spec.options.snapshotCount in body should be greater than or equal to 1",
        ),
        (
            json!({"version": "3.6.17", "options": {"quotaBackendBytes": -1}}),
            "spec.options.quotaBackendBytes in body should be greater than or equal to 0",
        ),
        (
            json!({"version": "3.6.17", "options": {"autoCompactionRetention": ""}}),
            "spec.options.autoCompactionRetention in body should be at least 1 chars long",
        ),
    ];
    for (spec, expected) in cases {
        crds.reject_create(spec, expected).await;
    }
    crds.plane.shutdown().await;
}

#[tokio::test]
async fn the_cel_rules_on_create_accept_and_reject_with_their_messages() {
    let crds = applied().await;
    let cases = [
        (
            json!({"version": "3.6.17", "tls": {"client": {"certManager": {"serverIssuerRef": {"name": "ca"}}, "serverSecretRef": {"name": "srv"}}}}),
            "spec: Required value: spec.tls.client needs exactly one of serverSecretRef",
        ),
        (
            json!({"version": "3.6.17", "tls": {"client": {"certManager": {"serverIssuerRef": {"name": "ca"}}, "operatorClientSecretRef": {"name": "op"}}}}),
            "spec: Forbidden: spec.tls.client.operatorClientSecretRef goes with serverSecretRef; with certManager, name the operator's issuer in certManager.operatorClientIssuerRef",
        ),
        (
            json!({"version": "3.6.17", "tls": {"peer": {"certManager": {"issuerRef": {"name": "ca"}}, "secretRef": {"name": "p"}}}}),
            "spec: Required value: spec.tls.peer needs exactly one of secretRef and certManager",
        ),
        (
            json!({"version": "3.6.17", "tls": {"client": {"operatorClientSecretRef": {"name": "op"}}}}),
            "spec: Required value: spec.tls.client needs exactly one of serverSecretRef",
        ),
        (
            json!({"version": "3.6.17", "tls": {"peer": {}}}),
            "spec: Required value: spec.tls.peer needs exactly one of secretRef and certManager",
        ),
        (
            json!({"version": "3.6.17", "tls": {"client": {"certManager": {"serverIssuerRef": {"name": "ca", "kind": "Vault"}}}}}),
            r#"spec.tls.client.certManager.serverIssuerRef.kind: Unsupported value: "Vault": supported values: "Issuer", "ClusterIssuer""#,
        ),
        (
            json!({"version": "3.6.17", "auth": {"enabled": true}}),
            "spec: Required value: spec.auth.enabled needs spec.auth.rootCredentialsSecretRef",
        ),
        (
            json!({"version": "3.6.17", "bootstrap": {"restore": {"source": {"s3": {"endpoint": "https://s3.example.com", "bucket": "bkt", "key": "snap.db", "credentialsSecretRef": {"name": "c"}}}}}}),
            "spec.bootstrap.restore.source.s3 needs sha256",
        ),
        (
            json!({"version": "3.6.17", "bootstrap": {"restore": {"source": {"pvc": {"claimName": "backups", "subPath": "etcd/main.db"}}}}}),
            "spec.bootstrap.restore.source.pvc needs sha256",
        ),
        (
            json!({"version": "3.6.17", "bootstrap": {"restore": {"source": {"pvc": {"claimName": "backups"}, "sha256": "ab".repeat(32)}}}}),
            "spec.bootstrap.restore.source.pvc.subPath must be the snapshot file's path in the volume",
        ),
        (
            json!({"version": "3.6.17", "bootstrap": {"restore": {"source": {"pvc": {"claimName": "backups", "subPath": "../other/main.db"}, "sha256": "ab".repeat(32)}}}}),
            "pvc.subPath must be a relative path inside the volume, without '..'",
        ),
        (
            json!({"version": "3.6.17", "bootstrap": {"restore": {"source": {}}}}),
            "spec.bootstrap.restore.source needs exactly one of snapshotRef, s3 or pvc",
        ),
        (
            json!({"version": "3.6.17", "bootstrap": {"restore": {"source": {"snapshotRef": {"name": "s"}, "sha256": "nothex"}}}}),
            "spec.bootstrap.restore.source.sha256 in body should match",
        ),
        (
            json!({"version": "3.6.17", "replicas": 0, "storage": {"medium": "Memory", "size": "1Gi"}}),
            "spec.replicas=0 with spec.storage.medium=Memory is unsupported",
        ),
        (
            json!({"version": "3.6.17", "storage": {"medium": "Memory", "size": "0"}}),
            "spec.storage.size must be greater than 0 when spec.storage.medium=Memory",
        ),
        (
            json!({"version": "3.4.37"}),
            "spec.version: Invalid value: \"3.4.37\": spec.version must be a release of etcd 3.5, 3.6 or 3.7",
        ),
        (
            json!({"version": "3.8.0"}),
            "spec.version must be a release of etcd 3.5, 3.6 or 3.7",
        ),
        (
            json!({"version": "3.5.1"}),
            "spec.version: Forbidden: spec.version 3.5.0, 3.5.1 and 3.5.2 are refused: they have a data-inconsistency bug",
        ),
    ];
    for (spec, expected) in cases {
        crds.reject_create(spec, expected).await;
    }
    // The accepted side of each: the same specs without the forbidden part.
    for (name, spec) in [
        ("bootstrap", json!({"version": "3.6.17", "bootstrap": {}})),
        (
            "from-snapshot",
            json!({"version": "3.6.17", "bootstrap": {"restore": {"source": {"snapshotRef": {"name": "nightly"}}}}}),
        ),
        (
            "from-s3",
            json!({"version": "3.6.17", "bootstrap": {"restore": {"source": {"s3": {"endpoint": "https://s3.example.com", "bucket": "bkt", "key": "main/nightly.db", "credentialsSecretRef": {"name": "c"}}, "sha256": "sha256:abababababababababababababababababababababababababababababababab"}}}}),
        ),
        ("paused", json!({"version": "3.6.17", "replicas": 0})),
        // The anchor's cert-manager form, as its manifests give it.
        (
            "cert-manager",
            json!({"version": "3.6.17", "tls": {
                "client": {"certManager": {"serverIssuerRef": {"name": "etcd-ca", "kind": "ClusterIssuer"},
                                           "operatorClientIssuerRef": {"name": "etcd-ca", "kind": "ClusterIssuer"}}},
                "peer": {"certManager": {"issuerRef": {"name": "etcd-ca"}}}}}),
        ),
        ("old-minor", json!({"version": "3.5.3"})),
        ("new-minor", json!({"version": "3.7.4"})),
        (
            "memory",
            json!({"version": "3.6.17", "storage": {"medium": "Memory", "size": "1Mi"}}),
        ),
    ] {
        crds.create(name, spec).await.unwrap();
    }
    crds.plane.shutdown().await;
}

#[tokio::test]
async fn the_cel_transition_rules_accept_and_reject_with_their_messages() {
    let crds = applied().await;
    crds.create(
        "pvc",
        json!({"version": "3.6.17", "storage": {"size": "1Gi"}}),
    )
    .await
    .unwrap();
    crds.create(
        "memory",
        json!({"version": "3.6.17", "storage": {"medium": "Memory"}}),
    )
    .await
    .unwrap();
    crds.create(
        "fast",
        json!({"version": "3.6.17", "storage": {"storageClassName": "fast"}}),
    )
    .await
    .unwrap();

    // Equal quantities, scaling, upgrading, a policy change: fine.
    crds.patch_spec("pvc", json!({"storage": {"size": "1024Mi"}}))
        .await
        .unwrap();
    crds.patch_spec(
        "pvc",
        json!({"version": "3.7.4", "replicas": 5,
               "statusPolicy": {"name": "strict", "settings": {"probeDeadlineMs": 1500}}}),
    )
    .await
    .unwrap();
    crds.patch_spec("fast", json!({"replicas": 1}))
        .await
        .unwrap();
    // Growth is accepted: the members' PVCs are expanded.
    crds.patch_spec("pvc", json!({"storage": {"size": "2Gi"}}))
        .await
        .unwrap();

    let message = rejected(
        crds.patch_spec("pvc", json!({"storage": {"size": "1Gi"}}))
            .await,
    );
    assert!(
        message.contains("spec.storage.size cannot shrink (a PVC cannot shrink)"),
        "{message}"
    );
    let message = rejected(
        crds.patch_spec("pvc", json!({"storage": {"size": "2000Mi"}}))
            .await,
    );
    assert!(
        message.contains("spec.storage.size cannot shrink"),
        "{message}"
    );

    let message = rejected(
        crds.patch_spec("pvc", json!({"storage": {"medium": "Memory"}}))
            .await,
    );
    assert!(
        message.contains("spec.storage.medium is immutable"),
        "{message}"
    );
    let message = rejected(crds.patch_spec("memory", json!({"replicas": 0})).await);
    assert!(
        message.contains("spec.replicas=0 with spec.storage.medium=Memory"),
        "{message}"
    );

    let class = "spec.storage.storageClassName cannot be added, removed or changed";
    for (name, storage) in [
        ("pvc", json!({"storageClassName": "fast"})),
        ("fast", json!({"storageClassName": "slow"})),
        ("fast", json!({"storageClassName": null})),
        ("fast", json!({"storageClassName": ""})),
    ] {
        let message = rejected(crds.patch_spec(name, json!({"storage": storage})).await);
        assert!(message.contains(class), "{name} {storage}: {message}");
    }

    // TLS from Secrets, as the anchor's manifests give it: server TLS
    // alone, or with the operator's client certificate, and peer TLS. Fixed
    // once created.
    crds.create(
        "tls",
        json!({"version": "3.6.17", "tls": {
            "client": {"serverSecretRef": {"name": "etcd-server"},
                       "operatorClientSecretRef": {"name": "etcd-operator"}},
            "peer": {"secretRef": {"name": "etcd-peer"}}}}),
    )
    .await
    .unwrap();
    crds.create(
        "server-tls",
        json!({"version": "3.6.17", "tls": {"client": {"serverSecretRef": {"name": "etcd-server"}}}}),
    )
    .await
    .unwrap();
    let fixed = "spec.tls cannot be added, removed or changed yet";
    for (name, tls) in [
        ("tls", json!(null)),
        ("tls", json!({"peer": null})),
        (
            "server-tls",
            json!({"client": {"operatorClientSecretRef": {"name": "op"}}}),
        ),
        (
            "pvc",
            json!({"client": {"serverSecretRef": {"name": "etcd-server"}}}),
        ),
    ] {
        let message = rejected(crds.patch_spec(name, json!({"tls": tls})).await);
        assert!(message.contains(fixed), "{name} {tls}: {message}");
    }

    // Authentication: turned on later, off with the Secret kept, but never
    // left on without the Secret the operator needs to turn it off.
    crds.create(
        "auth",
        json!({"version": "3.6.17", "auth": {"enabled": true, "rootCredentialsSecretRef": {"name": "root"}}}),
    )
    .await
    .unwrap();
    crds.patch_spec(
        "pvc",
        json!({"auth": {"enabled": true, "rootCredentialsSecretRef": {"name": "root"}}}),
    )
    .await
    .unwrap();
    let keep = "to turn etcd authentication off, set spec.auth.enabled to false and keep spec.auth.rootCredentialsSecretRef";
    for auth in [
        json!(null),
        json!({"rootCredentialsSecretRef": null}),
        json!({"enabled": false, "rootCredentialsSecretRef": null}),
    ] {
        let message = rejected(crds.patch_spec("auth", json!({"auth": auth})).await);
        assert!(message.contains(keep), "{auth}: {message}");
    }
    crds.patch_spec("auth", json!({"auth": {"enabled": false}}))
        .await
        .unwrap();
    crds.patch_spec("auth", json!({"auth": null}))
        .await
        .unwrap();

    // What a cluster was restored from is part of its history: it can be
    // neither added later nor changed.
    crds.create(
        "restored",
        json!({"version": "3.6.17", "bootstrap": {"restore": {"source": {"snapshotRef": {"name": "nightly"}}}}}),
    )
    .await
    .unwrap();
    let immutable = "spec.bootstrap.restore is immutable";
    for (name, bootstrap) in [
        (
            "restored",
            json!({"restore": {"source": {"snapshotRef": {"name": "other"}}}}),
        ),
        ("restored", json!({"restore": null})),
        (
            "pvc",
            json!({"restore": {"source": {"snapshotRef": {"name": "nightly"}}}}),
        ),
    ] {
        let message = rejected(crds.patch_spec(name, json!({"bootstrap": bootstrap})).await);
        assert!(message.contains(immutable), "{name} {bootstrap}: {message}");
    }
    crds.plane.shutdown().await;
}

#[tokio::test]
async fn an_etcdmember_keeps_its_cluster_and_seed_flag() {
    let crds = applied().await;
    let pp = PostParams::default();
    crds.members
        .create(&pp, &member("main-0", "main", true))
        .await
        .unwrap();
    let patch = |spec: Value| Patch::Merge(json!({"spec": spec}));
    crds.members
        .patch(
            "main-0",
            &PatchParams::default(),
            &patch(json!({"dormant": true})),
        )
        .await
        .unwrap();
    let message = rejected(
        crds.members
            .patch(
                "main-0",
                &PatchParams::default(),
                &patch(json!({"cluster": "other"})),
            )
            .await,
    );
    assert!(message.contains("spec.cluster is immutable"), "{message}");
    let message = rejected(
        crds.members
            .patch(
                "main-0",
                &PatchParams::default(),
                &patch(json!({"bootstrap": false})),
            )
            .await,
    );
    assert!(message.contains("spec.bootstrap is immutable"), "{message}");
    crds.members
        .delete("main-0", &DeleteParams::default())
        .await
        .unwrap();
    crds.plane.shutdown().await;
}

/// EtcdStatusPolicy: the digest's form, exactly one source, the limits'
/// lower bounds.
#[tokio::test]
async fn the_status_policy_rules_accept_and_reject_with_their_messages() {
    let crds = applied().await;
    let digest = format!("sha256:{}", "ab".repeat(32));
    let policy = |name: &str, spec: Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdStatusPolicy",
            "metadata": {"name": name},
            "spec": spec,
        }))
        .unwrap()
    };
    for (name, spec) in [
        (
            "from-cm",
            json!({"digest": digest, "source": {"configMap": {"name": "p"}}}),
        ),
        (
            "private-oci",
            json!({"digest": digest, "source": {"oci": {"reference": "r.example/p:v1", "pullSecret": "creds", "caConfigMap": "ca"}}}),
        ),
        (
            "from-oci",
            json!({"digest": digest, "source": {"oci": {"reference": "r.example/p:v1", "insecure": true}},
                   "limits": {"deadlineMilliseconds": 100, "memoryBytes": 65536, "componentBytes": 8, "instances": 1}}),
        ),
    ] {
        crds.policies
            .create(&PostParams::default(), &policy(name, spec))
            .await
            .unwrap();
    }
    let cases = [
        (
            json!({"digest": "sha256:ABC", "source": {"configMap": {"name": "p"}}}),
            "spec.digest in body should match '^sha256:[0-9a-f]{64}$'",
        ),
        (
            json!({"digest": digest, "source": {}}),
            "spec.source needs exactly one of configMap and oci",
        ),
        (
            json!({"digest": digest, "source": {"configMap": {"name": "p"}, "oci": {"reference": "r/p:v1"}}}),
            "spec.source needs exactly one of configMap and oci",
        ),
        (
            json!({"digest": digest, "source": {"configMap": {"name": ""}}}),
            "spec.source.configMap.name in body should be at least 1 chars long",
        ),
        (
            json!({"digest": digest, "source": {"oci": {"reference": "r/p:v1", "insecure": true, "pullSecret": "creds"}}}),
            "a pullSecret's credentials would travel over plain HTTP with insecure: true",
        ),
        (
            json!({"digest": digest, "source": {"oci": {"reference": "r/p:v1", "insecure": true, "caConfigMap": "ca"}}}),
            "caConfigMap verifies a TLS registry, but insecure: true speaks plain HTTP",
        ),
        (
            json!({"digest": digest, "source": {"oci": {"reference": "r/p:v1"}}, "limits": {"deadlineMilliseconds": 0}}),
            "spec.limits.deadlineMilliseconds in body should be greater than or equal to 1",
        ),
        (
            json!({"digest": digest, "source": {"oci": {"reference": "r/p:v1"}}, "limits": {"memoryBytes": 1024}}),
            "spec.limits.memoryBytes in body should be greater than or equal to 65536",
        ),
    ];
    for (spec, expected) in cases {
        let message = rejected(
            crds.policies
                .create(&PostParams::default(), &policy("rejected", spec.clone()))
                .await,
        );
        assert!(
            message.contains(expected),
            "creating {spec}: expected {expected:?} in {message:?}"
        );
    }
    crds.plane.shutdown().await;
}

/// EtcdSnapshot: the anchor's manifest applies with only its apiVersion
/// changed, and so does its PVC destination; exactly one destination; a
/// sub-path stays inside the volume; the spec never changes after create.
#[tokio::test]
async fn the_snapshot_rules_accept_and_reject_with_their_messages() {
    let crds = applied().await;
    let pp = PostParams::default();
    let snapshot = |name: &str, destination: Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdSnapshot",
            "metadata": {"name": name},
            "spec": {"clusterRef": {"name": "main"}, "destination": destination},
        }))
        .unwrap()
    };
    // The cozystack etcd-operator's example, apiVersion changed.
    let anchor = json!({"s3": {
        "endpoint": "https://s3.example.com",
        "bucket": "etcd-backups",
        "key": "main/",
        "credentialsSecretRef": {"name": "s3-credentials"},
        "region": "eu-central-1",
        "forcePathStyle": true,
    }});
    crds.snapshots
        .create(&pp, &snapshot("anchor", anchor.clone()))
        .await
        .unwrap();
    crds.snapshots
        .create(
            &pp,
            &snapshot(
                "anchor-pvc",
                json!({"pvc": {"claimName": "backups", "subPath": "etcd/main"}}),
            ),
        )
        .await
        .unwrap();
    for (destination, expected) in [
        (
            json!({"pvc": {"claimName": "backups", "subPath": "/etc"}}),
            "pvc.subPath must be a relative path inside the volume, without '..'",
        ),
        (
            json!({"pvc": {"claimName": "backups", "subPath": "a/../../b"}}),
            "pvc.subPath must be a relative path inside the volume, without '..'",
        ),
        (
            json!({}),
            "exactly one of destination.s3 or destination.pvc must be set",
        ),
        (
            json!({"s3": {"endpoint": "s3.example.com", "bucket": "etcd-backups", "credentialsSecretRef": {"name": "c"}}}),
            "destination.s3.endpoint must be an http:// or https:// URL",
        ),
    ] {
        let message = rejected(
            crds.snapshots
                .create(&pp, &snapshot("rejected", destination.clone()))
                .await,
        );
        assert!(
            message.contains(expected),
            "{destination}: expected {expected:?} in {message:?}"
        );
    }
    let message = rejected(
        crds.snapshots
            .patch(
                "anchor",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"destination": {"s3": {"bucket": "elsewhere"}}}})),
            )
            .await,
    );
    assert!(
        message.contains("an EtcdSnapshot's spec is immutable"),
        "{message}"
    );
    crds.plane.shutdown().await;
}

/// EtcdBackupSchedule: the cron field count (the apiserver cannot parse
/// cron; a schedule that has the fields but does not parse gets a condition).
#[tokio::test]
async fn the_schedule_rules_accept_and_reject_with_their_messages() {
    let crds = applied().await;
    let pp = PostParams::default();
    let schedule = |name: &str, cron: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "etcd.steward.dev/v1alpha1",
            "kind": "EtcdBackupSchedule",
            "metadata": {"name": name},
            "spec": {
                "clusterRef": {"name": "main"},
                "schedule": cron,
                "destination": {"s3": {"endpoint": "https://s3.example.com", "bucket": "etcd-backups",
                                       "credentialsSecretRef": {"name": "c"}}},
            },
        }))
        .unwrap()
    };
    for (name, cron) in [
        ("five", "0 * * * *"),
        ("six", "*/10 * * * * *"),
        ("macro", "@daily"),
    ] {
        crds.schedules
            .create(&pp, &schedule(name, cron))
            .await
            .unwrap();
    }
    let mut to_claim = schedule("to-claim", "0 * * * *");
    to_claim.data["spec"]["destination"] = json!({"pvc": {"claimName": "backups"}});
    crds.schedules.create(&pp, &to_claim).await.unwrap();
    for cron in ["0 * *", "every hour", "0 0 * * * * * *"] {
        let message = rejected(
            crds.schedules
                .create(&pp, &schedule("rejected", cron))
                .await,
        );
        assert!(
            message.contains("spec.schedule must be a cron expression of 5 fields"),
            "{cron}: {message}"
        );
    }
    crds.plane.shutdown().await;
}

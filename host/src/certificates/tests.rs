use serde_json::json;

use super::*;
use crate::mock_api::{self, Exchange, api_error, echo, ok};
use crate::resources::fixtures;

fn cluster(tls: Value) -> EtcdCluster {
    let mut spec = fixtures::spec();
    spec.tls = Some(serde_json::from_value(tls).unwrap());
    fixtures::cluster(spec)
}

fn cert_manager() -> EtcdCluster {
    cluster(json!({
        "client": {"certManager": {"serverIssuerRef": {"name": "ca"},
                                   "operatorClientIssuerRef": {"name": "ops", "kind": "ClusterIssuer"}}},
        "peer": {"certManager": {"issuerRef": {"name": "ca"}}},
    }))
}

const CERTIFICATES: &str = "/apis/cert-manager.io/v1/namespaces/prod/certificates";

/// Certificates issued by cert-manager land in `<cluster>-<role>-tls`, and
/// the messages name the Certificate and the field; given Secrets are used
/// by their own names.
#[test]
fn both_sources_resolve_to_the_secrets_the_members_mount() {
    let issued = secrets(&cert_manager());
    assert_eq!(issued.server.as_ref().unwrap().name, "main-server-tls");
    assert_eq!(
        issued.server.unwrap().source,
        "issued by cert-manager Certificate main-server, spec.tls.client.certManager.serverIssuerRef"
    );
    assert_eq!(
        issued.operator_client.unwrap().name,
        "main-operator-client-tls"
    );
    assert_eq!(issued.peer.unwrap().name, "main-peer-tls");

    let given = secrets(&cluster(json!({
        "client": {"serverSecretRef": {"name": "srv"}},
        "peer": {"secretRef": {"name": "p"}},
    })));
    assert_eq!(
        given.server,
        Some(TlsSecret {
            name: "srv".into(),
            source: "spec.tls.client.serverSecretRef".into()
        })
    );
    assert_eq!(
        given.operator_client, None,
        "no client certificate asked for"
    );
    assert_eq!(given.peer.unwrap().name, "p");
    assert_eq!(
        secrets(&fixtures::cluster(fixtures::spec())),
        TlsSecrets::default()
    );
}

/// The serving Certificate names every member by wildcard, the client
/// Service in each form, and the Pod's own loopback; the peer one names
/// the members only; the operator's is a client certificate with no names.
/// Each is owned by the cluster and reached by its labels.
#[test]
fn certificates_name_every_member_and_the_client_service() {
    let certs = desired(&cert_manager()).unwrap();
    let by_name = |n: &str| {
        certs
            .iter()
            .find(|c| c.name_any() == n)
            .unwrap_or_else(|| panic!("no Certificate {n}"))
    };
    let server = &by_name("main-server").data["spec"];
    assert_eq!(server["secretName"], "main-server-tls");
    assert_eq!(
        server["issuerRef"],
        json!({"group": "cert-manager.io", "kind": "Issuer", "name": "ca"})
    );
    assert_eq!(
        server["dnsNames"],
        json!([
            "*.main.prod.svc",
            "*.main.prod.svc.cluster.local",
            "main-client",
            "main-client.prod",
            "main-client.prod.svc",
            "main-client.prod.svc.cluster.local",
            "localhost"
        ])
    );
    assert_eq!(server["ipAddresses"], json!(["127.0.0.1", "::1"]));
    assert!(
        server["usages"]
            .as_array()
            .unwrap()
            .contains(&json!("client auth")),
        "etcd's gateway presents the serving certificate as a client"
    );
    let operator = &by_name("main-operator-client").data["spec"];
    assert_eq!(operator["issuerRef"]["kind"], "ClusterIssuer");
    assert_eq!(operator["usages"][0], "client auth");
    assert!(operator.get("dnsNames").is_none());
    let peer = &by_name("main-peer").data["spec"];
    assert_eq!(
        peer["dnsNames"],
        json!(["*.main.prod.svc", "*.main.prod.svc.cluster.local"])
    );
    for c in &certs {
        let owner = &c.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("EtcdCluster", "uid-cluster")
        );
        assert_eq!(c.metadata.namespace.as_deref(), Some("prod"));
        assert_eq!(
            c.metadata.labels.as_ref().unwrap()["app.kubernetes.io/instance"],
            "main"
        );
    }

    let without_operator = cluster(json!({
        "client": {"certManager": {"serverIssuerRef": {"name": "ca"}}},
    }));
    let names: Vec<_> = desired(&without_operator)
        .unwrap()
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(names, ["main-server"]);
    assert!(
        desired(&cluster(
            json!({"client": {"serverSecretRef": {"name": "s"}}})
        ))
        .unwrap()
        .is_empty()
    );
}

fn listed(name: &str, spec: &Value, ready: Option<(&str, &str, &str)>) -> Value {
    let mut c = json!({
        "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": name, "namespace": "prod"},
        "spec": spec,
    });
    if let Some((status, reason, message)) = ready {
        c["status"] = json!({"conditions": [
            {"type": "Ready", "status": status, "reason": reason, "message": message}
        ]});
    }
    c
}

fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "cert-manager.io/v1", "kind": "CertificateList",
           "metadata": {}, "items": items})
}

/// One list by the cluster's labels tells each Certificate's readiness in
/// cert-manager's words; a 404 of the list says cert-manager is not
/// installed, and that refuses the seed while a pending Certificate only
/// holds it.
#[tokio::test]
async fn readiness_and_absence_come_from_one_list() {
    let cluster = cluster(json!({
        "client": {"certManager": {"serverIssuerRef": {"name": "ca"}}},
        "peer": {"certManager": {"issuerRef": {"name": "ca"}}},
    }));
    let want = desired(&cluster).unwrap();
    let (client, apiserver) = mock_api::pair();
    let query = "?&labelSelector=app.kubernetes.io%2Finstance%3Dmain%2Capp.kubernetes.io%2Fmanaged-by%3Detcd-steward%2Capp.kubernetes.io%2Fname%3Detcd";
    let scenario = apiserver.run(vec![
        Exchange::get(format!("{CERTIFICATES}{query}")).respond(ok(list(vec![
            listed(
                "main-server",
                &want[0].data["spec"],
                Some(("True", "Ready", "up to date")),
            ),
            listed(
                "main-peer",
                &json!({"secretName": "main-peer-tls"}),
                Some(("False", "Pending", "Issuer ca not found")),
            ),
        ]))),
        // Only the outdated peer Certificate is applied.
        Exchange::patch(format!(
            "{CERTIFICATES}/main-peer?&fieldManager=etcd-steward&force=true"
        ))
        .content_type("application/apply-patch+yaml")
        .body_includes(json!({"kind": "Certificate", "spec": {"secretName": "main-peer-tls"}}))
        .respond(echo()),
        Exchange::get(format!("{CERTIFICATES}{query}")).respond(api_error(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )),
    ]);
    let issuance = observe(&cluster, &client).await;
    let Issuance::Listed(states) = &issuance else {
        panic!("{issuance:?}")
    };
    assert_eq!(states[0].ready, Some(true));
    assert!(!states[0].outdated);
    assert_eq!((states[1].ready, states[1].outdated), (Some(false), true));
    assert_eq!(
        issuance.blocks_seed(),
        Some((
            REASON_NOT_READY,
            "cert-manager has not issued every certificate yet: Certificate main-peer (Secret main-peer-tls) is not Ready: Pending: Issuer ca not found".to_owned(),
            true
        ))
    );
    apply(&cluster, &issuance, &client).await.unwrap();

    let gone = observe(&cluster, &client).await;
    assert_eq!(gone, Issuance::NotInstalled);
    let (reason, message, retry) = gone.blocks_seed().unwrap();
    assert_eq!((reason, retry), (REASON_NOT_INSTALLED, false));
    assert!(
        message.starts_with("cert-manager is not installed"),
        "{message}"
    );
    apply(&cluster, &gone, &client).await.unwrap();
    scenario.finish().await;
}

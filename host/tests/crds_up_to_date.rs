//! The committed CRDs are exactly what the Rust types generate.
//!
//! `crds/` is what users `kubectl apply`; the Helm chart ships a copy in
//! its own `crds/`. Both drift silently the moment someone edits the types
//! and forgets to regenerate, and a stale CRD prunes or rejects fields the
//! operator relies on.

use std::path::PathBuf;

fn repo_root() -> PathBuf {
    steward_testbed::repo::root()
}

/// Set to rewrite the committed files instead of comparing.
const BLESS: &str = "STEWARD_BLESS_CRDS";

fn assert_committed(relative: &str) {
    let path = repo_root().join(relative);
    let generated = etcd_steward::api::crds_yaml();
    if std::env::var_os(BLESS).is_some() {
        std::fs::write(&path, &generated).unwrap_or_else(|e| panic!("writing {relative}: {e}"));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{relative} is out of date with host/src/api; regenerate it with\n\n    \
         cargo run -p etcd-steward -- crd > {relative}\n\n\
         or {BLESS}=1 cargo test -p etcd-steward --test crds_up_to_date\n\
         (first differing line: {})",
        first_difference(&committed, &generated)
    );
}

fn first_difference(committed: &str, generated: &str) -> String {
    let mut committed_lines = committed.lines();
    for (n, want) in generated.lines().enumerate() {
        match committed_lines.next() {
            Some(have) if have == want => continue,
            Some(have) => return format!("{}: committed {have:?}, generated {want:?}", n + 1),
            None => return format!("{}: committed file ends, generated {want:?}", n + 1),
        }
    }
    "the committed file has extra lines at the end".to_owned()
}

#[test]
fn crds_directory_matches_the_types() {
    assert_committed(etcd_steward::api::CRDS_PATH);
}

#[test]
fn helm_chart_crds_match_the_types() {
    assert_committed("deploy/helm/etcd-steward/crds/etcd-steward.yaml");
}

/// The plain manifests under deploy/ parse as the kinds they claim, and the
/// RBAC grants name resources that exist (a typo in a plural would only
/// show up as a 403 in a real cluster).
#[test]
fn deploy_manifests_are_well_formed_and_rbac_names_real_resources() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use k8s_openapi::api::{
        apps::v1::Deployment,
        core::v1::{Namespace, ServiceAccount},
    };

    let mut cluster_role = None;
    for file in [
        "deploy/00-namespace.yaml",
        "deploy/01-rbac.yaml",
        "deploy/02-deployment.yaml",
    ] {
        let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        for doc in docs {
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            let parsed = match kind.as_str() {
                "Namespace" => serde_json::from_value::<Namespace>(doc).map(drop),
                "ServiceAccount" => serde_json::from_value::<ServiceAccount>(doc).map(drop),
                "ClusterRole" => {
                    serde_json::from_value::<ClusterRole>(doc).map(|r| cluster_role = Some(r))
                }
                "ClusterRoleBinding" => serde_json::from_value::<ClusterRoleBinding>(doc).map(drop),
                "Role" => serde_json::from_value::<Role>(doc).map(drop),
                "RoleBinding" => serde_json::from_value::<RoleBinding>(doc).map(drop),
                "Deployment" => serde_json::from_value::<Deployment>(doc).map(drop),
                other => panic!("{file}: unexpected kind {other:?}"),
            };
            parsed.unwrap_or_else(|e| panic!("{file}: {kind}: {e}"));
        }
    }

    let plurals: Vec<String> = etcd_steward::api::crds()
        .into_iter()
        .map(|crd| crd.spec.names.plural)
        .collect();
    let rules = cluster_role
        .expect("deploy/01-rbac.yaml has a ClusterRole")
        .rules
        .unwrap();
    for rule in rules {
        if rule.api_groups.as_deref() != Some(&[etcd_steward::api::GROUP.to_owned()][..]) {
            continue;
        }
        for resource in rule.resources.unwrap() {
            let base = resource.split('/').next().unwrap();
            assert!(
                plurals.iter().any(|p| p == base),
                "RBAC names unknown resource {resource:?}"
            );
        }
    }
}

/// The Helm chart grants exactly what deploy/01-rbac.yaml grants.
#[test]
fn helm_cluster_role_rules_match_the_plain_manifest() {
    fn rules_block(text: &str, after: &str) -> String {
        let start = text.find(after).expect("the role is there");
        let rules = &text[start..];
        let rules = &rules[rules.find("rules:").expect("it has rules")..];
        rules.split("\n---").next().unwrap().trim_end().to_owned()
    }
    let plain = std::fs::read_to_string(repo_root().join("deploy/01-rbac.yaml")).unwrap();
    // The ClusterRole, and the Role for policy sources in the operator's
    // namespace: (the chart's template, where its rules start, where the
    // plain manifest's start).
    for (template, in_chart, in_plain) in [
        (
            "clusterrole.yaml",
            "kind: ClusterRole\n",
            "kind: ClusterRole\n",
        ),
        (
            "policy-sources.yaml",
            "kind: Role\n",
            "name: etcd-steward-policy-sources\n",
        ),
    ] {
        let chart = std::fs::read_to_string(
            repo_root()
                .join("deploy/helm/etcd-steward/templates")
                .join(template),
        )
        .unwrap();
        assert_eq!(
            rules_block(&chart, in_chart),
            rules_block(&plain, in_plain),
            "deploy/helm/etcd-steward/templates/{template} and deploy/01-rbac.yaml grant different rules"
        );
    }
}

/// The examples users copy parse as the kinds they claim: one EtcdCluster
/// each, and the EtcdStatusPolicy it selects beside it (a name that finds
/// none would be the deprecated ConfigMap form).
#[test]
fn examples_are_valid_etcdclusters() {
    use etcd_steward::api::{EtcdCluster, EtcdStatusPolicy};
    for file in [
        "deploy/examples/etcdcluster.yaml",
        "deploy/examples/etcdcluster-custom-policy.yaml",
    ] {
        let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let (mut clusters, mut policies) = (Vec::new(), Vec::new());
        for doc in docs {
            match doc["kind"].as_str() {
                Some("EtcdCluster") => clusters.push(
                    serde_json::from_value::<EtcdCluster>(doc)
                        .unwrap_or_else(|e| panic!("{file}: {e}")),
                ),
                Some("EtcdStatusPolicy") => policies.push(
                    serde_json::from_value::<EtcdStatusPolicy>(doc)
                        .unwrap_or_else(|e| panic!("{file}: {e}"))
                        .metadata
                        .name
                        .unwrap_or_default(),
                ),
                other => panic!("{file}: unexpected kind {other:?}"),
            }
        }
        let [cluster] = &clusters[..] else {
            panic!("{file}: one EtcdCluster expected, found {}", clusters.len())
        };
        assert!(
            cluster.spec.tls.is_none() && cluster.spec.auth.is_none(),
            "{file}"
        );
        let selected = cluster
            .spec
            .status_policy
            .as_ref()
            .and_then(|p| p.name.as_ref());
        if let Some(name) = selected {
            assert!(
                policies.contains(name),
                "{file}: spec.statusPolicy.name {name:?} names no EtcdStatusPolicy in the file"
            );
        }
    }
}

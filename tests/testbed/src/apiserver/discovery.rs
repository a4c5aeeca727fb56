//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`,
//! `/apis/{group}` and `/apis/{group}/{version}`, built from the resource
//! types currently served (so a new CRD shows up at once).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::resources::ResourceType;

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-steward-testbed",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    })
}

/// group -> its versions (preferred first), in the order of first sight.
fn groups<'a>(types: impl Iterator<Item = &'a ResourceType>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in types.filter(|t| !t.group.is_empty()) {
        let versions = out.entry(t.group.clone()).or_default();
        for v in &t.versions {
            if !versions.contains(&v.name) {
                versions.push(v.name.clone());
            }
        }
    }
    out
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs[0]})
}

pub fn group_list<'a>(types: impl Iterator<Item = &'a ResourceType>) -> Value {
    let list: Vec<Value> = groups(types)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list})
}

pub fn group<'a>(types: impl Iterator<Item = &'a ResourceType>, name: &str) -> Option<Value> {
    let all = groups(types);
    let vs = all.get(name)?;
    let mut g = group_json(name, vs);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The APIResourceList of one group version, or None if nothing serves it.
pub fn resource_list<'a>(
    types: impl Iterator<Item = &'a ResourceType>,
    group: &str,
    version: &str,
) -> Option<Value> {
    let mut resources = Vec::new();
    for t in types.filter(|t| t.group == group) {
        let Some(v) = t.version(version) else {
            continue;
        };
        let mut r = json!({
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": VERBS,
        });
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            r["categories"] = json!(t.categories);
        }
        resources.push(r);
        if v.status {
            resources.push(json!({
                "name": format!("{}/status", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if v.scale.is_some() {
            resources.push(json!({
                "name": format!("{}/scale", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// Group versions served, as OpenAPI v3 path keys (`api/v1`, `apis/g/v`).
fn served_group_versions<'a>(
    types: impl Iterator<Item = &'a ResourceType>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for t in types {
        for v in &t.versions {
            let gv = (t.group.clone(), v.name.clone());
            if !out.contains(&gv) {
                out.push(gv);
            }
        }
    }
    out.sort();
    out
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: where each group version's document lives. The hash
/// changes with the document so kubectl's cache never serves a stale one.
pub fn openapi_v3_root(types: &[ResourceType]) -> Value {
    let mut paths = serde_json::Map::new();
    for (g, v) in served_group_versions(types.iter()) {
        let doc = openapi_v3_group_version(types, &g, &v).unwrap_or(Value::Null);
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            doc.to_string().hash(&mut h);
            format!("{:016X}", h.finish())
        };
        let p = gv_path(&g, &v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}),
        );
    }
    json!({"paths": paths})
}

/// A deliberately small OpenAPI v3 document for one group version: just
/// enough for kubectl to learn that every resource's PATCH accepts
/// `fieldValidation`, so it leaves validation to the server instead of
/// validating client-side against schemas this stand-in does not publish.
pub fn openapi_v3_group_version(
    types: &[ResourceType],
    group: &str,
    version: &str,
) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    for t in types
        .iter()
        .filter(|t| t.group == group && t.version(version).is_some())
    {
        let gvk = json!({"group": group, "version": version, "kind": t.kind});
        let base = format!("/{}", gv_path(group, version));
        let item = if t.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
        } else {
            format!("{base}/{}/{{name}}", t.plural)
        };
        let params: Vec<Value> = ["fieldValidation", "fieldManager", "dryRun", "force"]
            .iter()
            .map(|p| json!({"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": true}}))
            .collect();
        let op = |verb: &str| {
            json!({
                "operationId": format!("{verb}{}", t.kind),
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK"}},
            })
        };
        paths.insert(item, json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete"), "parameters": params}));
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes API stand-in (etcd-steward testbed)", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

//! The CRDs' CEL rules, evaluated on the generated CRD text with
//! cel-interpreter (the engine the test control plane uses), against specs
//! defaulted the way the apiserver defaults them.
//!
//! Kubernetes' `quantity()` library is not part of cel-interpreter; the
//! tests register a small stand-in for it, and separately check that the
//! rules never need it unless the size actually changes.

use std::sync::Arc;

use cel_interpreter::extractors::This;
use cel_interpreter::{
    Context, ExecutionError, FunctionContext, Program, ResolveResult, Value as Cel,
};
use serde_json::{Value, json};

use super::*;

/// (rule, message) pairs at `openAPIV3Schema.properties.spec`.
fn spec_rules(crd: &CustomResourceDefinition) -> Vec<(String, String)> {
    let crd = serde_json::to_value(crd).unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    spec["x-kubernetes-validations"]
        .as_array()
        .expect("the spec has CEL rules")
        .iter()
        .map(|r| {
            (
                r["rule"].as_str().unwrap().to_owned(),
                r["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Every rule anywhere in a schema, with its JSON path.
fn all_rules(schema: &Value, path: &str, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "x-kubernetes-validations" {
                    for r in v.as_array().unwrap() {
                        out.push(format!("{path}: {}", r["rule"].as_str().unwrap()));
                    }
                } else {
                    all_rules(v, &format!("{path}/{k}"), out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| all_rules(i, path, out)),
        _ => {}
    }
}

/// The spec as stored: serde's defaults are the schema's defaults.
fn defaulted(spec: Value) -> Value {
    let typed: EtcdClusterSpec = serde_json::from_value(spec).expect("spec parses");
    serde_json::to_value(typed).unwrap()
}

fn to_cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => n
            .as_i64()
            .map_or_else(|| Cel::Float(n.as_f64().unwrap()), Cel::Int),
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(a) => Cel::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => Cel::from(
            m.iter()
                .map(|(k, v)| (k.clone(), to_cel(v)))
                .collect::<std::collections::HashMap<_, _>>(),
        ),
    }
}

/// A stand-in for Kubernetes' CEL quantity library: a quantity is its value
/// as a float, enough to order sizes.
fn quantity(ftx: &FunctionContext, text: Arc<String>) -> ResolveResult {
    let s = text.as_str();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| ftx.error(format!("not a quantity: {s:?}")))?;
    let scale = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        _ => return Err(ftx.error(format!("unknown quantity suffix in {s:?}"))),
    };
    Ok(Cel::Float(number * scale))
}

fn as_quantity(v: &Cel) -> Result<f64, ExecutionError> {
    match v {
        Cel::Float(f) => Ok(*f),
        other => Err(ExecutionError::function_error(
            "quantity",
            format!("not a quantity: {other:?}"),
        )),
    }
}

fn compare_to(This(a): This<Cel>, b: Cel) -> ResolveResult {
    let (a, b) = (as_quantity(&a)?, as_quantity(&b)?);
    Ok(Cel::Int(a.partial_cmp(&b).map_or(0, |o| o as i64)))
}

fn is_greater_than(This(a): This<Cel>, b: Cel) -> ResolveResult {
    Ok(Cel::Bool(as_quantity(&a)? > as_quantity(&b)?))
}

/// The messages of the rules of `crd` that `new` breaks (as an update of
/// `old`, if given). A rule that fails to evaluate is a test failure, not a
/// rejection.
fn broken_rules(
    crd: &CustomResourceDefinition,
    new: &Value,
    old: Option<&Value>,
    with_quantity: bool,
) -> Vec<String> {
    let mut broken = Vec::new();
    for (rule, message) in spec_rules(crd) {
        let transition = rule.contains("oldSelf");
        if transition && old.is_none() {
            continue;
        }
        let program = Program::compile(&rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
        let mut ctx = Context::default();
        ctx.add_variable_from_value("self", to_cel(new));
        if let Some(old) = old {
            ctx.add_variable_from_value("oldSelf", to_cel(old));
        }
        if with_quantity {
            ctx.add_function("quantity", quantity);
            ctx.add_function("compareTo", compare_to);
            ctx.add_function("isGreaterThan", is_greater_than);
        }
        match program.execute(&ctx) {
            Ok(Cel::Bool(true)) => {}
            Ok(Cel::Bool(false)) => broken.push(message),
            other => panic!("rule {rule:?} on {new} evaluated to {other:?}"),
        }
    }
    broken
}

fn rejections(new: Value, old: Option<Value>, with_quantity: bool) -> Vec<String> {
    let new = defaulted(new);
    let old = old.map(defaulted);
    broken_rules(&EtcdCluster::crd(), &new, old.as_ref(), with_quantity)
}

fn create(spec: Value) -> Vec<String> {
    rejections(spec, None, true)
}

fn update(old: Value, new: Value) -> Vec<String> {
    rejections(new, Some(old), true)
}

#[test]
fn every_cel_rule_of_etcdcluster_is_a_spec_rule_covered_here() {
    let crd = serde_json::to_value(EtcdCluster::crd()).unwrap();
    let mut rules = Vec::new();
    all_rules(&crd, "", &mut rules);
    let spec_level = spec_rules(&EtcdCluster::crd()).len();
    assert_eq!(rules.len(), spec_level, "rules outside spec: {rules:#?}");
}

#[test]
fn a_minimal_cluster_is_accepted() {
    assert_eq!(create(json!({"version": "3.5.1"})), Vec::<String>::new());
    assert_eq!(
        create(json!({"version": "3.5.1", "replicas": 5, "bootstrap": {}})),
        Vec::<String>::new()
    );
}

#[test]
fn unimplemented_fields_are_rejected_with_a_message_that_says_so() {
    let tls = create(
        json!({"version": "3.5.1", "tls": {"client": {"serverSecretRef": {"name": "etcd-server"}}}}),
    );
    assert_eq!(
        tls,
        ["spec.tls is not implemented yet (planned: client and peer TLS); remove it"]
    );

    let auth = create(
        json!({"version": "3.5.1", "auth": {"enabled": true, "rootCredentialsSecretRef": {"name": "root"}}}),
    );
    assert_eq!(auth.len(), 1);
    assert!(
        auth[0].starts_with("spec.auth is not implemented yet"),
        "{auth:?}"
    );

    let restore = create(
        json!({"version": "3.5.1", "bootstrap": {"restore": {"source": {"s3": {"bucket": "b", "key": "snap.db"}}}}}),
    );
    assert_eq!(restore.len(), 1);
    assert!(
        restore[0].starts_with("spec.bootstrap.restore is not implemented yet"),
        "{restore:?}"
    );
}

#[test]
fn pausing_a_memory_cluster_is_rejected_but_pausing_a_pvc_cluster_is_not() {
    let memory_paused = create(
        json!({"version": "3.5.1", "replicas": 0, "storage": {"medium": "Memory", "size": "1Gi"}}),
    );
    assert_eq!(memory_paused.len(), 1);
    assert!(memory_paused[0].contains("spec.replicas=0 with spec.storage.medium=Memory"));
    assert!(create(json!({"version": "3.5.1", "replicas": 0})).is_empty());
    // Also as an update: scaling a running memory cluster to 0.
    let memory = json!({"version": "3.5.1", "storage": {"medium": "Memory"}});
    let paused = json!({"version": "3.5.1", "replicas": 0, "storage": {"medium": "Memory"}});
    assert_eq!(update(memory, paused).len(), 1);
}

#[test]
fn a_memory_cluster_needs_a_size() {
    let zero = create(json!({"version": "3.5.1", "storage": {"medium": "Memory", "size": "0"}}));
    assert_eq!(zero.len(), 1);
    assert!(zero[0].starts_with("spec.storage.size must be greater than 0"));
    assert!(
        create(json!({"version": "3.5.1", "storage": {"medium": "Memory", "size": "256Mi"}}))
            .is_empty()
    );
}

#[test]
fn the_storage_medium_and_class_are_immutable() {
    let pvc = json!({"version": "3.5.1"});
    let memory = json!({"version": "3.5.1", "storage": {"medium": "Memory"}});
    let medium = update(pvc.clone(), memory);
    assert_eq!(medium.len(), 1);
    assert!(medium[0].starts_with("spec.storage.medium is immutable"));

    let fast = json!({"version": "3.5.1", "storage": {"storageClassName": "fast"}});
    let slow = json!({"version": "3.5.1", "storage": {"storageClassName": "slow"}});
    let none = json!({"version": "3.5.1", "storage": {"storageClassName": ""}});
    for (old, new) in [
        (pvc.clone(), fast.clone()),
        (fast.clone(), pvc.clone()),
        (fast.clone(), slow.clone()),
        (fast.clone(), none.clone()),
    ] {
        let broken = update(old.clone(), new.clone());
        assert_eq!(broken.len(), 1, "{old} -> {new}: {broken:?}");
        assert!(
            broken[0]
                .starts_with("spec.storage.storageClassName cannot be added, removed or changed")
        );
    }
    assert!(update(fast.clone(), fast).is_empty());
}

#[test]
fn the_storage_size_may_grow_but_never_shrink() {
    let sized = |size: &str| json!({"version": "3.5.1", "storage": {"size": size}});
    assert!(update(sized("1Gi"), sized("2Gi")).is_empty());
    assert!(
        update(sized("1Gi"), sized("1024Mi")).is_empty(),
        "equal quantities"
    );
    assert_eq!(
        update(sized("2Gi"), sized("1Gi")),
        ["spec.storage.size cannot shrink (a PVC cannot shrink)"]
    );
    assert_eq!(update(sized("1Gi"), sized("1000Mi")).len(), 1);
    // Leaving storage out keeps the default, which is no change from 1Gi.
    assert!(update(sized("1Gi"), json!({"version": "3.5.1"})).is_empty());
}

#[test]
fn everyday_updates_need_no_quantity_library() {
    // The test control plane's CEL has no quantity(): scaling, version
    // changes and policy changes must still pass there.
    let before = json!({"version": "3.5.1", "replicas": 3, "storage": {"size": "2Gi"}});
    let after = json!({"version": "3.5.2", "replicas": 5, "storage": {"size": "2Gi"},
                       "statusPolicy": {"name": "strict", "settings": {"probeDeadlineMs": 1500}}});
    assert!(rejections(after.clone(), Some(before.clone()), false).is_empty());
    assert!(rejections(after, None, false).is_empty());
}

#[test]
fn an_etcdmember_keeps_its_cluster_and_seed_flag() {
    let member = |cluster: &str, bootstrap: bool, dormant: bool| {
        serde_json::to_value(EtcdMemberSpec {
            cluster: cluster.into(),
            version: "3.5.1".into(),
            storage: StorageSpec::default(),
            initial_cluster: "main-0=http://main-0.main.prod.svc:2380".into(),
            cluster_token: "t".into(),
            bootstrap,
            dormant,
        })
        .unwrap()
    };
    let crd = EtcdMember::crd();
    let seed = member("main", true, false);
    assert!(broken_rules(&crd, &member("main", true, true), Some(&seed), false).is_empty());
    assert_eq!(
        broken_rules(&crd, &member("other", true, false), Some(&seed), false),
        ["spec.cluster is immutable"]
    );
    assert_eq!(
        broken_rules(&crd, &member("main", false, false), Some(&seed), false),
        ["spec.bootstrap is immutable"]
    );
}

/// The structural-schema rules the apiserver enforces on a CRD (a
/// non-structural CRD is refused outright), as far as schemars output can
/// break them: no references, a type on every node unless int-or-string or
/// preserve-unknown-fields, no `properties` next to `additionalProperties`,
/// no logical junctors carrying types.
fn structural_violations(schema: &Value, path: &str, out: &mut Vec<String>) {
    let Some(node) = schema.as_object() else {
        out.push(format!("{path}: not an object"));
        return;
    };
    for banned in ["$ref", "$defs", "definitions", "$schema"] {
        if node.contains_key(banned) {
            out.push(format!("{path}: has {banned}"));
        }
    }
    let escape = node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        || node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if !node.contains_key("type") && !escape {
        out.push(format!("{path}: no type"));
    }
    if let Some(Value::Array(values)) = node.get("enum")
        && values.iter().any(Value::is_null)
    {
        out.push(format!("{path}: null in enum"));
    }
    if node.contains_key("properties") && node.contains_key("additionalProperties") {
        out.push(format!("{path}: properties and additionalProperties"));
    }
    for junctor in ["anyOf", "oneOf", "allOf", "not"] {
        if let Some(j) = node.get(junctor) {
            let text = j.to_string();
            if text.contains("\"type\"") || text.contains("\"default\"") {
                out.push(format!("{path}: {junctor} with types or defaults"));
            }
        }
    }
    if let Some(Value::Object(props)) = node.get("properties") {
        for (k, v) in props {
            structural_violations(v, &format!("{path}.{k}"), out);
        }
    }
    if let Some(items) = node.get("items") {
        structural_violations(items, &format!("{path}[]"), out);
    }
    if let Some(additional @ Value::Object(_)) = node.get("additionalProperties") {
        structural_violations(additional, &format!("{path}{{}}"), out);
    }
}

#[test]
fn the_crds_are_structural() {
    for crd in crds() {
        let name = crd.metadata.name.clone().unwrap();
        let crd = serde_json::to_value(crd).unwrap();
        let mut violations = Vec::new();
        for version in crd["spec"]["versions"].as_array().unwrap() {
            structural_violations(&version["schema"]["openAPIV3Schema"], "", &mut violations);
        }
        assert!(violations.is_empty(), "{name}: {violations:#?}");
    }
}

#[test]
fn the_structural_check_catches_what_it_claims_to() {
    let mut violations = Vec::new();
    structural_violations(
        &json!({"type": "object", "properties": {
            "a": {"$ref": "#/definitions/A"},
            "b": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
            "c": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        }}),
        "",
        &mut violations,
    );
    assert_eq!(
        violations,
        [
            ".a: has $ref",
            ".a: no type",
            ".b: properties and additionalProperties",
            ".c: no type",
            ".c: anyOf with types or defaults",
        ]
    );
}

//! Structural-schema handling for custom resources, following the CRD
//! `openAPIV3Schema`: prune unknown fields, apply defaults, then validate
//! types, required, enum, bounds, patterns and `x-kubernetes-validations`
//! CEL rules. Field paths in errors read like the real apiserver's
//! (`spec.members[0].name`).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::error::{FieldError, FieldErrorKind};

#[derive(Debug, Default)]
pub struct Outcome {
    pub errors: Vec<FieldError>,
    /// Paths of fields the schema does not know (pruned unless strict).
    pub unknown: Vec<String>,
}

/// Prunes, defaults and validates `obj` in place against `schema`.
pub fn apply(obj: &mut Value, schema: &Value, old: Option<&Value>, strict: bool) -> Outcome {
    let mut out = Outcome::default();
    let Some(root) = obj.as_object_mut() else {
        out.errors.push(FieldError::new(
            "<root>",
            FieldErrorKind::Invalid(Value::Null),
            "must be an object",
        ));
        return out;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    // apiVersion, kind and metadata are validated elsewhere, never pruned.
    let keys: Vec<String> = root.keys().cloned().collect();
    for k in keys {
        if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        let sub = props.and_then(|p| p.get(&k));
        match sub {
            Some(sub) => {
                let old_child = old.and_then(|o| o.get(&k));
                if root[&k].is_null() && !nullable(sub) {
                    root.remove(&k);
                    continue;
                }
                walk(
                    root.get_mut(&k).expect("key exists"),
                    sub,
                    old_child,
                    &k,
                    &mut out,
                );
            }
            None if preserves_unknown(schema) => {}
            None => {
                out.unknown.push(k.clone());
                if !strict {
                    root.remove(&k);
                }
            }
        }
    }
    if let Some(props) = props {
        for (k, sub) in props {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") || root.contains_key(k) {
                continue;
            }
            if let Some(d) = sub.get("default") {
                root.insert(k.clone(), d.clone());
                let old_child = old.and_then(|o| o.get(k));
                walk(
                    root.get_mut(k).expect("just inserted"),
                    sub,
                    old_child,
                    k,
                    &mut out,
                );
            }
        }
    }
    for r in required(schema) {
        if !root.contains_key(&r) {
            out.errors
                .push(FieldError::new(r.clone(), FieldErrorKind::Required, ""));
        }
    }
    let snapshot = Value::Object(root.clone());
    cel_rules(&snapshot, schema, old, "", &mut out);
    out
}

fn nullable(schema: &Value) -> bool {
    schema
        .get("nullable")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false)
        || schema.get("additionalProperties").and_then(Value::as_bool) == Some(true)
}

fn required(schema: &Value) -> Vec<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn walk(value: &mut Value, schema: &Value, old: Option<&Value>, path: &str, out: &mut Outcome) {
    if value.is_null() && nullable(schema) {
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    let declared = schema.get("type").and_then(Value::as_str);
    let actual = type_name(value);
    let type_ok = match declared {
        _ if int_or_string => matches!(actual, "integer" | "string"),
        None => true,
        Some("number") => matches!(actual, "number" | "integer"),
        Some(t) => t == actual,
    };
    if !type_ok {
        let want = if int_or_string {
            "integer or string"
        } else {
            declared.unwrap_or("")
        };
        out.errors.push(FieldError::new(
            path,
            FieldErrorKind::TypeInvalid(Value::String(actual.into()), want.into()),
            format!("{path} in body must be of type {want}: \"{actual}\""),
        ));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let names = allowed
            .iter()
            .map(|a| {
                a.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| a.to_string())
            })
            .collect();
        out.errors.push(FieldError::new(
            path,
            FieldErrorKind::NotSupported(value.clone(), names),
            "",
        ));
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let embedded = schema
                .get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                == Some(true);
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let child_path = join(path, &k);
                let sub = props.and_then(|p| p.get(&k)).or(additional);
                let old_child = old.and_then(|o| o.get(&k));
                match sub {
                    Some(sub) => {
                        if map[&k].is_null() && !nullable(sub) {
                            map.remove(&k);
                            continue;
                        }
                        walk(
                            map.get_mut(&k).expect("key exists"),
                            sub,
                            old_child,
                            &child_path,
                            out,
                        );
                    }
                    None if preserves_unknown(schema) => {}
                    None if embedded
                        && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") => {}
                    None => {
                        out.unknown.push(child_path);
                        map.remove(&k);
                    }
                }
            }
            if let Some(props) = props {
                for (k, sub) in props {
                    if map.contains_key(k) {
                        continue;
                    }
                    if let Some(d) = sub.get("default") {
                        map.insert(k.clone(), d.clone());
                        let old_child = old.and_then(|o| o.get(k));
                        walk(
                            map.get_mut(k).expect("just inserted"),
                            sub,
                            old_child,
                            &join(path, k),
                            out,
                        );
                    }
                }
            }
            for r in required(schema) {
                if !map.contains_key(&r) {
                    out.errors.push(FieldError::new(
                        join(path, &r),
                        FieldErrorKind::Required,
                        "",
                    ));
                }
            }
            bound(
                schema,
                "minProperties",
                map.len(),
                path,
                out,
                |n| format!("must have at least {n} properties"),
                false,
            );
            bound(
                schema,
                "maxProperties",
                map.len(),
                path,
                out,
                |n| format!("must have at most {n} properties"),
                true,
            );
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    let child = format!("{path}[{i}]");
                    let old_item = old.and_then(|o| o.get(i));
                    walk(item, item_schema, old_item, &child, out);
                }
            }
            bound(
                schema,
                "minItems",
                items.len(),
                path,
                out,
                |n| format!("must have at least {n} items"),
                false,
            );
            bound(
                schema,
                "maxItems",
                items.len(),
                path,
                out,
                |n| format!("must have at most {n} items"),
                true,
            );
        }
        Value::String(s) => {
            let len = s.chars().count();
            bound(
                schema,
                "minLength",
                len,
                path,
                out,
                |n| format!("{path} in body should be at least {n} chars long"),
                false,
            );
            bound(
                schema,
                "maxLength",
                len,
                path,
                out,
                |n| format!("may not be longer than {n}"),
                true,
            );
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                match regex::Regex::new(pattern) {
                    Ok(re) if re.is_match(s) => {}
                    Ok(_) => out.errors.push(FieldError::new(
                        path,
                        FieldErrorKind::Invalid(Value::String(s.clone())),
                        format!("{path} in body should match '{pattern}'"),
                    )),
                    Err(e) => out.errors.push(FieldError::new(
                        path,
                        FieldErrorKind::Invalid(Value::String(pattern.into())),
                        format!("the schema's pattern does not compile: {e}"),
                    )),
                }
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            let exclusive = |k: &str| schema.get(k).and_then(Value::as_bool).unwrap_or(false);
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
                let bad = if exclusive("exclusiveMinimum") {
                    x <= min
                } else {
                    x < min
                };
                if bad {
                    let rel = if exclusive("exclusiveMinimum") {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    out.errors.push(FieldError::new(
                        path,
                        FieldErrorKind::Invalid(value.clone()),
                        format!("{path} in body should be {rel} {}", num(min)),
                    ));
                }
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
                let bad = if exclusive("exclusiveMaximum") {
                    x >= max
                } else {
                    x > max
                };
                if bad {
                    let rel = if exclusive("exclusiveMaximum") {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    out.errors.push(FieldError::new(
                        path,
                        FieldErrorKind::Invalid(value.clone()),
                        format!("{path} in body should be {rel} {}", num(max)),
                    ));
                }
            }
            if let Some(m) = schema.get("multipleOf").and_then(Value::as_f64)
                && m != 0.0
                && (x / m).fract() != 0.0
            {
                out.errors.push(FieldError::new(
                    path,
                    FieldErrorKind::Invalid(value.clone()),
                    format!("{path} in body should be a multiple of {}", num(m)),
                ));
            }
        }
        _ => {}
    }
}

fn num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{}", x as i64)
    } else {
        x.to_string()
    }
}

fn bound(
    schema: &Value,
    key: &str,
    actual: usize,
    path: &str,
    out: &mut Outcome,
    msg: impl Fn(u64) -> String,
    is_max: bool,
) {
    if let Some(n) = schema.get(key).and_then(Value::as_u64) {
        let bad = if is_max {
            actual as u64 > n
        } else {
            (actual as u64) < n
        };
        if bad {
            let kind = if is_max && key == "maxLength" {
                FieldErrorKind::TooLong
            } else if is_max {
                FieldErrorKind::TooMany
            } else {
                FieldErrorKind::Invalid(Value::Null)
            };
            out.errors.push(FieldError::new(path, kind, msg(n)));
        }
    }
}

/// Runs every `x-kubernetes-validations` rule in the schema tree against
/// the matching value. Rules that mention `oldSelf` are transition rules:
/// they run only on update, where the old value exists.
fn cel_rules(value: &Value, schema: &Value, old: Option<&Value>, path: &str, out: &mut Outcome) {
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for rule in rules {
            check_rule(value, old, rule, path, out);
        }
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, v) in map {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(sub) = props.and_then(|p| p.get(k)).or(additional) {
                    cel_rules(v, sub, old.and_then(|o| o.get(k)), &join(path, k), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                let correlate =
                    schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map");
                for (i, item) in items.iter().enumerate() {
                    let old_item = if correlate {
                        correlated(item, old, schema)
                    } else {
                        None
                    };
                    cel_rules(item, sub, old_item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// For `x-kubernetes-list-type: map`, the old element with the same keys.
fn correlated<'a>(item: &Value, old: Option<&'a Value>, schema: &Value) -> Option<&'a Value> {
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    old?.as_array()?
        .iter()
        .find(|o| keys.iter().all(|k| o.get(k) == item.get(k)))
}

fn check_rule(value: &Value, old: Option<&Value>, rule: &Value, path: &str, out: &mut Outcome) {
    let Some(expr) = rule.get("rule").and_then(Value::as_str) else {
        return;
    };
    let transition = expr.contains("oldSelf");
    let optional_old = rule
        .get("optionalOldSelf")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if transition && old.is_none() && !optional_old {
        return;
    }
    let field = match rule.get("fieldPath").and_then(Value::as_str) {
        Some(fp) if fp.starts_with('.') || fp.starts_with('[') => format!("{path}{fp}"),
        Some(fp) => format!("{path}.{fp}"),
        None => path.to_string(),
    };
    let field = field.trim_start_matches('.').to_string();
    let field = if field.is_empty() {
        "<root>".to_string()
    } else {
        field
    };
    let fail = |out: &mut Outcome, detail: String| {
        let shown = match value {
            Value::Object(_) => Value::String("object".into()),
            Value::Array(_) => Value::String("array".into()),
            v => v.clone(),
        };
        out.errors.push(FieldError::new(
            field.clone(),
            FieldErrorKind::Invalid(shown),
            detail,
        ));
    };
    let program = match cel_interpreter::Program::compile(expr) {
        Ok(p) => p,
        Err(e) => {
            fail(out, format!("compilation failed: {e}"));
            return;
        }
    };
    let mut ctx = cel_interpreter::Context::default();
    ctx.add_variable_from_value("self", to_cel(value));
    match old {
        Some(o) => ctx.add_variable_from_value("oldSelf", to_cel(o)),
        None => ctx.add_variable_from_value("oldSelf", cel_interpreter::Value::Null),
    }
    match program.execute(&ctx) {
        Ok(cel_interpreter::Value::Bool(true)) => {}
        Ok(cel_interpreter::Value::Bool(false)) => {
            let message = rule
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("failed rule: {expr}"));
            fail(out, message);
        }
        Ok(other) => fail(
            out,
            format!("rule {expr:?} did not evaluate to a bool: {other:?}"),
        ),
        Err(e) => fail(out, format!("rule {expr:?} failed to evaluate: {e}")),
    }
}

/// JSON to CEL, with integers as CEL `int` like the apiserver's CEL.
fn to_cel(v: &Value) -> cel_interpreter::Value {
    use cel_interpreter::Value as C;
    match v {
        Value::Null => C::Null,
        Value::Bool(b) => C::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => C::Int(i),
            None => C::Float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => C::String(Arc::new(s.clone())),
        Value::Array(a) => C::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => {
            let map: HashMap<String, C> = m.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            C::from(map)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "x-kubernetes-validations": [
                        {"rule": "!has(self.backup)", "message": "backup is not implemented"},
                        {"rule": "self.size == oldSelf.size || self.size > oldSelf.size", "message": "size may not shrink"}
                    ],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 7},
                        "version": {"type": "string", "default": "3.5.1", "pattern": "^3\\.5\\.[0-9]+$"},
                        "mode": {"type": "string", "enum": ["a", "b"]},
                        "backup": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}}
                    }
                }
            }
        })
    }

    #[test]
    fn defaults_and_prunes() {
        let mut obj = json!({"metadata": {}, "spec": {"size": 3, "junk": 1}, "extra": true});
        let out = apply(&mut obj, &schema(), None, false);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert_eq!(obj["spec"]["version"], "3.5.1");
        assert!(obj["spec"].get("junk").is_none());
        assert!(obj.get("extra").is_none());
        assert_eq!(
            out.unknown,
            vec!["extra".to_string(), "spec.junk".to_string()]
        );
    }

    #[test]
    fn reports_field_paths() {
        let mut obj =
            json!({"spec": {"size": 9, "mode": "c", "version": "3.4.0", "labels": {"a": 1}}});
        let out = apply(&mut obj, &schema(), None, false);
        let fields: Vec<&str> = out.errors.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&"spec.size"), "{fields:?}");
        assert!(fields.contains(&"spec.mode"), "{fields:?}");
        assert!(fields.contains(&"spec.version"), "{fields:?}");
        assert!(fields.contains(&"spec.labels.a"), "{fields:?}");
        let mut missing = json!({"spec": {}});
        let out = apply(&mut missing, &schema(), None, false);
        assert_eq!(out.errors[0].to_string(), "spec.size: Required value");
    }

    #[test]
    fn cel_rules_and_transition_rules() {
        let mut obj = json!({"spec": {"size": 3, "backup": {"x": 1}}});
        let out = apply(&mut obj, &schema(), None, false);
        assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
        assert!(
            out.errors[0]
                .to_string()
                .contains("backup is not implemented")
        );
        let old = json!({"spec": {"size": 5}});
        let mut shrink = json!({"spec": {"size": 3}});
        let out = apply(&mut shrink, &schema(), Some(&old), false);
        assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
        assert_eq!(out.errors[0].field, "spec");
        let mut grow = json!({"spec": {"size": 7}});
        assert!(
            apply(&mut grow, &schema(), Some(&old), false)
                .errors
                .is_empty()
        );
    }
}

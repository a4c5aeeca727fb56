//! PATCH bodies: JSON merge patch, JSON patch, strategic merge patch (merge
//! semantics plus merging lists of named items, see
//! docs/apiserver-standin.md) and an approximation of server-side apply.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::error::{ApiError, ApiResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> ApiResult<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/json-patch+json" => Ok(Self::Json),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(Self::Apply),
            other => Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"
                ),
            )),
        }
    }
}

/// Parses a patch body: JSON, or YAML for apply.
pub fn parse_body(body: &[u8], ty: PatchType) -> ApiResult<Value> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    if ty == PatchType::Apply {
        let text = std::str::from_utf8(body)
            .map_err(|e| ApiError::bad_request(format!("apply body is not UTF-8: {e}")))?;
        return serde_saphyr::from_str::<Value>(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")));
    }
    Err(ApiError::bad_request("the patch body is not valid JSON"))
}

/// Applies a non-apply patch to `target`.
pub fn apply_patch(target: &Value, patch: &Value, ty: PatchType) -> ApiResult<Value> {
    let mut doc = target.clone();
    match ty {
        PatchType::Merge => json_patch::merge(&mut doc, patch),
        PatchType::Json => {
            // Like the apiserver's JSON patch library, a `test` for null
            // passes on a missing path (kube-runtime's finalizer relies on it).
            let mut ops_json = patch.clone();
            if let Some(list) = ops_json.as_array_mut() {
                list.retain(|op| {
                    let null_test =
                        op["op"] == "test" && op.get("value").is_none_or(Value::is_null);
                    !(null_test
                        && op["path"]
                            .as_str()
                            .is_some_and(|p| doc.pointer(p).is_none_or(Value::is_null)))
                });
            }
            let ops: json_patch::Patch = serde_json::from_value(ops_json)
                .map_err(|e| ApiError::bad_request(format!("the JSON patch is malformed: {e}")))?;
            json_patch::patch(&mut doc, &ops).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })?;
        }
        PatchType::Strategic => strategic(&mut doc, patch),
        PatchType::Apply => merge_applied(&mut doc, patch),
    }
    Ok(doc)
}

/// Strategic merge for the types this project uses: maps merge, `null`
/// deletes, lists of objects keyed by `name` merge by key (with
/// `$patch: delete` removing an item), other lists are replaced.
fn strategic(doc: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *doc = patch.clone();
        return;
    };
    if !doc.is_object() {
        *doc = json!({});
    }
    let d = doc.as_object_mut().expect("object");
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        match v {
            Value::Null => {
                d.remove(k);
            }
            Value::Object(_) => strategic(d.entry(k.clone()).or_insert(Value::Null), v),
            Value::Array(items) => {
                let existing = d.get(k).and_then(Value::as_array).cloned();
                d.insert(k.clone(), merge_list(existing, items, true));
            }
            other => {
                d.insert(k.clone(), other.clone());
            }
        }
    }
}

fn list_key(items: &[Value]) -> Option<&'static str> {
    ["name", "type"].into_iter().find(|k| {
        !items.is_empty()
            && items
                .iter()
                .all(|i| i.get(*k).is_some_and(Value::is_string))
    })
}

fn merge_list(existing: Option<Vec<Value>>, patch: &[Value], strategic_mode: bool) -> Value {
    let Some(mut existing) = existing else {
        return Value::Array(
            patch
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .map(strip_directives)
                .collect(),
        );
    };
    let Some(key) = list_key(patch).filter(|k| existing.iter().all(|i| i.get(*k).is_some())) else {
        return Value::Array(patch.iter().map(strip_directives).collect());
    };
    for item in patch {
        let id = item.get(key).cloned();
        let pos = existing.iter().position(|e| e.get(key) == id.as_ref());
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                existing.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => {
                if strategic_mode {
                    strategic(&mut existing[i], item);
                } else {
                    merge_applied(&mut existing[i], item);
                }
            }
            (None, false) => existing.push(strip_directives(item)),
        }
    }
    Value::Array(existing)
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

/// Server-side apply, approximated: the applied configuration is merged
/// into the live object (maps deep-merge, keyed lists merge by `name` or
/// `type`, other lists are replaced). Fields the configuration does not
/// mention are not removed here; [`server_side_apply`] removes only keyed
/// list items the same manager applied before and nobody else owns.
fn merge_applied(doc: &mut Value, applied: &Value) {
    let Value::Object(a) = applied else {
        *doc = applied.clone();
        return;
    };
    if !doc.is_object() {
        *doc = json!({});
    }
    let d = doc.as_object_mut().expect("object");
    for (k, v) in a {
        match v {
            Value::Null => {
                d.remove(k);
            }
            Value::Object(_) => merge_applied(d.entry(k.clone()).or_insert(Value::Null), v),
            Value::Array(items) => {
                let existing = d.get(k).and_then(Value::as_array).cloned();
                d.insert(k.clone(), merge_list(existing, items, false));
            }
            other => {
                d.insert(k.clone(), other.clone());
            }
        }
    }
}

/// A field path in managedFields notation (`f:spec`, `k:{"name":"x"}`).
type FieldPath = Vec<String>;

/// The leaf fields an applied configuration sets.
pub fn applied_fields(applied: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    let mut base = Vec::new();
    if let Some(m) = applied.as_object() {
        for (k, v) in m {
            if matches!(k.as_str(), "apiVersion" | "kind") {
                continue;
            }
            if k == "metadata" {
                for (mk, mv) in v.as_object().into_iter().flatten() {
                    if matches!(
                        mk.as_str(),
                        "labels" | "annotations" | "finalizers" | "ownerReferences"
                    ) {
                        base.push("f:metadata".to_string());
                        collect(mk, mv, &mut base, &mut out);
                        base.pop();
                    }
                }
                continue;
            }
            collect(k, v, &mut base, &mut out);
        }
    }
    out
}

fn collect(key: &str, v: &Value, base: &mut Vec<String>, out: &mut BTreeSet<FieldPath>) {
    base.push(format!("f:{key}"));
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                collect(k, child, base, out);
            }
        }
        Value::Array(items) if list_key(items).is_some() => {
            let lk = list_key(items).expect("checked");
            for item in items {
                base.push(format!("k:{{\"{lk}\":{}}}", item[lk]));
                match item.as_object() {
                    Some(m) => {
                        for (k, child) in m {
                            if k != lk {
                                collect(k, child, base, out);
                            }
                        }
                    }
                    None => {
                        out.insert(base.clone());
                    }
                }
                base.pop();
            }
        }
        _ => {
            out.insert(base.clone());
        }
    }
    base.pop();
}

fn to_fields_v1(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for p in paths {
        let mut cur = &mut root;
        for seg in p {
            cur = cur
                .entry(seg.clone())
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("object");
        }
    }
    Value::Object(root)
}

fn from_fields_v1(v: &Value) -> BTreeSet<FieldPath> {
    fn rec(v: &Value, base: &mut Vec<String>, out: &mut BTreeSet<FieldPath>) {
        match v.as_object() {
            Some(m) if !m.is_empty() => {
                for (k, child) in m {
                    if k == "." {
                        continue;
                    }
                    base.push(k.clone());
                    rec(child, base, out);
                    base.pop();
                }
            }
            _ => {
                out.insert(base.clone());
            }
        }
    }
    let mut out = BTreeSet::new();
    rec(v, &mut Vec::new(), &mut out);
    out
}

/// Removes the keyed list item a managedFields path ends at, if present.
fn remove_item(obj: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let Some(k) = last.strip_prefix("k:") else {
        return;
    };
    let Ok(key) = serde_json::from_str::<Value>(k) else {
        return;
    };
    let Some((kname, kval)) = key.as_object().and_then(|m| m.iter().next()) else {
        return;
    };
    let mut cur = obj;
    for seg in parent {
        let next = if let Some(f) = seg.strip_prefix("f:") {
            cur.get_mut(f)
        } else if let Some(k) = seg.strip_prefix("k:") {
            let Ok(key) = serde_json::from_str::<Value>(k) else {
                return;
            };
            let Some((n, v)) = key.as_object().and_then(|m| m.iter().next()) else {
                return;
            };
            cur.as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| i.get(n) == Some(v)))
        } else {
            None
        };
        let Some(next) = next else {
            return;
        };
        cur = next;
    }
    if let Some(list) = cur.as_array_mut() {
        list.retain(|i| i.get(kname) != Some(kval));
    }
}

/// Reads the value at a managedFields path from an object.
fn value_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path {
        if let Some(k) = seg.strip_prefix("f:") {
            cur = cur.get(k)?;
        } else if let Some(k) = seg.strip_prefix("k:") {
            let key: Value = serde_json::from_str(k).ok()?;
            let (kname, kval) = key.as_object()?.iter().next()?;
            cur = cur
                .as_array()?
                .iter()
                .find(|i| i.get(kname) == Some(kval))?;
        } else {
            return None;
        }
    }
    Some(cur)
}

fn dotted(path: &[String]) -> String {
    path.iter()
        .map(|s| {
            if let Some(f) = s.strip_prefix("f:") {
                format!(".{f}")
            } else {
                format!("[{}]", &s[2..])
            }
        })
        .collect()
}

/// Applies `applied` for `manager`: refuses (409) to change a field another
/// apply manager owns unless `force`, merges, and records ownership in
/// `metadata.managedFields`.
pub fn server_side_apply(
    live: &Value,
    applied: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    now: &str,
) -> ApiResult<Value> {
    let mine = applied_fields(applied);
    let mut entries: Vec<Value> = live["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut conflicts = Vec::new();
    for entry in &entries {
        let other = entry["manager"].as_str().unwrap_or("");
        if other == manager || entry["operation"].as_str() != Some("Apply") {
            continue;
        }
        let owned = from_fields_v1(&entry["fieldsV1"]);
        for p in mine.intersection(&owned) {
            if value_at(live, p) != value_at(applied, p) {
                conflicts.push(format!("conflict with \"{other}\": {}", dotted(p)));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let n = conflicts.len();
        let plural = if n == 1 { "conflict" } else { "conflicts" };
        return Err(ApiError::new(
            409,
            "Conflict",
            format!("Apply failed with {n} {plural}: {}", conflicts.join(", ")),
        ));
    }
    let mut merged = live.clone();
    merge_applied(&mut merged, &strip_for_merge(applied));
    // As in real server-side apply: keyed list items this manager applied
    // before, no longer applies, and nobody else owns are removed (so a
    // status list can shrink). Other fields are still never removed.
    let previous: BTreeSet<FieldPath> = entries
        .iter()
        .filter(|e| {
            e["manager"].as_str() == Some(manager) && e["operation"].as_str() == Some("Apply")
        })
        .flat_map(|e| from_fields_v1(&e["fieldsV1"]))
        .collect();
    let others: BTreeSet<FieldPath> = entries
        .iter()
        .filter(|e| e["manager"].as_str() != Some(manager))
        .flat_map(|e| from_fields_v1(&e["fieldsV1"]))
        .collect();
    let items = |paths: &BTreeSet<FieldPath>| -> BTreeSet<FieldPath> {
        paths
            .iter()
            .filter_map(|p| {
                p.iter()
                    .rposition(|s| s.starts_with("k:"))
                    .map(|i| p[..=i].to_vec())
            })
            .collect()
    };
    let (was, still, kept) = (items(&previous), items(&mine), items(&others));
    for item in was.difference(&still).filter(|i| !kept.contains(*i)) {
        remove_item(&mut merged, item);
    }
    let subresource_free = |e: &Value| e["subresource"].as_str().unwrap_or("").is_empty();
    for entry in entries.iter_mut() {
        if entry["manager"].as_str() == Some(manager)
            || entry["operation"].as_str() != Some("Apply")
            || !subresource_free(entry)
        {
            continue;
        }
        let owned: BTreeSet<FieldPath> = from_fields_v1(&entry["fieldsV1"])
            .difference(&mine)
            .cloned()
            .collect();
        entry["fieldsV1"] = to_fields_v1(&owned);
    }
    entries.retain(|e| {
        e["manager"].as_str() != Some(manager) || e["operation"].as_str() != Some("Apply")
    });
    entries.push(json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(&mine),
    }));
    merged["metadata"]["managedFields"] = Value::Array(entries);
    Ok(merged)
}

/// What of an applied configuration lands in the object: not its
/// identity fields, which the URL decides.
fn strip_for_merge(applied: &Value) -> Value {
    let mut a = applied.clone();
    if let Some(md) = a.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "managedFields",
            "deletionTimestamp",
        ] {
            md.remove(k);
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategic_merges_named_lists() {
        let doc = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        let patch = json!({"spec": {"containers": [{"name": "b", "image": "z"}, {"name": "c", "image": "w"}]}});
        let out = apply_patch(&doc, &patch, PatchType::Strategic).unwrap();
        let images: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["image"].as_str().unwrap())
            .collect();
        assert_eq!(images, ["x", "z", "w"]);
    }

    #[test]
    fn apply_keeps_unmentioned_fields_and_detects_conflicts() {
        let live = json!({"metadata": {"name": "a"}, "spec": {"replicas": 3, "other": "keep"}});
        let applied = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}, "spec": {"replicas": 5}});
        let out = server_side_apply(&live, &applied, "one", false, "v1", "t").unwrap();
        assert_eq!(out["spec"], json!({"replicas": 5, "other": "keep"}));
        let theirs = json!({"spec": {"replicas": 1}});
        let err = server_side_apply(&out, &theirs, "two", false, "v1", "t").unwrap_err();
        assert_eq!(err.code, 409);
        assert!(err.message.contains(".spec.replicas"), "{}", err.message);
        let forced = server_side_apply(&out, &theirs, "two", true, "v1", "t").unwrap();
        assert_eq!(forced["spec"]["replicas"], 1);
        // the first manager lost the field, so it may now set it again only by force
        let again = server_side_apply(
            &forced,
            &json!({"spec": {"replicas": 5}}),
            "one",
            false,
            "v1",
            "t",
        );
        assert!(again.is_err());
    }

    #[test]
    fn apply_drops_list_items_the_same_manager_stopped_applying() {
        let live = json!({"metadata": {"name": "a"}});
        let two =
            json!({"status": {"members": [{"name": "x", "id": "1"}, {"name": "y", "id": "2"}]}});
        let out = server_side_apply(&live, &two, "op", false, "v1", "t").unwrap();
        let one = json!({"status": {"members": [{"name": "x", "id": "1"}]}});
        let out = server_side_apply(&out, &one, "op", false, "v1", "t").unwrap();
        assert_eq!(out["status"]["members"], json!([{"name": "x", "id": "1"}]));
        // An item another manager also applied is kept.
        let shared = server_side_apply(&live, &two, "op", false, "v1", "t").unwrap();
        let shared = server_side_apply(
            &shared,
            &json!({"status": {"members": [{"name": "y", "id": "2"}]}}),
            "other",
            true,
            "v1",
            "t",
        )
        .unwrap();
        let out = server_side_apply(&shared, &one, "op", false, "v1", "t").unwrap();
        assert_eq!(out["status"]["members"].as_array().unwrap().len(), 2);
    }
}

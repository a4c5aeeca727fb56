//! `meta.k8s.io/v1` Table responses for `kubectl get`: CRD printer columns
//! through a JSONPath subset, kubectl-like columns for a few built-ins, and
//! NAME/AGE for the rest.

use serde_json::{Value, json};

use super::resources::{PrinterColumn, ResourceType};

/// What each row carries in `object` (`?includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(v: Option<&str>) -> Self {
        match v {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

fn col(name: &str, ty: &str, format: &str, priority: i64) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        type_: ty.into(),
        format: format.into(),
        description: String::new(),
        json_path: String::new(),
        priority,
    }
}

fn columns(rt: &ResourceType, version: &str) -> Vec<PrinterColumn> {
    let mut name = col("Name", "string", "name", 0);
    name.description = "Name must be unique within a namespace.".into();
    let mut cols = vec![name];
    if rt.custom {
        let v = rt.version(version).unwrap_or(rt.preferred());
        cols.extend(v.printer_columns.iter().cloned());
        return cols;
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => cols.extend([
            col("Ready", "string", "", 0),
            col("Status", "string", "", 0),
            col("Restarts", "string", "", 0),
            col("Age", "string", "", 0),
            col("IP", "string", "", 1),
            col("Node", "string", "", 1),
        ]),
        ("", "namespaces") => {
            cols.extend([col("Status", "string", "", 0), col("Age", "string", "", 0)])
        }
        ("", "services") => cols.extend([
            col("Type", "string", "", 0),
            col("Cluster-IP", "string", "", 0),
            col("Port(s)", "string", "", 0),
            col("Age", "string", "", 0),
        ]),
        ("", "persistentvolumeclaims") => {
            cols.extend([col("Status", "string", "", 0), col("Age", "string", "", 0)])
        }
        _ => cols.push(col("Age", "string", "", 0)),
    }
    cols
}

fn age(obj: &Value) -> String {
    obj["metadata"]["creationTimestamp"]
        .as_str()
        .map(age_since)
        .unwrap_or_else(|| "<unknown>".into())
}

/// kubectl's `HumanDuration` of the time since an RFC 3339 timestamp.
pub fn age_since(ts: &str) -> String {
    let Ok(then) = ts.parse::<jiff::Timestamp>() else {
        return "<invalid>".into();
    };
    let secs = (jiff::Timestamp::now() - then).get_seconds();
    human_duration(secs)
}

pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    let m = s / 60;
    let h = s / 3600;
    let d = h / 24;
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 192 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else if d < 365 * 8 {
        let y = d / 365;
        if d % 365 == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{}d", d % 365)
        }
    } else {
        format!("{}y", d / 365)
    }
}

fn builtin_cells(rt: &ResourceType, obj: &Value) -> Vec<Value> {
    let name = json!(obj["metadata"]["name"].as_str().unwrap_or(""));
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => {
            let total = obj["spec"]["containers"]
                .as_array()
                .map(Vec::len)
                .unwrap_or(0);
            let statuses = obj["status"]["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let ready = statuses
                .iter()
                .filter(|s| s["ready"].as_bool() == Some(true))
                .count();
            let restarts: i64 = statuses
                .iter()
                .filter_map(|s| s["restartCount"].as_i64())
                .sum();
            let mut status = obj["status"]["reason"]
                .as_str()
                .or(obj["status"]["phase"].as_str())
                .unwrap_or("Unknown")
                .to_string();
            for s in &statuses {
                if let Some(r) = s["state"]["waiting"]["reason"].as_str() {
                    status = r.to_string();
                } else if let Some(r) = s["state"]["terminated"]["reason"].as_str() {
                    status = r.to_string();
                }
            }
            if obj["metadata"]["deletionTimestamp"].is_string() {
                status = "Terminating".into();
            }
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(status),
                json!(restarts.to_string()),
                json!(age(obj)),
                json!(obj["status"]["podIP"].as_str().unwrap_or("<none>")),
                json!(obj["spec"]["nodeName"].as_str().unwrap_or("<none>")),
            ]
        }
        ("", "namespaces") | ("", "persistentvolumeclaims") => {
            vec![
                name,
                json!(obj["status"]["phase"].as_str().unwrap_or("")),
                json!(age(obj)),
            ]
        }
        ("", "services") => {
            let ports: Vec<String> = obj["spec"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
                .collect();
            vec![
                name,
                json!(obj["spec"]["type"].as_str().unwrap_or("ClusterIP")),
                json!(obj["spec"]["clusterIP"].as_str().unwrap_or("<none>")),
                json!(if ports.is_empty() {
                    "<none>".to_string()
                } else {
                    ports.join(",")
                }),
                json!(age(obj)),
            ]
        }
        _ => vec![name, json!(age(obj))],
    }
}

fn custom_cells(cols: &[PrinterColumn], obj: &Value) -> Vec<Value> {
    let mut cells = vec![json!(obj["metadata"]["name"].as_str().unwrap_or(""))];
    for c in &cols[1..] {
        let found = jsonpath(obj, &c.json_path);
        let cell = match (c.type_.as_str(), found) {
            (_, None) => Value::Null,
            ("date", Some(Value::String(s))) => json!(age_since(&s)),
            ("integer" | "number" | "boolean", Some(v)) => v,
            (_, Some(Value::String(s))) => json!(s),
            (_, Some(v)) => json!(v.to_string()),
        };
        cells.push(cell);
    }
    cells
}

/// An object reduced to `meta.k8s.io/v1` PartialObjectMetadata.
pub fn partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    })
}

/// One row's `object`, per `includeObject`.
fn row_object(obj: &Value, include: IncludeObject) -> Option<Value> {
    match include {
        IncludeObject::None => None,
        IncludeObject::Object => Some(obj.clone()),
        IncludeObject::Metadata => Some(partial(obj)),
    }
}

/// A Table of `objects`, all of resource `rt`.
pub fn table(
    rt: &ResourceType,
    version: &str,
    objects: &[Value],
    resource_version: u64,
    include: IncludeObject,
) -> Value {
    let cols = columns(rt, version);
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let cells = if rt.custom {
                custom_cells(&cols, o)
            } else {
                builtin_cells(rt, o)
            };
            let mut row = json!({"cells": cells});
            if let Some(obj) = row_object(o, include) {
                row["object"] = obj;
            }
            row
        })
        .collect();
    let defs: Vec<Value> = cols
        .iter()
        .map(|c| json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority}))
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version.to_string()},
        "columnDefinitions": defs,
        "rows": rows,
    })
}

/// The JSONPath subset printer columns use: `.a.b`, `.a[0]`,
/// `.a[?(@.type=="Ready")].status`, optionally wrapped in `{}`.
pub fn jsonpath(obj: &Value, path: &str) -> Option<Value> {
    let p = path.trim();
    let p = p
        .strip_prefix('{')
        .and_then(|x| x.strip_suffix('}'))
        .unwrap_or(p);
    let p = p.strip_prefix('$').unwrap_or(p);
    let mut cur = obj.clone();
    let mut rest = p;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            cur = cur.get(key)?.clone();
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
                let (lhs, rhs) = filter.split_once("==")?;
                let field = lhs.trim().strip_prefix("@.")?;
                let want = rhs.trim().trim_matches(|c| c == '"' || c == '\'');
                let hit = cur.as_array()?.iter().find(|item| match &item[field] {
                    Value::String(s) => s == want,
                    Value::Null => false,
                    other => *other == want,
                })?;
                cur = hit.clone();
            } else if inner == "*" {
                // A wildcard keeps the list; the cell shows it as JSON.
            } else {
                let idx: i64 = inner.trim().parse().ok()?;
                let arr = cur.as_array()?;
                let i = if idx < 0 { arr.len() as i64 + idx } else { idx };
                cur = arr.get(usize::try_from(i).ok()?)?.clone();
            }
        } else {
            return None;
        }
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_subset() {
        let obj = json!({"spec": {"size": 3}, "status": {"conditions": [
            {"type": "Available", "status": "False"},
            {"type": "Ready", "status": "True"}
        ]}});
        assert_eq!(jsonpath(&obj, ".spec.size"), Some(json!(3)));
        assert_eq!(
            jsonpath(&obj, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(json!("True"))
        );
        assert_eq!(
            jsonpath(&obj, ".status.conditions[0].type"),
            Some(json!("Available"))
        );
        assert_eq!(jsonpath(&obj, ".status.missing"), None);
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(300), "5m");
        assert_eq!(human_duration(330), "5m30s");
        assert_eq!(human_duration(3600 * 3), "3h");
        assert_eq!(human_duration(3600 * 50), "2d2h");
    }
}

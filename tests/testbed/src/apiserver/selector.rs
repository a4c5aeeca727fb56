//! Label and field selectors, as `?labelSelector=` and `?fieldSelector=`
//! spell them.

use serde_json::Value;

use super::error::{ApiError, ApiResult};

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    pub fn parse(text: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for term in split_top_level(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            reqs.push(parse_requirement(term)?);
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Eq(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEq(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// Commas inside `in (a,b)` do not separate requirements.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

fn parse_requirement(term: &str) -> ApiResult<Requirement> {
    let bad = || {
        ApiError::bad_request(format!(
            "unable to parse requirement: invalid label selector term {term:?}"
        ))
    };
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement::NotExists(
            valid_key(key.trim()).ok_or_else(bad)?,
        ));
    }
    for (op, neg) in [(" notin ", true), (" in ", false)] {
        if let Some(idx) = term.find(op) {
            let key = valid_key(term[..idx].trim()).ok_or_else(bad)?;
            let rest = term[idx + op.len()..].trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(bad)?;
            let values: Vec<String> = inner
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            return Ok(if neg {
                Requirement::NotIn(key, values)
            } else {
                Requirement::In(key, values)
            });
        }
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Requirement::NotEq(
            valid_key(k.trim()).ok_or_else(bad)?,
            v.trim().to_string(),
        ));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Requirement::Eq(
            valid_key(k.trim()).ok_or_else(bad)?,
            v.trim().to_string(),
        ));
    }
    Ok(Requirement::Exists(valid_key(term).ok_or_else(bad)?))
}

fn valid_key(key: &str) -> Option<String> {
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    ok.then(|| key.to_string())
}

/// A field selector: `=`, `==` and `!=` on any dotted field path, compared
/// as strings (a missing field is ""). More permissive than the real
/// apiserver, which allows only a few fields per type; kubectl's describe
/// selects events on `involvedObject.*`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(text: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for term in text.split(',') {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let (field, eq, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector: {term:?}"
                )));
            };
            let field = field.trim();
            let well_formed = !field.is_empty()
                && field
                    .split('.')
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric()));
            if !well_formed {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector: {term:?}"
                )));
            }
            reqs.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, eq, value)| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let actual = match obj.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *value) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_based_and_equality_requirements() {
        let obj = json!({"metadata": {"labels": {"app": "etcd", "tier": "db"}}});
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&obj);
        assert!(m("app=etcd"));
        assert!(m("app==etcd,tier"));
        assert!(!m("app!=etcd"));
        assert!(m("app in (web, etcd)"));
        assert!(!m("app notin (web,etcd)"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(m("tier in (db),app"));
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn field_selectors_on_name_and_namespace() {
        let obj = json!({"metadata": {"name": "a", "namespace": "ns"}});
        assert!(
            FieldSelector::parse("metadata.name=a")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=a")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("metadata.namespace==ns,metadata.name=a")
                .unwrap()
                .matches(&obj)
        );
        assert!(FieldSelector::parse("spec..foo=1").is_err());
        assert!(FieldSelector::parse("spec.missing=").unwrap().matches(&obj));
    }
}

//! Kubernetes object semantics on top of the store: what create, update and
//! delete do to metadata, status, generation, finalizers, namespaces and
//! owner references. Every write path of the HTTP layer ends here.

use serde_json::{Value, json};

use super::error::{ApiError, ApiResult, FieldError, FieldErrorKind};
use super::resources::{ResKey, ResourceType, from_crd};
use super::schema;
use super::store::Store;

const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

/// Which endpoint a write came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Main,
    Status,
}

#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    /// `fieldValidation=Strict`: unknown fields are an error, not pruned.
    pub strict: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub propagation: Propagation,
    pub grace_period: Option<i64>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn meta(obj: &Value) -> &Value {
    &obj["metadata"]
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj["metadata"][field].as_str()
}

fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn set_finalizers(obj: &mut Value, list: Vec<String>) {
    let md = obj["metadata"]
        .as_object_mut()
        .expect("metadata is an object");
    if list.is_empty() {
        md.remove("finalizers");
    } else {
        md.insert("finalizers".into(), json!(list));
    }
}

fn is_deleting(obj: &Value) -> bool {
    meta(obj)
        .get("deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// The parts of an object whose change bumps `metadata.generation`.
fn spec_part(obj: &Value) -> Value {
    let mut copy = obj.clone();
    if let Some(m) = copy.as_object_mut() {
        for k in ["metadata", "status", "apiVersion", "kind"] {
            m.remove(k);
        }
    }
    copy
}

fn without_volatile(obj: &Value) -> Value {
    let mut copy = obj.clone();
    if let Some(md) = copy["metadata"].as_object_mut() {
        md.remove("resourceVersion");
        md.remove("managedFields");
    }
    copy
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = *uuid::Uuid::new_v4().as_bytes();
    bytes
        .iter()
        .take(5)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

fn validate_name(rt: &ResourceType, name: &str) -> Option<FieldError> {
    let label = rt.plural == "services" || rt.plural == "namespaces";
    let max = if label { 63 } else { 253 };
    let chars_ok = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (!label && c == '.'));
    let ends_ok = name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if chars_ok && ends_ok && name.len() <= max {
        return None;
    }
    let what = if label {
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
    } else {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
    };
    Some(FieldError::new(
        "metadata.name",
        FieldErrorKind::Invalid(Value::String(name.into())),
        what,
    ))
}

impl Store {
    pub fn resource(&self, key: &ResKey) -> Option<&ResourceType> {
        self.types.get(key)
    }

    fn check_namespace(&self, rt: &ResourceType, ns: &str) -> ApiResult<()> {
        if !rt.namespaced {
            return Ok(());
        }
        let nskey = ResKey::new("", "namespaces");
        match self.get(&nskey, "", ns) {
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some(n) if is_deleting(n) => Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    rt.plural,
                    meta_str(n, "name").unwrap_or(ns)
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Schema checks for custom resources and CRDs; returns the object with
    /// defaults applied and unknown fields pruned.
    fn validated(
        &self,
        rt: &ResourceType,
        version: &str,
        mut obj: Value,
        old: Option<&Value>,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        let name = meta_str(&obj, "name").unwrap_or("").to_string();
        if rt.custom
            && let Some(schema) = rt.version(version).and_then(|v| v.schema.as_ref())
        {
            let outcome = schema::apply(&mut obj, schema, old, opts.strict);
            if !outcome.unknown.is_empty() && opts.strict {
                let list: Vec<String> = outcome
                    .unknown
                    .iter()
                    .map(|u| format!("unknown field \"{u}\""))
                    .collect();
                return Err(ApiError::bad_request(format!(
                    ".{}: {}",
                    rt.kind,
                    list.join(", ")
                )));
            }
            if !outcome.errors.is_empty() {
                return Err(ApiError::invalid(
                    &rt.kind,
                    &rt.group,
                    &name,
                    outcome.errors,
                ));
            }
        }
        if rt.plural == "customresourcedefinitions" {
            let defined = from_crd(&obj)?;
            let clash = self.types.get(&defined.key()).filter(|t| !t.custom);
            if clash.is_some() {
                return Err(ApiError::invalid(
                    "CustomResourceDefinition",
                    "apiextensions.k8s.io",
                    &name,
                    vec![FieldError::new(
                        "spec.group",
                        FieldErrorKind::Forbidden,
                        "collides with a built-in resource",
                    )],
                ));
            }
            let names = obj["spec"]["names"].clone();
            let stored: Vec<Value> = obj["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .map(|v| v["name"].clone())
                .collect();
            let t = now();
            obj["status"] = json!({
                "acceptedNames": names,
                "storedVersions": stored,
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": t},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": t},
                ],
            });
        }
        Ok(obj)
    }

    /// POST: a new object in `ns` ("" for cluster-scoped).
    pub fn create(
        &mut self,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        if rt.namespaced {
            match meta_str(&obj, "namespace") {
                Some(n) if !n.is_empty() && n != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => obj["metadata"]["namespace"] = json!(ns),
            }
        } else if let Some(md) = obj["metadata"].as_object_mut() {
            md.remove("namespace");
        }
        self.check_namespace(rt, ns)?;
        let name = match meta_str(&obj, "name").filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None => match meta_str(&obj, "generateName").filter(|n| !n.is_empty()) {
                Some(prefix) => {
                    let mut candidate = format!("{prefix}{}", random_suffix());
                    while self.get(&rt.key(), ns, &candidate).is_some() {
                        candidate = format!("{prefix}{}", random_suffix());
                    }
                    candidate
                }
                None => {
                    return Err(ApiError::invalid(
                        &rt.kind,
                        &rt.group,
                        "",
                        vec![FieldError::new(
                            "metadata.name",
                            FieldErrorKind::Required,
                            "name or generateName is required",
                        )],
                    ));
                }
            },
        };
        if let Some(e) = validate_name(rt, &name) {
            return Err(ApiError::invalid(&rt.kind, &rt.group, &name, vec![e]));
        }
        if self.get(&rt.key(), ns, &name).is_some() {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        obj["apiVersion"] = json!(rt.api_version(version));
        obj["kind"] = json!(rt.kind);
        {
            let md = obj["metadata"]
                .as_object_mut()
                .expect("metadata is an object");
            md.insert("name".into(), json!(name));
            md.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            md.insert("creationTimestamp".into(), json!(now()));
            md.insert("generation".into(), json!(1));
            for k in [
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
            ] {
                md.remove(k);
            }
        }
        if rt.custom
            && rt.has_status()
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        self.builtin_defaults(rt, &mut obj);
        let obj = self.validated(rt, version, obj, None, opts)?;
        if opts.dry_run {
            return Ok(obj);
        }
        let stored = self.put(&rt.key(), obj);
        self.after_write(rt, &stored);
        if !owner_uids(&stored).is_empty() {
            // A dependent of owners that no longer exist is garbage at once.
            self.collect_garbage();
            if self.get(&rt.key(), ns, &name).is_none() {
                return Ok(stored);
            }
        }
        Ok(stored)
    }

    fn builtin_defaults(&self, rt: &ResourceType, obj: &mut Value) {
        match (rt.group.as_str(), rt.plural.as_str()) {
            ("", "pods") => {
                obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
                if obj["spec"]["restartPolicy"].is_null() {
                    obj["spec"]["restartPolicy"] = json!("Always");
                }
                if obj["spec"]["terminationGracePeriodSeconds"].is_null() {
                    obj["spec"]["terminationGracePeriodSeconds"] = json!(30);
                }
            }
            ("", "namespaces") => {
                obj["status"] = json!({"phase": "Active"});
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
            }
            ("", "services") => {
                if obj["spec"]["type"].is_null() {
                    obj["spec"]["type"] = json!("ClusterIP");
                }
                if obj["spec"]["clusterIP"].is_null() {
                    let n = self.list(&rt.key(), None).count() as u32 + 1;
                    let ip = format!("10.96.{}.{}", (n / 250) % 250, n % 250 + 1);
                    obj["spec"]["clusterIP"] = json!(ip);
                    obj["spec"]["clusterIPs"] = json!([ip]);
                }
                if obj["status"].is_null() {
                    obj["status"] = json!({"loadBalancer": {}});
                }
            }
            ("", "persistentvolumeclaims") if obj["status"]["phase"].is_null() => {
                obj["status"] = json!({"phase": "Pending"});
            }
            _ => {}
        }
    }

    /// PUT (and the end of every PATCH) on the main or status endpoint.
    pub fn update(
        &mut self,
        rt: &ResourceType,
        version: &str,
        (ns, name): (&str, &str),
        mut obj: Value,
        endpoint: Endpoint,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        let key = rt.key();
        let old = self
            .get(&key, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        if !obj.is_object() || !obj["metadata"].is_object() {
            return Err(ApiError::bad_request(
                "the request body must be an object with metadata",
            ));
        }
        if let Some(body_name) = meta_str(&obj, "name").filter(|n| !n.is_empty())
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if rt.namespaced
            && let Some(body_ns) = meta_str(&obj, "namespace").filter(|n| !n.is_empty())
            && body_ns != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if let Some(rv) = meta_str(&obj, "resourceVersion").filter(|r| !r.is_empty())
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &rt.group,
                &rt.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        if endpoint == Endpoint::Status {
            let mut next = old.clone();
            match obj.get("status") {
                Some(s) => next["status"] = s.clone(),
                None => {
                    next.as_object_mut().map(|m| m.remove("status"));
                }
            }
            obj = next;
        } else {
            // Server-owned metadata survives whatever the client sent.
            for k in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old["metadata"].get(k) {
                    Some(v) => obj["metadata"][k] = v.clone(),
                    None => {
                        obj["metadata"].as_object_mut().map(|m| m.remove(k));
                    }
                }
            }
            if obj["metadata"].get("managedFields").is_none()
                && let Some(mf) = old["metadata"].get("managedFields")
            {
                obj["metadata"]["managedFields"] = mf.clone();
            }
            if rt.has_status() {
                match old.get("status") {
                    Some(s) => obj["status"] = s.clone(),
                    None => {
                        obj.as_object_mut().map(|m| m.remove("status"));
                    }
                }
            }
            if is_deleting(&old) {
                let before = finalizers(&old);
                if let Some(added) = finalizers(&obj).into_iter().find(|f| !before.contains(f)) {
                    return Err(ApiError::invalid(
                        &rt.kind,
                        &rt.group,
                        name,
                        vec![FieldError::new(
                            "metadata.finalizers",
                            FieldErrorKind::Forbidden,
                            format!(
                                "no new finalizers can be added if the object is being deleted, found new finalizers [\"{added}\"]"
                            ),
                        )],
                    ));
                }
            }
        }
        obj["apiVersion"] = json!(
            old["apiVersion"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| rt.api_version(version))
        );
        obj["kind"] = json!(rt.kind);
        obj["metadata"]["name"] = json!(name);
        if rt.namespaced {
            obj["metadata"]["namespace"] = json!(ns);
        }
        let mut obj = self.validated(rt, version, obj, Some(&old), opts)?;
        if spec_part(&obj) != spec_part(&old) {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
            obj["metadata"]["generation"] = json!(generation + 1);
        }
        if without_volatile(&obj) == without_volatile(&old) {
            // A no-op write neither bumps the version nor wakes watches.
            return Ok(old);
        }
        if opts.dry_run {
            return Ok(obj);
        }
        if is_deleting(&obj) && finalizers(&obj).is_empty() && grace_done(&obj) {
            let gone = self.remove(&key, ns, name).expect("object exists");
            self.after_remove(rt, &gone);
            return Ok(gone);
        }
        let stored = self.put(&key, obj);
        self.after_write(rt, &stored);
        if is_deleting(&stored) {
            self.collect_garbage();
        }
        Ok(stored)
    }

    /// DELETE: removes now, or marks for deletion while finalizers (or a
    /// running Pod's grace period) hold the object.
    pub fn delete(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Value> {
        let key = rt.key();
        let mut obj = self
            .get(&key, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        if let Some(uid) = &opts.precondition_uid
            && Some(uid.as_str()) != meta_str(&obj, "uid")
        {
            return Err(ApiError::conflict(
                &rt.group,
                &rt.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&obj, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_rv
            && Some(rv.as_str()) != meta_str(&obj, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &rt.group,
                &rt.plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&obj, "resourceVersion").unwrap_or("")
                ),
            ));
        }
        if opts.dry_run {
            return Ok(obj);
        }
        let uid = meta_str(&obj, "uid").unwrap_or("").to_string();
        if opts.propagation == Propagation::Orphan {
            self.orphan_dependents(&uid);
        }
        let graceful_pod = rt.group.is_empty()
            && rt.plural == "pods"
            && obj["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty())
            && !matches!(
                obj["status"]["phase"].as_str(),
                Some("Succeeded") | Some("Failed")
            );
        let grace = if graceful_pod {
            opts.grace_period
                .or(obj["spec"]["terminationGracePeriodSeconds"].as_i64())
                .unwrap_or(30)
                .max(0)
        } else {
            0
        };
        let mut fins = finalizers(&obj);
        if opts.propagation == Propagation::Foreground
            && !fins.iter().any(|f| f == FOREGROUND)
            && self.has_dependents(&uid)
        {
            fins.push(FOREGROUND.into());
        }
        // A namespace with contents terminates first: GC empties it, then removes it.
        let busy_namespace = rt.group.is_empty()
            && rt.plural == "namespaces"
            && self
                .all()
                .any(|(_, o)| meta_str(o, "namespace") == Some(name));
        if fins.is_empty() && grace == 0 && !busy_namespace {
            let gone = self.remove(&key, ns, name).expect("object exists");
            self.after_remove(rt, &gone);
            return Ok(gone);
        }
        let already = is_deleting(&obj);
        let shortened = obj["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .is_some_and(|g| grace < g);
        if already && !shortened && fins == finalizers(&obj) {
            return Ok(obj);
        }
        set_finalizers(&mut obj, fins);
        let when = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(grace);
        obj["metadata"]["deletionTimestamp"] =
            json!(when.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        if !already && rt.custom {
            let generation = obj["metadata"]["generation"].as_i64().unwrap_or(1);
            obj["metadata"]["generation"] = json!(generation + 1);
        }
        if rt.plural == "namespaces" && rt.group.is_empty() {
            obj["status"]["phase"] = json!("Terminating");
        }
        let stored = self.put(&key, obj);
        self.collect_garbage();
        Ok(stored)
    }

    fn after_write(&mut self, rt: &ResourceType, stored: &Value) {
        if rt.plural == "customresourcedefinitions"
            && rt.group == "apiextensions.k8s.io"
            && !is_deleting(stored)
            && let Ok(defined) = from_crd(stored)
        {
            self.types.insert(defined.key(), defined);
        }
    }

    fn after_remove(&mut self, rt: &ResourceType, gone: &Value) {
        if rt.plural == "customresourcedefinitions"
            && rt.group == "apiextensions.k8s.io"
            && let Ok(defined) = from_crd(gone)
        {
            self.drop_resource(&defined.key());
            self.types.remove(&defined.key());
        }
        self.collect_garbage();
    }

    fn has_dependents(&self, uid: &str) -> bool {
        self.all()
            .any(|(_, o)| owner_uids(o).iter().any(|(u, _)| u == uid))
    }

    fn orphan_dependents(&mut self, uid: &str) {
        let dependents: Vec<(ResKey, Value)> = self
            .all()
            .filter(|(_, o)| owner_uids(o).iter().any(|(u, _)| u == uid))
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect();
        for (key, mut o) in dependents {
            if let Some(refs) = o["metadata"]["ownerReferences"].as_array_mut() {
                refs.retain(|r| r["uid"].as_str() != Some(uid));
            }
            self.put(&key, o);
        }
    }

    /// The garbage collector, run to a fixpoint after every removal:
    /// dependents whose owners are all gone (or being deleted in the
    /// foreground) are deleted; foreground owners finish once their blocking
    /// dependents are gone; terminating namespaces are emptied, then removed.
    pub fn collect_garbage(&mut self) {
        for _round in 0..64 {
            let mut live: std::collections::HashMap<String, bool> =
                std::collections::HashMap::new();
            for (_, o) in self.all() {
                let fg = is_deleting(o) && finalizers(o).iter().any(|f| f == FOREGROUND);
                live.insert(meta_str(o, "uid").unwrap_or("").to_string(), fg);
            }
            let mut actions: Vec<(ResKey, String, String, Action)> = Vec::new();
            let terminating: Vec<String> = self
                .list(&ResKey::new("", "namespaces"), None)
                .filter(|n| is_deleting(n))
                .filter_map(|n| meta_str(n, "name").map(str::to_string))
                .collect();
            for (key, o) in self.all() {
                let ns = meta_str(o, "namespace").unwrap_or("").to_string();
                let name = meta_str(o, "name").unwrap_or("").to_string();
                let owners = owner_uids(o);
                let doomed_by_owner = !owners.is_empty()
                    && owners.iter().all(|(u, _)| live.get(u).is_none_or(|fg| *fg));
                let doomed_by_ns = !ns.is_empty() && terminating.contains(&ns);
                if (doomed_by_owner || doomed_by_ns) && !is_deleting(o) {
                    actions.push((key.clone(), ns.clone(), name.clone(), Action::Delete));
                    continue;
                }
                if is_deleting(o) && finalizers(o).iter().any(|f| f == FOREGROUND) {
                    let uid = meta_str(o, "uid").unwrap_or("");
                    let blocked = self
                        .all()
                        .any(|(_, d)| owner_uids(d).iter().any(|(u, block)| u == uid && *block));
                    if !blocked {
                        actions.push((
                            key.clone(),
                            ns.clone(),
                            name.clone(),
                            Action::Release(FOREGROUND),
                        ));
                    }
                }
                if is_deleting(o) && finalizers(o).iter().any(|f| f == ORPHAN) {
                    actions.push((
                        key.clone(),
                        ns.clone(),
                        name.clone(),
                        Action::Release(ORPHAN),
                    ));
                }
            }
            for ns in &terminating {
                let empty = self
                    .all()
                    .all(|(_, o)| meta_str(o, "namespace") != Some(ns.as_str()));
                if empty {
                    actions.push((
                        ResKey::new("", "namespaces"),
                        String::new(),
                        ns.clone(),
                        Action::Remove,
                    ));
                }
            }
            if actions.is_empty() {
                return;
            }
            for (key, ns, name, action) in actions {
                let Some(rt) = self.types.get(&key).cloned() else {
                    continue;
                };
                match action {
                    Action::Delete => {
                        let _ = self.delete(&rt, &ns, &name, &DeleteOptions::default());
                    }
                    Action::Release(which) => {
                        if let Some(mut o) = self.get(&key, &ns, &name).cloned() {
                            if which == ORPHAN {
                                let uid = meta_str(&o, "uid").unwrap_or("").to_string();
                                self.orphan_dependents(&uid);
                            }
                            let rest: Vec<String> =
                                finalizers(&o).into_iter().filter(|f| f != which).collect();
                            set_finalizers(&mut o, rest);
                            if finalizers(&o).is_empty() && grace_done(&o) {
                                if let Some(gone) = self.remove(&key, &ns, &name)
                                    && let Some(rt2) = self.types.get(&key).cloned()
                                    && rt2.plural == "customresourcedefinitions"
                                {
                                    self.after_remove_no_gc(&rt2, &gone);
                                }
                            } else {
                                self.put(&key, o);
                            }
                        }
                    }
                    Action::Remove => {
                        self.remove(&key, &ns, &name);
                    }
                }
            }
            let _ = &live;
        }
    }

    fn after_remove_no_gc(&mut self, rt: &ResourceType, gone: &Value) {
        if rt.plural == "customresourcedefinitions"
            && rt.group == "apiextensions.k8s.io"
            && let Ok(defined) = from_crd(gone)
        {
            self.drop_resource(&defined.key());
            self.types.remove(&defined.key());
        }
    }
}

enum Action {
    Delete,
    Release(&'static str),
    Remove,
}

/// A Pod in graceful termination stays until its kubelet deletes it with a
/// zero grace period; everything else goes once its finalizers are empty.
fn grace_done(obj: &Value) -> bool {
    obj["metadata"]["deletionGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(0)
        == 0
}

fn owner_uids(obj: &Value) -> Vec<(String, bool)> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    let uid = r["uid"].as_str()?.to_string();
                    Some((uid, r["blockOwnerDeletion"].as_bool().unwrap_or(false)))
                })
                .collect()
        })
        .unwrap_or_default()
}

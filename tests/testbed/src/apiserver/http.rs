//! The HTTP face of the stand-in: routes Kubernetes REST paths to the
//! store, applies faults, and renders objects, lists, tables and errors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tracing::debug;

use super::discovery;
use super::error::{ApiError, ApiResult};
use super::faults::{Faults, Verb};
use super::lifecycle::{DeleteOptions, Endpoint, Propagation, WriteOptions, now};
use super::patch::{self, PatchType};
use super::resources::{ResKey, ResourceType, ScaleSpec};
use super::selector::{FieldSelector, LabelSelector};
use super::store::Store;
use super::table::{self, IncludeObject};
use super::watch;

/// Everything a request handler needs.
pub struct App {
    pub store: Mutex<Store>,
    pub faults: Arc<Faults>,
    pub bookmark_interval: Duration,
}

impl App {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        // A panic while holding the lock is a bug in the stand-in, and the
        // store stays consistent: every mutation is a single insert/remove.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub type Params = HashMap<String, String>;

/// Which object (or collection) a resource path names.
#[derive(Debug, Clone)]
pub struct Target {
    pub rt: ResourceType,
    pub version: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl Target {
    pub fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }
}

pub async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    let method = req.method().clone();
    let uri = req.uri().clone();
    let headers = req.headers().clone();
    debug!(%method, %uri, "apiserver request");
    let latency = app.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let body = match axum::body::to_bytes(req.into_body(), 64 << 20).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::bad_request(format!("reading the request body: {e}")).into_response();
        }
    };
    let params: Params = Query::<Params>::try_from_uri(&uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let response = route(&app, &method, uri.path(), &params, &headers, body).await;
    let response = response.unwrap_or_else(|e| {
        debug!(%method, %uri, code = e.code, reason = e.reason, message = %e.message, "apiserver error");
        e.into_response()
    });
    debug!(%method, %uri, status = %response.status(), "apiserver response");
    response
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    let body = serde_json::to_vec(v).expect("JSON values serialize");
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn ok(v: &Value) -> ApiResult<Response> {
    Ok(json_response(StatusCode::OK, v))
}

async fn route(
    app: &Arc<App>,
    method: &Method,
    path: &str,
    params: &Params,
    headers: &HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let read_only = || {
        if method == Method::GET {
            Ok(())
        } else {
            Err(ApiError::method_not_allowed(format!(
                "{method} is not allowed on {path}"
            )))
        }
    };
    match segs.as_slice() {
        ["version"] => {
            read_only()?;
            ok(&discovery::version())
        }
        ["healthz"] | ["readyz"] | ["livez"] => Ok((StatusCode::OK, "ok").into_response()),
        ["api"] => {
            read_only()?;
            ok(&discovery::core_versions())
        }
        ["apis"] => {
            read_only()?;
            let store = app.lock();
            ok(&discovery::group_list(store.types.values()))
        }
        ["api", v] => {
            read_only()?;
            let store = app.lock();
            discovery::resource_list(store.types.values(), "", v)
                .map_or_else(|| Err(ApiError::not_found_path(path)), |d| ok(&d))
        }
        ["apis", g] => {
            read_only()?;
            let store = app.lock();
            discovery::group(store.types.values(), g)
                .map_or_else(|| Err(ApiError::not_found_path(path)), |d| ok(&d))
        }
        ["apis", g, v] => {
            read_only()?;
            let store = app.lock();
            discovery::resource_list(store.types.values(), g, v)
                .map_or_else(|| Err(ApiError::not_found_path(path)), |d| ok(&d))
        }
        ["openapi", "v3"] => {
            read_only()?;
            let types: Vec<ResourceType> = app.lock().types.values().cloned().collect();
            ok(&discovery::openapi_v3_root(&types))
        }
        ["openapi", "v3", "api", v] | ["openapi", "v3", "apis", _, v] => {
            read_only()?;
            let group = if segs[2] == "api" { "" } else { segs[3] };
            let types: Vec<ResourceType> = app.lock().types.values().cloned().collect();
            discovery::openapi_v3_group_version(&types, group, v)
                .map_or_else(|| Err(ApiError::not_found_path(path)), |d| ok(&d))
        }
        ["api", v, rest @ ..] => {
            let target = resolve(app, "", v, rest, path)?;
            resource(app, method, target, params, headers, body).await
        }
        ["apis", g, v, rest @ ..] => {
            let target = resolve(app, g, v, rest, path)?;
            resource(app, method, target, params, headers, body).await
        }
        _ => Err(ApiError::not_found_path(path)),
    }
}

fn resolve(app: &App, group: &str, version: &str, rest: &[&str], path: &str) -> ApiResult<Target> {
    let store = app.lock();
    let lookup = |plural: &str| {
        store
            .types
            .get(&ResKey::new(group, plural))
            .filter(|t| t.version(version).is_some())
    };
    let (rt, namespace, name, sub, extra) = match rest {
        ["namespaces", ns, plural, tail @ ..] if lookup(plural).is_some_and(|t| t.namespaced) => (
            lookup(plural),
            Some(ns.to_string()),
            tail.first(),
            tail.get(1),
            tail.get(2),
        ),
        [plural, tail @ ..] => (lookup(plural), None, tail.first(), tail.get(1), tail.get(2)),
        [] => (None, None, None, None, None),
    };
    let rt = rt.ok_or_else(|| ApiError::not_found_path(path))?.clone();
    if extra.is_some() || (!rt.namespaced && namespace.is_some()) {
        return Err(ApiError::not_found_path(path));
    }
    let v = rt.version(version).expect("looked up by version");
    if let Some(s) = sub {
        let served = (*s == "status" && v.status) || (*s == "scale" && v.scale.is_some());
        if !served {
            return Err(ApiError::not_found_path(path));
        }
    }
    Ok(Target {
        version: version.to_string(),
        rt,
        namespace,
        name: name.map(|n| n.to_string()),
        subresource: sub.map(|s| s.to_string()),
    })
}

/// The object as a client of `version` sees it.
pub fn present(t: &Target, mut obj: Value) -> Value {
    obj["apiVersion"] = json!(t.rt.api_version(&t.version));
    obj["kind"] = json!(t.rt.kind);
    obj
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

/// `Accept: ...;as=PartialObjectMetadata...` (kube's metadata API and
/// metadata_watcher).
fn wants_metadata(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("as=PartialObjectMetadata"))
}

fn write_options(params: &Params) -> WriteOptions {
    WriteOptions {
        dry_run: params.get("dryRun").is_some_and(|d| d == "All"),
        strict: params.get("fieldValidation").is_some_and(|v| v == "Strict"),
    }
}

fn parse_json(body: &[u8]) -> ApiResult<Value> {
    // Protobuf bodies (client-go's typed clients) start with this magic.
    if body.starts_with(b"k8s\0") {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            "the API stand-in speaks JSON only; protobuf request bodies are not supported",
        ));
    }
    if body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

async fn resource(
    app: &Arc<App>,
    method: &Method,
    t: Target,
    params: &Params,
    headers: &HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let is_watch = params.get("watch").is_some_and(|w| w == "true" || w == "1");
    let verb = match (method.clone(), t.name.is_some()) {
        (Method::GET, false) if is_watch => Verb::Watch,
        (Method::GET, false) => Verb::List,
        (Method::GET, true) => Verb::Get,
        (Method::POST, false) => Verb::Create,
        (Method::PUT, true) => Verb::Update,
        (Method::PATCH, true) => Verb::Patch,
        (Method::DELETE, _) => Verb::Delete,
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({method})"
            )));
        }
    };
    if verb == Verb::Create && t.rt.namespaced && t.namespace.is_none() {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource: create needs a namespace",
        ));
    }
    if let Some(err) = app
        .faults
        .take(verb, &t.rt.group, &t.rt.plural, t.subresource.as_deref())
    {
        debug!(verb = verb.as_str(), resource = %t.rt.plural, code = err.code, "injecting fault");
        return Err(err);
    }
    let table = wants_table(headers);
    let metadata_only = !table && wants_metadata(headers);
    match verb {
        Verb::Watch => watch::serve(
            app,
            &t,
            params,
            table.then(|| IncludeObject::parse(params.get("includeObject").map(String::as_str))),
            metadata_only,
        ),
        Verb::List => list(app, &t, params, table, metadata_only),
        Verb::Get if metadata_only && t.subresource.is_none() => {
            let obj = current(&app.lock(), &t)?;
            ok(&table::partial(&obj))
        }
        Verb::Get => get(app, &t, table, params),
        Verb::Create => {
            let obj = parse_json(&body)?;
            let created =
                app.lock()
                    .create(&t.rt, &t.version, t.ns(), obj, &write_options(params))?;
            Ok(json_response(StatusCode::CREATED, &present(&t, created)))
        }
        Verb::Update => {
            let obj = parse_json(&body)?;
            update(app, &t, obj, params)
        }
        Verb::Patch => patch(app, &t, params, headers, &body),
        Verb::Delete if t.name.is_some() => delete(app, &t, params, &body),
        Verb::Delete => delete_collection(app, &t, params, &body),
    }
}

fn selected(t: &Target, store: &Store, params: &Params) -> ApiResult<Vec<Value>> {
    let labels = LabelSelector::parse(
        params
            .get("labelSelector")
            .map(String::as_str)
            .unwrap_or(""),
    )?;
    let fields = FieldSelector::parse(
        params
            .get("fieldSelector")
            .map(String::as_str)
            .unwrap_or(""),
    )?;
    Ok(store
        .list(&t.rt.key(), t.namespace.as_deref())
        .filter(|o| labels.matches(o) && fields.matches(o))
        .map(|o| present(t, o.clone()))
        .collect())
}

fn list(
    app: &App,
    t: &Target,
    params: &Params,
    table: bool,
    metadata_only: bool,
) -> ApiResult<Response> {
    let (mut items, rv) = {
        let store = app.lock();
        (selected(t, &store, params)?, store.current_rv())
    };
    let mut cont = None;
    if let Some(after) = params.get("continue").filter(|c| !c.is_empty()) {
        let key = decode_continue(after)
            .ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
        items.retain(|o| continue_key(o) > key);
    }
    if let Some(limit) = params
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        && items.len() > limit
    {
        items.truncate(limit);
        cont = items.last().map(|o| encode_continue(&continue_key(o)));
    }
    if table {
        let include = IncludeObject::parse(params.get("includeObject").map(String::as_str));
        let mut tbl = table::table(&t.rt, &t.version, &items, rv, include);
        if let Some(c) = cont {
            tbl["metadata"]["continue"] = json!(c);
        }
        return ok(&tbl);
    }
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        metadata["continue"] = json!(c);
    }
    if metadata_only {
        let items: Vec<Value> = items.iter().map(table::partial).collect();
        return ok(&json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
            "items": items,
        }));
    }
    ok(&json!({
        "kind": t.rt.list_kind,
        "apiVersion": t.rt.api_version(&t.version),
        "metadata": metadata,
        "items": items,
    }))
}

fn continue_key(o: &Value) -> String {
    format!(
        "{}\u{0}{}",
        o["metadata"]["namespace"].as_str().unwrap_or(""),
        o["metadata"]["name"].as_str().unwrap_or("")
    )
}

fn encode_continue(k: &str) -> String {
    k.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_continue(s: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    String::from_utf8(bytes?).ok()
}

fn current(store: &Store, t: &Target) -> ApiResult<Value> {
    let name = t.name.as_deref().unwrap_or("");
    store
        .get(&t.rt.key(), t.ns(), name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&t.rt.group, &t.rt.plural, name))
}

fn get(app: &App, t: &Target, table: bool, params: &Params) -> ApiResult<Response> {
    let (obj, rv) = {
        let store = app.lock();
        (current(&store, t)?, store.current_rv())
    };
    if t.subresource.as_deref() == Some("scale") {
        return ok(&to_scale(t, &obj));
    }
    let obj = present(t, obj);
    if table {
        let include = IncludeObject::parse(params.get("includeObject").map(String::as_str));
        return ok(&table::table(&t.rt, &t.version, &[obj], rv, include));
    }
    ok(&obj)
}

fn endpoint(t: &Target) -> Endpoint {
    if t.subresource.as_deref() == Some("status") {
        Endpoint::Status
    } else {
        Endpoint::Main
    }
}

fn update(app: &App, t: &Target, obj: Value, params: &Params) -> ApiResult<Response> {
    let name = t.name.as_deref().unwrap_or("");
    let opts = write_options(params);
    let mut store = app.lock();
    let obj = if t.subresource.as_deref() == Some("scale") {
        from_scale(t, &current(&store, t)?, &obj)?
    } else {
        obj
    };
    let updated = store.update(&t.rt, &t.version, (t.ns(), name), obj, endpoint(t), &opts)?;
    if t.subresource.as_deref() == Some("scale") {
        return ok(&to_scale(t, &updated));
    }
    ok(&present(t, updated))
}

fn patch(
    app: &App,
    t: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<Response> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .unwrap_or("");
    let ty = PatchType::from_content_type(ct)?;
    let patch_doc = patch::parse_body(body, ty)?;
    let name = t.name.as_deref().unwrap_or("").to_string();
    let opts = write_options(params);
    let mut store = app.lock();
    let existing = store.get(&t.rt.key(), t.ns(), &name).cloned();
    if ty == PatchType::Apply {
        let manager = params.get("fieldManager").filter(|m| !m.is_empty()).ok_or_else(|| {
            ApiError::new(422, "Invalid", "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch")
        })?;
        let force = params.get("force").is_some_and(|f| f == "true");
        let applied_name = patch_doc["metadata"]["name"].as_str().unwrap_or("");
        if applied_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the applied object ({applied_name}) does not match the name on the URL ({name})"
            )));
        }
        let api_version = t.rt.api_version(&t.version);
        return match existing {
            None if endpoint(t) == Endpoint::Main => {
                let obj = patch::server_side_apply(
                    &json!({"metadata": {}}),
                    &patch_doc,
                    manager,
                    force,
                    &api_version,
                    &now(),
                )?;
                let created = store.create(&t.rt, &t.version, t.ns(), obj, &opts)?;
                Ok(json_response(StatusCode::CREATED, &present(t, created)))
            }
            None => Err(ApiError::not_found(&t.rt.group, &t.rt.plural, &name)),
            Some(live) => {
                let merged = patch::server_side_apply(
                    &present(t, live),
                    &patch_doc,
                    manager,
                    force,
                    &api_version,
                    &now(),
                )?;
                let updated = store.update(
                    &t.rt,
                    &t.version,
                    (t.ns(), &name),
                    merged,
                    endpoint(t),
                    &opts,
                )?;
                ok(&present(t, updated))
            }
        };
    }
    let live = existing.ok_or_else(|| ApiError::not_found(&t.rt.group, &t.rt.plural, &name))?;
    if t.subresource.as_deref() == Some("scale") {
        let scale = patch::apply_patch(&to_scale(t, &live), &patch_doc, ty)?;
        let obj = from_scale(t, &live, &scale)?;
        let updated = store.update(
            &t.rt,
            &t.version,
            (t.ns(), &name),
            obj,
            Endpoint::Main,
            &opts,
        )?;
        return ok(&to_scale(t, &updated));
    }
    let patched = patch::apply_patch(&present(t, live), &patch_doc, ty)?;
    let updated = store.update(
        &t.rt,
        &t.version,
        (t.ns(), &name),
        patched,
        endpoint(t),
        &opts,
    )?;
    ok(&present(t, updated))
}

fn delete_options(params: &Params, body: &[u8]) -> ApiResult<DeleteOptions> {
    let b: Value = if body.is_empty() {
        json!({})
    } else {
        parse_json(body)?
    };
    let policy = b["propagationPolicy"]
        .as_str()
        .map(str::to_string)
        .or_else(|| params.get("propagationPolicy").cloned());
    let propagation = match policy.as_deref() {
        None | Some("Background") => Propagation::Background,
        Some("Foreground") => Propagation::Foreground,
        Some("Orphan") => Propagation::Orphan,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown propagationPolicy {other:?}"
            )));
        }
    };
    let propagation = if b["orphanDependents"].as_bool() == Some(true) {
        Propagation::Orphan
    } else {
        propagation
    };
    let grace_period = b["gracePeriodSeconds"].as_i64().or_else(|| {
        params
            .get("gracePeriodSeconds")
            .and_then(|g| g.parse().ok())
    });
    let dry_run = b["dryRun"]
        .as_array()
        .is_some_and(|d| d.iter().any(|x| x == "All"))
        || params.get("dryRun").is_some_and(|d| d == "All");
    Ok(DeleteOptions {
        propagation,
        grace_period,
        precondition_uid: b["preconditions"]["uid"].as_str().map(str::to_string),
        precondition_rv: b["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
        dry_run,
    })
}

fn delete(app: &App, t: &Target, params: &Params, body: &[u8]) -> ApiResult<Response> {
    if t.subresource.is_some() {
        return Err(ApiError::method_not_allowed(
            "delete is not allowed on a subresource",
        ));
    }
    let opts = delete_options(params, body)?;
    let name = t.name.as_deref().unwrap_or("");
    let obj = app.lock().delete(&t.rt, t.ns(), name, &opts)?;
    ok(&present(t, obj))
}

fn delete_collection(app: &App, t: &Target, params: &Params, body: &[u8]) -> ApiResult<Response> {
    let opts = delete_options(params, body)?;
    let mut store = app.lock();
    let doomed = selected(t, &store, params)?;
    let mut items = Vec::new();
    for o in doomed {
        let ns = o["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
        if let Ok(d) = store.delete(&t.rt, &ns, &name, &opts) {
            items.push(present(t, d));
        }
    }
    ok(&json!({
        "kind": t.rt.list_kind,
        "apiVersion": t.rt.api_version(&t.version),
        "metadata": {"resourceVersion": store.current_rv().to_string()},
        "items": items,
    }))
}

fn scale_spec(t: &Target) -> ApiResult<ScaleSpec> {
    t.rt.version(&t.version)
        .and_then(|v| v.scale.clone())
        .ok_or_else(|| ApiError::not_found_path("scale"))
}

fn to_scale(t: &Target, obj: &Value) -> Value {
    let spec = scale_spec(t).expect("resolve checked the scale subresource");
    let replicas = |path: &str| {
        table::jsonpath(obj, path)
            .and_then(|v| v.as_i64())
            .unwrap_or(0)
    };
    let mut status = json!({"replicas": replicas(&spec.status_replicas_path)});
    if let Some(sel) = spec
        .label_selector_path
        .as_deref()
        .and_then(|p| table::jsonpath(obj, p))
    {
        status["selector"] = match sel {
            Value::String(s) => json!(s),
            other => json!(other.to_string()),
        };
    }
    let md = &obj["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": md["name"], "namespace": md["namespace"], "uid": md["uid"],
            "resourceVersion": md["resourceVersion"], "creationTimestamp": md["creationTimestamp"],
        },
        "spec": {"replicas": replicas(&spec.spec_replicas_path)},
        "status": status,
    })
}

/// Writes a Scale's `spec.replicas` back through `specReplicasPath`.
fn from_scale(t: &Target, live: &Value, scale: &Value) -> ApiResult<Value> {
    let spec = scale_spec(t)?;
    let replicas = scale["spec"]["replicas"].as_i64().ok_or_else(|| {
        ApiError::invalid(
            "Scale",
            "autoscaling",
            t.name.as_deref().unwrap_or(""),
            vec![super::error::FieldError::new(
                "spec.replicas",
                super::error::FieldErrorKind::Required,
                "",
            )],
        )
    })?;
    let mut obj = live.clone();
    let mut cur = &mut obj;
    let segs: Vec<&str> = spec
        .spec_replicas_path
        .trim_start_matches('.')
        .split('.')
        .collect();
    for (i, seg) in segs.iter().enumerate() {
        if i + 1 == segs.len() {
            cur[*seg] = json!(replicas);
        } else {
            if !cur[*seg].is_object() {
                cur[*seg] = json!({});
            }
            cur = &mut cur[*seg];
        }
    }
    if let Some(rv) = scale["metadata"]["resourceVersion"]
        .as_str()
        .filter(|r| !r.is_empty())
    {
        obj["metadata"]["resourceVersion"] = json!(rv);
    }
    Ok(obj)
}

pub fn stream_response(body: Body) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(body)
        .expect("static response parts are valid")
}

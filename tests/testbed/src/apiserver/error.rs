//! Errors as the apiserver reports them: `metav1.Status` bodies whose `code`
//! and `reason` clients (kube-rs, kubectl) branch on.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One failed request, rendered as a `metav1.Status`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let resource = qualified(plural, group);
        Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
            .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    pub fn not_found_path(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let resource = qualified(plural, group);
        Self::new(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let resource = qualified(plural, group);
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 422 with one cause per offending field, as the real apiserver words it.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<FieldError>) -> Self {
        let list: Vec<String> = causes.iter().map(FieldError::to_string).collect();
        let message = if list.len() == 1 {
            format!("{kind}.{group} \"{name}\" is invalid: {}", list[0])
        } else {
            format!(
                "{kind}.{group} \"{name}\" is invalid: [{}]",
                list.join(", ")
            )
        };
        let message = message.replace(&format!("{kind}. \""), &format!("{kind} \""));
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.kind.reason(), "message": c.detail_message(), "field": c.field}))
            .collect();
        Self::new(422, "Invalid", message)
            .with_details(json!({"name": name, "group": group, "kind": kind, "causes": causes}))
    }

    /// Watch history no longer holds the requested version.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

fn qualified(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (code, axum::Json(self.to_status())).into_response();
        if self.code == 429 {
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        response
    }
}

/// What is wrong with one field, in the vocabulary of k8s field errors.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldErrorKind {
    Required,
    Invalid(Value),
    NotSupported(Value, Vec<String>),
    TypeInvalid(Value, String),
    Forbidden,
    TooLong,
    TooMany,
}

impl FieldErrorKind {
    fn reason(&self) -> &'static str {
        match self {
            Self::Required => "FieldValueRequired",
            Self::Invalid(_) => "FieldValueInvalid",
            Self::NotSupported(..) => "FieldValueNotSupported",
            Self::TypeInvalid(..) => "FieldValueTypeInvalid",
            Self::Forbidden => "FieldValueForbidden",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
        }
    }
}

/// One field error: `spec.replicas: Invalid value: 9: must be odd`.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub field: String,
    pub kind: FieldErrorKind,
    pub detail: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, kind: FieldErrorKind, detail: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            kind,
            detail: detail.into(),
        }
    }

    fn detail_message(&self) -> String {
        let head = match &self.kind {
            FieldErrorKind::Required => "Required value".to_string(),
            FieldErrorKind::Invalid(v) => format!("Invalid value: {}", short(v)),
            FieldErrorKind::NotSupported(v, allowed) => {
                let quoted: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
                format!(
                    "Unsupported value: {}: supported values: {}",
                    short(v),
                    quoted.join(", ")
                )
            }
            FieldErrorKind::TypeInvalid(v, _) => format!("Invalid value: {}", short(v)),
            FieldErrorKind::Forbidden => "Forbidden".to_string(),
            FieldErrorKind::TooLong => "Too long".to_string(),
            FieldErrorKind::TooMany => "Too many".to_string(),
        };
        if self.detail.is_empty() || matches!(self.kind, FieldErrorKind::NotSupported(..)) {
            head
        } else {
            format!("{head}: {}", self.detail)
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.detail_message())
    }
}

fn short(v: &Value) -> String {
    match v {
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

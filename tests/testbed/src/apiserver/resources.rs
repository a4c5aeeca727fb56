//! The resource types the stand-in serves: the built-in ones and the ones
//! each CustomResourceDefinition adds. Discovery, routing, validation and
//! tables all read from here.

use serde_json::Value;

use super::error::{ApiError, ApiResult, FieldError, FieldErrorKind};

/// Identity of a resource in storage: versions of one resource share objects.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResKey {
    pub group: String,
    pub plural: String,
}

impl ResKey {
    pub fn new(group: &str, plural: &str) -> Self {
        Self {
            group: group.to_string(),
            plural: plural.to_string(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub json_path: String,
    pub priority: i64,
}

#[derive(Debug, Clone)]
pub struct ScaleSpec {
    pub spec_replicas_path: String,
    pub status_replicas_path: String,
    pub label_selector_path: Option<String>,
}

#[derive(Debug, Clone)]
pub struct VersionInfo {
    pub name: String,
    /// The CRD's `openAPIV3Schema`; built-ins are not schema-checked.
    pub schema: Option<Value>,
    pub printer_columns: Vec<PrinterColumn>,
    pub status: bool,
    pub scale: Option<ScaleSpec>,
}

#[derive(Debug, Clone)]
pub struct ResourceType {
    pub group: String,
    /// Served versions; the first is the preferred one.
    pub versions: Vec<VersionInfo>,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub namespaced: bool,
    /// Defined by a CustomResourceDefinition (validated against its schema).
    pub custom: bool,
}

impl ResourceType {
    pub fn key(&self) -> ResKey {
        ResKey::new(&self.group, &self.plural)
    }

    pub fn version(&self, name: &str) -> Option<&VersionInfo> {
        self.versions.iter().find(|v| v.name == name)
    }

    pub fn preferred(&self) -> &VersionInfo {
        &self.versions[0]
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    pub fn has_status(&self) -> bool {
        self.versions.iter().any(|v| v.status)
    }

    fn builtin(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
        status: bool,
        short: &[&str],
    ) -> Self {
        Self {
            group: group.to_string(),
            versions: vec![VersionInfo {
                name: version.to_string(),
                schema: None,
                printer_columns: Vec::new(),
                status,
                scale: None,
            }],
            kind: kind.to_string(),
            list_kind: format!("{kind}List"),
            plural: plural.to_string(),
            singular: kind.to_lowercase(),
            short_names: short.iter().map(|s| s.to_string()).collect(),
            categories: Vec::new(),
            namespaced,
            custom: false,
        }
    }
}

/// The built-in types this stand-in serves.
pub fn builtins() -> Vec<ResourceType> {
    let b = ResourceType::builtin;
    let mut pods = b("", "v1", "Pod", "pods", true, true, &["po"]);
    pods.categories = vec!["all".into()];
    let mut services = b("", "v1", "Service", "services", true, true, &["svc"]);
    services.categories = vec!["all".into()];
    vec![
        b("", "v1", "Namespace", "namespaces", false, true, &["ns"]),
        pods,
        services,
        b(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
            true,
            &["pvc"],
        ),
        b("", "v1", "Secret", "secrets", true, false, &[]),
        b("", "v1", "ConfigMap", "configmaps", true, false, &["cm"]),
        b("", "v1", "Event", "events", true, false, &["ev"]),
        b(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            true,
            false,
            &["sa"],
        ),
        b("", "v1", "Endpoints", "endpoints", true, false, &["ep"]),
        b(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            true,
            false,
            &["ev"],
        ),
        b(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            true,
            &["pdb"],
        ),
        b(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            true,
            false,
            &[],
        ),
        b(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            true,
            &["crd", "crds"],
        ),
    ]
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str()
}

/// Reads a CRD object into the resource type it defines, or says which
/// field makes it unusable.
pub fn from_crd(crd: &Value) -> ApiResult<ResourceType> {
    let name = str_at(crd, &["metadata", "name"])
        .unwrap_or_default()
        .to_string();
    let invalid = |field: &str, kind: FieldErrorKind, detail: &str| {
        ApiError::invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            &name,
            vec![FieldError::new(field, kind, detail)],
        )
    };
    let spec = crd
        .get("spec")
        .ok_or_else(|| invalid("spec", FieldErrorKind::Required, ""))?;
    let group = str_at(spec, &["group"]).filter(|g| !g.is_empty());
    let group = group.ok_or_else(|| invalid("spec.group", FieldErrorKind::Required, ""))?;
    let plural = str_at(spec, &["names", "plural"]).filter(|g| !g.is_empty());
    let plural =
        plural.ok_or_else(|| invalid("spec.names.plural", FieldErrorKind::Required, ""))?;
    let kind = str_at(spec, &["names", "kind"]).filter(|g| !g.is_empty());
    let kind = kind.ok_or_else(|| invalid("spec.names.kind", FieldErrorKind::Required, ""))?;
    if name != format!("{plural}.{group}") {
        return Err(invalid(
            "metadata.name",
            FieldErrorKind::Invalid(Value::String(name.clone())),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let scope = str_at(spec, &["scope"]).unwrap_or("Namespaced");
    let namespaced = match scope {
        "Namespaced" => true,
        "Cluster" => false,
        other => {
            return Err(invalid(
                "spec.scope",
                FieldErrorKind::NotSupported(
                    Value::String(other.into()),
                    vec!["Cluster".into(), "Namespaced".into()],
                ),
                "",
            ));
        }
    };
    let list = |path: &[&str]| -> Vec<String> {
        let mut cur = spec;
        for p in path {
            match cur.get(p) {
                Some(v) => cur = v,
                None => return Vec::new(),
            }
        }
        cur.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let versions_json = spec
        .get("versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions_json.is_empty() {
        return Err(invalid(
            "spec.versions",
            FieldErrorKind::Required,
            "must have exactly one version marked as storage version",
        ));
    }
    let mut versions = Vec::new();
    let mut storage = None;
    for (i, v) in versions_json.iter().enumerate() {
        let vname = str_at(v, &["name"]).unwrap_or_default().to_string();
        if vname.is_empty() {
            return Err(invalid(
                &format!("spec.versions[{i}].name"),
                FieldErrorKind::Required,
                "",
            ));
        }
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            storage = Some(vname.clone());
        }
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let printer_columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|cols| {
                cols.iter()
                    .map(|c| PrinterColumn {
                        name: str_at(c, &["name"]).unwrap_or_default().to_string(),
                        type_: str_at(c, &["type"]).unwrap_or("string").to_string(),
                        format: str_at(c, &["format"]).unwrap_or_default().to_string(),
                        description: str_at(c, &["description"]).unwrap_or_default().to_string(),
                        json_path: str_at(c, &["jsonPath"]).unwrap_or_default().to_string(),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    })
                    .collect()
            })
            .unwrap_or_else(|| {
                vec![PrinterColumn {
                    name: "Age".into(),
                    type_: "date".into(),
                    format: String::new(),
                    description: String::new(),
                    json_path: ".metadata.creationTimestamp".into(),
                    priority: 0,
                }]
            });
        let sub = v.get("subresources");
        let scale = sub.and_then(|s| s.get("scale")).map(|s| ScaleSpec {
            spec_replicas_path: str_at(s, &["specReplicasPath"])
                .unwrap_or(".spec.replicas")
                .to_string(),
            status_replicas_path: str_at(s, &["statusReplicasPath"])
                .unwrap_or(".status.replicas")
                .to_string(),
            label_selector_path: str_at(s, &["labelSelectorPath"]).map(str::to_string),
        });
        versions.push(VersionInfo {
            name: vname,
            schema: v
                .get("schema")
                .and_then(|s| s.get("openAPIV3Schema"))
                .cloned(),
            printer_columns,
            status: sub.and_then(|s| s.get("status")).is_some(),
            scale,
        });
    }
    if storage.is_none() {
        return Err(invalid(
            "spec.versions",
            FieldErrorKind::Invalid(Value::Null),
            "must have exactly one version marked as storage version",
        ));
    }
    if versions.is_empty() {
        return Err(invalid(
            "spec.versions",
            FieldErrorKind::Invalid(Value::Null),
            "must have at least one served version",
        ));
    }
    Ok(ResourceType {
        group: group.to_string(),
        versions,
        kind: kind.to_string(),
        list_kind: str_at(spec, &["names", "listKind"])
            .map(str::to_string)
            .unwrap_or_else(|| format!("{kind}List")),
        plural: plural.to_string(),
        singular: str_at(spec, &["names", "singular"])
            .map(str::to_string)
            .unwrap_or_else(|| kind.to_lowercase()),
        short_names: list(&["names", "shortNames"]),
        categories: list(&["names", "categories"]),
        namespaced,
        custom: true,
    })
}

//! YAML test cases for status policies, shared by `etcd-steward policy test`
//! (which runs them through a compiled component) and native `cargo test`
//! runners in Rust policy crates (which run them against the plain logic).
//!
//! One file holds many cases:
//!
//! ```yaml
//! cases:
//!   - name: all three voters answer and agree on the leader
//!     settings: {staleAfterSeconds: 30}   # optional mapping; replaces observation.settings
//!     observation: { ... }                # the Observation shape (fields camelCase,
//!                                         # enum and variant cases PascalCase)
//!     expect:
//!       conditions:                       # subset: each listed type must match
//!         - {type: Available, status: True, reason: QuorumHealthy}
//!         - {type: Degraded, status: False, messageContains: "all 3"}
//!       readyMembers: 3                   # optional
//!       verified: true                    # optional
//!   - name: a zero staleness window is refused
//!     settings: {staleAfterSeconds: 0}
//!     observation: { ... }
//!     expect:
//!       settingsRejected: {messageContains: "staleAfterSeconds"}
//! ```
//!
//! Every case runs as the operator runs a reconcile: `validate-settings`
//! with the case's settings first, and `evaluate` only when they are
//! accepted (the operator never evaluates rejected settings; it writes its
//! own PolicyFailed verdict). So a case whose settings are rejected fails
//! unless it expects `settingsRejected`, and such a case expects nothing of
//! a verdict.
//!
//! docs/writing-policies.md documents every field; [`case_file_schema`] is
//! the same format as a JSON Schema.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{ConditionStatus, EventType, Observation, Verdict};

/// One YAML file of cases.
#[derive(Clone, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CaseFile {
    /// Where the cases were read from (not part of the YAML).
    #[serde(skip)]
    pub path: PathBuf,
    /// At least one case.
    pub cases: Vec<Case>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Case {
    /// Unique in its file; `--run REGEX` selects cases by it.
    pub name: String,
    /// The policy settings for this case, written as a YAML mapping. They
    /// replace `observation.settings` when given.
    #[serde(default)]
    pub settings: Option<serde_json::Map<String, serde_json::Value>>,
    /// What the host hands the policy.
    pub observation: Observation,
    /// What the policy must make of it.
    pub expect: Expectation,
}

/// What a verdict must show. Everything is optional; conditions match as a
/// subset (types not listed are not checked).
#[derive(Clone, Debug, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expectation {
    /// Conditions the verdict must hold (types not listed are not checked).
    #[serde(default)]
    pub conditions: Vec<ExpectedCondition>,
    /// The verdict's readyMembers, exactly.
    #[serde(default)]
    pub ready_members: Option<u32>,
    /// Whether the status shows the cluster verified: the host's finding
    /// (`observation.quorum`) is verified and the policy did not decline it.
    #[serde(default)]
    pub verified: Option<bool>,
    /// `null` expects no hint; a number expects exactly that hint.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<u32>")]
    pub requeue_after_ms: Option<Option<u32>>,
    /// Events that must be among the verdict's events (subset, in any order).
    #[serde(default)]
    pub events: Vec<ExpectedEvent>,
    /// The verdict holds no condition and no event beyond those listed
    /// (`events: []` then means none at all).
    #[serde(default)]
    pub exhaustive: bool,
    /// The policy's `validate-settings` must reject the case's settings.
    #[serde(default)]
    pub settings_rejected: Option<ExpectedRejection>,
    /// The operator must reject the policy's verdict, by this check
    /// (`UnconfirmedVerification`, `UnconfirmedAvailability`,
    /// `InvalidVerdict`). Only `etcd-steward policy test` runs the
    /// operator's checks; a native runner fails such a case.
    #[serde(default)]
    pub rejected: Option<ExpectedVerdictRejection>,
}

#[derive(Clone, Debug, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExpectedVerdictRejection {
    /// The check that rejects the verdict, e.g. `UnconfirmedAvailability`.
    pub reason: String,
    /// A part of the operator's message. Without it, any message.
    #[serde(default)]
    pub message_contains: Option<String>,
}

impl Expectation {
    /// Whether anything of a verdict is expected.
    fn expects_a_verdict(&self) -> bool {
        !self.conditions.is_empty()
            || self.ready_members.is_some()
            || self.verified.is_some()
            || self.requeue_after_ms.is_some()
            || !self.events.is_empty()
            || self.exhaustive
            || self.rejected.is_some()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExpectedRejection {
    /// validate-settings' whole message, exactly.
    #[serde(default)]
    pub message: Option<String>,
    /// A part of validate-settings' message. With neither, any message.
    #[serde(default)]
    pub message_contains: Option<String>,
}

/// What a policy made of one case, run as the operator runs it.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// `validate-settings` rejected the settings with this message, so
    /// `evaluate` was not called.
    SettingsRejected(String),
    /// The settings were accepted and `evaluate` returned this verdict;
    /// `verified` is what the status shows of verification (the host's
    /// finding, unless the verdict declined it).
    Evaluated { verdict: Verdict, verified: bool },
    /// The operator rejected the verdict (`reason` names the check) and
    /// wrote its own fallback instead.
    Rejected { reason: String, message: String },
}

impl Outcome {
    /// Runs a case: `validate` on the settings text, then `evaluate` only
    /// if they are accepted.
    pub fn of(
        case: &Case,
        validate: impl FnOnce(&str) -> Result<(), String>,
        evaluate: impl FnOnce(&Observation) -> Verdict,
    ) -> Self {
        let observation = case.observation();
        match validate(&observation.settings) {
            Err(message) => Outcome::SettingsRejected(message),
            Ok(()) => {
                let verdict = evaluate(&observation);
                let verified =
                    observation.quorum.is_verified() && verdict.decline_verification.is_none();
                Outcome::Evaluated { verdict, verified }
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExpectedCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    #[serde(default)]
    pub reason: Option<String>,
    /// The whole message, exactly.
    #[serde(default)]
    pub message: Option<String>,
    /// A part of the message.
    #[serde(default)]
    pub message_contains: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExpectedEvent {
    #[serde(rename = "type")]
    pub type_: EventType,
    pub reason: String,
    /// The whole message, exactly.
    #[serde(default)]
    pub message: Option<String>,
    /// A part of the message.
    #[serde(default)]
    pub message_contains: Option<String>,
}

/// Distinguishes a field set to `null` (Some(None)) from an absent one (None).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

impl Case {
    /// The observation the policy is given, with this case's settings applied.
    pub fn observation(&self) -> Observation {
        let mut observation = self.observation.clone();
        if let Some(settings) = &self.settings {
            observation.settings = serde_json::Value::Object(settings.clone()).to_string();
        }
        observation
    }
}

/// One way a verdict differs from its expectation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// What was checked: "Available.status", "readyMembers", ...
    pub field: String,
    pub expected: String,
    pub actual: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: expected {}, got {}",
            self.field, self.expected, self.actual
        )
    }
}

fn mismatch(field: String, expected: impl fmt::Display, actual: impl fmt::Display) -> Mismatch {
    Mismatch {
        field,
        expected: expected.to_string(),
        actual: actual.to_string(),
    }
}

/// Compares what a policy made of a case with its expectation; empty means
/// the case passed.
pub fn check_outcome(expect: &Expectation, outcome: &Outcome) -> Vec<Mismatch> {
    match (&expect.settings_rejected, &expect.rejected, outcome) {
        (Some(want), _, Outcome::SettingsRejected(message)) => {
            let mut out = Vec::new();
            if let Some(whole) = &want.message
                && message != whole
            {
                out.push(mismatch(
                    "settingsRejected.message".into(),
                    format_args!("{whole:?}"),
                    format_args!("{message:?}"),
                ));
            }
            if let Some(part) = &want.message_contains
                && !message.contains(part.as_str())
            {
                out.push(mismatch(
                    "settingsRejected.message".into(),
                    format_args!("to contain {part:?}"),
                    format_args!("{message:?}"),
                ));
            }
            out
        }
        (Some(_), _, _) => vec![mismatch(
            "settingsRejected".into(),
            "validate-settings to reject the settings",
            "accepted",
        )],
        (None, _, Outcome::SettingsRejected(message)) => vec![mismatch(
            "settings".into(),
            "accepted by validate-settings (the operator does not evaluate rejected settings; \
             expect settingsRejected if this is the point of the case)",
            format_args!("rejected: {message:?}"),
        )],
        (None, Some(want), Outcome::Rejected { reason, message }) => {
            let mut out = Vec::new();
            if &want.reason != reason {
                out.push(mismatch(
                    "rejected.reason".into(),
                    &want.reason,
                    format_args!("{reason} ({message:?})"),
                ));
            }
            if let Some(part) = &want.message_contains
                && !message.contains(part.as_str())
            {
                out.push(mismatch(
                    "rejected.message".into(),
                    format_args!("to contain {part:?}"),
                    format_args!("{message:?}"),
                ));
            }
            out
        }
        (None, Some(want), Outcome::Evaluated { .. }) => vec![mismatch(
            "rejected".into(),
            format_args!("the operator to reject the verdict ({})", want.reason),
            "accepted",
        )],
        (None, None, Outcome::Rejected { reason, message }) => vec![mismatch(
            "verdict".into(),
            "accepted by the operator (expect rejected if this is the point of the case)",
            format_args!("rejected ({reason}): {message}"),
        )],
        (None, None, Outcome::Evaluated { verdict, verified }) => check(expect, verdict, *verified),
    }
}

/// Compares a verdict, and whether the status shows the cluster verified,
/// with an expectation's verdict fields; empty means they match.
/// [`check_outcome`] is the whole check of a case.
pub fn check(expect: &Expectation, verdict: &Verdict, verified: bool) -> Vec<Mismatch> {
    let mut out = Vec::new();
    for want in &expect.conditions {
        let Some(got) = verdict.condition(&want.type_) else {
            let present: Vec<&str> = verdict
                .conditions
                .iter()
                .map(|c| c.type_.as_str())
                .collect();
            out.push(mismatch(
                want.type_.clone(),
                "a condition of this type",
                format_args!("none (conditions: {})", present.join(", ")),
            ));
            continue;
        };
        // The reason and message help explain a wrong status, so show them.
        if got.status != want.status {
            out.push(mismatch(
                format!("{}.status", want.type_),
                want.status,
                format_args!("{} ({}: {:?})", got.status, got.reason, got.message),
            ));
        }
        if let Some(reason) = &want.reason
            && &got.reason != reason
        {
            out.push(mismatch(
                format!("{}.reason", want.type_),
                reason,
                format_args!("{} ({:?})", got.reason, got.message),
            ));
        }
        if let Some(whole) = &want.message
            && &got.message != whole
        {
            out.push(mismatch(
                format!("{}.message", want.type_),
                format_args!("{whole:?}"),
                format_args!("{:?}", got.message),
            ));
        }
        if let Some(part) = &want.message_contains
            && !got.message.contains(part.as_str())
        {
            out.push(mismatch(
                format!("{}.message", want.type_),
                format_args!("to contain {part:?}"),
                format_args!("{:?}", got.message),
            ));
        }
    }
    if let Some(ready) = expect.ready_members
        && ready != verdict.ready_members
    {
        out.push(mismatch(
            "readyMembers".into(),
            ready,
            verdict.ready_members,
        ));
    }
    if let Some(want) = expect.verified
        && want != verified
    {
        let shown = match &verdict.decline_verification {
            Some(why) => format!("{verified} (the policy declined: {why})"),
            None => verified.to_string(),
        };
        out.push(mismatch("verified".into(), want, shown));
    }
    if let Some(requeue) = expect.requeue_after_ms
        && requeue != verdict.requeue_after_ms
    {
        let show = |v: Option<u32>| v.map_or("no hint".to_owned(), |ms| format!("{ms} ms"));
        out.push(mismatch(
            "requeueAfterMs".into(),
            show(requeue),
            show(verdict.requeue_after_ms),
        ));
    }
    for want in &expect.events {
        let found = verdict.events.iter().any(|e| {
            e.type_ == want.type_
                && e.reason == want.reason
                && want
                    .message
                    .as_ref()
                    .is_none_or(|whole| &e.message == whole)
                && want
                    .message_contains
                    .as_ref()
                    .is_none_or(|part| e.message.contains(part.as_str()))
        });
        if !found {
            let got: Vec<String> = verdict
                .events
                .iter()
                .map(|e| format!("{:?} {}: {:?}", e.type_, e.reason, e.message))
                .collect();
            out.push(mismatch(
                "events".into(),
                format_args!(
                    "a {:?} event {}{}{}",
                    want.type_,
                    want.reason,
                    want.message
                        .as_ref()
                        .map_or(String::new(), |m| format!(" saying {m:?}")),
                    want.message_contains
                        .as_ref()
                        .map_or(String::new(), |p| format!(" containing {p:?}"))
                ),
                if got.is_empty() {
                    "no events".to_owned()
                } else {
                    got.join("; ")
                },
            ));
        }
    }
    if expect.exhaustive {
        for c in &verdict.conditions {
            if !expect.conditions.iter().any(|w| w.type_ == c.type_) {
                out.push(mismatch(
                    "conditions".into(),
                    "only the listed types (exhaustive)",
                    format_args!("also {} {} ({})", c.type_, c.status, c.reason),
                ));
            }
        }
        for e in &verdict.events {
            if !expect
                .events
                .iter()
                .any(|w| w.type_ == e.type_ && w.reason == e.reason)
            {
                out.push(mismatch(
                    "events".into(),
                    "only the listed events (exhaustive)",
                    format_args!("also a {:?} event {}: {:?}", e.type_, e.reason, e.message),
                ));
            }
        }
    }
    out
}

/// Why a case file (or observation file) could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CaseFileError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The YAML does not parse, or does not fit the format.
    #[error("{}:{line}:{column}: {}{message}", path.display(), field_prefix(field))]
    Parse {
        path: PathBuf,
        /// 1-based; 0 when the parser gave no position.
        line: u64,
        column: u64,
        /// The field path, like `cases[2].observation.probing`; empty at the top.
        field: String,
        message: String,
    },
    /// The YAML parses but the file makes no sense (no cases, duplicate names).
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() || field == "." {
        String::new()
    } else {
        format!("{field}: ")
    }
}

/// Parses YAML text as `T`, locating any error by line, column and field path.
fn parse_yaml<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T, CaseFileError> {
    let mut field = String::new();
    let result = serde_saphyr::with_deserializer_from_str(text, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            field = e.path().to_string();
            e.into_inner()
        })
    });
    result.map_err(|error| {
        let (line, column) = error.location().map_or((0, 0), |l| (l.line(), l.column()));
        CaseFileError::Parse {
            path: path.to_owned(),
            line,
            column,
            field,
            message: bare_message(&error),
        }
    })
}

/// The error text without serde-saphyr's own position suffix and snippet,
/// since [`CaseFileError`] states the position in the usual `file:line:col` form.
fn bare_message(error: &serde_saphyr::Error) -> String {
    let rendered = error
        .render_with_options(serde_saphyr::render_options! {
            snippets: serde_saphyr::SnippetMode::Off,
        })
        .to_string();
    let first = rendered.lines().next().unwrap_or_default();
    match first.rfind(" at line ") {
        Some(at) => first[..at].to_owned(),
        None => first.to_owned(),
    }
}

fn read(path: &Path) -> Result<String, CaseFileError> {
    std::fs::read_to_string(path).map_err(|source| CaseFileError::Io {
        path: path.to_owned(),
        source,
    })
}

/// The JSON Schema of a case file, for editors and CI (`etcd-steward policy
/// schema`). It states the shape; [`load_case_file`] also checks what a
/// schema cannot (unique names, expectations that go together).
pub fn case_file_schema() -> serde_json::Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(CaseFile))
        .expect("a JSON Schema always serializes");
    if let Some(object) = schema.as_object_mut() {
        object.insert(
            "$id".into(),
            "https://etcd.steward.dev/schemas/policy-cases-v1alpha1.json".into(),
        );
        object.insert(
            "title".into(),
            "etcd-steward policy test cases (steward:status@0.4.0)".into(),
        );
    }
    schema
}

/// Reads one case file.
pub fn load_case_file(path: impl AsRef<Path>) -> Result<CaseFile, CaseFileError> {
    let path = path.as_ref();
    let mut file: CaseFile = parse_yaml(path, &read(path)?)?;
    file.path = path.to_owned();
    let invalid = |message: String| CaseFileError::Invalid {
        path: path.to_owned(),
        message,
    };
    if file.cases.is_empty() {
        return Err(invalid("the file holds no cases".into()));
    }
    for (i, case) in file.cases.iter().enumerate() {
        if case.name.trim().is_empty() {
            return Err(invalid(format!("cases[{i}] has an empty name")));
        }
        if file.cases[..i].iter().any(|c| c.name == case.name) {
            return Err(invalid(format!(
                "cases[{i}]: the name {:?} is used twice",
                case.name
            )));
        }
        if case.expect.settings_rejected.is_some() && case.expect.expects_a_verdict() {
            return Err(invalid(format!(
                "cases[{i}] ({:?}): expect.settingsRejected cannot be combined with verdict \
                 expectations (conditions, readyMembers, verified, requeueAfterMs, events, \
                 exhaustive): rejected settings are never evaluated",
                case.name
            )));
        }
    }
    Ok(file)
}

/// Reads one observation (the `Observation` shape) from a YAML file, as used
/// by `policy eval --input` and by benchmarks.
pub fn load_observation(path: impl AsRef<Path>) -> Result<Observation, CaseFileError> {
    let path = path.as_ref();
    parse_yaml(path, &read(path)?)
}

/// Reads case files; a directory stands for its `*.yaml` and `*.yml` files
/// (not its subdirectories), in name order.
pub fn load_cases(paths: &[PathBuf]) -> Result<Vec<CaseFile>, CaseFileError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let io = |source| CaseFileError::Io {
                path: path.clone(),
                source,
            };
            let mut entries = Vec::new();
            for entry in std::fs::read_dir(path).map_err(io)? {
                let entry = entry.map_err(io)?.path();
                let yaml = entry.extension().is_some_and(|e| e == "yaml" || e == "yml");
                if yaml && entry.is_file() {
                    entries.push(entry);
                }
            }
            if entries.is_empty() {
                return Err(CaseFileError::Invalid {
                    path: path.clone(),
                    message: "the directory holds no *.yaml or *.yml files".into(),
                });
            }
            entries.sort();
            for entry in entries {
                files.push(load_case_file(entry)?);
            }
        } else {
            files.push(load_case_file(path)?);
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests;

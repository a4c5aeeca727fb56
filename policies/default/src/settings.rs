//! The default policy's settings: `spec.statusPolicy.settings` of an EtcdCluster.

use serde::{Deserialize, Serialize};

/// Tunables of the default policy. Every field has a default, so `{}` is valid.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Settings {
    /// How long a verdict etcd verified may be kept while the host cannot probe at all.
    pub stale_after_seconds: u32,
    /// A learner whose raft index trails the leader's by more than this is lagging.
    pub learner_max_lag_entries: u64,
    /// A member whose db size reaches this share of the backend quota is near the quota.
    pub db_size_warn_ratio: f64,
    /// Requeue hint while the cluster is not verified (0: no hint, the host's default applies).
    pub unverified_requeue_seconds: u32,
    /// A backup is overdue once more than this many intervals of the
    /// cluster's schedule have passed without one.
    pub backup_overdue_intervals: f64,
    /// A spec.tls certificate that expires within this many days makes
    /// the cluster Degraded.
    pub certificate_expiry_warning_days: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            stale_after_seconds: 30,
            learner_max_lag_entries: 1000,
            db_size_warn_ratio: 0.8,
            unverified_requeue_seconds: 5,
            backup_overdue_intervals: 2.0,
            certificate_expiry_warning_days: 14,
        }
    }
}

/// The longest staleness window accepted: a day. Longer would hide an outage.
const MAX_STALE_AFTER_SECONDS: u32 = 86_400;
const MAX_REQUEUE_SECONDS: u32 = 3_600;
/// The largest backupOverdueIntervals accepted. The smallest is just above
/// 1: at exactly one interval, a run that takes a little longer than the
/// one before would read as overdue at every slot.
const MAX_BACKUP_OVERDUE_INTERVALS: f64 = 1000.0;
/// A year and a half: past a renewal cycle of any issuer.
const MAX_CERTIFICATE_EXPIRY_WARNING_DAYS: u32 = 550;

/// JSON Schema of [`Settings`], as `describe()` publishes it.
pub const SCHEMA: &str = r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"steward-default-policy settings","type":"object","additionalProperties":false,"properties":{"staleAfterSeconds":{"type":"integer","minimum":1,"maximum":86400,"default":30,"description":"How long a verdict etcd verified is kept while the host cannot probe at all; then Available=Unknown (StatusStale)."},"learnerMaxLagEntries":{"type":"integer","minimum":0,"default":1000,"description":"A learner whose raft index trails the leader's by more than this makes the cluster Degraded."},"dbSizeWarnRatio":{"type":"number","exclusiveMinimum":0,"maximum":1,"default":0.8,"description":"Share of quotaBackendBytes (default 2 GiB) at which a member's db size makes the cluster Degraded."},"unverifiedRequeueSeconds":{"type":"integer","minimum":0,"maximum":3600,"default":5,"description":"Requeue hint while etcd has not verified the cluster; 0 leaves the host's default."},"backupOverdueIntervals":{"type":"number","exclusiveMinimum":1,"maximum":1000,"default":2.0,"description":"Degraded=True (BackupOverdue) once more than this many intervals of the cluster's most frequent active EtcdBackupSchedule passed without a verified snapshot."},"certificateExpiryWarningDays":{"type":"integer","minimum":1,"maximum":550,"default":14,"description":"Degraded=True (CertificateExpiringSoon) once a certificate of the spec.tls Secrets expires within this many days."}}}"#;

impl Settings {
    /// Parses settings JSON text and checks ranges; the error is shown to users as is.
    pub fn parse(json: &str) -> Result<Self, String> {
        let text = if json.trim().is_empty() { "{}" } else { json };
        // serde would also read a struct from a JSON array; settings are an object.
        if !text.trim_start().starts_with('{') {
            return Err("invalid settings: expected a JSON object".to_owned());
        }
        let mut de = serde_json::Deserializer::from_str(text);
        let settings: Settings =
            serde_path_to_error::deserialize(&mut de).map_err(|e| {
                match e.path().to_string().as_str() {
                    "." => format!("invalid settings: {}", e.inner()),
                    path => format!("invalid settings: {path}: {}", e.inner()),
                }
            })?;
        de.end().map_err(|e| format!("invalid settings: {e}"))?;
        settings.validate()?;
        Ok(settings)
    }

    /// Checks the ranges the schema states.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_STALE_AFTER_SECONDS).contains(&self.stale_after_seconds) {
            return Err(format!(
                "invalid settings: staleAfterSeconds must be between 1 and {MAX_STALE_AFTER_SECONDS}, got {}",
                self.stale_after_seconds
            ));
        }
        if !(self.db_size_warn_ratio > 0.0 && self.db_size_warn_ratio <= 1.0) {
            return Err(format!(
                "invalid settings: dbSizeWarnRatio must be greater than 0 and at most 1, got {}",
                self.db_size_warn_ratio
            ));
        }
        if self.unverified_requeue_seconds > MAX_REQUEUE_SECONDS {
            return Err(format!(
                "invalid settings: unverifiedRequeueSeconds must be at most {MAX_REQUEUE_SECONDS}, got {}",
                self.unverified_requeue_seconds
            ));
        }
        if !(self.backup_overdue_intervals > 1.0
            && self.backup_overdue_intervals <= MAX_BACKUP_OVERDUE_INTERVALS)
        {
            return Err(format!(
                "invalid settings: backupOverdueIntervals must be greater than 1 and at most {MAX_BACKUP_OVERDUE_INTERVALS}, got {}",
                self.backup_overdue_intervals
            ));
        }
        if !(1..=MAX_CERTIFICATE_EXPIRY_WARNING_DAYS)
            .contains(&self.certificate_expiry_warning_days)
        {
            return Err(format!(
                "invalid settings: certificateExpiryWarningDays must be between 1 and {MAX_CERTIFICATE_EXPIRY_WARNING_DAYS}, got {}",
                self.certificate_expiry_warning_days
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_object_and_empty_text_give_defaults() {
        assert_eq!(Settings::parse("{}").unwrap(), Settings::default());
        assert_eq!(Settings::parse("").unwrap(), Settings::default());
    }

    #[test]
    fn camel_case_fields_are_read() {
        let s = Settings::parse(r#"{"staleAfterSeconds": 90, "dbSizeWarnRatio": 0.5}"#).unwrap();
        assert_eq!(s.stale_after_seconds, 90);
        assert_eq!(s.db_size_warn_ratio, 0.5);
        assert_eq!(s.learner_max_lag_entries, 1000);
    }

    #[test]
    fn unknown_field_is_named() {
        let err = Settings::parse(r#"{"staleAfter": 90}"#).unwrap_err();
        assert!(err.contains("unknown field `staleAfter`"), "{err}");
        assert!(
            err.contains("staleAfterSeconds"),
            "lists the known fields: {err}"
        );
    }

    #[test]
    fn out_of_range_values_are_named() {
        let err = Settings::parse(r#"{"staleAfterSeconds": 0}"#).unwrap_err();
        assert!(
            err.contains("staleAfterSeconds must be between 1 and 86400, got 0"),
            "{err}"
        );
        let err = Settings::parse(r#"{"dbSizeWarnRatio": 1.5}"#).unwrap_err();
        assert!(err.contains("dbSizeWarnRatio"), "{err}");
        let err = Settings::parse(r#"{"unverifiedRequeueSeconds": 7200}"#).unwrap_err();
        assert!(err.contains("unverifiedRequeueSeconds"), "{err}");
        for bad in ["1", "0.5", "1001"] {
            let err =
                Settings::parse(&format!(r#"{{"backupOverdueIntervals": {bad}}}"#)).unwrap_err();
            assert_eq!(
                err,
                format!(
                    "invalid settings: backupOverdueIntervals must be greater than 1 and at most 1000, got {bad}"
                )
            );
        }
        let s = Settings::parse(r#"{"backupOverdueIntervals": 1.5}"#).unwrap();
        assert_eq!(s.backup_overdue_intervals, 1.5);
    }

    #[test]
    fn wrong_type_is_named() {
        let err = Settings::parse(r#"{"staleAfterSeconds": "30s"}"#).unwrap_err();
        assert!(
            err.starts_with("invalid settings: staleAfterSeconds: invalid type"),
            "{err}"
        );
        let err = Settings::parse(r#"{"staleAfterSeconds": -1}"#).unwrap_err();
        assert!(
            err.starts_with("invalid settings: staleAfterSeconds: invalid value"),
            "{err}"
        );
        let err = Settings::parse("[1]").unwrap_err();
        assert_eq!(err, "invalid settings: expected a JSON object");
        let err = Settings::parse("{} x").unwrap_err();
        assert!(err.contains("trailing characters"), "{err}");
    }

    #[test]
    fn schema_is_json_and_lists_every_field() {
        let schema: serde_json::Value = serde_json::from_str(SCHEMA).unwrap();
        let props = schema["properties"].as_object().unwrap();
        let defaults = serde_json::to_value(Settings::default()).unwrap();
        for key in defaults.as_object().unwrap().keys() {
            assert!(props.contains_key(key), "schema lacks {key}");
            assert_eq!(props[key]["default"], defaults[key], "default of {key}");
        }
        assert_eq!(props.len(), defaults.as_object().unwrap().len());
    }
}

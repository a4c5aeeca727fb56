//! What the spec pins, and what runs now: the key a load runs under is
//! made here, so every phase names a version the same way. What it
//! guarantees:
//! - a version is reused as it is only when it runs under that very key
//!   (same digest, limits, source and version of the source), or when the
//!   source was read at that very version since and found drifted;
//! - while the pin and the source stay the same, the version that runs
//!   keeps running when the source comes to hold other bytes, or none: its
//!   own bytes are the pinned ones. Nothing else is ever kept running, and
//!   what the source holds instead is never run.

use std::time::Duration;

use crate::api::EtcdStatusPolicy;
use crate::policy::Limits;
use crate::policy::catalog::{Drift, Entry, LoadKey, SourceHolds};

/// The digest and limits the spec asks for, and the catalog's entry as the
/// load found it.
pub struct Pinned {
    /// `sha256:<hex>`, as spec.digest writes it.
    pub digest: String,
    /// The spec's limits, the operator's defaults for the rest.
    pub limits: Limits,
    previous: Option<Entry>,
}

impl Pinned {
    pub fn new(policy: &EtcdStatusPolicy, defaults: &Limits, previous: Option<Entry>) -> Self {
        Self {
            digest: policy.spec.digest.clone(),
            limits: limits_of(policy, defaults),
            previous,
        }
    }

    /// The key of this pin's version from `source`, as read at `version`
    /// (empty for a source whose content the pin names).
    pub fn key(&self, source: String, version: &str) -> LoadKey {
        LoadKey {
            digest: self.digest.clone(),
            limits: self.limits.clone(),
            source,
            version: version.to_owned(),
        }
    }

    /// The entry that runs under `key`, if one does, or that found the
    /// source at `key` drifted already. The pin names the content: what
    /// runs under this very key was checked against it and needs no second
    /// download or compile. A failure is never returned, so it is never
    /// reused: the next reconcile tries again, and a fixed Secret or a
    /// re-pushed tag is picked up.
    pub fn running(&self, key: &LoadKey) -> Option<Entry> {
        match &self.previous {
            Some(
                entry @ Entry::Running {
                    key: old, drift, ..
                },
            ) if old == key || drift.as_ref().is_some_and(|d| &d.seen == key) => {
                Some(entry.clone())
            }
            _ => None,
        }
    }

    /// The version that runs under this pin from this source, kept running
    /// although the source, read as `seen`, holds something else.
    pub fn keep_running(&self, seen: &LoadKey, holds: SourceHolds) -> Option<Entry> {
        match &self.previous {
            Some(Entry::Running { key, policy, .. }) if key.same_pin(seen) => {
                Some(Entry::Running {
                    key: key.clone(),
                    policy: policy.clone(),
                    drift: Some(Drift {
                        seen: seen.clone(),
                        holds,
                    }),
                })
            }
            _ => None,
        }
    }

    /// The version that runs under this pin from this source, found again
    /// at another version of the source with its very bytes (checked by the
    /// caller): it runs on under `key`, without a compile.
    pub fn found_again(&self, key: &LoadKey) -> Option<Entry> {
        match &self.previous {
            Some(Entry::Running {
                key: old, policy, ..
            }) if old.same_pin(key) => Some(Entry::Running {
                key: key.clone(),
                policy: policy.clone(),
                drift: None,
            }),
            _ => None,
        }
    }
}

/// The limits in force: the spec's, the operator's defaults for the rest.
/// `policy test` and `policy eval` apply a manifest's limits with it too.
pub(crate) fn limits_of(policy: &EtcdStatusPolicy, defaults: &Limits) -> Limits {
    let spec = &policy.spec.limits;
    Limits {
        // The schema's minimums keep these positive.
        deadline: spec.deadline_milliseconds.map_or(defaults.deadline, |ms| {
            Duration::from_millis(ms.max(1) as u64)
        }),
        memory_bytes: spec
            .memory_bytes
            .map_or(defaults.memory_bytes, |b| b.max(0) as usize),
        component_bytes: spec
            .component_bytes
            .map_or(defaults.component_bytes, |b| b.max(0) as usize),
        instances: spec
            .instances
            .map_or(defaults.instances, |n| n.max(1) as u32),
    }
}

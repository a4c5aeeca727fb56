//! raft-lag: an example status policy written with the Rust SDK.
//!
//! It judges a cluster by its raft log rather than by its Pods:
//! - `Available` when the host verified a quorum (`observation.quorum`: a
//!   linearizable read went through raft); the leader is the one the host
//!   names.
//! - `RaftInSync` when every member that answered has applied the log to
//!   within `maxLagEntries` of the leader's index; False names who trails
//!   and by how much.
//! - `Degraded` when a member does not answer or trails the leader.
//!
//! A member that trails is not counted ready, the host is asked to look
//! again after `requeueSeconds` while one does, and a Warning Event marks
//! the moment the cluster falls out of sync (not every reconcile after: the
//! policy reads its previous verdict from `history.previousConditions`).

use serde::Deserialize;
use steward_policy_sdk::{
    Condition, ConditionStatus, EndpointStatus, Event, EventType, Observation, PolicyInfo,
    ProbeOutcome, Probing, QuorumFinding, UnverifiedKind, Verdict,
};

const IN_SYNC: &str = "RaftInSync";

/// `spec.statusPolicy.settings` of a cluster that runs this policy.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Settings {
    /// Raft entries a member may trail the leader's index by and still be in sync.
    pub max_lag_entries: u64,
    /// How soon to look again while a member trails (0: the host's default).
    pub requeue_seconds: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_lag_entries: 1000,
            requeue_seconds: 5,
        }
    }
}

const SCHEMA: &str = r#"{"type":"object","additionalProperties":false,"properties":{"maxLagEntries":{"type":"integer","minimum":0,"default":1000,"description":"Raft entries a member may trail the leader's index by and still be in sync."},"requeueSeconds":{"type":"integer","minimum":0,"maximum":3600,"default":5,"description":"How soon to look again while a member trails; 0 leaves the host's default."}}}"#;

impl Settings {
    pub fn parse(json: &str) -> Result<Self, String> {
        let settings: Settings =
            serde_json::from_str(json).map_err(|e| format!("settings: {e}"))?;
        if settings.requeue_seconds > 3600 {
            return Err(format!(
                "settings: requeueSeconds must be at most 3600, got {}",
                settings.requeue_seconds
            ));
        }
        Ok(settings)
    }
}

pub fn describe() -> PolicyInfo {
    PolicyInfo {
        name: "raft-lag".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        condition_types: vec!["Available".into(), "Degraded".into(), IN_SYNC.into()],
        settings_schema: SCHEMA.into(),
    }
}

/// The verdict on one observation, with settings already checked.
pub fn evaluate(o: &Observation, settings: &Settings) -> Verdict {
    if o.spec.desired_replicas == 0 || o.phase == steward_policy_sdk::HostPhase::Paused {
        let paused =
            |t: &str| Condition::new(t, ConditionStatus::False, "Paused", "spec.replicas is 0");
        return verdict(
            vec![paused("Available"), paused("Degraded"), paused(IN_SYNC)],
            0,
        );
    }
    let report = match &o.probing {
        Probing::Attempted(report) => report,
        Probing::Skipped(why) => {
            let unknown = |t: &str| {
                Condition::new(
                    t,
                    ConditionStatus::Unknown,
                    "NotProbed",
                    format!("etcd was not probed: {why}"),
                )
            };
            return verdict(
                vec![unknown("Available"), unknown("Degraded"), unknown(IN_SYNC)],
                0,
            );
        }
    };
    let answered: Vec<(&str, &EndpointStatus)> = report
        .endpoints
        .iter()
        .filter_map(|p| match &p.outcome {
            ProbeOutcome::Answered(s) => Some((p.member.as_str(), s)),
            ProbeOutcome::Failed(_) => None,
        })
        .collect();
    let silent: Vec<&str> = o
        .members
        .iter()
        .map(|m| m.name.as_str())
        .filter(|name| !answered.iter().any(|(a, _)| a == name))
        .collect();

    // Whether a quorum exists is the host's finding, handed over whole.
    let (available, leader) = match &o.quorum {
        QuorumFinding::Verified(q) => (
            Condition::new(
                "Available",
                ConditionStatus::True,
                "QuorumHealthy",
                match q.leader {
                    Some(id) => format!(
                        "a linearizable read went through raft; {} of {} voting members agree on leader {id:x}",
                        q.agreeing.len(),
                        q.voters.len()
                    ),
                    None => "a linearizable read went through raft".to_owned(),
                },
            ),
            q.leader,
        ),
        QuorumFinding::Unverified(u) => (
            Condition::new(
                "Available",
                ConditionStatus::False,
                if u.kind == UnverifiedKind::Unreachable {
                    "ClusterUnreachable"
                } else {
                    "QuorumLost"
                },
                u.message.clone(),
            ),
            None,
        ),
    };

    // Lag is measured against the leader's own index: only a leader that
    // answered can say how far the log has come.
    let leader_index = leader.and_then(|id| {
        answered
            .iter()
            .find(|(_, s)| s.member_id == id)
            .map(|(_, s)| s.raft_index)
    });
    let lagging: Vec<(&str, u64)> = match leader_index {
        Some(index) => answered
            .iter()
            .map(|(name, s)| (*name, index.saturating_sub(s.raft_applied_index)))
            .filter(|(_, lag)| *lag > settings.max_lag_entries)
            .collect(),
        None => Vec::new(),
    };
    let in_sync = match leader_index {
        None => Condition::new(
            IN_SYNC,
            ConditionStatus::Unknown,
            "NoLeader",
            "no leader answered to measure lag against",
        ),
        Some(_) if lagging.is_empty() => Condition::new(
            IN_SYNC,
            ConditionStatus::True,
            "InSync",
            format!(
                "every member that answered is within {} entries of the leader",
                settings.max_lag_entries
            ),
        ),
        Some(index) => Condition::new(
            IN_SYNC,
            ConditionStatus::False,
            "RaftLagging",
            lag_message(&lagging, index, settings),
        ),
    };
    let degraded = if !silent.is_empty() {
        Condition::new(
            "Degraded",
            ConditionStatus::True,
            "MembersUnreachable",
            format!("not answering: {}", silent.join(", ")),
        )
    } else if !lagging.is_empty() {
        Condition::new(
            "Degraded",
            ConditionStatus::True,
            "RaftLagging",
            lag_message(&lagging, leader_index.unwrap_or(0), settings),
        )
    } else {
        Condition::new(
            "Degraded",
            ConditionStatus::False,
            "InSync",
            "every member answers and keeps up with the leader",
        )
    };

    let ready = o
        .members
        .iter()
        .filter(|m| m.pod_ready)
        .filter(|m| answered.iter().any(|(a, _)| *a == m.name))
        .filter(|m| !lagging.iter().any(|(l, _)| *l == m.name))
        .count() as u32;
    let was_in_sync = o
        .history
        .previous_conditions
        .iter()
        .any(|c| c.type_ == IN_SYNC && c.status == ConditionStatus::True);
    let mut v = verdict(vec![available, degraded, in_sync.clone()], ready);
    if !lagging.is_empty() {
        if settings.requeue_seconds > 0 {
            v.requeue_after_ms = Some(settings.requeue_seconds * 1000);
        }
        if was_in_sync {
            v.events.push(Event {
                type_: EventType::Warning,
                reason: "RaftLagging".into(),
                message: in_sync.message,
            });
        }
    }
    v
}

fn lag_message(lagging: &[(&str, u64)], index: u64, settings: &Settings) -> String {
    let who: Vec<String> = lagging
        .iter()
        .map(|(name, lag)| format!("{name} trails by {lag}"))
        .collect();
    format!(
        "{} (leader index {index}, at most {} allowed)",
        who.join(", "),
        settings.max_lag_entries
    )
}

fn verdict(conditions: Vec<Condition>, ready_members: u32) -> Verdict {
    Verdict {
        conditions,
        ready_members,
        decline_verification: None,
        requeue_after_ms: None,
        events: Vec::new(),
    }
}

/// The policy, exported as the component when built for wasm32-wasip2.
pub struct RaftLag;

impl steward_policy_sdk::guest::Policy for RaftLag {
    fn describe() -> PolicyInfo {
        describe()
    }

    fn validate_settings(settings: &str) -> Result<(), String> {
        Settings::parse(settings).map(drop)
    }

    fn evaluate(observation: Observation) -> Verdict {
        // The host never evaluates settings that validate_settings refused.
        let settings = Settings::parse(&observation.settings).unwrap_or_default();
        evaluate(&observation, &settings)
    }
}

steward_policy_sdk::export_policy!(RaftLag);

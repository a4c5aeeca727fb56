//! The default policy's decisions, as plain Rust over the sdk types.
//!
//! README.md beside Cargo.toml tables every rule; tests/*.yaml holds one or
//! more cases per row. Everything here is a pure function of the observation:
//! the only clock is `observation.now`.

use std::fmt::Write as _;

use steward_policy_sdk::{
    AlarmKind, CertificateRole, Condition, ConditionStatus, EndpointStatus, Event, EventType,
    HostPhase, MemberListOutcome, MemberRole, Observation, PodPhase, PolicyInfo, ProbeError,
    ProbeErrorKind, ProbeOutcome, ProbeReport, Probing, QuorumFinding, QuorumReadOutcome,
    UnverifiedKind, Verdict, quorum,
};

use crate::settings::{SCHEMA, Settings};

pub const AVAILABLE: &str = "Available";
pub const DEGRADED: &str = "Degraded";
pub const BACKUP_OVERDUE: &str = "BackupOverdue";
pub const CERTIFICATE_EXPIRING_SOON: &str = "CertificateExpiringSoon";

/// etcd's default backend quota, used when spec.options.quotaBackendBytes is unset.
pub const DEFAULT_QUOTA_BACKEND_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// Messages stay well below the host's 1 KiB limit; long lists are cut here.
const MESSAGE_BUDGET: usize = 900;
/// One quoted error text inside a message.
const ERROR_EXCERPT: usize = 120;

pub fn describe() -> PolicyInfo {
    PolicyInfo {
        name: env!("CARGO_PKG_NAME").to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        condition_types: vec![AVAILABLE.to_owned(), DEGRADED.to_owned()],
        settings_schema: SCHEMA.to_owned(),
    }
}

/// Evaluates with the settings carried in `obs.settings`. Invalid settings
/// (the host validates them first, so this is a fallback) mean defaults plus
/// a Warning event rather than no verdict.
pub fn evaluate_json_settings(obs: &Observation) -> Verdict {
    match Settings::parse(&obs.settings) {
        Ok(settings) => evaluate(obs, &settings),
        Err(problem) => {
            let mut verdict = evaluate(obs, &Settings::default());
            let mut message = String::from("using default settings: ");
            push_limited(&mut message, &problem, MESSAGE_BUDGET);
            verdict.events.push(Event {
                type_: EventType::Warning,
                reason: "InvalidSettings".to_owned(),
                message,
            });
            verdict
        }
    }
}

pub fn evaluate(obs: &Observation, settings: &Settings) -> Verdict {
    if obs.phase == HostPhase::Paused || obs.spec.desired_replicas == 0 {
        return paused(obs);
    }
    match &obs.probing {
        Probing::Attempted(report) => probed(obs, report, settings),
        Probing::Skipped(why) => skipped(obs, why, settings),
    }
}

fn paused(obs: &Observation) -> Verdict {
    let message = "spec.replicas is 0: the cluster is intentionally dormant";
    Verdict {
        conditions: vec![
            Condition::new(AVAILABLE, ConditionStatus::False, "Paused", message),
            Condition::new(DEGRADED, ConditionStatus::False, "Paused", message),
        ],
        ready_members: match &obs.probing {
            Probing::Attempted(report) => ready_members(obs, report),
            Probing::Skipped(_) => 0,
        },
        // A dormant cluster serves nothing, whatever a member still says.
        decline_verification: Some(message.to_owned()),
        requeue_after_ms: None,
        events: Vec::new(),
    }
}

/// The voting membership quorum is counted against.
struct Voters<'a> {
    /// etcd's MemberList, when it answered.
    listed: Option<&'a [steward_policy_sdk::EtcdMember]>,
    /// Voters etcd lists, or else EtcdMembers with role voter.
    known: usize,
    /// What quorum is computed over: `known`, raised to spec.replicas in
    /// phases where membership should already match the spec.
    basis: usize,
}

impl<'a> Voters<'a> {
    fn of(obs: &Observation, report: &'a ProbeReport) -> Self {
        let listed = match &report.member_list {
            MemberListOutcome::Listed(list) => Some(list.as_slice()),
            _ => None,
        };
        let known = match listed {
            Some(list) => list.iter().filter(|m| !m.is_learner).count(),
            None => obs
                .members
                .iter()
                .filter(|m| m.role == MemberRole::Voter)
                .count(),
        };
        let desired = obs.spec.desired_replicas as usize;
        // While the host grows the cluster one member at a time (seed first,
        // then learner by learner), a membership smaller than the spec is
        // expected and etcd's own quorum is the truth. Otherwise a smaller
        // membership is itself a fault (members lost, or a member re-created
        // as a fresh one-node cluster) and must not read as quorum.
        let growing = matches!(obs.phase, HostPhase::Bootstrapping | HostPhase::ScalingUp);
        let mut basis = if growing { known } else { known.max(desired) };
        if basis == 0 {
            basis = desired.max(1);
        }
        Self {
            listed,
            known,
            basis,
        }
    }

    fn is_voter(&self, status: &EndpointStatus) -> bool {
        if status.is_learner {
            return false;
        }
        match self.listed {
            Some(list) => list
                .iter()
                .any(|m| m.id == status.member_id && !m.is_learner),
            None => true,
        }
    }

    fn may_lead(&self, id: u64) -> bool {
        id != 0
            && match self.listed {
                Some(list) => list.iter().any(|m| m.id == id && !m.is_learner),
                None => true,
            }
    }
}

fn answered(report: &ProbeReport) -> impl Iterator<Item = (&str, &EndpointStatus)> {
    report.endpoints.iter().filter_map(|p| match &p.outcome {
        ProbeOutcome::Answered(status) => Some((p.member.as_str(), status)),
        ProbeOutcome::Failed(_) => None,
    })
}

/// Answering voters, each member ID counted once.
fn answering_voters<'a>(report: &'a ProbeReport, voters: &Voters) -> Vec<&'a EndpointStatus> {
    let mut seen: Vec<&EndpointStatus> = Vec::with_capacity(report.endpoints.len());
    for (_, status) in answered(report) {
        if voters.is_voter(status) && !seen.iter().any(|s| s.member_id == status.member_id) {
            seen.push(status);
        }
    }
    seen
}

/// The non-zero leader most answering voters agree on, and how many do.
fn agreed_leader(answering: &[&EndpointStatus], voters: &Voters) -> Option<(u64, usize)> {
    let mut best: Option<(u64, usize)> = None;
    for candidate in answering.iter().map(|s| s.leader_id) {
        if !voters.may_lead(candidate) || best.is_some_and(|(id, _)| id == candidate) {
            continue;
        }
        let votes = answering
            .iter()
            .filter(|s| s.leader_id == candidate)
            .count();
        if best.is_none_or(|(_, n)| votes > n) {
            best = Some((candidate, votes));
        }
    }
    best
}

fn probed(obs: &Observation, report: &ProbeReport, settings: &Settings) -> Verdict {
    let voters = Voters::of(obs, report);
    let needed = quorum(voters.basis);
    let answering = answering_voters(report, &voters);
    // Whether etcd proved a quorum is the host's finding, not this policy's.
    // It proves a quorum of etcd's own membership; outside growth, a
    // membership smaller than the spec is itself a fault (members lost, or
    // one re-created as a fresh one-node cluster), so that is declined.
    let short = (voters.known < needed).then(|| {
        format!(
            "etcd has {} voting member{} but spec.replicas is {}",
            voters.known,
            plural(voters.known),
            obs.spec.desired_replicas
        )
    });
    let decline = match &obs.quorum {
        QuorumFinding::Verified(_) => short.clone(),
        QuorumFinding::Unverified(_) => None,
    };
    let verified = obs.quorum.is_verified() && decline.is_none();

    let mut message = String::with_capacity(160);
    let available = match &obs.quorum {
        QuorumFinding::Verified(q) if verified => {
            let _ = write!(
                message,
                "a linearizable read succeeded; {} of {} voting members answered",
                answering.len(),
                voters.basis
            );
            if let Some(leader) = q.leader {
                let votes = q.agreeing.len();
                let _ = write!(message, "; {votes} {} on leader {leader:x}", agree(votes));
            }
            Condition::new(AVAILABLE, ConditionStatus::True, "QuorumHealthy", message)
        }
        QuorumFinding::Unverified(u) if u.kind == UnverifiedKind::Unreachable => {
            // Every member refused the operator's credentials: the members
            // may be fine, but nothing about them can be verified, and the
            // fix is the Secret, not the members.
            let all = |kind: ProbeErrorKind| {
                !report.endpoints.is_empty()
                    && report
                        .endpoints
                        .iter()
                        .all(|p| matches!(&p.outcome, ProbeOutcome::Failed(e) if e.kind == kind))
            };
            let reason = if all(ProbeErrorKind::Auth) {
                message.push_str(
                    "etcd refused the operator's credentials (check spec.auth.rootCredentialsSecretRef): ",
                );
                "AuthCredentialsRejected"
            } else if all(ProbeErrorKind::Tls) {
                // The same for certificates: one side refused the other's.
                message.push_str(
                    "every member failed the TLS handshake (check the certificates in the spec.tls Secrets): ",
                );
                "TLSHandshakeFailed"
            } else {
                message.push_str("no endpoint answered: ");
                "ClusterUnreachable"
            };
            summarise_failures(&mut message, report);
            Condition::new(AVAILABLE, ConditionStatus::False, reason, message)
        }
        finding => {
            let _ = write!(
                message,
                "{} of {} voting members answered, quorum needs {needed}",
                answering.len(),
                voters.basis
            );
            match agreed_leader(&answering, &voters) {
                None => message.push_str("; none knows a leader"),
                Some((id, votes)) => {
                    let _ = write!(message, "; {votes} {} on leader {id:x}", agree(votes));
                }
            }
            if let Some(short) = &short {
                let _ = write!(message, "; {short}");
            }
            if let QuorumFinding::Unverified(u) = finding {
                match &report.quorum_read {
                    QuorumReadOutcome::Failed(e) => {
                        message.push_str("; the linearizable read failed: ");
                        push_limited(&mut message, &e.message, ERROR_EXCERPT);
                    }
                    _ => {
                        message.push_str("; ");
                        push_limited(&mut message, &u.message, ERROR_EXCERPT);
                    }
                }
            }
            if report
                .endpoints
                .iter()
                .any(|p| matches!(p.outcome, ProbeOutcome::Failed(_)))
            {
                message.push_str("; not answering: ");
                summarise_failures(&mut message, report);
            }
            Condition::new(AVAILABLE, ConditionStatus::False, "QuorumLost", message)
        }
    };

    let degraded = degraded(obs, Some(report), &voters, settings, &available);
    Verdict {
        conditions: vec![available, degraded],
        ready_members: ready_members(obs, report),
        decline_verification: decline,
        requeue_after_ms: requeue_hint(verified, settings),
        events: Vec::new(),
    }
}

fn skipped(obs: &Observation, why: &str, settings: &Settings) -> Verdict {
    let window_ms = i64::from(settings.stale_after_seconds) * 1000;
    let previous = |type_: &str| {
        obs.history
            .previous_conditions
            .iter()
            .find(|c| c.type_ == type_)
    };
    let mut message = String::with_capacity(200);
    let available = match obs.history.last_verified {
        Some(at) if age_ms(obs.now, at) <= window_ms && previous(AVAILABLE).is_some() => {
            let prev = previous(AVAILABLE).expect("checked above");
            message.push_str("not probed (");
            push_limited(&mut message, why, ERROR_EXCERPT);
            message.push_str("); keeping the status etcd verified at ");
            push_rfc3339(&mut message, at);
            let _ = write!(
                message,
                " ({}s ago, stale after {}s)",
                age_ms(obs.now, at) / 1000,
                settings.stale_after_seconds
            );
            Condition::new(AVAILABLE, prev.status, prev.reason.clone(), message)
        }
        Some(at) => {
            let age = age_ms(obs.now, at);
            message.push_str("unverified since ");
            push_rfc3339(&mut message, at);
            if age <= window_ms {
                let _ = write!(
                    message,
                    " ({}s ago, no earlier Available condition to keep): not probed (",
                    age / 1000
                );
            } else {
                let _ = write!(
                    message,
                    " ({}s ago, stale after {}s): not probed (",
                    age / 1000,
                    settings.stale_after_seconds
                );
            }
            push_limited(&mut message, why, ERROR_EXCERPT);
            message.push(')');
            Condition::new(AVAILABLE, ConditionStatus::Unknown, "StatusStale", message)
        }
        None => {
            message.push_str("etcd has never verified this cluster: not probed (");
            push_limited(&mut message, why, ERROR_EXCERPT);
            message.push(')');
            Condition::new(
                AVAILABLE,
                ConditionStatus::Unknown,
                "NeverVerified",
                message,
            )
        }
    };
    let voters = Voters {
        listed: None,
        known: obs
            .members
            .iter()
            .filter(|m| m.role == MemberRole::Voter)
            .count(),
        basis: 0,
    };
    let mut degraded = degraded(obs, None, &voters, settings, &available);
    if degraded.status != ConditionStatus::True {
        // Pods look fine, but nobody asked etcd: carry Degraded along with
        // Available while the kept verdict is fresh, else say we do not know.
        match previous(DEGRADED) {
            Some(prev) if available.status != ConditionStatus::Unknown => {
                degraded.status = prev.status;
                degraded.reason.clone_from(&prev.reason);
                degraded.message.clone_from(&available.message);
            }
            // A kept Available with no Degraded to keep beside it.
            None if available.status != ConditionStatus::Unknown => {
                degraded.status = ConditionStatus::Unknown;
                "NotProbed".clone_into(&mut degraded.reason);
                degraded.message.clone_from(&available.message);
            }
            _ => {
                degraded.status = ConditionStatus::Unknown;
                degraded.reason.clone_from(&available.reason);
                degraded.message.clone_from(&available.message);
            }
        }
    }
    Verdict {
        conditions: vec![available, degraded],
        ready_members: 0,
        decline_verification: None,
        requeue_after_ms: requeue_hint(false, settings),
        events: Vec::new(),
    }
}

fn agree(votes: usize) -> &'static str {
    if votes == 1 { "agrees" } else { "agree" }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Milliseconds from `then` to `now`; 0 if the host's clock went backwards.
fn age_ms(now: i64, then: i64) -> i64 {
    now.saturating_sub(then).max(0)
}

fn requeue_hint(verified: bool, settings: &Settings) -> Option<u32> {
    (!verified && settings.unverified_requeue_seconds > 0)
        .then(|| settings.unverified_requeue_seconds * 1000)
}

/// Members whose Pod is Ready, not being deleted, and whose etcd answered.
fn ready_members(obs: &Observation, report: &ProbeReport) -> u32 {
    obs.members
        .iter()
        .filter(|m| m.pod_ready && !m.pod_deleting)
        .filter(|m| answered(report).any(|(member, _)| member == m.name))
        .count() as u32
}

/// Degraded=True lists each unhealthy member and why. `report` is None when
/// probing was skipped: then only what the Kubernetes API shows is judged.
fn degraded(
    obs: &Observation,
    report: Option<&ProbeReport>,
    voters: &Voters,
    settings: &Settings,
    available: &Condition,
) -> Condition {
    let quota = obs
        .spec
        .quota_backend_bytes
        .unwrap_or(DEFAULT_QUOTA_BACKEND_BYTES);
    let leader_index = report.and_then(|r| {
        answered(r)
            .find(|(_, s)| s.leader_id != 0 && s.member_id == s.leader_id)
            .map(|(_, s)| s.raft_index)
    });
    let removal_expected = matches!(obs.phase, HostPhase::ScalingDown | HostPhase::Deleting);

    let mut message = String::with_capacity(256);
    let mut unhealthy = 0usize;
    let mut omitted = 0usize;
    for member in &obs.members {
        let mut problems = Problems::default();
        if member.pod_deleting && !removal_expected {
            problems.add("pod is being deleted");
        }
        match member.pod_phase {
            PodPhase::Running => {}
            PodPhase::Absent => problems.add("no pod"),
            phase => problems.add_fmt(format_args!("pod phase {phase:?}")),
        }
        if !member.pod_ready && member.pod_phase != PodPhase::Absent {
            problems.add("pod not Ready");
        }
        if let Some(report) = report {
            let probes = || report.endpoints.iter().filter(|p| p.member == member.name);
            // A member probed more than once is judged by an answer if any came.
            let outcome = probes()
                .find(|p| matches!(p.outcome, ProbeOutcome::Answered(_)))
                .or_else(|| probes().next())
                .map(|p| match &p.outcome {
                    ProbeOutcome::Answered(s) => Ok(s),
                    ProbeOutcome::Failed(e) => Err(e),
                });
            match outcome {
                None => problems.add("not probed"),
                Some(Err(error)) => {
                    problems.add_fmt(format_args!("etcd not answering ({})", error.kind.as_str()))
                }
                Some(Ok(status)) => {
                    for alarm in &status.alarms {
                        problems.add(match alarm {
                            AlarmKind::Nospace => "alarm NOSPACE",
                            AlarmKind::Corrupt => "alarm CORRUPT",
                        });
                    }
                    if status.leader_id == 0 {
                        problems.add("knows no leader");
                    }
                    if let Some(leader_index) = leader_index {
                        let behind = leader_index.saturating_sub(status.raft_index);
                        if status.is_learner && behind > settings.learner_max_lag_entries {
                            problems.add_fmt(format_args!(
                                "learner {behind} raft entries behind the leader"
                            ));
                        }
                    }
                    if status.db_size as f64 >= quota as f64 * settings.db_size_warn_ratio {
                        problems.add_fmt(format_args!(
                            "db size {} MiB of {} MiB quota",
                            status.db_size >> 20,
                            quota >> 20
                        ));
                    }
                }
            }
        }
        if problems.text.is_empty() {
            continue;
        }
        unhealthy += 1;
        if message.len() + member.name.len() + problems.text.len() + 4 > MESSAGE_BUDGET {
            omitted += 1;
            continue;
        }
        if !message.is_empty() {
            message.push_str("; ");
        }
        message.push_str(&member.name);
        message.push_str(": ");
        message.push_str(&problems.text);
    }
    if omitted > 0 {
        let _ = write!(message, "; and {omitted} more");
    }

    let desired = obs.spec.desired_replicas as usize;
    let missing = voters.known < desired;
    if missing {
        if !message.is_empty() {
            message.push_str("; ");
        }
        let _ = write!(
            message,
            "{} of {desired} desired voting members exist",
            voters.known
        );
    }

    if unhealthy > 0 {
        Condition::new(DEGRADED, ConditionStatus::True, "MembersUnhealthy", message)
    } else if missing {
        Condition::new(DEGRADED, ConditionStatus::True, "MembersMissing", message)
    } else if report.is_some() && available.status == ConditionStatus::False {
        // Every member looks fine yet etcd has no quorum: still degraded.
        Condition::new(
            DEGRADED,
            ConditionStatus::True,
            available.reason.clone(),
            available.message.clone(),
        )
    } else if let Some(expiring) = report.and_then(|_| certificates_expiring(obs, settings)) {
        // Before an overdue backup: an expired certificate is an outage
        // at the next handshake. Not while unprobed (D10).
        Condition::new(
            DEGRADED,
            ConditionStatus::True,
            CERTIFICATE_EXPIRING_SOON,
            expiring,
        )
    } else if let Some(overdue) = report.and_then(|_| backup_overdue(obs, settings)) {
        // Last: Degraded has one reason, and a member or quorum fault is
        // the more urgent one. Not while unprobed, where Degraded follows
        // what etcd last verified (D10).
        Condition::new(DEGRADED, ConditionStatus::True, BACKUP_OVERDUE, overdue)
    } else {
        message.clear();
        let _ = match (obs.members.len(), report.is_some()) {
            (1, true) => write!(message, "the 1 member is Ready and answers etcd"),
            (1, false) => write!(message, "the 1 member is Ready"),
            (n, true) => write!(message, "all {n} members are Ready and answer etcd"),
            (n, false) => write!(message, "all {n} members are Ready"),
        };
        Condition::new(DEGRADED, ConditionStatus::False, "MembersHealthy", message)
    }
}

/// The spec.tls certificates that expire within
/// `certificateExpiryWarningDays` (or have expired), soonest first; None
/// when none does.
fn certificates_expiring(obs: &Observation, settings: &Settings) -> Option<String> {
    let window = i64::from(settings.certificate_expiry_warning_days) * 86_400_000;
    let mut soon: Vec<_> = obs
        .tls
        .certificates
        .iter()
        .filter(|c| c.not_after.saturating_sub(obs.now) <= window)
        .collect();
    if soon.is_empty() {
        return None;
    }
    soon.sort_by_key(|c| c.not_after);
    let mut message = String::with_capacity(200);
    for (i, c) in soon.iter().enumerate() {
        if message.len() > MESSAGE_BUDGET - 200 {
            let _ = write!(message, "; and {} more", soon.len() - i);
            break;
        }
        if i > 0 {
            message.push_str("; ");
        }
        message.push_str("the ");
        message.push_str(match c.role {
            CertificateRole::Serving => "serving",
            CertificateRole::Peer => "peer",
            CertificateRole::OperatorClient => "operator's client",
        });
        message.push_str(" certificate in Secret ");
        push_limited(&mut message, &c.secret, ERROR_EXCERPT);
        let left = c.not_after.saturating_sub(obs.now);
        if left > 0 {
            message.push_str(" expires in ");
            push_duration(&mut message, left);
        } else {
            message.push_str(" expired ");
            push_duration(&mut message, -left);
            message.push_str(" ago");
        }
        message.push_str(" (");
        push_rfc3339(&mut message, c.not_after);
        message.push(')');
    }
    let _ = write!(
        message,
        "; renew {} (certificateExpiryWarningDays {})",
        if soon.len() == 1 { "it" } else { "them" },
        settings.certificate_expiry_warning_days
    );
    Some(message)
}

/// Why a backup is overdue, or None while it is not: more than
/// `backupOverdueIntervals` intervals of the schedule since the last
/// verified snapshot, or since the schedule was created when none ever
/// succeeded.
fn backup_overdue(obs: &Observation, settings: &Settings) -> Option<String> {
    let backup = obs.backup.as_ref()?;
    if backup.interval_ms == 0 {
        return None;
    }
    // `as` saturates: a limit beyond i64 is never reached.
    let limit = (backup.interval_ms as f64 * settings.backup_overdue_intervals) as i64;
    let since = backup.last_success.unwrap_or(backup.schedule_created);
    let age = age_ms(obs.now, since);
    if age <= limit {
        return None;
    }
    let mut message = String::with_capacity(200);
    match backup.last_success {
        Some(at) => {
            message.push_str("the last successful backup completed ");
            push_duration(&mut message, age);
            message.push_str(" ago (");
            push_rfc3339(&mut message, at);
            message.push_str("); schedule ");
            push_limited(&mut message, &backup.schedule, ERROR_EXCERPT);
        }
        None => {
            message.push_str("no backup has succeeded since schedule ");
            push_limited(&mut message, &backup.schedule, ERROR_EXCERPT);
            message.push_str(" was created ");
            push_duration(&mut message, age);
            message.push_str(" ago; it");
        }
    }
    message.push_str(" runs every ");
    push_duration(
        &mut message,
        i64::try_from(backup.interval_ms).unwrap_or(i64::MAX),
    );
    message.push_str(", so a backup is overdue after ");
    push_duration(&mut message, limit);
    let _ = write!(
        message,
        " (backupOverdueIntervals {})",
        settings.backup_overdue_intervals
    );
    Some(message)
}

/// "2d3h", "5h12m", "4m10s", "12s": the two largest units of a duration,
/// for ages and intervals that run from seconds to weeks.
fn push_duration(out: &mut String, ms: i64) {
    let secs = ms.max(0) / 1000;
    let units = [
        (secs / 86_400, 'd'),
        (secs % 86_400 / 3600, 'h'),
        (secs % 3600 / 60, 'm'),
        (secs % 60, 's'),
    ];
    let Some(first) = units.iter().position(|(n, _)| *n > 0) else {
        out.push_str("0s");
        return;
    };
    for (n, unit) in &units[first..(first + 2).min(units.len())] {
        if *n > 0 {
            let _ = write!(out, "{n}{unit}");
        }
    }
}

/// The problems of one member, comma-separated.
#[derive(Default)]
struct Problems {
    text: String,
}

impl Problems {
    fn add(&mut self, problem: &str) {
        if !self.text.is_empty() {
            self.text.push_str(", ");
        }
        self.text.push_str(problem);
    }

    fn add_fmt(&mut self, problem: std::fmt::Arguments<'_>) {
        if !self.text.is_empty() {
            self.text.push_str(", ");
        }
        let _ = self.text.write_fmt(problem);
    }
}

const KINDS: [ProbeErrorKind; 6] = [
    ProbeErrorKind::Dns,
    ProbeErrorKind::Timeout,
    ProbeErrorKind::Refused,
    ProbeErrorKind::Tls,
    ProbeErrorKind::Auth,
    ProbeErrorKind::Other,
];

/// "3 dns (etcd-a.etcd.ns.svc: lookup ...: no such host), 1 timeout (...)":
/// a count per error kind with its first example.
fn summarise_failures(message: &mut String, report: &ProbeReport) {
    let failures = || {
        report.endpoints.iter().filter_map(|p| match &p.outcome {
            ProbeOutcome::Failed(e) => Some((p, e)),
            ProbeOutcome::Answered(_) => None,
        })
    };
    let mut first = true;
    for kind in KINDS {
        let mut of_kind = failures().filter(|(_, e)| e.kind == kind);
        let Some((probe, error)) = of_kind.next() else {
            continue;
        };
        let count = 1 + of_kind.count();
        if !first {
            message.push_str(", ");
        }
        first = false;
        let _ = write!(message, "{count} {} (", kind.as_str());
        message.push_str(endpoint_host(&probe.endpoint, &probe.member));
        message.push_str(": ");
        push_error(message, error);
        message.push(')');
    }
    if first {
        message.push_str("no endpoint was probed");
    }
}

fn push_error(message: &mut String, error: &ProbeError) {
    if error.message.is_empty() {
        message.push_str(error.kind.as_str());
    } else {
        push_limited(message, &error.message, ERROR_EXCERPT);
    }
}

/// "https://etcd-a.etcd.ns.svc:2379" -> "etcd-a.etcd.ns.svc"; the member name
/// when the endpoint is unknown.
fn endpoint_host<'a>(endpoint: &'a str, member: &'a str) -> &'a str {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let host = rest.rsplit_once(':').map_or(rest, |(h, _)| h);
    if host.is_empty() { member } else { host }
}

/// Appends at most `max` bytes of `text`, cut at a char boundary, marking the cut.
fn push_limited(out: &mut String, text: &str, max: usize) {
    if text.len() <= max {
        out.push_str(text);
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    out.push_str(&text[..end]);
    out.push('…');
}

/// Writes unix milliseconds as RFC 3339 UTC, second precision. Hand-written
/// (Howard Hinnant's civil-from-days) to keep the component free of a date
/// crate; the policy has no clock and needs only this one conversion.
fn push_rfc3339(out: &mut String, unix_ms: i64) {
    let secs = unix_ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    );
}

#[cfg(test)]
mod tests;

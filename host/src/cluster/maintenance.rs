//! Defragmenting members' databases (`spec.maintenance.defrag`), one member
//! at a time.
//!
//! Pure, like [`super::plan`], which asks it last: only a cluster whose
//! membership matches the spec, with no rollout, crash loop or removal in
//! flight, and with verified quorum, is defragmented. Guarantees:
//! - every voter answers before one member is defragmented (a
//!   defragmentation blocks that member's reads and writes while it runs);
//! - followers first, oldest first; the leader last, after leadership moved
//!   away ([`super::plan::move_leadership_off`]);
//! - a member qualifies only with at least [`MIN_RECLAIM_BYTES`] free in
//!   its database file, and once per scheduled time (or per
//!   [`COOLDOWN_MS`] without a schedule), unless it has a NOSPACE alarm;
//! - while the cluster has a NOSPACE alarm (it refuses every write), the
//!   schedule's window is not waited for, and a member within 5 % of the
//!   quota ([`under_quota`]) qualifies whatever free space it reports,
//!   once per cooldown, until a defragmentation of it reclaims less than
//!   [`MIN_RECLAIM_BYTES`]: etcd counts pages freed by a compaction as in
//!   use until the next write, and under the alarm there is none;
//! - with `clearNoSpaceAlarm`, once every member answers with 5 % of the
//!   quota to spare, the alarms are disarmed ([`Step::DisarmNoSpace`])
//!   even when no defragmentation is left to do it;
//! - a schedule that does not parse is a [`Step::Refuse`] naming it.

use std::str::FromStr;

use steward_policy_sdk::EtcdMember as EtcdListed;

use super::plan::{Facts, MemberFacts, Step, Then};
use crate::api::DefragSpec;
use crate::resources::listed_member_name;

/// Less free space than this is not worth blocking a member for.
pub const MIN_RECLAIM_BYTES: u64 = 1 << 20;
/// Without a schedule, a member is defragmented at most this often.
pub const COOLDOWN_MS: i64 = 10 * 60 * 1000;
/// With a schedule, how long after a scheduled time defragmentation may
/// start (a cluster unhealthy at the time gets this long to recover).
pub const WINDOW_MS: i64 = 60 * 60 * 1000;
/// etcd's backend quota when `--quota-backend-bytes` is unset.
pub const DEFAULT_QUOTA_BYTES: u64 = 2 << 30;

/// Why a member qualifies, in words, or None.
pub fn qualifies(m: &MemberFacts, spec: &DefragSpec, quota: u64) -> Option<String> {
    let (size, used) = (m.db_size?, m.db_in_use?);
    let free = size.saturating_sub(used);
    if free < MIN_RECLAIM_BYTES {
        return None;
    }
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let fragmented = free * 100 >= spec.fragmented_percent.max(1) as u64 * size;
    let full = size * 100 >= spec.quota_percent.max(1) as u64 * quota;
    let why = if m.no_space {
        "a NOSPACE alarm"
    } else if fragmented {
        "fragmented"
    } else if full {
        "near the quota"
    } else {
        return None;
    };
    Some(format!(
        "{why}: {:.1} MiB free of {:.1} MiB, quota {:.1} MiB",
        mib(free),
        mib(size),
        mib(quota)
    ))
}

/// The start of the scheduling window `now` is in: the latest scheduled
/// time, if it is at most [`WINDOW_MS`] ago. Err: the schedule's error.
pub fn window_start(schedule: &str, now_ms: i64) -> Result<Option<i64>, String> {
    let cron = croner::Cron::from_str(schedule).map_err(|e| e.to_string())?;
    let now = jiff::Timestamp::from_millisecond(now_ms)
        .map_err(|e| e.to_string())?
        .to_zoned(jiff::tz::TimeZone::UTC);
    let Ok(previous) = cron.find_previous_occurrence(&now, true) else {
        return Ok(None);
    };
    let at = previous.timestamp().as_millisecond();
    Ok((now_ms - at <= WINDOW_MS).then_some(at))
}

/// Whether a database of `size` bytes is far enough under `quota` for the
/// NOSPACE alarm to be disarmed: 5 % of the quota (at least
/// [`MIN_RECLAIM_BYTES`]) to spare, so that the next writes do not raise
/// it again at once and disarming does not flap.
pub fn under_quota(size: u64, quota: u64) -> bool {
    size.saturating_add((quota / 20).max(MIN_RECLAIM_BYTES)) <= quota
}

/// Why a member over the quota qualifies while the cluster is alarmed;
/// None once a defragmentation of it reclaimed nothing worth it (its data
/// itself fills the quota: compacting or a larger quota can help, another
/// defragmentation cannot).
fn over_quota(m: &MemberFacts, quota: u64) -> Option<String> {
    let size = m.db_size.filter(|s| !under_quota(*s, quota))?;
    if m.last_reclaimed.is_some_and(|r| r < MIN_RECLAIM_BYTES) {
        return None;
    }
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    Some(format!(
        "the cluster has a NOSPACE alarm and this database is at the quota: {:.1} MiB, quota {:.1} MiB",
        mib(size),
        mib(quota)
    ))
}

/// The next maintenance step, or None when nothing is due.
pub fn next(live: &[&MemberFacts], listed: &[EtcdListed], f: &Facts) -> Option<Step> {
    let spec = f.defrag.as_ref()?;
    let alarmed = live.iter().any(|m| m.no_space);
    let since = match spec.schedule.as_deref() {
        Some(s) => match window_start(s, f.now_ms) {
            Err(e) => {
                return Some(Step::Refuse {
                    reason: crate::conditions::reason::INVALID_DEFRAG_SCHEDULE,
                    message: format!(
                        "spec.maintenance.defrag.schedule {s:?} is not a cron schedule: {e}"
                    ),
                });
            }
            // Under the alarm the cluster takes no writes: the cooldown
            // alone paces it.
            Ok(None) if alarmed => None,
            Ok(None) => return None,
            Ok(Some(at)) => Some(at),
        },
        None => None,
    };
    let due = |m: &MemberFacts| match (since, m.last_defrag_ms) {
        (_, None) => true,
        (Some(at), Some(last)) => last < at,
        (None, Some(last)) => f.now_ms - last >= COOLDOWN_MS,
    };
    let mut candidates: Vec<(&&MemberFacts, String)> = live
        .iter()
        .filter_map(|m| {
            let measured = qualifies(m, spec, f.quota_bytes);
            let why = match measured {
                // Its own alarm skips the cooldown, but needs measured space.
                Some(why) if m.no_space => why,
                _ if !due(m) => return None,
                Some(why) => why,
                None if alarmed => over_quota(m, f.quota_bytes)?,
                None => return None,
            };
            Some((m, why))
        })
        .collect();
    let voters: Vec<&EtcdListed> = listed.iter().filter(|m| !m.is_learner).collect();
    let silent = voters.iter().find(|m| !f.raft_index.contains_key(&m.id));
    if candidates.is_empty() {
        let under = live
            .iter()
            .all(|m| m.db_size.is_some_and(|s| under_quota(s, f.quota_bytes)));
        return (alarmed && spec.clear_no_space_alarm && silent.is_none() && under).then(|| {
            Step::DisarmNoSpace {
                members: live
                    .iter()
                    .filter(|m| m.no_space)
                    .map(|m| m.name.clone())
                    .collect(),
            }
        });
    }
    if let Some(silent) = silent {
        return Some(Step::Wait(format!(
            "member {} did not answer; defragmentation waits for every member",
            listed_member_name(silent).unwrap_or("(unnamed)")
        )));
    }
    let leader = f
        .leader_id
        .and_then(|id| listed.iter().find(|m| m.id == id))
        .and_then(listed_member_name);
    candidates.sort_by_key(|(m, _)| (Some(m.name.as_str()) == leader, m.created_ms));
    let (next, why) = candidates.swap_remove(0);
    if Some(next.name.as_str()) == leader && voters.len() > 1 {
        return Some(super::plan::move_leadership_off(
            &next.name,
            listed,
            live,
            f,
            Then::Defragment,
        ));
    }
    let id = listed
        .iter()
        .find(|m| listed_member_name(m) == Some(next.name.as_str()))?
        .id;
    Some(Step::Defragment {
        name: next.name.clone(),
        id,
        why,
        clear_no_space: spec.clear_no_space_alarm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::plan::plan;

    const MIB: u64 = 1 << 20;

    fn spec() -> DefragSpec {
        DefragSpec {
            fragmented_percent: 50,
            quota_percent: 80,
            schedule: None,
            clear_no_space_alarm: true,
        }
    }

    fn cluster(sizes: &[(u64, u64)]) -> Facts {
        let names = ["a", "b", "c"];
        Facts {
            desired: 3,
            cluster_id_latched: true,
            quorum_verified: true,
            members: names
                .iter()
                .zip(sizes)
                .enumerate()
                .map(|(i, (n, (size, used)))| MemberFacts {
                    name: (*n).into(),
                    created_ms: i as i64,
                    dormant: false,
                    deleting: false,
                    failures: 0,
                    pod_stuck: None,
                    spec_version: "3.6.17".into(),
                    running_version: Some("3.6.17".into()),
                    db_size: Some(*size),
                    db_in_use: Some(*used),
                    no_space: false,
                    last_defrag_ms: None,
                    last_reclaimed: None,
                    ..crate::cluster::plan::tests::member(n, 0)
                })
                .collect(),
            etcd_members: Some(
                names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| EtcdListed {
                        id: i as u64 + 1,
                        name: (*n).into(),
                        peer_urls: vec![format!("http://{n}.etcd.default.svc:2380")],
                        client_urls: vec![],
                        is_learner: false,
                    })
                    .collect(),
            ),
            raft_index: (1..=3).map(|id| (id, 100)).collect(),
            leader_id: Some(1),
            crash_loop_threshold: 5,
            target_version: "3.6.17".into(),
            defrag: Some(spec()),
            quota_bytes: DEFAULT_QUOTA_BYTES,
            now_ms: 1_800_000_000_000,
            ..Facts::default()
        }
    }

    fn defrag_of(step: &Step) -> Option<&str> {
        match step {
            Step::Defragment { name, .. } => Some(name),
            _ => None,
        }
    }

    #[test]
    fn fragmented_followers_go_first_and_the_leader_hands_over_before_its_turn() {
        let mut f = cluster(&[
            (40 * MIB, 10 * MIB),
            (40 * MIB, 10 * MIB),
            (40 * MIB, 30 * MIB),
        ]);
        assert_eq!(
            defrag_of(&plan(&f)),
            Some("b"),
            "c is 25% free: not fragmented"
        );
        f.members[1].last_defrag_ms = Some(f.now_ms - 1000);
        assert_eq!(
            plan(&f),
            Step::MoveLeader {
                from: "a".into(),
                to: "b".into(),
                to_id: 2,
                then: Then::Defragment
            },
            "only the leader is left"
        );
        f.leader_id = Some(2);
        assert_eq!(defrag_of(&plan(&f)), Some("a"));
        f.members[0].last_defrag_ms = Some(f.now_ms - 1000);
        assert_eq!(plan(&f), Step::Idle, "both within the cooldown");
        f.now_ms += COOLDOWN_MS;
        assert_eq!(defrag_of(&plan(&f)), Some("a"), "the cooldown is over");
    }

    #[test]
    fn near_the_quota_or_under_nospace_qualifies_and_tiny_or_unanswered_waits() {
        let mut f = cluster(&[(3 * MIB / 2, MIB), (10 * MIB, 9 * MIB), (10 * MIB, 9 * MIB)]);
        assert_eq!(plan(&f), Step::Idle, "under 1 MiB free, 10% free");
        f.quota_bytes = 12 * MIB;
        assert_eq!(defrag_of(&plan(&f)), Some("b"), "over 80% of the quota");
        f.quota_bytes = DEFAULT_QUOTA_BYTES;
        f.members[2].no_space = true;
        f.members[2].last_defrag_ms = Some(f.now_ms);
        assert_eq!(
            defrag_of(&plan(&f)),
            Some("c"),
            "NOSPACE skips the cooldown"
        );
        f.raft_index.remove(&2);
        assert!(matches!(plan(&f), Step::Wait(m) if m.contains("member b did not answer")));
    }

    #[test]
    fn a_schedule_opens_a_window_once_per_time_and_a_bad_one_is_refused() {
        let mut f = cluster(&[
            (40 * MIB, 10 * MIB),
            (40 * MIB, 10 * MIB),
            (40 * MIB, 10 * MIB),
        ]);
        // 2027-01-15 08:00:00 UTC
        let eight = 1_800_000_000_000 - 1_800_000_000_000 % 86_400_000 + 8 * 3_600_000;
        f.now_ms = eight + 5 * 60_000;
        f.defrag.as_mut().unwrap().schedule = Some("0 8 * * *".into());
        assert_eq!(defrag_of(&plan(&f)), Some("b"), "5 minutes into the window");
        f.members[1].last_defrag_ms = Some(eight + 60_000);
        f.members[2].last_defrag_ms = Some(eight + 60_000);
        f.members[0].last_defrag_ms = Some(eight + 60_000);
        assert_eq!(plan(&f), Step::Idle, "each once per scheduled time");
        f.members.iter_mut().for_each(|m| m.last_defrag_ms = None);
        f.now_ms = eight + 2 * 3_600_000;
        assert_eq!(plan(&f), Step::Idle, "outside the window");
        f.defrag.as_mut().unwrap().schedule = Some("every night".into());
        assert!(
            matches!(plan(&f), Step::Refuse { reason: "InvalidDefragSchedule", message } if message.contains("\"every night\" is not a cron schedule")),
            "{:?}",
            plan(&f)
        );
    }

    /// The CI run of 4835fb0: after a compaction under NOSPACE, followers
    /// report their freed pages as in use (no write follows to release
    /// them); they must still be defragmented, and the alarm then cleared.
    #[test]
    fn under_nospace_members_over_the_quota_qualify_and_the_alarm_is_cleared_at_the_end() {
        let mut f = cluster(&[(17 * MIB, 17 * MIB), (17 * MIB, 17 * MIB), (MIB, MIB / 2)]);
        f.quota_bytes = 16 * MIB;
        f.members[2].no_space = true;
        f.members[2].last_defrag_ms = Some(f.now_ms - 1000);
        f.leader_id = Some(3);
        f.defrag.as_mut().unwrap().schedule = Some("0 3 1 1 *".into());
        assert!(
            matches!(&plan(&f), Step::Defragment { name, why, .. } if name == "a" && why.contains("NOSPACE alarm")),
            "outside the window, whatever free space a reports: {:?}",
            plan(&f)
        );
        f.members[0] = MemberFacts {
            db_size: Some(MIB),
            db_in_use: Some(MIB / 2),
            last_defrag_ms: Some(f.now_ms - 1000),
            ..f.members[0].clone()
        };
        assert_eq!(defrag_of(&plan(&f)), Some("b"));
        f.members[1].last_defrag_ms = Some(f.now_ms - 1000);
        f.members[1].last_reclaimed = Some(0);
        assert_eq!(
            plan(&f),
            Step::Idle,
            "b stays over the quota: not again within the cooldown"
        );
        f.now_ms += COOLDOWN_MS;
        assert_eq!(
            plan(&f),
            Step::Idle,
            "nor after it: its defragmentation reclaimed nothing"
        );
        f.members[1].last_reclaimed = Some(2 * MIB);
        assert_eq!(defrag_of(&plan(&f)), Some("b"), "it had reclaimed some");
        f.members[1].last_defrag_ms = Some(f.now_ms - 1000);
        f.members[1].db_size = Some(16 * MIB - MIB / 2);
        assert_eq!(
            plan(&f),
            Step::Idle,
            "within 5 % of the quota: not disarmed"
        );
        f.members[1].db_size = Some(MIB);
        assert_eq!(
            plan(&f),
            Step::DisarmNoSpace {
                members: vec!["c".into()]
            }
        );
        f.defrag.as_mut().unwrap().clear_no_space_alarm = false;
        assert_eq!(plan(&f), Step::Idle, "disarming is opt-in");
        f.defrag.as_mut().unwrap().clear_no_space_alarm = true;
        f.raft_index.remove(&2);
        assert_eq!(plan(&f), Step::Idle, "not while a voter is silent");
    }
}

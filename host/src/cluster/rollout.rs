//! Rolling a cluster's members to `spec.version`, one at a time, along the
//! paths etcd supports.
//!
//! Pure, like [`super::plan`], which asks it for the next step once
//! membership matches the target. Guarantees:
//! - one member at a time: a member is only told its new version once every
//!   member whose spec already names the target reports running it (etcd's
//!   own Status answer, never the Pod's image);
//! - only with verified quorum and every voter answering: an unhealthy
//!   cluster waits, and resumes when health returns;
//! - followers first, the leader last, after leadership moved away;
//! - only etcd's supported paths (patch changes within a minor, one minor
//!   up, 3.5 → 3.6 only from 3.5.26 or later, one minor down only while the
//!   cluster version has not moved, i.e. to roll a partial upgrade back).
//!   Anything else is a [`Step::Refuse`] that names the way forward.
//!
//! A member that fails to come back on the new version stops the rollout
//! there: the others keep quorum, the wait names the failure, and setting
//! `spec.version` back rolls that member back the same way.

use super::plan::{Facts, MemberFacts, Step, Then};
use crate::resources::listed_member_name;
use steward_policy_sdk::EtcdMember as EtcdListed;

/// An etcd release, X.Y.Z.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split('.').map(|p| p.parse::<u32>().ok());
        let v = Version {
            major: parts.next()??,
            minor: parts.next()??,
            patch: parts.next()??,
        };
        parts.next().is_none().then_some(v)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The first 3.5 release from which etcd supports the move to 3.6 (earlier
/// ones can turn voters back into learners: etcd issue 19557).
const FIRST_3_5_FOR_3_6: u32 = 26;

/// Why etcd does not support moving one member from `from` to `to`, if it
/// does not. `minors_running` are the minor versions the members run now:
/// one minor down is the way back from a partial upgrade only while some
/// member still runs the lower minor (the cluster version has not moved).
pub fn refusal(from: Version, to: Version, minors_running: &[u32]) -> Option<String> {
    if from.major != to.major {
        return Some(format!(
            "etcd {from} → {to} changes the major version, which etcd does not support"
        ));
    }
    if to.minor == from.minor {
        return None;
    }
    if to.minor == from.minor + 1 {
        if from.major == 3 && from.minor == 5 && from.patch < FIRST_3_5_FOR_3_6 {
            return Some(format!(
                "etcd {from} → {to}: etcd supports 3.5 → 3.6 only from 3.5.{FIRST_3_5_FOR_3_6} or later \
                 (earlier 3.5 releases can turn voters back into learners, etcd issue 19557); \
                 set spec.version to 3.5.{FIRST_3_5_FOR_3_6} or a later 3.5 release first, then to {to}"
            ));
        }
        return None;
    }
    if to.minor + 1 == from.minor {
        if minors_running.contains(&to.minor) {
            return None;
        }
        return Some(format!(
            "etcd {from} → {to} is a downgrade of a minor version on a cluster that runs {}.{} \
             everywhere; it needs etcd's downgrade API, which etcd-steward does not drive yet. \
             Set spec.version back to a {}.{} release",
            from.major, from.minor, from.major, from.minor
        ));
    }
    Some(format!(
        "etcd {from} → {to} skips a minor version; etcd upgrades one minor at a time: \
         set spec.version to a {}.{} release first",
        from.major,
        if to.minor > from.minor {
            from.minor + 1
        } else {
            from.minor - 1
        }
    ))
}

/// How far the rollout to `target` is: Some while any live member's spec or
/// running version differs from it.
pub fn progress(target: &str, members: &[&MemberFacts]) -> Option<String> {
    let on_target = |m: &&&MemberFacts| {
        m.spec_version == target && m.running_version.as_deref() == Some(target)
    };
    let done = members.iter().filter(on_target).count();
    let rolling = members.iter().any(|m| {
        m.spec_version != target || m.running_version.as_deref().is_some_and(|r| r != target)
    });
    rolling.then(|| {
        format!(
            "rolling the members to etcd {target}: {done} of {} run it",
            members.len()
        )
    })
}

/// `broken` failed after the rollout gave it the target version, which no
/// other live member runs yet. (Its failures count on that version only:
/// `EtcdMemberStatus::failures_on`.)
pub fn failed_on_new_version(broken: &MemberFacts, live: &[&MemberFacts], f: &Facts) -> bool {
    broken.spec_version == f.target_version
        && live.iter().any(|m| {
            m.name != broken.name
                && m.running_version
                    .as_deref()
                    .is_some_and(|r| r != broken.spec_version)
        })
}

/// The minor versions the live members report running.
fn running_minors(live: &[&MemberFacts]) -> Vec<u32> {
    live.iter()
        .filter_map(|m| Version::parse(m.running_version.as_deref()?))
        .map(|v| v.minor)
        .collect()
}

/// A member whose Pod runs another version than its spec asks for: its Pod
/// is being replaced, so no other member may change meanwhile.
pub fn in_flight<'a>(live: &[&'a MemberFacts]) -> Option<&'a MemberFacts> {
    live.iter().copied().find(|m| {
        m.running_version
            .as_deref()
            .is_some_and(|r| r != m.spec_version)
    })
}

/// The version a new member (scale-up, replacement) starts on: the one
/// every answering member runs, while a rollout to `spec.version` has not
/// begun; else `spec.version`. A new member never runs ahead of a rollout
/// the operator has not started, or has refused.
pub fn join_version(f: &Facts) -> String {
    let mut running = f.members.iter().filter(|m| !m.deleting).filter_map(|m| {
        (m.spec_version != f.target_version)
            .then_some(m.running_version.as_deref())
            .flatten()
    });
    let behind_all = f
        .members
        .iter()
        .filter(|m| !m.deleting && m.running_version.is_some())
        .all(|m| m.spec_version != f.target_version);
    match running.next() {
        Some(v) if behind_all && running.all(|r| r == v) => v.to_owned(),
        _ => f.target_version.clone(),
    }
}

/// Without verified quorum, the one step a rollout may take: restart a
/// member that is behind the target and down because it failed (a version
/// that cannot start), when the move is a path etcd supports. It costs
/// nothing (the member serves nothing), and is how setting spec.version
/// back recovers a one- or two-member cluster that lost quorum to it.
pub fn rescue(live: &[&MemberFacts], f: &Facts) -> Option<Step> {
    let target = Version::parse(&f.target_version)?;
    let m = live.iter().find(|m| {
        m.spec_version != f.target_version
            && m.running_version.is_none()
            && (m.failures > 0 || m.pod_stuck.is_some())
    })?;
    if f.memory {
        return None;
    }
    let from = Version::parse(&m.spec_version)?;
    let minors = running_minors(live);
    if refusal(from, target, &minors).is_some() {
        return None;
    }
    Some(Step::Upgrade {
        name: m.name.clone(),
        to: f.target_version.clone(),
        done: live
            .iter()
            .filter(|k| k.spec_version == f.target_version)
            .count(),
        total: live.len(),
    })
}

/// The next step of the rollout to `f.target_version`, or None when every
/// live member runs it (or the target does not parse; CEL keeps it X.Y.Z).
/// The caller has checked quorum and that membership matches the target.
pub fn next(live: &[&MemberFacts], listed: &[EtcdListed], f: &Facts) -> Option<Step> {
    let target = Version::parse(&f.target_version)?;
    let to = f.target_version.as_str();
    if f.memory && live.iter().any(|m| m.spec_version != to) {
        return Some(Step::Refuse {
            reason: crate::conditions::reason::UNSUPPORTED_VERSION_CHANGE,
            message: format!(
                "etcd-steward does not change the version of a cluster with spec.storage.medium=Memory in place: \
                 a member's data lives in its Pod's tmpfs and would be lost with the restart (the seed would start a new, \
                 empty cluster). Set spec.version back, or create a new cluster on {to}"
            ),
        });
    }
    if let Some(m) = in_flight(live) {
        return Some(Step::Wait(format!(
            "member {} runs etcd {} while its spec asks for {}: its Pod is being replaced",
            m.name,
            m.running_version.as_deref().unwrap_or_default(),
            m.spec_version
        )));
    }

    // A member already told to move must be seen running the target (etcd's
    // word), and caught up with the leader, before anyone else moves.
    if let Some(m) = live
        .iter()
        .find(|m| m.spec_version == to && m.running_version.as_deref() != Some(to))
    {
        let why = match (&m.running_version, &m.pod_stuck) {
            (_, Some(stuck)) => format!("its Pod cannot start: {stuck}"),
            (Some(running), None) => format!("etcd still reports {running}"),
            (None, None) if m.failures > 0 => format!(
                "it has not answered; its Pod failed {} times in a row on the new version",
                m.failures
            ),
            (None, None) => "it has not answered yet".to_owned(),
        };
        return Some(Step::Wait(format!(
            "member {} is restarting on etcd {to}: {why}",
            m.name
        )));
    }
    let leader_index = f.leader_id.and_then(|l| f.raft_index.get(&l)).copied();
    let lagging = live.iter().filter(|m| m.spec_version == to).find_map(|m| {
        let id = listed
            .iter()
            .find(|l| listed_member_name(l) == Some(m.name.as_str()))?
            .id;
        let index = *f.raft_index.get(&id)?;
        let lead = leader_index?;
        (index + f.promote_max_lag < lead).then_some((m, index, lead))
    });
    let mut behind: Vec<&&MemberFacts> = live.iter().filter(|m| m.spec_version != to).collect();
    if behind.is_empty() {
        return None;
    }
    if let Some((m, index, lead)) = lagging {
        return Some(Step::Wait(format!(
            "member {} runs etcd {to} and is catching up (raft index {index}, leader {lead})",
            m.name
        )));
    }
    // Every voter answers before one of them restarts, except one that is
    // itself behind and down (a member that failed on a version the spec
    // no longer asks for): restarting it costs nothing, and is how setting
    // spec.version back rolls a failed member back.
    let voters: Vec<&EtcdListed> = listed.iter().filter(|m| !m.is_learner).collect();
    let silent: Vec<&str> = voters
        .iter()
        .filter(|m| !f.raft_index.contains_key(&m.id))
        .filter_map(|m| listed_member_name(m))
        .collect();
    let down_behind = behind
        .iter()
        .find(|m| silent.contains(&m.name.as_str()) && (m.failures > 0 || m.pod_stuck.is_some()));
    match (silent.as_slice(), down_behind) {
        ([], _) => {}
        ([_], Some(m)) => {
            let from = Version::parse(&m.spec_version)?;
            let minors = running_minors(live);
            if let Some(why) = refusal(from, target, &minors) {
                return Some(Step::Refuse {
                    reason: crate::conditions::reason::UNSUPPORTED_VERSION_CHANGE,
                    message: why,
                });
            }
            return Some(Step::Upgrade {
                name: m.name.clone(),
                to: to.to_owned(),
                done: live.len() - behind.len(),
                total: live.len(),
            });
        }
        (silent, _) => {
            return Some(Step::Wait(format!(
                "member {} did not answer; the rollout to etcd {to} waits for every member",
                silent.join(", ")
            )));
        }
    }
    let minors = running_minors(live);
    for m in &behind {
        let Some(from) = m.running_version.as_deref().and_then(Version::parse) else {
            return Some(Step::Wait(format!(
                "member {} has not reported its etcd version",
                m.name
            )));
        };
        if let Some(why) = refusal(from, target, &minors) {
            return Some(Step::Refuse {
                reason: crate::conditions::reason::UNSUPPORTED_VERSION_CHANGE,
                message: why,
            });
        }
    }

    let leader = f
        .leader_id
        .and_then(|id| listed.iter().find(|m| m.id == id))
        .and_then(listed_member_name);
    // Followers first, oldest first; the leader last.
    behind.sort_by_key(|m| (Some(m.name.as_str()) == leader, m.created_ms));
    let next = behind[0];
    let done = live.len() - behind.len();
    // A single voter has nobody to hand leadership to: its restart is the
    // outage a one-member cluster accepts with any change.
    if Some(next.name.as_str()) == leader && voters.len() > 1 {
        return Some(super::plan::move_leadership_off(
            &next.name,
            listed,
            live,
            f,
            Then::Upgrade,
        ));
    }
    Some(Step::Upgrade {
        name: next.name.clone(),
        to: to.to_owned(),
        done,
        total: live.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    use crate::cluster::plan::plan;

    fn cluster(target: &str, running: &str) -> Facts {
        let names = ["a", "b", "c"];
        Facts {
            desired: 3,
            cluster_id_latched: true,
            quorum_verified: true,
            members: names
                .iter()
                .enumerate()
                .map(|(i, n)| MemberFacts {
                    name: (*n).into(),
                    created_ms: i as i64,
                    dormant: false,
                    deleting: false,
                    failures: 0,
                    pod_stuck: None,
                    spec_version: running.into(),
                    running_version: Some(running.into()),
                    db_size: None,
                    db_in_use: None,
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
            target_version: target.into(),
            ..Facts::default()
        }
    }

    fn set(f: &mut Facts, name: &str, spec: &str, running: Option<&str>) {
        let m = f.members.iter_mut().find(|m| m.name == name).unwrap();
        m.spec_version = spec.into();
        m.running_version = running.map(Into::into);
    }

    #[test]
    fn followers_roll_first_one_at_a_time_and_the_leader_last_after_handing_over() {
        let (old, new) = ("3.5.36", "3.6.17");
        let mut f = cluster(new, old);
        let upgrade = |name: &str, done| Step::Upgrade {
            name: name.into(),
            to: new.into(),
            done,
            total: 3,
        };
        assert_eq!(plan(&f), upgrade("b", 0), "the oldest follower first");
        set(&mut f, "b", new, Some(old));
        assert!(
            matches!(plan(&f), Step::Wait(m) if m == "member b runs etcd 3.5.36 while its spec asks for 3.6.17: its Pod is being replaced"),
            "{:?}",
            plan(&f)
        );
        set(&mut f, "b", new, None);
        f.raft_index.remove(&2);
        f.members[1].pod_stuck = Some("CrashLoopBackOff".into());
        assert!(
            matches!(plan(&f), Step::Wait(m) if m.ends_with("its Pod cannot start: CrashLoopBackOff")),
            "a member that fails on the new version stops the rollout, named"
        );
        f.members[1].pod_stuck = None;
        set(&mut f, "b", new, Some(new));
        f.raft_index.insert(2, 100);
        f.raft_index.remove(&3);
        assert!(
            matches!(plan(&f), Step::Wait(m) if m.contains("member c did not answer")),
            "an unhealthy cluster waits"
        );
        f.raft_index.insert(3, 100);
        assert_eq!(plan(&f), upgrade("c", 1));
        set(&mut f, "c", new, Some(new));
        assert_eq!(
            plan(&f),
            Step::MoveLeader {
                from: "a".into(),
                to: "b".into(),
                to_id: 2,
                then: Then::Upgrade
            }
        );
        f.leader_id = Some(2);
        assert_eq!(plan(&f), upgrade("a", 2));
        set(&mut f, "a", new, Some(new));
        assert_eq!(plan(&f), Step::Idle);
        let live: Vec<&MemberFacts> = f.members.iter().collect();
        assert_eq!(progress(new, &live), None);
    }

    #[test]
    fn a_member_that_fails_on_the_new_version_stops_the_rollout_and_rolls_back_with_the_spec() {
        let (old, new) = ("3.6.5", "3.6.17");
        let mut f = cluster(new, old);
        set(&mut f, "b", new, None);
        f.raft_index.remove(&2);
        f.members[1].failures = 5;
        f.members[1].pod_stuck = Some("CrashLoopBackOff".into());
        // At the crash-loop threshold, but not replaced: the rollout stops.
        assert!(
            matches!(plan(&f), Step::Wait(m) if m.starts_with("member b is restarting on etcd 3.6.17: its Pod cannot start")),
            "{:?}",
            plan(&f)
        );
        // spec.version back: b is restarted on the old version, though down.
        f.target_version = old.into();
        assert_eq!(
            plan(&f),
            Step::Upgrade {
                name: "b".into(),
                to: old.into(),
                done: 2,
                total: 3
            }
        );
        // A member merely silent, not failing, is waited for.
        f.members[1].failures = 0;
        f.members[1].pod_stuck = None;
        assert!(matches!(plan(&f), Step::Wait(m) if m.contains("member b did not answer")));
    }

    #[test]
    fn a_single_member_is_restarted_without_a_handover() {
        let mut f = cluster("3.6.17", "3.6.5");
        f.desired = 1;
        f.members.truncate(1);
        f.etcd_members.as_mut().unwrap().truncate(1);
        f.raft_index.retain(|id, _| *id == 1);
        assert_eq!(
            plan(&f),
            Step::Upgrade {
                name: "a".into(),
                to: "3.6.17".into(),
                done: 0,
                total: 1
            }
        );
    }

    #[test]
    fn a_memory_cluster_is_refused_because_a_restart_loses_its_data() {
        let mut f = cluster("3.6.17", "3.6.5");
        f.memory = true;
        assert!(
            matches!(plan(&f), Step::Refuse { message, .. } if message.contains("tmpfs")),
            "{:?}",
            plan(&f)
        );
    }

    #[test]
    fn nothing_else_moves_while_a_pod_runs_another_version_than_its_spec() {
        let mut f = cluster("3.6.17", "3.6.5");
        // b was told 3.6.10 (an earlier target) and still runs 3.6.5; the
        // target moved on meanwhile.
        set(&mut f, "b", "3.6.10", Some("3.6.5"));
        assert!(matches!(plan(&f), Step::Wait(m) if m.contains("member b runs etcd 3.6.5")));
        // The same holds off a scale-down.
        f.desired = 2;
        assert!(matches!(plan(&f), Step::Wait(m) if m.contains("member b runs etcd 3.6.5")));
    }

    #[test]
    fn the_next_member_waits_for_the_last_to_catch_up() {
        let mut f = cluster("3.6.17", "3.6.5");
        set(&mut f, "b", "3.6.17", Some("3.6.17"));
        f.raft_index.insert(2, 40);
        assert!(
            matches!(plan(&f), Step::Wait(m) if m.contains("member b runs etcd 3.6.17 and is catching up")),
            "{:?}",
            plan(&f)
        );
    }

    #[test]
    fn new_members_join_on_what_the_cluster_runs_until_the_rollout_begins() {
        let mut f = cluster("3.6.17", "3.5.21");
        assert_eq!(
            join_version(&f),
            "3.5.21",
            "a refused target is not joined on"
        );
        set(&mut f, "b", "3.6.17", Some("3.6.17"));
        assert_eq!(join_version(&f), "3.6.17", "once begun, the target");
        let f = cluster("3.6.17", "3.6.17");
        assert_eq!(join_version(&f), "3.6.17");
    }

    #[test]
    fn a_lone_member_that_fails_on_its_version_is_rolled_back_without_quorum() {
        let mut f = cluster("3.6.5", "3.6.5");
        f.desired = 1;
        f.members.truncate(1);
        f.etcd_members.as_mut().unwrap().truncate(1);
        set(&mut f, "a", "3.6.99", None);
        f.members[0].pod_stuck = Some("ErrImagePull".into());
        f.quorum_verified = false;
        f.raft_index.clear();
        assert_eq!(
            plan(&f),
            Step::Upgrade {
                name: "a".into(),
                to: "3.6.5".into(),
                done: 0,
                total: 1
            }
        );
        // Across a minor that some member may have moved the cluster to:
        // not without quorum.
        f.target_version = "3.5.36".into();
        set(&mut f, "a", "3.6.99", None);
        assert_eq!(plan(&f), Step::Wait("quorum is not verified".into()));
    }

    #[test]
    fn a_crash_looping_member_behind_the_target_is_rolled_not_replaced() {
        let mut f = cluster("3.6.5", "3.6.5");
        set(&mut f, "b", "3.6.99", None);
        f.members[1].failures = 7;
        f.raft_index.remove(&2);
        assert!(
            matches!(plan(&f), Step::Upgrade { name, .. } if name == "b"),
            "{:?}",
            plan(&f)
        );
        // A crash loop on the version everyone runs is replaced as ever.
        set(&mut f, "b", "3.6.5", None);
        assert!(
            matches!(plan(&f), Step::Replace { name, .. } if name == "b"),
            "{:?}",
            plan(&f)
        );
    }

    #[test]
    fn progress_is_none_once_every_member_runs_the_target() {
        let f = cluster("3.6.17", "3.6.17");
        assert_eq!(plan(&f), Step::Idle);
        let live: Vec<&MemberFacts> = f.members.iter().collect();
        assert_eq!(progress("3.6.17", &live), None);
    }

    #[test]
    fn an_unsupported_target_is_refused_before_any_member_moves() {
        let f = cluster("3.7.4", "3.5.36");
        assert!(
            matches!(plan(&f), Step::Refuse { message: m, .. } if m.contains("skips a minor")),
            "{:?}",
            plan(&f)
        );
        let f = cluster("3.6.17", "3.5.21");
        assert!(matches!(plan(&f), Step::Refuse { message: m, .. } if m.contains("3.5.26")));
        let live: Vec<&MemberFacts> = f.members.iter().collect();
        assert_eq!(
            progress("3.6.17", &live).as_deref(),
            Some("rolling the members to etcd 3.6.17: 0 of 3 run it")
        );
    }

    #[test]
    fn etcds_supported_paths_pass_and_the_others_name_the_way_forward() {
        assert_eq!(refusal(v("3.6.5"), v("3.6.17"), &[6]), None, "patch up");
        assert_eq!(refusal(v("3.6.17"), v("3.6.5"), &[6]), None, "patch down");
        assert_eq!(refusal(v("3.6.17"), v("3.7.4"), &[6]), None, "one minor up");
        assert_eq!(refusal(v("3.5.36"), v("3.6.17"), &[5]), None);
        let early = refusal(v("3.5.21"), v("3.6.17"), &[5]).unwrap();
        assert!(
            early.contains("3.5.26 or a later 3.5 release first"),
            "{early}"
        );
        let skip = refusal(v("3.5.36"), v("3.7.4"), &[5]).unwrap();
        assert!(
            skip.contains("set spec.version to a 3.6 release first"),
            "{skip}"
        );
        let down = refusal(v("3.6.17"), v("3.5.36"), &[6]).unwrap();
        assert!(down.contains("downgrade API"), "{down}");
        assert_eq!(
            refusal(v("3.6.17"), v("3.5.36"), &[5, 6]),
            None,
            "rolling back a partial upgrade: the cluster version is still 3.5"
        );
        assert!(refusal(v("3.6.17"), v("4.0.0"), &[6]).is_some());
    }
}

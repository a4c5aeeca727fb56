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

/// `broken` failed after a rollout changed its version: it asks for a
/// version no other live member runs.
pub fn failed_on_new_version(broken: &MemberFacts, live: &[&MemberFacts]) -> bool {
    live.iter().any(|m| {
        m.name != broken.name
            && m.running_version
                .as_deref()
                .is_some_and(|r| r != broken.spec_version)
    })
}

/// The next step of the rollout to `f.target_version`, or None when every
/// live member runs it (or the target does not parse; CEL keeps it X.Y.Z).
/// The caller has checked quorum and that membership matches the target.
pub fn next(live: &[&MemberFacts], listed: &[EtcdListed], f: &Facts) -> Option<Step> {
    let target = Version::parse(&f.target_version)?;
    let to = f.target_version.as_str();

    // A member already told to move must be seen running the target (etcd's
    // word) before anyone else moves.
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
    let mut behind: Vec<&&MemberFacts> = live.iter().filter(|m| m.spec_version != to).collect();
    if behind.is_empty() {
        return None;
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
            let minors: Vec<u32> = live
                .iter()
                .filter_map(|k| Version::parse(k.running_version.as_deref()?))
                .map(|v| v.minor)
                .collect();
            if let Some(why) = refusal(from, target, &minors) {
                return Some(Step::Refuse(why));
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
    let minors: Vec<u32> = live
        .iter()
        .filter_map(|m| Version::parse(m.running_version.as_deref()?))
        .map(|v| v.minor)
        .collect();
    for m in &behind {
        let Some(from) = m.running_version.as_deref().and_then(Version::parse) else {
            return Some(Step::Wait(format!(
                "member {} has not reported its etcd version",
                m.name
            )));
        };
        if let Some(why) = refusal(from, target, &minors) {
            return Some(Step::Refuse(why));
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
    if Some(next.name.as_str()) == leader {
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
            matches!(plan(&f), Step::Wait(m) if m == "member b is restarting on etcd 3.6.17: etcd still reports 3.5.36")
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
            matches!(plan(&f), Step::Refuse(m) if m.contains("skips a minor")),
            "{:?}",
            plan(&f)
        );
        let f = cluster("3.6.17", "3.5.21");
        assert!(matches!(plan(&f), Step::Refuse(m) if m.contains("3.5.26")));
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

//! Decides the one membership step a reconcile may take.
//!
//! Pure: it sees facts (what Kubernetes holds, what etcd said in this
//! reconcile's probe, whether etcd confirmed a quorum) and returns a
//! [`Step`]. The act stage carries the step out. Keeping the decision apart
//! from the side effects lets every rule be tested as a scenario, and makes
//! "no membership change without verified quorum" a property of one function.

use std::collections::HashMap;

use steward_policy_sdk::{EtcdMember as EtcdListed, quorum};

use crate::resources::listed_member_name;

/// What the planner knows about one EtcdMember object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberFacts {
    pub name: String,
    /// Creation order; newest members are removed first.
    pub created_ms: i64,
    pub dormant: bool,
    pub deleting: bool,
    /// Consecutive Pod failures without becoming Ready.
    pub failures: u32,
    /// Why its Pod's container cannot start, if the kubelet says
    /// ([`crate::facts::PodFacts::stuck`]): named in the wait it causes.
    pub pod_stuck: Option<String>,
    /// The version its EtcdMember asks for.
    pub spec_version: String,
    /// The version etcd reported for it in this reconcile, if it answered.
    pub running_version: Option<String>,
    /// Its database file's size and the part in use, if it answered.
    pub db_size: Option<u64>,
    pub db_in_use: Option<u64>,
    /// etcd reports a NOSPACE alarm for it.
    pub no_space: bool,
    /// When the operator last defragmented it (the status remembers).
    pub last_defrag_ms: Option<i64>,
    /// What that defragmentation reclaimed, in bytes.
    pub last_reclaimed: Option<u64>,
    /// A voter, as its EtcdMember records etcd's last word (the seed from
    /// the start): what quorum is counted against when etcd cannot list.
    pub voter: bool,
    /// Why its data is known to be gone for good (its PVC deleted or
    /// replaced), if it is ([`crate::member::volume::data_lost`]).
    pub data_lost: Option<String>,
    /// Its applied raft index and revision, if it answered.
    pub applied_index: Option<u64>,
    pub revision: Option<i64>,
    /// No Pod exists for it: with its data gone too, it cannot vote.
    pub pod_absent: bool,
    /// `spec.forceNewCluster` ([`super::recovery`]).
    pub force_new_cluster: bool,
    /// Its Pod runs etcd with `--force-new-cluster`.
    pub pod_forced: bool,
}

/// Everything the planner needs, gathered by the observe stage.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    pub desired: u32,
    pub deleting: bool,
    pub cluster_id_latched: bool,
    /// Why the seed cannot be restored from `spec.bootstrap.restore`
    /// (reason, message, whether it may pass: a source still being taken,
    /// a store not answering): no seed is created.
    pub restore_refused: Option<(&'static str, String, bool)>,
    /// Why the seed's certificates are not there yet
    /// ([`crate::certificates::Issuance::blocks_seed`]): (reason, message,
    /// retry), as for a restore.
    pub certificates_pending: Option<(&'static str, String, bool)>,
    /// etcd confirmed a quorum in this reconcile's probe (the host's own
    /// check, [`crate::facts::quorum`]; never the policy's word).
    pub quorum_verified: bool,
    pub members: Vec<MemberFacts>,
    /// etcd's own member list from this reconcile, if it answered.
    pub etcd_members: Option<Vec<EtcdListed>>,
    /// Raft index per member ID, from this reconcile's Status answers.
    pub raft_index: HashMap<u64, u64>,
    pub leader_id: Option<u64>,
    /// How far behind the leader a learner may be and still count as caught up.
    pub promote_max_lag: u64,
    /// Failures in a row that make a member crash-looping (0: never).
    pub crash_loop_threshold: u32,
    /// `spec.version`: what every member should run ([`super::rollout`]).
    pub target_version: String,
    /// `spec.storage.medium` is Memory: a restart loses a member's data.
    pub memory: bool,
    /// `spec.maintenance.defrag` ([`super::maintenance`]).
    pub defrag: Option<crate::api::DefragSpec>,
    /// The backend quota, in bytes (the flag, or etcd's default).
    pub quota_bytes: u64,
    /// The observation's time, for schedules and cooldowns.
    pub now_ms: i64,
    /// `spec.recovery` and what it acts on ([`super::recovery`]).
    pub recovery: super::recovery::RecoveryFacts,
    /// etcd authentication: wanted, on, and the Secret's state.
    pub auth: crate::auth::AuthFacts,
}

impl Facts {
    /// Members in a crash loop, oldest first.
    pub fn crash_looping<'a>(&'a self) -> impl Iterator<Item = &'a MemberFacts> + 'a {
        self.members.iter().filter(|m| {
            !m.dormant && !m.deleting && is_crash_looping(m.failures, self.crash_loop_threshold)
        })
    }
}

/// `failures` in a row reach the threshold (0 turns self-heal off).
pub fn is_crash_looping(failures: u32, threshold: u32) -> bool {
    threshold > 0 && failures >= threshold
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to change.
    Idle,
    /// A change is due but must wait; the text says for what.
    Wait(String),
    /// Create the seed EtcdMember (initial-cluster-state=new, only itself).
    CreateSeed,
    /// MemberAddAsLearner for a new member, then create its EtcdMember.
    AddLearner,
    /// etcd lists a member that has no EtcdMember: the operator stopped
    /// between MemberAdd and creating the object. Create it now.
    Adopt { name: String },
    /// The learner caught up with the leader.
    Promote { name: String, id: u64 },
    /// Delete this EtcdMember; its finalizer runs MemberRemove.
    Remove { name: String },
    /// The member to remove or upgrade leads: hand leadership to the most
    /// up-to-date answering voter first (MoveLeader), so the change costs
    /// no election. The next reconcile takes the step that needed it.
    MoveLeader {
        from: String,
        to: String,
        to_id: u64,
        then: Then,
    },
    /// Set this member's version to `to`; its Pod is replaced on the same
    /// volume ([`super::rollout`]). `done` of `total` members run `to`.
    Upgrade {
        name: String,
        to: String,
        done: usize,
        total: usize,
    },
    /// Defragment this member's database (`why` says which threshold).
    Defragment {
        name: String,
        id: u64,
        why: String,
        clear_no_space: bool,
    },
    /// Every member answers under the quota, and the cluster still has
    /// the NOSPACE alarms of these members: disarm them
    /// (`clearNoSpaceAlarm`).
    DisarmNoSpace { members: Vec<String> },
    /// The spec asks for something the operator will not do (a version
    /// change etcd does not support, a schedule that does not parse); the
    /// message says why and what to do. Nothing is done until the spec
    /// changes: `Stalled=True` with `reason`.
    Refuse {
        reason: &'static str,
        message: String,
    },
    /// The member's Pod keeps failing: remove it like a scale-down (its
    /// finalizer runs MemberRemove, its PVC goes with it); a fresh member
    /// is added by the next reconciles.
    Replace { name: String, failures: u32 },
    /// replicas went to 0: keep the last member and its PVC, stop its Pod.
    MakeDormant { name: String },
    /// replicas went above 0 again: restart the dormant member.
    Wake { name: String },
    /// The member's data is gone for good (its PVC deleted or replaced):
    /// remove it like a scale-down and let a fresh member join, rather
    /// than start etcd on an empty volume under its old identity.
    ReplaceLost { name: String, why: String },
    /// Quorum is lost for good: restart `name` once with
    /// `--force-new-cluster` ([`super::recovery`]).
    ForceNewCluster {
        name: String,
        mode: crate::api::QuorumLossMode,
        applied: u64,
        revision: Option<i64>,
        lost: Vec<String>,
    },
    /// The forced cluster lists only `name`: clear its flag, so no later
    /// Pod of it starts with `--force-new-cluster`.
    EndForceNewCluster { name: String },
    /// Create etcd's root user and role from the Secret and turn
    /// authentication on ([`crate::auth`]).
    EnableAuth,
    /// Set root's password in etcd to the one in `secret`.
    ChangeRootPassword { secret: String },
    /// Turn etcd authentication off (`spec.auth.enabled: false`).
    DisableAuth,
    /// Quorum is lost and no voter's data survives: abandon every member,
    /// unlatch the cluster ID and restore a new seed from `snapshot`
    /// ([`super::recovery`]).
    RestoreFromSnapshot {
        snapshot: String,
        revision: Option<i64>,
        mode: crate::api::QuorumLossMode,
        lost: Vec<String>,
    },
}

/// What leadership moves away for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    Remove,
    Upgrade,
    Defragment,
}

impl Then {
    fn verb(self) -> &'static str {
        match self {
            Then::Remove => "remove",
            Then::Upgrade => "upgrade",
            Then::Defragment => "defragment",
        }
    }
}

impl Step {
    /// Steps that change etcd membership, leadership, a member's version or
    /// the member set.
    pub fn changes_membership(&self) -> bool {
        !matches!(self, Step::Idle | Step::Wait(_) | Step::Refuse { .. })
    }

    /// What the operator does next, in words, for the status.
    pub fn describe(&self) -> Option<String> {
        Some(match self {
            Step::Idle => return None,
            Step::Wait(why) => format!("waiting: {why}"),
            Step::CreateSeed => "next: create the seed member".to_owned(),
            Step::AddLearner => "next: add a learner (MemberAddAsLearner)".to_owned(),
            Step::Adopt { name } => {
                format!("next: create EtcdMember {name} for the learner etcd already lists")
            }
            Step::Promote { name, .. } => format!("next: promote learner {name}, caught up"),
            Step::Remove { name } => format!("next: remove member {name}"),
            Step::MoveLeader { from, to, then, .. } => format!(
                "next: move leadership from {from} to {to} (MoveLeader), then {} {from}",
                then.verb()
            ),
            Step::Upgrade {
                name,
                to,
                done,
                total,
            } => format!(
                "next: restart member {name} on etcd {to} ({done} of {total} members run it)"
            ),
            Step::Defragment { name, why, .. } => {
                format!("next: defragment member {name} ({why})")
            }
            Step::DisarmNoSpace { members } => format!(
                "next: disarm the NOSPACE alarm of {}, every member is under the quota",
                members.join(", ")
            ),
            Step::Refuse { message, .. } => format!("refused: {message}"),
            Step::Replace { name, failures } => {
                format!("next: replace member {name}, which failed {failures} times in a row")
            }
            Step::MakeDormant { name } => format!("next: make {name} dormant"),
            Step::Wake { name } => format!("next: wake dormant member {name}"),
            Step::ReplaceLost { name, why } => {
                format!("next: replace member {name}, whose data is gone ({why})")
            }
            Step::ForceNewCluster { name, applied, .. } => format!(
                "next: recover from quorum loss: restart member {name} (applied index {applied}) alone with --force-new-cluster"
            ),
            Step::EndForceNewCluster { name } => {
                format!("next: restart member {name} without --force-new-cluster")
            }
            Step::EnableAuth => {
                "next: create etcd's root user and turn authentication on".to_owned()
            }
            Step::ChangeRootPassword { secret } => {
                format!("next: set etcd's root password to the one in Secret {secret}")
            }
            Step::DisableAuth => "next: turn etcd authentication off".to_owned(),
            Step::RestoreFromSnapshot { snapshot, .. } => format!(
                "next: recover from quorum loss: abandon every member and restore a new seed from EtcdSnapshot {snapshot}"
            ),
        })
    }
}

pub fn plan(f: &Facts) -> Step {
    if f.deleting {
        return Step::Idle;
    }
    let live: Vec<&MemberFacts> = f.members.iter().filter(|m| !m.deleting).collect();
    // Before waiting on a removal: a member being removed whose finalizer
    // needs a quorum that is lost for good would wait forever.
    if !f.quorum_verified && f.cluster_id_latched {
        let all: Vec<&MemberFacts> = f.members.iter().collect();
        if let Some(step) = super::recovery::plan(&all, f) {
            return step;
        }
    }
    if f.members.iter().any(|m| m.deleting) {
        return Step::Wait("a member is being removed".into());
    }

    if f.desired == 0 {
        return match live.as_slice() {
            [] => Step::Idle,
            [only] if only.dormant => Step::Idle,
            [only] => Step::MakeDormant {
                name: only.name.clone(),
            },
            _ if !f.quorum_verified => Step::Wait("quorum is not verified".into()),
            many => match &f.etcd_members {
                Some(listed) => scale_down(many, listed, f),
                None => Step::Wait("etcd's member list is unknown".into()),
            },
        };
    }

    if let Some(dormant) = live.iter().find(|m| m.dormant) {
        return Step::Wake {
            name: dormant.name.clone(),
        };
    }
    if live.is_empty() {
        return if f.cluster_id_latched {
            Step::Wait("every member object is gone but the cluster ID is latched; not re-seeding over existing data".into())
        } else if let Some((reason, message, retry)) = &f.certificates_pending {
            // A seed Pod without its certificates could not start; nor
            // could a restore, which runs in that Pod.
            if *retry {
                Step::Wait(message.clone())
            } else {
                Step::Refuse {
                    reason,
                    message: format!("not creating the seed: {message}"),
                }
            }
        } else if let Some((reason, message, retry)) = &f.restore_refused {
            if *retry {
                Step::Wait(format!("waiting to restore ({reason}): {message}"))
            } else {
                Step::Refuse {
                    reason,
                    message: format!("not restoring: {message}"),
                }
            }
        } else {
            Step::CreateSeed
        };
    }
    if !f.cluster_id_latched {
        // A restore from a snapshot that could not abandon every lost
        // member at once goes on with the rest.
        if f.recovery.restoring_from.is_some()
            && let Some(step) = super::recovery::plan(&live, f)
        {
            return step;
        }
        let stuck = live
            .iter()
            .find_map(|m| Some((&m.name, m.pod_stuck.as_ref()?)));
        return Step::Wait(match stuck {
            Some((name, why)) => {
                format!(
                    "waiting for the seed member to form the cluster; {name}'s Pod cannot start: {why}"
                )
            }
            None => "waiting for the seed member to form the cluster".into(),
        });
    }
    if !f.quorum_verified {
        return super::rollout::rescue(&live, f)
            .unwrap_or_else(|| Step::Wait("quorum is not verified".into()));
    }
    let Some(listed) = &f.etcd_members else {
        return Step::Wait("etcd's member list is unknown".into());
    };
    if let Some(step) = super::recovery::finish(&live, listed) {
        return step;
    }

    // An added learner that never started and has no EtcdMember: the
    // operator stopped between MemberAdd and creating the object. Finish
    // the add. A *started* member without an object is one whose removal a
    // lagging member has not applied yet; it must never be re-created.
    for m in listed.iter().filter(|m| m.is_learner && m.name.is_empty()) {
        if let Some(name) = listed_member_name(m)
            && !live.iter().any(|k| k.name == name)
        {
            return Step::Adopt {
                name: name.to_owned(),
            };
        }
    }
    if let Some(stranger) = listed
        .iter()
        .filter_map(listed_member_name)
        .find(|name| !live.iter().any(|k| k.name == *name))
    {
        return Step::Wait(format!(
            "etcd still lists {stranger}, which has no EtcdMember (a removal not yet applied everywhere)"
        ));
    }

    // Before promoting or adding: a crash-looping learner would never
    // catch up, and a crash-looping voter is a lost vote.
    // Not one that fails on the version a rollout just gave it: a fresh
    // member would hide the failure and carry the rollout on. The rollout
    // stops there instead, and names it.
    // One behind the target is restarted on it instead (how setting
    // spec.version back recovers a member that failed on the new one).
    if let Some(lost) = live.iter().find(|m| m.data_lost.is_some()) {
        let why = lost.data_lost.clone().unwrap_or_default();
        let what = format!("the data of member {} is gone ({why})", lost.name);
        return match replace(lost, listed, f, &what) {
            Step::Replace { name, .. } => Step::ReplaceLost { name, why },
            wait => wait,
        };
    }
    if let Some(broken) = f.crash_looping().next() {
        let behind = broken.spec_version != f.target_version;
        if behind || super::rollout::failed_on_new_version(broken, &live, f) {
            return super::rollout::next(&live, listed, f).unwrap_or_else(|| {
                Step::Wait(format!("member {} fails on its new version", broken.name))
            });
        }
        let what = format!(
            "member {} failed {} times in a row",
            broken.name, broken.failures
        );
        return replace(broken, listed, f, &what);
    }
    // A Pod being replaced for its version: nothing else changes meanwhile.
    if let Some(m) = super::rollout::in_flight(&live) {
        return Step::Wait(format!(
            "member {} runs etcd {} while its spec asks for {}: its Pod is being replaced",
            m.name,
            m.running_version.as_deref().unwrap_or_default(),
            m.spec_version
        ));
    }

    if let Some(learner) = listed.iter().find(|m| m.is_learner) {
        let name = listed_member_name(learner).unwrap_or_default().to_owned();
        let leader_index = f.leader_id.and_then(|l| f.raft_index.get(&l)).copied();
        let learner_index = f.raft_index.get(&learner.id).copied();
        return match (learner_index, leader_index) {
            (Some(li), Some(ld)) if li + f.promote_max_lag >= ld => Step::Promote {
                name,
                id: learner.id,
            },
            (Some(li), Some(ld)) => Step::Wait(format!(
                "learner {name} is catching up (raft index {li}, leader {ld})"
            )),
            _ => Step::Wait(
                match live
                    .iter()
                    .find(|m| m.name == name)
                    .and_then(|m| m.pod_stuck.as_ref())
                {
                    Some(why) => {
                        format!("learner {name} has not answered yet; its Pod cannot start: {why}")
                    }
                    None => format!("learner {name} has not answered yet"),
                },
            ),
        };
    }

    let voters = listed.iter().filter(|m| !m.is_learner).count() as u32;
    if voters < f.desired {
        return Step::AddLearner;
    }
    if voters > f.desired {
        return scale_down(&live, listed, f);
    }
    super::rollout::next(&live, listed, f)
        .or_else(|| crate::auth::next(&f.auth))
        .or_else(|| super::maintenance::next(&live, listed, f))
        .unwrap_or(Step::Idle)
}

/// Replace a crash-looping member, unless that would leave the voters
/// without a quorum of the smaller cluster. The member's finalizer checks
/// the same against etcd before MemberRemove; checking here too keeps a
/// member from sitting half-deleted while quorum is short.
fn replace(broken: &MemberFacts, listed: &[EtcdListed], f: &Facts, what: &str) -> Step {
    let voters: Vec<u64> = listed
        .iter()
        .filter(|m| !m.is_learner)
        .map(|m| m.id)
        .collect();
    let in_etcd = listed
        .iter()
        .find(|m| listed_member_name(m) == Some(broken.name.as_str()));
    if let Some(m) = in_etcd.filter(|m| !m.is_learner) {
        let answering_others = voters
            .iter()
            .filter(|&&id| id != m.id && f.raft_index.contains_key(&id))
            .count();
        let needed = quorum(voters.len() - 1);
        if answering_others < needed {
            return Step::Wait(format!(
                "{what}; replacing it needs {needed} of the other {} voters answering, {answering_others} do",
                voters.len() - 1
            ));
        }
    }
    Step::Replace {
        name: broken.name.clone(),
        failures: broken.failures,
    }
}

/// Scale-down removes the newest member. When it leads, leadership moves
/// first ([`move_leadership_off`]), so the removal does not leave the
/// cluster without a leader for an election timeout.
fn scale_down(live: &[&MemberFacts], listed: &[EtcdListed], f: &Facts) -> Step {
    let Some(newest) = live.iter().max_by_key(|m| m.created_ms) else {
        return Step::Wait("no member can be removed safely".into());
    };
    let leads = f
        .leader_id
        .and_then(|id| listed.iter().find(|m| m.id == id))
        .is_some_and(|l| listed_member_name(l) == Some(newest.name.as_str()));
    if !leads {
        return Step::Remove {
            name: newest.name.clone(),
        };
    }
    move_leadership_off(&newest.name, listed, live, f, Then::Remove)
}

/// MoveLeader from `name`, the leader, to the answering voter with the
/// highest raft index (the most up-to-date follower; the lowest ID on a
/// tie), or a wait that says why not.
pub(super) fn move_leadership_off(
    name: &str,
    listed: &[EtcdListed],
    live: &[&MemberFacts],
    f: &Facts,
    then: Then,
) -> Step {
    let Some(leader) = f
        .leader_id
        .and_then(|id| listed.iter().find(|m| m.id == id))
    else {
        return Step::Wait(format!("no leader is known to move away from {name}"));
    };
    if !f.raft_index.contains_key(&leader.id) {
        return Step::Wait(format!(
            "{name} leads but did not answer; leadership can only be moved by the leader"
        ));
    }
    let successor = listed
        .iter()
        .filter(|m| !m.is_learner && m.id != leader.id)
        .filter_map(|m| Some((f.raft_index.get(&m.id)?, m)))
        .filter(|(_, m)| {
            live.iter()
                .any(|k| Some(k.name.as_str()) == listed_member_name(m))
        })
        .max_by_key(|(index, m)| (**index, std::cmp::Reverse(m.id)));
    match successor {
        Some((_, m)) => Step::MoveLeader {
            from: name.to_owned(),
            to: listed_member_name(m).unwrap_or_default().to_owned(),
            to_id: m.id,
            then,
        },
        None => Step::Wait(format!(
            "{name} leads; no other voter answered to take over leadership before the {} step",
            then.verb()
        )),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn member(name: &str, created_ms: i64) -> MemberFacts {
        MemberFacts {
            name: name.into(),
            created_ms,
            dormant: false,
            deleting: false,
            failures: 0,
            pod_stuck: None,
            spec_version: "3.6.17".into(),
            running_version: Some("3.6.17".into()),
            db_size: None,
            db_in_use: None,
            no_space: false,
            last_defrag_ms: None,
            last_reclaimed: None,
            voter: true,
            data_lost: None,
            applied_index: None,
            revision: None,
            pod_absent: false,
            force_new_cluster: false,
            pod_forced: false,
        }
    }

    #[test]
    fn a_wait_on_a_pod_that_cannot_start_names_the_kubelets_reason() {
        let pull = "ErrImagePull: failed to pull image \"quay.io/coreos/etcd:v3.6.99\"";
        let f = Facts {
            desired: 3,
            members: vec![MemberFacts {
                pod_stuck: Some(pull.into()),
                ..member("a", 1)
            }],
            ..Facts::default()
        };
        assert!(
            matches!(plan(&f), Step::Wait(m) if m.ends_with(&format!("a's Pod cannot start: {pull}"))),
            "{:?}",
            plan(&f)
        );
        let mut f = healthy(3, &["a", "b"]);
        f.members.push(MemberFacts {
            pod_stuck: Some(pull.into()),
            ..member("c", 9)
        });
        f.etcd_members.as_mut().unwrap().push(listed(3, "c", true));
        assert_eq!(
            plan(&f),
            Step::Wait(format!(
                "learner c has not answered yet; its Pod cannot start: {pull}"
            ))
        );
    }

    pub(crate) fn listed(id: u64, name: &str, learner: bool) -> EtcdListed {
        EtcdListed {
            id,
            name: name.into(),
            peer_urls: vec![format!("http://{name}.etcd.default.svc:2380")],
            client_urls: vec![],
            is_learner: learner,
        }
    }

    fn healthy(desired: u32, names: &[&str]) -> Facts {
        Facts {
            desired,
            cluster_id_latched: true,
            quorum_verified: true,
            members: names
                .iter()
                .enumerate()
                .map(|(i, n)| member(n, i as i64))
                .collect(),
            etcd_members: Some(
                names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| listed(i as u64 + 1, n, false))
                    .collect(),
            ),
            raft_index: (1..=names.len() as u64).map(|id| (id, 100)).collect(),
            leader_id: Some(1),
            promote_max_lag: 0,
            crash_loop_threshold: 5,
            target_version: "3.6.17".into(),
            ..Facts::default()
        }
    }

    #[test]
    fn a_restore_that_does_not_check_out_creates_no_seed() {
        let f = Facts {
            desired: 3,
            restore_refused: Some((
                "RestoreChecksumMismatch",
                "s3://b/k.db has sha256 01, not 02".into(),
                false,
            )),
            ..Facts::default()
        };
        assert_eq!(
            plan(&f),
            Step::Refuse {
                reason: "RestoreChecksumMismatch",
                message: "not restoring: s3://b/k.db has sha256 01, not 02".into()
            }
        );
        // A source that may still come (a snapshot being taken) is waited for.
        let f = Facts {
            restore_refused: Some((
                "RestoreSourceNotVerified",
                "EtcdSnapshot ns/s is not Complete".into(),
                true,
            )),
            ..f
        };
        assert!(matches!(plan(&f), Step::Wait(m) if m.contains("RestoreSourceNotVerified")));
    }

    /// No seed without its certificates: refused while cert-manager is not
    /// installed, waited for while a Certificate is not Ready; members
    /// already running are not held by either.
    #[test]
    fn the_seed_waits_for_its_certificates() {
        let f = Facts {
            desired: 3,
            certificates_pending: Some((
                "CertManagerNotInstalled",
                "cert-manager is not installed".into(),
                false,
            )),
            ..Facts::default()
        };
        assert_eq!(
            plan(&f),
            Step::Refuse {
                reason: "CertManagerNotInstalled",
                message: "not creating the seed: cert-manager is not installed".into()
            }
        );
        let f = Facts {
            certificates_pending: Some((
                "CertificateNotReady",
                "Certificate c-server is not Ready".into(),
                true,
            )),
            ..f
        };
        assert_eq!(
            plan(&f),
            Step::Wait("Certificate c-server is not Ready".into())
        );
        let mut running = healthy(3, &["a", "b"]);
        running.certificates_pending = f.certificates_pending.clone();
        assert_eq!(plan(&running), Step::AddLearner);
    }

    #[test]
    fn an_empty_cluster_starts_with_a_seed() {
        let f = Facts {
            desired: 3,
            ..Facts::default()
        };
        assert_eq!(plan(&f), Step::CreateSeed);
    }

    #[test]
    fn nothing_grows_until_the_seed_latched_the_cluster_id() {
        let mut f = healthy(3, &["a"]);
        f.cluster_id_latched = false;
        assert!(matches!(plan(&f), Step::Wait(_)));
    }

    #[test]
    fn a_short_cluster_adds_one_learner() {
        assert_eq!(plan(&healthy(3, &["a", "b"])), Step::AddLearner);
    }

    #[test]
    fn no_membership_change_without_verified_quorum() {
        for mut f in [healthy(3, &["a", "b"]), healthy(1, &["a", "b", "c"])] {
            f.quorum_verified = false;
            let step = plan(&f);
            assert!(!step.changes_membership(), "{step:?}");
        }
    }

    #[test]
    fn a_caught_up_learner_is_promoted_and_a_lagging_one_waits() {
        let mut f = healthy(3, &["a", "b"]);
        f.members.push(member("c", 9));
        f.etcd_members.as_mut().unwrap().push(listed(3, "c", true));
        f.raft_index.insert(3, 100);
        assert_eq!(
            plan(&f),
            Step::Promote {
                name: "c".into(),
                id: 3
            }
        );
        f.raft_index.insert(3, 40);
        assert!(matches!(plan(&f), Step::Wait(m) if m.contains("catching up")));
    }

    #[test]
    fn an_added_but_never_created_member_is_adopted() {
        let mut f = healthy(3, &["a", "b"]);
        let mut pending = listed(3, "etcd-x7k2p", true);
        pending.name.clear();
        f.etcd_members.as_mut().unwrap().push(pending);
        assert_eq!(
            plan(&f),
            Step::Adopt {
                name: "etcd-x7k2p".into()
            }
        );
    }

    #[test]
    fn a_started_member_without_an_object_is_never_recreated() {
        let mut f = healthy(3, &["a", "b", "c"]);
        f.members.pop();
        assert!(matches!(plan(&f), Step::Wait(m) if m.contains("still lists c")));
    }

    #[test]
    fn scale_down_removes_the_newest_and_moves_leadership_off_it_first() {
        let mut f = healthy(3, &["a", "b", "c", "d", "e"]);
        assert_eq!(plan(&f), Step::Remove { name: "e".into() });
        f.leader_id = Some(5);
        // All caught up: the lowest ID takes over.
        assert_eq!(
            plan(&f),
            Step::MoveLeader {
                from: "e".into(),
                to: "a".into(),
                to_id: 1,
                then: Then::Remove
            }
        );
        // The most up-to-date follower, among those that answered.
        f.raft_index.insert(3, 120);
        f.raft_index.remove(&4);
        assert_eq!(
            plan(&f),
            Step::MoveLeader {
                from: "e".into(),
                to: "c".into(),
                to_id: 3,
                then: Then::Remove
            }
        );
        // No follower answered: nobody to hand over to, so no removal.
        f.raft_index.retain(|id, _| *id == 5);
        assert!(
            matches!(plan(&f), Step::Wait(m) if m.contains("no other voter answered")),
            "{:?}",
            plan(&f)
        );
        // Once e no longer leads, it is removed.
        f.raft_index = (1..=5).map(|id| (id, 100)).collect();
        f.leader_id = Some(2);
        assert_eq!(plan(&f), Step::Remove { name: "e".into() });
    }

    #[test]
    fn one_to_zero_keeps_a_dormant_member_and_zero_to_one_wakes_it() {
        let f = healthy(0, &["a"]);
        assert_eq!(plan(&f), Step::MakeDormant { name: "a".into() });
        let mut f = healthy(1, &["a"]);
        f.members[0].dormant = true;
        assert_eq!(plan(&f), Step::Wake { name: "a".into() });
    }

    #[test]
    fn a_crash_looping_voter_is_replaced_while_the_others_hold_quorum() {
        let mut f = healthy(3, &["a", "b", "c"]);
        f.members[2].failures = 5;
        f.raft_index.remove(&3);
        assert_eq!(
            plan(&f),
            Step::Replace {
                name: "c".into(),
                failures: 5
            }
        );
        // One failure short of the threshold: recreated, not replaced.
        f.members[2].failures = 4;
        assert_eq!(plan(&f), Step::Idle);
        // Self-heal turned off.
        f.members[2].failures = 50;
        f.crash_loop_threshold = 0;
        assert_eq!(plan(&f), Step::Idle);
    }

    #[test]
    fn a_crash_looping_voter_that_quorum_rests_on_is_not_replaced() {
        // b answers between crashes; with c down, a and b are the quorum.
        let mut f = healthy(3, &["a", "b", "c"]);
        f.members[1].failures = 7;
        f.raft_index.remove(&3);
        let step = plan(&f);
        assert!(
            matches!(&step, Step::Wait(m) if m.contains("b failed 7 times") && m.contains("1 do")),
            "{step:?}"
        );
        f.quorum_verified = false;
        assert!(!plan(&f).changes_membership());
    }

    #[test]
    fn a_crash_looping_learner_is_replaced_before_any_promotion() {
        let mut f = healthy(3, &["a", "b"]);
        f.members.push(MemberFacts {
            failures: 5,
            ..member("c", 9)
        });
        f.etcd_members.as_mut().unwrap().push(listed(3, "c", true));
        assert_eq!(
            plan(&f),
            Step::Replace {
                name: "c".into(),
                failures: 5
            }
        );
    }

    #[test]
    fn scaling_down_removes_a_crash_looping_member_first() {
        let mut f = healthy(3, &["a", "b", "c", "d"]);
        f.members[1].failures = 5;
        f.raft_index.remove(&2);
        assert!(matches!(plan(&f), Step::Replace { name, .. } if name == "b"));
    }

    #[test]
    fn steady_state_is_idle() {
        assert_eq!(plan(&healthy(3, &["a", "b", "c"])), Step::Idle);
    }
}

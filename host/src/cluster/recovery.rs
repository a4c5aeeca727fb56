//! Recovery from permanent quorum loss: when a majority of the voters'
//! data is gone for good, waiting can never bring the quorum back.
//!
//! Pure, like the rest of the planner, and decided on the host's own facts
//! only, never on a policy's verdict:
//! - a member's data is gone when the PVC it lived on is deleted or
//!   replaced ([`crate::member::volume::data_lost`]), which the host sees
//!   in the Kubernetes API, *and* no Pod of it exists (a Pod keeps a
//!   deleted claim, and its data, until it is gone, and its etcd may still
//!   vote). A member that merely does not answer is never counted lost: it
//!   may come back.
//! - voters are the members the cluster's own reconcile resolved as voters
//!   (etcd's member list, else the member's answer, else its last known
//!   role), not what an EtcdMember's status last said.
//! - it is *permanent* quorum loss only when the voters whose data remains
//!   are fewer than a quorum of all voters. With 2 of 5 gone the 3 left
//!   still form a quorum, and nothing is forced.
//! - it runs only while this reconcile did not verify a quorum
//!   ([`super::plan::plan`] calls it on that path alone).
//!
//! Recovery restarts the chosen survivor once with `--force-new-cluster`
//! (its EtcdMember's `spec.forceNewCluster`): etcd keeps its data and makes
//! it the only member. [`finish`] then removes the member objects the new
//! cluster does not list and clears the flag, and the ordinary scale-up
//! adds fresh members as learners.
//!
//! With no survivor at all, the cluster is restored from a Complete and
//! Verified EtcdSnapshot of its own (the newest, or the one a person
//! names): the lost members are abandoned (their finalizers need no
//! quorum, there is no cluster left to remove them from), the cluster ID
//! is unlatched, and a new seed restores the snapshot exactly as
//! `spec.bootstrap.restore` would ([`crate::restore`]).

use super::plan::{Facts, MemberFacts, Step};
use crate::api::QuorumLossMode;

/// What the planner knows about recovery, from the spec and status.
#[derive(Clone, Debug, Default)]
pub struct RecoveryFacts {
    pub mode: QuorumLossMode,
    pub grace_ms: i64,
    /// The `etcd.steward.dev/recover-from` annotation, if set.
    pub recover_from: Option<String>,
    /// Since when the cluster has had no verified quorum.
    pub unverified_since_ms: Option<i64>,
    pub cluster: String,
    pub namespace: String,
    /// The snapshot a restore after total loss is in progress from
    /// (`status.lastRecovery.fromSnapshot` while no cluster ID is latched).
    pub restoring_from: Option<String>,
    /// This cluster's Complete and Verified EtcdSnapshots, newest first:
    /// what a cluster with no surviving voter is restored from.
    pub snapshots: Vec<VerifiedSnapshot>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedSnapshot {
    pub name: String,
    pub revision: Option<i64>,
}

/// One surviving voter, with what it answered in this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Survivor {
    pub name: String,
    pub applied: Option<u64>,
    pub revision: Option<i64>,
    /// Being removed: it still votes, but is never recovered from.
    pub deleting: bool,
}

/// A majority of the voters is gone for good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuorumLoss {
    /// (member, why its data is known to be gone)
    pub lost: Vec<(String, String)>,
    pub survivors: Vec<Survivor>,
    /// The answering survivor with the highest applied index (the lowest
    /// name on a tie).
    pub best: Option<Survivor>,
}

/// The voters lost and surviving, when the survivors cannot form a quorum
/// of the voters; None otherwise (nothing lost, or waiting may still bring
/// a quorum back).
pub fn quorum_loss(live: &[&MemberFacts]) -> Option<QuorumLoss> {
    let voters: Vec<&&MemberFacts> = live.iter().filter(|m| m.voter && !m.dormant).collect();
    let lost: Vec<(String, String)> = voters
        .iter()
        .filter(|m| m.pod_absent)
        .filter_map(|m| Some((m.name.clone(), m.data_lost.clone()?)))
        .collect();
    if lost.is_empty() {
        return None;
    }
    let survivors: Vec<Survivor> = voters
        .iter()
        .filter(|m| !lost.iter().any(|(n, _)| *n == m.name))
        .map(|m| Survivor {
            name: m.name.clone(),
            applied: m.applied_index,
            revision: m.revision,
            deleting: m.deleting,
        })
        .collect();
    if survivors.len() >= steward_policy_sdk::quorum(voters.len()) {
        return None;
    }
    let best = survivors
        .iter()
        .filter(|s| s.applied.is_some() && !s.deleting)
        .max_by(|a, b| a.applied.cmp(&b.applied).then(b.name.cmp(&a.name)))
        .cloned();
    Some(QuorumLoss {
        lost,
        survivors,
        best,
    })
}

/// The kubectl command that recovers in Manual mode, from `member` (a
/// surviving member, or `EtcdSnapshot/<name>`).
pub fn manual_command(r: &RecoveryFacts, member: &str) -> String {
    format!(
        "kubectl annotate etcdcluster {} -n {} {}={member}",
        r.cluster,
        r.namespace,
        crate::api::ANNOTATION_RECOVER_FROM
    )
}

fn names(v: &[(String, String)]) -> String {
    v.iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The step for a cluster whose quorum this reconcile did not verify, when
/// its quorum is lost for good; None when it is not (the caller waits).
pub fn plan(live: &[&MemberFacts], f: &Facts) -> Option<Step> {
    if let Some(forced) = live.iter().find(|m| m.force_new_cluster) {
        return Some(Step::Wait(format!(
            "recovering from quorum loss: member {} restarts alone with --force-new-cluster",
            forced.name
        )));
    }
    let loss = quorum_loss(live)?;
    let r = &f.recovery;
    let voters = loss.lost.len() + loss.survivors.len();
    let what = format!(
        "quorum is lost for good: the data of {} of {voters} voters is gone ({})",
        loss.lost.len(),
        names(&loss.lost)
    );
    if loss.survivors.is_empty() {
        return Some(from_snapshot(&loss, &what, f));
    }
    let Some(best) = &loss.best else {
        return Some(Step::Wait(format!(
            "{what}; waiting for a survivor ({}) to answer",
            loss.survivors
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let force = |from: &Survivor, mode| Step::ForceNewCluster {
        name: from.name.clone(),
        mode,
        applied: from.applied.unwrap_or_default(),
        revision: from.revision,
        lost: loss.lost.iter().map(|(n, _)| n.clone()).collect(),
    };
    Some(match r.mode {
        QuorumLossMode::Manual => match &r.recover_from {
            None => Step::Refuse {
                reason: "PermanentQuorumLoss",
                message: format!(
                    "{what}; to recover from {} (applied index {}), the survivor with the most data, run: {}",
                    best.name,
                    best.applied.unwrap_or_default(),
                    manual_command(r, &best.name)
                ),
            },
            Some(name) => match loss
                .survivors
                .iter()
                .find(|s| s.name == *name && s.applied.is_some() && !s.deleting)
            {
                Some(from) => force(from, QuorumLossMode::Manual),
                None => Step::Refuse {
                    reason: "RecoverFromInvalid",
                    message: format!(
                        "{what}; {} names {name}, which is not a surviving voter that answers; the survivor with the most data is {}: {}",
                        crate::api::ANNOTATION_RECOVER_FROM,
                        best.name,
                        manual_command(r, &best.name)
                    ),
                },
            },
        },
        QuorumLossMode::Automatic => {
            let since = r.unverified_since_ms.unwrap_or(i64::MIN);
            let at = since.saturating_add(r.grace_ms);
            if f.now_ms >= at {
                force(best, QuorumLossMode::Automatic)
            } else {
                Step::Wait(format!(
                    "{what}; recovering from {} in {} s (spec.recovery.gracePeriodSeconds)",
                    best.name,
                    (at - f.now_ms + 999) / 1000
                ))
            }
        }
    })
}

/// No voter's data survives: restore the cluster from its newest verified
/// snapshot (Automatic, after the grace period), or from the one a person
/// names (Manual).
fn from_snapshot(loss: &QuorumLoss, what: &str, f: &Facts) -> Step {
    let r = &f.recovery;
    let Some(newest) = r.snapshots.first() else {
        return Step::Refuse {
            reason: "PermanentQuorumLoss",
            message: format!(
                "{what}, no voter's data survives, and this cluster has no Complete and Verified EtcdSnapshot to restore from"
            ),
        };
    };
    let restore = |s: &VerifiedSnapshot, mode| Step::RestoreFromSnapshot {
        snapshot: s.name.clone(),
        revision: s.revision,
        mode,
        lost: loss.lost.iter().map(|(n, _)| n.clone()).collect(),
    };
    let newest_ref = format!("{}{}", crate::api::RECOVER_FROM_SNAPSHOT, newest.name);
    match r.mode {
        QuorumLossMode::Manual => {
            let named = r
                .recover_from
                .as_deref()
                .map(|v| v.strip_prefix(crate::api::RECOVER_FROM_SNAPSHOT));
            match named {
                None => Step::Refuse {
                    reason: "PermanentQuorumLoss",
                    message: format!(
                        "{what}, and no voter's data survives; to restore it from EtcdSnapshot {} (the newest verified one), run: {}",
                        newest.name,
                        manual_command(r, &newest_ref)
                    ),
                },
                Some(Some(name)) if r.snapshots.iter().any(|s| s.name == name) => restore(
                    r.snapshots
                        .iter()
                        .find(|s| s.name == name)
                        .unwrap_or(newest),
                    QuorumLossMode::Manual,
                ),
                Some(_) => Step::Refuse {
                    reason: "RecoverFromInvalid",
                    message: format!(
                        "{what}; {} must name a Complete and Verified EtcdSnapshot of this cluster as EtcdSnapshot/<name>; the newest is {}: {}",
                        crate::api::ANNOTATION_RECOVER_FROM,
                        newest.name,
                        manual_command(r, &newest_ref)
                    ),
                },
            }
        }
        QuorumLossMode::Automatic => {
            let at = r
                .unverified_since_ms
                .unwrap_or(i64::MIN)
                .saturating_add(r.grace_ms);
            if f.now_ms >= at {
                restore(newest, QuorumLossMode::Automatic)
            } else {
                Step::Wait(format!(
                    "{what}, and no voter's data survives; restoring from EtcdSnapshot {} in {} s (spec.recovery.gracePeriodSeconds)",
                    newest.name,
                    (at - f.now_ms + 999) / 1000
                ))
            }
        }
    }
}

/// With quorum verified again after a forced new cluster: remove the
/// member objects etcd no longer lists, one at a time, then clear the
/// survivor's flag. None when no member carries the flag.
pub fn finish(live: &[&MemberFacts], listed: &[steward_policy_sdk::EtcdMember]) -> Option<Step> {
    let Some(forced) = live.iter().find(|m| m.force_new_cluster) else {
        // Cleared, but the Pod started with the flag still runs: nothing
        // joins until it is replaced, or a restart of it would drop them.
        return live.iter().find(|m| m.pod_forced).map(|m| {
            Step::Wait(format!(
                "member {} restarts without --force-new-cluster",
                m.name
            ))
        });
    };
    let stale = live.iter().find(|m| {
        !listed
            .iter()
            .any(|l| crate::resources::listed_member_name(l) == Some(m.name.as_str()))
    });
    Some(match stale {
        Some(m) => Step::Remove {
            name: m.name.clone(),
        },
        None => Step::EndForceNewCluster {
            name: forced.name.clone(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voter(name: &str, lost: bool, applied: Option<u64>) -> MemberFacts {
        MemberFacts {
            voter: true,
            data_lost: lost.then(|| format!("PVC data-{name} was deleted")),
            pod_absent: lost,
            applied_index: applied,
            revision: applied.map(|a| a as i64 * 10),
            ..super::super::plan::tests::member(name, 1)
        }
    }

    fn facts(mode: QuorumLossMode, members: Vec<MemberFacts>) -> Facts {
        Facts {
            desired: members.len() as u32,
            cluster_id_latched: true,
            members,
            recovery: RecoveryFacts {
                mode,
                grace_ms: 60_000,
                recover_from: None,
                unverified_since_ms: Some(1_000_000),
                cluster: "main".into(),
                namespace: "prod".into(),
                snapshots: Vec::new(),
                restoring_from: None,
            },
            now_ms: 1_000_000,
            ..Facts::default()
        }
    }

    fn run(f: &Facts) -> Option<Step> {
        let live: Vec<&MemberFacts> = f.members.iter().collect();
        plan(&live, f)
    }

    #[test]
    fn two_of_five_lost_is_not_quorum_loss_and_three_is() {
        let five = |lost: usize| {
            (0..5)
                .map(|i| voter(&format!("m{i}"), i < lost, Some(100 + i as u64)))
                .collect::<Vec<_>>()
        };
        let f = facts(QuorumLossMode::Automatic, five(2));
        assert_eq!(run(&f), None, "three survivors are a quorum of five");
        let mut f = facts(QuorumLossMode::Automatic, five(3));
        f.now_ms += 60_000;
        assert_eq!(
            run(&f),
            Some(Step::ForceNewCluster {
                name: "m4".into(),
                mode: QuorumLossMode::Automatic,
                applied: 104,
                revision: Some(1040),
                lost: vec!["m0".into(), "m1".into(), "m2".into()],
            })
        );
    }

    #[test]
    fn on_a_tie_of_applied_indexes_the_lowest_name_is_proposed() {
        let mut f = facts(
            QuorumLossMode::Automatic,
            vec![
                voter("a", true, None),
                voter("b", true, None),
                voter("d", false, Some(50)),
                voter("c", false, Some(50)),
                voter("e", true, None),
            ],
        );
        f.now_ms += 60_000;
        assert!(matches!(run(&f), Some(Step::ForceNewCluster { ref name, .. }) if name == "c"));
    }

    #[test]
    fn members_that_only_do_not_answer_are_never_counted_lost() {
        let f = facts(
            QuorumLossMode::Automatic,
            vec![
                voter("a", false, None),
                voter("b", false, None),
                voter("c", false, Some(7)),
            ],
        );
        assert_eq!(run(&f), None);
    }

    #[test]
    fn automatic_waits_out_the_grace_period_from_the_last_verified_quorum() {
        let members = vec![
            voter("a", true, None),
            voter("b", true, None),
            voter("c", false, Some(7)),
        ];
        let mut f = facts(QuorumLossMode::Automatic, members);
        f.now_ms = 1_000_000 + 59_000;
        assert!(
            matches!(run(&f), Some(Step::Wait(w)) if w.contains("recovering from c in 1 s")),
            "{:?}",
            run(&f)
        );
        f.now_ms = 1_000_000 + 60_000;
        assert!(matches!(run(&f), Some(Step::ForceNewCluster { name, .. }) if name == "c"));
    }

    #[test]
    fn manual_names_the_command_and_acts_only_on_a_valid_annotation() {
        let members = vec![
            voter("a", true, None),
            voter("b", true, None),
            voter("c", true, None),
            voter("d", false, Some(90)),
            voter("e", false, Some(95)),
        ];
        let mut f = facts(QuorumLossMode::Manual, members);
        f.now_ms += 3_600_000;
        match run(&f) {
            Some(Step::Refuse { reason, message }) => {
                assert_eq!(reason, "PermanentQuorumLoss");
                assert!(
                    message.ends_with(
                        "run: kubectl annotate etcdcluster main -n prod etcd.steward.dev/recover-from=e"
                    ),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        // A person may pick the other survivor; a lost member is refused.
        f.recovery.recover_from = Some("d".into());
        assert!(
            matches!(run(&f), Some(Step::ForceNewCluster { name, mode: QuorumLossMode::Manual, .. }) if name == "d")
        );
        f.recovery.recover_from = Some("a".into());
        assert!(matches!(
            run(&f),
            Some(Step::Refuse {
                reason: "RecoverFromInvalid",
                ..
            })
        ));
    }

    #[test]
    fn a_deleted_claim_whose_pod_still_runs_is_a_survivor_not_a_loss() {
        // Two claims deleted, their Pods (and etcd, with the data) still up:
        // they may still vote, so nothing is forced.
        let mut a = voter("a", true, None);
        a.pod_absent = false;
        let mut b = voter("b", true, None);
        b.pod_absent = false;
        let mut f = facts(
            QuorumLossMode::Automatic,
            vec![a, b, voter("c", false, Some(7))],
        );
        f.now_ms += 3_600_000;
        assert_eq!(run(&f), None);
    }

    #[test]
    fn learners_do_not_count_and_a_member_being_removed_is_never_forced() {
        // A lost learner is no lost vote: 2 of 3 voters survive.
        let mut learner = voter("l", true, None);
        learner.voter = false;
        let mut f = facts(
            QuorumLossMode::Automatic,
            vec![
                voter("a", true, None),
                voter("b", false, Some(5)),
                voter("c", false, Some(6)),
                learner,
            ],
        );
        f.now_ms += 3_600_000;
        assert_eq!(run(&f), None);
        // A survivor being removed still votes but is not recovered from.
        let mut leaving = voter("c", false, Some(9));
        leaving.deleting = true;
        let mut f = facts(
            QuorumLossMode::Automatic,
            vec![
                voter("a", true, None),
                voter("b", true, None),
                voter("d", false, Some(5)),
                leaving,
            ],
        );
        f.now_ms += 3_600_000;
        assert!(
            matches!(run(&f), Some(Step::ForceNewCluster { ref name, .. }) if name == "d"),
            "{:?}",
            run(&f)
        );
        // And plan() reaches recovery although a member is being removed.
        let step = super::super::plan::plan(&Facts {
            cluster_id_latched: true,
            quorum_verified: false,
            ..f.clone()
        });
        assert!(
            matches!(step, Step::ForceNewCluster { ref name, .. } if name == "d"),
            "{step:?}"
        );
    }

    #[test]
    fn nothing_joins_while_the_forced_pod_still_runs_with_the_flag() {
        let mut c = voter("c", false, Some(7));
        c.pod_forced = true;
        let live = vec![&c];
        let only_c = vec![super::super::plan::tests::listed(3, "c", false)];
        assert!(
            matches!(finish(&live, &only_c), Some(Step::Wait(w)) if w.contains("without --force-new-cluster"))
        );
        c.pod_forced = false;
        let live = vec![&c];
        assert_eq!(finish(&live, &only_c), None);
    }

    #[test]
    fn with_no_survivor_the_newest_verified_snapshot_is_restored() {
        let mut f = facts(
            QuorumLossMode::Automatic,
            vec![voter("a", true, None), voter("b", true, None)],
        );
        f.now_ms += 60_000;
        assert!(matches!(
            run(&f),
            Some(Step::Refuse { reason: "PermanentQuorumLoss", message }) if message.contains("no Complete and Verified EtcdSnapshot")
        ));
        f.recovery.snapshots = vec![
            VerifiedSnapshot {
                name: "new".into(),
                revision: Some(90),
            },
            VerifiedSnapshot {
                name: "old".into(),
                revision: Some(40),
            },
        ];
        assert_eq!(
            run(&f),
            Some(Step::RestoreFromSnapshot {
                snapshot: "new".into(),
                revision: Some(90),
                mode: QuorumLossMode::Automatic,
                lost: vec!["a".into(), "b".into()],
            })
        );
        f.recovery.mode = QuorumLossMode::Manual;
        assert!(matches!(
            run(&f),
            Some(Step::Refuse { reason: "PermanentQuorumLoss", message })
                if message.ends_with("etcd.steward.dev/recover-from=EtcdSnapshot/new")
        ));
        f.recovery.recover_from = Some("EtcdSnapshot/old".into());
        assert!(matches!(
            run(&f),
            Some(Step::RestoreFromSnapshot { snapshot, mode: QuorumLossMode::Manual, .. }) if snapshot == "old"
        ));
        f.recovery.recover_from = Some("EtcdSnapshot/other".into());
        assert!(matches!(
            run(&f),
            Some(Step::Refuse {
                reason: "RecoverFromInvalid",
                ..
            })
        ));
    }

    #[test]
    fn a_forced_member_is_waited_for_then_stale_objects_go_then_the_flag() {
        let mut forced = voter("c", false, Some(7));
        forced.force_new_cluster = true;
        let f = facts(
            QuorumLossMode::Automatic,
            vec![voter("a", true, None), forced.clone()],
        );
        assert!(matches!(run(&f), Some(Step::Wait(w)) if w.contains("--force-new-cluster")));
        let live: Vec<&MemberFacts> = f.members.iter().collect();
        let only_c = vec![super::super::plan::tests::listed(3, "c", false)];
        assert_eq!(
            finish(&live, &only_c),
            Some(Step::Remove { name: "a".into() })
        );
        let live = vec![&forced];
        assert_eq!(
            finish(&live, &only_c),
            Some(Step::EndForceNewCluster { name: "c".into() })
        );
    }
}

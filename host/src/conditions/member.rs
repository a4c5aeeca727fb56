//! An EtcdMember's conditions: Ready, and VersionDrifted for its own
//! version ([`super::version`]).

use steward_policy_sdk::{Condition, ConditionStatus};

use super::version::version_drifted;

/// The Pod is Ready and etcd lists the member.
pub const READY: &str = "Ready";
pub mod reason {
    //! Reasons of an EtcdMember's conditions.
    /// Ready=True: Pod Ready and the member ID confirmed by etcd.
    pub const POD_READY: &str = "PodReady";
    /// Ready=False: the Pod is missing, pending, terminated or not Ready.
    pub const POD_NOT_READY: &str = "PodNotReady";
    /// Ready=False: the Pod is Ready but etcd has not (yet) reported its ID.
    pub const DISCOVERING_MEMBER_ID: &str = "DiscoveringMemberID";
    /// Ready=False: the member is dormant (cluster paused at 0 replicas).
    pub const PAUSED: &str = "Paused";
    /// Ready=False: etcd's member list does not contain this member.
    pub const NOT_A_MEMBER: &str = "NotAMember";
}

/// What an EtcdMember's conditions are derived from.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MemberState {
    /// The member is dormant (cluster paused): no Pod on purpose.
    pub dormant: bool,
    /// The member's Pod exists and is Ready.
    pub pod_ready: bool,
    /// Why the Pod's container cannot start, when the kubelet says so.
    pub pod_stuck: Option<String>,
    /// Whether etcd's member list (when one was obtained this round)
    /// contains the member. None: no list this round.
    pub listed: Option<bool>,
    /// The member ID etcd reported, now or earlier.
    pub member_id: Option<u64>,
    /// The version the member's spec asks for.
    pub spec_version: String,
    /// The version etcd reports the member running, if it answered.
    pub running_version: Option<String>,
}

/// Ready and VersionDrifted for one EtcdMember. Ready needs both a Ready
/// Pod and etcd's confirmation that it is a member (an ID from etcd, and no
/// member list that lacks it): a Pod passing its probe proves a process,
/// not a member.
pub fn member_conditions(facts: &MemberState) -> Vec<Condition> {
    use reason::*;
    let ready = if facts.dormant {
        Condition::new(
            READY,
            ConditionStatus::False,
            PAUSED,
            "the cluster is paused; the member has no Pod",
        )
    } else if !facts.pod_ready {
        Condition::new(
            READY,
            ConditionStatus::False,
            POD_NOT_READY,
            match &facts.pod_stuck {
                Some(why) => format!("the member's Pod cannot start: {why}"),
                None => "the member's Pod is missing or not Ready".into(),
            },
        )
    } else if facts.listed == Some(false) {
        Condition::new(
            READY,
            ConditionStatus::False,
            NOT_A_MEMBER,
            "etcd's member list does not contain this member",
        )
    } else if let Some(id) = facts.member_id {
        Condition::new(
            READY,
            ConditionStatus::True,
            POD_READY,
            format!("Pod Ready, etcd member {id:x}"),
        )
    } else {
        Condition::new(
            READY,
            ConditionStatus::False,
            DISCOVERING_MEMBER_ID,
            "the Pod is Ready; waiting for etcd to report the member ID",
        )
    };
    let running: Vec<&str> = facts.running_version.as_deref().into_iter().collect();
    let drift = version_drifted(&facts.spec_version, &running);
    vec![ready, drift]
}

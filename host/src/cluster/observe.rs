//! Stage 1: gather what Kubernetes and etcd say about one cluster.
//!
//! Kubernetes objects come from the watch caches; etcd is probed through
//! [`crate::facts::probe_cluster`]. Nothing here returns a `Result`: an
//! etcd that does not answer is the most important thing to observe, and
//! the policy (not this code) decides what it means.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use steward_policy_sdk as sdk;

use super::plan::{Facts, MemberFacts};
use crate::api::{EtcdCluster, EtcdMember, MemberRole as ApiRole};
use crate::context::{Context, OperatorConfig};
use crate::facts::{PodFacts, ProbeTarget, cluster_members, ms, pod_facts, probe_cluster};
use crate::resources;

/// One member as the reconcile sees it.
#[derive(Clone, Debug)]
pub struct MemberView {
    pub object: Arc<EtcdMember>,
    pub pod: PodFacts,
    pub pod_uid: Option<String>,
    /// Why its data is gone for good, if it is
    /// ([`crate::member::volume::data_lost`]).
    pub data_lost: Option<String>,
    /// Its Pod runs etcd with `--force-new-cluster`.
    pub pod_forced: bool,
}

impl MemberView {
    pub fn name(&self) -> String {
        self.object.name_any()
    }

    /// Consecutive Pod failures: those the member controller counted, plus
    /// the current Pod if it failed and the member's status does not count
    /// it yet, so a crash loop is acted on at the threshold rather than one
    /// more start later.
    pub fn failures(&self) -> u32 {
        let status = self.object.status.as_ref();
        let counted = status.map_or(0, |s| s.failures_on(&self.object.spec.version));
        let known = self.pod_uid.is_some()
            && status.and_then(|s| s.last_terminated_pod_uid.as_ref()) == self.pod_uid.as_ref();
        let pending = !self.pod.deleting && self.pod.counts_as_failure() && !known;
        counted + u32::from(pending)
    }
}

/// The output of the observe stage.
pub struct Observed {
    pub cluster: Arc<EtcdCluster>,
    pub members: Vec<MemberView>,
    /// What the policy receives.
    pub observation: sdk::Observation,
    /// The cluster ID, latched now or earlier.
    pub cluster_id: Option<String>,
    /// Defragmentations this process ran since the stored status was
    /// written, by member name ([`Context::defrags`]).
    pub defrags: std::collections::HashMap<String, crate::api::LastDefrag>,
    /// `spec.bootstrap.restore`, read and checked, while the seed is still
    /// to be created; None otherwise.
    pub restore: Option<Result<crate::api::MemberRestore, crate::snapshot::Problem>>,
    /// The cluster's Complete and Verified EtcdSnapshots, newest first.
    pub snapshots: Vec<super::recovery::VerifiedSnapshot>,
    /// What etcd's answers say about authentication ([`crate::auth`]).
    pub auth: crate::auth::AuthFacts,
    /// Whether the TLS Secrets could be used ([`crate::tls`]).
    pub tls: crate::tls::Prepared,
    /// The cluster's cert-manager Certificates ([`crate::certificates`]).
    pub issuance: crate::certificates::Issuance,
    pub now: jiff::Timestamp,
}

impl Observed {
    pub fn report(&self) -> Option<&sdk::ProbeReport> {
        match &self.observation.probing {
            sdk::Probing::Attempted(r) => Some(r),
            sdk::Probing::Skipped(_) => None,
        }
    }

    pub fn listed_members(&self) -> Option<&[sdk::EtcdMember]> {
        match &self.report()?.member_list {
            sdk::MemberListOutcome::Listed(m) => Some(m),
            _ => None,
        }
    }

    /// Endpoint statuses that answered, by member name.
    pub fn answered(&self) -> BTreeMap<&str, &sdk::EndpointStatus> {
        self.report()
            .into_iter()
            .flat_map(|r| r.endpoints.iter())
            .filter_map(|p| match &p.outcome {
                sdk::ProbeOutcome::Answered(s) => Some((p.member.as_str(), s)),
                sdk::ProbeOutcome::Failed(_) => None,
            })
            .collect()
    }

    pub fn leader_id(&self) -> Option<u64> {
        self.answered()
            .values()
            .map(|s| s.leader_id)
            .find(|&l| l != 0)
    }

    /// The last defragmentation of member `name`: this process's record,
    /// else the one the stored status carries.
    pub fn last_defrag(&self, name: &str) -> Option<crate::api::LastDefrag> {
        self.defrags.get(name).cloned().or_else(|| {
            self.cluster
                .status
                .as_ref()?
                .members
                .iter()
                .find(|m| m.name == name)?
                .last_defrag
                .clone()
        })
    }

    /// The facts the membership planner decides on.
    pub fn plan_facts(&self, quorum_verified: bool, config: &OperatorConfig) -> Facts {
        let answered = self.answered();
        Facts {
            desired: self.cluster.spec.replicas.max(0) as u32,
            deleting: self.cluster.metadata.deletion_timestamp.is_some(),
            cluster_id_latched: self.cluster_id.is_some(),
            restore_refused: match &self.restore {
                Some(Err(p)) => Some((p.reason, p.message.clone(), p.retry)),
                _ => None,
            },
            certificates_pending: self.issuance.blocks_seed(),
            quorum_verified,
            members: self
                .members
                .iter()
                .map(|m| MemberFacts {
                    name: m.name(),
                    created_ms: m.object.metadata.creation_timestamp.as_ref().map_or(0, ms),
                    dormant: m.object.spec.dormant,
                    deleting: m.object.metadata.deletion_timestamp.is_some(),
                    failures: m.failures(),
                    pod_stuck: m.pod.stuck.clone(),
                    spec_version: m.object.spec.version.clone(),
                    running_version: answered
                        .get(m.name().as_str())
                        .map(|s| s.version.clone())
                        .filter(|v| !v.is_empty()),
                    db_size: answered.get(m.name().as_str()).map(|s| s.db_size),
                    db_in_use: answered.get(m.name().as_str()).map(|s| s.db_size_in_use),
                    no_space: answered
                        .get(m.name().as_str())
                        .is_some_and(|s| s.alarms.contains(&sdk::AlarmKind::Nospace)),
                    last_defrag_ms: self.last_defrag(&m.name()).map(|d| ms(&d.time)),
                    last_reclaimed: self
                        .last_defrag(&m.name())
                        .map(|d| d.reclaimed_bytes.max(0) as u64),
                    // The role this reconcile resolved (etcd's list, the
                    // member's answer, its last known role), not what the
                    // EtcdMember's status last said.
                    voter: self
                        .observation
                        .members
                        .iter()
                        .find(|o| o.name == m.name())
                        .is_some_and(|o| matches!(o.role, sdk::MemberRole::Voter)),
                    data_lost: m.data_lost.clone(),
                    applied_index: answered
                        .get(m.name().as_str())
                        .map(|s| s.raft_applied_index),
                    revision: answered
                        .get(m.name().as_str())
                        .map(|s| s.revision)
                        .filter(|r| *r > 0),
                    pod_absent: matches!(m.pod.phase, sdk::PodPhase::Absent),
                    force_new_cluster: m.object.spec.force_new_cluster,
                    pod_forced: m.pod_forced,
                })
                .collect(),
            etcd_members: self.listed_members().map(<[_]>::to_vec),
            raft_index: self
                .answered()
                .values()
                .map(|s| (s.member_id, s.raft_index))
                .collect(),
            leader_id: self.leader_id(),
            promote_max_lag: config.promote_max_lag,
            crash_loop_threshold: config.crash_loop_threshold,
            target_version: self.cluster.spec.version.clone(),
            memory: matches!(
                self.cluster.spec.storage.medium,
                crate::api::StorageMedium::Memory
            ),
            defrag: self
                .cluster
                .spec
                .maintenance
                .as_ref()
                .and_then(|m| m.defrag.clone()),
            quota_bytes: self
                .cluster
                .spec
                .options
                .as_ref()
                .and_then(|o| o.quota_backend_bytes)
                .filter(|q| *q > 0)
                .map_or(super::maintenance::DEFAULT_QUOTA_BYTES, |q| q as u64),
            now_ms: self.now.as_millisecond(),
            recovery: self.recovery_facts(),
            auth: self.auth.clone(),
        }
    }

    fn recovery_facts(&self) -> super::recovery::RecoveryFacts {
        let c = &self.cluster;
        let spec = c.spec.recovery.clone().unwrap_or_default();
        let status = c.status.as_ref();
        super::recovery::RecoveryFacts {
            mode: spec.quorum_loss,
            grace_ms: i64::from(spec.grace_period_seconds.max(0)) * 1000,
            recover_from: c
                .annotations()
                .get(crate::api::ANNOTATION_RECOVER_FROM)
                .cloned(),
            unverified_since_ms: status
                .and_then(|s| s.last_verified_time.as_ref())
                .or(c.metadata.creation_timestamp.as_ref())
                .map(ms),
            cluster: c.name_any(),
            namespace: c.namespace().unwrap_or_default(),
            restoring_from: crate::restore::recovering_from(c).map(str::to_owned),
            snapshots: self.snapshots.clone(),
        }
    }
}

pub async fn observe(cluster: &Arc<EtcdCluster>, ctx: &Context) -> Observed {
    let now = jiff::Timestamp::now();
    let ns = cluster.namespace().unwrap_or_default();
    let members: Vec<MemberView> = cluster_members(ctx, cluster)
        .into_iter()
        .map(|object| {
            let pod = ctx
                .watches
                .pods
                .store()
                .get(&kube::runtime::reflector::ObjectRef::new(&object.name_any()).within(&ns));
            let pvc = ctx.watches.pvcs.store().get(
                &kube::runtime::reflector::ObjectRef::new(&resources::pvc_name(&object.name_any()))
                    .within(&ns),
            );
            MemberView {
                pod: pod_facts(pod.as_deref()),
                pod_uid: pod.as_ref().and_then(|p| p.uid()),
                data_lost: crate::member::volume::data_lost(&object, pvc.as_deref()),
                pod_forced: pod
                    .as_deref()
                    .is_some_and(resources::pod_forces_new_cluster),
                object,
            }
        })
        .collect();

    let targets: Vec<ProbeTarget> = members
        .iter()
        .filter(|m| !m.object.spec.dormant)
        .map(|m| ProbeTarget {
            member: m.name(),
            endpoint: resources::member_client_url(
                resources::client_scheme(cluster),
                &m.name(),
                &cluster.name_any(),
                &ns,
            ),
        })
        .collect();

    // The credentials go with the probe, so that a cluster with
    // authentication on is verified by the same calls as one without.
    crate::auth::prepare(cluster, ctx).await;
    let issuance = crate::certificates::observe(cluster, &ctx.client).await;
    let tls = crate::tls::prepare(cluster, ctx).await;
    let waiting_for_certificates = issuance.blocks_seed().map(|(_, why, _)| why);
    let probing = if targets.is_empty() {
        sdk::Probing::Skipped(if members.is_empty() {
            waiting_for_certificates.unwrap_or_else(|| "the cluster has no members yet".into())
        } else {
            "every member is dormant (replicas 0)".into()
        })
    } else if let Some(why) = &tls.unusable {
        // Without the CA (or the client certificate the members require)
        // every call fails its handshake: what the status must say is why
        // the configuration is missing, cert-manager's part first.
        let why = waiting_for_certificates.unwrap_or_else(|| why.clone());
        sdk::Probing::Skipped(format!("no TLS configuration for etcd: {why}"))
    } else {
        sdk::Probing::Attempted(
            probe_cluster(ctx.etcd.as_ref(), &targets, ctx.config.probe_deadline).await,
        )
    };

    let auth = crate::auth::observe(cluster, ctx, &probing);
    let status = cluster.status.clone().unwrap_or_default();
    let mut cluster_id = status.cluster_id.clone().filter(|s| !s.is_empty());
    if cluster_id.is_none() {
        cluster_id = latch_cluster_id(ctx, &members, &probing).await;
    }

    let listed = match &probing {
        sdk::Probing::Attempted(r) => match &r.member_list {
            sdk::MemberListOutcome::Listed(l) => Some(l.as_slice()),
            _ => None,
        },
        sdk::Probing::Skipped(_) => None,
    };

    let observation = sdk::Observation {
        cluster: sdk::ClusterRef {
            namespace: ns.clone(),
            name: cluster.name_any(),
            uid: cluster.uid().unwrap_or_default(),
            generation: cluster.metadata.generation.unwrap_or_default(),
        },
        spec: sdk::ClusterSpec {
            desired_replicas: cluster.spec.replicas.max(0) as u32,
            version: cluster.spec.version.clone(),
            quota_backend_bytes: cluster
                .spec
                .options
                .as_ref()
                .and_then(|o| o.quota_backend_bytes)
                .map(|q| q.max(0) as u64),
        },
        phase: host_phase(cluster, &members, listed, cluster_id.is_some()),
        members: members
            .iter()
            .map(|m| {
                let answered = answer_of(&probing, &m.name());
                policy_member(cluster, m, listed, answered, &status.members)
            })
            .collect(),
        quorum: sdk::QuorumFinding::of(&probing),
        probing,
        history: sdk::History {
            // The exact time, which the stored status may show up to
            // --verified-refresh late.
            last_verified: status.last_verified_time.as_ref().map(ms).max(
                ctx.verified_at(cluster.as_ref())
                    .map(|t| t.as_millisecond()),
            ),
            unverified_streak: status.unverified_streak,
            previous_conditions: crate::conditions::previous_conditions(&status.conditions),
        },
        backup: crate::facts::observe_backup(ctx, cluster, now),
        tls: tls.facts.clone(),
        now: now.as_millisecond(),
        settings: settings_text(cluster),
    };

    // A restore is resolved (its object read whole) only while there is
    // no seed yet: it decides what the seed starts from.
    let restore = if members.is_empty() && cluster_id.is_none() {
        crate::restore::resolve(cluster, ctx).await
    } else {
        None
    };
    Observed {
        auth,
        tls,
        issuance,
        defrags: ctx.defrags(cluster.as_ref()),
        cluster: cluster.clone(),
        members,
        observation,
        cluster_id,
        restore,
        snapshots: crate::facts::verified_snapshots(
            cluster,
            &ctx.watches.snapshots.store().state(),
        )
        .into_iter()
        .map(|(s, _)| super::recovery::VerifiedSnapshot {
            name: s.name_any(),
            revision: s.status.as_ref().and_then(|st| st.revision),
        })
        .collect(),
        now,
    }
}

/// The cluster ID is latched once etcd's member list shows exactly the seed:
/// before that a half-formed cluster could be mistaken for the real one.
async fn latch_cluster_id(
    ctx: &Context,
    members: &[MemberView],
    probing: &sdk::Probing,
) -> Option<String> {
    let sdk::Probing::Attempted(report) = probing else {
        return None;
    };
    let sdk::MemberListOutcome::Listed(listed) = &report.member_list else {
        return None;
    };
    let [only] = listed.as_slice() else {
        return None;
    };
    let seed = members.iter().find(|m| m.object.spec.bootstrap)?;
    if only.name != seed.name() {
        return None;
    }
    let endpoint = report.endpoints.iter().find(|p| p.member == seed.name())?;
    let status = ctx.etcd.status(&endpoint.endpoint).await.ok()?;
    (status.cluster_id != 0).then(|| format!("{:x}", status.cluster_id))
}

fn host_phase(
    cluster: &EtcdCluster,
    members: &[MemberView],
    listed: Option<&[sdk::EtcdMember]>,
    latched: bool,
) -> sdk::HostPhase {
    let desired = cluster.spec.replicas.max(0) as usize;
    if cluster.metadata.deletion_timestamp.is_some() {
        return sdk::HostPhase::Deleting;
    }
    if desired == 0 {
        // Paused once only dormant members without a Pod are left; until
        // then the members are being wound down.
        let settled = members
            .iter()
            .all(|m| m.object.spec.dormant && m.pod.phase == sdk::PodPhase::Absent);
        return if settled {
            sdk::HostPhase::Paused
        } else {
            sdk::HostPhase::ScalingDown
        };
    }
    if !latched {
        return sdk::HostPhase::Bootstrapping;
    }
    if members
        .iter()
        .any(|m| m.object.metadata.deletion_timestamp.is_some())
    {
        return sdk::HostPhase::ScalingDown;
    }
    let (voters, learners) = match listed {
        Some(l) => (
            l.iter().filter(|m| !m.is_learner).count(),
            l.iter().filter(|m| m.is_learner).count(),
        ),
        None => (members.len(), 0),
    };
    if learners > 0 || voters < desired {
        sdk::HostPhase::ScalingUp
    } else if voters > desired {
        sdk::HostPhase::ScalingDown
    } else {
        sdk::HostPhase::Steady
    }
}

/// The Status answer of the member named `name`, if it answered.
fn answer_of<'a>(probing: &'a sdk::Probing, name: &str) -> Option<&'a sdk::EndpointStatus> {
    let sdk::Probing::Attempted(report) = probing else {
        return None;
    };
    report
        .endpoints
        .iter()
        .find(|p| p.member == name)
        .and_then(|p| match &p.outcome {
            sdk::ProbeOutcome::Answered(s) => Some(s),
            sdk::ProbeOutcome::Failed(_) => None,
        })
}

/// A member as the policy sees it. Its etcd ID and role are resolved here
/// once, for the policy and the status alike, from the first source that
/// has them: etcd's member list, then the member's own Status answer, then
/// the last status, then (the ID) the EtcdMember's status.
fn policy_member(
    cluster: &EtcdCluster,
    m: &MemberView,
    listed: Option<&[sdk::EtcdMember]>,
    answered: Option<&sdk::EndpointStatus>,
    last_known: &[crate::api::MemberSummary],
) -> sdk::Member {
    let name = m.name();
    let in_etcd = listed.and_then(|l| l.iter().find(|e| e.name == name));
    let remembered = last_known.iter().find(|s| s.name == name);
    let learner = in_etcd
        .map(|e| e.is_learner)
        .or(answered.map(|s| s.is_learner))
        .unwrap_or_else(|| remembered.is_some_and(|s| matches!(s.role, ApiRole::Learner)));
    let role = if learner {
        sdk::MemberRole::Learner
    } else {
        sdk::MemberRole::Voter
    };
    let member_id = in_etcd
        .map(|e| e.id)
        .or(answered.map(|s| s.member_id))
        .filter(|&id| id != 0)
        .or_else(|| {
            remembered
                .and_then(|s| s.id.as_deref())
                .or(m
                    .object
                    .status
                    .as_ref()
                    .and_then(|s| s.member_id.as_deref()))
                .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        });
    sdk::Member {
        endpoint: resources::member_client_url(
            resources::client_scheme(cluster),
            &name,
            &cluster.name_any(),
            &cluster.namespace().unwrap_or_default(),
        ),
        name,
        role,
        member_id,
        pod_phase: m.pod.phase,
        pod_ready: m.pod.ready,
        pod_ready_since: m.pod.ready_since,
        restarts: m.pod.restarts,
        last_termination: m.pod.last_termination.clone(),
        pod_deleting: m.pod.deleting,
    }
}

/// `spec.statusPolicy.settings` as the JSON text a policy receives (`{}`
/// when unset).
pub fn settings_text(cluster: &EtcdCluster) -> String {
    cluster
        .spec
        .status_policy
        .as_ref()
        .and_then(|p| p.settings.as_ref())
        .map_or_else(|| "{}".to_owned(), |s| s.to_string())
}

//! Stage 1 of the member reconcile: what the Kubernetes API and the
//! cluster's last status say about one member. Nothing here returns a
//! `Result`: a read that fails is recorded and the status still follows.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;

use crate::api::{EtcdCluster, EtcdMember, MemberSummary};
use crate::context::Context;
use crate::facts::{PodFacts, pod_facts};

pub struct Observed {
    /// The member, from the controller's cache.
    pub member: Arc<EtcdMember>,
    /// The owning cluster, or why it could not be read.
    pub cluster: Result<EtcdCluster, String>,
    pub pod: Option<Arc<Pod>>,
    /// The member's PVC (`data-<member>`), from the cache.
    pub pvc: Option<Arc<PersistentVolumeClaim>>,
    pub facts: PodFacts,
    /// The current Pod terminated and is not counted yet.
    pub newly_terminated: bool,
    /// Failures in a row before the current Pod.
    pub prior_failures: u32,
}

impl Observed {
    pub fn name(&self) -> String {
        self.member.name_any()
    }

    /// The cluster status's line about this member, if the cluster was read.
    pub fn summary(&self) -> Option<&MemberSummary> {
        let cluster = self.cluster.as_ref().ok()?;
        let name = self.name();
        cluster
            .status
            .as_ref()?
            .members
            .iter()
            .find(|m| m.name == name)
    }

    /// The member's volume against the cluster's `spec.storage.size`; None
    /// without a PVC (Memory, or not created yet) or without the cluster.
    pub fn volume(&self) -> Option<super::volume::VolumeState> {
        let cluster = self.cluster.as_ref().ok()?;
        super::volume::volume_state(self.pvc.as_deref()?, &cluster.spec.storage.size)
    }

    /// Why the member's data is gone for good, if it is.
    pub fn data_lost(&self) -> Option<String> {
        super::volume::data_lost(&self.member, self.pvc.as_deref())
    }

    /// Consecutive failures including the current Pod's.
    pub fn failures(&self) -> u32 {
        self.prior_failures + u32::from(self.facts.is_terminal() && self.facts.counts_as_failure())
    }
}

/// None only when the cluster does not exist (any more).
pub async fn observe(cached: Arc<EtcdMember>, ctx: &Context) -> Option<Observed> {
    let ns = cached.namespace().unwrap_or_default();
    let name = cached.name_any();
    let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster = match clusters.get_opt(&cached.spec.cluster).await {
        Ok(Some(c)) => Ok(c),
        Ok(None) => return None,
        Err(e) => Err(format!(
            "reading EtcdCluster {ns}/{}: {e}",
            cached.spec.cluster
        )),
    };
    // The cache may lag this controller's own last status write; the
    // counts below are derived from the stored status plus the Pod's UID,
    // so a stale copy yields the same status again, never a double count.
    let member = cached;
    let pod = ctx
        .watches
        .pods
        .store()
        .get(&ObjectRef::new(&name).within(&ns));
    let pvc = ctx
        .watches
        .pvcs
        .store()
        .get(&ObjectRef::new(&crate::resources::pvc_name(&name)).within(&ns));
    let facts = pod_facts(pod.as_deref());
    let status = member.status.clone().unwrap_or_default();
    let uid = pod.as_ref().and_then(|p| p.uid());
    let counted = uid.is_some() && status.last_terminated_pod_uid == uid;
    let newly_terminated = facts.is_terminal() && !counted;
    let prior_failures = if counted && facts.counts_as_failure() {
        status.failures_on(&member.spec.version).saturating_sub(1)
    } else {
        status.failures_on(&member.spec.version)
    };
    Some(Observed {
        member,
        cluster,
        pod,
        pvc,
        facts,
        newly_terminated,
        prior_failures,
    })
}

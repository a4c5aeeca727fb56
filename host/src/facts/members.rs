//! A cluster's EtcdMembers, from the watch cache.

use std::sync::Arc;

use kube::ResourceExt;

use crate::api::{EtcdCluster, EtcdMember};
use crate::context::Context;

/// The members of a cluster, from the watch cache, oldest first.
pub fn cluster_members(ctx: &Context, cluster: &EtcdCluster) -> Vec<Arc<EtcdMember>> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let mut members: Vec<Arc<EtcdMember>> = ctx
        .watches
        .members
        .store()
        .state()
        .into_iter()
        .filter(|m| m.namespace().as_deref() == Some(ns.as_str()) && m.spec.cluster == name)
        .collect();
    members.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    members
}

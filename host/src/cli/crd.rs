//! `etcd-steward crd`: print the CRDs generated from the Rust types
//! (`crate::api::crds`: EtcdCluster, EtcdMember, EtcdStatusPolicy,
//! EtcdSnapshot; the command's help in `super::Command` names the same four).

pub fn run() -> anyhow::Result<()> {
    print!("{}", crate::api::crds_yaml());
    Ok(())
}

//! `etcd-steward crd`: print the CRDs generated from the Rust types
//! (`crate::api::crds`: EtcdCluster, EtcdMember, EtcdStatusPolicy,
//! EtcdSnapshot, EtcdBackupSchedule; the command's help in `super::Command`
//! names the same five).

pub fn run() -> anyhow::Result<()> {
    print!("{}", crate::api::crds_yaml());
    Ok(())
}

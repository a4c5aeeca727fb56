//! The last step of a container start, in the child between fork and exec:
//! working directory, credentials, then `execveat(fd, "", AT_EMPTY_PATH)`
//! of the program the kubelet opened before the fork.
//!
//! Executing the open file rather than a path keeps the program reachable
//! when a volume is mounted over its directory, and (on recent kernels,
//! 6.18 here, which name a process after the file's own name for
//! AT_EMPTY_PATH; older ones show the descriptor number) the process shows
//! its program's name in `ps` and `/proc/PID/comm`, where an exec of
//! `/proc/self/fd/N` showed `N`.
//!
//! Everything is prepared before the fork: the child only makes system
//! calls on memory that already exists.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::path::Path;

use nix::libc;

use super::launch::RunAs;

pub(crate) struct Exec {
    fd: RawFd,
    _argv: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp: Vec<*const libc::c_char>,
    cwd: Option<CString>,
    user: Option<(libc::uid_t, libc::gid_t, Vec<libc::gid_t>)>,
}

// SAFETY: the pointers point into the CStrings this struct owns, which
// are never changed; the struct is moved into the child's pre_exec hook
// and read there only.
unsafe impl Send for Exec {}
unsafe impl Sync for Exec {}

fn cstring(s: impl Into<Vec<u8>>) -> std::io::Result<CString> {
    CString::new(s).map_err(|_| std::io::Error::other("a NUL byte in an argument or variable"))
}

impl Exec {
    /// `fd` must stay open until the child has exec'd (the caller keeps the
    /// file until `spawn` returns).
    pub(crate) fn new(
        fd: RawFd,
        argv: &[String],
        env: &[(String, String)],
        cwd: Option<&Path>,
        user: Option<&RunAs>,
    ) -> std::io::Result<Exec> {
        let argv_c = argv
            .iter()
            .map(|a| cstring(a.as_str()))
            .collect::<std::io::Result<Vec<_>>>()?;
        let envp_c = env
            .iter()
            .map(|(k, v)| cstring(format!("{k}={v}")))
            .collect::<std::io::Result<Vec<_>>>()?;
        let pointers = |v: &[CString]| {
            v.iter()
                .map(|c| c.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        Ok(Exec {
            fd,
            argv: pointers(&argv_c),
            envp: pointers(&envp_c),
            _argv: argv_c,
            _envp: envp_c,
            cwd: cwd
                .map(|p| cstring(p.as_os_str().as_encoded_bytes()))
                .transpose()?,
            user: user.map(|u| (u.uid, u.gid, u.groups.clone())),
        })
    }

    /// In the child: returns only if something failed.
    pub(crate) fn exec(&self) -> std::io::Error {
        let err = std::io::Error::last_os_error;
        // SAFETY: async-signal-safe system calls on memory prepared before
        // the fork.
        unsafe {
            if let Some(cwd) = &self.cwd
                && libc::chdir(cwd.as_ptr()) != 0
            {
                return err();
            }
            if let Some((uid, gid, groups)) = &self.user {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0 {
                    return err();
                }
                if libc::setgid(*gid) != 0 || libc::setuid(*uid) != 0 {
                    return err();
                }
            }
            // Changing credentials clears the parent-death signal: set again.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return err();
            }
            libc::execveat(
                self.fd,
                c"".as_ptr(),
                self.argv.as_ptr() as *const *mut libc::c_char,
                self.envp.as_ptr() as *const *mut libc::c_char,
                libc::AT_EMPTY_PATH,
            );
        }
        err()
    }
}

/// Whether this process can run a container as `uid`/`gid`/`groups`: it is
/// root in its user namespace and every id is mapped there. Inside
/// `unshare -r` only uid 0 is mapped, so nothing else is possible.
pub(crate) fn can_run_as(user: &RunAs) -> bool {
    if euid() != 0 {
        return false;
    }
    let mapped = |file: &str, ids: Vec<u32>| {
        let Ok(map) = std::fs::read_to_string(file) else {
            return false;
        };
        let ranges: Vec<(u64, u64)> = map
            .lines()
            .filter_map(|l| {
                let f: Vec<u64> = l
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                (f.len() == 3).then(|| (f[0], f[0] + f[2]))
            })
            .collect();
        ids.into_iter().all(|id| {
            ranges
                .iter()
                .any(|(lo, hi)| (*lo..*hi).contains(&u64::from(id)))
        })
    };
    mapped("/proc/self/uid_map", vec![user.uid])
        && mapped(
            "/proc/self/gid_map",
            std::iter::once(user.gid)
                .chain(user.groups.iter().copied())
                .collect(),
        )
}

/// This process's effective uid.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Whether this process is root with every id available (the initial user
/// namespace, or one mapping all ids): then image layers keep their owners.
pub(crate) fn can_switch_users() -> bool {
    can_run_as(&RunAs {
        uid: 65534,
        gid: 65534,
        groups: Vec::new(),
    }) && std::fs::read_to_string("/proc/self/uid_map")
        .is_ok_and(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_and_envp_are_null_terminated_arrays_of_the_strings() {
        let e = Exec::new(
            3,
            &["app".into(), "--x".into()],
            &[("A".into(), "1".into())],
            None,
            None,
        )
        .unwrap();
        assert_eq!(e.argv.len(), 3);
        assert!(e.argv[2].is_null());
        // SAFETY: the pointers point into e's own CStrings.
        let first = unsafe { std::ffi::CStr::from_ptr(e.argv[1]) };
        assert_eq!(first.to_str().unwrap(), "--x");
        let var = unsafe { std::ffi::CStr::from_ptr(e.envp[0]) };
        assert_eq!(var.to_str().unwrap(), "A=1");
        assert!(e.envp[1].is_null());
        assert!(Exec::new(3, &["a\0b".into()], &[], None, None).is_err());
    }
}

//! A container's view of its volumes for a process that is not etcd (the
//! operator, a pulled image): its own mount namespace, with each volume
//! bind-mounted at its mountPath, so `/var/run/secrets/kubernetes.io/serviceaccount/token`
//! is where in-cluster clients look for it, and `/var/lib/etcd` is the
//! member's claim for an init container that shares it with etcd.
//!
//! Nothing is created on the machine. Paths under `/run` (and `/var/run`,
//! its symlink) are made on a tmpfs mounted over `/run` in that namespace,
//! as a container has a `/run` of its own. Any other mountPath missing
//! here is made as a runtime makes it in a container's rootfs: the nearest
//! directory above it that exists (`/var/lib` for `/var/lib/etcd`) is
//! covered, in that namespace only, by a tmpfs holding that directory's
//! entries again (each bind-mounted from the original, symlinks copied)
//! and the missing directories. The root itself is never covered: a
//! mountPath right under `/` (`/data`) must exist here. A mountPath under
//! another volume's is made inside that volume, as a runtime does.
//!
//! Files are bound the same way: the kubelet's termination-message file is
//! bind-mounted at the container's `terminationMessagePath`. A missing
//! target file is made as a missing mountPath is, so the default
//! `/dev/termination-log` covers `/dev` with a copy of itself (every device
//! node, `/dev/pts` and `/dev/shm` bound back from the original, each bind
//! keeping the flags of the devtmpfs it comes from) holding the new file.

use std::ffi::{CStr, CString};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::stat::Mode;

/// Prepared before the fork: the child only makes system calls on it.
pub(crate) struct Private {
    active: bool,
    tmpfs_run: bool,
    /// Directories of the machine covered by a copy of themselves, so that
    /// missing mountPaths can be made in them.
    shadows: Vec<Shadow>,
    /// In mount order: a volume before the volumes under its mountPath.
    /// Every source is opened before the first mount and mounted through
    /// `/proc/self/fd/N`, so a bind over `/tmp` cannot hide the source of a
    /// later bind that lives under `/tmp`. They are opened after `unshare`:
    /// the kernel binds only mounts of the caller's own namespace.
    binds: Vec<Bind>,
    /// Capacity for one fd per bind and per shadow, reserved before the fork.
    fds: Vec<std::os::fd::RawFd>,
}

struct Bind {
    source: CString,
    target: CString,
    /// Made (if missing) before the bind, outermost first: the target and
    /// its ancestors below a shadow, `/run`, or another volume (for a file,
    /// its ancestors only).
    mkdirs: Vec<CString>,
    /// A file bound onto a file, not a directory.
    file: bool,
    /// The target file is missing and is made (empty) before the bind.
    make_file: bool,
}

struct Shadow {
    dir: CString,
    /// tmpfs options keeping the directory's mode and owner.
    options: CString,
    entries: Vec<Entry>,
}

struct Entry {
    /// Its name in the directory (bound from `/proc/self/fd/N/<name>`).
    name: CString,
    /// Its path in the copy.
    path: CString,
    kind: EntryKind,
}

enum EntryKind {
    Dir,
    /// Anything bind-mountable onto a file: files, sockets, devices, fifos.
    File,
    Symlink(CString),
}

/// The longest `/proc/self/fd/N/<name>` (a name has at most 255 bytes).
const ENTRY_PATH_MAX: usize = 320;

impl Private {
    /// `dirs` are (local directory, mountPath) pairs; `files` (local file,
    /// path in the container) pairs, such as the termination-message file.
    pub(crate) fn new(
        dirs: &[(PathBuf, String)],
        files: &[(PathBuf, String)],
    ) -> std::io::Result<Private> {
        let binds: Vec<&(PathBuf, String)> = dirs.iter().chain(files).collect();
        let is_file = |i: usize| i >= dirs.len();
        let targets: Vec<PathBuf> = binds
            .iter()
            .map(|(_, target)| {
                PathBuf::from(match target.strip_prefix("/var/run/") {
                    Some(rest) => format!("/run/{rest}"),
                    None => target.clone(),
                })
            })
            .collect();
        let mut order: Vec<usize> = (0..binds.len()).collect();
        order.sort_by_key(|&i| targets[i].components().count());
        let mut tmpfs_run = false;
        let mut shadowed: Vec<PathBuf> = Vec::new();
        let mut prepared = Vec::new();
        for i in order {
            let target = &targets[i];
            let file = is_file(i);
            // The nearest ancestor that is another volume's mountPath.
            let in_volume = targets
                .iter()
                .enumerate()
                .filter(|&(j, t)| !is_file(j) && t != target && target.starts_with(t))
                .map(|(_, t)| t)
                .max_by_key(|t| t.components().count());
            if file && target.is_dir() {
                return Err(std::io::Error::other(format!(
                    "{} is a directory on this machine; a file cannot be mounted there",
                    target.display()
                )));
            }
            let exists = if file {
                target.exists()
            } else {
                target.is_dir()
            };
            let base: Option<PathBuf> = if let Some(v) = in_volume {
                Some(v.clone())
            } else if target.starts_with("/run") {
                tmpfs_run = true;
                Some(PathBuf::from("/run"))
            } else if exists {
                None
            } else {
                let above = existing_ancestor(target)?;
                if above == Path::new("/") {
                    return Err(std::io::Error::other(format!(
                        "mountPath {} does not exist on this machine; the local kubelet makes missing mountPaths only below an existing directory other than /",
                        target.display()
                    )));
                }
                if !shadowed.contains(&above) {
                    shadowed.push(above.clone());
                }
                Some(above)
            };
            let mut mkdirs = Vec::new();
            let make_file = file && base.is_some();
            if let Some(base) = base {
                let rest = target.strip_prefix(&base).unwrap_or(Path::new(""));
                let mut dir = base;
                for part in rest.components() {
                    dir.push(part);
                    mkdirs.push(cstring(&dir)?);
                }
                if make_file {
                    mkdirs.pop();
                }
            }
            prepared.push(Bind {
                source: cstring(&binds[i].0)?,
                target: cstring(target)?,
                mkdirs,
                file,
                make_file,
            });
        }
        // Outer directories first: an inner one is then covered in the
        // outer one's copy.
        shadowed.sort_by_key(|d| d.components().count());
        let shadows = shadowed
            .iter()
            .map(|d| Shadow::of(d))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Private {
            active: !binds.is_empty(),
            tmpfs_run,
            fds: Vec::with_capacity(prepared.len() + shadows.len()),
            shadows,
            binds: prepared,
        })
    }

    /// Runs in the child between fork and exec: system calls only, and no
    /// allocation (`fds` has its capacity already, paths are formatted on
    /// the stack).
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
        use nix::fcntl::OFlag;
        let open_path = |p: &CStr, dir: bool| -> std::io::Result<std::os::fd::RawFd> {
            let kind = if dir {
                OFlag::O_DIRECTORY
            } else {
                OFlag::empty()
            };
            let fd = nix::fcntl::open(p, OFlag::O_PATH | kind | OFlag::O_CLOEXEC, Mode::empty())?;
            Ok(std::os::fd::IntoRawFd::into_raw_fd(fd))
        };
        // Sources first: nothing is covered yet.
        for bind in &self.binds {
            let fd = open_path(&bind.source, !bind.file)?;
            self.fds.push(fd);
        }
        for shadow in &self.shadows {
            let original = open_path(&shadow.dir, true)?;
            self.fds.push(original);
            mount(
                Some(c"tmpfs"),
                shadow.dir.as_c_str(),
                Some(c"tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(shadow.options.as_c_str()),
            )?;
            for entry in &shadow.entries {
                entry.copy(original)?;
            }
        }
        if self.tmpfs_run {
            mount(
                Some(c"tmpfs"),
                c"/run",
                Some(c"tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                none,
            )?;
        }
        for (fd, bind) in self.fds.iter().zip(&self.binds) {
            for dir in &bind.mkdirs {
                match nix::unistd::mkdir(dir.as_c_str(), Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if bind.make_file {
                drop(nix::fcntl::open(
                    bind.target.as_c_str(),
                    OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(0o644),
                )?);
            }
            let mut buf = [0u8; 32];
            let source = fd_path(*fd, &mut buf);
            mount(
                Some(source),
                bind.target.as_c_str(),
                none,
                MsFlags::MS_BIND,
                none,
            )?;
        }
        Ok(())
    }
}

/// The nearest ancestor of `path` that exists (it must be a directory).
fn existing_ancestor(path: &Path) -> std::io::Result<PathBuf> {
    let mut dir = path.to_path_buf();
    while !dir.exists() {
        if !dir.pop() {
            break;
        }
    }
    if !dir.is_dir() {
        return Err(std::io::Error::other(format!(
            "mountPath {}: {} is not a directory on this machine",
            path.display(),
            dir.display()
        )));
    }
    Ok(dir)
}

impl Shadow {
    fn of(dir: &Path) -> std::io::Result<Shadow> {
        let meta = std::fs::metadata(dir)?;
        let mut entries = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let kind = match e.file_type()? {
                t if t.is_dir() => EntryKind::Dir,
                t if t.is_symlink() => EntryKind::Symlink(cstring(&std::fs::read_link(e.path())?)?),
                _ => EntryKind::File,
            };
            let name =
                CString::new(e.file_name().as_encoded_bytes()).map_err(std::io::Error::other)?;
            if name.as_bytes().len() + 32 > ENTRY_PATH_MAX {
                return Err(std::io::Error::other(format!(
                    "{}: name too long to copy",
                    e.path().display()
                )));
            }
            entries.push(Entry {
                name,
                path: cstring(&e.path())?,
                kind,
            });
        }
        let options = format!(
            "mode={:o},uid={},gid={}",
            meta.mode() & 0o7777,
            meta.uid(),
            meta.gid()
        );
        Ok(Shadow {
            dir: cstring(dir)?,
            options: CString::new(options).map_err(std::io::Error::other)?,
            entries,
        })
    }
}

impl Entry {
    /// Makes the entry again in the copy: a symlink as it was, anything
    /// else bound from the original directory (`original`, an fd).
    fn copy(&self, original: std::os::fd::RawFd) -> std::io::Result<()> {
        use nix::fcntl::OFlag;
        match &self.kind {
            EntryKind::Symlink(target) => {
                return nix::unistd::symlinkat(
                    target.as_c_str(),
                    nix::fcntl::AT_FDCWD,
                    self.path.as_c_str(),
                )
                .map_err(Into::into);
            }
            EntryKind::Dir => {
                nix::unistd::mkdir(self.path.as_c_str(), Mode::from_bits_truncate(0o755))?
            }
            EntryKind::File => drop(nix::fcntl::open(
                self.path.as_c_str(),
                OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o644),
            )?),
        }
        let mut buf = [0u8; ENTRY_PATH_MAX];
        let source = entry_path(original, &self.name, &mut buf);
        match mount(
            Some(source),
            self.path.as_c_str(),
            None::<&CStr>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&CStr>,
        ) {
            // Gone since it was listed: nothing to copy.
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// `/proc/self/fd/<fd>/<name>` in `buf`, without allocating.
fn entry_path<'a>(
    fd: std::os::fd::RawFd,
    name: &CStr,
    buf: &'a mut [u8; ENTRY_PATH_MAX],
) -> &'a CStr {
    let mut dir = [0u8; 32];
    let prefix = fd_path(fd, &mut dir).to_bytes();
    let name = name.to_bytes();
    buf[..prefix.len()].copy_from_slice(prefix);
    buf[prefix.len()] = b'/';
    buf[prefix.len() + 1..prefix.len() + 1 + name.len()].copy_from_slice(name);
    buf[prefix.len() + 1 + name.len()] = 0;
    CStr::from_bytes_until_nul(&buf[..]).expect("a NUL was written")
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
    use std::path::PathBuf;

    #[test]
    fn entry_paths_are_formatted_without_allocating() {
        let mut buf = [0u8; super::ENTRY_PATH_MAX];
        assert_eq!(
            super::entry_path(12, c"etcd", &mut buf).to_str().unwrap(),
            "/proc/self/fd/12/etcd"
        );
    }

    #[test]
    fn missing_mount_paths_are_made_below_the_nearest_existing_directory() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("var/lib");
        std::fs::create_dir_all(base.join("dpkg")).unwrap();
        std::fs::write(base.join("file"), "").unwrap();
        std::os::unix::fs::symlink("dpkg", base.join("link")).unwrap();
        let at = |p: &str| format!("{}{p}", t.path().display());
        let binds = [
            (PathBuf::from("/k/wal"), at("/var/lib/etcd/wal")),
            (PathBuf::from("/k/data"), at("/var/lib/etcd")),
            (PathBuf::from("/k/token"), "/var/run/secrets/x".to_string()),
        ];
        let p = super::Private::new(&binds, &[]).unwrap();
        let show = |c: &std::ffi::CString| c.to_str().unwrap().to_string();
        let order: Vec<_> = p.binds.iter().map(|b| show(&b.target)).collect();
        assert_eq!(
            order,
            [
                "/run/secrets/x".to_string(),
                at("/var/lib/etcd"),
                at("/var/lib/etcd/wal")
            ],
            "outer volumes first"
        );
        assert!(p.tmpfs_run);
        let mkdirs = |i: usize| -> Vec<String> { p.binds[i].mkdirs.iter().map(show).collect() };
        assert_eq!(mkdirs(0), ["/run/secrets", "/run/secrets/x"]);
        assert_eq!(mkdirs(1), [at("/var/lib/etcd")]);
        assert_eq!(
            mkdirs(2),
            [at("/var/lib/etcd/wal")],
            "made inside the volume"
        );
        assert_eq!(p.shadows.len(), 1);
        assert_eq!(show(&p.shadows[0].dir), at("/var/lib"));
        let mut entries: Vec<_> = p.shadows[0]
            .entries
            .iter()
            .map(|e| {
                let kind = match &e.kind {
                    super::EntryKind::Dir => "dir".to_string(),
                    super::EntryKind::File => "file".to_string(),
                    super::EntryKind::Symlink(t) => format!("-> {}", show(t)),
                };
                (show(&e.name), kind)
            })
            .collect();
        entries.sort();
        assert_eq!(
            entries,
            [
                ("dpkg".to_string(), "dir".to_string()),
                ("file".into(), "file".into()),
                ("link".into(), "-> dpkg".into())
            ]
        );

        // An existing mountPath needs nothing made; one right under / is refused.
        let p = super::Private::new(&[(PathBuf::from("/k"), at("/var/lib/dpkg"))], &[]).unwrap();
        assert!(p.shadows.is_empty() && p.binds[0].mkdirs.is_empty());
        let err = super::Private::new(
            &[(PathBuf::from("/k"), "/no-such-top-level-dir".into())],
            &[],
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("other than /"), "{err}");
    }

    #[test]
    fn a_missing_file_target_is_made_as_a_file_below_the_nearest_existing_directory() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("dev")).unwrap();
        std::fs::write(t.path().join("dev/null"), "").unwrap();
        let at = |p: &str| format!("{}{p}", t.path().display());
        let show = |c: &std::ffi::CString| c.to_str().unwrap().to_string();
        let files = [
            (PathBuf::from("/k/msg1"), at("/dev/termination-log")),
            (
                PathBuf::from("/k/msg2"),
                "/var/run/termination-log".to_string(),
            ),
            (PathBuf::from("/k/msg3"), at("/data/sub/msg")),
        ];
        let dirs = [(PathBuf::from("/k/data"), at("/data"))];
        let p = super::Private::new(&dirs, &files).unwrap();
        let find = |target: &str| p.binds.iter().find(|b| show(&b.target) == target).unwrap();
        let dev = find(&at("/dev/termination-log"));
        assert!(dev.file && dev.make_file && dev.mkdirs.is_empty());
        assert!(
            p.shadows.iter().any(|s| show(&s.dir) == at("/dev")),
            "the file's directory is shadowed"
        );
        let run = find("/run/termination-log");
        assert!(run.file && run.make_file && run.mkdirs.is_empty());
        assert!(p.tmpfs_run);
        let in_volume = find(&at("/data/sub/msg"));
        assert_eq!(
            in_volume.mkdirs.iter().map(show).collect::<Vec<_>>(),
            [at("/data/sub")],
            "made inside the volume, the file itself not as a directory"
        );
        assert!(in_volume.make_file);
        assert!(!find(&at("/data")).file);

        // An existing file is bound over as it is; a directory cannot be.
        let p = super::Private::new(&[], &[(PathBuf::from("/k/m"), at("/dev/null"))]).unwrap();
        assert!(p.shadows.is_empty() && !p.binds[0].make_file);
        let err = super::Private::new(&[], &[(PathBuf::from("/k/m"), at("/dev"))])
            .err()
            .unwrap();
        assert!(err.to_string().contains("is a directory"), "{err}");
    }

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

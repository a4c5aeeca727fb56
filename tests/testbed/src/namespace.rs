//! The private mount namespace the testbed's names live in.
//!
//! Pod names (`<host>.<subdomain>.<ns>.svc`) resolve through `/etc/hosts`,
//! for glibc (the operator) and Go (etcd) alike. The kubelet edits that file,
//! so it must be a private copy bind-mounted over `/etc/hosts` inside a
//! private mount namespace: never the machine's real one. This module checks
//! for that state and, for the sandbox binary, creates it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Set by `scripts/in-namespace.sh` and [`enter_private_mount_namespace`] to
/// the private file bind-mounted over `/etc/hosts`.
pub const MARKER_ENV: &str = "ETCD_STEWARD_PRIVATE_HOSTS";

/// The resolver configuration bind-mounted over `/etc/resolv.conf`: nothing
/// listens on 127.0.0.1:53, so a name missing from `/etc/hosts` fails at once
/// as a DNS error instead of waiting on a real nameserver.
pub const RESOLV_CONF: &str = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n";

const HINT: &str = "run the command under scripts/in-namespace.sh (for example \
`scripts/in-namespace.sh cargo test -p steward-testbed`), or call \
namespace::enter_private_mount_namespace at the top of main";

/// Succeeds only when `/etc/hosts` is a private file that may be edited: the
/// process is in a mount namespace other than PID 1's and `/etc/hosts` is a
/// bind mount of a different file than PID 1 sees.
pub fn ensure_private_hosts() -> Result<()> {
    let own_ns = std::fs::read_link("/proc/self/ns/mnt").context("reading /proc/self/ns/mnt")?;
    match std::fs::read_link("/proc/1/ns/mnt") {
        Ok(init_ns) if init_ns == own_ns => bail!(
            "refusing to edit /etc/hosts: this process shares PID 1's mount namespace ({}), \
             so /etc/hosts is the machine's real file; {HINT}",
            own_ns.display()
        ),
        Ok(_) => {}
        // In a user namespace PID 1 belongs to the real root; not being able
        // to look at it already means we are not in its namespace as root.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
        Err(e) => return Err(e).context("reading /proc/1/ns/mnt"),
    }
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    if !mountinfo
        .lines()
        .any(|l| l.split(' ').nth(4) == Some("/etc/hosts"))
    {
        bail!(
            "refusing to edit /etc/hosts: it is not a bind mount in this mount namespace; {HINT}"
        );
    }
    let own = std::fs::metadata("/etc/hosts").context("stat /etc/hosts")?;
    if let Ok(init) = std::fs::metadata("/proc/1/root/etc/hosts")
        && (init.dev(), init.ino()) == (own.dev(), own.ino())
    {
        bail!(
            "refusing to edit /etc/hosts: it is the same file PID 1 sees (inherited bind mount); {HINT}"
        );
    }
    if let Some(marker) = std::env::var_os(MARKER_ENV) {
        let m = std::fs::metadata(&marker)
            .with_context(|| format!("{MARKER_ENV}={}", Path::new(&marker).display()))?;
        if (m.dev(), m.ino()) != (own.dev(), own.ino()) {
            bail!(
                "refusing to edit /etc/hosts: {MARKER_ENV}={} is not the file mounted on /etc/hosts; {HINT}",
                Path::new(&marker).display()
            );
        }
    }
    Ok(())
}

/// Moves the calling process into a private mount namespace with its own
/// `/etc/hosts` (a copy, at `dir/hosts`) and `/etc/resolv.conf`
/// (`dir/resolv.conf`). A no-op when already inside one.
///
/// Must run before any thread exists: `unshare(CLONE_NEWNS)` refuses a
/// process whose filesystem context is shared with other threads. Call it at
/// the top of `main`, before building a tokio runtime.
pub fn enter_private_mount_namespace(dir: &Path) -> Result<()> {
    if ensure_private_hosts().is_ok() {
        return Ok(());
    }
    create_private_mount_namespace(dir)
}

/// As [`enter_private_mount_namespace`], but always creates a new namespace
/// (nested, when already inside one).
pub fn create_private_mount_namespace(dir: &Path) -> Result<()> {
    use nix::mount::{MsFlags, mount};
    use nix::sched::{CloneFlags, unshare};

    let threads = thread_count()?;
    if threads != 1 {
        bail!(
            "enter_private_mount_namespace must run before any thread starts (this process has {threads})"
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let hosts = dir.join("hosts");
    let resolv = dir.join("resolv.conf");
    std::fs::copy("/etc/hosts", &hosts)
        .with_context(|| format!("copying /etc/hosts to {}", hosts.display()))?;
    std::fs::write(&resolv, RESOLV_CONF)
        .with_context(|| format!("writing {}", resolv.display()))?;

    unshare(CloneFlags::CLONE_NEWNS).context(
        "unshare(CLONE_NEWNS) failed: a private mount namespace needs root (or run under `unshare -rm`)",
    )?;
    // Without this, our bind mounts would propagate back to the host's
    // namespace on systems where / is a shared mount (systemd's default).
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .context("making / private in the new mount namespace")?;
    bind(&hosts, Path::new("/etc/hosts"))?;
    bind(&resolv, Path::new("/etc/resolv.conf"))?;
    // SAFETY: the thread count was checked to be one above, so nothing can
    // read the environment concurrently.
    unsafe { std::env::set_var(MARKER_ENV, &hosts) };
    ensure_private_hosts().context("the private mount namespace was set up but does not check out")
}

fn bind(src: &Path, target: &Path) -> Result<()> {
    use nix::mount::{MsFlags, mount};
    mount(
        Some(src),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .with_context(|| format!("bind-mounting {} on {}", src.display(), target.display()))
}

fn thread_count() -> Result<usize> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .context("no Threads: line in /proc/self/status")
}

/// The file currently bind-mounted over `/etc/hosts`, if the marker says so.
pub fn private_hosts_source() -> Option<PathBuf> {
    std::env::var_os(MARKER_ENV).map(PathBuf::from)
}

//! The private mount namespace the sandbox binary enters at the top of
//! `main`: its /etc/hosts is a private copy that the kubelet may edit, and
//! the caller's /etc/hosts never changes. Needs root (CI runs as root).

use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork};
use steward_testbed::namespace;

/// Runs `body` in a forked, single-threaded child (as `main` would be) and
/// returns its exit code.
fn in_child(body: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child only does file and mount syscalls and then _exits;
    // glibc's fork handlers keep malloc usable in it.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(101);
            unsafe { nix::libc::_exit(code) }
        }
        ForkResult::Parent { child } => match waitpid(child, None).expect("waitpid") {
            WaitStatus::Exited(_, code) => code,
            other => panic!("child ended with {other:?}"),
        },
    }
}

#[test]
fn a_new_private_namespace_gets_its_own_hosts_and_resolver_files() {
    let dir = tempfile::tempdir().unwrap();
    let before = std::fs::read_to_string("/etc/hosts").unwrap();
    let d = dir.path().to_path_buf();
    let code = in_child(move || {
        if let Err(e) = namespace::create_private_mount_namespace(&d) {
            eprintln!("create_private_mount_namespace: {e:#}");
            return 1;
        }
        if let Err(e) = namespace::ensure_private_hosts() {
            eprintln!("after creating the namespace: {e:#}");
            return 2;
        }
        std::fs::OpenOptions::new()
            .append(true)
            .open("/etc/hosts")
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"127.20.99.1 only.in.child.svc\n"))
            .expect("writing the private /etc/hosts");
        let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap();
        if resolv != namespace::RESOLV_CONF {
            eprintln!("resolv.conf is {resolv:?}");
            return 3;
        }
        0
    });
    assert_eq!(code, 0, "the child failed (see its stderr above)");
    let after = std::fs::read_to_string("/etc/hosts").unwrap();
    assert_eq!(before, after, "the caller's /etc/hosts changed");
    let private = std::fs::read_to_string(dir.path().join("hosts")).unwrap();
    assert!(
        private.starts_with(&before) && private.contains("only.in.child.svc"),
        "{private}"
    );
}

#[test]
fn a_multi_threaded_process_is_refused_with_a_reason() {
    let _other = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(2)));
    let dir = tempfile::tempdir().unwrap();
    let err = namespace::create_private_mount_namespace(dir.path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("before any thread"), "{err}");
}

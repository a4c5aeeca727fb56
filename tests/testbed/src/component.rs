//! One control-plane process (etcd, kube-apiserver, …): started in its own
//! process group with its log in a file, waited on until `/readyz` answers,
//! and stopped with it. A child also dies with the thread that started it
//! (PR_SET_PDEATHSIG), so a killed or panicking test leaves nothing behind.

use std::future::Future;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Lines of a component's log quoted when it fails.
const TAIL_LINES: usize = 25;

pub struct Component {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Component {
    /// Starts `program args…` with its output in `dir/<name>.log`.
    pub fn spawn(name: &'static str, program: &Path, args: &[String], dir: &Path) -> Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = std::process::Command::new(program);
        cmd.args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own group: a Ctrl-C at the sandbox's terminal reaches only
            // the testbed, which then stops the components in order.
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs in the child.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("{name}: cannot start {}", program.display()))?;
        Ok(Component { name, child, log })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last lines of the log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
    }

    /// An error naming the component, with its log's last lines.
    pub fn failure(&self, what: impl std::fmt::Display) -> anyhow::Error {
        anyhow!(
            "{}: {what}\n--- last lines of {} ---\n{}",
            self.name,
            self.log.display(),
            self.log_tail()
        )
    }

    /// Fails if the process has exited.
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(self.failure(format!("exited ({status})"))),
            Ok(None) => Ok(()),
            Err(e) => Err(self.failure(format!("cannot be waited on: {e}"))),
        }
    }

    /// Polls `ready` until it succeeds; fails early if the process exits.
    pub async fn wait_ready<F, Fut>(&mut self, timeout: Duration, mut ready: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        let start = Instant::now();
        let mut last = anyhow!("not polled yet");
        loop {
            self.check_running()?;
            match ready().await {
                Ok(()) => return Ok(()),
                Err(e) => last = e,
            }
            if start.elapsed() > timeout {
                return Err(self.failure(format!("not ready after {timeout:?}: {last:#}")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM to the group, SIGKILL after `grace`; returns once it is reaped.
    pub fn stop(&mut self, grace: Duration) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let group = Pid::from_raw(self.child.id() as i32);
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = killpg(group, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// A free TCP port on 127.0.0.1, never one this process handed out before
/// (the kernel may give a released port to the next `bind(0)`, and
/// parallel tests start components at once). Another process may still
/// take it before the component binds it; the component then fails to
/// start and says so.
pub fn free_port() -> Result<u16> {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
        let port = l.local_addr()?.port();
        if given.insert(port) {
            return Ok(port);
        }
    }
}

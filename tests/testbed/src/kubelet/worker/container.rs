//! The containers' processes: start the one due (an init container, or
//! the regular one) from its launch plan, reap its exit, move on to the
//! next or restart it per restartPolicy with the kubelet's back-off, and
//! stop it (SIGTERM, then SIGKILL after the grace period). Each start
//! gets a fresh termination-message file, bound at the container's
//! `terminationMessagePath`; its end (or, under `FallbackToLogsOnError`,
//! the tail of that start's log) becomes `terminated.message` on exit.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use tokio::process::Child;
use tokio::time::Instant;

use super::super::launch::{self, LaunchPlan};
use super::super::probe::ProbeState;
use super::super::{exec, mounts};
use super::{Slot, Stop, Worker, now};

/// Where a container's termination message is when the Pod does not say
/// (the API server fills it in anyway).
pub(crate) const DEFAULT_TERMINATION_PATH: &str = "/dev/termination-log";
/// The kubelet's limits: the file's last 4 KiB; from the log, the last 80
/// lines, at most their last 2 KiB.
const MAX_MESSAGE: u64 = 4 * 1024;
const MAX_LOG_LINES: usize = 80;
const MAX_LOG_MESSAGE: usize = 2 * 1024;

/// The container's `terminationMessagePath`; an empty one means none.
pub(crate) fn termination_path(c: &k8s_openapi::api::core::v1::Container) -> Option<String> {
    match c.termination_message_path.as_deref() {
        None => Some(DEFAULT_TERMINATION_PATH.into()),
        Some("") => None,
        Some(p) => Some(p.into()),
    }
}

/// What the kubelet adds to `terminated.message` from the container
/// itself: the end of its termination-message file, or, under
/// `FallbackToLogsOnError` with that file empty and a non-zero exit, the
/// tail of this start's log.
fn termination_message(slot: &Slot, code: i32) -> String {
    let fallback = code != 0
        && slot.container.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
    let said = match &slot.termination_file {
        Some(path) => match read_from(path, None, MAX_MESSAGE) {
            Ok(data) => data,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return format!("Error on reading termination log {}: {e}", path.display()),
        },
        None => Vec::new(),
    };
    if !said.is_empty() || !fallback {
        return String::from_utf8_lossy(&said).into_owned();
    }
    // The 80 lines' last 2 KiB always lie in the output's last 64 KiB.
    match read_from(&slot.log_path, Some(slot.log_offset), 64 * 1024) {
        Ok(out) => String::from_utf8_lossy(log_tail(&out)).into_owned(),
        Err(e) => format!("Error on reading termination message from logs: {e}"),
    }
}

/// The last `max` bytes of `path` from `start` on (the whole file: None).
fn read_from(path: &Path, start: Option<u64>, max: u64) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let from = len.saturating_sub(max).max(start.unwrap_or(0));
    f.seek(SeekFrom::Start(from))?;
    let mut data = Vec::new();
    f.take(len - from.min(len)).read_to_end(&mut data)?;
    Ok(data)
}

/// The last [`MAX_LOG_LINES`] lines of `out`, cut to their last
/// [`MAX_LOG_MESSAGE`] bytes.
fn log_tail(out: &[u8]) -> &[u8] {
    let body = out.strip_suffix(b"\n").unwrap_or(out);
    let start = body
        .iter()
        .enumerate()
        .rev()
        .filter(|&(_, b)| *b == b'\n')
        .nth(MAX_LOG_LINES - 1)
        .map_or(0, |(i, _)| i + 1);
    let lines = &out[start..];
    &lines[lines.len().saturating_sub(MAX_LOG_MESSAGE)..]
}

impl Worker {
    /// The variables every container gets for the `kubernetes` Service. A
    /// real kubelet names the Service's ClusterIP; with no kube-proxy here
    /// they name the API server's own address, which is what that IP
    /// forwards to.
    pub(super) fn service_env(&self) -> Vec<(String, String)> {
        let Some(url) = self.node.config.api_server.as_deref() else {
            return Vec::new();
        };
        let hostport = url.trim_start_matches("https://");
        let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "443"));
        vec![
            ("KUBERNETES_SERVICE_HOST".into(), host.into()),
            ("KUBERNETES_SERVICE_PORT".into(), port.into()),
            ("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.into()),
            ("KUBERNETES_PORT".into(), format!("tcp://{host}:{port}")),
        ]
    }

    /// The node is up and the test does not hold this Pod back.
    pub(super) fn may_start(&self) -> bool {
        self.node_up && !self.node.is_held(&self.ns, &self.name)
    }

    /// Starts the container due: the next init container while the Pod
    /// initializes, else the regular one. A pulled image is pulled first
    /// (the pull ends in another call here). The plan is made at each
    /// start, as a kubelet generates a container's config at each start.
    pub(super) fn start_container(&mut self) {
        if self.child.is_some()
            || self.deleting
            || !self.prepared
            || !self.may_start()
            || matches!(self.phase, "Succeeded" | "Failed")
        {
            return;
        }
        let slot = self.cur_ref();
        if !slot.runnable {
            let e = launch::unrunnable(&slot.container);
            tracing::warn!(pod = %format!("{}/{}", self.ns, self.name), "{e}");
            // Nothing to pull it from until the Pod changes, which for an
            // init container's image never happens here.
            self.cur().waiting = ("ErrImagePull".into(), Some(e.to_string()));
            return;
        }
        if slot.init && slot.container.restart_policy.as_deref() == Some("Always") {
            let msg = format!(
                "init container {}: restartable init containers (sidecars, restartPolicy: Always) are not supported by the local kubelet",
                slot.container.name
            );
            return self.config_failed(msg);
        }
        let at = launch::PodEnv {
            ip: self.ip,
            host_ip: self.node.host_ip,
            sources: &self.sources,
        };
        let planned = if slot.pulls {
            // Every start of a pulled image goes through the pull (which
            // under IfNotPresent/Never only looks the image up), so
            // `Always` resolves the reference again each time.
            if self.pulling.is_some() || self.pull_wait.is_some() {
                return;
            }
            let Some(image) = self.cur().pulled.take() else {
                self.begin_pull();
                return;
            };
            let slot = self.cur_ref();
            let at = launch::PodEnv {
                ip: self.ip,
                host_ip: self.node.host_ip,
                sources: &self.sources,
            };
            let planned =
                launch::plan_pulled(&self.pod, &slot.container, &at, &slot.mounts, &image);
            if matches!(planned, Err(launch::LaunchError::Exec { .. })) {
                self.cur().image_id = Some(image.image_id.clone());
            }
            planned
        } else {
            launch::plan(
                &self.pod,
                &slot.container,
                &at,
                &slot.mounts,
                &self.node.releases,
                &self.node.config.images,
            )
        };
        let plan = match planned {
            Ok(plan) => plan,
            Err(e @ launch::LaunchError::ImagePull { .. }) => {
                // A kubelet retries a failed pull with back-off; the local
                // one has no other etcd release to find until the Pod
                // changes, so it reports the failure and waits.
                tracing::warn!(pod = %format!("{}/{}", self.ns, self.name), "{e}");
                self.cur().waiting = ("ErrImagePull".into(), Some(e.to_string()));
                return;
            }
            Err(e @ launch::LaunchError::Exec { .. }) => return self.start_failed(e.to_string()),
            Err(e @ launch::LaunchError::EnvSource { .. }) => {
                return self.env_source_missing(e.to_string());
            }
            Err(e) => return self.config_failed(e.to_string()),
        };
        let log_path = self.cur_ref().log_path.clone();
        let file = match self.termination_file() {
            Ok(file) => file,
            Err(e) => return self.start_failed(format!("creating the termination log: {e}")),
        };
        let slot = self.cur_ref();
        // etcd's programs see their volumes through rewritten paths, not
        // mounts, so nothing can put the file at their path; etcd never
        // writes one anyway, and FallbackToLogsOnError still works.
        let files: Vec<(PathBuf, String)> = match (&file, termination_path(&slot.container)) {
            (Some(file), Some(at)) if plan.release.is_none() => vec![(file.clone(), at)],
            _ => Vec::new(),
        };
        let spawned = self.spawn(&plan, &log_path, &files);
        let program = plan.program.clone();
        let slot = self.cur();
        slot.plan = Some(plan);
        slot.termination_file = file;
        match spawned {
            Ok((child, log_offset)) => {
                let pid = child.id().unwrap_or(0);
                let started = Instant::now();
                let slot = self.cur();
                slot.log_offset = log_offset;
                if slot.runs > 0 {
                    slot.restart_count += 1;
                }
                slot.runs += 1;
                slot.started_at = Some(now());
                slot.started_instant = Some(started);
                slot.terminated = None;
                slot.container_id = Some(format!("local://{pid}"));
                let name = slot.container.name.clone();
                let init = slot.init;
                self.child = Some(child);
                self.pid = Some(pid);
                self.node.started(pid);
                self.node.set_pid(&self.uid, Some(pid), false);
                self.frozen = false;
                if init {
                    tracing::info!(pod = %format!("{}/{}", self.ns, self.name), pid, container = %name, "started the init container");
                    return;
                }
                let c = &self.main.container;
                self.readiness = c
                    .readiness_probe
                    .clone()
                    .map(|p| ProbeState::new(p, started));
                self.liveness = c
                    .liveness_probe
                    .clone()
                    .map(|p| ProbeState::new(p, started));
                self.ready = self.readiness.is_none();
                self.phase = "Running";
                tracing::info!(pod = %format!("{}/{}", self.ns, self.name), pid, ip = %self.ip, container = %name, "started the container");
            }
            Err(e) => self.start_failed(format!("starting {}: {e}", program.display())),
        }
    }

    /// A fresh, empty, world-writable file for the termination message of
    /// the start due, as the kubelet makes one per container start under
    /// `pods/<uid>/containers/<name>/` (writable by whatever user the
    /// container runs as). None when the container has no
    /// `terminationMessagePath`.
    fn termination_file(&self) -> std::io::Result<Option<PathBuf>> {
        let slot = self.cur_ref();
        if termination_path(&slot.container).is_none() {
            return Ok(None);
        }
        let dir = self.dir.join("containers").join(&slot.container.name);
        std::fs::create_dir_all(&dir)?;
        let file = dir.join((slot.runs + 1).to_string());
        std::fs::File::create(&file)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666))?;
        Ok(Some(file))
    }

    /// Spawns `plan`'s process with its stdout and stderr appended to
    /// `log_path`, and `files` (host file, path in the container) bound in
    /// its mount namespace. Also returns where its output starts in the log.
    fn spawn(
        &self,
        plan: &LaunchPlan,
        log_path: &Path,
        files: &[(PathBuf, String)],
    ) -> std::io::Result<(Child, u64)> {
        let mut note = None;
        let run_as = match &plan.run_as {
            Some(u) if exec::can_run_as(u) => Some(u.clone()),
            Some(u) => {
                note = Some(format!(
                    "cannot run as uid {} gid {} here (this kubelet is not root with those ids mapped, e.g. under unshare -r); running as uid {}",
                    u.uid,
                    u.gid,
                    exec::euid()
                ));
                None
            }
            None => None,
        };
        std::fs::create_dir_all(&self.dir)?;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)?;
        use std::io::Write;
        writeln!(
            log,
            "--- steward-testbed kubelet: starting {} {}",
            plan.program.display(),
            plan.args.join(" ")
        )?;
        if let Some(note) = &note {
            writeln!(log, "--- steward-testbed kubelet: {note}")?;
        }
        let log_offset = log.metadata()?.len();
        let err = log.try_clone()?;
        // The image is opened before the container's mounts exist and
        // executed through its descriptor (execveat AT_EMPTY_PATH): a
        // volume mounted over the directory the program lives in (an
        // emptyDir at /tmp, with a build under /tmp) must not hide it,
        // as a volume never hides a real container's image. O_CLOEXEC
        // does not stop the exec of an ELF file, and the program does
        // not inherit the descriptor.
        let image = std::fs::File::open(&plan.program)?;
        if let Some(dir) = plan
            .working_dir
            .as_ref()
            .filter(|d| d.starts_with(&self.node.root))
        {
            // A WorkingDir inside the rootfs is made, as a runtime does.
            std::fs::create_dir_all(dir)?;
        }
        let hostname = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.hostname.clone())
            .unwrap_or(self.name.clone());
        let mut env = vec![
            (
                "PATH".to_string(),
                "/usr/local/bin:/usr/bin:/bin".to_string(),
            ),
            ("HOSTNAME".to_string(), hostname),
        ];
        for (k, v) in self
            .service_env()
            .into_iter()
            .chain(plan.env.iter().cloned())
        {
            launch::set_env(&mut env, k, v);
        }
        let argv: Vec<String> = std::iter::once(plan.arg0.clone())
            .chain(plan.args.iter().cloned())
            .collect();
        // A working directory in the rootfs is entered before the
        // volumes are mounted (one may cover the rootfs, an emptyDir
        // at /tmp over a kubelet root under /tmp); one at a volume,
        // after.
        let (before_mounts, after_mounts) = match &plan.working_dir {
            Some(d) if d.starts_with(&self.node.root) => (d.as_path(), None),
            Some(d) => (self.dir.as_path(), Some(d.as_path())),
            None => (self.dir.as_path(), None),
        };
        let exec = exec::Exec::new(
            std::os::fd::AsRawFd::as_raw_fd(&image),
            &argv,
            &env,
            after_mounts,
            run_as.as_ref(),
        )?;
        // std's own exec never runs: the hook execs or fails. What
        // std is given here matters only for its bookkeeping.
        let mut cmd = tokio::process::Command::new(&plan.program);
        cmd.env_clear()
            .current_dir(before_mounts)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            // Its own process group: a Ctrl-C at the sandbox's terminal
            // reaches the kubelet, which then stops etcd in order.
            .process_group(0)
            .kill_on_drop(true);
        let mut mounts = mounts::Private::new(&plan.binds, files)?;
        // SAFETY: prctl, unshare, mount, mkdir, chdir, the set*id calls
        // and execveat are async-signal-safe system calls on memory
        // prepared before the fork; nothing else runs in the child.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
                mounts.enter()?;
                Err(exec.exec())
            });
        }
        let child = cmd.spawn();
        drop(image);
        Ok((child?, log_offset))
    }

    /// The container could not be started: `RunContainerError` and a
    /// restart with back-off, or `StartError` when nothing restarts it.
    /// An init container that cannot start fails the Pod under `Never`.
    pub(super) fn start_failed(&mut self, message: String) {
        tracing::warn!(pod = %format!("{}/{}", self.ns, self.name), "{message}");
        // Where a user looks first; the status keeps only the reason.
        if let Ok(mut log) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.cur_ref().log_path)
        {
            use std::io::Write;
            let _ = writeln!(log, "--- steward-testbed kubelet: {message}");
        }
        if self.restart_policy() != "Never" {
            self.cur().waiting = ("RunContainerError".into(), Some(message));
            self.schedule_restart();
        } else {
            // As the kubelet reports a container that never started.
            self.cur().terminated = Some(json!({"terminated": {
                "exitCode": 128, "reason": "StartError", "message": message,
                "finishedAt": now().to_string(),
            }}));
            self.phase = "Failed";
        }
    }

    pub(super) async fn on_exit(&mut self, r: std::io::Result<ExitStatus>) {
        self.child = None;
        let pid = self.pid.take();
        if let Some(pid) = pid {
            self.node.exited(pid);
        }
        self.node.set_pid(&self.uid, None, false);
        self.kill_at = None;
        self.frozen = false;
        self.ready = false;
        self.readiness = None;
        self.liveness = None;
        let (mut code, mut signal) = match r {
            Ok(s) => (
                s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
                s.signal(),
            ),
            Err(_) => (-1, None),
        };
        let mut note = None;
        if signal == Some(Signal::SIGTERM as i32) {
            // etcd handles SIGTERM by stopping cleanly and then re-raising it
            // on itself, unless it is PID 1, where it exits 0. In a container
            // it is PID 1; here it is not, so the exit a container would
            // report for a SIGTERM is 0, whoever sent it (this kubelet, a
            // node shutdown, an operator's `kill`).
            code = 0;
            signal = None;
            note = Some(
                "stopped on SIGTERM; recorded as exit 0, as etcd exits when it is a container's PID 1",
            );
        }
        let slot = self.cur();
        let ran_for = slot
            .started_instant
            .map(|s| s.elapsed())
            .unwrap_or_default();
        let mut terminated = json!({
            "exitCode": code,
            "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": slot.started_at.map(|t| t.to_string()),
            "finishedAt": now().to_string(),
            "containerID": pid.map(|p| format!("local://{p}")),
        });
        if let Some(sig) = signal {
            terminated["signal"] = json!(sig);
            let name = Signal::try_from(sig)
                .map(|s| s.as_str())
                .unwrap_or("unknown signal");
            terminated["message"] = json!(format!("killed by {name}"));
        }
        if let Some(note) = note {
            terminated["message"] = json!(note);
        }
        let said = termination_message(slot, code);
        if !said.is_empty() {
            // As the kubelet: the container's words follow the runtime's.
            let message = match terminated["message"].as_str() {
                Some(m) if !m.is_empty() => format!("{m}: {said}"),
                _ => said,
            };
            terminated["message"] = json!(message);
        }
        slot.terminated = Some(json!({ "terminated": terminated }));
        slot.last_exit = Some(code);
        let init = slot.init;
        let name = slot.container.name.clone();
        tracing::info!(pod = %format!("{}/{}", self.ns, self.name), ?pid, code, ?signal, container = %name, init, "the container exited");
        for w in self.exit_waiters.drain(..) {
            let _ = w.send(());
        }
        match self.stopping.take() {
            Some(Stop::Shutdown) => self.done = true,
            Some(Stop::Delete) => self.finalize().await,
            _ if self.deleting => self.finalize().await,
            // A node stop ends the Pod; one still initializing never ran.
            Some(Stop::Node) => {
                self.phase = if code == 0 && !init {
                    "Succeeded"
                } else {
                    "Failed"
                }
            }
            Some(Stop::Liveness) | None if init => {
                if code == 0 {
                    // Done: the next init container, or the regular one.
                    self.init_done += 1;
                    self.start_container();
                } else if self.restart_policy() != "Never" && self.node_up {
                    // Under Always and OnFailure alike a failed init
                    // container runs again, with back-off.
                    let slot = self.cur();
                    slot.last_state = slot.terminated.take();
                    self.schedule_restart();
                } else {
                    self.phase = "Failed";
                }
            }
            Some(Stop::Liveness) | None => {
                let restart = match self.restart_policy() {
                    "Never" => false,
                    "OnFailure" => code != 0,
                    _ => true,
                };
                if restart && self.node_up {
                    let slot = self.cur();
                    // A container that ran for a while starts its backoff afresh.
                    if ran_for > Duration::from_secs(60) {
                        slot.backoff = Duration::ZERO;
                    }
                    slot.last_state = slot.terminated.take();
                    self.schedule_restart();
                } else {
                    self.phase = if code == 0 { "Succeeded" } else { "Failed" };
                }
            }
        }
    }

    /// The first restart is immediate, later ones back off (doubling up to
    /// the configured cap) so a crash-looping container does not spin.
    pub(super) fn schedule_restart(&mut self) {
        let (first, cap) = (
            self.node.config.restart_backoff,
            self.node.config.max_restart_backoff,
        );
        let slot = self.cur();
        let delay = slot.backoff;
        slot.backoff = if delay.is_zero() {
            first
        } else {
            (delay * 2).min(cap)
        };
        if delay.is_zero() {
            self.start_container();
        } else {
            slot.waiting = (
                "CrashLoopBackOff".into(),
                Some(format!(
                    "back-off {}s restarting failed container={}",
                    delay.as_secs(),
                    slot.container.name
                )),
            );
            self.restart_at = Some(Instant::now() + delay);
        }
    }

    /// the SIGTERM so it can act on it.
    pub(super) fn stop_process(&mut self, why: Stop, grace: Duration) {
        self.stopping = Some(why);
        // An error means the process already exited; its exit is on the way.
        let _ = self.signal(Signal::SIGTERM);
        if self.frozen {
            let _ = self.signal(Signal::SIGCONT);
            self.frozen = false;
            self.node.set_pid(&self.uid, self.pid, false);
        }
        self.kill_at = Some(Instant::now() + grace);
    }

    pub(super) fn signal(&self, sig: Signal) -> Result<u32, String> {
        match (self.child.as_ref(), self.pid) {
            (Some(_), Some(pid)) => kill(Pid::from_raw(pid as i32), sig)
                .map(|()| pid)
                .map_err(|e| format!("{sig}: {e}")),
            _ => Err(format!(
                "{}/{} has no running container",
                self.ns, self.name
            )),
        }
    }

    pub(super) fn sigkill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_log_tail_is_the_last_80_lines_within_2_kib() {
        let lines: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let tail = String::from_utf8(super::log_tail(lines.as_bytes()).to_vec()).unwrap();
        let want: String = (21..=100).map(|i| format!("line {i}\n")).collect();
        assert_eq!(tail, want);
        let unterminated = "a\nb";
        assert_eq!(super::log_tail(unterminated.as_bytes()), b"a\nb");
        let long = "x".repeat(3000) + "\n";
        assert_eq!(super::log_tail(long.as_bytes()).len(), 2048);
        assert!(super::log_tail(long.as_bytes()).ends_with(b"x\n"));
    }

    #[test]
    fn the_file_is_read_from_its_end() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, "0123456789").unwrap();
        assert_eq!(super::read_from(&p, None, 4).unwrap(), b"6789");
        assert_eq!(super::read_from(&p, Some(8), 4).unwrap(), b"89");
        assert_eq!(super::read_from(&p, Some(2), 100).unwrap(), b"23456789");
        assert_eq!(super::read_from(&p, Some(20), 100).unwrap(), b"");
    }
}

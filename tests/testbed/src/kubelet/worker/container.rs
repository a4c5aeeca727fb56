//! The containers' processes: start the one due (an init container, or
//! the regular one) from its launch plan, reap its exit, move on to the
//! next or restart it per restartPolicy with the kubelet's back-off, and
//! stop it (SIGTERM, then SIGKILL after the grace period).

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
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
use super::{Stop, Worker, now};

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
        let spawned = self.spawn(&plan, &log_path);
        let program = plan.program.clone();
        self.cur().plan = Some(plan);
        match spawned {
            Ok(child) => {
                let pid = child.id().unwrap_or(0);
                let started = Instant::now();
                let slot = self.cur();
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

    /// Spawns `plan`'s process with its stdout and stderr appended to
    /// `log_path`.
    fn spawn(&self, plan: &LaunchPlan, log_path: &Path) -> std::io::Result<Child> {
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
        let mut mounts = mounts::Private::new(&plan.binds)?;
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
        child
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

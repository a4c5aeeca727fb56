//! One Pod's life on the local node: prepare volumes, run the etcd process,
//! probe it, restart it per restartPolicy, report every change through the
//! status subresource, and stop it when the Pod is deleted.
//!
//! Each Pod gets its own task. Everything that changes the process (exit,
//! probe verdicts, fault verbs, deletion) is handled in that one task, so the
//! PID it signals is always its own unreaped child.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::Node;
use super::launch::{self, LaunchPlan};
use super::probe::{self, ProbeState, Verdict};

/// Requests to a Pod's worker.
pub(crate) enum Command {
    /// A newer version of the Pod from the watch.
    Update(Box<Pod>),
    /// The Pod is gone from the API.
    Gone,
    Kill(oneshot::Sender<Result<u32, String>>),
    Freeze(oneshot::Sender<Result<u32, String>>),
    Thaw(oneshot::Sender<Result<u32, String>>),
    /// Stop gracefully and do not restart; answered once the process is gone.
    StopNode(oneshot::Sender<()>),
    StartNode,
    /// [`super::Kubelet::release_starts`]: a held Pending Pod may start now.
    Release,
    /// The kubelet is going away: stop the process, write nothing more.
    Shutdown(oneshot::Sender<()>),
}

/// Why the running process is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Liveness,
    Node,
    Delete,
    Shutdown,
}

enum Wake {
    Exit(std::io::Result<ExitStatus>),
    Cmd(Option<Command>),
    Prepare,
    Readiness,
    Liveness,
    Restart,
    KillDeadline,
    RetryStatus,
}

pub(crate) struct Worker {
    node: Arc<Node>,
    pod: Pod,
    ns: String,
    name: String,
    uid: String,
    ip: Ipv4Addr,
    dir: PathBuf,
    log_path: PathBuf,
    container: Container,
    plan: Option<LaunchPlan>,
    /// Set when the container cannot be started at all.
    config_error: Option<String>,
    /// Set while volumes are not ready yet (e.g. the PVC does not exist).
    prepare_at: Option<Instant>,
    waiting: (String, Option<String>),

    child: Option<Child>,
    pid: Option<u32>,
    runs: u32,
    started_at: Option<Timestamp>,
    started_instant: Option<Instant>,
    /// The container's current terminated state, if it is not running.
    terminated: Option<Value>,
    last_state: Option<Value>,
    last_exit: Option<i32>,
    restart_count: i32,
    ready: bool,
    readiness: Option<ProbeState>,
    liveness: Option<ProbeState>,
    phase: &'static str,
    frozen: bool,
    restart_at: Option<Instant>,
    backoff: Duration,
    kill_at: Option<Instant>,
    stopping: Option<Stop>,
    deleting: bool,
    gone: bool,
    node_up: bool,
    exit_waiters: Vec<oneshot::Sender<()>>,
    start_time: Timestamp,
    transitions: BTreeMap<&'static str, (bool, Timestamp)>,
    last_written: Option<Value>,
    status_retry_at: Option<Instant>,
    done: bool,
}

fn now() -> Timestamp {
    // Kubernetes timestamps have whole seconds.
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
}

async fn sleep_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Worker {
    pub(crate) fn new(
        node: Arc<Node>,
        pod: Pod,
        ip: Ipv4Addr,
        dir: PathBuf,
        container: Container,
    ) -> Self {
        let ns = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let node_up = *node.up.borrow();
        Worker {
            log_path: dir.join(format!("{}.log", container.name)),
            node,
            pod,
            ns,
            name,
            uid,
            ip,
            dir,
            container,
            plan: None,
            config_error: None,
            prepare_at: Some(Instant::now()),
            waiting: ("ContainerCreating".into(), None),
            child: None,
            pid: None,
            runs: 0,
            started_at: None,
            started_instant: None,
            terminated: None,
            last_state: None,
            last_exit: None,
            restart_count: 0,
            ready: false,
            readiness: None,
            liveness: None,
            phase: "Pending",
            frozen: false,
            restart_at: None,
            backoff: Duration::ZERO,
            kill_at: None,
            stopping: None,
            deleting: false,
            gone: false,
            node_up,
            exit_waiters: Vec::new(),
            start_time: now(),
            transitions: BTreeMap::new(),
            last_written: None,
            status_retry_at: None,
            done: false,
        }
    }

    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        if self.pod.metadata.deletion_timestamp.is_some() {
            self.begin_delete().await;
        }
        while !self.done {
            self.publish().await;
            if self.done {
                break;
            }
            let running = self.child.is_some() && self.stopping.is_none();
            let probing = running && !self.frozen;
            let readiness_at = self.readiness.as_ref().filter(|_| probing).map(|p| p.next);
            let liveness_at = self.liveness.as_ref().filter(|_| probing).map(|p| p.next);
            let prepare_at = self.prepare_at.filter(|_| !self.deleting);
            let kill_at = self.kill_at.filter(|_| self.child.is_some());
            let wake = {
                let child = &mut self.child;
                tokio::select! {
                    r = async { child.as_mut().unwrap().wait().await }, if child.is_some() => Wake::Exit(r),
                    c = rx.recv() => Wake::Cmd(c),
                    _ = sleep_opt(prepare_at) => Wake::Prepare,
                    _ = sleep_opt(readiness_at) => Wake::Readiness,
                    _ = sleep_opt(liveness_at) => Wake::Liveness,
                    _ = sleep_opt(self.restart_at) => Wake::Restart,
                    _ = sleep_opt(kill_at) => Wake::KillDeadline,
                    _ = sleep_opt(self.status_retry_at) => Wake::RetryStatus,
                }
            };
            match wake {
                Wake::Exit(r) => self.on_exit(r).await,
                Wake::Cmd(Some(c)) => self.on_command(c).await,
                // The kubelet dropped its handle without a Shutdown: stop.
                Wake::Cmd(None) => {
                    self.on_command(Command::Shutdown(oneshot::channel().0))
                        .await
                }
                Wake::Prepare => self.prepare().await,
                Wake::Readiness => self.probe_readiness().await,
                Wake::Liveness => self.probe_liveness().await,
                Wake::Restart => {
                    self.restart_at = None;
                    self.start_container();
                }
                Wake::KillDeadline => {
                    self.kill_at = None;
                    self.sigkill();
                }
                Wake::RetryStatus => self.status_retry_at = None,
            }
        }
        self.node.forget(&self.uid);
    }

    fn restart_policy(&self) -> &str {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .unwrap_or("Always")
    }

    fn grace(&self) -> Duration {
        let secs = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                self.pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30);
        Duration::from_secs(secs.max(0) as u64)
    }

    // ----- preparing --------------------------------------------------------

    async fn prepare(&mut self) {
        self.prepare_at = None;
        if self.phase != "Pending" || self.plan.is_some() {
            return;
        }
        match self.volumes().await {
            Ok(mounts) => {
                let host_ip = self.node.host_ip;
                match launch::plan(
                    &self.pod,
                    &self.container,
                    self.ip,
                    host_ip,
                    &mounts,
                    &self.node.bins,
                    &self.node.config.images,
                ) {
                    Ok(plan) => {
                        for (_, dir) in &mounts {
                            if let Err(e) = std::fs::create_dir_all(dir) {
                                return self
                                    .config_failed(format!("creating {}: {e}", dir.display()));
                            }
                        }
                        self.plan = Some(plan);
                        if self.may_start() {
                            self.start_container();
                        } else if self.node.is_held(&self.ns, &self.name) {
                            self.waiting = (
                                "ContainerCreating".into(),
                                Some("held by the test (Kubelet::hold_starts)".into()),
                            );
                        }
                    }
                    Err(e) => self.config_failed(e.to_string()),
                }
            }
            Err(VolumeError::NotYet(msg)) => {
                self.waiting = ("ContainerCreating".into(), Some(msg));
                self.prepare_at = Some(Instant::now() + Duration::from_secs(1));
            }
            Err(VolumeError::Unsupported(msg)) => self.config_failed(msg),
        }
    }

    fn config_failed(&mut self, msg: String) {
        tracing::warn!(pod = %format!("{}/{}", self.ns, self.name), "cannot start: {msg}");
        self.config_error = Some(msg.clone());
        self.waiting = ("CreateContainerConfigError".into(), Some(msg));
    }

    async fn volumes(&self) -> Result<Vec<(String, PathBuf)>, VolumeError> {
        let spec = self.pod.spec.as_ref();
        let mut mounts = Vec::new();
        for vm in self.container.volume_mounts.iter().flatten() {
            let volume = spec
                .and_then(|s| s.volumes.as_ref())
                .and_then(|vs| vs.iter().find(|v| v.name == vm.name))
                .ok_or_else(|| {
                    VolumeError::Unsupported(format!(
                        "volumeMount {:?} names no volume of the Pod",
                        vm.name
                    ))
                })?;
            let mut dir = if let Some(pvc) = &volume.persistent_volume_claim {
                self.claim_dir(&pvc.claim_name).await?
            } else if volume.empty_dir.is_some() {
                self.dir.join("volumes").join(&volume.name)
            } else if let Some(projected) = &volume.projected {
                let dir = self.dir.join("volumes").join(&volume.name);
                super::projected::populate(
                    &self.node.client,
                    &self.pod,
                    projected,
                    &dir,
                    self.ip,
                    self.node.host_ip,
                )
                .await
                .map_err(VolumeError::NotYet)?;
                dir
            } else {
                return Err(VolumeError::Unsupported(format!(
                    "volume {:?}: only persistentVolumeClaim, emptyDir and projected volumes are supported by the local kubelet",
                    volume.name
                )));
            };
            if let Some(sub) = vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
                dir = dir.join(sub);
            }
            mounts.push((vm.mount_path.clone(), dir));
        }
        Ok(mounts)
    }

    /// The directory of the volume bound to `claim`: the provisioner made a
    /// `local` PersistentVolume for it and the PV controller bound it.
    async fn claim_dir(&self, claim: &str) -> Result<PathBuf, VolumeError> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.node.client.clone(), &self.ns);
        let pvc = match api.get_opt(claim).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(VolumeError::NotYet(format!(
                    "persistentvolumeclaim {claim:?} not found"
                )));
            }
            Err(e) => {
                return Err(VolumeError::NotYet(format!(
                    "reading persistentvolumeclaim {claim:?}: {e}"
                )));
            }
        };
        let volume = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty());
        let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        let Some(volume) = volume.filter(|_| bound) else {
            return Err(VolumeError::NotYet(format!(
                "persistentvolumeclaim {claim:?} is not bound yet"
            )));
        };
        let pvs: Api<PersistentVolume> = Api::all(self.node.client.clone());
        let pv = pvs.get(&volume).await.map_err(|e| {
            VolumeError::NotYet(format!("reading persistentvolume {volume:?}: {e}"))
        })?;
        let spec = pv.spec.unwrap_or_default();
        match (spec.local, spec.host_path) {
            (Some(local), _) => Ok(PathBuf::from(local.path)),
            (None, Some(host)) => Ok(PathBuf::from(host.path)),
            (None, None) => Err(VolumeError::Unsupported(format!(
                "persistentvolume {volume:?}: only local and hostPath volumes are supported by the local kubelet"
            ))),
        }
    }

    // ----- running ----------------------------------------------------------

    /// The variables every container gets for the `kubernetes` Service. A
    /// real kubelet names the Service's ClusterIP; with no kube-proxy here
    /// they name the API server's own address, which is what that IP
    /// forwards to.
    fn service_env(&self) -> Vec<(String, String)> {
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
    fn may_start(&self) -> bool {
        self.node_up && !self.node.is_held(&self.ns, &self.name)
    }

    fn start_container(&mut self) {
        if self.child.is_some() || self.deleting || !self.may_start() {
            return;
        }
        let Some(plan) = self.plan.clone() else {
            return;
        };
        let spawned = (|| -> std::io::Result<Child> {
            std::fs::create_dir_all(&self.dir)?;
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log_path)?;
            use std::io::Write;
            writeln!(
                log,
                "--- steward-testbed kubelet: starting {} {}",
                plan.program.display(),
                plan.args.join(" ")
            )?;
            let err = log.try_clone()?;
            // The image is opened before the container's mounts exist and
            // run through /proc/self/fd: a volume mounted over the
            // directory the program lives in (an emptyDir at /tmp, with a
            // build under /tmp) must not hide it, as a volume never hides a
            // real container's image. O_CLOEXEC: execve resolves the path
            // before the descriptor closes, so the program does not see it.
            let image = std::fs::File::open(&plan.program)?;
            let mut cmd = tokio::process::Command::new(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&image)
            ));
            cmd.arg0(&plan.program);
            cmd.args(&plan.args)
                .env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env(
                    "HOSTNAME",
                    self.pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.hostname.clone())
                        .unwrap_or(self.name.clone()),
                )
                .envs(self.service_env())
                .envs(plan.env.iter().map(|(k, v)| (k, v)))
                .current_dir(&self.dir)
                .stdin(Stdio::null())
                .stdout(Stdio::from(log))
                .stderr(Stdio::from(err))
                // Its own process group: a Ctrl-C at the sandbox's terminal
                // reaches the kubelet, which then stops etcd in order.
                .process_group(0)
                .kill_on_drop(true);
            let mut mounts = super::mounts::Private::new(&plan.binds)?;
            // SAFETY: prctl, unshare, mount and mkdir are async-signal-safe
            // system calls on memory prepared before the fork; nothing else
            // runs in the child.
            unsafe {
                cmd.pre_exec(move || {
                    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                        .map_err(std::io::Error::from)?;
                    mounts.enter()
                });
            }
            let child = cmd.spawn();
            drop(image);
            child
        })();
        match spawned {
            Ok(child) => {
                let pid = child.id().unwrap_or(0);
                if self.runs > 0 {
                    self.restart_count += 1;
                }
                self.runs += 1;
                self.child = Some(child);
                self.pid = Some(pid);
                self.node.started(pid);
                self.node.set_pid(&self.uid, Some(pid), false);
                let started = Instant::now();
                self.started_at = Some(now());
                self.started_instant = Some(started);
                self.terminated = None;
                self.frozen = false;
                let c = &self.container;
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
                tracing::info!(pod = %format!("{}/{}", self.ns, self.name), pid, ip = %self.ip, "started the container");
            }
            Err(e) => {
                let message = format!("starting {}: {e}", plan.program.display());
                tracing::warn!(pod = %format!("{}/{}", self.ns, self.name), "{message}");
                // Where a user looks first; the status keeps only the reason.
                if let Ok(mut log) = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&self.log_path)
                {
                    use std::io::Write;
                    let _ = writeln!(log, "--- steward-testbed kubelet: {message}");
                }
                if self.restart_policy() != "Never" {
                    self.waiting = ("RunContainerError".into(), Some(message));
                    self.schedule_restart();
                } else {
                    // As the kubelet reports a container that never started.
                    self.terminated = Some(json!({"terminated": {
                        "exitCode": 128, "reason": "StartError", "message": message,
                        "finishedAt": now().to_string(),
                    }}));
                    self.phase = "Failed";
                }
            }
        }
    }

    async fn on_exit(&mut self, r: std::io::Result<ExitStatus>) {
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
        let ran_for = self
            .started_instant
            .map(|s| s.elapsed())
            .unwrap_or_default();
        let mut terminated = json!({
            "exitCode": code,
            "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": self.started_at.map(|t| t.to_string()),
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
        tracing::info!(pod = %format!("{}/{}", self.ns, self.name), ?pid, code, ?signal, "the container exited");
        self.terminated = Some(json!({ "terminated": terminated }));
        self.last_exit = Some(code);
        for w in self.exit_waiters.drain(..) {
            let _ = w.send(());
        }
        match self.stopping.take() {
            Some(Stop::Shutdown) => self.done = true,
            Some(Stop::Delete) => self.finalize().await,
            _ if self.deleting => self.finalize().await,
            Some(Stop::Node) => self.phase = if code == 0 { "Succeeded" } else { "Failed" },
            Some(Stop::Liveness) | None => {
                let restart = match self.restart_policy() {
                    "Never" => false,
                    "OnFailure" => code != 0,
                    _ => true,
                };
                if restart && self.node_up {
                    // A container that ran for a while starts its backoff afresh.
                    if ran_for > Duration::from_secs(60) {
                        self.backoff = Duration::ZERO;
                    }
                    self.last_state = self.terminated.take();
                    self.schedule_restart();
                } else {
                    self.phase = if code == 0 { "Succeeded" } else { "Failed" };
                }
            }
        }
    }

    /// The first restart is immediate, later ones back off (doubling up to
    /// the configured cap) so a crash-looping etcd does not spin.
    fn schedule_restart(&mut self) {
        let delay = self.backoff;
        let cfg = &self.node.config;
        self.backoff = if delay.is_zero() {
            cfg.restart_backoff
        } else {
            (delay * 2).min(cfg.max_restart_backoff)
        };
        if delay.is_zero() {
            self.start_container();
        } else {
            self.waiting = (
                "CrashLoopBackOff".into(),
                Some(format!(
                    "back-off {}s restarting failed container={}",
                    delay.as_secs(),
                    self.container.name
                )),
            );
            self.restart_at = Some(Instant::now() + delay);
        }
    }

    async fn probe_readiness(&mut self) {
        let Some(state) = self.readiness.as_ref() else {
            return;
        };
        let outcome = probe::run_once(
            &state.probe,
            &self.container,
            IpAddr::V4(self.ip),
            &self.node.bins,
        )
        .await;
        if self.frozen || self.child.is_none() {
            return;
        }
        let Some(state) = self.readiness.as_mut() else {
            return;
        };
        match state.record(outcome, Instant::now()) {
            Verdict::Passing => self.ready = true,
            Verdict::Failing => self.ready = false,
            Verdict::Unchanged => {}
        }
    }

    async fn probe_liveness(&mut self) {
        let Some(state) = self.liveness.as_ref() else {
            return;
        };
        let outcome = probe::run_once(
            &state.probe,
            &self.container,
            IpAddr::V4(self.ip),
            &self.node.bins,
        )
        .await;
        if self.frozen || self.child.is_none() {
            return;
        }
        let Some(state) = self.liveness.as_mut() else {
            return;
        };
        if state.record(outcome, Instant::now()) == Verdict::Failing {
            let why = state.last_error.clone().unwrap_or_default();
            let grace = state
                .probe
                .termination_grace_period_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64))
                .unwrap_or_else(|| self.grace());
            tracing::info!(pod = %format!("{}/{}", self.ns, self.name), "liveness probe failed ({why}); restarting");
            self.stop_process(Stop::Liveness, grace);
        }
    }

    /// SIGTERM now, SIGKILL after `grace`. A frozen process is thawed after
    /// the SIGTERM so it can act on it.
    fn stop_process(&mut self, why: Stop, grace: Duration) {
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

    fn signal(&self, sig: Signal) -> Result<u32, String> {
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

    fn sigkill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }

    async fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Update(pod) => {
                let deleting = pod.metadata.deletion_timestamp.is_some();
                self.pod = *pod;
                if deleting && !self.deleting {
                    self.begin_delete().await;
                }
            }
            Command::Gone => {
                self.gone = true;
                if !self.deleting {
                    self.begin_delete().await;
                }
            }
            Command::Kill(reply) => {
                let r = self.signal(Signal::SIGKILL);
                let _ = reply.send(r);
            }
            Command::Freeze(reply) => {
                let r = if self.frozen {
                    self.pid.ok_or_else(|| "not running".to_string())
                } else {
                    self.signal(Signal::SIGSTOP)
                };
                if r.is_ok() {
                    self.frozen = true;
                    self.node.set_pid(&self.uid, self.pid, true);
                }
                let _ = reply.send(r);
            }
            Command::Thaw(reply) => {
                let r = self.signal(Signal::SIGCONT);
                if r.is_ok() {
                    self.frozen = false;
                    self.node.set_pid(&self.uid, self.pid, false);
                    let t = Instant::now();
                    self.readiness
                        .iter_mut()
                        .chain(self.liveness.iter_mut())
                        .for_each(|p| p.postpone(t));
                }
                let _ = reply.send(r);
            }
            Command::StopNode(ack) => {
                self.node_up = false;
                self.restart_at = None;
                if self.child.is_some() {
                    if self.stopping.is_none() {
                        self.stop_process(Stop::Node, self.grace());
                    }
                    self.exit_waiters.push(ack);
                } else {
                    if self.phase == "Running" {
                        // Between restarts: the node stop ends the Pod too.
                        self.phase = if self.last_exit == Some(0) {
                            "Succeeded"
                        } else {
                            "Failed"
                        };
                        self.terminated = self.last_state.take().or(self.terminated.take());
                    }
                    let _ = ack.send(());
                }
            }
            Command::StartNode => {
                self.node_up = true;
                if self.phase == "Pending" && self.plan.is_some() {
                    self.start_container();
                }
            }
            Command::Release => {
                if self.phase == "Pending" && self.plan.is_some() {
                    self.start_container();
                }
            }
            Command::Shutdown(ack) => {
                self.gone = true;
                self.restart_at = None;
                if self.child.is_some() {
                    self.stop_process(Stop::Shutdown, self.node.config.shutdown_grace);
                    self.exit_waiters.push(ack);
                } else {
                    self.done = true;
                    let _ = ack.send(());
                }
            }
        }
    }

    // ----- deleting ---------------------------------------------------------

    async fn begin_delete(&mut self) {
        self.deleting = true;
        self.restart_at = None;
        self.prepare_at = None;
        if self.child.is_some() {
            if self.stopping.is_none() || self.stopping == Some(Stop::Liveness) {
                self.stop_process(Stop::Delete, self.grace());
            } else {
                self.stopping = Some(Stop::Delete);
            }
        } else {
            self.finalize().await;
        }
    }

    /// The process is gone: release the Pod's name, address and scratch
    /// space, then let the API server remove the object.
    async fn finalize(&mut self) {
        self.done = true;
        self.node.unpublish_names(&self.uid);
        let scratch = self.dir.join("volumes");
        if scratch.exists()
            && let Err(e) = std::fs::remove_dir_all(&scratch)
        {
            tracing::warn!("removing {}: {e}", scratch.display());
        }
        if self.gone {
            return;
        }
        // As the kubelet's status manager: the process is gone, so the Pod
        // may go without further grace; the uid precondition keeps a
        // same-named successor safe.
        let api: Api<Pod> = Api::namespaced(self.node.client.clone(), &self.ns);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        for _ in 0..5 {
            match api.delete(&self.name, &dp).await {
                Ok(_) => return,
                // Gone, or a successor under the same name: nothing of ours.
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return,
                Err(e) => tracing::debug!("deleting {}/{}: {e}", self.ns, self.name),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tracing::warn!("could not finish deleting {}/{}", self.ns, self.name);
    }

    // ----- status -----------------------------------------------------------

    fn condition(&mut self, kind: &'static str, status: bool, reason: Option<&str>) -> Value {
        let at = now();
        let entry = self.transitions.entry(kind).or_insert((status, at));
        if entry.0 != status {
            *entry = (status, at);
        }
        let mut c = json!({
            "type": kind,
            "status": if status { "True" } else { "False" },
            "lastProbeTime": null,
            "lastTransitionTime": entry.1.to_string(),
        });
        if let Some(r) = reason {
            c["reason"] = json!(r);
        }
        c
    }

    fn status(&mut self) -> Value {
        let terminal = matches!(self.phase, "Succeeded" | "Failed");
        let ready = self.ready && self.child.is_some() && !terminal;
        let not_ready_reason = if terminal {
            Some("PodCompleted")
        } else if ready {
            None
        } else {
            Some("ContainersNotReady")
        };
        let state = if let Some(t) = &self.terminated {
            t.clone()
        } else if let (Some(_), Some(at)) = (&self.child, self.started_at) {
            json!({"running": {"startedAt": at.to_string()}})
        } else {
            let (reason, message) = &self.waiting;
            json!({"waiting": {"reason": reason, "message": message}})
        };
        let container = json!({
            "name": self.container.name,
            "image": self.container.image.clone().unwrap_or_default(),
            "imageID": format!(
                "local://{}",
                self.plan
                    .as_ref()
                    .map_or(self.node.bins.etcd.as_path(), |p| p.program.as_path())
                    .display()
            ),
            "containerID": self.pid.map(|p| format!("local://{p}")),
            "ready": ready,
            "started": self.child.is_some(),
            "restartCount": self.restart_count,
            "state": state,
            "lastState": self.last_state.clone().unwrap_or_else(|| json!({})),
        });
        let ip = self.ip.to_string();
        let host_ip = self.node.host_ip.to_string();
        let conditions = vec![
            self.condition("PodScheduled", true, None),
            self.condition("Initialized", true, None),
            self.condition("ContainersReady", ready, not_ready_reason),
            self.condition("Ready", ready, not_ready_reason),
        ];
        json!({
            "phase": self.phase,
            "conditions": conditions,
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": self.start_time.to_string(),
            "containerStatuses": [container],
        })
    }

    async fn publish(&mut self) {
        if self.gone || self.status_retry_at.is_some() {
            return;
        }
        let status = self.status();
        if self.last_written.as_ref() == Some(&status) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.node.client.clone(), &self.ns);
        let patch = json!({ "status": status });
        match api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => self.last_written = Some(status),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.gone = true;
                if !self.deleting {
                    self.begin_delete().await;
                }
            }
            Err(e) => {
                tracing::debug!("writing the status of {}/{}: {e}", self.ns, self.name);
                self.status_retry_at = Some(Instant::now() + Duration::from_millis(500));
            }
        }
    }
}

enum VolumeError {
    /// Not ready yet; retried.
    NotYet(String),
    /// Never going to work for this Pod.
    Unsupported(String),
}

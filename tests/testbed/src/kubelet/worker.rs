//! One Pod's life on the local node: prepare volumes, run its init
//! containers one at a time to completion, then its regular container,
//! probe it, restart it per restartPolicy, report every change through the
//! status subresource, and stop it when the Pod is deleted.
//!
//! Each Pod gets its own task. Everything that changes the process (exit,
//! probe verdicts, fault verbs, deletion) is handled in that one task, so the
//! PID it signals is always its own unreaped child. At most one process
//! runs per Pod: an init container's, or, once they have all completed, the
//! regular container's.
//!
//! This file holds the worker's state, its event loop, preparing and
//! fault verbs; `volumes` resolves the Pod's volumes, `container` runs and
//! restarts the processes, `probing` runs the probes, `pod_status` reports.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::api::{Api, DeleteParams, Preconditions};
use nix::sys::signal::Signal;
use serde_json::Value;
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::Node;
use super::launch::{self, EnvSources, LaunchPlan};
use super::probe::ProbeState;

mod container;
mod pod_status;
mod probing;
mod pulling;
mod volumes;

use probing::ProbeKind;
use pulling::{PullTask, PullWait};
use volumes::VolumeError;

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
    SyncVolumes,
    Readiness,
    Liveness,
    Restart,
    KillDeadline,
    RetryStatus,
    Pulled(
        Result<
            Result<super::images::PulledImage, super::images::PullError>,
            tokio::task::JoinError,
        >,
    ),
    PullWait,
}

/// One container's bookkeeping: the Pod's regular container, or one of
/// its init containers. Only one container's process runs at a time (init
/// containers one after another, then the regular one), so the process
/// itself, its probes and the pull in progress live in [`Worker`].
pub(super) struct Slot {
    container: Container,
    /// `ROOT/pods/<ns>_<pod>_<uid>/<container>.log`.
    log_path: PathBuf,
    /// An init container: reported in `initContainerStatuses`.
    init: bool,
    /// The kubelet can run its image at all (etcd, mapped or pulled).
    runnable: bool,
    /// Its image is pulled from a registry (kubelet/images.rs); its plan is
    /// made after each pull.
    pulls: bool,
    /// (mountPath, directory) for each of its volumeMounts, once prepared.
    mounts: Vec<(String, PathBuf)>,
    /// The plan of its latest start.
    plan: Option<LaunchPlan>,
    /// The host file of its latest start's termination message
    /// (`containers/<name>/<start>` in the Pod's directory), read when it
    /// exits.
    termination_file: Option<PathBuf>,
    /// Where its latest start's output begins in the log (after the
    /// kubelet's own lines), for `FallbackToLogsOnError`.
    log_offset: u64,
    /// The image the last pull gave, until the start that uses it.
    pulled: Option<super::images::PulledImage>,
    /// The `imageID` of the image last pulled, for the status.
    image_id: Option<String>,
    waiting: (String, Option<String>),
    /// `local://PID` of its latest process (kept once it has exited).
    container_id: Option<String>,
    runs: u32,
    started_at: Option<Timestamp>,
    started_instant: Option<Instant>,
    /// Its current terminated state, if it is not running.
    terminated: Option<Value>,
    last_state: Option<Value>,
    last_exit: Option<i32>,
    restart_count: i32,
    /// The delay before its next restart: zero (immediate), then doubling.
    backoff: Duration,
}

impl Slot {
    fn new(
        container: Container,
        init: bool,
        dir: &std::path::Path,
        node: &Node,
        waiting: &str,
    ) -> Self {
        let config = &node.config;
        Slot {
            log_path: dir.join(format!("{}.log", container.name)),
            init,
            runnable: launch::runs(&container, &config.images, &config.registries),
            pulls: launch::pulled_image(&container, &config.images, &config.registries),
            container,
            mounts: Vec::new(),
            plan: None,
            termination_file: None,
            log_offset: 0,
            pulled: None,
            image_id: None,
            waiting: (waiting.into(), None),
            container_id: None,
            runs: 0,
            started_at: None,
            started_instant: None,
            terminated: None,
            last_state: None,
            last_exit: None,
            restart_count: 0,
            backoff: Duration::ZERO,
        }
    }

    /// Ran to completion (exit 0): an init container's work is done.
    fn completed(&self) -> bool {
        self.terminated
            .as_ref()
            .is_some_and(|t| t["terminated"]["exitCode"] == 0)
    }
}

pub(crate) struct Worker {
    node: Arc<Node>,
    pod: Pod,
    ns: String,
    name: String,
    uid: String,
    ip: Ipv4Addr,
    dir: PathBuf,
    /// The regular container the kubelet runs.
    main: Slot,
    /// The Pod's init containers, in order.
    inits: Vec<Slot>,
    /// How many init containers have completed: the one at this index runs
    /// (or starts next); when all have, the regular container runs. Never
    /// goes back: a restarted regular container does not re-run them.
    init_done: usize,
    /// The volumes are set up (once per Pod, as a kubelet mounts them).
    volumes_ready: bool,
    /// Each projected volume's directory and tokens, by volume name.
    projected: BTreeMap<String, (PathBuf, super::projected::Tokens)>,
    /// When to fill the projected volumes again.
    sync_at: Option<Instant>,
    /// The volumes are ready and the env's Secrets and ConfigMaps read.
    prepared: bool,
    sources: EnvSources,
    /// Set while volumes are not ready yet (e.g. the PVC does not exist),
    /// or a Secret the env names is missing: when to prepare again.
    prepare_at: Option<Instant>,
    pulling: Option<PullTask>,
    /// After a failed pull: when to show ImagePullBackOff / pull again.
    pull_wait: Option<(Instant, PullWait)>,
    pull_backoff: Duration,

    /// The process now running: an init container's while the Pod
    /// initializes, then the regular container's.
    child: Option<Child>,
    pid: Option<u32>,
    ready: bool,
    readiness: Option<ProbeState>,
    liveness: Option<ProbeState>,
    phase: &'static str,
    frozen: bool,
    restart_at: Option<Instant>,
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

/// How long a container waits with `CreateContainerConfigError` for a
/// missing Secret or ConfigMap before the kubelet looks again.
const ENV_SOURCE_RETRY: Duration = Duration::from_secs(2);

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
        let init_containers = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.clone())
            .unwrap_or_default();
        // As the kubelet: every container waits with PodInitializing while
        // a Pod has init containers to run, else with ContainerCreating.
        let waiting = if init_containers.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let inits = init_containers
            .into_iter()
            .map(|c| Slot::new(c, true, &dir, &node, waiting))
            .collect();
        let main = Slot::new(container, false, &dir, &node, waiting);
        Worker {
            node,
            pod,
            ns,
            name,
            uid,
            ip,
            dir,
            main,
            inits,
            init_done: 0,
            volumes_ready: false,
            projected: BTreeMap::new(),
            sync_at: None,
            prepared: false,
            sources: EnvSources::default(),
            prepare_at: Some(Instant::now()),
            pulling: None,
            pull_wait: None,
            pull_backoff: Duration::ZERO,
            child: None,
            pid: None,
            ready: false,
            readiness: None,
            liveness: None,
            phase: "Pending",
            frozen: false,
            restart_at: None,
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

    /// Every init container has completed (or there are none).
    fn initialized(&self) -> bool {
        self.init_done >= self.inits.len()
    }

    /// The container that runs now, or starts next.
    fn cur(&mut self) -> &mut Slot {
        match self.inits.get_mut(self.init_done) {
            Some(slot) => slot,
            None => &mut self.main,
        }
    }

    fn cur_ref(&self) -> &Slot {
        self.inits.get(self.init_done).unwrap_or(&self.main)
    }

    /// The waiting reason of a container not started yet.
    fn not_started_reason(&self) -> &'static str {
        if self.inits.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
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
            let sync_at = self
                .sync_at
                .filter(|_| !self.deleting && !self.projected.is_empty());
            let kill_at = self.kill_at.filter(|_| self.child.is_some());
            let pull_wait_at = self.pull_wait.as_ref().map(|(at, _)| *at);
            let wake = {
                let child = &mut self.child;
                let pulling = &mut self.pulling;
                tokio::select! {
                    r = async { child.as_mut().unwrap().wait().await }, if child.is_some() => Wake::Exit(r),
                    r = async { pulling.as_mut().unwrap().await }, if pulling.is_some() => Wake::Pulled(r),
                    _ = sleep_opt(pull_wait_at) => Wake::PullWait,
                    c = rx.recv() => Wake::Cmd(c),
                    _ = sleep_opt(prepare_at) => Wake::Prepare,
                    _ = sleep_opt(sync_at) => Wake::SyncVolumes,
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
                Wake::SyncVolumes => {
                    self.sync_projected().await;
                    self.sync_at = Some(Instant::now() + self.node.config.volume_sync_period);
                }
                Wake::Readiness => self.probe(ProbeKind::Readiness).await,
                Wake::Liveness => self.probe(ProbeKind::Liveness).await,
                Wake::Restart => {
                    self.restart_at = None;
                    self.start_container();
                }
                Wake::KillDeadline => {
                    self.kill_at = None;
                    self.sigkill();
                }
                Wake::RetryStatus => self.status_retry_at = None,
                Wake::Pulled(r) => self.on_pulled(r),
                Wake::PullWait => self.on_pull_wait(),
            }
        }
        self.stop_pulling();
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

    /// Sets up every volume the Pod's containers mount (a kubelet mounts
    /// all of a Pod's volumes before its first container starts), reads
    /// the Secrets and ConfigMaps their env names, then starts the first
    /// container due (an init container, if any) unless the test holds it.
    async fn prepare(&mut self) {
        self.prepare_at = None;
        if self.prepared || self.deleting || matches!(self.phase, "Succeeded" | "Failed") {
            return;
        }
        if !self.volumes_ready {
            let dirs = match self.volumes().await {
                Ok(dirs) => dirs,
                Err(VolumeError::NotYet(msg)) => {
                    let reason = self.not_started_reason();
                    self.cur().waiting = (reason.into(), Some(msg));
                    self.prepare_at = Some(Instant::now() + Duration::from_secs(1));
                    return;
                }
                Err(VolumeError::Unsupported(msg)) => return self.config_failed(msg),
            };
            for dir in dirs.values() {
                if let Err(e) = std::fs::create_dir_all(dir) {
                    return self.config_failed(format!("creating {}: {e}", dir.display()));
                }
            }
            for slot in self.inits.iter_mut().chain(std::iter::once(&mut self.main)) {
                slot.mounts = match volumes::mounts_for(&slot.container, &dirs) {
                    Ok(m) => m,
                    Err(msg) => return self.config_failed(msg),
                };
            }
            self.volumes_ready = true;
            self.sync_at = Some(Instant::now() + self.node.config.volume_sync_period);
        }
        self.sources = self.env_sources().await;
        self.prepared = true;
        if self.may_start() {
            self.start_container();
        } else if self.node.is_held(&self.ns, &self.name) {
            let reason = self.not_started_reason();
            self.cur().waiting = (
                reason.into(),
                Some("held by the test (Kubelet::hold_starts)".into()),
            );
        }
    }

    /// Reads the Secrets and ConfigMaps the containers' env names, with the
    /// kubelet's own client (the Node authorizer lets it read those its
    /// Pods name). A missing one is recorded, not an error: only a
    /// container that needs it fails, when it starts.
    async fn env_sources(&self) -> EnvSources {
        let containers = self
            .inits
            .iter()
            .chain(std::iter::once(&self.main))
            .map(|s| &s.container);
        let (secrets, config_maps) = EnvSources::wanted(containers);
        let mut sources = EnvSources::default();
        let secrets_api: Api<Secret> = Api::namespaced(self.node.client.clone(), &self.ns);
        for name in secrets {
            let read = match secrets_api.get_opt(&name).await {
                Ok(s) => Ok(s.map(|s| {
                    s.data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, ByteString(v))| (k, v))
                        .collect()
                })),
                Err(e) => Err(format!("reading secret {name:?}: {e}")),
            };
            sources.secrets.insert(name, read);
        }
        let config_maps_api: Api<ConfigMap> = Api::namespaced(self.node.client.clone(), &self.ns);
        for name in config_maps {
            let read = match config_maps_api.get_opt(&name).await {
                // Env reads only `data`, as the kubelet's does.
                Ok(c) => Ok(c.map(|c| {
                    c.data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.into_bytes()))
                        .collect()
                })),
                Err(e) => Err(format!("reading configmap {name:?}: {e}")),
            };
            sources.config_maps.insert(name, read);
        }
        sources
    }

    /// A Secret or ConfigMap the starting container's env needs is missing:
    /// it waits with `CreateContainerConfigError`, and the kubelet reads
    /// them again shortly, as a kubelet retries on its next sync.
    fn env_source_missing(&mut self, msg: String) {
        tracing::info!(pod = %format!("{}/{}", self.ns, self.name), "{msg}");
        self.cur().waiting = ("CreateContainerConfigError".into(), Some(msg));
        self.prepared = false;
        self.prepare_at = Some(Instant::now() + ENV_SOURCE_RETRY);
    }

    /// The container due cannot be started as specified: it waits with
    /// `CreateContainerConfigError` until the Pod is deleted.
    fn config_failed(&mut self, msg: String) {
        tracing::warn!(pod = %format!("{}/{}", self.ns, self.name), "cannot start: {msg}");
        self.cur().waiting = ("CreateContainerConfigError".into(), Some(msg));
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
                        self.phase = if self.main.last_exit == Some(0) {
                            "Succeeded"
                        } else {
                            "Failed"
                        };
                        let main = &mut self.main;
                        main.terminated = main.last_state.take().or(main.terminated.take());
                    }
                    let _ = ack.send(());
                }
            }
            Command::StartNode => {
                self.node_up = true;
                if self.phase == "Pending" && self.prepared {
                    self.start_container();
                }
            }
            Command::Release => {
                if self.phase == "Pending" && self.prepared {
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
        self.stop_pulling();
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
}

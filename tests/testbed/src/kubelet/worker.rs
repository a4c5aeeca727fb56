//! One Pod's life on the local node: prepare volumes, run the etcd process,
//! probe it, restart it per restartPolicy, report every change through the
//! status subresource, and stop it when the Pod is deleted.
//!
//! Each Pod gets its own task. Everything that changes the process (exit,
//! probe verdicts, fault verbs, deletion) is handled in that one task, so the
//! PID it signals is always its own unreaped child.
//!
//! This file holds the worker's state, its event loop, preparing and
//! fault verbs; `volumes` resolves the Pod's volumes, `container` runs and
//! restarts the process, `probing` runs its probes, `pod_status` reports.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{Api, DeleteParams, Preconditions};
use nix::sys::signal::Signal;
use serde_json::Value;
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::Node;
use super::launch::{self, LaunchPlan};
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
    /// The container's image is pulled from a registry (kubelet/images.rs);
    /// its plan is made after each pull.
    pulls: bool,
    /// The volumes (mountPath, directory) of a pulled container, once ready.
    mounts: Option<Vec<(String, PathBuf)>>,
    pulling: Option<PullTask>,
    /// The image the last pull gave, until the start that uses it.
    pulled: Option<super::images::PulledImage>,
    /// The `imageID` of the image last pulled, for the status.
    image_id: Option<String>,
    /// After a failed pull: when to show ImagePullBackOff / pull again.
    pull_wait: Option<(Instant, PullWait)>,
    pull_backoff: Duration,
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
        let pulls = launch::pulled_image(&container, &node.config.images, &node.config.registries);
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
            pulls,
            mounts: None,
            pulling: None,
            pulled: None,
            image_id: None,
            pull_wait: None,
            pull_backoff: Duration::ZERO,
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

    /// Creates the volumes' directories `dirs`, keeps what the start needs
    /// (`keep`: the mounts of a pulled image, or a local plan), then starts
    /// the container unless the test holds it.
    fn start_prepared(&mut self, dirs: &[PathBuf], keep: impl FnOnce(&mut Self)) {
        for dir in dirs {
            if let Err(e) = std::fs::create_dir_all(dir) {
                return self.config_failed(format!("creating {}: {e}", dir.display()));
            }
        }
        keep(self);
        if self.may_start() {
            self.start_container();
        } else if self.node.is_held(&self.ns, &self.name) {
            self.waiting = (
                "ContainerCreating".into(),
                Some("held by the test (Kubelet::hold_starts)".into()),
            );
        }
    }

    async fn prepare(&mut self) {
        self.prepare_at = None;
        if self.phase != "Pending" || self.prepared() {
            return;
        }
        match self.volumes().await {
            Ok(mounts) if self.pulls => {
                let dirs: Vec<PathBuf> = mounts.iter().map(|(_, d)| d.clone()).collect();
                self.start_prepared(&dirs, |w| w.mounts = Some(mounts));
            }
            Ok(mounts) => {
                let host_ip = self.node.host_ip;
                match launch::plan(
                    &self.pod,
                    &self.container,
                    self.ip,
                    host_ip,
                    &mounts,
                    &self.node.releases,
                    &self.node.config.images,
                ) {
                    Ok(plan) => {
                        let dirs: Vec<PathBuf> = mounts.iter().map(|(_, d)| d.clone()).collect();
                        self.start_prepared(&dirs, |w| w.plan = Some(plan));
                    }
                    Err(e @ launch::LaunchError::ImagePull { .. }) => {
                        // A kubelet retries a failed pull with back-off; the
                        // local one has nothing new to pull until the Pod
                        // changes, so it reports the failure and waits.
                        tracing::warn!(pod = %format!("{}/{}", self.ns, self.name), "{e}");
                        self.waiting = ("ErrImagePull".into(), Some(e.to_string()));
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

    /// Volumes are ready (and, but for a pulled image, the plan made).
    fn prepared(&self) -> bool {
        self.plan.is_some() || self.mounts.is_some()
    }

    fn config_failed(&mut self, msg: String) {
        tracing::warn!(pod = %format!("{}/{}", self.ns, self.name), "cannot start: {msg}");
        self.config_error = Some(msg.clone());
        self.waiting = ("CreateContainerConfigError".into(), Some(msg));
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
                if self.phase == "Pending" && self.prepared() {
                    self.start_container();
                }
            }
            Command::Release => {
                if self.phase == "Pending" && self.prepared() {
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

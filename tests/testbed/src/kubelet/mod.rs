//! A local kubelet: it watches Pods through the API like a real kubelet and
//! runs the real etcd binary for each Pod whose container is etcd.
//!
//! It registers the Node [`NODE_NAME`], keeps its Lease alive, and runs the
//! Pods the real scheduler bound to it. Each Pod gets
//! its own loopback IP, its DNS names in the private `/etc/hosts`, per-claim
//! data directories, real probes and an honest status. Fault verbs
//! ([`Kubelet::kill`], [`Kubelet::freeze`], [`Kubelet::stop_node`], …) let
//! tests break things the way machines break. See docs/local-kubelet.md.

mod addresses;
mod exec;
pub mod fixtures;
pub mod images;
pub mod launch;
mod mounts;
mod node;
pub mod probe;
mod projected;
pub mod provisioner;
mod worker;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::etcd_bin::{EtcdBinaries, EtcdReleases};
use crate::hosts::HostsBlock;
use worker::{Command, Worker};

/// The Node this kubelet registers and runs Pods for.
pub const NODE_NAME: &str = "local";

/// Where Pod names are published.
#[derive(Debug, Clone)]
pub enum HostsTarget {
    /// `/etc/hosts`, only inside the private mount namespace.
    EtcHosts,
    /// Another file (for tools that read their own hosts file).
    File(PathBuf),
}

#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// Pod directories (logs, emptyDirs) and PVC data live under here.
    pub root: PathBuf,
    pub hosts: HostsTarget,
    /// The etcd releases member Pods run, picked by image tag.
    pub etcd: EtcdReleases,
    /// The first restart is immediate; then this, doubling up to the cap.
    /// (The real kubelet uses 10 s doubling to 5 min.)
    pub restart_backoff: Duration,
    pub max_restart_backoff: Duration,
    /// SIGKILL deadline after SIGTERM when the kubelet itself shuts down.
    pub shutdown_grace: Duration,
    /// The API server's URL, for `KUBERNETES_SERVICE_HOST`/`PORT` in Pods.
    pub api_server: Option<String>,
    /// Images run as local programs besides etcd (the operator's).
    pub images: Vec<launch::LocalImage>,
    /// The registries this kubelet pulls images from (kubelet/images.rs).
    /// A container whose image names one of them (and is not etcd or a
    /// mapped local image) is pulled and run from the image's rootfs.
    pub registries: Vec<images::RegistryAccess>,
    /// The wait after a failed pull before the next, doubling up to the
    /// cap. (The real kubelet uses 10 s doubling to 5 min.)
    pub image_pull_backoff: Duration,
    pub max_image_pull_backoff: Duration,
    /// How often a running Pod's projected volumes (Secrets, ConfigMaps,
    /// tokens) are filled again from the API. (The real kubelet syncs every
    /// minute, plus jitter, from a watch-fed cache.)
    pub volume_sync_period: Duration,
}

impl KubeletConfig {
    /// Defaults for `root`, with etcd located by [`crate::etcd_bin::locate`].
    pub fn new(root: &Path) -> Result<Self> {
        Ok(KubeletConfig {
            root: root.to_path_buf(),
            hosts: HostsTarget::EtcHosts,
            etcd: crate::etcd_bin::locate()?,
            restart_backoff: Duration::from_secs(1),
            max_restart_backoff: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            api_server: None,
            images: Vec::new(),
            registries: Vec::new(),
            image_pull_backoff: Duration::from_secs(2),
            max_image_pull_backoff: Duration::from_secs(60),
            volume_sync_period: Duration::from_secs(5),
        })
    }
}

/// State shared by the watch loop, the Pod workers and the fault verbs.
pub(crate) struct Node {
    client: Client,
    root: PathBuf,
    releases: EtcdReleases,
    host_ip: Ipv4Addr,
    config: KubeletConfig,
    images: Arc<images::ImageStore>,
    hosts: HostsBlock,
    up: watch::Sender<bool>,
    /// (namespace, name) of Pods that must not start: see [`Kubelet::hold_starts`].
    held: Mutex<HashSet<(String, String)>>,
    pods: Mutex<HashMap<String, PodEntry>>,
    processes: Mutex<Processes>,
}

#[derive(Default)]
struct Processes {
    started: Vec<u32>,
    live: HashSet<u32>,
}

struct PodEntry {
    namespace: String,
    name: String,
    seq: u64,
    ip: Ipv4Addr,
    names: Vec<String>,
    resolvable: bool,
    log_path: PathBuf,
    pid: Option<u32>,
    frozen: bool,
    tx: mpsc::UnboundedSender<Command>,
    task: Option<JoinHandle<()>>,
}

impl Node {
    fn is_held(&self, namespace: &str, name: &str) -> bool {
        self.held
            .lock()
            .unwrap()
            .contains(&(namespace.to_owned(), name.to_owned()))
    }

    fn started(&self, pid: u32) {
        let mut p = self.processes.lock().unwrap();
        p.started.push(pid);
        p.live.insert(pid);
    }

    fn exited(&self, pid: u32) {
        self.processes.lock().unwrap().live.remove(&pid);
    }

    fn set_pid(&self, uid: &str, pid: Option<u32>, frozen: bool) {
        if let Some(e) = self.pods.lock().unwrap().get_mut(uid) {
            e.pid = pid;
            e.frozen = frozen;
        }
    }

    fn unpublish_names(&self, uid: &str) {
        if let Err(e) = self.hosts.remove(uid) {
            tracing::warn!("removing the names of pod {uid}: {e:#}");
        }
        if let Some(e) = self.pods.lock().unwrap().get_mut(uid) {
            e.resolvable = false;
        }
    }

    fn forget(&self, uid: &str) {
        if let Some(e) = self.pods.lock().unwrap().remove(uid) {
            addresses::release(e.ip);
        }
    }
}

/// A running local kubelet. Stop it with [`Kubelet::shutdown`]; dropping it
/// SIGKILLs whatever is still running.
pub struct Kubelet {
    node: Arc<Node>,
    watch_task: JoinHandle<()>,
    heartbeat_task: JoinHandle<()>,
}

/// What tests may want to know about a Pod the kubelet runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    pub ip: Ipv4Addr,
    pub names: Vec<String>,
    /// The regular container's log (see [`Kubelet::container_log`] for
    /// init containers').
    pub log_path: PathBuf,
    /// The process running now: an init container's while the Pod
    /// initializes, then the regular container's.
    pub pid: Option<u32>,
    pub frozen: bool,
    /// False after [`Kubelet::make_unresolvable`] or once the Pod is gone.
    pub resolvable: bool,
}

impl Kubelet {
    /// Registers the Node and starts watching its Pods through `client`,
    /// which should authenticate as `system:node:local` (the Node
    /// authorizer and NodeRestriction then hold it to a kubelet's rights).
    pub async fn start(client: Client, config: KubeletConfig) -> Result<Self> {
        let hosts = match &config.hosts {
            HostsTarget::EtcHosts => HostsBlock::etc_hosts()?,
            HostsTarget::File(p) => HostsBlock::at(p)?,
        };
        std::fs::create_dir_all(&config.root)
            .with_context(|| format!("creating {}", config.root.display()))?;
        let root = std::fs::canonicalize(&config.root)?;
        let images = Arc::new(images::ImageStore::new(&root, config.registries.clone()));
        let node = Arc::new(Node {
            client: client.clone(),
            root,
            releases: config.etcd.clone(),
            host_ip: Ipv4Addr::LOCALHOST,
            config,
            images,
            hosts,
            up: watch::Sender::new(true),
            held: Mutex::default(),
            pods: Mutex::new(HashMap::new()),
            processes: Mutex::new(Processes::default()),
        });
        node::register(&client).await?;
        let heartbeat_task = tokio::spawn(node::heartbeat(client, node.up.subscribe()));
        let seq = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let watch_task = tokio::spawn(watch_pods(node.clone(), seq));
        Ok(Kubelet {
            node,
            watch_task,
            heartbeat_task,
        })
    }

    /// The directory holding Pod directories and PVC data.
    pub fn root(&self) -> &Path {
        &self.node.root
    }

    /// The default etcd release, for tests that call etcdctl themselves.
    pub fn etcd(&self) -> &EtcdBinaries {
        self.node.releases.default()
    }

    /// Every etcd release member Pods may name.
    pub fn etcd_releases(&self) -> &EtcdReleases {
        &self.node.releases
    }

    /// The hosts file the kubelet publishes names in.
    pub fn hosts_path(&self) -> &Path {
        self.node.hosts.path()
    }

    /// The Pod the kubelet runs under this namespace and name (the newest, if
    /// an old one is still terminating).
    pub fn pod(&self, namespace: &str, name: &str) -> Option<PodInfo> {
        self.entry(namespace, name, |e| PodInfo {
            ip: e.ip,
            names: e.names.clone(),
            log_path: e.log_path.clone(),
            pid: e.pid,
            frozen: e.frozen,
            resolvable: e.resolvable,
        })
    }

    /// The log file of the Pod's container (init or regular) `container`:
    /// `ROOT/pods/<ns>_<pod>_<uid>/<container>.log`, appended across
    /// restarts. It may not exist yet; it outlives the Pod.
    pub fn container_log(&self, namespace: &str, name: &str, container: &str) -> Option<PathBuf> {
        self.entry(namespace, name, |e| {
            e.log_path.with_file_name(format!("{container}.log"))
        })
    }

    fn entry<T>(
        &self,
        namespace: &str,
        name: &str,
        f: impl FnOnce(&mut PodEntry) -> T,
    ) -> Option<T> {
        let mut pods = self.node.pods.lock().unwrap();
        pods.values_mut()
            .filter(|e| e.namespace == namespace && e.name == name)
            .max_by_key(|e| e.seq)
            .map(f)
    }

    fn send(&self, namespace: &str, name: &str, cmd: Command) -> Result<()> {
        let tx = self
            .entry(namespace, name, |e| e.tx.clone())
            .ok_or_else(|| anyhow!("the local kubelet runs no pod {namespace}/{name}"))?;
        tx.send(cmd)
            .map_err(|_| anyhow!("pod {namespace}/{name} has already stopped"))
    }

    async fn ask(
        &self,
        namespace: &str,
        name: &str,
        cmd: impl FnOnce(oneshot::Sender<Result<u32, String>>) -> Command,
    ) -> Result<u32> {
        let (tx, rx) = oneshot::channel();
        self.send(namespace, name, cmd(tx))?;
        rx.await
            .map_err(|_| anyhow!("pod {namespace}/{name} stopped"))?
            .map_err(|e| anyhow!("pod {namespace}/{name}: {e}"))
    }

    /// SIGKILLs the Pod's running container (etcd; an init container while
    /// the Pod initializes); it terminates (exit 137) and is restarted or
    /// not per restartPolicy. Returns the PID killed.
    pub async fn kill(&self, namespace: &str, name: &str) -> Result<u32> {
        self.ask(namespace, name, Command::Kill).await
    }

    /// SIGSTOPs the Pod's etcd. Its probes are suspended, so the Pod stays as
    /// Ready as it was while etcd answers nothing: a disk stall or partition.
    pub async fn freeze(&self, namespace: &str, name: &str) -> Result<u32> {
        self.ask(namespace, name, Command::Freeze).await
    }

    /// SIGCONTs a frozen Pod's etcd and resumes its probes.
    pub async fn thaw(&self, namespace: &str, name: &str) -> Result<u32> {
        self.ask(namespace, name, Command::Thaw).await
    }

    /// Stops the node gracefully: SIGTERM to every Pod's etcd (SIGKILL after
    /// its grace period), nothing restarted; etcd exits 0, so the Pods go
    /// Succeeded. Returns once every process has exited. The Lease is no
    /// longer renewed, so the node lifecycle controller marks the Node
    /// NotReady after its grace period. Pods bound meanwhile stay Pending
    /// until [`Kubelet::start_node`].
    pub async fn stop_node(&self) {
        self.node.up.send_replace(false);
        let mut acks = Vec::new();
        for tx in self.senders() {
            let (ack, rx) = oneshot::channel();
            if tx.send(Command::StopNode(ack)).is_ok() {
                acks.push(rx);
            }
        }
        for rx in acks {
            let _ = rx.await;
        }
    }

    /// Brings a stopped node back: Pending Pods start; Pods that ended stay
    /// ended, as on a rebooted node.
    pub fn start_node(&self) {
        self.node.up.send_replace(true);
        for tx in self.senders() {
            let _ = tx.send(Command::StartNode);
        }
    }

    /// Pods of this namespace and name do not start until
    /// [`Kubelet::release_starts`]: they stay Pending (`ContainerCreating`),
    /// as on a node whose image pull or volume attach hangs. A Pod already
    /// running is not touched; one recreated under the same name waits.
    pub fn hold_starts(&self, namespace: &str, name: &str) {
        self.node
            .held
            .lock()
            .unwrap()
            .insert((namespace.to_owned(), name.to_owned()));
    }

    /// Lets Pods held by [`Kubelet::hold_starts`] start.
    pub fn release_starts(&self, namespace: &str, name: &str) {
        self.node
            .held
            .lock()
            .unwrap()
            .remove(&(namespace.to_owned(), name.to_owned()));
        let _ = self.send(namespace, name, Command::Release);
    }

    fn senders(&self) -> Vec<mpsc::UnboundedSender<Command>> {
        self.node
            .pods
            .lock()
            .unwrap()
            .values()
            .map(|e| e.tx.clone())
            .collect()
    }

    /// Removes the Pod's names from the hosts file: lookups fail with a name
    /// error (the private resolv.conf points at a port nothing answers on).
    pub fn make_unresolvable(&self, namespace: &str, name: &str) -> Result<()> {
        let uid = self.uid_of(namespace, name)?;
        self.node.hosts.remove(&uid)?;
        self.entry(namespace, name, |e| e.resolvable = false);
        Ok(())
    }

    /// Publishes the Pod's names again after [`Kubelet::make_unresolvable`].
    pub fn restore_name(&self, namespace: &str, name: &str) -> Result<()> {
        let uid = self.uid_of(namespace, name)?;
        let (ip, names) = self
            .entry(namespace, name, |e| {
                e.resolvable = true;
                (e.ip, e.names.clone())
            })
            .ok_or_else(|| anyhow!("the local kubelet runs no pod {namespace}/{name}"))?;
        self.node.hosts.set(&uid, IpAddr::V4(ip), names)
    }

    fn uid_of(&self, namespace: &str, name: &str) -> Result<String> {
        let pods = self.node.pods.lock().unwrap();
        pods.iter()
            .filter(|(_, e)| e.namespace == namespace && e.name == name)
            .max_by_key(|(_, e)| e.seq)
            .map(|(uid, _)| uid.clone())
            .ok_or_else(|| anyhow!("the local kubelet runs no pod {namespace}/{name}"))
    }

    /// The directories backing a claim (one per claim uid ever used here).
    pub fn claim_dirs(&self, namespace: &str, claim: &str) -> Vec<PathBuf> {
        let dir = self.node.root.join("pvc").join(namespace).join(claim);
        std::fs::read_dir(dir)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    }

    /// Deletes everything stored on a claim, as if its disk were replaced.
    /// Do it while no Pod using the claim is running, or etcd will notice.
    pub fn wipe_claim(&self, namespace: &str, claim: &str) -> Result<()> {
        let dirs = self.claim_dirs(namespace, claim);
        if dirs.is_empty() {
            bail!("no data stored for persistentvolumeclaim {namespace}/{claim}");
        }
        for dir in dirs {
            for entry in std::fs::read_dir(&dir)? {
                let path = entry?.path();
                if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                }
                .with_context(|| format!("wiping {}", path.display()))?;
            }
        }
        Ok(())
    }

    /// Every PID this kubelet ever started, for tests that check none is left.
    pub fn started_pids(&self) -> Vec<u32> {
        self.node.processes.lock().unwrap().started.clone()
    }

    /// PIDs still running (not yet reaped).
    pub fn live_pids(&self) -> Vec<u32> {
        self.node
            .processes
            .lock()
            .unwrap()
            .live
            .iter()
            .copied()
            .collect()
    }

    /// Stops watching, SIGTERMs every etcd (SIGKILL after the configured
    /// grace), waits for them, and removes the kubelet's names from the hosts
    /// file. Pods stay in the API as they were.
    pub async fn shutdown(self) {
        self.watch_task.abort();
        self.heartbeat_task.abort();
        let mut acks = Vec::new();
        let mut tasks = Vec::new();
        {
            let mut pods = self.node.pods.lock().unwrap();
            for e in pods.values_mut() {
                let (ack, rx) = oneshot::channel();
                if e.tx.send(Command::Shutdown(ack)).is_ok() {
                    acks.push(rx);
                }
                tasks.extend(e.task.take());
            }
        }
        let deadline = self.node.config.shutdown_grace + Duration::from_secs(5);
        let _ = tokio::time::timeout(deadline, async {
            for rx in acks {
                let _ = rx.await;
            }
            for t in tasks {
                let _ = t.await;
            }
        })
        .await;
        // Drop kills whatever did not stop in time and clears the hosts block.
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.watch_task.abort();
        self.heartbeat_task.abort();
        for e in self.node.pods.lock().unwrap().values_mut() {
            if let Some(t) = e.task.take() {
                t.abort();
            }
        }
        for pid in self.live_pids() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
        if let Err(e) = self.node.hosts.clear() {
            tracing::warn!("clearing the kubelet's hosts block: {e:#}");
        }
    }
}

/// Whether this kubelet runs `pod`: the scheduler bound it here, and it is
/// etcd, a mapped image, or an image from a registry it pulls from. (The
/// watch already selects this node's Pods; checked again because a Pod is
/// the kubelet's only once bound.)
fn is_ours(pod: &Pod, config: &KubeletConfig) -> bool {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    node == Some(NODE_NAME)
        && launch::runnable_container(pod, &config.images, &config.registries).is_some()
}

/// The DNS names a Pod gets from a headless Service named by its subdomain.
pub fn dns_names(pod: &Pod) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let host = spec.hostname.as_deref().or(pod.metadata.name.as_deref());
    match (host, spec.subdomain.as_deref()) {
        (Some(h), Some(sub)) if !sub.is_empty() => {
            vec![
                format!("{h}.{sub}.{ns}.svc"),
                format!("{h}.{sub}.{ns}.svc.cluster.local"),
            ]
        }
        _ => Vec::new(),
    }
}

async fn watch_pods(node: Arc<Node>, seq: Arc<std::sync::atomic::AtomicU64>) {
    let api: Api<Pod> = Api::all(node.client.clone());
    let only_here = watcher::Config::default().fields(&format!("spec.nodeName={NODE_NAME}"));
    let mut events = watcher(api, only_here).default_backoff().boxed();
    let mut listing: Option<HashSet<String>> = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listing = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(pod)) => {
                if let (Some(seen), Some(uid)) = (listing.as_mut(), pod.metadata.uid.clone()) {
                    seen.insert(uid);
                }
                on_apply(&node, &seq, pod);
            }
            Ok(watcher::Event::InitDone) => {
                // Pods deleted while the watch was down never sent Delete.
                if let Some(seen) = listing.take() {
                    let stale: Vec<_> = node
                        .pods
                        .lock()
                        .unwrap()
                        .iter()
                        .filter(|(uid, _)| !seen.contains(*uid))
                        .map(|(_, e)| e.tx.clone())
                        .collect();
                    for tx in stale {
                        let _ = tx.send(Command::Gone);
                    }
                }
            }
            Ok(watcher::Event::Apply(pod)) => on_apply(&node, &seq, pod),
            Ok(watcher::Event::Delete(pod)) => {
                let uid = pod.metadata.uid.unwrap_or_default();
                if let Some(tx) = node.pods.lock().unwrap().get(&uid).map(|e| e.tx.clone()) {
                    let _ = tx.send(Command::Gone);
                }
            }
            Err(e) => tracing::debug!("pod watch: {e}"),
        }
    }
}

fn on_apply(node: &Arc<Node>, seq: &std::sync::atomic::AtomicU64, pod: Pod) {
    let Some(uid) = pod.metadata.uid.clone() else {
        return;
    };
    if let Some(tx) = node.pods.lock().unwrap().get(&uid).map(|e| e.tx.clone()) {
        let _ = tx.send(Command::Update(Box::new(pod)));
        return;
    }
    if !is_ours(&pod, &node.config) {
        return;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none() {
        // Ended before this kubelet started; nothing to run. (A deleted one
        // is adopted: only its kubelet may finish a bound Pod's deletion.)
        return;
    }
    if let Err(e) = adopt(node, seq, pod) {
        tracing::warn!("cannot run pod {uid}: {e:#}");
    }
}

fn adopt(node: &Arc<Node>, seq: &std::sync::atomic::AtomicU64, pod: Pod) -> Result<()> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = pod.metadata.name.clone().unwrap_or_default();
    let container = launch::runnable_container(&pod, &node.config.images, &node.config.registries)
        .cloned()
        .context("no container this kubelet runs")?;
    let ip = addresses::allocate()?;
    let names = dns_names(&pod);
    // Names go in before the process starts (and before peers need them):
    // Go's resolver caches /etc/hosts for seconds.
    if let Err(e) = node.hosts.set(&uid, IpAddr::V4(ip), names.clone()) {
        addresses::release(ip);
        return Err(e);
    }
    let dir = node.root.join("pods").join(format!("{ns}_{name}_{uid}"));
    let worker = Worker::new(node.clone(), pod, ip, dir.clone(), container.clone());
    let (tx, rx) = mpsc::unbounded_channel();
    let entry = PodEntry {
        namespace: ns,
        name,
        seq: seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        ip,
        names,
        resolvable: true,
        log_path: dir.join(format!("{}.log", container.name)),
        pid: None,
        frozen: false,
        tx,
        task: None,
    };
    let mut pods = node.pods.lock().unwrap();
    pods.insert(uid.clone(), entry);
    let task = tokio::spawn(worker.run(rx));
    if let Some(e) = pods.get_mut(&uid) {
        e.task = Some(task);
    }
    Ok(())
}

//! Real etcd processes for tests: 1..N-member clusters on loopback
//! addresses with free ports and temporary data dirs. Every process is
//! killed by its PID when its handle drops, also when a test fails.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use etcd_steward::etcd::{ClientConfig, EtcdApi, EtcdClient};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

/// The directory of the default etcd release (the one the operator
/// defaults to): `scripts/ensure-etcd.sh` builds it, `$ETCD_STEWARD_ETCD_DIR`
/// hands it down.
pub fn etcd_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let releases = steward_testbed::etcd_bin::locate().expect("locate the etcd releases");
        let etcd = &releases.default().etcd;
        etcd.parent()
            .expect("etcd sits in a directory")
            .to_path_buf()
    })
    .clone()
}

/// A free port on `ip`, never one this process handed out before. The
/// listener is dropped before etcd binds it, and the kernel may give the
/// same port to the next `bind(0)` on the address; tests running in
/// parallel share the addresses of [`loopback`], so a port once handed out
/// is not handed out again (a CI run saw two members get one port).
pub fn free_addr(ip: Ipv4Addr) -> SocketAddr {
    static GIVEN: Mutex<BTreeSet<SocketAddr>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let addr = TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap();
        if given.insert(addr) {
            return addr;
        }
    }
}

/// The loopback address of member `i`: one address per member, so a log
/// line or error names the member at a glance.
pub fn loopback(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 10 + i as u8)
}

pub struct EtcdProcess {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    child: Option<Child>,
    data_dir: TempDir,
    pub log: PathBuf,
}

impl EtcdProcess {
    /// Starts `etcd` for member `name`. `initial_cluster` is etcd's
    /// `--initial-cluster`; `state` is "new" or "existing".
    pub fn spawn(
        name: &str,
        ip: Ipv4Addr,
        initial_cluster: &str,
        state: &str,
        peer: SocketAddr,
        extra_args: &[&str],
    ) -> Self {
        Self::spawn_with_scheme("http", name, ip, initial_cluster, state, peer, extra_args)
    }

    /// As [`EtcdProcess::spawn`], serving clients over `scheme` ("https"
    /// needs `--cert-file`/`--key-file` in `extra_args`).
    pub fn spawn_with_scheme(
        scheme: &str,
        name: &str,
        ip: Ipv4Addr,
        initial_cluster: &str,
        state: &str,
        peer: SocketAddr,
        extra_args: &[&str],
    ) -> Self {
        let client = free_addr(ip);
        let client_url = format!("{scheme}://{client}");
        let peer_url = format!("http://{peer}");
        let data_dir = tempfile::Builder::new()
            .prefix("etcd-steward-test-")
            .tempdir()
            .unwrap();
        let log = data_dir.path().join("etcd.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let child = Command::new(etcd_dir().join("etcd"))
            .args(["--name", name])
            .arg("--data-dir")
            .arg(data_dir.path().join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", initial_cluster])
            .args(["--initial-cluster-state", state])
            .args([
                "--initial-cluster-token",
                &format!("t-{}", std::process::id()),
            ])
            .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
            .arg("--unsafe-no-fsync")
            .args(["--log-level", "warn"])
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("spawn etcd");
        Self {
            name: name.to_owned(),
            client_url,
            peer_url,
            child: Some(child),
            data_dir,
            log,
        }
    }

    pub fn pid(&self) -> Option<Pid> {
        self.child.as_ref().map(|c| Pid::from_raw(c.id() as i32))
    }

    /// SIGKILL and reap. The port then refuses connections.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: the port accepts connections but nothing answers.
    /// Returns once every thread is stopped: kill(2) only queues the stop,
    /// and a thread already woken by a request could still answer it.
    pub fn freeze(&self) {
        let Some(pid) = self.pid() else { return };
        kill(pid, Signal::SIGSTOP).unwrap();
        let start = Instant::now();
        while !all_threads_stopped(pid) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{} did not stop",
                self.name
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn thaw(&self) {
        if let Some(pid) = self.pid() {
            kill(pid, Signal::SIGCONT).unwrap();
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(2000);
        text[start..].to_owned()
    }
}

fn all_threads_stopped(pid: Pid) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the parenthesised command name.
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        matches!(state, Some('T' | 't'))
    })
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        // SIGKILL reaches a stopped process too.
        self.kill();
    }
}

pub struct Cluster {
    pub members: Vec<EtcdProcess>,
}

impl Cluster {
    /// Starts an `n`-member cluster and waits until every member answers
    /// Status and a quorum read succeeds.
    pub async fn start(n: usize) -> Self {
        Self::start_with(n, &[]).await
    }

    /// As [`Cluster::start`], passing `extra_args` to every member.
    pub async fn start_with(n: usize, extra_args: &[&str]) -> Self {
        let ips: Vec<Ipv4Addr> = (0..n).map(loopback).collect();
        let peers: Vec<SocketAddr> = ips.iter().map(|ip| free_addr(*ip)).collect();
        let initial: Vec<String> = peers
            .iter()
            .enumerate()
            .map(|(i, p)| format!("m{i}=http://{p}"))
            .collect();
        let initial = initial.join(",");
        let members = (0..n)
            .map(|i| {
                EtcdProcess::spawn(
                    &format!("m{i}"),
                    ips[i],
                    &initial,
                    "new",
                    peers[i],
                    extra_args,
                )
            })
            .collect();
        let cluster = Self { members };
        cluster.wait_healthy(Duration::from_secs(30)).await;
        cluster
    }

    pub fn client_urls(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// Waits until every running member answers Status with a leader and a
    /// quorum read succeeds; panics with the members' logs otherwise.
    pub async fn wait_healthy(&self, within: Duration) {
        let api = EtcdClient::new(ClientConfig::default());
        let start = Instant::now();
        loop {
            let mut ok = true;
            for m in self.members.iter().filter(|m| m.child.is_some()) {
                match api.status(&m.client_url).await {
                    Ok(s) if s.leader_id != 0 => {}
                    _ => ok = false,
                }
            }
            if ok && api.quorum_read(&self.members[0].client_url).await.is_ok() {
                return;
            }
            if start.elapsed() > within {
                let logs: Vec<String> = self
                    .members
                    .iter()
                    .map(|m| format!("--- {} ---\n{}", m.name, m.log_tail()))
                    .collect();
                panic!(
                    "etcd cluster not healthy within {within:?}\n{}",
                    logs.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Polls `f` until it returns `Some`, or panics after `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

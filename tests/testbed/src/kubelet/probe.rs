//! Running a container's readiness and liveness probes for real, with the
//! Kubernetes bookkeeping of thresholds and periods.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::etcd_bin::EtcdBinaries;

/// The outcome of one probe attempt; the message says why it failed.
pub type Outcome = Result<(), String>;

/// Runs `probe` once against a container at `ip`.
pub async fn run_once(
    probe: &Probe,
    container: &Container,
    ip: IpAddr,
    bins: &EtcdBinaries,
) -> Outcome {
    let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
    let attempt = async {
        if let Some(http) = &probe.http_get {
            let scheme = http.scheme.as_deref().unwrap_or("HTTP");
            if !scheme.eq_ignore_ascii_case("HTTP") {
                return Err(format!(
                    "scheme {scheme} is not supported by the local kubelet"
                ));
            }
            let host = host_or(http.host.as_deref(), ip)?;
            let port = resolve_port(&http.port, container)?;
            let headers: Vec<(String, String)> = http
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect();
            http_get(
                SocketAddr::new(host, port),
                http.path.as_deref().unwrap_or("/"),
                &headers,
            )
            .await
        } else if let Some(tcp) = &probe.tcp_socket {
            let host = host_or(tcp.host.as_deref(), ip)?;
            let port = resolve_port(&tcp.port, container)?;
            TcpStream::connect((host, port))
                .await
                .map(drop)
                .map_err(|e| format!("dial tcp {host}:{port}: {e}"))
        } else if let Some(exec) = &probe.exec {
            run_exec(exec.command.as_deref().unwrap_or_default(), bins).await
        } else {
            Err(
                "the probe has no handler the local kubelet supports (httpGet, tcpSocket, exec)"
                    .into(),
            )
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("probe timed out after {}s", timeout.as_secs())),
    }
}

fn host_or(host: Option<&str>, ip: IpAddr) -> Result<IpAddr, String> {
    match host.filter(|h| !h.is_empty()) {
        None => Ok(ip),
        Some(h) => h
            .parse()
            .map_err(|_| format!("probe host {h:?} is not an IP address")),
    }
}

fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).map_err(|_| format!("invalid probe port {p}")),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("probe port {name:?} names no container port")),
    }
}

/// A minimal HTTP/1.1 GET: success is a status in 200..400, like the kubelet.
async fn http_get(addr: SocketAddr, path: &str, headers: &[(String, String)]) -> Outcome {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("Get \"http://{addr}{path}\": {e}"))?;
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/steward-testbed\r\nConnection: close\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream
        .write_all(req.as_bytes())
        .await
        .map_err(|e| format!("writing probe request: {e}"))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 512];
    while !head.windows(2).any(|w| w == b"\r\n") {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("reading probe response: {e}"))?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            format!(
                "malformed HTTP response from {addr}: {:?}",
                line.lines().next().unwrap_or("")
            )
        })?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

/// Exec probes run etcdctl/etcdutl locally; any other program is refused,
/// because the kubelet runs on the developer's machine, not in a container.
async fn run_exec(command: &[String], bins: &EtcdBinaries) -> Outcome {
    let Some((first, rest)) = command.split_first() else {
        return Err("exec probe with an empty command".into());
    };
    let program = match first.rsplit('/').next().unwrap_or(first) {
        "etcdctl" => &bins.etcdctl,
        "etcdutl" => &bins.etcdutl,
        other => {
            return Err(format!(
                "exec probe program {other:?} is not supported by the local kubelet"
            ));
        }
    };
    let out = tokio::process::Command::new(program)
        .args(rest)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("running {}: {e}", program.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "exec probe failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Threshold bookkeeping for one probe on one container run.
#[derive(Debug, Clone)]
pub struct ProbeState {
    pub probe: Probe,
    pub next: Instant,
    successes: i32,
    failures: i32,
    pub last_error: Option<String>,
}

/// What a probe result means for the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Thresholds not crossed: keep the current state.
    Unchanged,
    Passing,
    Failing,
}

impl ProbeState {
    /// Starts counting for a container that started at `started`.
    pub fn new(probe: Probe, started: Instant) -> Self {
        let delay = Duration::from_secs(probe.initial_delay_seconds.unwrap_or(0).max(0) as u64);
        ProbeState {
            probe,
            next: started + delay,
            successes: 0,
            failures: 0,
            last_error: None,
        }
    }

    pub fn period(&self) -> Duration {
        Duration::from_secs(self.probe.period_seconds.unwrap_or(10).max(1) as u64)
    }

    /// Records an attempt's outcome and schedules the next.
    pub fn record(&mut self, outcome: Outcome, now: Instant) -> Verdict {
        self.next = now + self.period();
        match outcome {
            Ok(()) => {
                self.failures = 0;
                self.successes += 1;
                self.last_error = None;
                if self.successes >= self.probe.success_threshold.unwrap_or(1).max(1) {
                    Verdict::Passing
                } else {
                    Verdict::Unchanged
                }
            }
            Err(e) => {
                self.successes = 0;
                self.failures += 1;
                self.last_error = Some(e);
                if self.failures >= self.probe.failure_threshold.unwrap_or(3).max(1) {
                    Verdict::Failing
                } else {
                    Verdict::Unchanged
                }
            }
        }
    }

    /// Pushes the next attempt a period past `now` (after a thaw).
    pub fn postpone(&mut self, now: Instant) {
        self.next = now + self.period();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn probe(v: serde_json::Value) -> Probe {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn thresholds_are_counted_like_the_kubelet() {
        let p = probe(
            json!({"httpGet": {"port": 2381, "path": "/health"}, "failureThreshold": 2, "successThreshold": 2}),
        );
        let t0 = Instant::now();
        let mut s = ProbeState::new(p, t0);
        assert_eq!(s.record(Err("x".into()), t0), Verdict::Unchanged);
        assert_eq!(s.record(Err("x".into()), t0), Verdict::Failing);
        assert_eq!(s.record(Ok(()), t0), Verdict::Unchanged);
        assert_eq!(s.record(Ok(()), t0), Verdict::Passing);
        assert_eq!(s.next, t0 + Duration::from_secs(10));
    }

    #[tokio::test]
    async fn http_probe_reports_success_and_status_codes() {
        use tokio::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            for code in ["200 OK", "503 Service Unavailable"] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await.unwrap();
                s.write_all(format!("HTTP/1.1 {code}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await
                    .unwrap();
            }
        });
        let c: Container = serde_json::from_value(
            json!({"name": "etcd", "ports": [{"name": "metrics", "containerPort": addr.port()}]}),
        )
        .unwrap();
        let bins = EtcdBinaries {
            etcd: "/x".into(),
            etcdctl: "/x".into(),
            etcdutl: "/x".into(),
        };
        let p = probe(json!({"httpGet": {"port": "metrics", "path": "/health"}}));
        assert_eq!(run_once(&p, &c, addr.ip(), &bins).await, Ok(()));
        let err = run_once(&p, &c, addr.ip(), &bins).await.unwrap_err();
        assert!(err.contains("503"), "{err}");
        server.await.unwrap();
        let err = run_once(&p, &c, addr.ip(), &bins).await.unwrap_err();
        assert!(err.contains("refused"), "{err}");
    }
}

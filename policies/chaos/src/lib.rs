//! A status policy that misbehaves on request.
//!
//! With no settings it is a small, well-behaved policy. The `fault` setting
//! (`{"fault": "trap"}`) selects a misbehaviour, so the host's tests can show
//! that each one is contained: the host must answer with its own fallback
//! verdict, and a policy must never see a file, the network, the environment
//! or a real clock. Probing faults report what they got in the `Available`
//! condition's message, for the test to assert on.
//!
//! It is built with the SDK's component glue (`guest` feature), the way a
//! policy written by a platform team would be, and uses nothing else of the
//! host's.

use std::sync::atomic::{AtomicU32, Ordering};

use steward_policy_sdk::guest::Policy;
use steward_policy_sdk::{
    Condition, ConditionStatus, Observation, PolicyInfo, ProbeOutcome, Probing, Verdict,
};

/// Evaluations this instance has served. The host gives every evaluation a
/// fresh instance, so the `count` fault must always report 1.
static CALLS: AtomicU32 = AtomicU32::new(0);

const FAULTS: &[&str] = &[
    "none",
    "trap",
    "panic",
    "loop",
    "memory",
    "missing-degraded",
    "bad-reason",
    "long-message",
    "too-many-ready",
    "duplicate-condition",
    "host-condition",
    "file",
    "env",
    "socket",
    "dns",
    "clock",
    "sleep",
    "stdout-flood",
    "count",
    "always-available",
];

pub struct Chaos;

impl Policy for Chaos {
    fn describe() -> PolicyInfo {
        PolicyInfo {
            name: "chaos".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            // ChaosDeclared is declared and never reported: the host must
            // write it as Unknown/NotReported rather than drop it.
            condition_types: vec![
                "Available".to_owned(),
                "Degraded".to_owned(),
                "ChaosDeclared".to_owned(),
            ],
            settings_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "fault": { "type": "string", "enum": FAULTS },
                    "addr": { "type": "string", "description": "host:port for the socket fault" },
                    "path": { "type": "string", "description": "file for the file fault" },
                },
                "additionalProperties": false,
            })
            .to_string(),
        }
    }

    fn validate_settings(settings: &str) -> Result<(), String> {
        Settings::parse(settings).map(|_| ())
    }

    fn evaluate(observation: Observation) -> Verdict {
        let calls = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
        let settings = match Settings::parse(&observation.settings) {
            Ok(settings) => settings,
            Err(message) => return verdict(&observation, ConditionStatus::Unknown, message),
        };
        match settings.fault.as_str() {
            "none" => healthy(&observation),
            "trap" => trap(),
            "panic" => panic!("chaos policy: deliberate panic"),
            #[allow(clippy::empty_loop)]
            "loop" => loop {},
            "memory" => hog_memory(),
            "missing-degraded" => {
                let mut v = healthy(&observation);
                v.conditions.retain(|c| c.type_ != "Degraded");
                v
            }
            "bad-reason" => {
                let mut v = healthy(&observation);
                v.conditions[0].reason = "not camel case".to_owned();
                v
            }
            "long-message" => {
                let mut v = healthy(&observation);
                v.conditions[0].message = "x".repeat(2048);
                v
            }
            "too-many-ready" => {
                let mut v = healthy(&observation);
                v.ready_members = observation.members.len() as u32 + 1;
                v
            }
            "duplicate-condition" => {
                let mut v = healthy(&observation);
                let again = v.conditions[0].clone();
                v.conditions.push(again);
                v
            }
            "host-condition" => {
                let mut v = healthy(&observation);
                v.conditions
                    .push(condition("Ready", ConditionStatus::True, "Chaos", ""));
                v
            }
            "file" => {
                let path = settings.path.as_deref().unwrap_or("/etc/passwd");
                let got = match std::fs::read(path) {
                    Ok(bytes) => format!("file: read {} bytes", bytes.len()),
                    Err(e) => format!("file: error: {e}"),
                };
                let listing = match std::fs::read_dir("/") {
                    Ok(entries) => format!("dir: {} entries", entries.count()),
                    Err(e) => format!("dir: error: {e}"),
                };
                verdict(
                    &observation,
                    ConditionStatus::True,
                    format!("{got}; {listing}"),
                )
            }
            "env" => {
                let message = format!(
                    "env: {} vars, {} args, cwd {:?}",
                    std::env::vars_os().count(),
                    std::env::args_os().count(),
                    std::env::current_dir().ok(),
                );
                verdict(&observation, ConditionStatus::True, message)
            }
            "socket" => {
                let addr = settings.addr.as_deref().unwrap_or("127.0.0.1:2379");
                let message = match std::net::TcpStream::connect(addr) {
                    Ok(_) => format!("socket: connected to {addr}"),
                    Err(e) => format!("socket: error: {e}"),
                };
                verdict(&observation, ConditionStatus::True, message)
            }
            "dns" => {
                use std::net::ToSocketAddrs;
                let message = match ("localhost", 2379).to_socket_addrs() {
                    Ok(addrs) => format!("dns: resolved {} addresses", addrs.count()),
                    Err(e) => format!("dns: error: {e}"),
                };
                verdict(&observation, ConditionStatus::True, message)
            }
            "clock" => {
                let wall = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as i64)
                    .unwrap_or(-1);
                let start = std::time::Instant::now();
                let elapsed = start.elapsed().as_nanos();
                let message = format!("clock: wall={wall}ms monotonic-elapsed={elapsed}ns");
                verdict(&observation, ConditionStatus::True, message)
            }
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_secs(3600));
                verdict(&observation, ConditionStatus::True, "slept".to_owned())
            }
            "stdout-flood" => {
                use std::io::Write;
                let line = [b'y'; 1024];
                for _ in 0..1024 {
                    let _ = std::io::stdout().write_all(&line);
                    let _ = std::io::stderr().write_all(&line);
                }
                healthy(&observation)
            }
            // Says Available=True whatever the probe saw (a third party's
            // careless policy): the host must reject the verdict whenever
            // its own facts show no quorum now, or it reached no member.
            "always-available" => Verdict {
                ready_members: observation.members.len() as u32,
                ..verdict(
                    &observation,
                    ConditionStatus::True,
                    "chaos: says the cluster is available, whatever the probe saw".to_owned(),
                )
            },
            "count" => verdict(
                &observation,
                ConditionStatus::True,
                format!("calls={calls}"),
            ),
            other => unreachable!("validated fault {other}"),
        }
    }
}

struct Settings {
    fault: String,
    addr: Option<String>,
    path: Option<String>,
}

impl Settings {
    fn parse(json: &str) -> Result<Self, String> {
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| format!("settings are not JSON: {e}"))?;
        let object = value.as_object().ok_or("settings must be a JSON object")?;
        let text = |key: &str| -> Result<Option<String>, String> {
            match object.get(key) {
                None => Ok(None),
                Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("settings.{key} must be a string")),
            }
        };
        if let Some(key) = object
            .keys()
            .find(|k| !["fault", "addr", "path"].contains(&k.as_str()))
        {
            return Err(format!("unknown setting {key:?}"));
        }
        let fault = text("fault")?.unwrap_or_else(|| "none".to_owned());
        if !FAULTS.contains(&fault.as_str()) {
            return Err(format!("unknown fault {fault:?}"));
        }
        Ok(Self {
            fault,
            addr: text("addr")?,
            path: text("path")?,
        })
    }
}

/// The well-behaved policy: available exactly when the host verified a quorum.
fn healthy(observation: &Observation) -> Verdict {
    let quorum = observation.quorum.is_verified();
    let (status, message) = if quorum {
        (ConditionStatus::True, "a quorum read succeeded")
    } else {
        (ConditionStatus::False, "no quorum read succeeded")
    };
    verdict(observation, status, message.to_owned())
}

fn verdict(observation: &Observation, available: ConditionStatus, message: String) -> Verdict {
    let answered = match &observation.probing {
        Probing::Attempted(report) => report
            .endpoints
            .iter()
            .filter(|p| matches!(p.outcome, ProbeOutcome::Answered(_)))
            .count(),
        Probing::Skipped(_) => 0,
    };
    let ready = answered.min(observation.members.len()) as u32;
    Verdict {
        conditions: vec![
            condition("Available", available, "Chaos", &message),
            condition("Degraded", ConditionStatus::False, "Chaos", ""),
        ],
        ready_members: ready,
        decline_verification: None,
        requeue_after_ms: None,
        events: Vec::new(),
    }
}

fn condition(type_: &str, status: ConditionStatus, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message: message.to_owned(),
    }
}

fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    std::process::abort();
}

/// Allocates a mebibyte at a time until the allocator gives up (which
/// aborts the instance). The pages are not written: the point is to reach
/// the cap, not to spend the deadline on page faults.
fn hog_memory() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(Vec::with_capacity(1 << 20));
        std::hint::black_box(&mut hoard);
    }
}

steward_policy_sdk::export_policy!(Chaos);

//! The policy runtime contains misbehaving policies: every fault of the chaos
//! policy yields the host's fallback verdict with the right error kind, and
//! the sandbox shows a policy no file, network, environment or clock.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use etcd_steward::policy::{
    EngineConfig, ErrorKind, Evaluation, FALLBACK_REASON, Limits, LoadedPolicy, PolicyEngine,
};
use steward_policy_sdk::{
    ClusterSpec, ConditionStatus, EndpointProbe, EndpointStatus, Member, Observation, PodPhase,
    ProbeOutcome, ProbeReport, Probing, QuorumReadOutcome,
};

const CHAOS_WASM: &str = env!("STEWARD_CHAOS_POLICY_WASM");

/// A deadline far above what any well-behaved call needs, so that a busy
/// machine preempting a test thread cannot turn a pass into a Deadline.
static ENGINE: LazyLock<PolicyEngine> = LazyLock::new(|| {
    PolicyEngine::new(EngineConfig {
        defaults: Limits {
            deadline: Duration::from_secs(5),
            ..Limits::default()
        },
        maximum: Limits {
            deadline: Duration::from_secs(5),
            ..Limits::default_maximum()
        },
        ..EngineConfig::default()
    })
    .expect("the policy engine starts")
});

/// The limits the operator runs with.
static DEFAULT_ENGINE: LazyLock<PolicyEngine> =
    LazyLock::new(|| PolicyEngine::new(EngineConfig::default()).expect("the policy engine starts"));

fn chaos() -> Arc<LoadedPolicy> {
    ENGINE
        .load_file(CHAOS_WASM)
        .expect("the chaos policy loads")
}

/// Three healthy members that all answered, and a quorum read that succeeded.
fn observation(settings: serde_json::Value) -> Observation {
    let members = (0..3)
        .map(|i| Member {
            name: format!("etcd-{i}"),
            member_id: Some(0x1000 + i),
            endpoint: format!("https://etcd-{i}.etcd:2379"),
            pod_phase: PodPhase::Running,
            pod_ready: true,
            ..Member::default()
        })
        .collect::<Vec<_>>();
    let endpoints = members
        .iter()
        .map(|m| EndpointProbe {
            member: m.name.clone(),
            endpoint: m.endpoint.clone(),
            outcome: ProbeOutcome::Answered(EndpointStatus {
                member_id: m.member_id.unwrap(),
                leader_id: 0x1000,
                raft_term: 2,
                ..EndpointStatus::default()
            }),
        })
        .collect();
    let probing = Probing::Attempted(ProbeReport {
        endpoints,
        quorum_read: QuorumReadOutcome::Succeeded,
        ..ProbeReport::default()
    });
    Observation {
        cluster: Default::default(),
        spec: ClusterSpec {
            desired_replicas: 3,
            ..ClusterSpec::default()
        },
        phase: Default::default(),
        members,
        quorum: steward_policy_sdk::QuorumFinding::of(&probing),
        probing,
        history: Default::default(),
        backup: None,
        tls: Default::default(),
        now: 1_780_000_000_000,
        settings: settings.to_string(),
    }
}

fn run_fault(fault: &str) -> Evaluation {
    chaos().evaluate(&observation(serde_json::json!({ "fault": fault })))
}

/// The fallback verdict claims nothing and names what failed.
fn assert_fallback(evaluation: &Evaluation, kind: ErrorKind, mentions: &str) {
    let error = evaluation
        .error
        .as_ref()
        .unwrap_or_else(|| panic!("expected a {kind} failure, got {:?}", evaluation.verdict));
    assert_eq!(error.kind(), kind, "{error}");
    let verdict = &evaluation.verdict;
    for type_ in ["Available", "Degraded"] {
        let c = verdict
            .condition(type_)
            .unwrap_or_else(|| panic!("{type_} is missing"));
        assert_eq!(c.status, ConditionStatus::Unknown, "{type_}");
        assert_eq!(c.reason, FALLBACK_REASON, "{type_}");
        assert!(
            c.message.contains(mentions),
            "{type_} message {:?} should mention {mentions:?}",
            c.message
        );
    }
    assert!(
        verdict.decline_verification.is_some(),
        "the fallback claims nothing"
    );
    assert_eq!(verdict.ready_members, 0);
}

/// A successful evaluation's Available message.
fn reported(evaluation: &Evaluation) -> String {
    assert_eq!(evaluation.error, None);
    evaluation
        .verdict
        .condition("Available")
        .unwrap()
        .message
        .clone()
}

#[test]
fn well_behaved_policy_gets_its_verdict_through() {
    let evaluation = chaos().evaluate(&observation(serde_json::json!({})));
    assert_eq!(evaluation.error, None);
    let available = evaluation.verdict.condition("Available").unwrap();
    assert_eq!(available.status, ConditionStatus::True);
    assert_eq!(available.reason, "Chaos");
    assert_eq!(evaluation.verdict.ready_members, 3);
    assert!(evaluation.verdict.decline_verification.is_none());
}

#[test]
fn trap_yields_fallback() {
    assert_fallback(&run_fault("trap"), ErrorKind::Trap, "unreachable");
}

#[test]
fn panic_yields_fallback_naming_the_panic() {
    assert_fallback(
        &run_fault("panic"),
        ErrorKind::Trap,
        "chaos policy: deliberate panic",
    );
}

#[test]
fn infinite_loop_is_stopped_by_the_deadline() {
    let policy = DEFAULT_ENGINE.load_file(CHAOS_WASM).unwrap();
    let started = Instant::now();
    let evaluation = policy.evaluate(&observation(serde_json::json!({"fault": "loop"})));
    let took = started.elapsed();
    assert_fallback(&evaluation, ErrorKind::Deadline, "50 ms deadline");
    // A generous bound, not a speed claim: the deadline is 50 ms.
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

/// A host call cannot be interrupted by the epoch deadline, so a sleep must
/// be refused rather than waited out.
#[test]
fn sleeping_is_refused() {
    let started = Instant::now();
    let evaluation = run_fault("sleep");
    assert_fallback(&evaluation, ErrorKind::Trap, "policies may not block");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn memory_hog_hits_the_cap() {
    assert_fallback(&run_fault("memory"), ErrorKind::Memory, "memory cap");
}

#[test]
fn invalid_verdicts_are_replaced() {
    for (fault, mentions) in [
        ("missing-degraded", "Degraded is missing"),
        ("bad-reason", "not camel case"),
        ("long-message", "2048-byte message"),
        ("too-many-ready", "ready-members is 4"),
        ("duplicate-condition", "appears twice"),
        ("host-condition", "\"Ready\" belongs to the host"),
    ] {
        assert_fallback(&run_fault(fault), ErrorKind::InvalidVerdict, mentions);
    }
}

#[test]
fn policy_cannot_read_files() {
    let message = reported(&run_fault("file"));
    assert!(message.starts_with("file: error: "), "{message}");
    assert!(message.contains("dir: error: "), "{message}");
}

#[test]
fn policy_sees_no_environment() {
    let message = reported(&run_fault("env"));
    assert!(message.starts_with("env: 0 vars, 0 args"), "{message}");
}

#[test]
fn policy_cannot_connect_or_resolve() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let evaluation = chaos().evaluate(&observation(
        serde_json::json!({ "fault": "socket", "addr": addr }),
    ));
    let message = reported(&evaluation);
    assert!(message.starts_with("socket: error: "), "{message}");
    let accepted = listener.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the policy reached the listener: {accepted:?}"
    );

    let message = reported(&run_fault("dns"));
    assert!(message.starts_with("dns: error: "), "{message}");
}

#[test]
fn policy_clock_is_frozen() {
    let message = reported(&run_fault("clock"));
    assert_eq!(message, "clock: wall=0ms monotonic-elapsed=0ns");
}

#[test]
fn flooding_stdout_and_stderr_does_no_harm() {
    let evaluation = run_fault("stdout-flood");
    assert_eq!(evaluation.error, None);
    assert_eq!(
        evaluation.verdict.condition("Available").unwrap().status,
        ConditionStatus::True
    );
}

#[test]
fn no_state_survives_an_evaluation() {
    let policy = chaos();
    for _ in 0..3 {
        assert_eq!(
            reported(&policy.evaluate(&observation(serde_json::json!({"fault": "count"})))),
            "calls=1"
        );
    }
}

#[test]
fn settings_are_checked_by_the_policy() {
    let policy = chaos();
    assert_eq!(policy.validate_settings(r#"{"fault": "trap"}"#), Ok(()));
    let error = policy
        .validate_settings(r#"{"fault": "nonsense"}"#)
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Settings);
    assert!(
        error.to_string().contains("unknown fault \"nonsense\""),
        "{error}"
    );
    let error = policy.validate_settings("not json").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Settings);
}

#[test]
fn loading_is_cached_by_digest() {
    use sha2::Digest as _;
    let bytes = std::fs::read(CHAOS_WASM).unwrap();
    let first = ENGINE.load(&bytes).unwrap();
    let second = ENGINE.load_file(CHAOS_WASM).unwrap();
    assert!(Arc::ptr_eq(&first, &second));
    assert_eq!(first.digest, hex::encode(sha2::Sha256::digest(&bytes)));
    assert_eq!(first.info.name, "chaos");
    assert_eq!(
        first.info.condition_types,
        ["Available", "Degraded", "ChaosDeclared"]
    );
}

#[test]
fn default_policy_is_embedded() {
    let policy = ENGINE.default_policy();
    assert!(!policy.info.name.is_empty());
    for type_ in ["Available", "Degraded"] {
        assert!(
            policy.info.condition_types.iter().any(|t| t == type_),
            "{:?}",
            policy.info.condition_types
        );
    }
    let evaluation = policy.evaluate(&observation(serde_json::json!({})));
    assert_eq!(evaluation.error, None, "{:?}", evaluation.verdict);
    assert_eq!(
        evaluation.verdict.condition("Available").unwrap().status,
        ConditionStatus::True
    );
}

/// Far more text than a real cluster's: the default policy's allocator runs
/// out of its static arena and continues in grown memory
/// (policies/default/src/bump.rs), and the verdict is still the native one.
#[test]
fn default_policy_outgrows_its_arena() {
    let mut big = observation(serde_json::json!({}));
    big.cluster.name = "c".repeat(100 << 10);
    for member in &mut big.members {
        member.endpoint = format!("https://{}.etcd:2379", "m".repeat(30 << 10));
    }
    let evaluation = ENGINE.default_policy().evaluate(&big);
    assert_eq!(evaluation.error, None, "{:?}", evaluation.verdict);
    assert_eq!(
        evaluation.verdict,
        steward_default_policy::evaluate_json_settings(&big)
    );
}

#[test]
fn garbage_is_refused_at_load() {
    let component = std::fs::read(CHAOS_WASM).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("text", b"hello, I am not wasm".to_vec(), "no \\0asm header"),
        ("empty", Vec::new(), "no \\0asm header"),
        (
            "truncated component",
            component[..component.len() / 2].to_vec(),
            "not a valid component",
        ),
        (
            "core module",
            wat::parse_str("(module)").unwrap(),
            "core WebAssembly module",
        ),
        (
            "component of another world",
            wat::parse_str("(component)").unwrap(),
            "not a steward:status/status-policy component",
        ),
        (
            "component importing what the host does not offer",
            wat::parse_str(
                r#"(component (import "example:nope/thing@1.0.0" (instance (export "f" (func)))))"#,
            )
            .unwrap(),
            "example:nope/thing",
        ),
    ];
    for (what, bytes, mentions) in cases {
        let error = ENGINE.load(&bytes).expect_err(what);
        assert_eq!(error.kind(), ErrorKind::Load, "{what}: {error}");
        assert!(
            error.to_string().contains(mentions),
            "{what}: {error} should mention {mentions:?}"
        );
    }
}

/// wasmtime-wasi's synchronous bindings enter a Tokio runtime for stream
/// writes; the operator evaluates from `spawn_blocking`, where that must
/// work for a policy that writes to stderr and then panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn evaluating_from_spawn_blocking_works() {
    let evaluation = tokio::task::spawn_blocking(|| run_fault("panic"))
        .await
        .expect("no host panic");
    assert_fallback(&evaluation, ErrorKind::Trap, "deliberate panic");
}

/// A component built against `steward:status@0.1.0` still loads, receives
/// the 0.1.0 observation, and its `verified: true` comes back as a claim the
/// host checks (a 0.2.0 verdict can make none).
#[test]
fn a_component_of_the_previous_contract_loads_and_its_claim_is_checked() {
    use etcd_steward::cluster::evaluate::judge;
    let old = ENGINE
        .load_file(env!("STEWARD_COMPAT_V0_1_POLICY_WASM"))
        .expect("a 0.1.0 component loads");
    assert_eq!(old.contract(), "steward:status@0.1.0");
    assert_eq!(chaos().contract(), "steward:status@0.4.0");
    assert!(
        old.info
            .condition_types
            .contains(&"CompatDeclared".to_owned())
    );

    // Probed, a read went through: the claim is true and stands.
    let obs = observation(serde_json::json!({"claim": "verified"}));
    let evaluation = old.evaluate(&obs);
    assert!(evaluation.claims_verified, "{evaluation:?}");
    let judged = judge(&obs, evaluation);
    assert!(judged.problem.is_none(), "{:?}", judged.problem);
    assert!(judged.verified);

    // The same claim when no member answered: rejected.
    let mut silent = obs.clone();
    silent.probing = Probing::Skipped("every member is dormant".into());
    silent.quorum = steward_policy_sdk::QuorumFinding::of(&silent.probing);
    let judged = judge(&silent, old.evaluate(&silent));
    let problem = judged.problem.expect("the claim is rejected");
    assert_eq!(problem.rejection(), Some("UnconfirmedVerification"));
    assert!(!judged.verified);
}

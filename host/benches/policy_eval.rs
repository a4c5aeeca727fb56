//! The default policy through wasm (pre-instantiated, a fresh instance per
//! call) against the same decision logic compiled natively, on a realistic
//! five-member observation. Figures go in docs/benchmarks.md.
//!
//! cargo bench -p etcd-steward --bench policy_eval
//!
//! After criterion's report it prints median and p99 of single calls, which
//! criterion (it times batches) does not give.
//!
//! With `POLICY_EVAL_CALLS=N` it skips criterion and only runs N evaluations
//! of each path, for counting instructions: this machine's speed moves from
//! minute to minute, instruction counts do not. scripts/count-policy-eval.sh
//! runs it under callgrind.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use etcd_steward::policy::{EngineConfig, PolicyEngine};
use steward_policy_sdk::Observation;

/// The default policy's realistic healthy five-member cluster.
fn observation() -> Observation {
    let path =
        steward_testbed::repo::root().join("policies/default/tests/fixtures/five-members.yaml");
    steward_policy_sdk::testing::load_observation(&path).expect("the fixture parses")
}

fn percentiles(name: &str, calls: usize, mut f: impl FnMut()) -> Duration {
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let start = Instant::now();
        f();
        samples.push(start.elapsed());
    }
    samples.sort();
    let median = samples[calls / 2];
    let p99 = samples[calls * 99 / 100];
    println!("{name:>7}: median {median:>10.2?}  p99 {p99:>10.2?}  ({calls} single calls)");
    median
}

fn main() {
    let engine = PolicyEngine::new(EngineConfig::default()).expect("the policy engine starts");
    let policy = engine.default_policy();
    let obs = observation();

    // Both paths must agree, or the comparison means nothing.
    let through_wasm = policy.evaluate(&obs);
    assert_eq!(through_wasm.error, None, "{:?}", through_wasm.verdict);
    assert_eq!(
        through_wasm.verdict,
        steward_default_policy::evaluate_json_settings(&obs)
    );

    if let Ok(calls) = std::env::var("POLICY_EVAL_CALLS") {
        let calls: usize = calls.parse().expect("POLICY_EVAL_CALLS is a number");
        for _ in 0..calls {
            black_box(policy.evaluate(black_box(&obs)));
        }
        for _ in 0..calls {
            black_box(steward_default_policy::evaluate_json_settings(black_box(
                &obs,
            )));
        }
        return;
    }

    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("policy_eval");
    group.bench_function("wasm", |b| b.iter(|| policy.evaluate(black_box(&obs))));
    group.bench_function("native", |b| {
        b.iter(|| steward_default_policy::evaluate_json_settings(black_box(&obs)))
    });
    group.finish();
    criterion.final_summary();

    // `cargo test --benches` runs each benchmark once as a smoke test; the
    // percentile pass is only for real runs.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let calls = 20_000;
    let wasm = percentiles("wasm", calls, || {
        black_box(policy.evaluate(black_box(&obs)));
    });
    let native = percentiles("native", calls, || {
        black_box(steward_default_policy::evaluate_json_settings(black_box(
            &obs,
        )));
    });
    println!(
        "  ratio: {:.1}x (median wasm / median native)",
        wasm.as_secs_f64() / native.as_secs_f64()
    );
}

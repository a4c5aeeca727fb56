//! What each SDK's example costs the operator: compiling its component
//! (once per digest), loading it from the compiled-component cache instead
//! (a restarted operator, a second `policy test`), and one evaluation with
//! a fresh instance, instantiation included, against the default deadline.
//! Figures go in docs/benchmarks.md.
//!
//! cargo bench --profile dev -p etcd-steward --bench sdk_examples
//!
//! The Python and JavaScript examples are built first by their SDK's
//! build.sh (cached by content, see steward_testbed::sdk_examples).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use etcd_steward::policy::{EngineConfig, PolicyEngine};
use steward_policy_sdk::Observation;

/// A healthy five-member cluster, with no settings (each example's defaults).
fn observation() -> Observation {
    let path =
        steward_testbed::repo::root().join("policies/default/tests/fixtures/five-members.yaml");
    let mut obs = steward_policy_sdk::testing::load_observation(&path).expect("the fixture parses");
    obs.settings = "{}".into();
    obs
}

fn engine(cache: Option<PathBuf>) -> PolicyEngine {
    PolicyEngine::new(EngineConfig {
        cache_dir: cache,
        ..EngineConfig::default()
    })
    .expect("the policy engine starts")
}

fn main() {
    // `cargo test --benches` runs each benchmark binary once as a smoke test.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let examples: Vec<(&str, PathBuf)> = vec![
        ("rust", PathBuf::from(env!("STEWARD_EXAMPLE_RAFT_LAG_WASM"))),
        (
            "python",
            steward_testbed::sdk_examples::python().expect("the Python example builds"),
        ),
        (
            "js",
            steward_testbed::sdk_examples::js().expect("the JavaScript example builds"),
        ),
    ];
    let obs = observation();
    let calls = if smoke { 3 } else { 2_000 };
    let deadline = etcd_steward::policy::Limits::default().deadline;
    println!("default deadline {deadline:?}; {calls} evaluations each, a fresh instance per call");
    for (lang, wasm) in examples {
        let bytes = std::fs::read(&wasm).expect("the component");
        let cache = tempfile::tempdir().expect("a temp dir");

        // Compile, then keep it in the cache.
        let cold = engine(Some(cache.path().to_owned()));
        let start = Instant::now();
        let policy = cold.load(&bytes).expect("the example loads");
        let compile = start.elapsed();

        // What a restarted operator pays instead.
        let warm = engine(Some(cache.path().to_owned()));
        let start = Instant::now();
        warm.load(&bytes).expect("the example loads from the cache");
        let cached = start.elapsed();

        let first = policy.evaluate(&obs);
        assert_eq!(first.error, None, "{lang}: {:?}", first.verdict);
        let mut samples: Vec<Duration> = (0..calls)
            .map(|_| {
                let start = Instant::now();
                let e = policy.evaluate(&obs);
                let took = start.elapsed();
                assert_eq!(e.error, None);
                took
            })
            .collect();
        samples.sort();
        let median = samples[calls / 2];
        let p99 = samples[calls * 99 / 100];
        println!(
            "{lang:>6}: {:>6.1} MB  compile {compile:>9.2?}  from cache {cached:>9.2?}  \
             evaluate median {median:>9.2?} p99 {p99:>9.2?}  margin to deadline {:.0}x (p99)",
            bytes.len() as f64 / 1e6,
            deadline.as_secs_f64() / p99.as_secs_f64()
        );
    }
}

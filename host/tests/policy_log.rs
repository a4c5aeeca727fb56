//! The operator logs each policy it loads, once, by digest.
//!
//! Its own test binary with one test: tracing caches each callsite's
//! interest process-wide, and a test thread that hits the callsite while
//! no subscriber listens can cache "never" under this test's scoped
//! subscriber (it did, once in a CI run of the lib tests).

use std::io::Write;
use std::sync::{Arc, Mutex};

use etcd_steward::policy::{DEFAULT_POLICY_WASM, EngineConfig, PolicyEngine};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_loaded_policy_is_logged_once_by_its_digest() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let engine = tracing::subscriber::with_default(subscriber, || {
        let engine = PolicyEngine::new(EngineConfig::default()).unwrap();
        // The same bytes again: a cache hit, not logged twice.
        engine.load(DEFAULT_POLICY_WASM).unwrap();
        engine
    });
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let digest = &engine.default_policy().digest;
    assert_eq!(log.matches("loaded a status policy").count(), 1, "{log}");
    assert!(log.contains(&format!("digest={digest}")), "{log}");
    assert!(log.contains("policy=steward-default-policy"), "{log}");
}

//! The policy engine: one wasmtime Engine per process, its epoch ticker, and
//! the compiled policies it has loaded, keyed by digest.

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
};

use super::loaded::LoadedPolicy;
use super::sandbox::{self, HostState};
use super::{PolicyError, embedded};

/// What one evaluation may consume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall time for one call into the policy (instantiation included).
    pub deadline: Duration,
    /// Linear memory per instance, in bytes.
    pub memory_bytes: usize,
    /// Wasm stack per call, in bytes.
    pub stack_bytes: usize,
    /// Evaluations that may run at the same moment. The pooling allocator
    /// reserves this many instance slots up front; one more concurrent
    /// evaluation fails to instantiate (and gets the fallback verdict).
    pub concurrent_evaluations: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_millis(50),
            memory_bytes: 32 << 20,
            stack_bytes: 512 << 10,
            concurrent_evaluations: 32,
        }
    }
}

/// Loads, compiles and caches policies. Cheap to share: clone it or put it in
/// an `Arc`; every clone uses the same wasmtime Engine and cache.
#[derive(Clone)]
pub struct PolicyEngine {
    inner: Arc<Inner>,
}

struct Inner {
    loader: Loader,
    default: Arc<LoadedPolicy>,
    /// Dropping it stops the ticker thread.
    _ticker: mpsc::Sender<()>,
}

/// Compiles components and remembers them by digest.
struct Loader {
    engine: Engine,
    linker: Linker<HostState>,
    limits: Limits,
    deadline_ticks: u64,
    cache: Mutex<HashMap<String, Arc<LoadedPolicy>>>,
}

impl PolicyEngine {
    /// Builds the engine and loads the embedded default policy, so a broken
    /// build fails here, at startup, rather than at the first reconcile.
    pub fn new(limits: Limits) -> anyhow::Result<Self> {
        let engine = Engine::new(&engine_config(&limits))
            .map_err(|e| anyhow::anyhow!("configuring wasmtime: {e:#}"))?;
        let linker = sandbox::linker(&engine)
            .map_err(|e| anyhow::anyhow!("linking the WASI sandbox: {e:#}"))?;
        let tick = epoch_tick(limits.deadline);
        // One tick more than the deadline needs: the current epoch may be
        // nearly over when an evaluation starts.
        let deadline_ticks = limits.deadline.as_nanos().div_ceil(tick.as_nanos()) as u64 + 1;
        let ticker = start_ticker(engine.clone(), tick)?;

        let loader = Loader {
            engine,
            linker,
            limits,
            deadline_ticks,
            cache: Mutex::new(HashMap::new()),
        };
        let default = loader
            .load(embedded::DEFAULT_POLICY_WASM)
            .map_err(|e| anyhow::anyhow!("the embedded default policy: {e}"))?;
        Ok(Self {
            inner: Arc::new(Inner {
                loader,
                default,
                _ticker: ticker,
            }),
        })
    }

    /// Compiles (or finds in the cache) and pre-instantiates a policy
    /// component, then asks it to describe itself.
    pub fn load(&self, bytes: &[u8]) -> Result<Arc<LoadedPolicy>, PolicyError> {
        self.inner.loader.load(bytes)
    }

    pub fn load_file(&self, path: impl AsRef<Path>) -> Result<Arc<LoadedPolicy>, PolicyError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path)
            .map_err(|e| PolicyError::Load(format!("reading {}: {e}", path.display())))?;
        self.load(&bytes).map_err(|e| match e {
            PolicyError::Load(why) => PolicyError::Load(format!("{}: {why}", path.display())),
            other => other,
        })
    }

    /// The policy built into this binary.
    pub fn default_policy(&self) -> Arc<LoadedPolicy> {
        self.inner.default.clone()
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.loader.limits
    }
}

impl Loader {
    fn load(&self, bytes: &[u8]) -> Result<Arc<LoadedPolicy>, PolicyError> {
        let digest = hex::encode(Sha256::digest(bytes));
        if let Some(hit) = self.lock_cache().get(&digest) {
            return Ok(hit.clone());
        }
        if !is_component(bytes) {
            return Err(PolicyError::Load(not_a_component(bytes)));
        }
        let component = Component::new(&self.engine, bytes)
            .map_err(|e| PolicyError::Load(format!("not a valid component: {}", wasm_error(&e))))?;
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| PolicyError::Load(wasm_error(&e)))?;
        let policy = Arc::new(LoadedPolicy::new(
            pre,
            digest.clone(),
            self.limits.clone(),
            self.deadline_ticks,
        )?);
        // Once per component: which policy runs is told by its digest, the
        // one name of it that cannot be spoofed.
        tracing::info!(
            policy = %policy.info.name,
            version = %policy.info.version,
            digest = %policy.digest,
            "loaded a status policy"
        );
        self.lock_cache().insert(digest, policy.clone());
        Ok(policy)
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<LoadedPolicy>>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Bytes of each memory and table slot reset in place rather than madvised
/// away; measured best among 128/192/256/320/512 KiB (docs/benchmarks.md)
/// before PAGEMAP_SCAN was on. With it this is only a cap: pages the last
/// evaluation did not write are not reset at all.
const KEEP_RESIDENT: usize = 256 << 10;

fn engine_config(limits: &Limits) -> Config {
    let memory = (limits.memory_bytes as u64).next_multiple_of(64 << 10);
    let slots = limits.concurrent_evaluations.max(1);
    let mut pool = PoolingAllocationConfig::default();
    // A policy component is a handful of core instances (the module plus
    // wit-component's shims); these bounds leave room without reserving
    // address space for thousands of slots.
    pool.total_component_instances(slots)
        .total_core_instances(slots * 8)
        .total_memories(slots * 2)
        .total_tables(slots * 4)
        .total_stacks(0)
        .max_core_instances_per_component(16)
        .max_memories_per_component(2)
        .max_tables_per_component(8)
        // On slot reuse, memset the first KEEP_RESIDENT bytes instead of
        // madvising them away. madvise costs a syscall with a TLB shootdown,
        // and every page the next evaluation touches faults back in; that was
        // 44 % of an evaluation's time. The default policy is linked
        // with a 128 KiB stack so what one evaluation touches fits in here.
        // Pages beyond it are still decommitted, so isolation is unchanged.
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(KEEP_RESIDENT)
        // PAGEMAP_SCAN (Linux 6.7+) tells which pages were written, so only
        // those are reset: one ioctl instead of a 256 KiB memset, which was
        // 39 % of an evaluation's instructions. Where the kernel lacks it,
        // `Auto` falls back to the memset.
        .pagemap_scan(Enabled::Auto)
        .max_memory_size(memory as usize);

    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .max_wasm_stack(limits.stack_bytes)
        .cranelift_opt_level(OptLevel::Speed)
        // Reserve only the capped size per memory slot (plus a guard for
        // constant offsets), so the pool costs slots × ~memory of address
        // space rather than slots × 8 GiB.
        .memory_reservation(memory)
        .memory_guard_size(2 << 20)
        .memory_reservation_for_growth(0)
        .memory_init_cow(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

/// Ticks often enough that a deadline is enforced within about a tenth of
/// itself, but never busier than once a millisecond.
fn epoch_tick(deadline: Duration) -> Duration {
    (deadline / 10).clamp(Duration::from_millis(1), Duration::from_millis(100))
}

fn start_ticker(engine: Engine, tick: Duration) -> anyhow::Result<mpsc::Sender<()>> {
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("policy-epoch".to_owned())
        .spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(tick) {
                engine.increment_epoch();
            }
        })?;
    Ok(stop)
}

/// The component-model preamble: `\0asm`, then version 0x0d and layer 1.
fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [0x0d, 0x00, 0x01, 0x00]
}

fn not_a_component(bytes: &[u8]) -> String {
    if bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [0x01, 0x00, 0x00, 0x00] {
        "this is a core WebAssembly module, not a component; build the policy for \
         wasm32-wasip2 (or run `wasm-tools component new`)"
            .to_owned()
    } else if bytes.starts_with(b"\0asm") {
        "unsupported WebAssembly binary version".to_owned()
    } else {
        format!(
            "not a WebAssembly component ({} bytes, no \\0asm header)",
            bytes.len()
        )
    }
}

/// A wasmtime error and its context chain on one line, for a condition
/// message or a CLI error.
pub(super) fn wasm_error(e: &wasmtime::Error) -> String {
    crate::text::one_line(&format!("{e:#}"))
}

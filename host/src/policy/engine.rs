//! The policy engine: one wasmtime Engine per process, its epoch ticker, and
//! the components it has compiled, keyed by digest, in memory and (when
//! given a directory) on disk, so neither a restarted operator nor the CLI
//! compiles the same component twice.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use wasmtime::component::{Component, InstancePre, Linker};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
};

use super::error::wasm_error;
use super::limits::Limits;
use super::loaded::LoadedPolicy;
use super::sandbox::{self, HostState};
use super::wit::Bound;
use super::{PolicyError, embedded};

/// How the engine is set up, once per process.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// What a policy gets when it asks for nothing.
    pub defaults: Limits,
    /// The most any policy may ask for; the instance pool is sized for it.
    pub maximum: Limits,
    /// Wasm stack per call, in bytes.
    pub stack_bytes: usize,
    /// Evaluations that may run at the same moment: the pooling allocator
    /// reserves this many instance slots, and the operator queues further
    /// evaluations rather than run them (so at most this many times a
    /// policy's memory is in use for evaluations).
    pub concurrent_evaluations: u32,
    /// Where compiled components are kept between processes. Only this
    /// process should write there: a compiled component is native code and
    /// is loaded without being checked again.
    pub cache_dir: Option<PathBuf>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            defaults: Limits::default(),
            maximum: Limits::default_maximum(),
            stack_bytes: 512 << 10,
            concurrent_evaluations: 8,
            cache_dir: None,
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

/// A component's digest and the limits it was loaded under.
type LoadedKey = (String, Limits);

/// Compiles components and remembers them by digest.
struct Loader {
    engine: Engine,
    linker: Linker<HostState>,
    config: EngineConfig,
    tick: Duration,
    compiled: Mutex<HashMap<String, Kept<InstancePre<HostState>>>>,
    /// Loaded policies by (digest, limits): what a second load returns.
    loaded: Mutex<HashMap<LoadedKey, Kept<Arc<LoadedPolicy>>>>,
    /// `cache_dir/<engine fingerprint>`, when on-disk caching is on.
    disk: Option<PathBuf>,
}

impl PolicyEngine {
    /// Builds the engine and loads the embedded default policy, so a broken
    /// build fails here, at startup, rather than at the first reconcile.
    pub fn new(config: EngineConfig) -> anyhow::Result<Self> {
        if let Some(over) = config.defaults.exceeding(&config.maximum) {
            anyhow::bail!("the default policy limits exceed the maximum: {over}");
        }
        let engine = Engine::new(&engine_config(&config))
            .map_err(|e| anyhow::anyhow!("configuring wasmtime: {e:#}"))?;
        let linker = sandbox::linker(&engine)
            .map_err(|e| anyhow::anyhow!("linking the WASI sandbox: {e:#}"))?;
        let tick = epoch_tick(config.defaults.deadline);
        let ticker = start_ticker(engine.clone(), tick)?;
        let disk = config
            .cache_dir
            .as_ref()
            .map(|dir| dir.join(engine_fingerprint(&engine)))
            .and_then(|dir| match private_dir(&dir) {
                Ok(()) => Some(dir),
                Err(why) => {
                    tracing::warn!(dir = %dir.display(), "not caching compiled policies on disk: {why}");
                    None
                }
            });

        let loader = Loader {
            engine,
            linker,
            tick,
            compiled: Mutex::new(HashMap::new()),
            loaded: Mutex::new(HashMap::new()),
            disk,
            config,
        };
        let default = loader
            .load(embedded::DEFAULT_POLICY_WASM, &loader.config.defaults)
            .map_err(|e| anyhow::anyhow!("the embedded default policy: {e}"))?;
        Ok(Self {
            inner: Arc::new(Inner {
                loader,
                default,
                _ticker: ticker,
            }),
        })
    }

    /// Compiles (or finds compiled) and pre-instantiates a policy component
    /// under the default limits, then asks it to describe itself.
    pub fn load(&self, bytes: &[u8]) -> Result<Arc<LoadedPolicy>, PolicyError> {
        self.inner
            .loader
            .load(bytes, &self.inner.loader.config.defaults)
    }

    /// The same under `limits`, which must be within the maximum.
    pub fn load_with(
        &self,
        bytes: &[u8],
        limits: &Limits,
    ) -> Result<Arc<LoadedPolicy>, PolicyError> {
        self.compile_with(bytes, limits)?.describe()
    }

    /// The first half of [`Self::load_with`]: compiles (or finds compiled)
    /// and pre-instantiates the component, without running any of it.
    /// [`Compiled::describe`] is the second half.
    pub fn compile_with(&self, bytes: &[u8], limits: &Limits) -> Result<Compiled, PolicyError> {
        if let Some(over) = limits.exceeding(&self.inner.loader.config.maximum) {
            return Err(PolicyError::Load(format!("limits: {over}")));
        }
        Ok(Compiled {
            engine: self.clone(),
            ready: self.inner.loader.compile(bytes, limits)?,
        })
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

    /// The limits a policy that asks for none runs under.
    pub fn limits(&self) -> &Limits {
        &self.inner.loader.config.defaults
    }

    pub fn maximum(&self) -> &Limits {
        &self.inner.loader.config.maximum
    }

    /// How many evaluations the pool has room for at once.
    pub fn concurrent_evaluations(&self) -> usize {
        self.inner.loader.config.concurrent_evaluations.max(1) as usize
    }

    /// Lets go of compiled and loaded versions that nothing holds and that
    /// have not been asked for in ten minutes (what hot reloads leave
    /// behind); the disk cache keeps them.
    pub fn forget_unused(&self) {
        self.inner.loader.forget_unused(IDLE);
    }
}

/// A component compiled for some limits and not yet asked to describe
/// itself: a load in two steps, so a caller can tell a component that does
/// not compile from one that fails when it first runs. Both steps block;
/// run them off the async workers.
pub struct Compiled {
    /// The engine whose caches the described policy goes into.
    engine: PolicyEngine,
    ready: Ready,
}

impl Compiled {
    /// Runs the policy's describe() under its limits: the second half of
    /// [`PolicyEngine::load_with`]. A component loaded before under the
    /// same digest and limits is not asked again: the same policy returns.
    pub fn describe(self) -> Result<Arc<LoadedPolicy>, PolicyError> {
        self.engine.inner.loader.describe(self.ready)
    }
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (digest, described) = match &self.ready {
            Ready::Loaded(policy) => (&policy.digest, true),
            Ready::Bound { digest, .. } => (digest, false),
        };
        f.debug_struct("Compiled")
            .field("digest", digest)
            .field("described", &described)
            .finish_non_exhaustive()
    }
}

/// What a compile leaves for describe().
enum Ready {
    /// Loaded before under the same digest and limits.
    Loaded(Arc<LoadedPolicy>),
    /// Linked to the status-policy world; `ticks` is its deadline in epochs.
    Bound {
        pre: Bound,
        digest: String,
        limits: Limits,
        ticks: u64,
    },
}

/// sha256 of a component's bytes, lowercase hex: the one name of a policy
/// that cannot be spoofed.
pub fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl Loader {
    fn load(&self, bytes: &[u8], limits: &Limits) -> Result<Arc<LoadedPolicy>, PolicyError> {
        let ready = self.compile(bytes, limits)?;
        self.describe(ready)
    }

    /// Everything of a load but running the policy: the size, the caches,
    /// the compile, the link to the sandbox and to the status-policy world.
    fn compile(&self, bytes: &[u8], limits: &Limits) -> Result<Ready, PolicyError> {
        if bytes.len() > limits.component_bytes {
            return Err(PolicyError::Load(format!(
                "the component is {} bytes, above its limit of {} (componentBytes)",
                bytes.len(),
                limits.component_bytes
            )));
        }
        let digest = digest(bytes);
        let key = (digest.clone(), limits.clone());
        if let Some(hit) = lock(&self.loaded).get_mut(&key) {
            return Ok(Ready::Loaded(hit.use_now().clone()));
        }
        let pre = self.compiled(bytes, &digest)?;
        let pre = Bound::new(pre).map_err(|e| {
            PolicyError::Load(format!(
                "not a steward:status/status-policy component (0.4.0, 0.3.0, 0.2.0 or 0.1.0): {}",
                wasm_error(&e)
            ))
        })?;
        // One tick more than the deadline needs: the current epoch may be
        // nearly over when an evaluation starts.
        let ticks = limits.deadline.as_nanos().div_ceil(self.tick.as_nanos()) as u64 + 1;
        Ok(Ready::Bound {
            pre,
            digest,
            limits: limits.clone(),
            ticks,
        })
    }

    /// Asks a compiled policy to describe itself, and keeps what it said.
    fn describe(&self, ready: Ready) -> Result<Arc<LoadedPolicy>, PolicyError> {
        let (pre, digest, limits, ticks) = match ready {
            Ready::Loaded(policy) => return Ok(policy),
            Ready::Bound {
                pre,
                digest,
                limits,
                ticks,
            } => (pre, digest, limits, ticks),
        };
        let key = (digest.clone(), limits.clone());
        let policy = Arc::new(LoadedPolicy::new(pre, digest, limits, ticks)?);
        // Once per component and limits: which policy runs is told by its
        // digest, the one name of it that cannot be spoofed.
        tracing::info!(
            policy = %policy.info.name,
            version = %policy.info.version,
            digest = %policy.digest,
            "loaded a status policy"
        );
        lock(&self.loaded).insert(key, Kept::new(policy.clone()));
        Ok(policy)
    }

    /// Drops what no one has used for [`IDLE`] and no one holds: the
    /// versions a hot reload replaced. A policy in the catalog, or the
    /// embedded one, is held and stays; a ConfigMap policy of the
    /// deprecated form is loaded on every reconcile, so it stays used.
    fn forget_unused(&self, idle: Duration) {
        let mut loaded = lock(&self.loaded);
        loaded.retain(|_, kept| Arc::strong_count(&kept.value) > 1 || !kept.idle(idle));
        let live: Vec<String> = loaded.keys().map(|(digest, _)| digest.clone()).collect();
        drop(loaded);
        lock(&self.compiled).retain(|digest, kept| live.contains(digest) || !kept.idle(idle));
    }

    /// The pre-instantiated component of these bytes: from memory, from the
    /// disk cache, or compiled now (and then kept in both).
    fn compiled(&self, bytes: &[u8], digest: &str) -> Result<InstancePre<HostState>, PolicyError> {
        if let Some(hit) = lock(&self.compiled).get_mut(digest) {
            return Ok(hit.use_now().clone());
        }
        if !is_component(bytes) {
            return Err(PolicyError::Load(not_a_component(bytes)));
        }
        let component = match self.read_cached(digest) {
            Some(component) => component,
            None => {
                let component = Component::new(&self.engine, bytes).map_err(|e| {
                    PolicyError::Load(format!("not a valid component: {}", wasm_error(&e)))
                })?;
                self.keep_cached(digest, &component);
                component
            }
        };
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| PolicyError::Load(wasm_error(&e)))?;
        lock(&self.compiled).insert(digest.to_owned(), Kept::new(pre.clone()));
        Ok(pre)
    }

    fn read_cached(&self, digest: &str) -> Option<Component> {
        let path = self.disk.as_ref()?.join(format!("{digest}.cwasm"));
        if !path.is_file() {
            return None;
        }
        // SAFETY: the file is native code this engine compiled and wrote
        // into a directory only this user may write (checked by
        // `private_dir` when the engine started); wasmtime still checks
        // that it was compiled for this engine.
        match unsafe { Component::deserialize_file(&self.engine, &path) } {
            Ok(component) => {
                // Its age is its last use: the disk cache keeps the newest.
                let _ = std::fs::File::open(&path)
                    .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                Some(component)
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %wasm_error(&e), "ignoring a compiled policy in the cache");
                None
            }
        }
    }

    /// Best effort: a cache that cannot be written only costs a compile.
    fn keep_cached(&self, digest: &str, component: &Component) {
        let Some(dir) = &self.disk else { return };
        let write = || -> std::io::Result<()> {
            let bytes = component
                .serialize()
                .map_err(|e| std::io::Error::other(wasm_error(&e)))?;
            let tmp = dir.join(format!(".{digest}.{}.tmp", std::process::id()));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, dir.join(format!("{digest}.cwasm")))?;
            prune_disk(dir, DISK_KEEP)
        };
        if let Err(e) = write() {
            tracing::warn!(dir = %dir.display(), error = %e, "could not keep a compiled policy");
        }
    }
}

/// Compiled policies kept on disk; the least recently used go first. A
/// Python one is ~46 MB: six stay well inside the Deployment's 512Mi
/// emptyDir.
const DISK_KEEP: usize = 6;

/// Creates `dir` for this user alone, and refuses one that another user
/// owns or that others may write: what is in it is loaded as native code.
fn private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("creating it: {e}"))?;
    let meta = std::fs::metadata(dir).map_err(|e| e.to_string())?;
    // /proc/self belongs to the process's effective user.
    let me = std::fs::metadata("/proc/self")
        .map_err(|e| e.to_string())?
        .uid();
    if meta.uid() != me {
        return Err(format!(
            "it belongs to uid {}, not to this process's {me}",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "others may write it (mode {:o}); chmod go-w it",
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

/// Deletes all but the `keep` most recently used compiled policies.
fn prune_disk(dir: &Path, keep: usize) -> std::io::Result<()> {
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    files.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
    for (_, old) in files.into_iter().skip(keep) {
        std::fs::remove_file(old)?;
    }
    Ok(())
}

/// How long a compiled or loaded policy nobody holds is kept for a reload.
const IDLE: Duration = Duration::from_secs(600);

/// A cached value and when it was last asked for.
struct Kept<T> {
    value: T,
    used: std::time::Instant,
}

impl<T> Kept<T> {
    fn new(value: T) -> Self {
        Self {
            value,
            used: std::time::Instant::now(),
        }
    }

    fn use_now(&mut self) -> &T {
        self.used = std::time::Instant::now();
        &self.value
    }

    fn idle(&self, after: Duration) -> bool {
        self.used.elapsed() >= after
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Names the engine's code generation: a compiled component is reusable
/// exactly by an engine with the same fingerprint (wasmtime version, target
/// and every setting that changes code).
fn engine_fingerprint(engine: &Engine) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Bytes of each memory and table slot reset in place rather than madvised
/// away; measured best among 128/192/256/320/512 KiB (docs/benchmarks.md)
/// before PAGEMAP_SCAN was on. With it this is only a cap: pages the last
/// evaluation did not write are not reset at all.
const KEEP_RESIDENT: usize = 256 << 10;

/// Memories and tables one component may have, and the elements of its
/// largest table. Measured: the default policy has 1 memory and 1 table; a
/// Python policy (componentize-py 0.25, `--stub-wasi`) 1 memory and 2
/// tables, the larger of 5,670 elements; a JavaScript one (componentize-js
/// 0.23) 1 memory and 1 table of 7,688 elements. Twice that and more leaves
/// room without reserving address space for nothing.
const MEMORIES_PER_COMPONENT: u32 = 4;
const TABLES_PER_COMPONENT: u32 = 8;
const TABLE_ELEMENTS: usize = 20_000;

fn engine_config(config: &EngineConfig) -> Config {
    let max = &config.maximum;
    let memory = (max.memory_bytes as u64).next_multiple_of(64 << 10);
    let slots = config.concurrent_evaluations.max(1);
    let mut pool = PoolingAllocationConfig::default();
    // Slots for `slots` evaluations at once. Most policies use a handful
    // of instances, memories and tables; the totals leave room for every
    // evaluation to be a large one, which costs address space, not memory.
    pool.total_component_instances(slots)
        .total_core_instances(slots * max.instances)
        .total_memories(slots * MEMORIES_PER_COMPONENT)
        .total_tables(slots * TABLES_PER_COMPONENT)
        .total_stacks(0)
        .max_core_instances_per_component(max.instances)
        .max_memories_per_component(MEMORIES_PER_COMPONENT)
        .max_tables_per_component(TABLES_PER_COMPONENT)
        .table_elements(TABLE_ELEMENTS)
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

    let mut wasm = Config::new();
    wasm.wasm_component_model(true)
        .epoch_interruption(true)
        .max_wasm_stack(config.stack_bytes)
        .cranelift_opt_level(OptLevel::Speed)
        // Reserve only the capped size per memory slot (plus a guard for
        // constant offsets), so the pool costs slots × ~memory of address
        // space rather than slots × 8 GiB.
        .memory_reservation(memory)
        .memory_guard_size(2 << 20)
        .memory_reservation_for_growth(0)
        .memory_init_cow(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    wasm
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A version a reload replaced goes; one the catalog holds stays, and
    /// so does the embedded default.
    #[test]
    fn the_disk_cache_keeps_the_most_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            let path = dir.path().join(format!("{name}.cwasm"));
            std::fs::write(&path, name).unwrap();
            let at = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1000 + i as u64);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(at)
                .unwrap();
        }
        prune_disk(dir.path(), 2).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["b.cwasm", "c.cwasm"]);
    }

    #[test]
    fn a_cache_directory_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("compiled");
        private_dir(&cache).unwrap();
        let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = private_dir(&cache).unwrap_err();
        assert!(why.contains("others may write it (mode 777)"), "{why}");
    }

    #[test]
    fn versions_nothing_holds_are_forgotten_and_held_ones_kept() {
        let engine = PolicyEngine::new(EngineConfig::default()).unwrap();
        let loader = &engine.inner.loader;
        let limits = |ms| Limits {
            deadline: Duration::from_millis(ms),
            ..Limits::default()
        };
        let held = engine
            .load_with(embedded::DEFAULT_POLICY_WASM, &limits(60))
            .unwrap();
        drop(
            engine
                .load_with(embedded::DEFAULT_POLICY_WASM, &limits(70))
                .unwrap(),
        );
        assert_eq!(lock(&loader.loaded).len(), 3);

        loader.forget_unused(Duration::from_secs(3600));
        assert_eq!(lock(&loader.loaded).len(), 3, "used a moment ago");
        loader.forget_unused(Duration::ZERO);
        let kept: Vec<u128> = lock(&loader.loaded)
            .keys()
            .map(|(_, l)| l.deadline.as_millis())
            .collect();
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert!(!kept.contains(&70), "{kept:?}");
        assert!(Arc::ptr_eq(
            &held,
            &engine
                .load_with(embedded::DEFAULT_POLICY_WASM, &limits(60))
                .unwrap()
        ));
        assert_eq!(
            lock(&loader.compiled).len(),
            1,
            "the digest is still in use"
        );
    }
}

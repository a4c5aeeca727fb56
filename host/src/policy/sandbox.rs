//! The world a policy runs in: WASI that grants nothing.
//!
//! Components built with Rust std for wasm32-wasip2 import WASI, so the host
//! must satisfy those imports; it does so with a context in which every
//! capability is absent. No preopened directories (no file can be opened),
//! no environment or arguments, sockets and name lookup denied, stdin empty,
//! clocks frozen at the Unix epoch (a policy's only time is
//! `observation.now`), and random numbers that are the same on every run.
//! Blocking on a pollable (a sleep) is refused outright: the epoch deadline
//! cannot interrupt a host call, so letting a policy sleep would let it
//! outlive its deadline.
//!
//! All per-evaluation host state is the one [`HostState`] held by the Store.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rand::SeedableRng as _;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::clocks::{HostMonotonicClock, HostWallClock};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// How much of a policy's stdout and stderr the host keeps (the rest is
/// dropped, never an error for the policy).
const CAPTURE_BYTES: usize = 4096;

/// The WASI version whose poll functions the sandbox replaces; it is the one
/// wasmtime-wasi implements, and guests importing any 0.2.x resolve to it.
const WASI_IO_POLL: &str = "wasi:io/poll@0.2.12";

/// Everything a Store holds for one evaluation.
pub(super) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) limiter: MemoryCap,
    pub(super) stderr: CapturedOutput,
}

impl HostState {
    pub(super) fn new(limits: &super::Limits) -> Self {
        let stderr = CapturedOutput::default();
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(CapturedOutput::default())
            .stderr(stderr.clone())
            .wall_clock(FrozenClock)
            .monotonic_clock(FrozenClock)
            .secure_random(rand::rngs::StdRng::seed_from_u64(0))
            .insecure_random(rand::rngs::StdRng::seed_from_u64(1))
            .insecure_random_seed(0)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        Self {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: MemoryCap::new(limits),
            stderr,
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The linker every policy is instantiated against: WASI p2 with the
/// blocking calls replaced by refusals.
pub(super) fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    linker.allow_shadowing(true);
    let mut poll = linker.instance(WASI_IO_POLL)?;
    for name in ["poll", "[method]pollable.block"] {
        poll.func_new(name, move |_, _, _, _| {
            wasmtime::bail!(
                "policies may not block (wasi:io/poll {name}); they have no clock to wait on"
            )
        })?;
    }
    linker.allow_shadowing(false);
    Ok(linker)
}

/// StoreLimits, plus a cap on all of an evaluation's linear memories
/// together (StoreLimits caps each alone), remembering whether it refused a
/// growth so a trap that follows (Rust aborts when allocation fails) can be
/// reported as the memory cap it is.
pub(super) struct MemoryCap {
    limits: StoreLimits,
    cap: usize,
    total: usize,
    pub(super) refused: bool,
}

impl MemoryCap {
    fn new(limits: &super::Limits) -> Self {
        Self {
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .instances(limits.instances as usize)
                .tables(256)
                .memories(64)
                .build(),
            cap: limits.memory_bytes,
            total: 0,
            refused: false,
        }
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Instantiation asks too (from 0 to the initial size), so the total
        // covers every memory from the start.
        let grows_by = desired.saturating_sub(current);
        let allowed = self.total.saturating_add(grows_by) <= self.cap
            && self.limits.memory_growing(current, desired, maximum)?;
        if allowed {
            self.total += grows_by;
        }
        self.refused |= !allowed;
        Ok(allowed)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.refused = true;
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// A clock stopped at the Unix epoch.
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }

    fn now(&self) -> u64 {
        0
    }
}

/// An output stream that keeps the first [`CAPTURE_BYTES`] and accepts (and
/// drops) the rest, so a chatty policy neither grows host memory nor fails
/// its writes.
#[derive(Clone, Default)]
pub(super) struct CapturedOutput {
    buffer: Arc<Mutex<Vec<u8>>>,
}

impl CapturedOutput {
    pub(super) fn contents(&self) -> String {
        let buffer = self.buffer.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&buffer).into_owned()
    }

    fn keep(&self, bytes: &[u8]) {
        let mut buffer = self.buffer.lock().unwrap_or_else(|e| e.into_inner());
        let room = CAPTURE_BYTES.saturating_sub(buffer.len());
        buffer.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

impl OutputStream for CapturedOutput {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.keep(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CapturedOutput {
    async fn ready(&mut self) {}
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for CapturedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.keep(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

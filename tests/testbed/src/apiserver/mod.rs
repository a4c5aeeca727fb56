//! A Kubernetes API stand-in: enough of the real REST API (discovery, CRUD,
//! watch, patch, server-side apply, status and scale subresources, CRDs
//! with schema and CEL validation, tables, garbage collection) for kube-rs
//! and the real `kubectl` to work against it unmodified. For tests and the
//! local sandbox only; see docs/apiserver-standin.md for what it is not.

mod discovery;
mod error;
mod faults;
mod http;
mod lifecycle;
mod patch;
mod resources;
mod schema;
mod selector;
mod store;
mod table;
mod watch;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use tokio::sync::oneshot;

pub use error::{ApiError, FieldError, FieldErrorKind};
pub use faults::{FailWith, Faults, Verb};

use http::App;
use lifecycle::WriteOptions;
use resources::ResKey;
use store::Store;

/// Tunables; `Default` is what tests normally want.
#[derive(Debug, Clone)]
pub struct ApiServerOptions {
    /// Events kept per resource for watch resumption; older versions get 410.
    pub event_log_capacity: usize,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
}

impl Default for ApiServerOptions {
    fn default() -> Self {
        Self {
            event_log_capacity: 1000,
            bookmark_interval: Duration::from_secs(2),
        }
    }
}

enum Runner {
    /// The server runs on its own thread and runtime (`start`).
    Thread(Option<std::thread::JoinHandle<()>>),
    /// The server runs as a task on the caller's runtime (`start_in_runtime`).
    Task(tokio::task::JoinHandle<()>),
}

/// A running stand-in. Dropping it stops the server.
pub struct ApiServer {
    url: String,
    kubeconfig: PathBuf,
    app: Arc<App>,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    runner: Runner,
}

impl ApiServer {
    /// Starts the server on its own thread and writes `dir/kubeconfig`.
    /// Works from plain and async code alike; the server keeps serving
    /// while the caller blocks (on `kubectl`, say).
    pub fn start(dir: &Path) -> anyhow::Result<Self> {
        Self::start_with(dir, ApiServerOptions::default())
    }

    pub fn start_with(dir: &Path, options: ApiServerOptions) -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .context("binding 127.0.0.1:0 for the API stand-in")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let app = new_app(&options);
        let (stop_tx, stop_rx) = oneshot::channel();
        let app2 = app.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
        let thread = std::thread::Builder::new()
            .name("apiserver-standin".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.into()));
                        return;
                    }
                };
                rt.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => {
                            let _ = ready_tx.send(Ok(()));
                            serve(l, app2, stop_rx).await;
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.into()));
                        }
                    }
                });
            })
            .context("spawning the API stand-in thread")?;
        ready_rx
            .recv()
            .context("the API stand-in thread died at start")??;
        Self::finish(dir, addr, app, stop_tx, Runner::Thread(Some(thread)))
    }

    /// Starts the server as a task on the current tokio runtime. The test
    /// must then not block that runtime's threads while it needs the server.
    pub async fn start_in_runtime(dir: &Path, options: ApiServerOptions) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding 127.0.0.1:0 for the API stand-in")?;
        let addr = listener.local_addr()?;
        let app = new_app(&options);
        let (stop_tx, stop_rx) = oneshot::channel();
        let task = tokio::spawn(serve(listener, app.clone(), stop_rx));
        Self::finish(dir, addr, app, stop_tx, Runner::Task(task))
    }

    fn finish(
        dir: &Path,
        addr: SocketAddr,
        app: Arc<App>,
        stop: oneshot::Sender<()>,
        runner: Runner,
    ) -> anyhow::Result<Self> {
        let url = format!("http://{addr}");
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_yaml(&url))
            .with_context(|| format!("writing {}", kubeconfig.display()))?;
        tracing::info!(%url, kubeconfig = %kubeconfig.display(), "API stand-in listening");
        Ok(Self {
            url,
            kubeconfig,
            app,
            stop: Mutex::new(Some(stop)),
            runner,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kube client for this server, in namespace `default`.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        Ok(kube::Client::try_from(config)?)
    }

    pub fn faults(&self) -> &Faults {
        &self.app.faults
    }

    /// Forgets all watch history, as an etcd compaction would: a watch from
    /// any earlier resourceVersion then gets 410 Expired.
    pub fn compact(&self) {
        self.app.lock().compact();
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.app.lock().current_rv()
    }

    /// Stops accepting requests, ends every watch, and waits for the server.
    pub async fn shutdown(mut self) {
        self.signal_stop();
        match &mut self.runner {
            Runner::Task(task) => {
                let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
            }
            Runner::Thread(handle) => {
                if let Some(h) = handle.take() {
                    let _ = tokio::task::spawn_blocking(move || h.join()).await;
                }
            }
        }
    }

    fn signal_stop(&self) {
        self.app.faults.drop_watches();
        if let Some(stop) = self.stop.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.signal_stop();
        match &mut self.runner {
            Runner::Task(task) => task.abort(),
            Runner::Thread(handle) => {
                if let Some(h) = handle.take() {
                    let _ = h.join();
                }
            }
        }
    }
}

fn new_app(options: &ApiServerOptions) -> Arc<App> {
    let mut store = Store::new(options.event_log_capacity);
    let ns = store
        .resource(&ResKey::new("", "namespaces"))
        .cloned()
        .expect("namespaces are built in");
    for name in ["default", "kube-system", "kube-public"] {
        store
            .create(
                &ns,
                "v1",
                "",
                json!({"metadata": {"name": name}}),
                &WriteOptions::default(),
            )
            .expect("a fresh store accepts the built-in namespaces");
    }
    Arc::new(App {
        store: Mutex::new(store),
        faults: Arc::new(Faults::default()),
        bookmark_interval: options.bookmark_interval,
    })
}

async fn serve(listener: tokio::net::TcpListener, app: Arc<App>, stop: oneshot::Receiver<()>) {
    let router = axum::Router::new().fallback(http::handle).with_state(app);
    let (stopping_tx, mut stopping_rx) = tokio::sync::watch::channel(false);
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        let _ = stopping_rx.wait_for(|s| *s).await;
    });
    // Graceful shutdown waits for open connections; give them a moment,
    // then stop regardless so Drop never hangs on a lingering client.
    let deadline = async move {
        let _ = stop.await;
        let _ = stopping_tx.send(true);
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    tokio::select! {
        result = server => {
            if let Err(e) = result {
                tracing::warn!(error = %e, "API stand-in stopped with an error");
            }
        }
        () = deadline => {}
    }
}

fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: steward-testbed
  cluster:
    server: {url}
contexts:
- name: steward-testbed
  context:
    cluster: steward-testbed
    user: steward-testbed
    namespace: default
current-context: steward-testbed
users:
- name: steward-testbed
  user:
    token: steward-testbed-no-auth
preferences: {{}}
"
    )
}

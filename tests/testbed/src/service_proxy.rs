//! A userspace Service proxy, as kube-proxy's userspace mode was: for every
//! Service with a ClusterIP it listens on `ClusterIP:port` and forwards each
//! TCP connection to one ready endpoint of that port, round robin, read
//! from the EndpointSlices the controller-manager maintains. It also
//! publishes `<service>.<namespace>.svc` (and `….svc.cluster.local`) for the
//! ClusterIP in the private hosts file, as cluster DNS would.
//!
//! It runs only in the tests' network namespace (`scripts/in-namespace.sh`),
//! whose loopback holds a local route for the Service network
//! (`ETCD_STEWARD_SERVICE_NETWORK`), so a listener can bind any ClusterIP
//! and nothing outside that namespace is reached. A Service without a ready
//! endpoint closes each connection at once (kube-proxy rejects it). UDP
//! ports, `sessionAffinity`, `internalTrafficPolicy` and NodePorts are
//! ignored. Every control plane of a process runs its own proxy on the same
//! Service network: two planes that give out the same ClusterIP (each
//! apiserver gives `kubernetes` 10.96.0.1) cannot both be proxied, and the
//! second's listener is not made (a warning says so). The one test that
//! goes through a Service runs alone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::hosts::HostsBlock;

/// Set by `scripts/in-namespace.sh` to the /16 its network namespace routes
/// to loopback for ClusterIPs.
pub const SERVICE_NETWORK_ENV: &str = "ETCD_STEWARD_SERVICE_NETWORK";

/// A Service port: namespace, Service name, port name ("" when unnamed).
type PortKey = (String, String, String);

/// Ready endpoints per Service port, shared with the listeners.
type Table = Arc<Mutex<HashMap<PortKey, Vec<SocketAddr>>>>;

pub struct ServiceProxy {
    task: JoinHandle<()>,
}

impl Drop for ServiceProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A task aborted when its handle goes, so listeners end with the proxy.
struct Owned(JoinHandle<()>);

impl Drop for Owned {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl ServiceProxy {
    /// Starts the proxy when the Service network is routed here (see the
    /// module docs), and `None` otherwise (the sandbox).
    pub fn start(client: Client, service_cidr: &str) -> anyhow::Result<Option<Self>> {
        match std::env::var(SERVICE_NETWORK_ENV) {
            Ok(routed) if routed == service_cidr => {}
            Ok(routed) => anyhow::bail!(
                "{SERVICE_NETWORK_ENV}={routed}, but the API server allocates ClusterIPs from {service_cidr}"
            ),
            Err(_) => return Ok(None),
        }
        let hosts = HostsBlock::etc_hosts()?;
        let task = tokio::spawn(run(client, hosts));
        Ok(Some(Self { task }))
    }
}

async fn run(client: Client, hosts: HostsBlock) {
    let (services, services_writer) = reflector::store::<Service>();
    let (slices, slices_writer) = reflector::store::<EndpointSlice>();
    let service_events = reflector(
        services_writer,
        watcher(
            Api::<Service>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .map(|_| ());
    let slice_events = reflector(
        slices_writer,
        watcher(
            Api::<EndpointSlice>::all(client),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .map(|_| ());
    let mut events = std::pin::pin!(futures::stream::select(service_events, slice_events));
    let table: Table = Arc::default();
    let mut listeners: HashMap<SocketAddr, (PortKey, Owned)> = HashMap::new();
    let mut published: BTreeSet<String> = BTreeSet::new();
    while events.next().await.is_some() {
        *table.lock().unwrap() = endpoints(&slices);
        let wanted = ports(&services);
        listeners.retain(|addr, (key, _)| wanted.get(addr) == Some(key));
        for (addr, key) in wanted {
            if listeners.contains_key(&addr) {
                continue;
            }
            match TcpListener::bind(addr).await {
                Ok(listener) => {
                    let task = tokio::spawn(serve(listener, key.clone(), table.clone()));
                    listeners.insert(addr, (key, Owned(task)));
                }
                Err(e) => tracing::warn!("service proxy: cannot listen on {addr} for {key:?}: {e}"),
            }
        }
        published = publish(&hosts, &services, published);
    }
}

/// Every TCP port of every Service with a ClusterIP.
fn ports(services: &Store<Service>) -> HashMap<SocketAddr, PortKey> {
    let mut out = HashMap::new();
    for svc in services.state() {
        let Some(ip) = cluster_ip(&svc) else { continue };
        let ns = svc.namespace().unwrap_or_default();
        let spec = svc
            .spec
            .as_ref()
            .expect("a Service with a ClusterIP has a spec");
        for p in spec.ports.iter().flatten() {
            if p.protocol.as_deref().is_none_or(|p| p == "TCP") {
                let key = (
                    ns.clone(),
                    svc.name_any(),
                    p.name.clone().unwrap_or_default(),
                );
                out.insert(SocketAddr::new(ip, p.port as u16), key);
            }
        }
    }
    out
}

fn cluster_ip(svc: &Service) -> Option<IpAddr> {
    svc.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok()
}

/// The ready endpoints of every Service port. An endpoint whose readiness
/// is unknown counts as ready, as the EndpointSlice API says.
fn endpoints(slices: &Store<EndpointSlice>) -> HashMap<PortKey, Vec<SocketAddr>> {
    let mut out: HashMap<PortKey, Vec<SocketAddr>> = HashMap::new();
    for slice in slices.state() {
        let Some(service) = slice.labels().get("kubernetes.io/service-name") else {
            continue;
        };
        let ns = slice.namespace().unwrap_or_default();
        for port in slice.ports.iter().flatten() {
            let Some(number) = port.port else { continue };
            let key = (
                ns.clone(),
                service.clone(),
                port.name.clone().unwrap_or_default(),
            );
            let ready = slice
                .endpoints
                .iter()
                .flatten()
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false));
            for ip in ready.flat_map(|e| e.addresses.iter()) {
                if let Ok(ip) = ip.parse::<IpAddr>() {
                    out.entry(key.clone())
                        .or_default()
                        .push(SocketAddr::new(ip, number as u16));
                }
            }
        }
    }
    for targets in out.values_mut() {
        targets.sort();
        targets.dedup();
    }
    out
}

/// Names every Service with a ClusterIP in the hosts file; returns the keys
/// published, so that a deleted Service's names are removed next time.
fn publish(
    hosts: &HostsBlock,
    services: &Store<Service>,
    before: BTreeSet<String>,
) -> BTreeSet<String> {
    let mut now = BTreeMap::new();
    for svc in services.state() {
        let Some(ip) = cluster_ip(&svc) else { continue };
        let ns = svc.namespace().unwrap_or_default();
        let name = svc.name_any();
        let names = vec![
            format!("{name}.{ns}.svc"),
            format!("{name}.{ns}.svc.cluster.local"),
        ];
        now.insert(format!("service/{ns}/{name}"), (ip, names));
    }
    for gone in before.iter().filter(|k| !now.contains_key(*k)) {
        if let Err(e) = hosts.remove(gone) {
            tracing::warn!("service proxy: removing {gone} from the hosts file: {e:#}");
        }
    }
    for (key, (ip, names)) in &now {
        if let Err(e) = hosts.set(key, *ip, names.clone()) {
            tracing::warn!("service proxy: publishing {key}: {e:#}");
        }
    }
    now.into_keys().collect()
}

async fn serve(listener: TcpListener, key: PortKey, table: Table) {
    let next = AtomicUsize::new(0);
    // The connections end with the listener: aborted when this task is.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let mut inbound = match listener.accept().await {
            Ok((inbound, _)) => inbound,
            Err(e) => {
                // Out of file descriptors, say: wait rather than spin.
                tracing::warn!("service proxy: accepting for {key:?}: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let targets = table.lock().unwrap().get(&key).cloned().unwrap_or_default();
        if targets.is_empty() {
            // Dropped: the client sees the connection closed, as when
            // kube-proxy rejects a Service without endpoints.
            continue;
        }
        let target = targets[next.fetch_add(1, Ordering::Relaxed) % targets.len()];
        connections.spawn(async move {
            if let Ok(mut outbound) = TcpStream::connect(target).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

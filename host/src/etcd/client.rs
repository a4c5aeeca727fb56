//! [`EtcdApi`] over etcd-client: one lazily connected channel per endpoint,
//! dialled afresh when the endpoint's name resolves differently or after a
//! timeout.
//!
//! Not etcd-client's balanced multi-endpoint client: behind a balancer a
//! dead endpoint is silently dropped and requests wait for a healthy one,
//! so a refused connection would surface as a timeout, and which member
//! answered would be lost. Here each endpoint has its own channel, an
//! endpoint's failure is reported as that endpoint's, and a hung endpoint
//! cannot delay calls to the others.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use std::fmt;

use async_trait::async_trait;
use etcd_client::{Client, ConnectOptions, GetOptions, MemberAddOptions};
use futures::StreamExt;
use secrecy::{ExposeSecret, SecretString};
use steward_policy_sdk::{AlarmKind, EtcdMember, ProbeErrorKind};
use tonic::transport::Endpoint;

use super::api::{AddedMember, EtcdApi, KvHash, Rpc, RpcError, SnapshotStream, StatusInfo};
use super::classify::{classify, redact};

/// The probe deadline the operator uses unless configured otherwise.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(2);

/// The key the quorum read asks for. Its value is irrelevant: a
/// linearizable count-only Range is answered only after a raft read index
/// round-trip with a quorum, and costs the server nothing else.
const QUORUM_READ_KEY: &[u8] = b"/etcd-steward/quorum-probe";

#[derive(Clone)]
pub struct ClientConfig {
    /// Upper bound for every RPC, from name resolution to the last byte.
    pub deadline: Duration,
    /// TLS for `https://` endpoints. With `None`, https endpoints are still
    /// dialled, but no root is trusted, so every server certificate is
    /// rejected and reported as a TLS fault.
    pub tls: Option<etcd_client::TlsOptions>,
    /// The etcd user every RPC authenticates as, once the cluster has
    /// authentication on. While it is off, the client works without.
    pub credentials: Option<Credentials>,
}

/// Not derived: tonic's TLS configuration prints its private key.
impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("deadline", &self.deadline)
            .field("tls", &self.tls.as_ref().map(|_| "<configured>"))
            .field("credentials", &self.credentials)
            .finish()
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            deadline: DEFAULT_DEADLINE,
            tls: None,
            credentials: None,
        }
    }
}

/// An etcd user and its password. The password never appears in `Debug`
/// output, and no etcd error quotes it back.
#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    pub password: SecretString,
}

impl Credentials {
    /// The same user and password. Compares the secret in memory only.
    pub fn same_as(&self, other: &Credentials) -> bool {
        self.user == other.user && self.password.expose_secret() == other.password.expose_secret()
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// etcd's answer to Authenticate while authentication is off.
const AUTH_NOT_ENABLED: &str = "authentication is not enabled";

/// etcd's answers to a request sent without a token, or with one issued
/// before the auth store changed (a password, a role), while authentication
/// is on. Both are cured by authenticating afresh, which is not the same as
/// credentials that are wrong.
const NEEDS_TOKEN: [&str; 2] = [
    "etcdserver: user name is empty",
    "etcdserver: revision of auth store is old",
];

/// etcd's answer to a user without the permission the request needs.
const PERMISSION_DENIED: &str = "etcdserver: permission denied";

pub struct EtcdClient {
    config: ClientConfig,
    clients: Mutex<HashMap<String, Cached>>,
    /// Credentials per cluster, by the DNS domain its members' names end
    /// in ([`EtcdApi::set_credentials`]); `config.credentials` elsewhere.
    scoped: Mutex<HashMap<String, Credentials>>,
    /// TLS per cluster, by domain ([`EtcdApi::set_tls`]); `config.tls`
    /// elsewhere.
    scoped_tls: Mutex<HashMap<String, crate::tls::ClusterTls>>,
    /// Per domain, how often its credentials or TLS changed.
    epochs: Mutex<HashMap<String, u64>>,
}

struct Cached {
    /// What the endpoint's host resolved to when the client was made.
    addrs: Vec<SocketAddr>,
    client: Client,
    /// Whether it authenticated: the endpoint's auth state as last seen.
    authenticated: bool,
    /// The epoch of the endpoint's cluster when the dial began: a client
    /// dialled with credentials or TLS replaced meanwhile is not reused.
    epoch: u64,
    /// When it was made: an https client older than [`TLS_HANDSHAKE_MAX_AGE`]
    /// is made again.
    dialled: Instant,
}

/// How long an https connection is trusted to show what a member serves.
/// A member picks up a renewed (or broken) certificate from its files at
/// its next handshake, which an established connection never makes, so
/// without a fresh handshake the operator would report a certificate that
/// new clients no longer see. One handshake per member per period.
/// Not for a client that authenticated (etcd auth on): a new one would
/// start without a token and authenticate again, a raft proposal, every
/// period; those are made again only when the Secrets, the credentials or
/// the member's address change (docs/api.md, "TLS").
pub const TLS_HANDSHAKE_MAX_AGE: Duration = Duration::from_secs(30);

impl EtcdClient {
    pub fn new(config: ClientConfig) -> Self {
        Self {
            config,
            clients: Mutex::new(HashMap::new()),
            scoped: Mutex::new(HashMap::new()),
            scoped_tls: Mutex::new(HashMap::new()),
            epochs: Mutex::new(HashMap::new()),
        }
    }

    fn epoch(&self, endpoint: &str) -> u64 {
        let epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
        domain_of(endpoint)
            .and_then(|d| epochs.get(d).copied())
            .unwrap_or(0)
    }

    /// Sets `domain`'s entry of a per-cluster map (credentials, TLS); a
    /// change, and only a change, ends the cluster's connections.
    fn replace_scoped<T>(
        &self,
        map: &Mutex<HashMap<String, T>>,
        domain: &str,
        value: Option<T>,
        same: impl Fn(&T, &T) -> bool,
    ) {
        let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
        let unchanged = match (map.get(domain), &value) {
            (None, None) => true,
            (Some(a), Some(b)) => same(a, b),
            _ => false,
        };
        if unchanged {
            return;
        }
        match value {
            Some(v) => map.insert(domain.to_owned(), v),
            None => map.remove(domain),
        };
        drop(map);
        self.changed(domain);
    }

    /// The cluster's credentials or TLS changed: its cached clients go,
    /// and one being dialled with the old ones is not kept.
    fn changed(&self, domain: &str) {
        *self
            .epochs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(domain.to_owned())
            .or_default() += 1;
        self.lock()
            .retain(|endpoint, _| domain_of(endpoint) != Some(domain));
    }

    /// The credentials for `endpoint`: its cluster's, else the default.
    fn credentials_for(&self, endpoint: &str) -> Option<Credentials> {
        let scoped = self.scoped.lock().unwrap_or_else(|p| p.into_inner());
        domain_of(endpoint)
            .and_then(|d| scoped.get(d).cloned())
            .or_else(|| self.config.credentials.clone())
    }

    /// The cached client for `endpoint`, created on first use and replaced
    /// when the endpoint's name resolves to other addresses.
    ///
    /// The name is resolved on every call, although the channel would only
    /// resolve it when it reconnects: an established HTTP/2 connection
    /// outlives its DNS record, so a member whose name stopped resolving, or
    /// now resolves to a new Pod's IP, would otherwise keep answering (or
    /// hanging) on a connection that no new client could open. Creating a
    /// client does no I/O (the channel connects lazily), so the lock is never
    /// held across a network wait.
    ///
    /// A new client sends no token: etcd answers Authenticate only after a
    /// quorum read, so a client that authenticated first could not even
    /// ask a member for its Status without quorum. It authenticates once an
    /// answer shows that auth is on ([`EtcdClient::reconnect`]).
    async fn client(&self, rpc: Rpc, endpoint: &str) -> Result<Client, RpcError> {
        // Read before the configuration the endpoint is built from.
        let epoch = self.epoch(endpoint);
        let ep = self.endpoint(endpoint).map_err(|message| {
            RpcError::new(rpc, redact(endpoint), ProbeErrorKind::Other, message)
        })?;
        let addrs = resolve(ep.uri()).await.map_err(|message| {
            RpcError::new(rpc, redact(endpoint), ProbeErrorKind::Dns, message)
        })?;
        if let Some(cached) = self.lock().get(endpoint)
            && cached.addrs == addrs
            && cached.epoch == epoch
            && !(endpoint.starts_with("https://")
                && !cached.authenticated
                && cached.dialled.elapsed() > TLS_HANDSHAKE_MAX_AGE)
        {
            return Ok(cached.client.clone());
        }
        self.dial(rpc, endpoint, &ep, addrs, false, epoch).await
    }

    /// Replaces the endpoint's client by one that authenticates, or not.
    async fn reconnect(
        &self,
        rpc: Rpc,
        endpoint: &str,
        authenticate: bool,
    ) -> Result<Client, RpcError> {
        let epoch = self.epoch(endpoint);
        let ep = self.endpoint(endpoint).map_err(|message| {
            RpcError::new(rpc, redact(endpoint), ProbeErrorKind::Other, message)
        })?;
        let addrs = resolve(ep.uri()).await.map_err(|message| {
            RpcError::new(rpc, redact(endpoint), ProbeErrorKind::Dns, message)
        })?;
        self.dial(rpc, endpoint, &ep, addrs, authenticate, epoch)
            .await
    }

    async fn dial(
        &self,
        rpc: Rpc,
        endpoint: &str,
        ep: &Endpoint,
        addrs: Vec<SocketAddr>,
        authenticate: bool,
        epoch: u64,
    ) -> Result<Client, RpcError> {
        let (client, authenticated) = self
            .connect(endpoint, ep, self.config.deadline, authenticate)
            .await
            .map_err(|e| rpc_error(rpc, endpoint, &e))?;
        self.lock().insert(
            endpoint.to_owned(),
            Cached {
                addrs,
                client: client.clone(),
                authenticated,
                epoch,
                dialled: Instant::now(),
            },
        );
        Ok(client)
    }

    /// A client of its own for a call longer than the per-RPC deadline,
    /// authenticated if the endpoint's cached client is. When auth was
    /// switched since, the call fails with an auth fault and its caller's
    /// next attempt finds the state the probes have seen meanwhile. With
    /// credentials and nothing cached yet (a process of its own, as the
    /// save Pod's), a Status call learns the auth state first.
    async fn own_client(
        &self,
        rpc: Rpc,
        endpoint: &str,
        ep: &Endpoint,
        timeout: Duration,
    ) -> Result<Client, RpcError> {
        let known = self.lock().get(endpoint).map(|c| c.authenticated);
        let authenticate = match known {
            Some(authenticated) => authenticated,
            None if self.credentials_for(endpoint).is_some() => {
                self.call(
                    Rpc::Status,
                    endpoint,
                    |mut c| async move { c.status().await },
                )
                .await
                .map_err(|e| RpcError { rpc, ..e })?;
                self.lock().get(endpoint).is_some_and(|c| c.authenticated)
            }
            None => false,
        };
        self.connect(endpoint, ep, timeout, authenticate)
            .await
            .map(|(client, _)| client)
            .map_err(|e| rpc_error(rpc, endpoint, &e))
    }

    /// A client on `ep`, and whether it authenticated: only when asked,
    /// credentials are configured, and the cluster has auth on. etcd-client
    /// then refreshes an expired token by itself and resends the request
    /// once.
    async fn connect(
        &self,
        endpoint: &str,
        ep: &Endpoint,
        timeout: Duration,
        authenticate: bool,
    ) -> Result<(Client, bool), etcd_client::Error> {
        let plain = ConnectOptions::new().with_timeout(timeout);
        let channel = || etcd_client::Channel::Tonic(ep.connect_lazy());
        let creds = match self.credentials_for(endpoint) {
            Some(creds) if authenticate => creds,
            _ => return Ok((Client::from_channel(channel(), Some(plain)).await?, false)),
        };
        let with_user = plain
            .clone()
            .with_user(creds.user.clone(), creds.password.expose_secret())
            .with_auto_token_refresh(true);
        match Client::from_channel(channel(), Some(with_user)).await {
            // Auth was turned off meanwhile: requests go without a token.
            Err(e) if e.to_string().contains(AUTH_NOT_ENABLED) => {
                Ok((Client::from_channel(channel(), Some(plain)).await?, false))
            }
            result => Ok((result?, true)),
        }
    }

    /// Drops the cached channel, so the next call dials afresh. Called after
    /// a timeout: a connection whose peer vanished without a reset (a deleted
    /// Pod's IP) would otherwise hang every call until TCP gives up.
    fn forget(&self, endpoint: &str) {
        self.lock().remove(endpoint);
    }

    fn endpoint(&self, endpoint: &str) -> Result<Endpoint, String> {
        let url = if endpoint.contains("://") {
            endpoint.to_owned()
        } else {
            format!("http://{endpoint}")
        };
        let mut ep = Endpoint::from_shared(url.clone())
            .map_err(|e| format!("invalid endpoint URL {:?}: {e}", redact(&url)))?
            .connect_timeout(self.config.deadline)
            .timeout(self.config.deadline)
            .tcp_nodelay(true);
        if url.starts_with("https://") {
            let scoped = self
                .scoped_tls
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(domain_of(endpoint).unwrap_or_default())
                .map(|t| t.options().clone());
            let tls = scoped
                .or_else(|| self.config.tls.clone())
                .unwrap_or_default();
            ep = ep
                .tls_config(tls)
                .map_err(|e| format!("TLS configuration for {}: {e}", redact(&url)))?;
        }
        Ok(ep)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        // A panic elsewhere while holding the lock leaves the map intact.
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one RPC against one endpoint under the deadline. The client's
    /// own timeout covers the request; this one also covers connecting and
    /// name resolution, whichever layer stalls.
    async fn call<T, F, Fut>(&self, rpc: Rpc, endpoint: &str, f: F) -> Result<T, RpcError>
    where
        F: Fn(Client) -> Fut + Send + Sync,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send,
    {
        let deadline = self.config.deadline;
        let attempt = async {
            let client = self.client(rpc, endpoint).await?;
            match f(client).await {
                Ok(v) => Ok(v),
                Err(e) => match self.auth_switch(endpoint, &e) {
                    // etcd refused the request before applying it, for a
                    // token it lacked or no longer takes, so it may be sent
                    // again, once, on a client that fits the auth state.
                    Some(authenticate) => {
                        let client = self.reconnect(rpc, endpoint, authenticate).await?;
                        f(client).await.map_err(|e| rpc_error(rpc, endpoint, &e))
                    }
                    None => Err(self.without_credentials(rpc_error(rpc, endpoint, &e))),
                },
            }
        };
        let result = match tokio::time::timeout(deadline, attempt).await {
            Ok(result) => result,
            Err(_) => Err(RpcError::new(
                rpc,
                redact(endpoint),
                ProbeErrorKind::Timeout,
                format!("no answer within {deadline:?}"),
            )),
        };
        // A failed handshake is dialled afresh too: the other side may
        // have a new certificate by the next call.
        if matches!(&result, Err(e) if matches!(e.kind, ProbeErrorKind::Timeout | ProbeErrorKind::Tls))
        {
            self.forget(endpoint);
        }
        result
    }

    /// A membership change, tried on each endpoint in turn while the failure
    /// shows the request never reached a server.
    async fn mutate<T, F, Fut>(&self, rpc: Rpc, endpoints: &[String], f: F) -> Result<T, RpcError>
    where
        F: Fn(Client) -> Fut + Send + Sync,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send,
    {
        let mut failures = Vec::new();
        for endpoint in endpoints {
            match self.call(rpc, endpoint, &f).await {
                Ok(v) => return Ok(v),
                Err(e) if never_reached_server(e.kind) => failures.push(e),
                Err(e) => return Err(with_earlier(e, &failures)),
            }
        }
        match failures.pop() {
            Some(last) => Err(with_earlier(last, &failures)),
            None => Err(RpcError::new(
                rpc,
                "",
                ProbeErrorKind::Other,
                "no endpoint to send the request to",
            )),
        }
    }
}

/// The addresses `uri`'s host stands for, sorted. An IP literal needs no
/// lookup. Every failure here is a name-resolution failure.
async fn resolve(uri: &tonic::transport::Uri) -> Result<Vec<SocketAddr>, String> {
    let host = uri.host().unwrap_or_default();
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("dns error: failed to lookup address {host}: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("dns error: {host} has no address"));
    }
    addrs.sort();
    addrs.dedup();
    Ok(addrs)
}

impl EtcdClient {
    /// Whether `err` says the cluster's auth state is not the one the
    /// client assumed: `Some(true)` to authenticate (afresh), `Some(false)`
    /// to go without a token. Never without credentials to authenticate.
    fn auth_switch(&self, endpoint: &str, err: &etcd_client::Error) -> Option<bool> {
        self.credentials_for(endpoint)?;
        let text = err.to_string();
        // Over TLS with a client certificate, etcd takes a request without
        // a token as from the user the certificate names (its CN), which
        // usually may do nothing: refused, it is sent again with a token.
        let as_certificate = text.contains(PERMISSION_DENIED)
            && self.lock().get(endpoint).is_some_and(|c| !c.authenticated);
        if NEEDS_TOKEN.iter().any(|m| text.contains(m)) || as_certificate {
            Some(true)
        } else if text.contains(AUTH_NOT_ENABLED) {
            Some(false)
        } else {
            None
        }
    }
}

impl EtcdClient {
    /// Says what a token refusal means when the client has no credentials
    /// to get one: etcd's own words ("user name is empty") name no cause.
    fn without_credentials(&self, mut err: RpcError) -> RpcError {
        if NEEDS_TOKEN.iter().any(|m| err.message.contains(m)) {
            err.message = format!(
                "etcd has authentication on and the operator has no credentials for it (spec.auth): {}",
                err.message
            );
        }
        err
    }
}

/// The domain of an endpoint's host below its first label:
/// `cluster.ns.svc` for `http://member.cluster.ns.svc:2379`.
fn domain_of(endpoint: &str) -> Option<&str> {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let host = rest.split(['/', ':']).next()?;
    if host.parse::<IpAddr>().is_ok() {
        return None;
    }
    host.split_once('.').map(|(_, domain)| domain)
}

/// Whether an add created the user or role: etcd refuses one that exists.
fn created<T>(added: Result<T, RpcError>) -> Result<bool, RpcError> {
    match added {
        Ok(_) => Ok(true),
        Err(e) if e.message.contains("already exists") => Ok(false),
        Err(e) => Err(e),
    }
}

fn never_reached_server(kind: ProbeErrorKind) -> bool {
    matches!(
        kind,
        ProbeErrorKind::Refused | ProbeErrorKind::Dns | ProbeErrorKind::Tls
    )
}

fn with_earlier(mut last: RpcError, earlier: &[RpcError]) -> RpcError {
    if !earlier.is_empty() {
        let tried: Vec<String> = earlier.iter().map(|e| e.to_string()).collect();
        last.message = format!("{} (earlier: {})", last.message, tried.join("; "));
    }
    last
}

fn rpc_error(rpc: Rpc, endpoint: &str, err: &etcd_client::Error) -> RpcError {
    let (kind, message) = classify(err);
    let (kind, message) = refine_for_tls(endpoint, err, kind, message);
    RpcError::new(rpc, redact(endpoint), kind, message)
}

/// A plaintext etcd answers a TLS ClientHello with an HTTP/1 400 and closes
/// while the hello is still unread, so the kernel may send a reset that
/// overtakes the 400. Which one the client sees first is a race; both mean
/// the handshake never completed. A reset on an https endpoint before any
/// gRPC status came back is therefore a TLS fault, said as such.
fn refine_for_tls(
    endpoint: &str,
    err: &etcd_client::Error,
    kind: ProbeErrorKind,
    message: String,
) -> (ProbeErrorKind, String) {
    // tonic says "transport error" for a failure of the connection itself,
    // as opposed to a status the server sent.
    let text = message.to_ascii_lowercase();
    let before_any_answer =
        matches!(err, etcd_client::Error::TransportError(_)) || text.contains("transport error");
    let reset = text.contains("connection reset");
    if kind == ProbeErrorKind::Other
        && endpoint.starts_with("https://")
        && before_any_answer
        && reset
    {
        let message =
            format!("TLS handshake did not complete (is the member serving TLS?): {message}");
        return (ProbeErrorKind::Tls, message);
    }
    (kind, message)
}

fn members(list: &[etcd_client::Member]) -> Vec<EtcdMember> {
    list.iter()
        .map(|m| EtcdMember {
            id: m.id(),
            name: m.name().to_owned(),
            peer_urls: m.peer_urls().to_vec(),
            client_urls: m.client_urls().to_vec(),
            is_learner: m.is_learner(),
        })
        .collect()
}

/// Alarms raised against `member_id`, from Status' error strings.
///
/// etcd (3.5) appends every alarm in the cluster to `errors` in protobuf
/// text form, `memberID:<id> alarm:NOSPACE`, so the member id tells whose
/// alarm it is. A string without a member id is taken as the member's own.
/// Reading them here costs no extra RPC, unlike AlarmList.
pub fn alarms_for(member_id: u64, errors: &[String]) -> Vec<AlarmKind> {
    let mut out = Vec::new();
    for e in errors {
        let owner = e
            .split_whitespace()
            .find_map(|t| t.strip_prefix("memberID:"))
            .and_then(|id| id.parse::<u64>().ok());
        if owner.is_some_and(|id| id != member_id) {
            continue;
        }
        let kind = if e.contains("NOSPACE") {
            AlarmKind::Nospace
        } else if e.contains("CORRUPT") {
            AlarmKind::Corrupt
        } else {
            continue;
        };
        if !out.contains(&kind) {
            out.push(kind);
        }
    }
    out
}

#[async_trait]
impl EtcdApi for EtcdClient {
    fn deadline(&self) -> Duration {
        self.config.deadline
    }

    fn set_credentials(&self, domain: &str, credentials: Option<Credentials>) {
        self.replace_scoped(&self.scoped, domain, credentials, Credentials::same_as);
    }

    fn authenticated(&self, endpoint: &str) -> Option<bool> {
        self.lock().get(endpoint).map(|c| c.authenticated)
    }

    fn set_tls(&self, domain: &str, tls: Option<crate::tls::ClusterTls>) {
        self.replace_scoped(&self.scoped_tls, domain, tls, |a, b| {
            a.fingerprint == b.fingerprint
        });
    }

    async fn status(&self, endpoint: &str) -> Result<StatusInfo, RpcError> {
        let resp = self
            .call(
                Rpc::Status,
                endpoint,
                |mut c| async move { c.status().await },
            )
            .await?;
        let header = resp.header();
        let member_id = header.map_or(0, |h| h.member_id());
        let errors = resp.errors().to_vec();
        Ok(StatusInfo {
            cluster_id: header.map_or(0, |h| h.cluster_id()),
            member_id,
            leader_id: resp.leader(),
            raft_term: resp.raft_term(),
            raft_index: resp.raft_index(),
            raft_applied_index: resp.raft_applied_index(),
            revision: header.map_or(0, |h| h.revision()),
            db_size: resp.db_size().max(0) as u64,
            db_size_in_use: resp.raft_used_db_size().max(0) as u64,
            version: resp.version().to_owned(),
            is_learner: resp.is_learner(),
            alarms: alarms_for(member_id, &errors),
            errors,
        })
    }

    async fn member_list(&self, endpoint: &str) -> Result<Vec<EtcdMember>, RpcError> {
        let resp = self
            .call(Rpc::MemberList, endpoint, |mut c| async move {
                c.member_list().await
            })
            .await?;
        Ok(members(resp.members()))
    }

    async fn hash_kv(
        &self,
        endpoint: &str,
        revision: i64,
        deadline: Duration,
    ) -> Result<KvHash, RpcError> {
        // A client of its own, as for defragment: hashing a large keyspace
        // takes longer than the per-RPC deadline.
        let rpc = Rpc::HashKv;
        let ep = self
            .endpoint(endpoint)
            .map_err(|m| RpcError::new(rpc, redact(endpoint), ProbeErrorKind::Other, m))?
            .timeout(deadline);
        let attempt = async {
            let mut client = self.own_client(rpc, endpoint, &ep, deadline).await?;
            client
                .hash_kv(revision)
                .await
                .map_err(|e| rpc_error(rpc, endpoint, &e))
        };
        let resp = match tokio::time::timeout(deadline, attempt).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(RpcError::new(
                    rpc,
                    redact(endpoint),
                    ProbeErrorKind::Timeout,
                    format!("no answer within {deadline:?}"),
                ));
            }
        };
        Ok(KvHash {
            // 0 asks for the member's current revision, which the header has.
            revision: if revision > 0 {
                revision
            } else {
                resp.header().map_or(0, |h| h.revision())
            },
            hash: resp.hash(),
            compact_revision: resp.compact_version(),
        })
    }

    async fn quorum_read(&self, endpoint: &str) -> Result<(), RpcError> {
        self.call(Rpc::QuorumRead, endpoint, |mut c| async move {
            c.get(QUORUM_READ_KEY, Some(GetOptions::new().with_count_only()))
                .await
        })
        .await
        .map(drop)
    }

    async fn member_add_as_learner(
        &self,
        endpoints: &[String],
        peer_urls: &[String],
    ) -> Result<AddedMember, RpcError> {
        let rpc = Rpc::MemberAddAsLearner;
        let resp = self
            .mutate(rpc, endpoints, |mut c| {
                let urls = peer_urls.to_vec();
                async move {
                    c.member_add(urls, Some(MemberAddOptions::new().with_is_learner()))
                        .await
                }
            })
            .await?;
        let Some(added) = resp.member() else {
            return Err(RpcError::new(
                rpc,
                endpoints.first().map_or("", String::as_str),
                ProbeErrorKind::Other,
                "etcd accepted MemberAdd but returned no member",
            ));
        };
        Ok(AddedMember {
            id: added.id(),
            members: members(resp.member_list()),
        })
    }

    async fn member_promote(
        &self,
        endpoints: &[String],
        id: u64,
    ) -> Result<Vec<EtcdMember>, RpcError> {
        let resp = self
            .mutate(Rpc::MemberPromote, endpoints, |mut c| async move {
                c.member_promote(id).await
            })
            .await?;
        Ok(members(resp.members()))
    }

    async fn member_remove(
        &self,
        endpoints: &[String],
        id: u64,
    ) -> Result<Vec<EtcdMember>, RpcError> {
        let resp = self
            .mutate(Rpc::MemberRemove, endpoints, |mut c| async move {
                c.member_remove(id).await
            })
            .await?;
        Ok(members(resp.members()))
    }

    async fn defragment(&self, endpoint: &str, deadline: Duration) -> Result<(), RpcError> {
        // A client of its own: the cached ones give up after the per-RPC
        // deadline, and a defragmentation of a large database takes longer.
        let rpc = Rpc::Defragment;
        let ep = self
            .endpoint(endpoint)
            .map_err(|m| RpcError::new(rpc, redact(endpoint), ProbeErrorKind::Other, m))?
            .timeout(deadline);
        let attempt = async {
            let mut client = self.own_client(rpc, endpoint, &ep, deadline).await?;
            client
                .defragment()
                .await
                .map(drop)
                .map_err(|e| rpc_error(rpc, endpoint, &e))
        };
        match tokio::time::timeout(deadline, attempt).await {
            Ok(result) => result,
            Err(_) => Err(RpcError::new(
                rpc,
                redact(endpoint),
                ProbeErrorKind::Timeout,
                format!("no answer within {deadline:?}; the member may still be defragmenting"),
            )),
        }
    }

    async fn snapshot(&self, endpoint: &str) -> Result<SnapshotStream, RpcError> {
        // A channel of its own without the per-RPC request timeout, which
        // would cut off a large snapshot; each message is bounded instead.
        let rpc = Rpc::Snapshot;
        let deadline = self.config.deadline;
        let ep = self
            .endpoint(endpoint)
            .map_err(|m| RpcError::new(rpc, redact(endpoint), ProbeErrorKind::Other, m))?
            .timeout(Duration::from_secs(24 * 3600));
        let shown = redact(endpoint);
        let stalled = move |what: &str| {
            RpcError::new(
                rpc,
                shown.clone(),
                ProbeErrorKind::Timeout,
                format!("no {what} within {deadline:?}"),
            )
        };
        let open = async {
            let mut client = self.own_client(rpc, endpoint, &ep, deadline).await?;
            // etcd's snapshot messages carry no header: the revision is
            // this member's own (a serializable read), just before the
            // stream opens.
            let revision = client
                .get(
                    "\0",
                    Some(GetOptions::new().with_serializable().with_count_only()),
                )
                .await
                .map_err(|e| rpc_error(rpc, endpoint, &e))?
                .header()
                .map_or(0, |h| h.revision());
            let mut stream = client
                .snapshot()
                .await
                .map_err(|e| rpc_error(rpc, endpoint, &e))?;
            let first = stream
                .message()
                .await
                .map_err(|e| rpc_error(rpc, endpoint, &e))?;
            Ok::<_, RpcError>((revision, stream, first))
        };
        let (revision, stream, first) = tokio::time::timeout(deadline, open)
            .await
            .map_err(|_| stalled("first snapshot message"))??;
        let Some(first) = first else {
            return Err(RpcError::new(
                rpc,
                redact(endpoint),
                ProbeErrorKind::Other,
                "the member ended the snapshot stream before sending anything",
            ));
        };
        let head = bytes::Bytes::copy_from_slice(first.blob());
        let endpoint = endpoint.to_owned();
        let rest = futures::stream::try_unfold(stream, move |mut stream| {
            let endpoint = endpoint.clone();
            let stalled = stalled.clone();
            async move {
                match tokio::time::timeout(deadline, stream.message()).await {
                    Err(_) => Err(stalled("snapshot message")),
                    Ok(Err(e)) => Err(rpc_error(rpc, &endpoint, &e)),
                    Ok(Ok(None)) => Ok(None),
                    Ok(Ok(Some(m))) => Ok(Some((bytes::Bytes::copy_from_slice(m.blob()), stream))),
                }
            }
        });
        Ok(SnapshotStream {
            revision,
            chunks: futures::stream::once(async move { Ok(head) })
                .chain(rest)
                .boxed(),
        })
    }

    async fn disarm_no_space(&self, endpoint: &str, member: u64) -> Result<(), RpcError> {
        self.call(Rpc::AlarmDisarm, endpoint, |mut c| async move {
            let mut options = etcd_client::AlarmOptions::new();
            options.with_member(member);
            c.alarm(
                etcd_client::AlarmAction::Deactivate,
                etcd_client::AlarmType::Nospace,
                Some(options),
            )
            .await
        })
        .await
        .map(drop)
    }

    async fn move_leader(&self, leader_endpoint: &str, target: u64) -> Result<(), RpcError> {
        // One endpoint: only the leader can hand over, so no other is tried.
        self.call(Rpc::MoveLeader, leader_endpoint, |mut c| async move {
            c.move_leader(target).await
        })
        .await
        .map(drop)
    }

    async fn user_add(
        &self,
        endpoints: &[String],
        name: &str,
        password: &SecretString,
    ) -> Result<bool, RpcError> {
        let added = self
            .mutate(Rpc::UserAdd, endpoints, |mut c| async move {
                c.user_add(name, password.expose_secret(), None).await
            })
            .await;
        created(added)
    }

    async fn user_change_password(
        &self,
        endpoints: &[String],
        name: &str,
        password: &SecretString,
    ) -> Result<(), RpcError> {
        self.mutate(Rpc::UserChangePassword, endpoints, |mut c| async move {
            c.user_change_password(name, password.expose_secret()).await
        })
        .await
        .map(drop)
    }

    async fn role_add(&self, endpoints: &[String], name: &str) -> Result<bool, RpcError> {
        let added = self
            .mutate(Rpc::RoleAdd, endpoints, |mut c| async move {
                c.role_add(name).await
            })
            .await;
        created(added)
    }

    async fn user_grant_role(
        &self,
        endpoints: &[String],
        user: &str,
        role: &str,
    ) -> Result<(), RpcError> {
        self.mutate(Rpc::UserGrantRole, endpoints, |mut c| async move {
            c.user_grant_role(user, role).await
        })
        .await
        .map(drop)
    }

    async fn auth_enable(&self, endpoints: &[String]) -> Result<(), RpcError> {
        self.mutate(Rpc::AuthEnable, endpoints, |mut c| async move {
            c.auth_enable().await
        })
        .await
        .map(drop)
    }

    async fn auth_disable(&self, endpoints: &[String]) -> Result<(), RpcError> {
        self.mutate(Rpc::AuthDisable, endpoints, |mut c| async move {
            c.auth_disable().await
        })
        .await
        .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoints_domain_is_its_host_below_the_first_label() {
        assert_eq!(
            domain_of("http://m-0.alpha.prod.svc:2379"),
            Some("alpha.prod.svc")
        );
        assert_eq!(
            domain_of("https://m-0.alpha.prod.svc"),
            Some("alpha.prod.svc")
        );
        assert_eq!(domain_of("m-0.alpha.prod.svc:2379"), Some("alpha.prod.svc"));
        assert_eq!(domain_of("http://10.244.0.7:2379"), None);
        assert_eq!(domain_of("http://localhost:2379"), None);
    }

    #[test]
    fn alarms_are_attributed_to_their_member() {
        let errors = vec![
            "etcdserver: no leader".to_owned(),
            "memberID:7 alarm:NOSPACE ".to_owned(),
            "memberID:9 alarm:CORRUPT ".to_owned(),
        ];
        assert_eq!(alarms_for(7, &errors), vec![AlarmKind::Nospace]);
        assert_eq!(alarms_for(9, &errors), vec![AlarmKind::Corrupt]);
        assert_eq!(alarms_for(8, &errors), vec![]);
    }
}

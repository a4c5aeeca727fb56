//! Fault injection for every etcd RPC: [`FaultyEtcd`] wraps any [`EtcdApi`]
//! and consults a shared [`Faults`] handle before each call.
//!
//! Tests keep the `Faults` handle and give the wrapper to the code under
//! test, then make a chosen RPC fail (optionally at one endpoint) for the
//! next N calls or until cleared, or hang until the deadline like a frozen
//! member. A hook can run after an RPC succeeds: the end-to-end suite uses
//! it to kill the operator between MemberAdd and creating the member.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use secrecy::SecretString;
use steward_policy_sdk::{EtcdMember, ProbeErrorKind};

use super::api::{AddedMember, EtcdApi, KvHash, Rpc, RpcError, SnapshotStream, StatusInfo};
use super::client::Credentials;

/// How an injected fault fails the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Fail at once with this kind.
    Error(ProbeErrorKind),
    /// Answer nothing until the client's deadline passes, then fail with a
    /// timeout, as a SIGSTOPped member does.
    Hang,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Times {
    /// The next N matching calls, then the fault disappears.
    Next(u32),
    UntilCleared,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub rpc: Rpc,
    pub failure: Failure,
    pub times: Times,
    /// Only calls addressed to this endpoint. A call addressed to several
    /// endpoints (membership changes) matches when the list contains it.
    pub endpoint: Option<String>,
}

impl Fault {
    /// Fails every call of `rpc` with `kind` until cleared.
    pub fn fail(rpc: Rpc, kind: ProbeErrorKind) -> Self {
        Self {
            rpc,
            failure: Failure::Error(kind),
            times: Times::UntilCleared,
            endpoint: None,
        }
    }

    /// Hangs every call of `rpc` until the deadline, until cleared.
    pub fn hang(rpc: Rpc) -> Self {
        Self {
            rpc,
            failure: Failure::Hang,
            times: Times::UntilCleared,
            endpoint: None,
        }
    }

    pub fn times(mut self, n: u32) -> Self {
        self.times = Times::Next(n);
        self
    }

    pub fn at(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    fn matches(&self, rpc: Rpc, endpoints: &[&str]) -> bool {
        self.rpc == rpc
            && self
                .endpoint
                .as_deref()
                .is_none_or(|want| endpoints.contains(&want))
    }
}

/// Called after an RPC succeeded, with the endpoints it was addressed to.
pub type SuccessHook = Arc<dyn Fn(Rpc, &[String]) + Send + Sync>;

/// The shared control of a [`FaultyEtcd`]. Cheap to clone; all clones
/// control the same wrapper(s).
#[derive(Clone, Default)]
pub struct Faults {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    faults: Vec<Fault>,
    hooks: Vec<(Rpc, SuccessHook)>,
    calls: Vec<(Rpc, u64)>,
    injected: Vec<(Rpc, u64)>,
}

fn bump(counts: &mut Vec<(Rpc, u64)>, rpc: Rpc) {
    match counts.iter_mut().find(|(r, _)| *r == rpc) {
        Some((_, n)) => *n += 1,
        None => counts.push((rpc, 1)),
    }
}

fn count(counts: &[(Rpc, u64)], rpc: Rpc) -> u64 {
    counts
        .iter()
        .find(|(r, _)| *r == rpc)
        .map_or(0, |(_, n)| *n)
}

impl Faults {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a fault. When several match a call, the earliest added fires.
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// Removes every fault for `rpc`.
    pub fn clear(&self, rpc: Rpc) {
        self.lock().faults.retain(|f| f.rpc != rpc);
    }

    /// Removes every fault and every hook.
    pub fn clear_all(&self) {
        let mut s = self.lock();
        s.faults.clear();
        s.hooks.clear();
    }

    /// Runs `hook` after each successful call of `rpc`, before the caller
    /// sees the result.
    pub fn on_success(&self, rpc: Rpc, hook: impl Fn(Rpc, &[String]) + Send + Sync + 'static) {
        self.lock().hooks.push((rpc, Arc::new(hook)));
    }

    /// Calls of `rpc` made through the wrapper, faulted or not.
    pub fn calls(&self, rpc: Rpc) -> u64 {
        count(&self.lock().calls, rpc)
    }

    /// Calls of `rpc` that an injected fault failed.
    pub fn injected(&self, rpc: Rpc) -> u64 {
        count(&self.lock().injected, rpc)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the call and takes the fault that fires for it, if any.
    fn take(&self, rpc: Rpc, endpoints: &[&str]) -> Option<Failure> {
        let mut s = self.lock();
        bump(&mut s.calls, rpc);
        let i = s.faults.iter().position(|f| f.matches(rpc, endpoints))?;
        let failure = s.faults[i].failure;
        if let Times::Next(n) = &mut s.faults[i].times {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.faults.remove(i);
            }
        }
        bump(&mut s.injected, rpc);
        Some(failure)
    }

    fn hooks(&self, rpc: Rpc) -> Vec<SuccessHook> {
        self.lock()
            .hooks
            .iter()
            .filter(|(r, _)| *r == rpc)
            .map(|(_, h)| h.clone())
            .collect()
    }
}

/// An [`EtcdApi`] that fails calls as its [`Faults`] say and otherwise
/// delegates to `inner`.
pub struct FaultyEtcd<E> {
    inner: E,
    faults: Faults,
}

impl<E: EtcdApi> FaultyEtcd<E> {
    pub fn new(inner: E, faults: Faults) -> Self {
        Self { inner, faults }
    }

    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// Runs `call` unless a fault fires, then the success hooks.
    async fn run<T, Fut>(&self, rpc: Rpc, endpoints: &[String], call: Fut) -> Result<T, RpcError>
    where
        Fut: Future<Output = Result<T, RpcError>> + Send,
        T: Send,
    {
        let eps: Vec<&str> = endpoints.iter().map(String::as_str).collect();
        if let Some(failure) = self.faults.take(rpc, &eps) {
            let endpoint = endpoints.first().cloned().unwrap_or_default();
            return Err(self.inject(rpc, endpoint, failure).await);
        }
        let out = call.await?;
        for hook in self.faults.hooks(rpc) {
            hook(rpc, endpoints);
        }
        Ok(out)
    }

    async fn inject(&self, rpc: Rpc, endpoint: String, failure: Failure) -> RpcError {
        match failure {
            Failure::Error(kind) => RpcError::new(
                rpc,
                endpoint,
                kind,
                format!("injected {} fault", kind.as_str()),
            ),
            Failure::Hang => {
                let deadline: Duration = self.inner.deadline();
                tokio::time::sleep(deadline).await;
                RpcError::new(
                    rpc,
                    endpoint,
                    ProbeErrorKind::Timeout,
                    format!("injected hang: no answer within {deadline:?}"),
                )
            }
        }
    }
}

#[async_trait]
impl<E: EtcdApi> EtcdApi for FaultyEtcd<E> {
    fn deadline(&self) -> Duration {
        self.inner.deadline()
    }

    fn set_credentials(&self, domain: &str, credentials: Option<Credentials>) {
        self.inner.set_credentials(domain, credentials)
    }

    fn set_tls(&self, domain: &str, tls: Option<crate::tls::ClusterTls>) {
        self.inner.set_tls(domain, tls)
    }

    fn authenticated(&self, endpoint: &str) -> Option<bool> {
        self.inner.authenticated(endpoint)
    }

    async fn status(&self, endpoint: &str) -> Result<StatusInfo, RpcError> {
        let eps = [endpoint.to_owned()];
        self.run(Rpc::Status, &eps, self.inner.status(endpoint))
            .await
    }

    async fn member_list(&self, endpoint: &str) -> Result<Vec<EtcdMember>, RpcError> {
        let eps = [endpoint.to_owned()];
        self.run(Rpc::MemberList, &eps, self.inner.member_list(endpoint))
            .await
    }

    async fn quorum_read(&self, endpoint: &str) -> Result<(), RpcError> {
        let eps = [endpoint.to_owned()];
        self.run(Rpc::QuorumRead, &eps, self.inner.quorum_read(endpoint))
            .await
    }

    async fn member_add_as_learner(
        &self,
        endpoints: &[String],
        peer_urls: &[String],
    ) -> Result<AddedMember, RpcError> {
        self.run(
            Rpc::MemberAddAsLearner,
            endpoints,
            self.inner.member_add_as_learner(endpoints, peer_urls),
        )
        .await
    }

    async fn member_promote(
        &self,
        endpoints: &[String],
        id: u64,
    ) -> Result<Vec<EtcdMember>, RpcError> {
        self.run(
            Rpc::MemberPromote,
            endpoints,
            self.inner.member_promote(endpoints, id),
        )
        .await
    }

    async fn member_remove(
        &self,
        endpoints: &[String],
        id: u64,
    ) -> Result<Vec<EtcdMember>, RpcError> {
        self.run(
            Rpc::MemberRemove,
            endpoints,
            self.inner.member_remove(endpoints, id),
        )
        .await
    }

    async fn defragment(&self, endpoint: &str, deadline: Duration) -> Result<(), RpcError> {
        let eps = [endpoint.to_owned()];
        self.run(
            Rpc::Defragment,
            &eps,
            self.inner.defragment(endpoint, deadline),
        )
        .await
    }

    async fn disarm_no_space(&self, endpoint: &str, member: u64) -> Result<(), RpcError> {
        let eps = [endpoint.to_owned()];
        self.run(
            Rpc::AlarmDisarm,
            &eps,
            self.inner.disarm_no_space(endpoint, member),
        )
        .await
    }

    async fn snapshot(&self, endpoint: &str) -> Result<SnapshotStream, RpcError> {
        let eps = [endpoint.to_owned()];
        self.run(Rpc::Snapshot, &eps, self.inner.snapshot(endpoint))
            .await
    }

    async fn hash_kv(
        &self,
        endpoint: &str,
        revision: i64,
        deadline: Duration,
    ) -> Result<KvHash, RpcError> {
        let eps = [endpoint.to_owned()];
        self.run(
            Rpc::HashKv,
            &eps,
            self.inner.hash_kv(endpoint, revision, deadline),
        )
        .await
    }

    async fn move_leader(&self, leader_endpoint: &str, target: u64) -> Result<(), RpcError> {
        let eps = [leader_endpoint.to_owned()];
        self.run(
            Rpc::MoveLeader,
            &eps,
            self.inner.move_leader(leader_endpoint, target),
        )
        .await
    }

    async fn user_add(
        &self,
        endpoints: &[String],
        name: &str,
        password: &SecretString,
    ) -> Result<bool, RpcError> {
        self.run(
            Rpc::UserAdd,
            endpoints,
            self.inner.user_add(endpoints, name, password),
        )
        .await
    }

    async fn user_change_password(
        &self,
        endpoints: &[String],
        name: &str,
        password: &SecretString,
    ) -> Result<(), RpcError> {
        self.run(
            Rpc::UserChangePassword,
            endpoints,
            self.inner.user_change_password(endpoints, name, password),
        )
        .await
    }

    async fn role_add(&self, endpoints: &[String], name: &str) -> Result<bool, RpcError> {
        self.run(
            Rpc::RoleAdd,
            endpoints,
            self.inner.role_add(endpoints, name),
        )
        .await
    }

    async fn user_grant_role(
        &self,
        endpoints: &[String],
        user: &str,
        role: &str,
    ) -> Result<(), RpcError> {
        self.run(
            Rpc::UserGrantRole,
            endpoints,
            self.inner.user_grant_role(endpoints, user, role),
        )
        .await
    }

    async fn auth_enable(&self, endpoints: &[String]) -> Result<(), RpcError> {
        self.run(
            Rpc::AuthEnable,
            endpoints,
            self.inner.auth_enable(endpoints),
        )
        .await
    }

    async fn auth_disable(&self, endpoints: &[String]) -> Result<(), RpcError> {
        self.run(
            Rpc::AuthDisable,
            endpoints,
            self.inner.auth_disable(endpoints),
        )
        .await
    }
}

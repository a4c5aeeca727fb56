//! etcd authentication of a cluster (`spec.auth`): which credentials the
//! operator presents to the cluster's members, what it learns from their
//! answers, and the steps that create `root`, turn authentication on,
//! change root's password and turn authentication off.
//!
//! Guarantees:
//! - The password goes from the Secret to the RPC as a `SecretString`; no
//!   message, status, Event, metric or policy input carries it.
//! - Every step is planned only with quorum verified by the host and the
//!   membership settled ([`next`] is called last by the planner), and each
//!   is idempotent, so a step cut off half-way is simply taken again.
//! - Credentials etcd took are remembered for the life of the process. A
//!   changed password in the Secret is set in etcd through them. Remembered
//!   credentials that etcd rejects are forgotten, so the Secret's are tried
//!   next: a password changed outside the operator is mended by putting it
//!   into the Secret.
//! - Auth is seen as on only when a member answered a client that had
//!   authenticated ([`crate::etcd::EtcdApi::authenticated`]), never assumed
//!   from the spec. etcd ignores the token of a connection made while auth
//!   was on once it is off, so auth turned off by someone else shows only
//!   after the operator reconnects (after a timeout, or a restart); the
//!   operator's own AuthDisable reconnects at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType};
use kube::{Resource, ResourceExt};
use secrecy::SecretString;
use steward_policy_sdk as sdk;

use crate::api::EtcdCluster;
use crate::cluster::plan::Step;
use crate::context::Context;
use crate::error::{ActError, etcd};
use crate::etcd::Credentials;

/// etcd's superuser, and the role that makes it one. etcd turns
/// authentication on only once both exist.
pub const ROOT: &str = "root";
/// The key of the password in a kubernetes.io/basic-auth Secret.
pub const PASSWORD_KEY: &str = "password";
pub const USERNAME_KEY: &str = "username";
/// How long a read of the root Secret stands. The operator may read only
/// the Secrets it names (`get`, no watch), so a changed Secret is seen
/// within this time.
pub const SECRET_RECHECK: Duration = Duration::from_secs(10);

/// What the operator knows of each cluster's credentials, by cluster UID.
#[derive(Default)]
pub struct Registry {
    clusters: Mutex<HashMap<String, Entry>>,
}

#[derive(Default)]
struct Entry {
    /// The Secret's credentials (or why there are none), and when read.
    read: Option<(Instant, Result<Credentials, String>)>,
    /// The credentials etcd last took.
    accepted: Option<Credentials>,
    /// Which credentials this reconcile presents.
    presenting: Presenting,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Presenting {
    #[default]
    Nothing,
    Secret,
    Accepted,
}

/// What the planner needs to know about a cluster's authentication.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthFacts {
    /// `spec.auth.enabled`.
    pub wanted: bool,
    /// Whether etcd has authentication on, from a member's answer.
    pub etcd_on: Option<bool>,
    /// Why the Secret's credentials cannot be used, if they cannot.
    pub secret_problem: Option<String>,
    /// The Secret names another password than the one etcd took.
    pub password_changed: bool,
    /// There are credentials to present (for turning auth off).
    pub have_credentials: bool,
    /// The Secret, `namespace/name`, for messages.
    pub secret: String,
}

/// The domain every member name of `cluster` ends in: the scope of its
/// credentials in the etcd client.
fn domain(cluster: &EtcdCluster) -> String {
    crate::resources::cluster_domain(
        &cluster.name_any(),
        &cluster.namespace().unwrap_or_default(),
    )
}

fn secret_name(cluster: &EtcdCluster) -> Option<String> {
    Some(
        cluster
            .spec
            .auth
            .as_ref()?
            .root_credentials_secret_ref
            .as_ref()?
            .name
            .clone(),
    )
}

/// Before the probe: reads the root Secret (at most every
/// [`SECRET_RECHECK`]) and sets the credentials the cluster's members are
/// called with.
pub async fn prepare(cluster: &EtcdCluster, ctx: &Context) {
    let uid = cluster.uid().unwrap_or_default();
    let ns = cluster.namespace().unwrap_or_default();
    let fresh = {
        let map = ctx.auth.lock();
        map.get(&uid)
            .and_then(|e| e.read.as_ref())
            .is_some_and(|(at, _)| at.elapsed() < SECRET_RECHECK)
    };
    let read = match secret_name(cluster) {
        Some(name) if !fresh => Some(read_secret(ctx, &ns, &name).await),
        _ => None,
    };
    let mut map = ctx.auth.lock();
    let entry = map.entry(uid).or_default();
    if secret_name(cluster).is_none() {
        entry.read = None;
    } else if let Some(read) = read {
        entry.read = Some((Instant::now(), read));
    }
    let from_secret = entry.read.as_ref().and_then(|(_, r)| r.as_ref().ok());
    let (presenting, credentials) = match (&entry.accepted, from_secret) {
        (Some(accepted), Some(secret)) if accepted.same_as(secret) => {
            (Presenting::Secret, Some(secret.clone()))
        }
        // etcd still has the password it took: present it, so the cluster
        // stays verified and the new one can be set through it.
        (Some(accepted), _) => (Presenting::Accepted, Some(accepted.clone())),
        (None, Some(secret)) => (Presenting::Secret, Some(secret.clone())),
        (None, None) => (Presenting::Nothing, None),
    };
    entry.presenting = presenting;
    drop(map);
    ctx.etcd.set_credentials(&domain(cluster), credentials);
}

async fn read_secret(ctx: &Context, ns: &str, name: &str) -> Result<Credentials, String> {
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| {
            format!("reading Secret {ns}/{name} (spec.auth.rootCredentialsSecretRef): {e}")
        })?
        .ok_or_else(|| {
            format!("Secret {ns}/{name} (spec.auth.rootCredentialsSecretRef) does not exist")
        })?;
    credentials_from(&secret, ns, name)
}

/// The root credentials in a kubernetes.io/basic-auth Secret.
pub fn credentials_from(secret: &Secret, ns: &str, name: &str) -> Result<Credentials, String> {
    let value = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|s| s.clone().into_bytes())
            })
    };
    if let Some(user) = value(USERNAME_KEY)
        && user != ROOT.as_bytes()
    {
        return Err(format!(
            "Secret {ns}/{name} has {USERNAME_KEY} other than {ROOT:?}: the operator manages etcd's root user only; drop the key or set it to {ROOT}"
        ));
    }
    let password = value(PASSWORD_KEY)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| format!("Secret {ns}/{name} has no non-empty {PASSWORD_KEY} key"))?;
    let password = String::from_utf8(password)
        .map_err(|_| format!("Secret {ns}/{name}: {PASSWORD_KEY} is not UTF-8"))?;
    Ok(Credentials {
        user: ROOT.to_owned(),
        password: SecretString::from(password),
    })
}

/// After the probe: what etcd's answers say about authentication, and
/// what the operator now remembers of it.
pub fn observe(cluster: &EtcdCluster, ctx: &Context, probing: &sdk::Probing) -> AuthFacts {
    let uid = cluster.uid().unwrap_or_default();
    let ns = cluster.namespace().unwrap_or_default();
    let report = match probing {
        sdk::Probing::Attempted(r) => Some(r),
        sdk::Probing::Skipped(_) => None,
    };
    let answered: Vec<&str> = report
        .into_iter()
        .flat_map(|r| r.endpoints.iter())
        .filter(|p| matches!(p.outcome, sdk::ProbeOutcome::Answered(_)))
        .map(|p| p.endpoint.as_str())
        .collect();
    // A connection dropped since the probe (a timeout elsewhere) says
    // nothing either way.
    let seen: Vec<bool> = answered
        .iter()
        .filter_map(|ep| ctx.etcd.authenticated(ep))
        .collect();
    let etcd_on = (!seen.is_empty()).then(|| seen.contains(&true));
    // No member took the credentials and one refused them: with the others
    // down, that one's refusal is all there is to go by.
    let rejected = answered.is_empty()
        && report.is_some_and(|r| {
            r.endpoints.iter().any(|p| {
                matches!(&p.outcome, sdk::ProbeOutcome::Failed(e) if e.kind == sdk::ProbeErrorKind::Auth)
            })
        });

    let mut map = ctx.auth.lock();
    let entry = map.entry(uid).or_default();
    let from_secret = entry.read.as_ref().map(|(_, r)| r.clone());
    if etcd_on == Some(true) {
        entry.accepted = match entry.presenting {
            Presenting::Secret => from_secret.as_ref().and_then(|r| r.as_ref().ok()).cloned(),
            Presenting::Accepted => entry.accepted.clone(),
            Presenting::Nothing => None,
        };
    }
    if rejected && entry.presenting == Presenting::Accepted {
        entry.accepted = None;
    }
    let secret_ok = from_secret.as_ref().is_some_and(|r| r.is_ok());
    AuthFacts {
        wanted: cluster.spec.auth.as_ref().is_some_and(|a| a.enabled),
        etcd_on,
        secret_problem: from_secret.and_then(|r| r.err()),
        password_changed: entry.presenting == Presenting::Accepted && secret_ok,
        have_credentials: entry.presenting != Presenting::Nothing,
        secret: format!("{ns}/{}", secret_name(cluster).unwrap_or_default()),
    }
}

/// The authentication step due on a verified cluster whose membership is
/// settled, if any.
pub fn next(f: &AuthFacts) -> Option<Step> {
    match (f.wanted, f.etcd_on) {
        // Only a step that needs the Secret is refused for it: a cluster
        // with auth on keeps running on the password etcd took.
        (true, Some(false)) if f.secret_problem.is_some() => Some(Step::Refuse {
            reason: "AuthSecretInvalid",
            message: format!(
                "etcd authentication is not turned on: {}",
                f.secret_problem.clone().unwrap_or_default()
            ),
        }),
        (true, Some(false)) => Some(Step::EnableAuth),
        (true, Some(true)) if f.password_changed => Some(Step::ChangeRootPassword {
            secret: f.secret.clone(),
        }),
        (false, Some(true)) if f.have_credentials => Some(Step::DisableAuth),
        _ => None,
    }
}

/// Takes an authentication step through `endpoints` (leader first).
pub async fn act(
    step: &Step,
    cluster: &EtcdCluster,
    ctx: &Context,
    endpoints: &[String],
) -> Result<(), ActError> {
    let uid = cluster.uid().unwrap_or_default();
    let from_secret = || {
        ctx.auth
            .lock()
            .get(&uid)
            .and_then(|e| e.read.as_ref())
            .and_then(|(_, r)| r.as_ref().ok())
            .cloned()
    };
    let (reason, note) = match step {
        Step::EnableAuth => {
            let creds = from_secret().ok_or(ActError::NoCredentials {
                step: "turning etcd authentication on",
            })?;
            let api = &ctx.etcd;
            // Each call is idempotent: a step cut off half-way is taken
            // again from the start.
            let created = api
                .user_add(endpoints, ROOT, &creds.password)
                .await
                .map_err(etcd("UserAdd root"))?;
            if !created {
                api.user_change_password(endpoints, ROOT, &creds.password)
                    .await
                    .map_err(etcd("UserChangePassword root"))?;
            }
            api.role_add(endpoints, ROOT)
                .await
                .map_err(etcd("RoleAdd root"))?;
            api.user_grant_role(endpoints, ROOT, ROOT)
                .await
                .map_err(etcd("UserGrantRole root root"))?;
            api.auth_enable(endpoints)
                .await
                .map_err(etcd("AuthEnable"))?;
            // etcd has this password now, whatever it had before.
            if let Some(entry) = ctx.auth.lock().get_mut(&uid) {
                entry.accepted = Some(creds.clone());
                entry.presenting = Presenting::Secret;
            }
            (
                "AuthEnabled",
                "created etcd's root user from spec.auth.rootCredentialsSecretRef and turned authentication on".to_owned(),
            )
        }
        Step::ChangeRootPassword { secret } => {
            let creds = from_secret().ok_or(ActError::NoCredentials {
                step: "changing etcd's root password",
            })?;
            ctx.etcd
                .user_change_password(endpoints, ROOT, &creds.password)
                .await
                .map_err(etcd("UserChangePassword root"))?;
            if let Some(entry) = ctx.auth.lock().get_mut(&uid) {
                entry.accepted = Some(creds.clone());
                entry.presenting = Presenting::Secret;
            }
            ctx.etcd.set_credentials(&domain(cluster), Some(creds));
            (
                "RootPasswordChanged",
                format!("set etcd's root password to the one in Secret {secret}"),
            )
        }
        Step::DisableAuth => {
            ctx.etcd
                .auth_disable(endpoints)
                .await
                .map_err(etcd("AuthDisable"))?;
            if let Some(entry) = ctx.auth.lock().get_mut(&uid) {
                entry.accepted = None;
            }
            // etcd ignores the token of a connection that authenticated
            // while auth was on, so such a connection would go on
            // reporting auth as on: start the cluster's afresh.
            ctx.etcd.set_credentials(&domain(cluster), None);
            ("AuthDisabled", "turned etcd authentication off".to_owned())
        }
        _ => return Ok(()),
    };
    let ev = KubeEvent {
        type_: KubeEventType::Normal,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: None,
    };
    let _ = ctx.recorder.publish(&ev, &cluster.object_ref(&())).await;
    Ok(())
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.clusters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets a deleted cluster.
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::fixtures::secret;

    #[test]
    fn a_basic_auth_secret_gives_root_and_its_password() {
        let c = credentials_from(
            &secret(&[("username", "root"), ("password", "pw")]),
            "ns",
            "s",
        )
        .unwrap();
        assert_eq!(c.user, "root");
        assert!(c.same_as(&Credentials {
            user: "root".into(),
            password: SecretString::from("pw")
        }));
        assert!(credentials_from(&secret(&[("password", "pw")]), "ns", "s").is_ok());
    }

    #[test]
    fn a_secret_without_a_password_or_for_another_user_is_named() {
        let e = credentials_from(&secret(&[("username", "root")]), "ns", "s").unwrap_err();
        assert_eq!(e, "Secret ns/s has no non-empty password key");
        let e = credentials_from(&secret(&[("password", "")]), "ns", "s").unwrap_err();
        assert!(e.contains("no non-empty password"), "{e}");
        let e = credentials_from(
            &secret(&[("username", "admin"), ("password", "pw")]),
            "ns",
            "s",
        )
        .unwrap_err();
        assert!(e.contains("other than \"root\""), "{e}");
    }

    #[test]
    fn each_auth_state_has_its_step() {
        let on = |wanted, etcd_on| AuthFacts {
            wanted,
            etcd_on,
            have_credentials: true,
            secret: "ns/s".into(),
            ..Default::default()
        };
        assert_eq!(next(&on(true, Some(false))), Some(Step::EnableAuth));
        assert_eq!(next(&on(true, Some(true))), None);
        // Not known whether etcd has auth on: nothing is done.
        assert_eq!(next(&on(true, None)), None);
        assert_eq!(next(&on(false, Some(false))), None);
        assert_eq!(next(&on(false, Some(true))), Some(Step::DisableAuth));
        let without = AuthFacts {
            have_credentials: false,
            ..on(false, Some(true))
        };
        assert_eq!(next(&without), None);
        let changed = AuthFacts {
            password_changed: true,
            ..on(true, Some(true))
        };
        assert_eq!(
            next(&changed),
            Some(Step::ChangeRootPassword {
                secret: "ns/s".into()
            })
        );
        let broken = AuthFacts {
            secret_problem: Some("Secret ns/s does not exist".into()),
            ..on(true, Some(true))
        };
        assert_eq!(next(&broken), None, "auth is on: nothing needs the Secret");
        let broken = AuthFacts {
            secret_problem: Some("Secret ns/s does not exist".into()),
            ..on(true, Some(false))
        };
        match next(&broken) {
            Some(Step::Refuse { reason, message }) => {
                assert_eq!(reason, "AuthSecretInvalid");
                assert!(message.ends_with("Secret ns/s does not exist"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}

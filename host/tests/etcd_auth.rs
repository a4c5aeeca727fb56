//! etcd authentication against real etcd: the calls that set up a root
//! user and turn auth on, a client that authenticates once auth is on (and
//! works without it before), token expiry, a changed password, a wrong one,
//! and turning auth off again. No password reaches an error message or a
//! `Debug` rendering.

mod etcd_support;

use std::time::Duration;

use etcd_steward::etcd::{ClientConfig, Credentials, EtcdApi, EtcdClient, Fault, Faults};
use etcd_steward::etcd::{FaultyEtcd, Rpc, RpcError};
use etcd_support::Cluster;
use secrecy::SecretString;
use steward_policy_sdk::ProbeErrorKind;

const PASSWORD: &str = "p4ss-first-3b9c1e";
const CHANGED: &str = "p4ss-second-7d20aa";
const WRONG: &str = "p4ss-wrong-51f0c2";

fn client(credentials: Option<(&str, &str)>) -> EtcdClient {
    EtcdClient::new(ClientConfig {
        deadline: Duration::from_secs(3),
        credentials: credentials.map(|(user, password)| Credentials {
            user: user.to_owned(),
            password: SecretString::from(password.to_owned()),
        }),
        ..ClientConfig::default()
    })
}

fn secret(s: &str) -> SecretString {
    SecretString::from(s.to_owned())
}

fn assert_no_password(err: &RpcError) {
    let shown = format!("{err} {err:?} {:?}", err.to_probe_error());
    for p in [PASSWORD, CHANGED, WRONG] {
        assert!(!shown.contains(p), "a password leaked into {shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_user_auth_enable_token_expiry_password_change_and_auth_disable() {
    // Tokens live one second, so the test sees them expire.
    let cluster = Cluster::start_with(3, &["--auth-token-ttl", "1"]).await;
    let urls = cluster.client_urls();
    let admin = client(None);
    let operator = client(Some(("root", PASSWORD)));

    // Before auth is on, a client with credentials works without them.
    operator
        .quorum_read(&urls[0])
        .await
        .expect("auth still off");

    assert!(
        admin
            .user_add(&urls, "root", &secret(PASSWORD))
            .await
            .unwrap()
    );
    assert!(
        !admin.user_add(&urls, "root", &secret(WRONG)).await.unwrap(),
        "an existing user is reported, and its password is left alone"
    );
    assert!(admin.role_add(&urls, "root").await.unwrap());
    assert!(!admin.role_add(&urls, "root").await.unwrap());
    admin.user_grant_role(&urls, "root", "root").await.unwrap();
    admin
        .user_grant_role(&urls, "root", "root")
        .await
        .expect("granting a held role again is no error");
    admin.auth_enable(&urls).await.unwrap();
    // Once it is on, only root may ask; the operator's client, which
    // connected while it was off, authenticates first.
    let err = admin.auth_enable(&urls).await.unwrap_err();
    assert_eq!(err.kind, ProbeErrorKind::Auth, "{err}");
    operator.auth_enable(&urls).await.expect("already on");

    // Without a token etcd refuses reads: an auth fault.
    let err = admin.quorum_read(&urls[1]).await.unwrap_err();
    assert_eq!(err.kind, ProbeErrorKind::Auth, "{err}");
    // The operator's client connected before auth was on; it now
    // authenticates by itself.
    for url in &urls {
        operator.quorum_read(url).await.expect("authenticated read");
        operator.member_list(url).await.expect("authenticated list");
        operator.status(url).await.expect("authenticated status");
    }

    // A wrong password: every call is an auth fault that does not quote it.
    let wrong = client(Some(("root", WRONG)));
    for err in [
        wrong.status(&urls[0]).await.unwrap_err(),
        wrong.quorum_read(&urls[0]).await.unwrap_err(),
        wrong.member_list(&urls[0]).await.unwrap_err(),
    ] {
        assert_eq!(err.kind, ProbeErrorKind::Auth, "{err}");
        assert!(err.message.contains("authentication failed"), "{err}");
        assert_no_password(&err);
    }
    let shown = format!(
        "{:?}",
        ClientConfig {
            credentials: Some(Credentials {
                user: "root".into(),
                password: secret(PASSWORD),
            }),
            ..ClientConfig::default()
        }
    );
    assert!(
        !shown.contains(PASSWORD) && shown.contains("root"),
        "{shown}"
    );

    // Tokens expire: a client that does not refresh sees it, ours does not.
    let mut raw = etcd_client::Client::connect(
        [urls[0].as_str()],
        Some(etcd_client::ConnectOptions::new().with_user("root", PASSWORD)),
    )
    .await
    .unwrap();
    raw.get("k", None).await.expect("fresh token");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let expired = raw.get("k", None).await.unwrap_err().to_string();
    assert!(expired.contains("invalid auth token"), "{expired}");
    operator
        .quorum_read(&urls[0])
        .await
        .expect("the expired token is refreshed");

    // A new password: the old one stops working, the new one works.
    operator
        .user_change_password(&urls, "root", &secret(CHANGED))
        .await
        .unwrap();
    let err = operator.quorum_read(&urls[0]).await.unwrap_err();
    assert_eq!(err.kind, ProbeErrorKind::Auth, "{err}");
    assert_no_password(&err);
    let changed = client(Some(("root", CHANGED)));
    changed.quorum_read(&urls[2]).await.expect("new password");

    // Off again: clients without credentials read, and so does one with.
    changed.auth_disable(&urls).await.unwrap();
    changed.auth_disable(&urls).await.expect("already off");
    admin.quorum_read(&urls[1]).await.expect("auth off");
    changed
        .quorum_read(&urls[0])
        .await
        .expect("auth off, with credentials");
    client(Some(("root", CHANGED)))
        .quorum_read(&urls[0])
        .await
        .expect("a new client with credentials while auth is off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_auth_rpc_can_be_faulted_and_a_faulted_one_changes_nothing() {
    let cluster = Cluster::start(1).await;
    let urls = cluster.client_urls();
    let faults = Faults::new();
    let api = FaultyEtcd::new(client(None), faults.clone());
    let calls: [(Rpc, &str); 6] = [
        (Rpc::UserAdd, "user"),
        (Rpc::RoleAdd, "role"),
        (Rpc::UserGrantRole, "grant"),
        (Rpc::UserChangePassword, "password"),
        (Rpc::AuthEnable, "enable"),
        (Rpc::AuthDisable, "disable"),
    ];
    for (rpc, what) in calls {
        faults.inject(Fault::fail(rpc, ProbeErrorKind::Timeout).times(1));
        let err = match what {
            "user" => api
                .user_add(&urls, "root", &secret(PASSWORD))
                .await
                .map(drop),
            "role" => api.role_add(&urls, "root").await.map(drop),
            "grant" => api.user_grant_role(&urls, "root", "root").await,
            "password" => {
                api.user_change_password(&urls, "root", &secret(PASSWORD))
                    .await
            }
            "enable" => api.auth_enable(&urls).await,
            _ => api.auth_disable(&urls).await,
        }
        .unwrap_err();
        assert_eq!((err.rpc, err.kind), (rpc, ProbeErrorKind::Timeout), "{err}");
        assert_eq!(faults.injected(rpc), 1, "{rpc}");
        assert!(rpc.is_mutation(), "{rpc} must need verified quorum");
    }
    // The faulted UserAdd created nobody, so auth cannot be turned on.
    let err = api.auth_enable(&urls).await.unwrap_err();
    assert!(err.message.contains("root user does not exist"), "{err}");
    assert!(
        api.user_add(&urls, "root", &secret(PASSWORD))
            .await
            .unwrap()
    );
}

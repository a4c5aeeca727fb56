//! A member whose name stops resolving is reported as DNS, although the
//! client still holds an open connection to it (the seed incident's
//! "lookup ...: no such host", and e2e scenario 6).
//!
//! The test edits `/etc/hosts`, so it re-runs itself inside a private
//! mount namespace (`unshare -m`) where a temporary file is bind-mounted
//! over `/etc/hosts`; the machine's own file is never touched.

mod etcd_support;

use std::process::Command;
use std::time::Duration;

use etcd_steward::etcd::{ClientConfig, EtcdApi, EtcdClient};
use etcd_support::{EtcdProcess, eventually, free_addr, loopback};
use steward_policy_sdk::ProbeErrorKind;

const PRIVATE: &str = "ETCD_STEWARD_TEST_PRIVATE_HOSTS";
const NAME: &str = "a_name_that_stops_resolving_is_dns_despite_an_open_connection";

#[test]
fn a_name_that_stops_resolving_is_dns_despite_an_open_connection() {
    let Ok(marker) = std::env::var(PRIVATE) else {
        return rerun_with_private_hosts();
    };
    // Only ever edit the bind-mounted copy: it carries the marker.
    let current = std::fs::read_to_string("/etc/hosts").unwrap();
    assert!(
        current.contains(&marker),
        "/etc/hosts is not the private copy; not editing it"
    );
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(scenario(&marker));
}

fn rerun_with_private_hosts() {
    let hosts = tempfile::NamedTempFile::new().unwrap();
    let marker = format!("# etcd-steward test copy {}", std::process::id());
    std::fs::write(hosts.path(), format!("{marker}\n127.0.0.1 localhost\n")).unwrap();
    let exe = std::env::current_exe().unwrap();
    let status = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            r#"mount --bind "$1" /etc/hosts && exec "$2" --exact "$3" --nocapture"#,
            "sh",
        ])
        .arg(hosts.path())
        .arg(&exe)
        .arg(NAME)
        .env(PRIVATE, &marker)
        .status()
        .expect("run unshare (util-linux); this test needs a private mount namespace");
    assert!(
        status.success(),
        "the scenario failed inside the private mount namespace"
    );
}

async fn scenario(marker: &str) {
    let ip = loopback(20);
    let name = "etcd-0.etcd.steward.test";
    let peer = free_addr(ip);
    let member = EtcdProcess::spawn("m0", ip, &format!("m0=http://{peer}"), "new", peer, &[]);
    let port = member.client_url.rsplit(':').next().unwrap().to_owned();
    let url = format!("http://{name}:{port}");
    let unresolvable = format!("{marker}\n127.0.0.1 localhost\n");
    let resolvable = format!("{unresolvable}{ip} {name}\n");
    std::fs::write("/etc/hosts", &resolvable).unwrap();

    let api = EtcdClient::new(ClientConfig {
        deadline: Duration::from_secs(1),
        ..ClientConfig::default()
    });
    eventually(Duration::from_secs(20), "answers by name", || async {
        api.status(&url).await.ok()
    })
    .await;

    // The record disappears; the process and the client's connection to
    // it are still there.
    std::fs::write("/etc/hosts", &unresolvable).unwrap();
    let err = api.status(&url).await.unwrap_err();
    eprintln!("{err}");
    assert_eq!(err.kind, ProbeErrorKind::Dns, "{err}");
    assert!(err.message.contains(name), "names the host: {err}");
    let err = api.member_list(&url).await.unwrap_err();
    assert_eq!(err.kind, ProbeErrorKind::Dns, "{err}");

    std::fs::write("/etc/hosts", &resolvable).unwrap();
    api.status(&url).await.expect("resolves again");
}

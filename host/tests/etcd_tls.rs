//! https endpoints: a trusted CA connects; an untrusted certificate is a
//! TLS fault; a plaintext client against a TLS member fails fast. Certificates come
//! from the `openssl` command line tool, made fresh per test run.

mod etcd_support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use etcd_steward::etcd::{ClientConfig, EtcdApi, EtcdClient};
use etcd_support::{EtcdProcess, eventually, free_addr, loopback};
use steward_policy_sdk::ProbeErrorKind;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (needed to make test certificates)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a server certificate for `ip`, signed by it.
fn make_pki(dir: &Path, ip: &str) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509", "-days", "1", "-subj", "/CN=test-ca"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
    openssl(dir, &ca);
    let mut csr = vec!["req", "-new", "-subj", "/CN=etcd"];
    csr.extend(ec);
    csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
    openssl(dir, &csr);
    std::fs::write(dir.join("ext.cnf"), format!("subjectAltName=IP:{ip}\n")).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.crt",
        ],
    );
}

fn client(tls: Option<etcd_client::TlsOptions>) -> EtcdClient {
    EtcdClient::new(ClientConfig {
        deadline: Duration::from_secs(2),
        tls,
        ..ClientConfig::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_members_need_a_trusted_ca_and_mismatches_read_as_tls() {
    let pki = tempfile::tempdir().unwrap();
    let ip = loopback(21);
    make_pki(pki.path(), &ip.to_string());
    let cert = pki.path().join("server.crt");
    let key = pki.path().join("server.key");
    let peer = free_addr(ip);
    let member = EtcdProcess::spawn_with_scheme(
        "https",
        "m0",
        ip,
        &format!("m0=http://{peer}"),
        "new",
        peer,
        &[
            "--cert-file",
            cert.to_str().unwrap(),
            "--key-file",
            key.to_str().unwrap(),
        ],
    );
    let url = member.client_url.clone();
    assert!(url.starts_with("https://"));

    let ca = std::fs::read(pki.path().join("ca.crt")).unwrap();
    let trusted = client(Some(
        etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(ca)),
    ));
    let status = eventually(Duration::from_secs(20), "TLS member answers", || async {
        trusted.status(&url).await.ok()
    })
    .await;
    assert!(status.is_leader());
    trusted
        .quorum_read(&url)
        .await
        .expect("quorum read over TLS");

    // No trusted root: the server's certificate is rejected.
    let err = client(None).status(&url).await.unwrap_err();
    eprintln!("{err}");
    assert_eq!(err.kind, ProbeErrorKind::Tls, "{err}");

    // Plaintext to a TLS-only member: the server just drops the connection
    // ("broken pipe" / "connection reset"), which cannot be told apart
    // from a member dying mid-request, so it is honestly "other", not
    // guessed to be TLS. It must still fail fast rather than hang.
    let plain = url.replace("https://", "http://");
    let start = std::time::Instant::now();
    let err = client(None).status(&plain).await.unwrap_err();
    eprintln!("{err}");
    assert_eq!(err.kind, ProbeErrorKind::Other, "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "fails fast: {err}"
    );
}

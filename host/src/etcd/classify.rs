//! Turning etcd-client, tonic, hyper and io errors into a [`ProbeErrorKind`].
//!
//! The kind is what a policy reasons about ("members stop resolving" must
//! read as DNS, a frozen member as a timeout), so it is worth getting right.
//! etcd-client's `Error` has no `source()`, and tonic wraps transport
//! failures in a `Status` whose code is often just `Unknown` or
//! `Unavailable`, so the classifier walks each layer's source chain and
//! looks at io error kinds first, gRPC codes second and message text last.

use std::error::Error as StdError;

use steward_policy_sdk::ProbeErrorKind;
use tonic::Code;

/// Classifies an etcd-client error and renders a credential-free message.
pub fn classify(err: &etcd_client::Error) -> (ProbeErrorKind, String) {
    let mut chain = Chain::default();
    match err {
        etcd_client::Error::GRpcStatus(status) => {
            chain.code = Some(status.code());
            chain.push_text(status.message());
            chain.walk(status.source());
        }
        etcd_client::Error::TransportError(e) => {
            chain.push_text(&e.to_string());
            chain.walk(e.source());
        }
        etcd_client::Error::IoError(e) => {
            chain.io_kinds.push(e.kind());
            chain.push_text(&e.to_string());
            chain.walk(e.source());
        }
        other => chain.push_text(&other.to_string()),
    }
    let kind = chain.kind();
    let mut message = redact(&chain.message());
    if kind == ProbeErrorKind::Tls
        && let Some(what) = tls_diagnosis(&message)
    {
        message = format!("{what}: {message}");
    }
    (kind, message)
}

/// What a TLS failure means for the person fixing it: (what the client's
/// text contains, lower-case; the hint), first match wins. rustls says it
/// in its own terms (`invalid peer certificate: UnknownIssuer`, `received
/// fatal alert: CertificateExpired`); the first are the member's
/// certificate as the operator judged it, the alerts are the member's
/// verdict on the operator's certificate, or (InternalError) on its own.
/// Hints stay short: with the RPC and endpoint after them
/// ([`super::RpcError::to_probe_error`]), a policy quoting 120 bytes keeps
/// them whole.
const TLS_HINTS: &[(&[&str], &str)] = &[
    (
        &["fatal alert: certificateexpired"],
        "client certificate refused as expired (renew spec.tls.client.operatorClientSecretRef)",
    ),
    (
        &["fatal alert: unknownca"],
        "client certificate refused: not signed by the members' CA (spec.tls.client.operatorClientSecretRef)",
    ),
    (
        &["fatal alert: certificaterequired"],
        "the members require a client certificate (set spec.tls.client.operatorClientSecretRef)",
    ),
    (
        &[
            "fatal alert: badcertificate",
            "fatal alert: unsupportedcertificate",
            "fatal alert: certificateunknown",
            "fatal alert: accessdenied",
        ],
        "client certificate refused (see spec.tls.client.operatorClientSecretRef)",
    ),
    (
        // Go's TLS server cannot load its own certificate and key, e.g. a
        // renewal that put a new tls.crt beside the old tls.key.
        &["fatal alert: internalerror"],
        "the member could not load its certificate (do tls.crt and tls.key match?)",
    ),
    (
        &["certificate expired", "certificate: expired"],
        "serving certificate expired (renew spec.tls.client.serverSecretRef)",
    ),
    (
        &["notvalidyet", "not valid yet"],
        "serving certificate not valid yet (check its notBefore and the clocks)",
    ),
    (
        // BadSignature: a CA of the same name as ca.crt's, another key.
        &["unknownissuer", "unknown issuer", "badsignature"],
        "serving certificate not signed by the CA in ca.crt of spec.tls.client.serverSecretRef",
    ),
    (
        &["notvalidforname", "not valid for name"],
        "serving certificate does not name <member>.<cluster>.<namespace>.svc, the address dialled",
    ),
];

fn tls_diagnosis(message: &str) -> Option<&'static str> {
    let text = message.to_ascii_lowercase();
    TLS_HINTS
        .iter()
        .find(|(needles, _)| needles.iter().any(|n| text.contains(n)))
        .map(|(_, hint)| *hint)
}

/// The hint a classified TLS message starts with, if any.
pub fn leading_tls_hint(message: &str) -> Option<&'static str> {
    TLS_HINTS
        .iter()
        .map(|(_, hint)| *hint)
        .find(|hint| message.starts_with(hint) && message[hint.len()..].starts_with(": "))
}

#[derive(Default)]
struct Chain {
    code: Option<Code>,
    io_kinds: Vec<std::io::ErrorKind>,
    /// Each layer's own text, outermost first, without repeats.
    texts: crate::text::Layers,
}

impl Chain {
    fn push_text(&mut self, text: &str) {
        self.texts.push(text);
    }

    fn walk(&mut self, mut next: Option<&(dyn StdError + 'static)>) {
        // Bounded: a cyclic or absurdly deep chain must not hang a probe.
        for _ in 0..32 {
            let Some(e) = next else { return };
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                self.io_kinds.push(io.kind());
            }
            if let Some(status) = e.downcast_ref::<tonic::Status>() {
                self.code.get_or_insert(status.code());
            }
            if e.is::<tonic::TimeoutExpired>() {
                self.io_kinds.push(std::io::ErrorKind::TimedOut);
            }
            self.push_text(&e.to_string());
            next = e.source();
        }
    }

    fn message(&self) -> String {
        self.texts.joined()
    }

    fn kind(&self) -> ProbeErrorKind {
        use std::io::ErrorKind as Io;
        let text = self.message().to_ascii_lowercase();
        let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));

        if self.io_kinds.contains(&Io::ConnectionRefused) || has(&["connection refused"]) {
            return ProbeErrorKind::Refused;
        }
        if has(&[
            "failed to lookup address",
            "dns error",
            "name or service not known",
            "no such host",
            "temporary failure in name resolution",
            "nodename nor servname",
            "no address associated with hostname",
        ]) {
            return ProbeErrorKind::Dns;
        }
        if has(&[
            "tls",
            "certificate",
            "invalidcontenttype",
            "corrupt message",
            "handshake",
            "unknownissuer",
            "peer sent no certificates",
            // A TLS alert from the other side (rustls names it:
            // UnknownCA, BadCertificate, CertificateExpired, ...).
            "fatal alert",
        ]) {
            return ProbeErrorKind::Tls;
        }
        if matches!(
            self.code,
            Some(Code::Unauthenticated | Code::PermissionDenied)
        ) || has(&[
            "invalid auth token",
            "authentication failed",
            "user name is empty",
            "permission denied",
        ]) {
            return ProbeErrorKind::Auth;
        }
        if self.io_kinds.contains(&Io::TimedOut)
            || matches!(self.code, Some(Code::DeadlineExceeded))
            || has(&["deadline", "timed out", "timeout", "elapsed"])
        {
            return ProbeErrorKind::Timeout;
        }
        ProbeErrorKind::Other
    }
}

/// Removes credentials from text that may quote a URL (`scheme://user:pass@host`).
/// The operator's own credentials are never put into a message in the first
/// place; this covers URLs quoted back by libraries.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let authority_end = tail
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..authority_end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str("***@");
                out.push_str(&authority[at + 1..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[authority_end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_strips_userinfo_from_every_url() {
        assert_eq!(
            redact("dial http://root:s3cret@10.0.0.1:2379/x failed; https://u@h:1 too"),
            "dial http://***@10.0.0.1:2379/x failed; https://***@h:1 too"
        );
        assert_eq!(redact("no urls here"), "no urls here");
    }

    #[test]
    fn grpc_codes_and_texts_map_to_kinds() {
        let cases = [
            (
                tonic::Status::unauthenticated("etcdserver: invalid auth token"),
                ProbeErrorKind::Auth,
            ),
            (
                tonic::Status::permission_denied("etcdserver: permission denied"),
                ProbeErrorKind::Auth,
            ),
            (
                tonic::Status::deadline_exceeded("context deadline exceeded"),
                ProbeErrorKind::Timeout,
            ),
            (
                tonic::Status::cancelled("Timeout expired"),
                ProbeErrorKind::Timeout,
            ),
            (
                tonic::Status::unavailable("etcdserver: leader changed"),
                ProbeErrorKind::Other,
            ),
            (
                tonic::Status::unavailable(
                    "transport error: connection error: received fatal alert: UnknownCA",
                ),
                ProbeErrorKind::Tls,
            ),
        ];
        for (status, want) in cases {
            let (kind, _) = classify(&etcd_client::Error::GRpcStatus(status.clone()));
            assert_eq!(kind, want, "{status:?}");
        }
    }

    /// Each certificate fault is named first, in words that say which
    /// Secret to fix; the client's own text follows.
    #[test]
    fn tls_failures_say_which_certificate_is_wrong() {
        let cases = [
            (
                "invalid peer certificate: certificate expired: verification time 1 (UNIX), but certificate is not valid after 0 (1 seconds ago)",
                "serving certificate expired",
            ),
            (
                "invalid peer certificate: UnknownIssuer",
                "serving certificate not signed by the CA",
            ),
            (
                "invalid peer certificate: BadSignature",
                "serving certificate not signed by the CA",
            ),
            (
                "invalid peer certificate: certificate not valid for name \"a.b.svc\"; certificate is only valid for DnsName(\"x\")",
                "does not name <member>",
            ),
            (
                "received fatal alert: UnknownCA",
                "client certificate refused: not signed",
            ),
            (
                "received fatal alert: CertificateExpired",
                "client certificate refused as expired",
            ),
        ];
        for (text, want) in cases {
            let status = tonic::Status::unavailable(format!("transport error: {text}"));
            let (kind, message) = classify(&etcd_client::Error::GRpcStatus(status));
            assert_eq!(kind, ProbeErrorKind::Tls, "{text}");
            assert!(message.contains(want), "{text} -> {message}");
            assert!(
                message.ends_with(text),
                "the client's text is kept: {message}"
            );
            let what = message.split(": transport error").next().unwrap();
            assert!(what.len() <= 100, "{what:?} fits the policy's excerpt");
        }
    }

    #[test]
    fn io_kind_wins_over_text() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "os error 111");
        let (kind, msg) = classify(&etcd_client::Error::IoError(io));
        assert_eq!(kind, ProbeErrorKind::Refused);
        assert!(msg.contains("os error 111"), "{msg}");
    }
}

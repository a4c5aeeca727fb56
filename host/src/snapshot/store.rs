//! The S3 side of a snapshot: credentials from a Secret, a streamed
//! multipart upload, and the read-back that verifies it.
//!
//! Guarantees:
//! - The snapshot is never held whole in memory: at most
//!   [`PARTS_IN_FLIGHT`] parts of [`PART_SIZE`] are buffered at once.
//! - No message this module returns carries the access key or the secret:
//!   every error text passes [`Redactor::clean`] first.
//! - An object this snapshot did not write is never overwritten: an object
//!   already at the key must carry this snapshot's UID in its metadata.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{
    Attribute, Attributes, BackoffConfig, Certificate, ClientOptions, GetOptions, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, RetryConfig, WriteMultipart,
};
use sha2::{Digest, Sha256};

use super::problem::{Problem, reason};
use super::stream::IntegrityHasher;
use crate::api::{ACCESS_KEY_ID_KEY, S3Location, SECRET_ACCESS_KEY_KEY};
use crate::etcd::RpcError;

/// Bytes per multipart part (S3 needs at least 5 MiB for all but the last).
pub const PART_SIZE: usize = 8 << 20;
/// Parts uploading at once; with the part being filled, this bounds the
/// memory one snapshot holds to about `(PARTS_IN_FLIGHT + 1) * PART_SIZE`.
pub const PARTS_IN_FLIGHT: usize = 2;
/// The object metadata key naming the EtcdSnapshot (by UID) that wrote it.
pub const OWNER_METADATA: &str = "etcd-steward-snapshot-uid";

/// An access key pair read from the credentials Secret. Not `Debug`: it
/// must not reach a log line by accident.
pub struct Credentials {
    access_key_id: String,
    secret_access_key: String,
}

impl Credentials {
    pub fn new(access_key_id: String, secret_access_key: String) -> Self {
        Self {
            access_key_id,
            secret_access_key,
        }
    }

    /// The pair in `secret`, or which keys it lacks (names only).
    pub fn from_secret(secret: &Secret) -> Result<Self, Problem> {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let value = |key: &str| {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|v| String::from_utf8_lossy(&v.0).trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        match (value(ACCESS_KEY_ID_KEY), value(SECRET_ACCESS_KEY_KEY)) {
            (Some(access_key_id), Some(secret_access_key)) => Ok(Self {
                access_key_id,
                secret_access_key,
            }),
            (id, key) => {
                let missing: Vec<&str> = [
                    id.is_none().then_some(ACCESS_KEY_ID_KEY),
                    key.is_none().then_some(SECRET_ACCESS_KEY_KEY),
                ]
                .into_iter()
                .flatten()
                .collect();
                // Retried: the Secret may be fixed in place.
                Err(Problem::retry(
                    reason::CREDENTIALS_INVALID,
                    format!(
                        "Secret {name} has no non-empty {}; it needs {ACCESS_KEY_ID_KEY} and {SECRET_ACCESS_KEY_KEY}",
                        missing.join(" or ")
                    ),
                ))
            }
        }
    }

    pub fn redactor(&self) -> Redactor {
        Redactor(vec![
            self.access_key_id.clone(),
            self.secret_access_key.clone(),
        ])
    }
}

/// Removes credentials from text bound for a status, an Event or a log.
#[derive(Clone, Default)]
pub struct Redactor(Vec<String>);

impl Redactor {
    pub fn clean(&self, text: &str) -> String {
        self.0
            .iter()
            .filter(|s| !s.is_empty())
            .fold(text.to_owned(), |t, s| t.replace(s.as_str(), "[redacted]"))
    }
}

/// How long a read may wait for its next bytes before it is given up.
pub const READ_IDLE: Duration = Duration::from_secs(60);

/// One object in one bucket, and a client for it.
pub struct Destination {
    /// For requests with a bounded body: parts, HEADs, deletes (120 s each).
    store: Arc<AmazonS3>,
    /// For whole-object reads, which take as long as the object needs: no
    /// total timeout; [`READ_IDLE`] bounds each wait for bytes instead.
    reader: Arc<AmazonS3>,
    path: Path,
    pub uri: String,
    redactor: Redactor,
}

/// What an upload wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub size: u64,
    pub sha256: String,
}

impl Destination {
    /// The object `<key>/<name>.db` of `location`.
    pub fn new(
        location: &S3Location,
        name: &str,
        credentials: &Credentials,
    ) -> Result<Self, Problem> {
        Self::object(
            location,
            object_key(location.key.as_deref(), name),
            credentials,
        )
    }

    /// The object at the whole key `key` of `location`'s bucket.
    pub fn object(
        location: &S3Location,
        key: String,
        credentials: &Credentials,
    ) -> Result<Self, Problem> {
        let redactor = credentials.redactor();
        let endpoint = endpoint_for(location)?;
        let mut options = ClientOptions::new()
            .with_allow_http(location.endpoint.starts_with("http://"))
            .with_connect_timeout(Duration::from_secs(5));
        if let Some(pem) = &location.ca_bundle {
            let certificates = Certificate::from_pem_bundle(pem.as_bytes()).map_err(|e| {
                Problem::fatal(
                    reason::INVALID_SPEC,
                    format!("destination.s3.caBundle holds no usable PEM certificate: {e}"),
                )
            })?;
            for c in certificates {
                options = options.with_root_certificate(c);
            }
        }
        let build = |options: ClientOptions| {
            AmazonS3Builder::new()
                .with_endpoint(&endpoint)
                .with_bucket_name(&location.bucket)
                .with_region(location.region.as_deref().unwrap_or("us-east-1"))
                .with_access_key_id(&credentials.access_key_id)
                .with_secret_access_key(&credentials.secret_access_key)
                .with_virtual_hosted_style_request(!location.force_path_style)
                .with_client_options(options)
                // A few quick retries: a store that stays unreachable is a
                // failed attempt, which the controller retries with backoff
                // and reports, rather than minutes inside one request.
                .with_retry(RetryConfig {
                    backoff: BackoffConfig::default(),
                    max_retries: 2,
                    retry_timeout: Duration::from_secs(20),
                })
                .build()
                .map_err(|e| {
                    Problem::fatal(
                        reason::INVALID_SPEC,
                        redactor.clean(&format!("destination.s3: {e}")),
                    )
                })
        };
        let store = build(options.clone().with_timeout(Duration::from_secs(120)))?;
        let reader = build(options.with_timeout_disabled())?;
        Ok(Self {
            store: Arc::new(store),
            reader: Arc::new(reader),
            uri: format!("s3://{}/{key}", location.bucket),
            path: Path::from(key),
            redactor,
        })
    }

    /// Refuses to go on if an object this snapshot (by `uid`) did not write
    /// is already at the key: a snapshot never replaces another backup.
    pub async fn check_not_foreign(&self, uid: &str) -> Result<(), Problem> {
        let head = GetOptions {
            head: true,
            ..Default::default()
        };
        match self.store.get_opts(&self.path, head).await {
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.problem(&e)),
            Ok(found) => {
                let owner = found
                    .attributes
                    .get(&Attribute::Metadata(OWNER_METADATA.into()))
                    .map(|v| v.as_ref().to_owned());
                if owner.as_deref() == Some(uid) {
                    Ok(())
                } else {
                    Err(Problem::fatal(
                        reason::OBJECT_EXISTS,
                        format!(
                            "{} already exists and was not written by this EtcdSnapshot; it is left as it is (name the snapshot differently, or use another key)",
                            self.uri
                        ),
                    ))
                }
            }
        }
    }

    /// Streams `chunks` into the object as a multipart upload, hashing as
    /// it goes, and checks etcd's own trailing sha256 of the snapshot. On
    /// any failure the upload is aborted, so no partial object remains.
    pub async fn upload(
        &self,
        chunks: impl Stream<Item = Result<Bytes, RpcError>>,
        uid: &str,
    ) -> Result<Written, Problem> {
        let mut attributes = Attributes::new();
        attributes.insert(
            Attribute::Metadata(OWNER_METADATA.into()),
            uid.to_owned().into(),
        );
        attributes.insert(Attribute::ContentType, "application/octet-stream".into());
        let options = PutMultipartOptions {
            attributes,
            ..Default::default()
        };
        let upload = self
            .store
            .put_multipart_opts(&self.path, options)
            .await
            .map_err(|e| self.problem(&e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut hasher = IntegrityHasher::default();
        let mut chunks = std::pin::pin!(chunks);
        let streamed: Result<(), Problem> = async {
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk.map_err(|e| {
                    Problem::retry(
                        reason::SNAPSHOT_STREAM_FAILED,
                        format!("the snapshot stream from etcd broke off: {e}"),
                    )
                })?;
                hasher.update(&chunk);
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(|e| self.problem(&e))?;
                writer.write(&chunk);
            }
            Ok(())
        }
        .await;
        let finished = match streamed {
            Ok(()) => hasher.finish(),
            Err(p) => Err(p),
        };
        match finished {
            Ok(written) => {
                // Every full part uploaded, or the upload is aborted.
                if let Err(e) = writer.wait_for_capacity(0).await {
                    let _ = writer.abort().await;
                    return Err(self.problem(&e));
                }
                // finish() aborts by itself when the completion fails; a
                // failure of the last (partial) part inside it leaves an
                // incomplete upload, invisible to readers, which a bucket's
                // AbortIncompleteMultipartUpload rule expires.
                writer.finish().await.map_err(|e| self.problem(&e))?;
                Ok(written)
            }
            Err(problem) => {
                // Best effort: a leftover incomplete upload is invisible to
                // readers, and bucket lifecycle rules expire it.
                let _ = writer.abort().await;
                Err(problem)
            }
        }
    }

    /// Whether the object exists and its metadata names `uid` as its writer.
    pub async fn written_by(&self, uid: &str) -> Result<bool, Problem> {
        let head = GetOptions {
            head: true,
            ..Default::default()
        };
        match self.store.get_opts(&self.path, head).await {
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.problem(&e)),
            Ok(found) => Ok(found
                .attributes
                .get(&Attribute::Metadata(OWNER_METADATA.into()))
                .is_some_and(|v| v.as_ref() == uid)),
        }
    }

    /// Deletes the object if EtcdSnapshot `uid` wrote it (its metadata says
    /// so); an object it did not write, or none, is left alone. Ok(false):
    /// nothing was deleted.
    pub async fn delete_if_written_by(&self, uid: &str) -> Result<bool, Problem> {
        let head = GetOptions {
            head: true,
            ..Default::default()
        };
        let found = match self.store.get_opts(&self.path, head).await {
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(self.problem(&e)),
            Ok(found) => found,
        };
        let owner = found
            .attributes
            .get(&Attribute::Metadata(OWNER_METADATA.into()))
            .map(|v| v.as_ref().to_owned());
        if owner.as_deref() != Some(uid) {
            return Ok(false);
        }
        self.store
            .delete(&self.path)
            .await
            .map_err(|e| self.problem(&e))?;
        Ok(true)
    }

    /// The object's bytes, streamed.
    pub async fn open(
        &self,
    ) -> Result<futures::stream::BoxStream<'static, Result<Bytes, Problem>>, Problem> {
        let got = self.reader.get(&self.path).await.map_err(|e| match e {
            object_store::Error::NotFound { .. } => Problem::retry(
                reason::OBJECT_NOT_FOUND,
                format!("{} does not exist", self.uri),
            ),
            e => self.problem(&e),
        })?;
        let (redactor, uri) = (self.redactor.clone(), self.uri.clone());
        let chunks = got.into_stream();
        Ok(futures::stream::try_unfold(chunks, move |mut chunks| {
            let (redactor, uri) = (redactor.clone(), uri.clone());
            async move {
                match tokio::time::timeout(READ_IDLE, chunks.next()).await {
                    Err(_) => Err(Problem::retry(
                        reason::READ_STALLED,
                        format!("reading {uri}: no bytes for {READ_IDLE:?}"),
                    )),
                    Ok(None) => Ok(None),
                    Ok(Some(Err(e))) => Err(classify(&redactor.clean(&error_chain(&e)), &uri)),
                    Ok(Some(Ok(bytes))) => Ok(Some((bytes, chunks))),
                }
            }
        })
        .boxed())
    }

    /// Reads the object whole, hashing it as a snapshot stream: its sha256
    /// must be `sha256` (hex) and etcd's own trailing sha256 must match the
    /// bytes before it. The object's size on success.
    pub async fn verify(&self, sha256: &str) -> Result<u64, Problem> {
        let mut stream = self.open().await?;
        let mut hasher = IntegrityHasher::default();
        while let Some(chunk) = stream.next().await {
            hasher.update(&chunk?);
        }
        // The checksum it was named with first: it is what a person can
        // compare; etcd's own trailer then catches a snapshot that was
        // corrupt when it was taken.
        let (written, trailer) = hasher.into_parts();
        if written.sha256 != sha256 {
            return Err(Problem::fatal(
                reason::CHECKSUM_MISMATCH,
                format!(
                    "{} has sha256 {}, not the {sha256} it was named with: it is not the snapshot that was taken, and is not restored",
                    self.uri, written.sha256
                ),
            ));
        }
        trailer.map_err(|p| Problem::fatal(p.reason, format!("{}: {}", self.uri, p.message)))?;
        Ok(written.size)
    }

    /// Reads the object back whole and checks its size and sha256 against
    /// what the upload wrote.
    pub async fn read_back(&self, written: &Written, uid: &str) -> Result<(), Problem> {
        // Another writer at the same key (two namespaces' schedules of the
        // same name, say) could have replaced it since: the object must
        // still be this snapshot's before its bytes mean anything.
        if !self.written_by(uid).await? {
            return Err(Problem::fatal(
                reason::OBJECT_EXISTS,
                format!(
                    "{} was replaced by another writer after this snapshot uploaded it; give each snapshot or schedule its own key",
                    self.uri
                ),
            ));
        }
        let mut stream = self.open().await?;
        let (mut size, mut sha) = (0u64, Sha256::new());
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            size += chunk.len() as u64;
            sha.update(&chunk);
        }
        let sha256 = hex::encode(sha.finalize());
        if size != written.size || sha256 != written.sha256 {
            return Err(Problem::retry(
                reason::VERIFICATION_FAILED,
                format!(
                    "{} read back as {size} bytes with sha256 {sha256}, but {} bytes with sha256 {} were written",
                    self.uri, written.size, written.sha256
                ),
            ));
        }
        Ok(())
    }

    fn problem(&self, e: &object_store::Error) -> Problem {
        classify(&self.redactor.clean(&error_chain(e)), &self.uri)
    }
}

/// `<key>/<name>.db`, or `<name>.db` without a key.
pub fn object_key(key: Option<&str>, name: &str) -> String {
    match key.map(|k| k.trim_matches('/')).filter(|k| !k.is_empty()) {
        Some(prefix) => format!("{prefix}/{name}.db"),
        None => format!("{name}.db"),
    }
}

/// The endpoint object_store is given: as written for path style; with the
/// bucket as the first label of the host for virtual-hosted style.
fn endpoint_for(location: &S3Location) -> Result<String, Problem> {
    let endpoint = location.endpoint.trim_end_matches('/');
    if location.force_path_style {
        return Ok(endpoint.to_owned());
    }
    let (scheme, host) = endpoint.split_once("://").ok_or_else(|| {
        Problem::fatal(
            reason::INVALID_SPEC,
            format!("destination.s3.endpoint {endpoint:?} is not a URL"),
        )
    })?;
    Ok(format!("{scheme}://{}.{host}", location.bucket))
}

/// The error and its sources, as one line.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// What an S3 failure means for the person reading the status. The text is
/// already redacted.
pub fn classify(text: &str, uri: &str) -> Problem {
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    if has(&[
        "NoSuchBucket",
        "bucket does not exist",
        "specified bucket does not exist",
    ]) {
        Problem::retry(
            reason::BUCKET_NOT_FOUND,
            format!("the bucket of {uri} does not exist: {text}"),
        )
    } else if has(&[
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AccessDenied",
        "403 Forbidden",
        "401 Unauthorized",
        "Unauthenticated",
        "PermissionDenied",
    ]) {
        Problem::retry(
            reason::ACCESS_DENIED,
            format!("the store refused the credentials for {uri}: {text}"),
        )
    } else if has(&[
        "certificate",
        "UnknownIssuer",
        "invalid peer",
        "self-signed",
        "self signed",
    ]) {
        Problem::retry(
            reason::TLS_UNTRUSTED,
            format!(
                "the store's TLS certificate is not trusted (set destination.s3.caBundle to the CA that signed it): {text}"
            ),
        )
    } else if has(&["timed out", "operation timed out", "deadline has elapsed"]) {
        Problem::retry(
            reason::STORE_TIMEOUT,
            format!("the store for {uri} did not answer in time: {text}"),
        )
    } else if has(&[
        "error sending request",
        "Connection refused",
        "connection refused",
        "tcp connect",
        "dns error",
        "connect error",
    ]) {
        Problem::retry(
            reason::ENDPOINT_UNREACHABLE,
            format!("the store for {uri} could not be reached: {text}"),
        )
    } else {
        Problem::retry(reason::UPLOAD_FAILED, format!("{uri}: {text}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(pairs: &[(&str, &str)]) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some("s3-creds".into());
        s.data = Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        );
        s
    }

    #[test]
    fn a_secret_without_a_key_is_named_but_its_values_never_shown() {
        let err = Credentials::from_secret(&secret(&[(ACCESS_KEY_ID_KEY, "AKIDSHOWNOWHERE")]))
            .err()
            .unwrap();
        assert_eq!(err.reason, reason::CREDENTIALS_INVALID);
        assert!(
            err.message.contains(SECRET_ACCESS_KEY_KEY),
            "{}",
            err.message
        );
        assert!(!err.message.contains("AKIDSHOWNOWHERE"), "{}", err.message);
        let empty = Credentials::from_secret(&secret(&[
            (ACCESS_KEY_ID_KEY, "id"),
            (SECRET_ACCESS_KEY_KEY, "  "),
        ]));
        assert!(empty.is_err(), "a blank secret key is no key");
    }

    #[test]
    fn credentials_are_redacted_from_any_text() {
        let c = Credentials::from_secret(&secret(&[
            (ACCESS_KEY_ID_KEY, "AKIDEXAMPLE"),
            (SECRET_ACCESS_KEY_KEY, "wJalrXUtnFEMI/K7MDENG"),
        ]))
        .ok()
        .unwrap();
        let text = "InvalidAccessKeyId: AKIDEXAMPLE signed with wJalrXUtnFEMI/K7MDENG";
        let clean = c.redactor().clean(text);
        assert!(
            !clean.contains("AKIDEXAMPLE") && !clean.contains("wJalrXUtnFEMI"),
            "{clean}"
        );
        assert_eq!(classify(&clean, "s3://b/k").reason, reason::ACCESS_DENIED);
    }

    #[test]
    fn object_keys_join_the_prefix_once() {
        assert_eq!(object_key(None, "snap"), "snap.db");
        assert_eq!(object_key(Some(""), "snap"), "snap.db");
        assert_eq!(object_key(Some("backups"), "snap"), "backups/snap.db");
        assert_eq!(
            object_key(Some("/backups/prod/"), "snap"),
            "backups/prod/snap.db"
        );
    }

    #[test]
    fn virtual_hosted_style_puts_the_bucket_in_the_host() {
        let mut l: S3Location = serde_json::from_value(serde_json::json!({
            "endpoint": "https://s3.example.com/",
            "bucket": "etcd",
            "credentialsSecretRef": {"name": "c"},
        }))
        .unwrap();
        assert_eq!(endpoint_for(&l).unwrap(), "https://etcd.s3.example.com");
        l.force_path_style = true;
        assert_eq!(endpoint_for(&l).unwrap(), "https://s3.example.com");
    }

    #[test]
    fn store_failures_get_the_reason_a_person_acts_on() {
        let r = |t: &str| classify(t, "s3://b/k").reason;
        assert_eq!(
            r("Client error with status 404 Not Found: <Code>NoSuchBucket</Code>"),
            reason::BUCKET_NOT_FOUND
        );
        assert_eq!(
            r("error sending request: tcp connect error: Connection refused (os error 111)"),
            reason::ENDPOINT_UNREACHABLE
        );
        assert_eq!(
            r("error sending request: invalid peer certificate: UnknownIssuer"),
            reason::TLS_UNTRUSTED
        );
        assert_eq!(
            r("<Code>SignatureDoesNotMatch</Code>"),
            reason::ACCESS_DENIED
        );
        assert_eq!(r("500 Internal Server Error"), reason::UPLOAD_FAILED);
    }
}

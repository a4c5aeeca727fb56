//! The S3 server of the backup tests (SeaweedFS, `steward_testbed::s3`),
//! reached with object_store as the operator reaches a store: objects go in
//! and out whole and in multipart uploads, wrong credentials and unknown
//! buckets are refused, and the TLS variant is trusted only with its CA.
//!
//! Needs `ETCD_STEWARD_SEAWEEDFS` (scripts/ensure-go-tool.sh seaweedfs).

use futures::StreamExt;
use object_store::aws::AmazonS3;
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload};
use steward_testbed::s3::S3Server;

const MIB: usize = 1024 * 1024;

/// `len` bytes that differ from part to part and from offset to offset,
/// so a part stored out of order or twice would show.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[i % 4] ^ seed)
        .collect()
}

async fn multipart(store: &AmazonS3, key: &Path, parts: &[Vec<u8>]) {
    let mut upload = store.put_multipart(key).await.unwrap();
    // As a streaming upload sends them: several parts in flight at once.
    let sends: Vec<_> = parts
        .iter()
        .map(|p| upload.put_part(PutPayload::from(p.clone())))
        .collect();
    futures::future::try_join_all(sends).await.unwrap();
    upload.complete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_go_in_and_out_whole_and_in_parts() {
    let mut s3 = S3Server::start().await.unwrap();
    assert!(
        s3.endpoint().starts_with("http://127.0.0.1:"),
        "{}",
        s3.endpoint()
    );
    assert_eq!(s3.region, "us-east-1");
    s3.create_bucket("backups").await.unwrap();
    assert!(s3.list("backups", "").await.unwrap().is_empty());

    s3.put("backups", "a/one", b"first".to_vec()).await.unwrap();
    s3.put("backups", "a/two", b"second!".to_vec())
        .await
        .unwrap();
    s3.put("backups", "b/three", b"3".to_vec()).await.unwrap();
    assert_eq!(
        s3.list("backups", "a/").await.unwrap(),
        vec![("a/one".to_owned(), 5), ("a/two".to_owned(), 7)]
    );
    assert_eq!(
        s3.list("backups", "").await.unwrap(),
        vec![
            ("a/one".to_owned(), 5),
            ("a/two".to_owned(), 7),
            ("b/three".to_owned(), 1)
        ]
    );
    // A prefix that is not a whole path segment.
    assert_eq!(
        s3.list("backups", "a/t").await.unwrap(),
        vec![("a/two".to_owned(), 7)]
    );
    assert_eq!(s3.get("backups", "a/one").await.unwrap(), b"first");
    // Overwriting, as a test tampers with an object.
    s3.put("backups", "a/one", b"tampered".to_vec())
        .await
        .unwrap();
    assert_eq!(s3.get("backups", "a/one").await.unwrap(), b"tampered");
    s3.delete("backups", "a/one").await.unwrap();
    assert!(s3.get("backups", "a/one").await.is_err());
    assert_eq!(
        s3.list("backups", "a/").await.unwrap(),
        vec![("a/two".to_owned(), 7)]
    );

    // A multipart upload of 5 MiB parts and a short last one, as the
    // operator streams a snapshot.
    let store = s3.store("backups").unwrap();
    let parts = vec![
        pattern(1, 5 * MIB),
        pattern(2, 5 * MIB),
        pattern(3, 5 * MIB),
        pattern(4, 12_345),
    ];
    let whole: Vec<u8> = parts.concat();
    let key = Path::from("snapshots/big.db");
    multipart(&store, &key, &parts).await;
    let meta = store.head(&key).await.unwrap();
    assert_eq!(meta.size, whole.len() as u64);
    // S3's ETag of a multipart object: the MD5 of the parts' MD5s, "-<parts>".
    let etag = meta.e_tag.clone().unwrap_or_default();
    assert!(etag.trim_matches('"').ends_with("-4"), "ETag {etag}");
    let got = s3.get("backups", "snapshots/big.db").await.unwrap();
    assert!(
        got == whole,
        "the object read back differs from what was uploaded"
    );
    // A range across the first part boundary.
    let range = store
        .get_range(&key, (5 * MIB - 10) as u64..(5 * MIB + 10) as u64)
        .await
        .unwrap();
    assert_eq!(&range[..], &whole[5 * MIB - 10..5 * MIB + 10]);
    assert_eq!(
        s3.list("backups", "snapshots/").await.unwrap(),
        vec![("snapshots/big.db".to_owned(), whole.len() as u64)]
    );

    // The same through object_store's buffered writer, whose chunk size
    // is the part size.
    let upload = store
        .put_multipart(&Path::from("snapshots/streamed.db"))
        .await
        .unwrap();
    let mut writer = object_store::WriteMultipart::new_with_chunk_size(upload, 5 * MIB);
    for piece in whole.chunks(777_777) {
        writer.wait_for_capacity(2).await.unwrap();
        writer.write(piece);
    }
    writer.finish().await.unwrap();
    assert!(s3.get("backups", "snapshots/streamed.db").await.unwrap() == whole);

    // As on AWS, a part but the last under 5 MiB fails the upload.
    let mut upload = store
        .put_multipart(&Path::from("snapshots/small-parts.db"))
        .await
        .unwrap();
    upload
        .put_part(PutPayload::from(pattern(6, MIB)))
        .await
        .unwrap();
    upload
        .put_part(PutPayload::from(pattern(7, MIB)))
        .await
        .unwrap();
    let err = upload.complete().await.unwrap_err();
    assert!(format!("{err}").contains("EntityTooSmall"), "{err}");
    upload.abort().await.unwrap();

    // An aborted upload leaves nothing behind.
    let mut upload = store
        .put_multipart(&Path::from("snapshots/aborted.db"))
        .await
        .unwrap();
    upload
        .put_part(PutPayload::from(pattern(5, 5 * MIB)))
        .await
        .unwrap();
    upload.abort().await.unwrap();
    let keys: Vec<String> = s3
        .list("backups", "snapshots/")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["snapshots/big.db", "snapshots/streamed.db"]);

    // Stopped, the endpoint is unreachable.
    s3.stop().await;
    assert!(!s3.is_running());
    let err = s3.list("backups", "").await.unwrap_err();
    assert!(
        format!("{err:#}").contains("connect") || format!("{err:#}").contains("Connect"),
        "{err:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_refused() {
    let s3 = S3Server::start().await.unwrap();
    s3.create_bucket("backups").await.unwrap();
    s3.put("backups", "kept", b"x".to_vec()).await.unwrap();

    let wrong_secret = s3
        .store_builder("backups")
        .unwrap()
        .with_secret_access_key("not-the-secret")
        .build()
        .unwrap();
    let err = wrong_secret
        .put(&Path::from("intruder"), PutPayload::from_static(b"y"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, object_store::Error::PermissionDenied { .. }),
        "{err:?}"
    );
    assert!(format!("{err}").contains("SignatureDoesNotMatch"), "{err}");
    let err = wrong_secret.get(&Path::from("kept")).await.unwrap_err();
    assert!(
        matches!(err, object_store::Error::PermissionDenied { .. }),
        "{err:?}"
    );
    // Nothing in the error gives the real secret away.
    assert!(!format!("{err:?}").contains(&s3.secret_access_key));

    let unknown_key = s3
        .store_builder("backups")
        .unwrap()
        .with_access_key_id("AKIANOBODY0000000000")
        .build()
        .unwrap();
    let err = unknown_key
        .list(None)
        .next()
        .await
        .expect("an answer")
        .unwrap_err();
    // object_store reports a refused LIST as Generic, not PermissionDenied.
    let text = format!("{err:?}");
    assert!(
        text.contains("status: 403") && text.contains("InvalidAccessKeyId"),
        "{text}"
    );

    // Unsigned requests are refused too: there is no anonymous identity.
    let anonymous = s3
        .store_builder("backups")
        .unwrap()
        .with_skip_signature(true)
        .build()
        .unwrap();
    let err = anonymous.get(&Path::from("kept")).await.unwrap_err();
    assert!(
        matches!(err, object_store::Error::PermissionDenied { .. }),
        "{err:?}"
    );

    assert_eq!(
        s3.list("backups", "").await.unwrap(),
        vec![("kept".to_owned(), 1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_nobody_created_is_an_error() {
    let s3 = S3Server::start().await.unwrap();
    let err = s3.put("missing", "k", b"v".to_vec()).await.unwrap_err();
    assert!(format!("{err:#}").contains("NoSuchBucket"), "{err:#}");
    let err = s3.list("missing", "").await.unwrap_err();
    assert!(format!("{err:#}").contains("NoSuchBucket"), "{err:#}");
    let err = s3.get("missing", "k").await.unwrap_err();
    assert!(
        matches!(
            err.downcast_ref::<object_store::Error>(),
            Some(object_store::Error::NotFound { .. })
        ),
        "{err:#}"
    );
    // The failed PUT did not create it on the fly.
    assert!(s3.list("missing", "").await.is_err());
    // A multipart upload cannot start there either.
    let store = s3.store("missing").unwrap();
    assert!(store.put_multipart(&Path::from("k")).await.is_err());
    // Creating it twice: the second is refused as S3 refuses it.
    s3.create_bucket("present").await.unwrap();
    let err = s3.create_bucket("present").await.unwrap_err();
    assert!(
        format!("{err:#}").contains("BucketAlreadyExists")
            || format!("{err:#}").contains("BucketAlreadyOwnedByYou"),
        "{err:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_trusted_with_its_ca_only() {
    let s3 = S3Server::start_tls().await.unwrap();
    assert!(
        s3.endpoint().starts_with("https://127.0.0.1:"),
        "{}",
        s3.endpoint()
    );
    let ca = s3.ca_pem.clone().expect("a TLS server has a CA");
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
    s3.create_bucket("backups").await.unwrap();
    s3.put("backups", "over-tls", b"secret".to_vec())
        .await
        .unwrap();
    assert_eq!(s3.get("backups", "over-tls").await.unwrap(), b"secret");
    let store = s3.store("backups").unwrap();
    multipart(
        &store,
        &Path::from("big"),
        &[pattern(7, 5 * MIB), pattern(8, 100)],
    )
    .await;
    assert_eq!(
        s3.list("backups", "").await.unwrap(),
        vec![
            ("big".to_owned(), (5 * MIB + 100) as u64),
            ("over-tls".to_owned(), 6)
        ]
    );

    // Without the CA the certificate is not trusted.
    let untrusting = s3
        .store_builder("backups")
        .unwrap()
        .with_client_options(ClientOptions::new())
        .build()
        .unwrap();
    let err = untrusting.get(&Path::from("over-tls")).await.unwrap_err();
    let text = format!("{err:?}");
    assert!(
        text.contains("certificate") || text.contains("Certificate"),
        "{text}"
    );

    // Nor does plain HTTP reach it.
    let plain = s3
        .store_builder("backups")
        .unwrap()
        .with_endpoint(s3.endpoint().replace("https://", "http://"))
        .build()
        .unwrap();
    assert!(plain.get(&Path::from("over-tls")).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_is_required() {
    // With the variable pointing nowhere, the error says what builds it.
    // (Run in a child process: the variable is process-wide.)
    if std::env::var_os("S3_SERVER_TEST_CHILD").is_some() {
        let err = S3Server::start().await.unwrap_err();
        println!("ERROR: {err:#}");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "the_binary_is_required", "--nocapture"])
        .env("S3_SERVER_TEST_CHILD", "1")
        .env_remove("ETCD_STEWARD_SEAWEEDFS")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "ERROR: ETCD_STEWARD_SEAWEEDFS is not set: run scripts/ensure-go-tool.sh seaweedfs"
        ),
        "{text}"
    );
}

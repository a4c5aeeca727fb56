//! Why an attempt at a snapshot did not complete: a condition reason, a
//! message a person can act on, and whether another attempt may help.

/// The reasons an EtcdSnapshot's conditions and Events carry.
pub mod reason {
    pub const CLUSTER_NOT_FOUND: &str = "ClusterNotFound";
    /// No quorum the host verified itself: nothing is taken from a member
    /// that may be cut off from the cluster.
    pub const QUORUM_UNVERIFIED: &str = "QuorumUnverified";
    pub const CREDENTIALS_NOT_FOUND: &str = "CredentialsNotFound";
    /// A `pvc` destination's claim that does not exist.
    pub const CLAIM_NOT_FOUND: &str = "ClaimNotFound";
    pub const CREDENTIALS_INVALID: &str = "CredentialsInvalid";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const BUCKET_NOT_FOUND: &str = "BucketNotFound";
    pub const ACCESS_DENIED: &str = "AccessDenied";
    pub const ENDPOINT_UNREACHABLE: &str = "EndpointUnreachable";
    pub const TLS_UNTRUSTED: &str = "TLSUntrusted";
    pub const UPLOAD_FAILED: &str = "UploadFailed";
    pub const OBJECT_EXISTS: &str = "ObjectExists";
    pub const SNAPSHOT_STREAM_FAILED: &str = "SnapshotStreamFailed";
    /// etcd's own sha256 at the end of the stream did not match its bytes.
    pub const INTEGRITY_CHECK_FAILED: &str = "IntegrityCheckFailed";
    /// The object read back is not what was written.
    pub const VERIFICATION_FAILED: &str = "VerificationFailed";
    /// A previous attempt was cut off (the operator stopped mid-stream).
    pub const INTERRUPTED: &str = "Interrupted";
    pub const ATTEMPTS_EXHAUSTED: &str = "AttemptsExhausted";
    /// A request to the store that got no answer in time.
    pub const STORE_TIMEOUT: &str = "StoreTimeout";
    /// A read of the store that stopped delivering bytes.
    pub const READ_STALLED: &str = "ReadStalled";
    /// A restore source that is not there.
    pub const OBJECT_NOT_FOUND: &str = "RestoreSourceNotFound";
    /// A restore source whose sha256 is not the one it was named with.
    pub const CHECKSUM_MISMATCH: &str = "RestoreChecksumMismatch";
    /// A snapshot larger than a restoring seed's volume can hold.
    pub const VOLUME_TOO_SMALL: &str = "RestoreVolumeTooSmall";
    /// A restore source EtcdSnapshot that is not Complete and Verified.
    pub const NOT_VERIFIED_SOURCE: &str = "RestoreSourceNotVerified";
    pub const STARTED: &str = "Started";
    pub const COMPLETE: &str = "Complete";
    /// The Verified condition's reason: the object was read back whole.
    pub const READ_BACK: &str = "ReadBack";
    pub const NOT_VERIFIED: &str = "NotVerified";
    /// The Verified condition's reason once a restored copy answered with
    /// the snapshot's revision and keyspace hash (`verify: Restore`).
    pub const RESTORED: &str = "Restored";
    /// `verify: Restore` is running: the snapshot is stored and read back,
    /// its restored copy not yet checked.
    pub const VERIFYING: &str = "VerifyingByRestore";
    /// The restored copy is not the snapshot: `etcdutl snapshot restore`
    /// refused it, or its revision or keyspace hash differs.
    pub const RESTORE_CHECK_FAILED: &str = "RestoreCheckFailed";
    /// The claim ran out of space while the snapshot was written to it.
    pub const VOLUME_FULL: &str = "VolumeFull";
    /// Writing or reading back the file on the claim failed otherwise.
    pub const WRITE_FAILED: &str = "WriteFailed";
    /// A snapshot's Pod failed without a report of its own.
    pub const POD_FAILED: &str = "PodFailed";

    /// The reasons a snapshot's Pod may report, as themselves; any other
    /// string (a Pod's report is not trusted to name one) is `PodFailed`.
    pub fn known(reason: &str) -> &'static str {
        [
            VOLUME_FULL,
            WRITE_FAILED,
            OBJECT_EXISTS,
            SNAPSHOT_STREAM_FAILED,
            INTEGRITY_CHECK_FAILED,
            VERIFICATION_FAILED,
            CHECKSUM_MISMATCH,
            OBJECT_NOT_FOUND,
            CREDENTIALS_INVALID,
            BUCKET_NOT_FOUND,
            ACCESS_DENIED,
            ENDPOINT_UNREACHABLE,
            TLS_UNTRUSTED,
            STORE_TIMEOUT,
            READ_STALLED,
        ]
        .into_iter()
        .find(|r| *r == reason)
        .unwrap_or(POD_FAILED)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub reason: &'static str,
    /// Safe to show: never carries credentials.
    pub message: String,
    /// Whether a later attempt may succeed without a new EtcdSnapshot.
    pub retry: bool,
}

impl Problem {
    pub fn retry(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            retry: true,
        }
    }

    /// Nothing a later attempt of this EtcdSnapshot can change.
    pub fn fatal(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            retry: false,
        }
    }
}

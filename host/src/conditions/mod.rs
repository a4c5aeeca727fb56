//! The conditions on an `EtcdCluster` status: what the policy concluded,
//! plus the kstatus conditions the host owns, merged into what is stored.
//!
//! Three steps, each a pure function:
//! 1. [`desired`]: the policy's conditions completed by the host — every
//!    expected type present (Unknown if nobody knows), `Ready` mirroring
//!    `Available`, `Reconciling` and `Stalled` from the host's own state.
//! 2. [`merge`]: desired conditions onto the stored ones — `lastTransitionTime`
//!    moves only when `status` moves; every condition carries the generation.
//! 3. [`transitions`]: what changed, for Events.
//!
//! kstatus (Flux `wait`, `kubectl wait`-like tools) reads `Reconciling=True`
//! as InProgress *before* it looks at `Stalled`, so a stalled cluster must
//! also say `Reconciling=False`, or it would never be reported as Failed.

mod cluster;
mod kstatus;
pub mod member;
mod merge;
mod phase;
#[cfg(test)]
mod tests;
pub mod version;

pub use cluster::{AVAILABLE, DEGRADED, PROGRESSING, REQUIRED, desired};
pub use kstatus::{READY, RECONCILING, STALLED, Stall};
pub use member::{MemberState, member_conditions};
pub use merge::{Transition, merge, parse_status, previous_conditions, transitions};
pub use version::{VERSION_DRIFTED, cluster_version, version_drifted};

/// Types the host writes itself; a policy cannot set them.
pub const HOST_OWNED: [&str; 4] = [READY, RECONCILING, STALLED, VERSION_DRIFTED];

/// The longest condition message or Event note the operator writes, in
/// bytes: the Event API's note limit. A condition could hold 32 KiB, but a
/// message that long is not read by anyone, and one limit keeps the
/// policy's messages and the host's the same.
pub const MAX_MESSAGE_BYTES: usize = 1024;

pub mod reason {
    //! Reasons the host itself writes.
    pub const NOT_REPORTED: &str = "NotReported";
    pub const BOOTSTRAPPING: &str = "Bootstrapping";
    pub const SCALING_UP: &str = "ScalingUp";
    pub const SCALING_DOWN: &str = "ScalingDown";
    /// Members are being rolled to `spec.version`, one at a time.
    pub const UPGRADING: &str = "Upgrading";
    /// `spec.version` asks for a change etcd does not support.
    pub const UNSUPPORTED_VERSION_CHANGE: &str = "UnsupportedVersionChange";
    /// `spec.maintenance.defrag.schedule` is not a cron schedule.
    pub const INVALID_DEFRAG_SCHEDULE: &str = "InvalidDefragSchedule";
    pub const STEADY: &str = "Steady";
    pub const PAUSED: &str = "Paused";
    pub const DELETING: &str = "Deleting";
    pub const NOT_STALLED: &str = "NotStalled";
    pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    pub const POLICY_UNLOADABLE: &str = "PolicyUnloadable";
    pub const INVALID_POLICY_SETTINGS: &str = "InvalidPolicySettings";
    /// The host stood in for a policy that failed or could not be loaded.
    pub const POLICY_FAILED: &str = "PolicyFailed";
    /// Not the host's: the reason the Python and JavaScript SDKs give the
    /// verdict they return for an exception they caught in the policy's
    /// code. The host counts such a verdict as a policy failure.
    pub const POLICY_ERROR: &str = "PolicyError";
    /// Replaces a reason the apiserver would reject.
    pub const UNSPECIFIED: &str = "Unspecified";
}

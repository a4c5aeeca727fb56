//! What can go wrong with a policy, typed so the caller can name it in a
//! Warning Event and a metric label.

use std::fmt;

/// Which stage of running a policy failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The bytes are not a component of the `status-policy` world, or
    /// describe() failed while loading.
    Load,
    /// The component could not be instantiated for an evaluation.
    Instantiate,
    /// The policy trapped (including a Rust panic, which aborts).
    Trap,
    /// The policy ran past its epoch deadline.
    Deadline,
    /// The policy asked for more memory than its cap.
    Memory,
    /// The policy returned a verdict the host refuses to write.
    InvalidVerdict,
    /// The policy rejected the cluster's settings.
    Settings,
}

impl ErrorKind {
    /// CamelCase, fit for an Event reason suffix or a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Load => "Load",
            Self::Instantiate => "Instantiate",
            Self::Trap => "Trap",
            Self::Deadline => "Deadline",
            Self::Memory => "Memory",
            Self::InvalidVerdict => "InvalidVerdict",
            Self::Settings => "Settings",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("policy could not be loaded: {0}")]
    Load(String),
    #[error("policy could not be instantiated: {0}")]
    Instantiate(String),
    #[error("policy trapped: {0}")]
    Trap(String),
    #[error("policy exceeded its {0} ms deadline")]
    Deadline(u128),
    #[error("policy exceeded its memory cap of {0} bytes")]
    Memory(usize),
    #[error("policy returned an invalid verdict: {0}")]
    InvalidVerdict(String),
    #[error("policy rejected the settings: {0}")]
    Settings(String),
}

impl PolicyError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Load(_) => ErrorKind::Load,
            Self::Instantiate(_) => ErrorKind::Instantiate,
            Self::Trap(_) => ErrorKind::Trap,
            Self::Deadline(_) => ErrorKind::Deadline,
            Self::Memory(_) => ErrorKind::Memory,
            Self::InvalidVerdict(_) => ErrorKind::InvalidVerdict,
            Self::Settings(_) => ErrorKind::Settings,
        }
    }
}

/// A wasmtime error and its context chain on one line, for a condition
/// message or a CLI error.
pub(super) fn wasm_error(e: &wasmtime::Error) -> String {
    crate::text::one_line(&format!("{e:#}"))
}

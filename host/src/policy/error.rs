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
    crate::text::one_line(&without_backtrace_notes(&format!("{e:#}")))
}

/// What Rust's panic hook appends to a panic message. A Rust policy's
/// panic reaches a status and an Event through its captured stderr, where
/// the advice to set an environment variable is addressed to no one: the
/// policy runs inside the operator, and gets no backtrace either way.
const BACKTRACE_NOTES: [&str; 2] = [
    "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
    "note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.",
];

/// `text` without the panic hook's backtrace notes.
pub(super) fn without_backtrace_notes(text: &str) -> String {
    BACKTRACE_NOTES
        .iter()
        .fold(text.to_owned(), |text, note| text.replace(note, ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_message_loses_the_backtrace_note_and_keeps_the_rest() {
        let stderr = "thread '<unnamed>' panicked at src/lib.rs:88:24:\n\
                      chaos policy: deliberate panic\n\
                      note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        let kept = without_backtrace_notes(stderr);
        assert!(!kept.contains("RUST_BACKTRACE"), "{kept}");
        assert_eq!(
            crate::text::one_line(&kept),
            "thread '<unnamed>' panicked at src/lib.rs:88:24: chaos policy: deliberate panic"
        );
        let full = "panicked\nnote: Some details are omitted, run with `RUST_BACKTRACE=full` \
                    for a verbose backtrace.\n";
        assert_eq!(
            crate::text::one_line(&without_backtrace_notes(full)),
            "panicked"
        );
        let other = "note: run with care";
        assert_eq!(without_backtrace_notes(other), other);
    }
}

//! What one policy may consume, and the check that a policy asks for no
//! more than the operator allows. Both the engine (which sizes its pool for
//! the maximum) and a loaded policy (which runs under its own limits) read
//! these, so they live apart from either.

use std::time::Duration;

/// What one policy may consume: per evaluation (instantiation included),
/// and the size of the component itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Wall time for one call into the policy (instantiation included).
    pub deadline: Duration,
    /// Linear memory of one evaluation, all the component's memories
    /// together, in bytes.
    pub memory_bytes: usize,
    /// The component's size, in bytes.
    pub component_bytes: usize,
    /// Core instances one evaluation may create.
    pub instances: u32,
}

impl Default for Limits {
    /// The defaults admit the SDKs' own examples, a Python one built with
    /// `componentize-py --stub-wasi` included (docs/writing-policies.md
    /// gives their measured needs).
    fn default() -> Self {
        Self {
            deadline: Duration::from_millis(50),
            memory_bytes: 64 << 20,
            component_bytes: 64 << 20,
            instances: 64,
        }
    }
}

impl Limits {
    /// The operator's maxima when none are given: what any one policy may
    /// ask for in its EtcdStatusPolicy.
    pub fn default_maximum() -> Self {
        Self {
            deadline: Duration::from_millis(1000),
            memory_bytes: 256 << 20,
            component_bytes: 128 << 20,
            instances: 128,
        }
    }

    /// The first limit of `self` above `max`, named as a user writes it.
    pub fn exceeding(&self, max: &Limits) -> Option<String> {
        let over = |name: &str, got: u128, max: u128| {
            (got > max).then(|| format!("{name} {got} is above the operator's maximum {max}"))
        };
        over(
            "deadlineMilliseconds",
            self.deadline.as_millis(),
            max.deadline.as_millis(),
        )
        .or_else(|| {
            over(
                "memoryBytes",
                self.memory_bytes as u128,
                max.memory_bytes as u128,
            )
        })
        .or_else(|| {
            over(
                "componentBytes",
                self.component_bytes as u128,
                max.component_bytes as u128,
            )
        })
        .or_else(|| over("instances", self.instances.into(), max.instances.into()))
    }
}

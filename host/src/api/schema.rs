//! Schema fragments schemars cannot derive on its own.

use schemars::{Schema, SchemaGenerator, json_schema};

/// An object the apiserver stores as given (no pruning, no validation):
/// policy settings, which the policy's own schema checks.
pub(crate) fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

//! Argument validation against a tool's JSON schema. STUB: to be implemented.

use serde_json::Value;

/// Validation errors, one line each; empty when the arguments are valid.
pub fn validate(_schema: &Value, _args: &Value) -> Vec<String> {
    Vec::new()
}

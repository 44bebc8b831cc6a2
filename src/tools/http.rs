//! HTTP tools (DESIGN §3). STUB: to be implemented.

use super::CallContext;
use super::outcome::{AttemptResult, ErrorKind, ToolError};
use crate::config::types::{HttpSpec, ToolDef};
use serde_json::Value;

pub async fn run(
    _spec: &HttpSpec,
    _def: &ToolDef,
    _args: &Value,
    _ctx: &CallContext<'_>,
) -> AttemptResult {
    Err(ToolError::new(
        ErrorKind::ToolBug,
        "http tools not implemented yet",
    ))
}

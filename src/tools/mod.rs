//! Tools: running one attempt of a command, HTTP or MCP tool, and checking arguments
//! against a tool's schema. Retries and fallbacks sit above this, in `recovery`.

pub mod command;
pub mod http;
pub mod mcp;
pub mod outcome;
pub mod schema;

use crate::clock::Clock;
use crate::config::types::{ToolDef, ToolKind};
use crate::trace::EventSink;
use outcome::AttemptResult;
use serde_json::Value;

/// What a tool attempt may know about the call it belongs to.
pub struct CallContext<'a> {
    pub run_id: &'a str,
    /// Stable idempotency key: the same across retries and resumes.
    pub call_id: &'a str,
    pub clock: &'a dyn Clock,
    pub events: &'a dyn EventSink,
}

/// Runs one attempt, bounded by the tool's per-attempt timeout.
pub async fn attempt(def: &ToolDef, args: &Value, ctx: &CallContext<'_>) -> AttemptResult {
    match &def.kind {
        ToolKind::Command(spec) => command::run(spec, def, args, ctx).await,
        ToolKind::Http(spec) => http::run(spec, def, args, ctx).await,
        ToolKind::Mcp(spec) => mcp::call(spec, def, args, ctx).await,
    }
}

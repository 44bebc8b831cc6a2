//! Retry policy for tool calls. STUB: one attempt only.

use crate::config::types::ToolDef;
use crate::tools::outcome::AttemptResult;
use crate::tools::{CallContext, attempt};
use serde_json::Value;

/// Returns the final attempt's result and the number of attempts made.
pub async fn call_with_retry(
    def: &ToolDef,
    args: &Value,
    ctx: &CallContext<'_>,
) -> (AttemptResult, u32) {
    (attempt(def, args, ctx).await, 1)
}

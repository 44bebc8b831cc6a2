//! The recovery layer: every tool call goes through [`execute`], which validates,
//! retries transient failures, walks declared fallback chains and always returns data.
//!
//! Order for one call: unknown tool → `unknown_tool` (no call); schema failure →
//! `schema_violation` with the validation errors as the message (no call); the gate
//! (approval, breaker); the tool with retries ([`retry`]); on a failure another tool
//! could fix, the declared fallback chain ([`fallback`], which documents the rules).

pub mod fallback;
pub mod retry;

use crate::config::types::{ToolDef, ToolsConfig};
use crate::prompts::Prompts;
use crate::tools::CallContext;
use crate::tools::outcome::{ErrorKind, ToolError};
use crate::tools::schema;
use serde_json::Value;

/// What the loop learns from one tool call (after retries and fallbacks).
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    /// The JSON the model sees (DESIGN §4).
    pub content: Value,
    pub is_error: bool,
    /// The error kind when it failed.
    pub error: Option<ErrorKind>,
    /// Attempts made (summed over the chain).
    pub attempts: u32,
    /// The fallback tool whose result this is, when not the tool asked for.
    pub via: Option<String>,
}

/// Decided by the loop before each tool in a chain runs (approvals, breakers).
pub enum Gate {
    Run,
    /// Do not run; use this error as the attempt's result.
    Block(ToolError),
    /// Do not run; the run must pause for a person.
    Pause,
}

pub enum Execution {
    Done(CallOutcome),
    /// The gate paused before `tool` ran with `args`. On a fallback hop, `tool` is the
    /// fallback and `args` are the mapped arguments.
    Paused {
        tool: String,
        args: Value,
    },
}

/// Runs a tool call with validation, retries and fallbacks.
pub async fn execute(
    cfg: &ToolsConfig,
    prompts: &Prompts,
    tool: &str,
    args: &Value,
    ctx: &CallContext<'_>,
    gate: &dyn Fn(&ToolDef, &Value) -> Gate,
) -> Execution {
    let Some(def) = cfg.tools.get(tool) else {
        let err = ToolError::new(ErrorKind::UnknownTool, format!("no tool named `{tool}`"));
        return Execution::Done(failed(&err, 0, prompts));
    };
    if let Err(err) = check_args(def, args) {
        return Execution::Done(failed(&err, 0, prompts));
    }
    match gate(def, args) {
        Gate::Run => {}
        // A guard is a decision by policy or a person; no fallback works around it.
        Gate::Block(err) => return Execution::Done(failed(&err, 0, prompts)),
        Gate::Pause => {
            return Execution::Paused {
                tool: tool.to_string(),
                args: args.clone(),
            };
        }
    }
    let (result, attempts) = retry::call_with_retry(def, args, ctx).await;
    match result {
        Ok(content) => Execution::Done(succeeded(content, attempts, None)),
        Err(err) if def.fallback.is_empty() || !fallback::triggers(err.kind) => {
            Execution::Done(failed(&err, attempts, prompts))
        }
        Err(err) => {
            let first = fallback::Tried::new(&def.name, attempts, &err);
            fallback::walk(cfg, prompts, def, args, first, ctx, gate).await
        }
    }
}

/// Runs a fallback hop a person approved after the chain paused before it. The tools
/// before it already failed in the earlier process, so they are not tried again.
pub async fn execute_approved_hop(
    cfg: &ToolsConfig,
    prompts: &Prompts,
    hop: &str,
    args: &Value,
    ctx: &CallContext<'_>,
) -> CallOutcome {
    let Some(def) = cfg.tools.get(hop) else {
        let err = ToolError::new(ErrorKind::UnknownTool, format!("no tool named `{hop}`"));
        return failed(&err, 0, prompts);
    };
    if let Err(err) = check_args(def, args) {
        return failed(&err, 0, prompts);
    }
    match retry::call_with_retry(def, args, ctx).await {
        (Ok(value), attempts) => {
            let content = serde_json::json!({"result": value, "via": def.name, "stale": def.stale});
            succeeded(content, attempts, Some(def.name.clone()))
        }
        (Err(err), attempts) => failed(&err, attempts, prompts),
    }
}

/// `schema_violation` with every validation error, when `args` do not fit `def`.
pub(crate) fn check_args(def: &ToolDef, args: &Value) -> Result<(), ToolError> {
    let errors = schema::validate(&def.input_schema, args);
    if errors.is_empty() {
        return Ok(());
    }
    let message = format!(
        "arguments for {} do not match its schema: {}",
        def.name,
        errors.join("; ")
    );
    Err(ToolError::new(ErrorKind::SchemaViolation, message))
}

fn succeeded(content: Value, attempts: u32, via: Option<String>) -> CallOutcome {
    CallOutcome {
        content,
        is_error: false,
        error: None,
        attempts,
        via,
    }
}

fn failed(err: &ToolError, attempts: u32, prompts: &Prompts) -> CallOutcome {
    CallOutcome {
        content: err.to_model_json(attempts, prompts.hint(err.kind)),
        is_error: true,
        error: Some(err.kind),
        attempts,
        via: None,
    }
}

//! What a tool call comes to (the [`CallOutcome`] the loop learns, built by
//! [`succeeded`] or [`failed`]), the [`Gate`] the loop decides before each tool runs,
//! and the schema check every call passes first: the pieces the chain, its fallbacks
//! and its driver share, below all of them.

use crate::config::types::ToolDef;
use crate::prompts::Prompts;
use crate::schema;
use crate::tools::outcome::{ErrorKind, ToolError};
use serde_json::Value;

/// What the loop learns from one tool call (after retries and fallbacks).
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    /// The JSON the model sees (docs/ARCHITECTURE.md §4).
    pub content: Value,
    pub is_error: bool,
    /// The error kind when it failed.
    pub error: Option<ErrorKind>,
    /// Attempts made (summed over the chain).
    pub attempts: u32,
    /// The fallback tool whose result this is, when not the tool asked for.
    pub via: Option<String>,
    /// What a sub-agent's child run spent (issue 26), counted against this run.
    pub spent: Option<crate::records::Spent>,
}

/// Decided by the loop before each tool in a chain runs (approvals, breakers).
pub enum Gate {
    Run,
    /// Do not run; use this error as the attempt's result.
    Block(ToolError),
    /// Do not run; the run must pause for a person.
    Pause,
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

pub(crate) fn succeeded(content: Value, attempts: u32, via: Option<String>) -> CallOutcome {
    CallOutcome {
        content,
        is_error: false,
        error: None,
        attempts,
        via,
        spent: None,
    }
}

pub(crate) fn failed(err: &ToolError, attempts: u32, prompts: &Prompts) -> CallOutcome {
    CallOutcome {
        content: err.to_model_json(attempts, prompts.hint(err.kind)),
        is_error: true,
        error: Some(err.kind),
        attempts,
        via: None,
        spent: None,
    }
}

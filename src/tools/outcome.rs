//! What a tool call can end as. The error taxonomy of docs/ARCHITECTURE.md §4 lives in
//! [`crate::taxonomy`] (so trace events can name kinds without depending on tools).

pub use crate::taxonomy::{ErrorClass, ErrorKind};
use serde_json::{Value, json};
use std::time::Duration;

/// One failed attempt (or a failure decided without an attempt).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    pub kind: ErrorKind,
    pub message: String,
    /// The service's requested delay before the next attempt.
    pub retry_after: Option<Duration>,
    /// The failure proves the tool did not act (exit 75/69, HTTP 429/503, connection
    /// refused before sending): only then is a non-idempotent tool retried (issue 12).
    pub not_acted: bool,
}

impl ToolError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ToolError {
            kind,
            message: message.into(),
            retry_after: None,
            not_acted: false,
        }
    }

    /// Marks the failure as proof that the tool did not act.
    pub fn not_acted(mut self) -> Self {
        self.not_acted = true;
        self
    }

    /// The JSON object the model sees for this failure (docs/ARCHITECTURE.md §4).
    pub fn to_model_json(&self, attempts: u32, hint: &str) -> Value {
        let mut v = json!({
            "error": self.kind.as_str(),
            "class": self.kind.class().as_str(),
            "message": self.message,
            "retryable": self.kind.is_retryable(),
            "attempts": attempts,
            "hint": hint,
        });
        // When the service said when it takes calls again (docs/ARCHITECTURE.md §3.3).
        if let Some(after) = self
            .retry_after
            .filter(|_| self.kind == ErrorKind::RateLimited)
        {
            v["retry_after_s"] = json!(after.as_secs_f64().ceil() as u64);
        }
        v
    }
}

/// The result of one attempt at running a tool.
pub type AttemptResult = Result<Value, ToolError>;

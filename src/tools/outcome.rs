//! What a tool call can end as, and the error taxonomy of DESIGN §4.
//!
//! Classification lives here, in one match, so nothing else decides retryability.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    Transient,
    Permanent,
    Malformed,
    Guard,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Permanent => "permanent",
            ErrorClass::Malformed => "malformed",
            ErrorClass::Guard => "guard",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    // transient
    Timeout,
    RateLimited,
    Unavailable,
    ServerError,
    // permanent
    InvalidArguments,
    NotFound,
    PermissionDenied,
    Conflict,
    ToolBug,
    /// An HTTP tool was redirected to another origin (or in a loop): never followed.
    Redirect,
    // malformed: no call was made
    SchemaViolation,
    UnknownTool,
    // guard
    CircuitOpen,
    ApprovalDenied,
    Budget,
    ToolDisabled,
    // after a crash: the call may or may not have happened
    OutcomeUnknown,
    /// A declared fallback chain in which every tool failed.
    AllToolsFailed,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 18] = [
        ErrorKind::Timeout,
        ErrorKind::RateLimited,
        ErrorKind::Unavailable,
        ErrorKind::ServerError,
        ErrorKind::InvalidArguments,
        ErrorKind::NotFound,
        ErrorKind::PermissionDenied,
        ErrorKind::Conflict,
        ErrorKind::ToolBug,
        ErrorKind::Redirect,
        ErrorKind::SchemaViolation,
        ErrorKind::UnknownTool,
        ErrorKind::CircuitOpen,
        ErrorKind::ApprovalDenied,
        ErrorKind::Budget,
        ErrorKind::ToolDisabled,
        ErrorKind::OutcomeUnknown,
        ErrorKind::AllToolsFailed,
    ];

    pub fn class(self) -> ErrorClass {
        use ErrorKind::*;
        match self {
            Timeout | RateLimited | Unavailable | ServerError => ErrorClass::Transient,
            InvalidArguments | NotFound | PermissionDenied | Conflict | ToolBug | Redirect
            | OutcomeUnknown | AllToolsFailed => ErrorClass::Permanent,
            SchemaViolation | UnknownTool => ErrorClass::Malformed,
            CircuitOpen | ApprovalDenied | Budget | ToolDisabled => ErrorClass::Guard,
        }
    }

    pub fn is_retryable(self) -> bool {
        self.class() == ErrorClass::Transient
    }

    pub fn as_str(self) -> &'static str {
        use ErrorKind::*;
        match self {
            Timeout => "timeout",
            RateLimited => "rate_limited",
            Unavailable => "unavailable",
            ServerError => "server_error",
            InvalidArguments => "invalid_arguments",
            NotFound => "not_found",
            PermissionDenied => "permission_denied",
            Conflict => "conflict",
            ToolBug => "tool_bug",
            Redirect => "redirect",
            SchemaViolation => "schema_violation",
            UnknownTool => "unknown_tool",
            CircuitOpen => "circuit_open",
            ApprovalDenied => "approval_denied",
            Budget => "budget",
            ToolDisabled => "tool_disabled",
            OutcomeUnknown => "outcome_unknown",
            AllToolsFailed => "all_tools_failed",
        }
    }

    pub fn parse(s: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

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

    /// The JSON object the model sees for this failure (DESIGN §4).
    pub fn to_model_json(&self, attempts: u32, hint: &str) -> Value {
        json!({
            "error": self.kind.as_str(),
            "class": self.kind.class().as_str(),
            "message": self.message,
            "retryable": self.kind.is_retryable(),
            "attempts": attempts,
            "hint": hint,
        })
    }
}

/// The result of one attempt at running a tool.
pub type AttemptResult = Result<Value, ToolError>;

//! The error taxonomy of docs/ARCHITECTURE.md §4: every kind a failed call can end as, and its
//! class.
//!
//! Classification lives here, in one match, so nothing else decides retryability.

use serde::{Deserialize, Serialize};

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
    /// Beyond the per-turn cap of tool calls (issue 12 item 7): not made.
    TooManyCalls,
    // guard
    CircuitOpen,
    ApprovalDenied,
    Budget,
    ToolDisabled,
    /// A `before_tool` hook blocked the call, or failed (issue 26).
    BlockedByHook,
    // after a crash: the call may or may not have happened
    OutcomeUnknown,
    /// A declared fallback chain in which every tool failed.
    AllToolsFailed,
    /// A sub-agent's child run failed or was cancelled (issue 26).
    AgentFailed,
    /// A sub-agent was called deeper than `[policy] max_depth` allows (issue 26).
    DepthLimit,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 22] = [
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
        ErrorKind::TooManyCalls,
        ErrorKind::CircuitOpen,
        ErrorKind::ApprovalDenied,
        ErrorKind::Budget,
        ErrorKind::ToolDisabled,
        ErrorKind::BlockedByHook,
        ErrorKind::OutcomeUnknown,
        ErrorKind::AllToolsFailed,
        ErrorKind::AgentFailed,
        ErrorKind::DepthLimit,
    ];

    pub fn class(self) -> ErrorClass {
        use ErrorKind::*;
        match self {
            Timeout | RateLimited | Unavailable | ServerError => ErrorClass::Transient,
            InvalidArguments | NotFound | PermissionDenied | Conflict | ToolBug | Redirect
            | OutcomeUnknown | AllToolsFailed | AgentFailed => ErrorClass::Permanent,
            SchemaViolation | UnknownTool | TooManyCalls => ErrorClass::Malformed,
            CircuitOpen | ApprovalDenied | Budget | ToolDisabled | BlockedByHook | DepthLimit => {
                ErrorClass::Guard
            }
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
            TooManyCalls => "too_many_calls",
            CircuitOpen => "circuit_open",
            ApprovalDenied => "approval_denied",
            Budget => "budget",
            ToolDisabled => "tool_disabled",
            BlockedByHook => "blocked_by_hook",
            OutcomeUnknown => "outcome_unknown",
            AllToolsFailed => "all_tools_failed",
            AgentFailed => "agent_failed",
            DepthLimit => "depth_limit",
        }
    }

    pub fn parse(s: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

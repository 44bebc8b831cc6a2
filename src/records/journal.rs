//! The journal's records: a call's status and row, a finished call to be journaled, and
//! a stored message and trace event (each with where it sits in the run).

use crate::model::Message;
use crate::trace::TraceEvent;
use serde_json::Value;

/// The journal's view of a call (docs/ARCHITECTURE.md §1, `tool_calls[].status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    Ok,
    Error,
    Pending,
    Unknown,
}

impl CallStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Ok => "ok",
            CallStatus::Error => "error",
            CallStatus::Pending => "pending",
            CallStatus::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<CallStatus> {
        [
            CallStatus::Ok,
            CallStatus::Error,
            CallStatus::Pending,
            CallStatus::Unknown,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct JournalEntry {
    pub step: u32,
    pub idx: u32,
    pub call_id: String,
    pub tool: String,
    pub args: Value,
    pub status: CallStatus,
    /// The call may have begun (its side effect may have happened).
    pub started: bool,
    pub attempts: u32,
    /// What the model saw, once finished.
    pub result: Option<Value>,
    pub is_error: bool,
    pub via: Option<String>,
    /// For a sub-agent's call with an outcome: what its child run spent (issue 26).
    /// Not a column: the driver reads it from the child's row when it loads a step.
    pub spent: Option<super::Spent>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessage {
    pub seq: i64,
    pub step: u32,
    pub message: Message,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub step: u32,
    pub at: i64,
    pub event: TraceEvent,
}

/// A finished call, to be journaled.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    pub call_id: String,
    pub status: CallStatus,
    pub attempts: u32,
    pub result: Value,
    pub is_error: bool,
    pub via: Option<String>,
}

//! An escalation as the queue holds it: its kind, number, a person's decision, and
//! the row (its kind, facts and handover live in `detail`).

use super::RunId;
use super::detail::{EscalationDetail, EscalationKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// A person's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Resolution {
    Approve,
    Deny { reason: String },
    Modify { args: Value },
    Reply { text: String },
}

impl Resolution {
    /// The decision in words ("approved", "denied (reason)", …): the store writes it
    /// into the resolution's outbox notice and the CLI and console show it.
    pub fn describe(&self) -> String {
        match self {
            Resolution::Approve => "approved".into(),
            Resolution::Deny { reason } => format!("denied ({reason})"),
            Resolution::Modify { args } => format!("approved with arguments {args}"),
            Resolution::Reply { text } => format!("replied: {text}"),
        }
    }
}

/// An escalation's number in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EscalationId(pub i64);

impl fmt::Display for EscalationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct EscalationRow {
    pub id: EscalationId,
    pub run_id: RunId,
    pub step: u32,
    pub kind: EscalationKind,
    pub open: bool,
    pub summary: String,
    /// Kind-specific facts (tool, args, call id, digest) and the handover text.
    pub detail: EscalationDetail,
    pub created_at: i64,
    pub resolved_at: Option<i64>,
    pub resolved_by: Option<String>,
    pub resolution: Option<Resolution>,
    pub applied: bool,
}

impl EscalationRow {
    /// `open`, `resolved` (a person decided), or `cancelled` (closed undecided when its
    /// run was cancelled, issue 21).
    pub fn status(&self) -> &'static str {
        match (self.open, &self.resolution) {
            (true, _) => "open",
            (false, Some(_)) => "resolved",
            (false, None) => "cancelled",
        }
    }

    /// The call this escalation blocks, if any.
    pub fn call_id(&self) -> Option<&str> {
        self.detail.facts.call_id().map(|c| c.as_str())
    }
}

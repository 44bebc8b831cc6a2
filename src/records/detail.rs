//! What an escalation is about, typed: its kind, the facts each kind is raised with, and the
//! handover a person reads. Stored as the `detail` JSON of the escalation row; the
//! JSON (and so `escalations show --json`) keeps the field names it always had, including
//! `digest` for approvals and `key` for breakers, which are the same thing: the call's
//! tool + arguments digest.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscalationKind {
    BreakerOpen,
    ApprovalRequired,
    Stuck,
    Question,
    OutcomeUnknown,
    ToolBug,
    AllToolsFailed,
}

impl EscalationKind {
    pub const ALL: [EscalationKind; 7] = [
        EscalationKind::BreakerOpen,
        EscalationKind::ApprovalRequired,
        EscalationKind::Stuck,
        EscalationKind::Question,
        EscalationKind::OutcomeUnknown,
        EscalationKind::ToolBug,
        EscalationKind::AllToolsFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EscalationKind::BreakerOpen => "breaker_open",
            EscalationKind::ApprovalRequired => "approval_required",
            EscalationKind::Stuck => "stuck",
            EscalationKind::Question => "question",
            EscalationKind::OutcomeUnknown => "outcome_unknown",
            EscalationKind::ToolBug => "tool_bug",
            EscalationKind::AllToolsFailed => "all_tools_failed",
        }
    }

    pub fn parse(s: &str) -> Option<EscalationKind> {
        EscalationKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether the run waits for this one (a tool bug is a report for the tool's
    /// owner, and `all_tools_failed` a report that the run answered without tools;
    /// either way the run goes on).
    pub fn pauses(self) -> bool {
        !matches!(
            self,
            EscalationKind::ToolBug | EscalationKind::AllToolsFailed
        )
    }

    /// Whether the run paused in the middle of a tool call (vs. between steps).
    pub fn blocks_a_call(self) -> bool {
        matches!(
            self,
            EscalationKind::ApprovalRequired
                | EscalationKind::Question
                | EscalationKind::OutcomeUnknown
        )
    }
}

impl fmt::Display for EscalationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tool call's id as the model gave it (the idempotency key of its attempts).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallId(pub String);

impl CallId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for CallId {
    fn from(s: &str) -> CallId {
        CallId(s.to_string())
    }
}

/// A call that waits for a person's approval: `tool` with `args` (a fallback hop of
/// `requested_tool`, when they differ).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalFacts {
    pub call_id: CallId,
    pub tool: String,
    pub args: Value,
    /// The call key (tool + args digest) the approval is bound to.
    pub digest: String,
    pub requested_tool: String,
}

/// The model's `ask_user` question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionFacts {
    pub call_id: CallId,
    pub tool: String,
    pub question: String,
}

/// One call of a tool (an unknown outcome, a tool bug).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallFacts {
    pub call_id: CallId,
    pub tool: String,
    pub args: Value,
}

/// The call whose circuit opened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BreakerFacts {
    pub call_id: CallId,
    pub tool: String,
    pub args: Value,
    /// The circuit's call key (tool + args digest).
    #[serde(rename = "key")]
    pub digest: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StuckFacts {
    pub tool: String,
}

/// One withdrawn tool and how many times it failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolFailures {
    pub tool: String,
    pub failures: u32,
}

/// Every tool the run had, each withdrawn after its failures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllToolsFailedFacts {
    pub tools: Vec<ToolFailures>,
}

/// The kind-specific facts; the kind follows from the variant.
#[derive(Debug, Clone, PartialEq)]
pub enum Facts {
    ApprovalRequired(ApprovalFacts),
    Question(QuestionFacts),
    OutcomeUnknown(CallFacts),
    BreakerOpen(BreakerFacts),
    Stuck(StuckFacts),
    ToolBug(CallFacts),
    AllToolsFailed(AllToolsFailedFacts),
}

/// What a person needs to act without redoing the agent's work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handover {
    pub request: String,
    /// Successful calls, as `tool(args) → result` lines.
    pub checked: Vec<String>,
    pub problem: String,
    pub next_step: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EscalationDetail {
    pub facts: Facts,
    pub handover: Handover,
}

impl Facts {
    pub fn kind(&self) -> EscalationKind {
        match self {
            Facts::ApprovalRequired(_) => EscalationKind::ApprovalRequired,
            Facts::Question(_) => EscalationKind::Question,
            Facts::OutcomeUnknown(_) => EscalationKind::OutcomeUnknown,
            Facts::BreakerOpen(_) => EscalationKind::BreakerOpen,
            Facts::Stuck(_) => EscalationKind::Stuck,
            Facts::ToolBug(_) => EscalationKind::ToolBug,
            Facts::AllToolsFailed(_) => EscalationKind::AllToolsFailed,
        }
    }

    pub fn tool(&self) -> &str {
        match self {
            Facts::ApprovalRequired(f) => &f.tool,
            Facts::Question(f) => &f.tool,
            Facts::OutcomeUnknown(f) | Facts::ToolBug(f) => &f.tool,
            Facts::BreakerOpen(f) => &f.tool,
            Facts::Stuck(f) => &f.tool,
            // About every tool, not one: the facts list them.
            Facts::AllToolsFailed(_) => "",
        }
    }

    /// The arguments of the call concerned, when there is one.
    pub fn args(&self) -> Option<&Value> {
        match self {
            Facts::ApprovalRequired(f) => Some(&f.args),
            Facts::OutcomeUnknown(f) | Facts::ToolBug(f) => Some(&f.args),
            Facts::BreakerOpen(f) => Some(&f.args),
            Facts::Question(_) | Facts::Stuck(_) | Facts::AllToolsFailed(_) => None,
        }
    }

    /// The call this escalation is about, if any.
    pub fn call_id(&self) -> Option<&CallId> {
        match self {
            Facts::ApprovalRequired(f) => Some(&f.call_id),
            Facts::Question(f) => Some(&f.call_id),
            Facts::OutcomeUnknown(f) | Facts::ToolBug(f) => Some(&f.call_id),
            Facts::BreakerOpen(f) => Some(&f.call_id),
            Facts::Stuck(_) | Facts::AllToolsFailed(_) => None,
        }
    }

    fn to_json(&self) -> Result<Value, serde_json::Error> {
        match self {
            Facts::ApprovalRequired(f) => serde_json::to_value(f),
            Facts::Question(f) => serde_json::to_value(f),
            Facts::OutcomeUnknown(f) | Facts::ToolBug(f) => serde_json::to_value(f),
            Facts::BreakerOpen(f) => serde_json::to_value(f),
            Facts::Stuck(f) => serde_json::to_value(f),
            Facts::AllToolsFailed(f) => serde_json::to_value(f),
        }
    }

    fn from_json(kind: EscalationKind, v: Value) -> Result<Facts, serde_json::Error> {
        use serde_json::from_value;
        Ok(match kind {
            EscalationKind::ApprovalRequired => Facts::ApprovalRequired(from_value(v)?),
            EscalationKind::Question => Facts::Question(from_value(v)?),
            EscalationKind::OutcomeUnknown => Facts::OutcomeUnknown(from_value(v)?),
            EscalationKind::BreakerOpen => Facts::BreakerOpen(from_value(v)?),
            EscalationKind::Stuck => Facts::Stuck(from_value(v)?),
            EscalationKind::ToolBug => Facts::ToolBug(from_value(v)?),
            EscalationKind::AllToolsFailed => Facts::AllToolsFailed(from_value(v)?),
        })
    }
}

impl EscalationDetail {
    pub fn kind(&self) -> EscalationKind {
        self.facts.kind()
    }

    /// The stored and `--json` form: the facts' fields plus `handover`.
    pub fn to_json(&self) -> Value {
        // Plain structs of strings and JSON values always serialise.
        let mut v = self.facts.to_json().unwrap_or_default();
        v["handover"] = serde_json::to_value(&self.handover).unwrap_or_default();
        v
    }

    /// Reads a stored detail of an escalation of `kind`; a missing field is an error,
    /// never an empty string.
    pub fn from_json(kind: EscalationKind, mut v: Value) -> Result<Self, serde_json::Error> {
        let handover = v
            .as_object_mut()
            .and_then(|o| o.remove("handover"))
            .unwrap_or(Value::Null);
        Ok(EscalationDetail {
            handover: serde_json::from_value(handover)?,
            facts: Facts::from_json(kind, v)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_breaker_detail_keeps_its_key_field_and_reads_back() {
        let stored = json!({
            "call_id": "c1", "tool": "refund", "args": {"id": 1}, "key": "refund#ab",
            "handover": {"request": "r", "checked": [], "problem": "p", "next_step": "n"}
        });
        let d = EscalationDetail::from_json(EscalationKind::BreakerOpen, stored.clone())
            .expect("reads");
        assert_eq!(d.to_json(), stored);
        assert!(matches!(&d.facts, Facts::BreakerOpen(f) if f.digest == "refund#ab"));
    }

    #[test]
    fn a_missing_field_is_an_error_not_an_empty_string() {
        let stored = json!({"call_id": "c1", "tool": "refund", "args": {},
            "handover": {"request": "r", "checked": [], "problem": "p", "next_step": "n"}});
        assert!(EscalationDetail::from_json(EscalationKind::BreakerOpen, stored).is_err());
    }
}

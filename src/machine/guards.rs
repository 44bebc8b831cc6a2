//! The loop's answers to the recovery chain's gates: approval rules and people's
//! decisions (step 3), then the breaker and withdrawn tools (step 4).

use super::policy::{call_key, circuit_open, needs_approval};
use super::state::LoopState;
use crate::config::{Policy, ToolDef};
use crate::records::{EscalationRow, Facts, Resolution};
use crate::recovery::Gate;
use crate::recovery::chain::Guards;
use crate::taxonomy::ErrorKind;
use crate::tools::outcome::ToolError;
use serde_json::Value;

pub struct RunGuards<'a> {
    pub state: &'a LoopState,
    pub policy: &'a Policy,
    /// The decided escalation for the call, if any.
    pub decision: Option<&'a EscalationRow>,
}

impl Guards for RunGuards<'_> {
    fn approval(&self, def: &ToolDef, args: &Value) -> Gate {
        if needs_approval(def, args, self.policy) {
            return approval_gate(self.decision, &def.name, args);
        }
        Gate::Run
    }

    fn breaker(&self, def: &ToolDef, args: &Value) -> Option<ToolError> {
        if self.state.disabled.contains(&def.name) {
            return Some(ToolError::new(
                ErrorKind::ToolDisabled,
                format!("{} was withdrawn after repeated failures", def.name),
            ));
        }
        circuit_open(self.state, &def.name, args).then(|| {
            ToolError::new(
                ErrorKind::CircuitOpen,
                format!(
                    "{} failed repeatedly with these arguments; the circuit is open",
                    def.name
                ),
            )
        })
    }
}

/// Approval for exactly this tool and these arguments (their digest), for this call.
pub(crate) fn approval_gate(decision: Option<&EscalationRow>, tool: &str, args: &Value) -> Gate {
    let Some((d, Facts::ApprovalRequired(facts))) = decision.map(|d| (d, &d.detail.facts)) else {
        return Gate::Pause;
    };
    let digest = call_key(tool, args);
    match d.resolution.as_ref() {
        Some(Resolution::Approve) if facts.digest == digest => Gate::Run,
        // Modified arguments are approved as given by the person.
        Some(Resolution::Modify { args: approved }) if call_key(tool, approved) == digest => {
            Gate::Run
        }
        Some(Resolution::Deny { reason }) if facts.tool == tool => Gate::Block(ToolError::new(
            ErrorKind::ApprovalDenied,
            format!("a person declined {tool}: {reason}"),
        )),
        _ => Gate::Pause,
    }
}

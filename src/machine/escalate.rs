//! Handover summaries: what a person needs to act on an escalation without redoing
//! the agent's work — the request, what was checked, the problem, a next step.

use crate::model::{Message, Part, Role};
use crate::records::{EscalationDetail, EscalationKind, Facts, Handover};

/// The facts an escalation is raised with.
pub struct Raise<'a> {
    /// The transcript so far (system prompt first).
    pub messages: &'a [Message],
    /// What went wrong, in one or two sentences.
    pub problem: String,
    /// Kind-specific facts: call_id, tool, args, digest, question…
    pub facts: Facts,
}

impl Raise<'_> {
    /// (one-line summary, detail with the handover).
    pub fn build(self) -> (String, EscalationDetail) {
        let handover = Handover {
            request: request_line(self.messages),
            checked: checked_calls(self.messages),
            next_step: suggested_next_step(self.facts.kind(), self.facts.tool()),
            problem: self.problem,
        };
        let summary = first_sentence(&handover.problem);
        let detail = EscalationDetail {
            facts: self.facts,
            handover,
        };
        (summary, detail)
    }
}

fn request_line(messages: &[Message]) -> String {
    let task = messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(Message::joined_text)
        .unwrap_or_default();
    truncate(&task.split_whitespace().collect::<Vec<_>>().join(" "), 240)
}

/// Every call with its outcome: `tool(args) → result`, or `tool(args) ✗ kind: message`.
fn checked_calls(messages: &[Message]) -> Vec<String> {
    let mut calls = std::collections::HashMap::new();
    let mut out = Vec::new();
    for m in messages {
        for p in &m.content {
            match p {
                Part::ToolCall { id, name, args } => {
                    calls.insert(
                        id.clone(),
                        format!("{name}({})", truncate(&args.to_string(), 80)),
                    );
                }
                Part::ToolResult {
                    call_id,
                    content,
                    is_error,
                } => {
                    let call = calls
                        .get(call_id)
                        .cloned()
                        .unwrap_or_else(|| call_id.clone());
                    if *is_error {
                        // Failed calls were checked too: a breaker handover that said
                        // "nothing yet" after three failures hid the work (issue 13).
                        let kind = content["error"].as_str().unwrap_or("error");
                        let message = content["message"].as_str().unwrap_or_default();
                        out.push(format!("{call} ✗ {kind}: {}", truncate(message, 120)));
                    } else {
                        out.push(format!("{call} → {}", truncate(&content.to_string(), 120)));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

fn suggested_next_step(kind: EscalationKind, tool: &str) -> String {
    match kind {
        EscalationKind::ApprovalRequired => format!(
            "Review the call to {tool} with the arguments above; approve it (--approve), change \
             its arguments (--modify JSON) or refuse it (--deny REASON)."
        ),
        EscalationKind::Question => {
            "Answer the question (--reply TEXT), or decline (--deny REASON).".into()
        }
        EscalationKind::BreakerOpen => format!(
            "Check {tool}'s service. Once it is healthy, --approve closes the circuit so the run \
             may try again; --reply TEXT passes a note to the model instead."
        ),
        EscalationKind::Stuck => {
            "Read the last steps; give the model a hint (--reply TEXT), let it \
             try again (--approve), or stop the run (--deny REASON)."
                .into()
        }
        EscalationKind::OutcomeUnknown => format!(
            "Check whether the call to {tool} took effect. If it did, say what happened \
             (--reply TEXT); if it did not, --approve runs it again; --deny REASON tells the \
             model it did not happen."
        ),
        EscalationKind::ToolBug => format!(
            "The tool {tool} crashed or answered nonsense: its owner should look at the error \
             above. Acknowledge with --reply TEXT."
        ),
        EscalationKind::AllToolsFailed => {
            "Every tool was withdrawn and the run completed with an answer given without \
             tools: check what it says it could not verify, fix the tools above, and \
             acknowledge with --reply TEXT."
                .into()
        }
    }
}

fn first_sentence(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    truncate(line, 160)
}

/// Cut for people at a word boundary (issue 27), as every human view cuts text.
fn truncate(s: &str, max: usize) -> String {
    crate::text::truncate(s, max)
}

//! Handover summaries: what a person needs to act on an escalation without redoing
//! the agent's work — the request, what was checked, the problem, a next step.

use crate::model::{Message, Part, Role};
use crate::store::EscalationKind;
use serde_json::{Value, json};

/// The facts an escalation is raised with.
pub struct Handover<'a> {
    pub kind: EscalationKind,
    /// The transcript so far (system prompt first).
    pub messages: &'a [Message],
    /// What went wrong, in one or two sentences.
    pub problem: String,
    /// Kind-specific facts: call_id, tool, args, digest, question…
    pub facts: Value,
}

impl Handover<'_> {
    /// (one-line summary, detail JSON with the handover text).
    pub fn build(self) -> (String, Value) {
        let request = request_line(self.messages);
        let checked = checked_calls(self.messages);
        let next = suggested_next_step(self.kind, &self.facts);
        let summary = first_sentence(&self.problem);
        let mut detail = self.facts;
        if !detail.is_object() {
            detail = json!({});
        }
        detail["handover"] = json!({
            "request": request,
            "checked": checked,
            "problem": self.problem,
            "next_step": next,
        });
        (summary, detail)
    }
}

/// The handover as people read it (for `escalations show`).
pub fn render(detail: &Value) -> String {
    let h = &detail["handover"];
    let mut out = format!("Request: {}\n", h["request"].as_str().unwrap_or("?"));
    let checked: Vec<&str> = h["checked"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if checked.is_empty() {
        out.push_str("Checked: nothing yet\n");
    } else {
        out.push_str("Checked:\n");
        for c in checked {
            out.push_str(&format!("  - {c}\n"));
        }
    }
    out.push_str(&format!(
        "Problem: {}\n",
        h["problem"].as_str().unwrap_or("?")
    ));
    out.push_str(&format!(
        "Suggested next step: {}\n",
        h["next_step"].as_str().unwrap_or("?")
    ));
    out
}

fn request_line(messages: &[Message]) -> String {
    let task = messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(Message::joined_text)
        .unwrap_or_default();
    truncate(&task.split_whitespace().collect::<Vec<_>>().join(" "), 240)
}

/// Successful calls, as `tool(args) → result` lines.
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
                    is_error: false,
                } => {
                    let call = calls
                        .get(call_id)
                        .cloned()
                        .unwrap_or_else(|| call_id.clone());
                    out.push(format!("{call} → {}", truncate(&content.to_string(), 120)));
                }
                _ => {}
            }
        }
    }
    out
}

fn suggested_next_step(kind: EscalationKind, facts: &Value) -> String {
    let tool = facts["tool"].as_str().unwrap_or("the tool");
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
        EscalationKind::AllToolsFailed => "Check the failing services; the run finished with \
             a disclosed best-effort answer. Acknowledge with --reply TEXT."
            .into(),
        EscalationKind::ToolBug => format!(
            "The tool {tool} crashed or answered nonsense: its owner should look at the error \
             above. Acknowledge with --reply TEXT."
        ),
    }
}

fn first_sentence(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    truncate(line, 160)
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handover_names_request_checks_problem_and_next_step() {
        let messages = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "Refund order ORD-1001."),
            Message {
                role: Role::Assistant,
                content: vec![Part::ToolCall {
                    id: "c1".into(),
                    name: "lookup".into(),
                    args: json!({"id": "ORD-1001"}),
                }],
            },
            Message::tool_result("c1", json!({"status": "delivered"}), false),
        ];
        let (summary, detail) = Handover {
            kind: EscalationKind::BreakerOpen,
            messages: &messages,
            problem: "refund failed 3 times with unavailable (3 attempts each)".into(),
            facts: json!({"tool": "refund"}),
        }
        .build();
        assert_eq!(
            summary,
            "refund failed 3 times with unavailable (3 attempts each)"
        );
        let text = render(&detail);
        assert!(text.starts_with("Request: Refund order ORD-1001.\nChecked:\n  - lookup({\"id\":\"ORD-1001\"}) → {\"status\":\"delivered\"}\n"), "{text}");
        assert!(
            text.contains("Suggested next step: Check refund's service."),
            "{text}"
        );
    }
}

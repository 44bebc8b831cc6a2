//! What a run did, in the terms a regression test compares: its tool calls in order
//! with their arguments and outcomes, the escalations it raised, its final status and
//! answer. Read from `runs show --json`; written into a case as its expectations, and
//! rendered as lines for [`super::diff`].

use super::compact;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observed {
    pub calls: Vec<Call>,
    /// Escalation kinds, oldest first.
    pub escalations: Vec<String>,
    pub status: String,
    pub answer: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    /// The call's id as a script names it (`call_{turn}_{index}`).
    pub id: String,
    pub tool: String,
    pub args: Value,
    pub outcome: Outcome,
}

/// How a call ended, as the model was told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Outcome {
    Ok,
    Error {
        kind: String,
        class: String,
        /// Kept for the classes whose message is the point (validation errors and
        /// guards); a transient error's message names attempts and times that vary.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// No result: the run stopped before the call ran (waiting for approval).
    Pending,
}

impl Outcome {
    fn from_result(content: &Value, is_error: bool) -> Outcome {
        if !is_error {
            return Outcome::Ok;
        }
        let text = |k: &str| content.get(k).and_then(Value::as_str).map(str::to_string);
        let kind = text("error").unwrap_or_else(|| "error".into());
        let class = text("class").unwrap_or_default();
        let message = matches!(class.as_str(), "malformed" | "guard")
            .then(|| text("message"))
            .flatten();
        Outcome::Error {
            kind,
            class,
            message,
        }
    }

    fn line(&self) -> String {
        match self {
            Outcome::Ok => "ok".into(),
            Outcome::Pending => "no result (the run stopped before it ran)".into(),
            Outcome::Error {
                kind,
                class,
                message,
            } => match message {
                Some(m) => format!("error {kind} ({class}): {m}"),
                None => format!("error {kind} ({class})"),
            },
        }
    }
}

impl Observed {
    /// From a run's `runs show --json` document. Call ids are renamed to the
    /// script's `call_{turn}_{index}` (a provider's ids are random), in the order the
    /// model made them; `ids` gets every (recorded id, new id) pair.
    pub fn from_run(run: &Value, ids: &mut Vec<(String, String)>) -> Observed {
        let messages = run["messages"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let mut calls = Vec::new();
        let mut turn = 0;
        for m in messages.iter().filter(|m| m["role"] == "assistant") {
            let parts = m["content"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            let made = parts.iter().filter(|p| p["type"] == "tool_call");
            for (i, part) in made.enumerate() {
                let recorded = part["id"].as_str().unwrap_or_default().to_string();
                let id = format!("call_{turn}_{i}");
                let outcome = result_of(messages, &recorded)
                    .map_or(Outcome::Pending, |(c, e)| Outcome::from_result(c, e));
                ids.push((recorded, id.clone()));
                calls.push(Call {
                    id,
                    tool: part["name"].as_str().unwrap_or_default().to_string(),
                    args: super::canonical(&part["args"]),
                    outcome,
                });
            }
            turn += 1;
        }
        pending_calls(run, turn, ids, &mut calls);
        let escalations = run["escalations"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
            .iter()
            .filter_map(|e| e["kind"].as_str().map(str::to_string))
            .collect();
        let answer = match &run["answer"] {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            // A structured answer (output_schema) is shown as JSON.
            other => Some(compact(other)),
        };
        Observed {
            calls,
            escalations,
            status: run["status"].as_str().unwrap_or_default().to_string(),
            answer,
        }
    }

    /// One line per fact, in a fixed order, for a line diff.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for c in &self.calls {
            out.push(format!(
                "call {} {} {} -> {}",
                c.id,
                c.tool,
                compact(&c.args),
                c.outcome.line()
            ));
        }
        for kind in &self.escalations {
            out.push(format!("escalation {kind}"));
        }
        out.push(format!("status {}", self.status));
        match &self.answer {
            None => out.push("answer (none)".into()),
            Some(a) => out.extend(a.lines().map(|l| format!("answer | {l}"))),
        }
        out
    }
}

/// Calls journaled in a step that was not committed (the run stopped for an approval
/// before the step's messages were written): they come after the transcript's, as
/// the model's next turn.
fn pending_calls(run: &Value, turn: usize, ids: &mut Vec<(String, String)>, calls: &mut Vec<Call>) {
    let journal = run["tool_calls"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let seen: Vec<String> = ids.iter().map(|(recorded, _)| recorded.clone()).collect();
    let unseen = journal
        .iter()
        .filter(|j| !seen.iter().any(|s| j["call_id"] == s.as_str()));
    for (i, j) in unseen.enumerate() {
        let id = format!("call_{turn}_{i}");
        ids.push((
            j["call_id"].as_str().unwrap_or_default().to_string(),
            id.clone(),
        ));
        calls.push(Call {
            id,
            tool: j["tool"].as_str().unwrap_or_default().to_string(),
            args: super::canonical(&j["args"]),
            outcome: Outcome::Pending,
        });
    }
}

/// The tool result answering `call_id` in a transcript: (content, is_error).
pub fn result_of<'a>(messages: &'a [Value], call_id: &str) -> Option<(&'a Value, bool)> {
    messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .flat_map(|m| m["content"].as_array().map(Vec::as_slice).unwrap_or(&[]))
        .find(|p| p["type"] == "tool_result" && p["call_id"] == call_id)
        .map(|p| (&p["content"], p["is_error"].as_bool().unwrap_or(false)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run() -> Value {
        json!({
            "status": "completed", "answer": "30 days.\nThanks.",
            "escalations": [{"kind": "stuck"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_call", "id": "abc", "name": "a", "args": {"z": 1, "b": 2}},
                    {"type": "tool_call", "id": "def", "name": "b", "args": {}}]},
                {"role": "tool", "content": [
                    {"type": "tool_result", "call_id": "abc", "content": {"x": 1}, "is_error": false},
                    {"type": "tool_result", "call_id": "def", "is_error": true, "content":
                        {"error": "schema_violation", "class": "malformed", "message": "q is required"}}]},
                {"role": "assistant", "content": [{"type": "text", "text": "30 days."}]}
            ]
        })
    }

    #[test]
    fn calls_are_renamed_as_a_script_names_them_and_rendered_in_order() {
        let mut ids = Vec::new();
        let o = Observed::from_run(&run(), &mut ids);
        assert_eq!(
            ids,
            [
                ("abc".to_string(), "call_0_0".to_string()),
                ("def".to_string(), "call_0_1".to_string())
            ]
        );
        assert_eq!(
            o.lines(),
            [
                r#"call call_0_0 a {"b":2,"z":1} -> ok"#,
                r#"call call_0_1 b {} -> error schema_violation (malformed): q is required"#,
                "escalation stuck",
                "status completed",
                "answer | 30 days.",
                "answer | Thanks.",
            ]
        );
    }

    #[test]
    fn a_call_without_a_result_is_pending() {
        let mut v = run();
        v["messages"].as_array_mut().unwrap().truncate(2);
        let o = Observed::from_run(&v, &mut Vec::new());
        assert_eq!(o.calls[1].outcome, Outcome::Pending);
    }
}

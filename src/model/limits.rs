//! Limits on what a model sends (docs/ARCHITECTURE.md §3.5, issue 12
//! item 7): nothing a model answers may exhaust the machine or be stored in a form that
//! cannot be read back.
//!
//! - a response body is read up to 16 MiB and refused beyond it (`wire`, issue 15);
//! - a turn's tool calls with duplicate ids, or arguments nested deeper than
//!   [`MAX_DEPTH`], refuse the response ([`check_response`], called by
//!   [`super::Provider::complete`] for every provider, the script model included);
//! - calls beyond [`MAX_CALLS_PER_TURN`] in one turn are answered `malformed` by the
//!   loop without running (the transcript keeps one result per call);
//! - a tool result nested deeper than [`MAX_DEPTH`] becomes a `tool_bug` (in
//!   `tools::attempt`).
//!
//! serde_json refuses to parse JSON nested deeper than 128 levels, so anything deeper
//! than that which was stored could never be read back (`runs show`, `resume`); 64
//! leaves room for the envelopes agentrun wraps around arguments and results.

use super::ModelResponse;
use serde_json::Value;
use std::collections::HashSet;

pub const MAX_CALLS_PER_TURN: usize = 64;
pub const MAX_DEPTH: usize = 64;

/// How deeply `v` nests arrays and objects (a scalar is 0).
pub fn depth(v: &Value) -> usize {
    // Iterative: a hostile value must not exhaust the stack either.
    let mut deepest = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(items) => {
                deepest = deepest.max(d + 1);
                stack.extend(items.iter().map(|i| (i, d + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(d + 1);
                stack.extend(map.values().map(|i| (i, d + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Why a response is refused, for `ModelError::BadResponse`.
pub fn check_response(resp: &ModelResponse) -> Result<(), String> {
    let mut seen = HashSet::new();
    for call in resp.message.tool_calls() {
        if !seen.insert(call.id.clone()) {
            return Err(format!(
                "two tool calls share the id `{}`; one approval or outcome could cover both, so the response is refused",
                call.id
            ));
        }
        let d = depth(&call.args);
        if d > MAX_DEPTH {
            return Err(format!(
                "the arguments of tool call `{}` nest {d} levels deep, more than {MAX_DEPTH}",
                call.id
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, Part, Role, StopReason, Usage};
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |v, _| json!([v]))
    }

    fn response(calls: &[(&str, Value)]) -> ModelResponse {
        ModelResponse {
            message: Message {
                role: Role::Assistant,
                content: calls
                    .iter()
                    .map(|(id, args)| Part::ToolCall {
                        id: id.to_string(),
                        name: "t".into(),
                        args: args.clone(),
                    })
                    .collect(),
            },
            usage: Usage::default(),
            stop: StopReason::ToolUse,
            model: "m".into(),
        }
    }

    #[test]
    fn depth_counts_containers() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!({"a": [1, {"b": []}]})), 4);
        assert_eq!(depth(&nested(200)), 200);
    }

    #[test]
    fn duplicate_ids_and_deep_arguments_are_refused() {
        assert_eq!(
            check_response(&response(&[("a", json!({})), ("b", json!({}))])),
            Ok(())
        );
        let dup = check_response(&response(&[("a", json!({})), ("a", json!({}))]));
        assert!(dup.unwrap_err().contains("share the id `a`"));
        assert_eq!(check_response(&response(&[("a", nested(64))])), Ok(()));
        let deep = check_response(&response(&[("a", nested(65))]));
        assert!(deep.unwrap_err().contains("65 levels"));
    }
}

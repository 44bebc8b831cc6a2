//! Token counts when a provider reports none (issue 22: a stream without usage never
//! tripped `max_tokens` or `max_cost`). The rule is the common rough one — a token is
//! about four bytes of text — applied to what the request and the answer carry: the
//! system prompt, the note, each message's text, call arguments and results (with a
//! little framing), the tool schemas. It overcounts JSON and non-English text a little
//! and undercounts nothing a provider bills for, so a budget trips no later than it
//! would on the provider's own count by much. The context size estimate for compaction
//! ([`crate::machine::context`]) uses the same rule.

use super::{Message, ModelRequest, ModelResponse, Part, Usage};
use serde_json::Value;

/// About four bytes a token.
pub fn approx_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// A message's size in bytes as a provider sees it, near enough: its text, call
/// arguments and results, plus framing.
pub fn message_bytes(m: &Message) -> usize {
    16 + m
        .content
        .iter()
        .map(|p| match p {
            Part::Text { text } => text.len(),
            Part::ToolCall { id, name, args } => id.len() + name.len() + json_len(args) + 16,
            Part::ToolResult {
                call_id, content, ..
            } => call_id.len() + json_len(content) + 16,
        })
        .sum::<usize>()
}

fn json_len(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len() + 2,
        v => v.to_string().len(),
    }
}

/// The input tokens of `req`, estimated: what a rate limit reserves for it before
/// it is sent (with its output cap).
pub fn request_tokens(req: &ModelRequest<'_>) -> u64 {
    let tools: usize = req
        .tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.input_schema.to_string().len() + 16)
        .sum();
    let input = req.system.len()
        + req.note.len()
        + tools
        + req.messages.iter().map(message_bytes).sum::<usize>();
    approx_tokens(input)
}

/// The usage of `req` answered by `resp`, estimated.
pub fn usage(req: &ModelRequest<'_>, resp: &ModelResponse) -> Usage {
    Usage {
        input: request_tokens(req),
        output: approx_tokens(message_bytes(&resp.message)),
        estimated: true,
        ..Default::default()
    }
}

/// `resp` with an estimate in place of a usage the provider left empty.
pub fn fill(req: &ModelRequest<'_>, mut resp: ModelResponse) -> ModelResponse {
    if resp.usage.input == 0 && resp.usage.output == 0 {
        resp.usage = usage(req, &resp);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Purpose, Role, StopReason, ToolSpec};
    use serde_json::json;

    #[test]
    fn an_empty_usage_is_estimated_and_a_reported_one_kept() {
        let msgs = [Message::text(Role::User, "x".repeat(400))];
        let tools = [ToolSpec {
            name: "t".into(),
            description: "d".repeat(100),
            input_schema: json!({}),
        }];
        let req = ModelRequest {
            system: &"s".repeat(200),
            messages: &msgs,
            note: "",
            cache_key: "",
            tools: &tools,
            max_output_tokens: 10,
            live: None,
            purpose: Purpose::Step,
            turns_left_out: 0,
            output: None,
            limits: None,
        };
        let resp = |usage| ModelResponse {
            message: Message::text(Role::Assistant, "y".repeat(84)),
            usage,
            stop: StopReason::EndTurn,
            model: "m".into(),
        };
        let got = fill(&req, resp(Usage::default())).usage;
        // 200 + (16 + 400) + (1 + 100 + 2 + 16) bytes in, 16 + 84 out.
        assert_eq!((got.input, got.output, got.estimated), (184, 25, true));
        let reported = Usage {
            input: 7,
            output: 3,
            ..Default::default()
        };
        assert_eq!(fill(&req, resp(reported)).usage, reported);
    }
}

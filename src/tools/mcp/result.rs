//! Classifying how an MCP call ended (the rules are listed in `mcp/mod.rs`).

use super::server::CallEnded;
use crate::config::types::{McpSpec, ToolDef};
use crate::tools::outcome::{AttemptResult, ErrorClass, ErrorKind, ToolError};
use serde_json::Value;
use std::time::Duration;

const INVALID_PARAMS: i32 = -32602;
const METHOD_NOT_FOUND: i32 = -32601;
const INTERNAL_ERROR: i32 = -32603;

pub fn attempt_result(def: &ToolDef, spec: &McpSpec, ended: CallEnded) -> AttemptResult {
    let name = &def.name;
    match ended {
        CallEnded::Answered { result, .. } => answered(def, spec, &result),
        CallEnded::Rpc { code, message } => {
            let kind = match code {
                INVALID_PARAMS => ErrorKind::InvalidArguments,
                METHOD_NOT_FOUND => ErrorKind::NotFound,
                // Like HTTP 500: transient, and for a tool that is not idempotent the
                // retry layer makes it `outcome_unknown` (it may have acted).
                INTERNAL_ERROR => ErrorKind::ServerError,
                _ => ErrorKind::ToolBug,
            };
            Err(ToolError::new(
                kind,
                format!(
                    "{name}: {} (JSON-RPC {code})",
                    cap_text(&message, spec.output_cap)
                ),
            ))
        }
        // Nothing was sent: safe to retry whatever the tool.
        CallEnded::Unreachable {
            message,
            retry_after,
        } => {
            let mut err = ToolError::new(
                ErrorKind::Unavailable,
                format!("MCP server {}: {message}", spec.server),
            )
            .not_acted();
            err.retry_after = retry_after;
            Err(err)
        }
        // Sent, then lost: retried only when idempotent (the retry layer decides).
        CallEnded::Lost { message } => Err(ToolError::new(
            ErrorKind::Unavailable,
            format!(
                "MCP server {} went away during the call ({message}); it is restarted for the next attempt",
                spec.server
            ),
        )),
        CallEnded::TimedOut => {
            let limit = humantime::format_duration(def.retry.timeout);
            Err(ToolError::new(
                ErrorKind::Timeout,
                format!("{name} exceeded {limit}"),
            ))
        }
        CallEnded::NotOffered { offered } => Err(ToolError::new(
            ErrorKind::NotFound,
            format!(
                "MCP server {} no longer offers `{}` (it did when this run started; it now offers: {})",
                spec.server,
                spec.tool,
                if offered.is_empty() {
                    "nothing".into()
                } else {
                    offered.join(", ")
                }
            ),
        )),
    }
}

/// A `CallToolResult`: its content as the model should see it, or the tool's error.
fn answered(def: &ToolDef, spec: &McpSpec, result: &Value) -> AttemptResult {
    let content = content_of(result);
    if result.get("isError").and_then(Value::as_bool) != Some(true) {
        return Ok(capped(content, spec.output_cap));
    }
    if let Some(mut err) = named_error(&def.name, &content) {
        err.message = cap_text(&err.message, spec.output_cap);
        return Err(err);
    }
    let text = match &content {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let message = format!("{}: {}", def.name, crate::tools::command::tail(&text, 2000));
    Err(ToolError::new(ErrorKind::ToolBug, message))
}

/// Structured content when present, else the text blocks (JSON when they parse), else
/// the content blocks as they are.
fn content_of(result: &Value) -> Value {
    if let Some(s) = result.get("structuredContent").filter(|v| !v.is_null()) {
        return s.clone();
    }
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let texts: Option<Vec<&str>> = blocks
        .iter()
        .map(|b| {
            (b.get("type").and_then(Value::as_str) == Some("text"))
                .then(|| b.get("text").and_then(Value::as_str))
                .flatten()
        })
        .collect();
    match texts {
        Some(t) if !t.is_empty() => {
            let text = t.join("\n");
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        }
        _ => Value::Array(blocks),
    }
}

/// `{"error": KIND, "message": ...}` from the server, when KIND is one a tool may use.
fn named_error(tool: &str, content: &Value) -> Option<ToolError> {
    let kind = ErrorKind::parse(content.get("error")?.as_str()?)?;
    let allowed = matches!(kind.class(), ErrorClass::Transient | ErrorClass::Permanent)
        && !matches!(kind, ErrorKind::OutcomeUnknown | ErrorKind::AllToolsFailed);
    if !allowed {
        let msg = format!(
            "{tool} reported error kind `{}`, which only agentrun may use",
            kind.as_str()
        );
        return Some(ToolError::new(ErrorKind::ToolBug, msg));
    }
    let message = content.get("message").and_then(Value::as_str).map_or_else(
        || format!("{tool} reported {}", kind.as_str()),
        str::to_string,
    );
    let mut err = ToolError::new(kind, message);
    err.retry_after = content
        .get("retry_after")
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64);
    Some(err)
}

/// An error message cut at `cap` bytes (issue 22: a server's 5 MB JSON-RPC error was
/// stored whole); `output_cap` bounds what a tool says, answer or error.
fn cap_text(text: &str, cap: usize) -> String {
    if text.len() <= cap {
        return text.to_string();
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… [message cut at {cap} bytes of {}]",
        &text[..end],
        text.len()
    )
}

/// Output beyond the cap is cut to text with a note, like a command tool's.
fn capped(content: Value, cap: usize) -> Value {
    let text = match &content {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.len() <= cap {
        return content;
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Value::String(format!(
        "{}\n[output cut at {cap} bytes of {}]",
        &text[..end],
        text.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::types::{Approval, OnUnknown, RetryPolicy, ToolKind};
    use serde_json::json;

    fn tool(idempotent: bool) -> (ToolDef, McpSpec) {
        let spec = McpSpec {
            server: "ev".into(),
            tool: "echo".into(),
            output_cap: 64,
        };
        let def = ToolDef {
            name: "ev__echo".into(),
            description: "d".into(),
            input_schema: json!({"type": "object"}),
            kind: ToolKind::Mcp(spec.clone()),
            retry: RetryPolicy::default(),
            idempotent,
            fallback: vec![],
            stale: false,
            approval: Approval::Auto,
            on_unknown: OnUnknown::Escalate,
        };
        (def, spec)
    }

    fn err(ended: CallEnded) -> ToolError {
        let (def, spec) = tool(false);
        attempt_result(&def, &spec, ended).unwrap_err()
    }

    fn kind(ended: CallEnded) -> ErrorKind {
        err(ended).kind
    }

    #[test]
    fn text_results_are_json_when_they_parse() {
        let (def, spec) = tool(true);
        let text = |t: &str| json!({"content": [{"type": "text", "text": t}]});
        let got = |v: Value| answered(&def, &spec, &v).unwrap();
        assert_eq!(got(text("Echo: hi")), json!("Echo: hi"));
        assert_eq!(got(text("{\"a\": 1}")), json!({"a": 1}));
        assert_eq!(
            got(json!({"content": [], "structuredContent": {"sum": 3}})),
            json!({"sum": 3})
        );
    }

    #[test]
    fn is_error_is_the_tools_error_with_its_kind_when_named() {
        let (def, spec) = tool(true);
        let err = |t: &str| {
            let v = json!({"isError": true, "content": [{"type": "text", "text": t}]});
            answered(&def, &spec, &v).unwrap_err()
        };
        assert_eq!(err("boom").kind, ErrorKind::ToolBug);
        assert_eq!(err("boom").message, "ev__echo: boom");
        let named = err(r#"{"error": "not_found", "message": "no such order"}"#);
        assert_eq!(
            (named.kind, named.message.as_str()),
            (ErrorKind::NotFound, "no such order")
        );
        assert_eq!(err(r#"{"error": "circuit_open"}"#).kind, ErrorKind::ToolBug);
    }

    #[test]
    fn only_a_call_that_was_never_sent_proves_the_tool_did_not_act() {
        let lost = err(CallEnded::Lost {
            message: "Transport closed".into(),
        });
        assert_eq!((lost.kind, lost.not_acted), (ErrorKind::Unavailable, false));
        let timed_out = err(CallEnded::TimedOut);
        assert_eq!(
            (timed_out.kind, timed_out.not_acted),
            (ErrorKind::Timeout, false)
        );
        let unreachable = err(CallEnded::Unreachable {
            message: "cannot start".into(),
            retry_after: None,
        });
        assert_eq!(
            (unreachable.kind, unreachable.not_acted),
            (ErrorKind::Unavailable, true)
        );
    }

    #[test]
    fn json_rpc_errors_map_to_kinds() {
        let rpc = |code| CallEnded::Rpc {
            code,
            message: "m".into(),
        };
        assert_eq!(kind(rpc(-32602)), ErrorKind::InvalidArguments);
        assert_eq!(kind(rpc(-32601)), ErrorKind::NotFound);
        assert_eq!(kind(rpc(-32603)), ErrorKind::ServerError);
        assert_eq!(kind(rpc(-1)), ErrorKind::ToolBug);
    }

    #[test]
    fn error_messages_are_cut_at_the_output_cap() {
        let (def, spec) = tool(true);
        let huge = "x".repeat(5 * 1024 * 1024);
        let rpc = err(CallEnded::Rpc {
            code: -32000,
            message: huge.clone(),
        });
        let named = attempt_result(
            &def,
            &spec,
            CallEnded::Answered {
                result: json!({"isError": true, "content": [{"type": "text",
                    "text": json!({"error": "not_found", "message": huge}).to_string()}]}),
                restarted: None,
            },
        )
        .unwrap_err();
        for e in [rpc, named] {
            assert!(
                e.message.len() < spec.output_cap + 200,
                "{}",
                e.message.len()
            );
            assert!(e.message.contains("message cut at"));
        }
    }

    #[test]
    fn long_output_is_cut_with_a_note() {
        let v = capped(json!("x".repeat(100)), 64);
        assert!(
            v.as_str()
                .unwrap()
                .ends_with("[output cut at 64 bytes of 100]")
        );
    }
}

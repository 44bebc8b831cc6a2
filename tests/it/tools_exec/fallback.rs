//! The recovery layer end to end: validation before any call, fallback chains (used and
//! disclosed, failing entirely, paused by the gate, not taken after a denial).

use super::support::{Harness, config, fallback_to};
use agentrun::config::types::{ToolDef, ToolsConfig};
use agentrun::recovery::{CallOutcome, Execution, Gate};
use agentrun::tools::outcome::{ErrorKind, ToolError};
use serde_json::{Value, json};

/// `search_kb` (exiting with `code`, touching `primary.ran`) falling back to `kb_cache`
/// (stale; echoing its arguments as `{"cached": ARGS}`, touching `cache.ran`).
fn kb_chain(h: &Harness, code: i32, cache_body: &str) -> ToolsConfig {
    let mut primary = h.script_tool("search_kb", &format!("touch primary.ran; exit {code}"));
    primary.input_schema =
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
    primary.fallback = vec![fallback_to("kb_cache", &[("q", "query")])];
    let mut cache = h.script_tool("kb_cache", &format!("touch cache.ran; {cache_body}"));
    cache.input_schema = json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]});
    cache.stale = true;
    config(vec![primary, cache])
}

const CACHE_ECHO: &str = r#"printf '{"cached": %s}' "$(cat)""#;

#[tokio::test]
async fn a_fallback_result_is_used_and_disclosed() {
    let h = Harness::new();
    let cfg = kb_chain(&h, 75, CACHE_ECHO);
    let outcome = h
        .execute(&cfg, "search_kb", json!({"q": "refund", "lang": "en"}))
        .await;
    let content = json!({"result": {"cached": {"query": "refund", "lang": "en"}}, "via": "kb_cache", "stale": true});
    let want = CallOutcome {
        content,
        is_error: false,
        error: None,
        attempts: 4,
        via: Some("kb_cache".to_string()),
        spent: None,
    };
    assert_eq!(outcome, want);
    let kinds = h.event_kinds();
    assert_eq!(
        kinds.iter().filter(|k| **k == "fallback").count(),
        1,
        "{kinds:?}"
    );
}

#[tokio::test]
async fn a_chain_that_fails_entirely_names_every_tool() {
    let h = Harness::new();
    let cfg = kb_chain(&h, 69, "exit 75");
    let outcome = h.execute(&cfg, "search_kb", json!({"q": "refund"})).await;
    let msg = "search_kb: unavailable after 3 attempts; kb_cache: unavailable after 3 attempts";
    assert_eq!(
        outcome.content,
        h.error_json(ErrorKind::AllToolsFailed, msg, 6)
    );
    assert_eq!(
        (outcome.error, outcome.attempts, outcome.via),
        (Some(ErrorKind::AllToolsFailed), 6, None)
    );
}

#[tokio::test]
async fn a_cache_miss_moves_on_to_the_next_fallback() {
    let h = Harness::new();
    let mut cfg = kb_chain(&h, 70, "exit 66");
    let mirror = h.script_tool("kb_mirror", r#"echo '"mirrored"'"#);
    cfg.tools.insert("kb_mirror".into(), mirror);
    if let Some(p) = cfg.tools.get_mut("search_kb") {
        p.fallback.push(fallback_to("kb_mirror", &[]));
    }
    let outcome = h.execute(&cfg, "search_kb", json!({"q": "refund"})).await;
    assert_eq!(
        outcome.content,
        json!({"result": "mirrored", "via": "kb_mirror", "stale": false})
    );
    assert_eq!(
        outcome.attempts, 3,
        "tool_bug and not_found are tried once each"
    );
}

#[tokio::test]
async fn approval_is_enforced_on_a_fallback_hop() {
    let h = Harness::new();
    let cfg = kb_chain(&h, 75, CACHE_ECHO);
    let gate = |def: &ToolDef, _: &Value| {
        if def.name == "kb_cache" {
            Gate::Pause
        } else {
            Gate::Run
        }
    };
    let paused = h
        .execute_gated(&cfg, "search_kb", json!({"q": "refund"}), &gate)
        .await;
    let Execution::Paused { tool, args, .. } = paused else {
        panic!("did not pause")
    };
    assert_eq!(
        (tool.as_str(), args),
        ("kb_cache", json!({"query": "refund"}))
    );
    assert_eq!(
        (h.read("primary.ran").is_some(), h.read("cache.ran")),
        (true, None)
    );
}

#[tokio::test]
async fn a_blocked_hop_counts_as_failed_without_a_call() {
    let h = Harness::new();
    let cfg = kb_chain(&h, 75, CACHE_ECHO);
    let gate = |def: &ToolDef, _: &Value| {
        if def.name == "kb_cache" {
            Gate::Block(ToolError::new(ErrorKind::CircuitOpen, "open"))
        } else {
            Gate::Run
        }
    };
    let Execution::Done(outcome) = h
        .execute_gated(&cfg, "search_kb", json!({"q": "r"}), &gate)
        .await
    else {
        panic!("paused")
    };
    let msg = "search_kb: unavailable after 3 attempts; kb_cache: circuit_open, not called";
    assert_eq!(outcome.content["message"], msg);
    assert_eq!(h.read("cache.ran"), None);
}

#[tokio::test]
async fn permission_denied_does_not_fall_back() {
    let h = Harness::new();
    let cfg = kb_chain(&h, 77, CACHE_ECHO);
    let outcome = h.execute(&cfg, "search_kb", json!({"q": "refund"})).await;
    assert_eq!(
        outcome.content,
        h.error_json(ErrorKind::PermissionDenied, "search_kb exited with 77", 1)
    );
    assert_eq!(h.read("cache.ran"), None);
}

#[tokio::test]
async fn not_found_does_not_fall_back() {
    let h = Harness::new();
    let cfg = kb_chain(&h, 66, CACHE_ECHO);
    let outcome = h.execute(&cfg, "search_kb", json!({"q": "refund"})).await;
    assert_eq!(
        (outcome.error, outcome.attempts),
        (Some(ErrorKind::NotFound), 1)
    );
    assert_eq!(h.read("cache.ran"), None);
}

#[tokio::test]
async fn a_schema_violation_returns_the_errors_and_makes_no_call() {
    let h = Harness::new();
    let cfg = kb_chain(&h, 0, CACHE_ECHO);
    let outcome = h.execute(&cfg, "search_kb", json!({"q": 7})).await;
    let msg =
        r#"arguments for search_kb do not match its schema: at /q: 7 is not of type "string""#;
    assert_eq!(
        outcome.content,
        h.error_json(ErrorKind::SchemaViolation, msg, 0)
    );
    assert_eq!(h.read("primary.ran"), None);
}

#[tokio::test]
async fn an_unknown_tool_makes_no_call() {
    let h = Harness::new();
    let cfg = kb_chain(&h, 0, CACHE_ECHO);
    let outcome = h.execute(&cfg, "search_web", json!({})).await;
    assert_eq!(
        outcome.content,
        h.error_json(ErrorKind::UnknownTool, "no tool named `search_web`", 0)
    );
}

#[tokio::test]
async fn a_gate_on_the_requested_tool_pauses_or_blocks_before_any_call() {
    let h = Harness::new();
    let cfg = kb_chain(&h, 0, CACHE_ECHO);
    let paused = h
        .execute_gated(&cfg, "search_kb", json!({"q": "r"}), &|_, _| Gate::Pause)
        .await;
    assert!(matches!(paused, Execution::Paused { ref tool, .. } if tool == "search_kb"));
    let deny =
        |_: &ToolDef, _: &Value| Gate::Block(ToolError::new(ErrorKind::ApprovalDenied, "no"));
    let Execution::Done(outcome) = h
        .execute_gated(&cfg, "search_kb", json!({"q": "r"}), &deny)
        .await
    else {
        panic!("paused")
    };
    assert_eq!(
        (outcome.error, outcome.attempts),
        (Some(ErrorKind::ApprovalDenied), 0)
    );
    assert_eq!(h.read("primary.ran"), None);
}

//! Retry schedules with the fake clock: transient failures retried with exact
//! exponential waits, permanent ones tried once, attempts and hints in the final JSON.

use super::support::{Harness, config, flaky_body};
use agentrun::tools::outcome::ErrorKind;
use agentrun::trace::TraceEvent;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn a_tool_failing_twice_then_succeeding_is_ok_after_three_attempts() {
    let h = Harness::new();
    let def = h.script_tool("flaky", &flaky_body("count", 2, 75));
    let (result, attempts) = h.with_retry(&def, json!({})).await;
    assert_eq!((result, attempts), (Ok(json!({"ok": true})), 3));
    assert_eq!(h.sleeps_ms(), vec![100, 200]);
    let kinds = h.event_kinds();
    assert_eq!(
        kinds,
        [
            "tool_attempt",
            "backoff",
            "tool_attempt",
            "backoff",
            "tool_attempt"
        ]
    );
}

#[tokio::test]
async fn attempts_and_waits_are_traced() {
    let h = Harness::new();
    let def = h.script_tool("flaky", &flaky_body("count", 1, 69));
    let _ = h.with_retry(&def, json!({})).await;
    let events = h.events.take();
    let TraceEvent::ToolAttempt {
        attempt,
        error,
        class,
        message,
        ..
    } = &events[0]
    else {
        panic!("{events:?}")
    };
    assert_eq!(
        (
            *attempt,
            error.map(|k| k.as_str()),
            class.map(|c| c.as_str())
        ),
        (1, Some("unavailable"), Some("transient"))
    );
    assert_eq!(
        message.as_deref(),
        Some("flaky exited with 69: attempt 1 failed")
    );
    let backoff = TraceEvent::Backoff {
        call_id: "call-1".into(),
        tool: "flaky".into(),
        attempt: 2,
        delay_ms: 100,
        retry_after: false,
        at_ms: None,
    };
    assert_eq!(events[1], backoff);
    assert!(matches!(
        &events[2],
        TraceEvent::ToolAttempt {
            attempt: 2,
            error: None,
            ..
        }
    ));
}

#[tokio::test]
async fn a_persistent_outage_gives_up_after_three_attempts_with_the_hint() {
    let h = Harness::new();
    let def = h.script_tool("down", "exit 75");
    let cfg = config(vec![def]);
    let outcome = h.execute(&cfg, "down", json!({})).await;
    assert_eq!(
        outcome.content,
        h.error_json(ErrorKind::Unavailable, "down exited with 75", 3)
    );
    assert_eq!(
        (outcome.is_error, outcome.error, outcome.attempts),
        (true, Some(ErrorKind::Unavailable), 3)
    );
    assert_eq!(h.sleeps_ms(), vec![100, 200]);
}

#[tokio::test]
async fn the_wait_doubles_up_to_max_backoff() {
    let h = Harness::new();
    let mut def = h.script_tool("down", "exit 69");
    def.retry.attempts = 5;
    def.retry.backoff = Duration::from_millis(400);
    let (_, attempts) = h.with_retry(&def, json!({})).await;
    assert_eq!(attempts, 5);
    assert_eq!(h.sleeps_ms(), vec![400, 800, 1000, 1000]);
}

#[tokio::test]
async fn not_found_is_tried_once() {
    let h = Harness::new();
    let def = h.script_tool("lookup", &flaky_body("count", 5, 66));
    let (result, attempts) = h.with_retry(&def, json!({})).await;
    assert_eq!(
        (result.unwrap_err().kind, attempts),
        (ErrorKind::NotFound, 1)
    );
    assert_eq!(h.sleeps_ms(), Vec::<u128>::new());
    assert_eq!(h.read("count").as_deref(), Some("1\n"));
}

#[tokio::test]
async fn permission_denied_is_tried_once() {
    let h = Harness::new();
    let def = h.script_tool("guarded", &flaky_body("count", 5, 77));
    let (result, attempts) = h.with_retry(&def, json!({})).await;
    assert_eq!(
        (result.unwrap_err().kind, attempts),
        (ErrorKind::PermissionDenied, 1)
    );
    assert_eq!(h.sleeps_ms(), Vec::<u128>::new());
}

#[tokio::test]
async fn a_timeout_is_retried() {
    let h = Harness::new();
    let mut def = h.script_tool("slow", "sleep 5");
    def.retry.timeout = Duration::from_millis(200);
    def.retry.attempts = 2;
    let (result, attempts) = h.with_retry(&def, json!({})).await;
    assert_eq!(
        (result.unwrap_err().kind, attempts),
        (ErrorKind::Timeout, 2)
    );
    assert_eq!(h.sleeps_ms(), vec![100]);
}

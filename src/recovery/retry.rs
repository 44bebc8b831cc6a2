//! Retry policy for tool calls: transient failures are retried up to the tool's
//! `attempts` with exponential full-jitter backoff (the server's `Retry-After` first,
//! capped by `max_backoff`); every other failure gets exactly one attempt, because
//! retrying "not found" or "permission denied" cannot change the answer.
//!
//! A tool that is not `idempotent` is retried only after a failure that proves it did
//! not act ([`ToolError::not_acted`]); any other transient failure ends the call as
//! `outcome_unknown`, which the loop handles exactly as a call lost in a crash.
//!
//! Each attempt and each wait is reported as a trace event.

use crate::backoff;
use crate::config::types::ToolDef;
use crate::tools::outcome::{AttemptResult, ErrorKind, ToolError};
use crate::tools::{CallContext, attempt};
use crate::trace::TraceEvent;
use serde_json::Value;
use std::time::{Duration, Instant};

/// A transient failure of a tool that is not idempotent, which does not prove the tool
/// did not act (a timeout, a reset after sending, 500/502/504): retrying could repeat
/// its effect, so it is not retried and its outcome is unknown, as after a crash.
fn unknown_outcome(def: &ToolDef, e: ToolError) -> ToolError {
    ToolError::new(
        ErrorKind::OutcomeUnknown,
        format!(
            "{} ({}); {} is not idempotent, so it was not retried: it is unknown whether it took effect",
            e.message,
            e.kind.as_str(),
            def.name
        ),
    )
}

/// Returns the final attempt's result and the number of attempts made.
pub async fn call_with_retry(
    def: &ToolDef,
    args: &Value,
    ctx: &CallContext<'_>,
) -> (AttemptResult, u32) {
    let max = def.retry.attempts.max(1);
    let mut made = 0;
    loop {
        made += 1;
        // Elapsed time is real time on purpose: it measures the tool, not the schedule.
        let started = Instant::now();
        let result = attempt(def, args, ctx).await;
        emit_attempt(def, ctx, made, started.elapsed(), &result);
        let err = match result {
            Err(e) if e.kind.is_retryable() && !def.idempotent && !e.not_acted => {
                return (Err(unknown_outcome(def, e)), made);
            }
            Err(ref e) if e.kind.is_retryable() && made < max => e,
            _ => return (result, made),
        };
        let delay = backoff::delay(
            def.retry.backoff,
            def.retry.max_backoff,
            made - 1,
            err.retry_after,
            ctx.clock,
        );
        emit_backoff(def, ctx, made + 1, delay, err);
        ctx.clock.sleep(delay).await;
    }
}

fn emit_attempt(
    def: &ToolDef,
    ctx: &CallContext<'_>,
    attempt: u32,
    elapsed: Duration,
    result: &AttemptResult,
) {
    let err = result.as_ref().err();
    ctx.events.emit(TraceEvent::ToolAttempt {
        call_id: ctx.call_id.to_string(),
        tool: def.name.clone(),
        attempt,
        elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        error: err.map(|e| e.kind),
        class: err.map(|e| e.kind.class()),
        message: err.map(|e| e.message.clone()),
    });
}

/// `attempt` is the number of the attempt the wait comes before.
fn emit_backoff(
    def: &ToolDef,
    ctx: &CallContext<'_>,
    attempt: u32,
    delay: Duration,
    err: &ToolError,
) {
    ctx.events.emit(TraceEvent::Backoff {
        call_id: ctx.call_id.to_string(),
        tool: def.name.clone(),
        attempt,
        delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        retry_after: err.retry_after.is_some(),
    });
}

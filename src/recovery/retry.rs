//! Retry policy for tool calls: transient failures are retried up to the tool's
//! `attempts` with exponential full-jitter backoff; every other failure gets exactly one
//! attempt, because retrying "not found" or "permission denied" cannot change the answer.
//!
//! The server's `Retry-After` is a floor, never shortened by `max_backoff`; when it asks
//! for more than `max_retry_after` there is no retry: the call fails `rate_limited`
//! carrying the delay (docs/ARCHITECTURE.md §3.3, issue 12 item 10).
//!
//! A tool that is not `idempotent` is retried only after a failure that proves it did
//! not act ([`ToolError::not_acted`]); any other transient failure ends the call as
//! `outcome_unknown`, which the loop handles exactly as a call lost in a crash.
//!
//! Each attempt and each wait is reported as a trace event.

use crate::backoff;
use crate::config::types::ToolDef;
use crate::tools::outcome::{AttemptResult, ErrorKind, ToolError};
use crate::trace::TraceEvent;
use std::time::Duration;

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

/// The server asked for a longer wait than `max_retry_after`: the call fails now, as
/// `rate_limited`, carrying the server's delay so the model (and the breaker) know when
/// the service takes calls again.
fn too_long_to_wait(def: &ToolDef, err: ToolError) -> ToolError {
    let retry_after = err.retry_after.unwrap_or_default();
    let mut e = ToolError::new(
        ErrorKind::RateLimited,
        format!(
            "{}; the service asks to wait {}, more than max_retry_after ({}), so it was not retried",
            err.message,
            humantime::format_duration(retry_after),
            humantime::format_duration(def.retry.max_retry_after)
        ),
    );
    e.retry_after = Some(retry_after);
    e
}

/// What follows an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterAttempt {
    /// No further attempt: this is the call's result (for this tool).
    Final(AttemptResult),
    /// Wait, then attempt again.
    Retry(Backoff),
}

/// The wait before the next attempt, as the rule computes it; the jittered delay is
/// drawn by whoever performs the wait ([`Backoff::draw`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub policy: backoff::Backoff,
    /// 0 for the first retry.
    pub retry: u32,
    /// The service's requested delay (`Retry-After`).
    pub server_delay: Option<Duration>,
}

impl Backoff {
    /// The wait: exactly the server's delay when it named one (a floor that
    /// `max_backoff` never shortens; `after_attempt` already refused delays above
    /// `max_retry_after`), else a full-jitter draw.
    pub fn draw(&self, clock: &dyn crate::clock::Clock) -> Duration {
        match self.policy.next_wait(self.retry, self.server_delay, clock) {
            backoff::Wait::After(d) => d,
            backoff::Wait::GiveUp { retry_after } => retry_after,
        }
    }
}

/// A tool's retry policy: tools.toml's `[defaults]` or the tool's own, full jitter.
pub fn policy_of(def: &ToolDef) -> backoff::Backoff {
    backoff::Backoff {
        base: def.retry.backoff,
        max_backoff: def.retry.max_backoff,
        max_retry_after: def.retry.max_retry_after,
        jitter: backoff::Jitter::Full,
    }
}

/// The retry rule, without IO: after attempt number `made` (from 1) ended with
/// `result`, is the call done or is there another attempt?
pub fn after_attempt(def: &ToolDef, made: u32, result: AttemptResult) -> AfterAttempt {
    let max = def.retry.attempts.max(1);
    match result {
        Err(e) if e.kind.is_retryable() && !def.idempotent && !e.not_acted => {
            AfterAttempt::Final(Err(unknown_outcome(def, e)))
        }
        Err(e)
            if e.kind.is_retryable()
                && e.retry_after.is_some_and(|d| d > def.retry.max_retry_after) =>
        {
            AfterAttempt::Final(Err(too_long_to_wait(def, e)))
        }
        Err(e) if e.kind.is_retryable() && made < max => AfterAttempt::Retry(Backoff {
            policy: policy_of(def),
            retry: made - 1,
            server_delay: e.retry_after,
        }),
        other => AfterAttempt::Final(other),
    }
}

/// The trace of one attempt.
pub fn attempt_event(
    call_id: &str,
    def: &ToolDef,
    attempt: u32,
    elapsed: Duration,
    result: &AttemptResult,
) -> TraceEvent {
    let err = result.as_ref().err();
    TraceEvent::ToolAttempt {
        call_id: call_id.to_string(),
        tool: def.name.clone(),
        attempt,
        elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        error: err.map(|e| e.kind),
        class: err.map(|e| e.kind.class()),
        message: err.map(|e| e.message.clone()),
        at_ms: None,
    }
}

/// The trace of a wait; `attempt` is the number of the attempt the wait comes before.
pub fn backoff_event(
    call_id: &str,
    def: &ToolDef,
    attempt: u32,
    delay: Duration,
    retry_after: bool,
) -> TraceEvent {
    TraceEvent::Backoff {
        call_id: call_id.to_string(),
        tool: def.name.clone(),
        attempt,
        delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        retry_after,
        at_ms: None,
    }
}

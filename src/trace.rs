//! Trace events: every attempt, backoff, classification, fallback hop, nudge and trip.
//!
//! Recovery code emits these into an [`EventSink`]; the runner stores them in the
//! `events` table with the step they belong to, and `runs show` prints them.

use crate::taxonomy::{ErrorClass, ErrorKind};
use serde::{Deserialize, Serialize};
use std::sync::Mutex;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TraceEvent {
    /// One attempt at a tool; `error` is the kind when it failed.
    ToolAttempt {
        call_id: String,
        tool: String,
        attempt: u32,
        elapsed_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<ErrorKind>,
        #[serde(skip_serializing_if = "Option::is_none")]
        class: Option<ErrorClass>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// When it happened (clock ms), stamped by the runner's buffer as it is
        /// emitted: the store's `at` (issue 15). Not part of the event's JSON.
        #[serde(skip)]
        at_ms: Option<i64>,
    },
    /// A wait before the next attempt (already including jitter / Retry-After).
    Backoff {
        call_id: String,
        tool: String,
        attempt: u32,
        delay_ms: u64,
        /// True when the delay came from the server's Retry-After.
        retry_after: bool,
        /// When it happened (clock ms), stamped by the runner's buffer as it is
        /// emitted: the store's `at` (issue 15). Not part of the event's JSON.
        #[serde(skip)]
        at_ms: Option<i64>,
    },
    /// The fallback chain moved from one tool to the next.
    Fallback {
        call_id: String,
        from: String,
        to: String,
        /// When it happened (clock ms), stamped by the runner's buffer as it is
        /// emitted: the store's `at` (issue 15). Not part of the event's JSON.
        #[serde(skip)]
        at_ms: Option<i64>,
    },
    /// A model call failed and will be retried, or a fallback model takes over.
    ModelRetry {
        model: String,
        attempt: u32,
        error: String,
        /// A few words for a status line (`connection refused`, `HTTP 503`; issue
        /// 27). Absent in old traces.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        delay_ms: u64,
        /// When the attempt failed (clock ms): the store's `at` for this event, not
        /// the time the step's events were written (issue 15). Absent in old traces.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_ms: Option<i64>,
    },
    ModelFallback {
        from: String,
        to: String,
        error: String,
        /// When the next model took over (clock ms).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_ms: Option<i64>,
    },
    /// A hook ran, or is about to (issue 26): stored at once, so a resumed run reuses
    /// the decision and never runs the hook twice for the same call. `decision` is
    /// `started` (written before the hook is spawned), `allow`, `block`, `ask` or
    /// `failed`.
    Hook {
        /// `before_tool[0]`: the event and the hook's place in its list.
        hook: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        decision: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        updated_input: Option<serde_json::Value>,
        /// When it happened (clock ms). Not part of the event's JSON.
        #[serde(skip)]
        at_ms: Option<i64>,
    },
    /// What one step's model call used and cost (issue 23): the input tokens, the part
    /// read from the provider's prompt cache and the part written to it, the output.
    ModelUsage {
        model: String,
        input: u64,
        cached_input: u64,
        #[serde(default)]
        cache_write: u64,
        output: u64,
        cost_usd: f64,
        /// The provider reported no usage; these counts are agentrun's estimate.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        estimated: bool,
    },
    /// Anything else worth a line in the trace.
    Note {
        kind: NoteKind,
        message: String,
        /// When it happened (clock ms), stamped by the runner's buffer as it is
        /// emitted: the store's `at` (issue 15). Not part of the event's JSON.
        #[serde(skip)]
        at_ms: Option<i64>,
    },
}

/// What a trace note is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoteKind {
    /// A call was interrupted by a crash and must not simply run again.
    OutcomeUnknown,
    /// A fallback hop was not called (missing tool, arguments that do not fit).
    FallbackSkipped,
    /// An MCP server that had stopped was started again for a call (issue 16).
    McpServerRestarted,
    /// A model response was cut off at its output limit and asked again once.
    Truncated,
    /// The context was compacted to fit the model's window (issue 15).
    Compacted,
    /// The model's answer only repeated one of agentrun's notes (issue 23).
    RepeatedNote,
    /// A sub-agent's child run started, resumed, ended or was reused (issue 26).
    SubAgent,
    /// A request or call waits for a shared rate limit (docs/rate-limits.md).
    RateLimit,
}

impl NoteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NoteKind::OutcomeUnknown => "outcome_unknown",
            NoteKind::FallbackSkipped => "fallback_skipped",
            NoteKind::McpServerRestarted => "mcp_server_restarted",
            NoteKind::Truncated => "truncated",
            NoteKind::Compacted => "compacted",
            NoteKind::RepeatedNote => "repeated_note",
            NoteKind::SubAgent => "sub_agent",
            NoteKind::RateLimit => "rate_limit",
        }
    }

    /// Whether the note means a person is (or was) needed; shown prominently.
    pub fn needs_a_person(self) -> bool {
        self == NoteKind::OutcomeUnknown
    }
}

impl TraceEvent {
    /// When the event happened, for events that carry it; others happened when they
    /// are written.
    pub fn at_ms(&self) -> Option<i64> {
        match self {
            TraceEvent::ToolAttempt { at_ms, .. }
            | TraceEvent::Backoff { at_ms, .. }
            | TraceEvent::Fallback { at_ms, .. }
            | TraceEvent::ModelRetry { at_ms, .. }
            | TraceEvent::ModelFallback { at_ms, .. }
            | TraceEvent::Hook { at_ms, .. }
            | TraceEvent::Note { at_ms, .. } => *at_ms,
            TraceEvent::ModelUsage { .. } => None,
        }
    }

    /// Records when the event happened, unless it says so itself already.
    pub fn stamp(&mut self, now_ms: i64) {
        match self {
            TraceEvent::ToolAttempt { at_ms, .. }
            | TraceEvent::Backoff { at_ms, .. }
            | TraceEvent::Fallback { at_ms, .. }
            | TraceEvent::ModelRetry { at_ms, .. }
            | TraceEvent::ModelFallback { at_ms, .. }
            | TraceEvent::Hook { at_ms, .. }
            | TraceEvent::Note { at_ms, .. } => {
                at_ms.get_or_insert(now_ms);
            }
            TraceEvent::ModelUsage { .. } => {}
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            TraceEvent::ToolAttempt { .. } => "tool_attempt",
            TraceEvent::Backoff { .. } => "backoff",
            TraceEvent::Fallback { .. } => "fallback",
            TraceEvent::ModelRetry { .. } => "model_retry",
            TraceEvent::ModelFallback { .. } => "model_fallback",
            TraceEvent::Hook { .. } => "hook",
            TraceEvent::Note { .. } => "note",
            TraceEvent::ModelUsage { .. } => "model_usage",
        }
    }
}

/// Where recovery code reports what it did.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: TraceEvent);
}

/// Something that wants to see events as they happen (live progress).
pub type Observer = std::sync::Arc<dyn Fn(&TraceEvent) + Send + Sync>;

/// Collects events in memory until the runner persists them, showing each to an
/// optional observer as it arrives.
#[derive(Default)]
pub struct EventBuffer {
    events: Mutex<Vec<TraceEvent>>,
    observer: Option<Observer>,
    /// Stamps each event with the time it is emitted (the runner's buffer).
    clock: Option<std::sync::Arc<dyn crate::clock::Clock>>,
}

impl EventBuffer {
    pub fn observed(observer: Observer) -> EventBuffer {
        EventBuffer {
            events: Mutex::default(),
            observer: Some(observer),
            clock: None,
        }
    }

    /// Events are stamped with `clock`'s time as they are emitted, so the stored `at`
    /// is when each happened, not when the step's events were written (issue 15).
    pub fn stamped(mut self, clock: std::sync::Arc<dyn crate::clock::Clock>) -> EventBuffer {
        self.clock = Some(clock);
        self
    }

    pub fn take(&self) -> Vec<TraceEvent> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl EventSink for EventBuffer {
    fn emit(&self, mut event: TraceEvent) {
        if let Some(clock) = &self.clock {
            event.stamp(clock.now_ms());
        }
        if let Some(observe) = &self.observer {
            observe(&event);
        }
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
    }
}

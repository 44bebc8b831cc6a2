//! OpenTelemetry for runs (docs/observability.md; docs/ARCHITECTURE.md, Telemetry):
//! traces in the GenAI semantic conventions, sent over OTLP/HTTP, and the W3C trace
//! context handed to the tools a run calls.
//!
//! Off unless the standard `OTEL_*` variables name an endpoint ([`settings`]); off,
//! every call here is one load of an empty global: no thread, no socket. On, the
//! export thread starts with the first finished span, and spans leave a run through a
//! bounded queue that never waits ([`export`]).

pub mod content;
pub mod events;
pub mod export;
pub mod ids;
pub mod keys;
pub mod metrics;
pub mod run;
pub mod settings;
pub mod span;

pub use run::{Answered, Ended, RunTrace};
pub use settings::Settings;

use opentelemetry::trace::TraceId;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The process's telemetry, when on.
pub struct Telemetry {
    pub settings: Settings,
    export: OnceLock<export::Export>,
    /// The trace each run this process drives belongs to, for the trace context its
    /// tools are given.
    traces: Mutex<HashMap<String, TraceId>>,
}

static GLOBAL: OnceLock<Option<Telemetry>> = OnceLock::new();

/// Reads the environment once (the binary's start); a setting that cannot be used is
/// said on one line and leaves telemetry off: it never stops a run.
pub fn init() -> Guard {
    GLOBAL.get_or_init(|| match Settings::from_env(|k| std::env::var(k).ok()) {
        Ok(Some(settings)) => Some(Telemetry {
            settings,
            export: OnceLock::new(),
            traces: Mutex::new(HashMap::new()),
        }),
        Ok(None) => None,
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(crate::out::stderr(), "agentrun: {e}");
            None
        }
    });
    Guard(())
}

/// The process's telemetry, when on.
pub fn get() -> Option<&'static Telemetry> {
    GLOBAL.get().and_then(Option::as_ref)
}

impl Telemetry {
    /// The export queue, its thread started on first use.
    pub fn export(&self) -> &export::Export {
        self.export
            .get_or_init(|| export::Export::start(&self.settings))
    }
}

/// Sends what is queued when the process ends, waiting at most the flush bound.
pub struct Guard(());

impl Drop for Guard {
    fn drop(&mut self) {
        flush();
    }
}

/// Sends what is queued, waiting at most the flush bound (a worker between runs, the
/// process's end).
pub fn flush() {
    if let Some(e) = get().and_then(|t| t.export.get()) {
        e.flush();
    }
}

fn register(run: &str, trace: TraceId) {
    if let Some(t) = get() {
        lock(&t.traces).insert(run.to_string(), trace);
    }
}

fn unregister(run: &str) {
    if let Some(t) = get() {
        lock(&t.traces).remove(run);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The W3C `traceparent` for what call `call_id` of `run` calls (a command tool's
/// `TRACEPARENT`, an HTTP tool's header): its `execute_tool` span, when telemetry is on
/// and this process drives the run.
pub fn traceparent(run: &str, call_id: &str) -> Option<String> {
    let t = get()?;
    let trace = *lock(&t.traces).get(run)?;
    Some(ids::traceparent(trace, ids::tool_span(run, call_id)))
}

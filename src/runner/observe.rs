//! What the runner tells whoever watches a run, as typed facts. The command layer
//! turns them into lines or a live status display (`cli::progress`); the runner never
//! prints.

pub use crate::machine::effects::{CallFinished, Notice};
use crate::model::Delta;
use crate::trace::TraceEvent;
use std::time::Duration;

/// A step about to ask the model.
#[derive(Debug, Clone, PartialEq)]
pub struct StepStart<'a> {
    pub step: u32,
    pub max_steps: u32,
    /// Tokens used so far (input + output), and the budget.
    pub tokens: u64,
    pub max_tokens: u64,
    pub model: &'a str,
    /// Money spent so far (USD, issue 15), and the budget when one is set.
    pub cost_usd: f64,
    pub max_cost: Option<f64>,
}

/// The runner's audience: live progress in the CLI, nothing in tests.
pub trait Observer: Send + Sync {
    fn step_started(&self, s: &StepStart<'_>);
    /// A tool call is about to run (it may take up to `max_attempts` attempts).
    fn call_started(&self, tool: &str, max_attempts: u32);
    fn call_finished(&self, c: &CallFinished);
    /// A trace event as it happens (attempts, waits, fallback hops, notes).
    fn event(&self, e: &TraceEvent);
    fn notice(&self, n: &Notice);
    /// A piece of a streamed model answer as it arrives (a view only: what is
    /// journaled is the whole response, once complete).
    fn model_delta(&self, _model: &str, _delta: &Delta) {}
    /// A model call has been in flight for `elapsed` (every [`HEARTBEAT`]).
    fn waiting(&self, _elapsed: Duration) {}
}

/// How often a run waiting on the model says so (issue 13: off a terminal too).
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// The observer as the providers' live sink.
pub(crate) struct LiveView<'a>(pub &'a dyn Observer);

impl crate::model::LiveSink for LiveView<'_> {
    fn delta(&self, model: &str, delta: &Delta) {
        self.0.model_delta(model, delta);
    }
}

/// Runs `fut` (a model call), telling `observer` every [`HEARTBEAT`] that it waits.
pub(crate) async fn with_heartbeat<T>(
    observer: &dyn Observer,
    fut: impl std::future::Future<Output = T>,
) -> T {
    let start = tokio::time::Instant::now();
    let mut fut = std::pin::pin!(fut);
    let mut tick = tokio::time::interval_at(start + HEARTBEAT, HEARTBEAT);
    loop {
        tokio::select! {
            out = &mut fut => return out,
            _ = tick.tick() => observer.waiting(start.elapsed()),
        }
    }
}

/// Watches nothing.
pub struct Unobserved;

impl Observer for Unobserved {
    fn step_started(&self, _: &StepStart<'_>) {}
    fn call_started(&self, _: &str, _: u32) {}
    fn call_finished(&self, _: &CallFinished) {}
    fn event(&self, _: &TraceEvent) {}
    fn notice(&self, _: &Notice) {}
}

//! What the runner tells whoever watches a run, as typed facts. The command layer
//! turns them into lines or a live status display (`cli::progress`); the runner never
//! prints.

pub use crate::machine::effects::{CallFinished, Notice};
use crate::trace::TraceEvent;

/// A step about to ask the model.
#[derive(Debug, Clone, PartialEq)]
pub struct StepStart<'a> {
    pub step: u32,
    pub max_steps: u32,
    /// Tokens used so far (input + output), and the budget.
    pub tokens: u64,
    pub max_tokens: u64,
    pub model: &'a str,
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

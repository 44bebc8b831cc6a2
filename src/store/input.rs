//! What callers hand the store to write: a new run, a finished step, an escalation.
//! Borrowed views, so the driver writes what it holds without copying it first.

use crate::model::Message;
use crate::records::{CallRecord, EscalationDetail, EscalationKind, RunId, RunStatus};
use crate::trace::TraceEvent;
use std::collections::BTreeMap;

/// Everything needed to create a run.
pub struct NewRun<'a> {
    pub id: RunId,
    pub task: &'a str,
    pub task_path: &'a str,
    /// JSON config snapshot (tools.toml, prompts, model specs) as at start.
    pub snapshot: &'a str,
    /// Scripted-model texts by model spec, kept beside the snapshot.
    pub scripts: &'a BTreeMap<String, String>,
    pub max_steps: u32,
    pub max_tokens: u64,
    /// The opening transcript (system prompt, task), step 0.
    pub messages: &'a [Message],
    /// Initial loop state JSON.
    pub state: &'a str,
}

/// Everything a step commit writes, atomically.
pub struct StepCommit<'a> {
    pub step: u32,
    pub messages: &'a [Message],
    /// Loop state JSON after the step.
    pub state: &'a str,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Money spent so far (USD), kept on the run's row for `runs list` (issue 27).
    pub cost_usd: f64,
    pub status: RunStatus,
    pub answer: Option<&'a str>,
    pub error: Option<&'a str>,
    /// The step's last call outcome, when it was not journaled on its own.
    pub outcome: Option<&'a CallRecord>,
    pub events: &'a [TraceEvent],
    /// An escalation raised by this step, queued in the same commit.
    pub escalation: Option<&'a NewEscalation<'a>>,
}

pub struct NewEscalation<'a> {
    pub step: u32,
    pub summary: &'a str,
    /// The facts (and so the kind) and the handover.
    pub detail: &'a EscalationDetail,
}

impl NewEscalation<'_> {
    pub fn kind(&self) -> EscalationKind {
        self.detail.kind()
    }
}

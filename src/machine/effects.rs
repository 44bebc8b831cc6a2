//! What goes into the machine (events) and what comes out (effects), as plain data.
//!
//! An effect marked *request* waits for its event: the machine returns nothing after it
//! in the same batch — except [`Effect::RunCall`], of which a batch may hold several
//! (the calls that may run together, [`super::batch`]): the driver starts each as it
//! comes, performs the effects between them, and feeds each [`Event::CallRan`] back as
//! it finishes, in any order. Every other effect is performed in order and answers
//! nothing.

use super::state::LoopState;
use crate::model::{Message, ModelResponse, ToolSpec};
use crate::records::{
    CallRecord, EscalationDetail, EscalationId, EscalationKind, EscalationRow, JournalEntry,
    RunStatus, SentMessage,
};
use crate::recovery::Execution;
use crate::taxonomy::ErrorKind;
use crate::trace::TraceEvent;
use serde_json::Value;

/// What happened.
#[derive(Debug)]
pub enum Event {
    /// The run is (re)started: every escalation of the run, so decisions people made
    /// between steps are carried in.
    Start {
        escalations: Vec<EscalationRow>,
    },
    /// What an earlier process stored for the step ([`Effect::LoadStep`]): the model's
    /// response, the calls' journal and the run's escalations; `None` when the step
    /// has not begun (the journal and escalations are then not read).
    StepLoaded {
        turn: Option<ModelResponse>,
        journal: Vec<JournalEntry>,
        escalations: Vec<EscalationRow>,
        /// People's messages not yet delivered (`runs send`, issue 21); read only for
        /// a step that has not begun, which is where they are delivered.
        sent: Vec<SentMessage>,
    },
    ModelReplied(ModelResponse),
    /// The model call failed after its retries and fallbacks.
    ModelFailed(String),
    /// A call ran through the recovery chain ([`Effect::RunCall`]).
    CallRan {
        call_id: String,
        execution: Execution,
    },
    /// Someone or something asks the run to stop ([`super::stop`]).
    StopRequested(StopRequest),
    /// After a stop, the driver gave up on the work in flight: the model request was
    /// dropped (nothing of it journaled), running calls' process groups were killed.
    Aborted,
}

/// What to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Record a person's decision on a between-step escalation as applied, with the
    /// notes and loop state it leads to (and the run's end, when it stops it).
    ApplyResolution {
        escalation: EscalationId,
        step: u32,
        notes: Vec<Message>,
        state: LoopState,
        stop: Option<String>,
    },
    /// Deliver people's messages after `step` (the last committed one), before the
    /// next model request: each sent message's id with the transcript message it
    /// becomes, appended and marked delivered at once (issue 21).
    DeliverMessages {
        step: u32,
        messages: Vec<(i64, Message)>,
    },
    /// *Request*: read what is stored for `step` ([`Event::StepLoaded`]).
    LoadStep {
        step: u32,
    },
    /// *Request*: ask the model ([`Event::ModelReplied`] or [`Event::ModelFailed`]).
    AskModel(Ask),
    /// Journal the model's response for the step.
    RecordModelTurn {
        step: u32,
        response: ModelResponse,
    },
    /// Store the trace so far under `step` (nothing else is written).
    RecordEvents {
        step: u32,
    },
    /// A call whose effect must not happen twice is about to begin.
    MarkStarted {
        step: u32,
        call_id: String,
    },
    /// *Request*: run a call through the recovery chain ([`Event::CallRan`]); several
    /// may be running at once.
    RunCall(Box<RunCall>),
    /// A trace event (stored with the step's next write).
    Trace(TraceEvent),
    /// For the person watching.
    CallFinished(CallFinished),
    Notice(Notice),
    /// Journal a finished call's outcome now, before the step commits.
    RecordOutcome {
        step: u32,
        record: CallRecord,
    },
    /// Queue an escalation; `pause_as` pauses the run with that status.
    Escalate {
        step: u32,
        summary: String,
        detail: EscalationDetail,
        pause_as: Option<RunStatus>,
    },
    /// Commit the step: its messages and loop state, atomically.
    Commit(Box<Commit>),
    SetStatus {
        status: RunStatus,
        reason: String,
    },
    /// The run stops here (it may be resumed later).
    Stop(Stop),
}

/// A model request: the system text and the tools offered; the messages are the
/// machine's context after the system prompt — or, for a compaction, the summary
/// request's own.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    pub step: u32,
    /// The same bytes at every step of a run (docs/ARCHITECTURE.md §7, issue 23): what changes per
    /// step goes in `note`, so a provider's prompt cache can reuse the whole prefix.
    pub system: String,
    /// agentrun's per-step note (the budget and spend lines), sent after the
    /// transcript as user-role text; empty for a compaction.
    pub note: String,
    /// Shared with the machine, which builds them again only when the offer changes.
    pub tools: std::sync::Arc<[ToolSpec]>,
    /// A compaction (issue 15): the model summarises instead of taking a step.
    pub summary: Option<SummaryAsk>,
    /// Assistant turns of the transcript that are not in the context (compacted).
    pub turns_left_out: u32,
    /// The step's first response was cut at the output limit: ask again once with
    /// this note after the context and this cap (issue 15).
    pub after_cut: Option<AfterCut>,
}

/// The second request of a step whose first response was cut off.
#[derive(Debug, Clone, PartialEq)]
pub struct AfterCut {
    pub note: Message,
    pub max_output_tokens: u32,
}

/// What a compaction request sends instead of the context.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryAsk {
    pub messages: Vec<Message>,
    pub max_output_tokens: u32,
}

/// A call for the recovery chain.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCall {
    pub step: u32,
    pub call_id: String,
    /// The tool the model asked for, and the arguments to run it with (a person's
    /// modified arguments, when given).
    pub tool: String,
    pub args: Value,
    /// A fallback hop a person approved: run that hop alone with its arguments.
    pub approved_hop: Option<(String, Value)>,
    /// The decided escalation for this call, for the approval gate.
    pub decision: Option<EscalationRow>,
    pub max_attempts: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Commit {
    pub step: u32,
    pub messages: Vec<Message>,
    pub state: LoopState,
    pub status: RunStatus,
    pub answer: Option<String>,
    pub error: Option<String>,
    /// The step's last call outcome, when it was not journaled on its own.
    pub outcome: Option<CallRecord>,
    /// A pausing escalation raised by the step: summary and detail.
    pub escalation: Option<(String, EscalationDetail)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Stop {
    pub status: RunStatus,
    pub reason: StopReason,
}

/// Why the run stopped, as `RunOutcome.reason` says it.
#[derive(Debug, Clone, PartialEq)]
pub enum StopReason {
    None,
    Text(String),
    /// Paused on the escalation just queued: "waiting for escalation N".
    WaitingForEscalation,
    /// The step committed with an escalation: its summary.
    Escalated(String),
}

/// A tool call that finished (or was answered from the journal or by a person).
#[derive(Debug, Clone, PartialEq)]
pub struct CallFinished {
    pub step: u32,
    pub tool: String,
    pub attempts: u32,
    pub via: Option<String>,
    /// `Some` when the call failed; the kind when the result names one.
    pub failed: Option<Option<ErrorKind>>,
}

/// Something the loop decided that the person watching should know.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// The budget guard stopped the run (the reason says which budget).
    Stopped { reason: String },
    /// The model answered; `degraded` when no tools were left.
    FinalAnswer { step: u32, degraded: bool },
    /// A pausing escalation was raised.
    Escalated {
        id: EscalationId,
        kind: EscalationKind,
        summary: String,
    },
    /// A report that does not pause (tool_bug, all_tools_failed) was queued; the run
    /// goes on.
    ToolBugQueued {
        id: EscalationId,
        kind: EscalationKind,
    },
    /// The stuck detector fired for the first time; the model was nudged.
    Nudged { step: u32, what: String },
    /// Every tool was withdrawn; the model is asked for an answer without tools.
    Degraded,
    /// The run ended as failed (model failure, truncated answer).
    Failed { reason: String },
    /// The context was compacted (issue 15): estimated tokens before and after.
    Compacted { step: u32, before: u64, after: u64 },
    /// A final answer failed the output schema (issue 26); the model is asked again.
    AnswerRejected {
        step: u32,
        attempt: u32,
        attempts: u32,
        problem: String,
    },
    /// A person's message was delivered to the model after `step` (issue 21).
    MessageDelivered { step: u32, by: String },
}

/// Why a run is asked to stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopCause {
    /// `agentrun runs cancel`: the run ends as `cancelled`, for good.
    Cancel,
    /// SIGTERM or Ctrl-C to the process driving it: `interrupted`, resumable.
    Signal,
    /// The worker driving it shuts down: back to the queue for another worker.
    WorkerShutdown,
    /// The run's time budget (`max_duration`) ran out mid-step: `budget_exhausted`.
    Deadline,
}

/// A request to stop the run: why, who asked, and their words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopRequest {
    pub cause: StopCause,
    /// Who asked (a user, a worker's name, "signal", "time budget").
    pub by: String,
    /// Their reason, when they gave one.
    pub reason: Option<String>,
}

impl StopRequest {
    pub fn new(cause: StopCause, by: impl Into<String>) -> StopRequest {
        StopRequest {
            cause,
            by: by.into(),
            reason: None,
        }
    }

    /// The status the run ends with.
    pub fn status(&self) -> RunStatus {
        match self.cause {
            StopCause::Cancel => RunStatus::Cancelled,
            StopCause::Signal => RunStatus::Interrupted,
            StopCause::WorkerShutdown => RunStatus::Queued,
            StopCause::Deadline => RunStatus::BudgetExhausted,
        }
    }
}

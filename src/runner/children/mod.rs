//! Sub-agents as durable child runs (issue 26).
//!
//! A call of an `[agents.NAME]` tool starts a child run in the same database: its own
//! id, its own snapshot ([`crate::setup::child::plan`]), its own lease, driven in this process by
//! the one lifecycle (`lifecycle::drive`, with the pulse that hears a cancel) while
//! the parent's call waits for it, alongside the step's other calls.
//!
//! **One call, one child.** The child is keyed by the parent call's idempotency key
//! (`AGENTRUN_CALL_ID`, unique in the store: `runs_child_key`). Running the call again —
//! after a crash, or when the parent is resumed — finds that child: a finished one's
//! answer is reused, an unfinished one is resumed from its last committed step.
//!
//! **Budgets.** A child's budgets are the smaller of its task's own and what the
//! parent has left as the call starts (steps, tokens, cost, time); what it spent is
//! the call's [`Spent`], added to the parent's loop state when the call ends, and read
//! back from the child's row when a journaled outcome is reused.
//!
//! **Stops.** A child that waits for a person stops the parent too
//! ([`Execution::ChildWaiting`]); the escalation is the child's. A parent that stops
//! with a child in flight (cancel, signal, time budget) drops the child's future: the
//! [`Hold`] then writes the child down as cancelled (when a cancel was asked for it
//! or its parent) or interrupted, and gives its lease up.

use super::lifecycle::{self, Lifecycle, StopOn};
use super::observe::Unobserved;
use super::{RunError, RunOutcome, Runner};
use crate::config::AgentSpec;
use crate::machine::state::LoopState;
use crate::model::{Message, Role};
use crate::recovery::{CallOutcome, Execution, failed};
use crate::setup::{self, SetupError};
use crate::store::{Lease, NewRun, ParentLink, RunId, RunRow, RunStatus, Spent, Store, StoreError};
use crate::taxonomy::ErrorKind;
use crate::tools::outcome::ToolError;
use crate::trace::{EventSink, NoteKind, TraceEvent};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// One call of a sub-agent, as the driver hands it over.
pub(crate) struct ChildCall<'a> {
    pub name: &'a str,
    pub agent: &'a AgentSpec,
    pub call_id: &'a str,
    /// The call's idempotency key: the child's key in the store.
    pub key: &'a str,
    pub args: &'a Value,
    /// The parent's loop state as of the call's start, and its time left then.
    pub parent: &'a LoopState,
    pub time_left: Option<Duration>,
}

/// Why a child could not be started or driven (the call's `agent_failed` error).
#[derive(Debug, thiserror::Error)]
enum ChildError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("its stored config snapshot cannot be read: {0}")]
    Snapshot(String),
}

/// Runs the call: finds or creates its child, drives it, and turns how it ended into
/// the call's result. Never fails: a problem is the call's classified error.
pub(crate) async fn run(parent: &Runner, c: &ChildCall<'_>, events: &dyn EventSink) -> Execution {
    let prompts = &parent.resolved.snapshot.prompts;
    let (depth, max) = (
        parent.resolved.snapshot.depth,
        parent.resolved.tools.policy.max_depth,
    );
    if depth >= max {
        let err = ToolError::new(
            ErrorKind::DepthLimit,
            format!(
                "sub-agent {} was not started: this run is a sub-agent {depth} level(s) deep, \
                 and [policy] max_depth is {max}",
                c.name
            ),
        );
        return Execution::Done(failed(&err, 0, prompts));
    }
    match drive_child(parent, c, events).await {
        Ok(execution) => execution,
        Err(e) => {
            let err = ToolError::new(
                ErrorKind::AgentFailed,
                format!("sub-agent {} could not run: {e}", c.name),
            );
            Execution::Done(failed(&err, 1, prompts))
        }
    }
}

async fn drive_child(
    parent: &Runner,
    c: &ChildCall<'_>,
    events: &dyn EventSink,
) -> Result<Execution, ChildError> {
    let store = &parent.store;
    let note = |message: String| {
        events.emit(TraceEvent::Note {
            kind: NoteKind::SubAgent,
            message,
            at_ms: None,
        })
    };
    let (id, lease) = match store.child_by_key(c.key)? {
        Some(row) if !resumable(row.status) => {
            note(format!(
                "sub-agent {}: run {} had finished ({})",
                c.name, row.id, row.status
            ));
            return Ok(ended(parent, c.name, &row.id, &stored_end(store, &row)?));
        }
        Some(row) => {
            let lease = store.acquire(&row.id)?;
            store.set_status(&lease, RunStatus::Running, None)?;
            note(format!(
                "sub-agent {}: resuming run {} ({})",
                c.name, row.id, row.status
            ));
            (row.id, lease)
        }
        None => {
            let (id, lease) = create(parent, c)?;
            note(format!("sub-agent {}: started run {id}", c.name));
            (id, lease)
        }
    };
    let row = store.run(&id)?;
    let snapshot = super::worker::stored_snapshot(store, &id)
        .map_err(|e| ChildError::Snapshot(e.to_string()))?;
    let child = Runner {
        store: store.clone(),
        lease: lease.clone(),
        resolved: setup::resolve(snapshot)?,
        max_steps: row.max_steps,
        max_tokens: row.max_tokens,
        clock: parent.clock.clone(),
        observer: Arc::new(Unobserved),
    };
    let mut hold = Hold {
        store: store.clone(),
        lease,
        parent: parent.run_id().clone(),
        armed: true,
    };
    // Boxed: the child's driver holds calls that may start children of their own.
    let how = Lifecycle {
        heartbeat_every: lifecycle::HEARTBEAT_EVERY,
        stop_on: StopOn::CancelOnly,
    };
    let outcome: std::pin::Pin<Box<dyn std::future::Future<Output = _> + '_>> =
        Box::pin(lifecycle::drive(&child, how));
    let outcome = outcome.await;
    hold.armed = false;
    let outcome = outcome?;
    note(format!(
        "sub-agent {}: run {id} ended {}",
        c.name, outcome.status
    ));
    Ok(ended(parent, c.name, &id, &End::from_outcome(&outcome)))
}

/// Creates the child run: the agent's task with the call's input, budgets capped by
/// what the parent has left, linked to the parent call by its key.
fn create(parent: &Runner, c: &ChildCall<'_>) -> Result<(RunId, Lease), ChildError> {
    let mut plan = crate::setup::child::plan(&parent.resolved.snapshot, c.agent)?;
    let left = Left::of(parent, c.parent, c.time_left);
    let max_steps = plan.max_steps.min(left.steps);
    let max_tokens = plan.max_tokens.min(left.tokens);
    let settings = &mut plan.snapshot.settings;
    if let Some(cost) = left.cost {
        settings.max_cost = Some(settings.max_cost.map_or(cost, |own| own.min(cost)));
    }
    if let Some(ms) = left.ms {
        settings.max_duration_ms = Some(settings.max_duration_ms.map_or(ms, |own| own.min(ms)));
    }
    let prompt = task_text(&plan.task.prompt, c.args);
    let messages = [
        Message::text(Role::System, plan.snapshot.prompts.system.trim()),
        Message::text(Role::User, &prompt),
    ];
    let id = RunId::generate();
    let snapshot_json =
        serde_json::to_string(&plan.snapshot).map_err(|e| ChildError::Snapshot(e.to_string()))?;
    let state = serde_json::to_string(&LoopState::default())
        .map_err(|e| ChildError::Snapshot(e.to_string()))?;
    let lease = parent.store.create_child_run(
        &NewRun {
            id: id.clone(),
            task: &prompt,
            task_path: &plan.task.path.display().to_string(),
            snapshot: &snapshot_json,
            scripts: &plan.snapshot.scripts,
            max_steps,
            max_tokens,
            messages: &messages,
            state: &state,
        },
        &ParentLink {
            run: parent.run_id().clone(),
            call: c.call_id.to_string(),
        },
        c.key,
    )?;
    Ok((id, lease))
}

/// The child's task: the agent's task file, then what the call asks. The default
/// input (`{ task }`) is appended as text; any other input as its JSON.
fn task_text(body: &str, args: &Value) -> String {
    let input = match args.as_object() {
        Some(o) if o.len() == 1 && o.get("task").is_some_and(Value::is_string) => {
            o["task"].as_str().unwrap_or_default().to_string()
        }
        _ => format!(
            "Input:\n{}",
            serde_json::to_string_pretty(args).unwrap_or_default()
        ),
    };
    format!("{}\n\n{input}", body.trim_end())
}

/// What the parent has left when a call starts.
struct Left {
    steps: u32,
    tokens: u64,
    cost: Option<f64>,
    ms: Option<u64>,
}

impl Left {
    fn of(parent: &Runner, state: &LoopState, time_left: Option<Duration>) -> Left {
        let settings = &parent.resolved.snapshot.settings;
        Left {
            steps: parent.max_steps.saturating_sub(state.steps_used()),
            tokens: parent.max_tokens.saturating_sub(state.tokens_used()),
            cost: settings
                .max_cost
                .map(|max| (max - state.cost_used()).max(0.0)),
            ms: time_left.map(|d| d.as_millis() as u64),
        }
    }
}

/// Whether a child in this status is driven again (else its end is read as stored).
fn resumable(status: RunStatus) -> bool {
    !matches!(
        status,
        RunStatus::Completed
            | RunStatus::Failed
            | RunStatus::Cancelled
            | RunStatus::BudgetExhausted
    )
}

/// How a child ended, as far as its parent's call is concerned.
struct End {
    status: RunStatus,
    answer: Option<String>,
    reason: Option<String>,
    escalation: Option<String>,
    structured: bool,
}

impl End {
    fn from_outcome(o: &RunOutcome) -> End {
        End {
            status: o.status,
            answer: o.answer.clone(),
            reason: o.reason.clone(),
            escalation: o.escalation_id.map(|e| e.to_string()),
            structured: o.structured,
        }
    }
}

/// A finished child's end, from its row.
fn stored_end(store: &Store, row: &RunRow) -> Result<End, StoreError> {
    let structured = store
        .snapshot(&row.id)
        .ok()
        .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        .is_some_and(|v| v["output"].is_object());
    Ok(End {
        status: row.status,
        answer: row.answer.clone(),
        reason: row.error.clone(),
        escalation: None,
        structured,
    })
}

/// The call's result for a child's end: its answer, a classified error, or a pause.
fn ended(parent: &Runner, name: &str, id: &RunId, end: &End) -> Execution {
    let prompts = &parent.resolved.snapshot.prompts;
    let reason = end.reason.as_deref().unwrap_or("no reason given");
    let error = |kind: ErrorKind, message: String| {
        let mut o = failed(&ToolError::new(kind, message), 1, prompts);
        o.spent = Some(spent(&parent.store, id));
        Execution::Done(o)
    };
    match end.status {
        RunStatus::Completed => {
            let answer = end.answer.clone().unwrap_or_default();
            let content = if end.structured {
                serde_json::from_str(&answer).unwrap_or(Value::String(answer))
            } else {
                Value::String(answer)
            };
            Execution::Done(CallOutcome {
                content,
                is_error: false,
                error: None,
                attempts: 1,
                via: None,
                spent: Some(spent(&parent.store, id)),
            })
        }
        RunStatus::Escalated | RunStatus::AwaitingApproval => Execution::ChildWaiting {
            reason: match &end.escalation {
                Some(e) => {
                    format!("sub-agent {name} (run {id}) is waiting for escalation {e}: {reason}")
                }
                None => format!("sub-agent {name} (run {id}) is waiting for a person: {reason}"),
            },
        },
        RunStatus::BudgetExhausted => error(
            ErrorKind::Budget,
            format!("sub-agent {name} (run {id}) stopped on its budget: {reason}"),
        ),
        RunStatus::Cancelled => error(
            ErrorKind::AgentFailed,
            format!("sub-agent {name} (run {id}) was cancelled: {reason}"),
        ),
        status => error(
            ErrorKind::AgentFailed,
            format!("sub-agent {name} (run {id}) ended {status}: {reason}"),
        ),
    }
}

/// What a child run spent, its own children's included, as of its last commit.
pub(crate) fn spent(store: &Store, id: &RunId) -> Spent {
    let state: LoopState = store
        .checkpoint(id)
        .ok()
        .and_then(|(_, json)| serde_json::from_str(&json).ok())
        .unwrap_or_default();
    Spent {
        steps: state.steps_used(),
        input_tokens: state.input_tokens + state.children.input_tokens,
        output_tokens: state.output_tokens + state.children.output_tokens,
        cost_usd: state.cost_used(),
    }
}

/// A child being driven. Dropped while armed — its parent stopped and dropped the
/// call — it writes the child down: cancelled when a cancel was asked for the child or
/// its parent, else interrupted (resumed with its parent); then gives its lease up.
struct Hold {
    store: Arc<Store>,
    lease: Lease,
    parent: RunId,
    armed: bool,
}

impl Drop for Hold {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let asked = |id: &RunId| self.store.cancel_request(id).ok().flatten();
        match asked(&self.lease.run).or_else(|| asked(&self.parent)) {
            Some(cancel) => {
                let _ = self.store.release(&self.lease);
                let reason = cancel
                    .reason
                    .unwrap_or_else(|| format!("its parent run {} was cancelled", self.parent));
                let _ = self
                    .store
                    .cancel_run(&self.lease.run, &cancel.by, Some(&reason));
            }
            None => {
                let why = format!("its parent run {} stopped", self.parent);
                let _ = self
                    .store
                    .set_status(&self.lease, RunStatus::Interrupted, Some(&why));
                let _ = self.store.release(&self.lease);
            }
        }
    }
}

/// The run at the top of `id`'s parents (`id` itself for a run people started): the
/// one to resume, which resumes its children where their calls wait ([`Store::top_of`]).
pub fn top_of(store: &Store, id: &RunId) -> RunId {
    store.top_of(id)
}

/// Cancels the unfinished descendants of `id` (deepest first): asked for a parent's
/// cancel, so its children stop with it wherever they are held.
pub fn cancel_descendants(store: &Store, id: &RunId, by: &str) -> Result<(), StoreError> {
    for child in store.children(id)? {
        if matches!(child.status, RunStatus::Completed | RunStatus::Cancelled) {
            continue;
        }
        cancel_descendants(store, &child.id, by)?;
        let reason = format!("its parent run {id} was cancelled");
        store.cancel_run(&child.id, by, Some(&reason))?;
    }
    Ok(())
}

/// Fills in what each journaled sub-agent call's child spent (a reused outcome counts
/// against the parent as a fresh one does).
pub(crate) fn fill_spent(parent: &Runner, journal: &mut [crate::store::JournalEntry]) {
    for e in journal.iter_mut() {
        let agent = parent
            .resolved
            .tools
            .tools
            .get(&e.tool)
            .is_some_and(|d| matches!(d.kind, crate::config::ToolKind::Agent(_)));
        if !agent || e.result.is_none() {
            continue;
        }
        let key = parent
            .resolved
            .snapshot
            .call_key(parent.run_id().as_str(), e.step, &e.call_id);
        if let Ok(Some(row)) = parent.store.child_by_key(&key) {
            e.spent = Some(spent(&parent.store, &row.id));
        }
    }
}

//! The loop: model step, tool calls through the recovery layer, checkpoint — until a
//! final answer, a guard, or a person is needed.
//!
//! Durability follows DESIGN §5: the model's response is journaled as soon as it
//! arrives, each call's start and outcome as they happen, and the step's messages with
//! the loop state in one commit. Resuming is running this same loop again: a journaled
//! response is reused instead of asking the model, a journaled outcome instead of
//! calling the tool.

mod calls;
pub mod escalate;
pub mod observe;
mod policies;

use crate::clock::Clock;
use crate::config::ToolDef;
use crate::fault;
use crate::machine::state::{LoopState, budget_note, check_budget};
use crate::model::{self, Message, ModelRequest, Part, Role, StopReason, ToolCall, ToolSpec};
use crate::setup::Resolved;
use crate::store::{
    CallRecord, EscalationId, Facts, JournalEntry, Lease, NewEscalation, RunId, RunStatus,
    StepCommit, Store, StoreError,
};
use crate::tools::outcome::ErrorKind;
use crate::trace::EventBuffer;
use calls::{CallInput, CallResult, ask_user_spec};
use observe::{CallFinished, Notice, Observer, StepStart};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// How a run ended this time (it may be resumed later).
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub run_id: RunId,
    pub status: RunStatus,
    pub answer: Option<String>,
    pub steps: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub escalation_id: Option<EscalationId>,
    /// Why the run stopped, when it is not completed.
    pub reason: Option<String>,
}

pub struct Runner {
    pub store: Arc<Store>,
    pub lease: Lease,
    pub resolved: Resolved,
    pub max_steps: u32,
    pub max_tokens: u64,
    pub clock: Arc<dyn Clock>,
    pub observer: Arc<dyn Observer>,
}

/// Why a run could not go on: the store failed, or the loop state could not be
/// written (a bug, not a damaged database).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("run {run}: the loop state cannot be saved: {source}")]
    State {
        run: RunId,
        source: serde_json::Error,
    },
}

/// What the loop knows between steps.
struct Loop {
    state: LoopState,
    messages: Vec<Message>,
}

/// What a step's calls decided, applied when the step commits.
#[derive(Default)]
struct StepPlan {
    /// System notes to the model (a withdrawn tool, a stuck nudge).
    notes: Vec<Message>,
    /// A pausing escalation: problem, facts.
    escalation: Option<(String, Facts)>,
}

/// What a step commits, besides the messages and the state.
struct Commit<'a> {
    status: RunStatus,
    answer: Option<&'a str>,
    error: Option<&'a str>,
    outcome: Option<&'a CallRecord>,
    escalation: Option<&'a NewEscalation<'a>>,
}

impl Commit<'_> {
    fn running() -> Commit<'static> {
        Commit {
            status: RunStatus::Running,
            answer: None,
            error: None,
            outcome: None,
            escalation: None,
        }
    }
}

fn state_json(run: &RunId, state: &LoopState) -> Result<String, RunError> {
    serde_json::to_string(state).map_err(|source| RunError::State {
        run: run.clone(),
        source,
    })
}

impl Runner {
    pub(crate) fn run_id(&self) -> &RunId {
        &self.lease.run
    }

    /// Drives the run from its last checkpoint until it stops.
    pub async fn run(&self) -> Result<RunOutcome, RunError> {
        let mut lp = self.load()?;
        if let Some(outcome) = self.apply_decisions(&mut lp)? {
            return Ok(outcome);
        }
        loop {
            if let Some(stop) = check_budget(&lp.state, self.max_steps, self.max_tokens) {
                let reason = stop.message();
                self.store
                    .set_status(&self.lease, RunStatus::BudgetExhausted, Some(&reason))?;
                self.observer.notice(&Notice::Stopped {
                    reason: reason.clone(),
                });
                return Ok(self.outcome(&lp, RunStatus::BudgetExhausted, Some(reason)));
            }
            if let Some(outcome) = self.step(&mut lp).await? {
                return Ok(outcome);
            }
        }
    }

    fn load(&self) -> Result<Loop, StoreError> {
        let (_, state_json) = self.store.checkpoint(self.run_id())?;
        let state: LoopState =
            serde_json::from_str(&state_json).map_err(|e| StoreError::Corrupt {
                run: self.run_id().to_string(),
                message: format!("loop state: {e}"),
            })?;
        let messages = self
            .store
            .messages(self.run_id())?
            .into_iter()
            .map(|m| m.message)
            .collect();
        Ok(Loop { state, messages })
    }

    /// One model step and its tool calls. `Some` when the run stops.
    async fn step(&self, lp: &mut Loop) -> Result<Option<RunOutcome>, RunError> {
        let step = lp.state.steps + 1;
        let observer = self.observer.clone();
        let events = EventBuffer::observed(Arc::new(move |e| observer.event(e)));
        let stored = self.store.model_turn(self.run_id(), step)?;
        // A step begun by an earlier process may have journaled outcomes and people's
        // decisions; a step whose model turn arrives now has neither, so its reads are
        // skipped on the hot path.
        let resumed = stored.is_some();
        let response = match stored {
            Some(r) => r,
            None => match self.ask_model(lp, &events).await {
                Ok(r) => {
                    self.store
                        .record_model_turn(&self.lease, step, &r, &events.take())?;
                    fault::point("after_model_stored");
                    r
                }
                Err(e) => return self.fail_model(lp, step, e, &events).map(Some),
            },
        };
        let mut next = lp.state.clone();
        next.steps = step;
        next.input_tokens += response.usage.input;
        next.output_tokens += response.usage.output;
        let assistant = response.message.clone();
        let calls = assistant.tool_calls();
        if response.stop == StopReason::MaxTokens {
            return self
                .finish_truncated(lp, next, assistant, &events)
                .map(Some);
        }
        if calls.is_empty() {
            return self.finish_answer(lp, next, assistant, &events).map(Some);
        }
        let (journal, decisions) = if resumed {
            let journal: HashMap<String, JournalEntry> = self
                .store
                .journal_for_step(self.run_id(), step)?
                .into_iter()
                .map(|e| (e.call_id.clone(), e))
                .collect();
            (journal, self.decisions_for_step(step)?)
        } else {
            (HashMap::new(), HashMap::new())
        };
        let offered: Vec<String> = self
            .offered_tools(&lp.state)
            .into_iter()
            .map(|t| t.name)
            .collect();
        let mut new_messages = vec![assistant];
        let mut plan = StepPlan::default();
        let mut last_fresh = None;
        for (i, call) in calls.iter().enumerate() {
            let input = CallInput {
                step,
                call,
                entry: journal.get(&call.id),
                decision: decisions.get(&call.id),
                state: &next,
                index: i,
                offered: &offered,
                messages: &lp.messages,
                events: &events,
            };
            let (record, fresh) = match self.run_call(input).await? {
                CallResult::Paused { escalation, status } => {
                    return Ok(Some(self.paused(lp, status, escalation)));
                }
                CallResult::Done { record, fresh } => (record, fresh),
            };
            self.observer
                .call_finished(&describe_call(step, call, &record));
            new_messages.push(Message::tool_result(
                &call.id,
                record.result.clone(),
                record.is_error,
            ));
            let finished = policies::Finished {
                step,
                call,
                record: &record,
                fresh,
            };
            self.after_call(&mut next, &mut plan, &finished, lp)?;
            // A non-idempotent outcome is journaled at once even when it is the last:
            // should the step commit be lost, it is reused instead of becoming unknown.
            let at_once = i + 1 < calls.len() || self.must_not_repeat(call);
            if fresh && at_once {
                self.store
                    .record_outcome(&self.lease, step, &record, &events.take())?;
                fault::point("after_tool_outcome");
            } else if fresh {
                last_fresh = Some(record);
            }
        }
        self.finish_step(lp, next, new_messages, plan, last_fresh.as_ref(), &events)
    }

    /// A call whose effect must not happen twice: marked started before it runs, and
    /// its outcome journaled as soon as it is known.
    fn must_not_repeat(&self, call: &ToolCall) -> bool {
        let def = self.resolved.tools.tools.get(&call.name);
        def.is_some_and(|d| !d.idempotent)
    }

    fn finish_answer(
        &self,
        lp: &mut Loop,
        next: LoopState,
        assistant: Message,
        events: &EventBuffer,
    ) -> Result<RunOutcome, RunError> {
        let answer = assistant.joined_text();
        let degraded = next.degraded;
        self.observer.notice(&Notice::FinalAnswer {
            step: next.steps,
            degraded,
        });
        let reason = degraded
            .then(|| "degraded: answered without tools after every tool was withdrawn".to_string());
        let commit = Commit {
            status: RunStatus::Completed,
            answer: Some(&answer),
            error: reason.as_deref(),
            ..Commit::running()
        };
        self.commit(lp, next, vec![assistant], &commit, events)?;
        Ok(self.outcome(lp, RunStatus::Completed, reason))
    }

    fn paused(&self, lp: &Loop, status: RunStatus, escalation: EscalationId) -> RunOutcome {
        let mut o = self.outcome(
            lp,
            status,
            Some(format!("waiting for escalation {escalation}")),
        );
        o.escalation_id = Some(escalation);
        o
    }

    async fn ask_model(
        &self,
        lp: &Loop,
        events: &EventBuffer,
    ) -> Result<model::ModelResponse, model::ModelError> {
        let system = format!(
            "{}\n\n{}",
            lp.messages
                .first()
                .map(Message::joined_text)
                .unwrap_or_default(),
            budget_note(&lp.state, self.max_steps, self.max_tokens)
        );
        let tools = self.offered_tools(&lp.state);
        let live = observe::LiveView(self.observer.as_ref());
        let req = ModelRequest {
            system: &system,
            messages: lp.messages.get(1..).unwrap_or(&[]),
            tools: &tools,
            max_output_tokens: self.resolved.snapshot.max_output_tokens,
            live: Some(&live),
        };
        let model = self
            .resolved
            .models
            .first()
            .map(|m| m.describe())
            .unwrap_or_default();
        self.observer.step_started(&StepStart {
            step: lp.state.steps + 1,
            max_steps: self.max_steps,
            tokens: lp.state.tokens_used(),
            max_tokens: self.max_tokens,
            model: &model,
        });
        let call = model::retry::complete(&self.resolved.models, &req, self.clock.as_ref(), events);
        observe::with_heartbeat(self.observer.as_ref(), call).await
    }

    /// The task's tools from tools.toml (its subset, or all).
    fn configured_tools(&self) -> Vec<&ToolDef> {
        let subset = self.resolved.snapshot.tool_subset.as_ref();
        self.resolved
            .tools
            .tools
            .values()
            .filter(|t| subset.is_none_or(|s| s.contains(&t.name)))
            .collect()
    }

    /// Tools offered to the model this step: the configured ones minus withdrawn ones,
    /// plus `ask_user` — none at all once the run is degraded.
    fn offered_tools(&self, state: &LoopState) -> Vec<ToolSpec> {
        if state.degraded {
            return Vec::new();
        }
        let mut specs: Vec<ToolSpec> = self
            .configured_tools()
            .into_iter()
            .filter(|t| !state.disabled.contains(&t.name))
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.input_schema.clone(),
            })
            .collect();
        if !specs.is_empty() {
            specs.push(ask_user_spec());
        }
        specs
    }

    fn commit(
        &self,
        lp: &mut Loop,
        next: LoopState,
        new_messages: Vec<Message>,
        c: &Commit<'_>,
        events: &EventBuffer,
    ) -> Result<Option<EscalationId>, RunError> {
        let state = state_json(self.run_id(), &next)?;
        let id = self.store.commit_step(
            &self.lease,
            &StepCommit {
                step: next.steps,
                messages: &new_messages,
                state: &state,
                input_tokens: next.input_tokens,
                output_tokens: next.output_tokens,
                status: c.status,
                answer: c.answer,
                error: c.error,
                outcome: c.outcome,
                events: &events.take(),
                escalation: c.escalation,
            },
        )?;
        fault::point("after_commit");
        lp.messages.extend(new_messages);
        lp.state = next;
        Ok(id)
    }

    fn fail_model(
        &self,
        lp: &Loop,
        step: u32,
        e: model::ModelError,
        events: &EventBuffer,
    ) -> Result<RunOutcome, RunError> {
        let reason = format!("model call for step {step} failed: {e}");
        self.store
            .record_events(&self.lease, lp.state.steps, &events.take())?;
        self.store
            .set_status(&self.lease, RunStatus::Failed, Some(&reason))?;
        self.observer.notice(&Notice::Failed {
            reason: reason.clone(),
        });
        Ok(self.outcome(lp, RunStatus::Failed, Some(reason)))
    }

    /// A response cut at the output-token limit is not an answer: keep it in the
    /// transcript with a note saying so, and stop honestly.
    fn finish_truncated(
        &self,
        lp: &mut Loop,
        next: LoopState,
        assistant: Message,
        events: &EventBuffer,
    ) -> Result<RunOutcome, RunError> {
        let reason = "the model's response was cut off at its output-token limit; \
                      it is not a final answer"
            .to_string();
        // Tool calls in a cut-off response may be incomplete: keep the text only, so
        // the transcript never holds a call without a result.
        let text_only = Message {
            role: Role::Assistant,
            content: assistant
                .content
                .into_iter()
                .filter(|p| matches!(p, Part::Text { .. }))
                .collect(),
        };
        let note = Message::text(Role::System, format!("[agentrun] {reason}."));
        let commit = Commit {
            status: RunStatus::Failed,
            error: Some(&reason),
            ..Commit::running()
        };
        self.commit(lp, next, vec![text_only, note], &commit, events)?;
        self.observer.notice(&Notice::Failed {
            reason: reason.clone(),
        });
        Ok(self.outcome(lp, RunStatus::Failed, Some(reason)))
    }

    fn outcome(&self, lp: &Loop, status: RunStatus, reason: Option<String>) -> RunOutcome {
        let answer = lp
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant && !m.joined_text().is_empty())
            .map(Message::joined_text);
        RunOutcome {
            run_id: self.run_id().clone(),
            status,
            answer,
            steps: lp.state.steps,
            input_tokens: lp.state.input_tokens,
            output_tokens: lp.state.output_tokens,
            escalation_id: None,
            reason,
        }
    }
}

fn describe_call<'a>(step: u32, call: &'a ToolCall, r: &'a CallRecord) -> CallFinished<'a> {
    let kind = r
        .result
        .get("error")
        .and_then(Value::as_str)
        .and_then(ErrorKind::parse);
    CallFinished {
        step,
        tool: &call.name,
        attempts: r.attempts,
        via: r.via.as_deref(),
        failed: r.is_error.then_some(kind),
    }
}

//! The loop: model step, tool calls through the recovery layer, checkpoint — until a
//! final answer, a guard, or a person is needed.
//!
//! Durability follows DESIGN §5: the model's response is journaled as soon as it
//! arrives, each call's start and outcome as they happen, and the step's messages with
//! the loop state in one commit. Resuming is running this same loop again: a journaled
//! response is reused instead of asking the model, a journaled outcome instead of
//! calling the tool.

pub mod progress;
pub mod setup;
pub mod state;

use crate::clock::Clock;
use crate::config::{OnUnknown, ToolDef};
use crate::fault;
use crate::model::{self, Message, ModelRequest, Part, Role, StopReason, ToolCall, ToolSpec};
use crate::recovery::{self, Execution, Gate};
use crate::store::{
    CallRecord, CallStatus, JournalEntry, Lease, RunId, RunStatus, StepCommit, Store, StoreError,
};
use crate::tools::CallContext;
use crate::tools::outcome::{ErrorKind, ToolError};
use crate::trace::{EventBuffer, TraceEvent};
use progress::Progress;
use serde_json::Value;
use setup::Resolved;
use state::{LoopState, budget_note, check_budget};
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
    pub escalation_id: Option<i64>,
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
    pub progress: Arc<Progress>,
}

/// What the loop knows between steps.
struct Loop {
    state: LoopState,
    messages: Vec<Message>,
}

impl Runner {
    fn run_id(&self) -> &RunId {
        &self.lease.run
    }

    /// Drives the run from its last checkpoint until it stops.
    pub async fn run(&self) -> Result<RunOutcome, StoreError> {
        let mut lp = self.load()?;
        loop {
            if let Some(stop) = check_budget(&lp.state, self.max_steps, self.max_tokens) {
                let reason = stop.message();
                self.store
                    .set_status(&self.lease, RunStatus::BudgetExhausted, Some(&reason))?;
                self.progress.say(format!("agentrun: stopped: {reason}"));
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
    async fn step(&self, lp: &mut Loop) -> Result<Option<RunOutcome>, StoreError> {
        let step = lp.state.steps + 1;
        let progress = self.progress.clone();
        let events = EventBuffer::observed(Arc::new(move |e| progress.event(e)));
        let response = match self.store.model_turn(self.run_id(), step)? {
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
            let answer = assistant.joined_text();
            self.progress
                .say(format!("agentrun: step {step}: final answer"));
            self.commit(
                lp,
                next,
                vec![assistant],
                RunStatus::Completed,
                Some(&answer),
                None,
                None,
                &events,
            )?;
            return Ok(Some(self.outcome(lp, RunStatus::Completed, None)));
        }
        let journal: HashMap<String, JournalEntry> = self
            .store
            .journal_for_step(self.run_id(), step)?
            .into_iter()
            .map(|e| (e.call_id.clone(), e))
            .collect();
        let mut new_messages = vec![assistant];
        let mut last_fresh = None;
        for (i, call) in calls.iter().enumerate() {
            let (record, fresh) = self
                .run_call(step, call, journal.get(&call.id), &events)
                .await?;
            self.progress.say(describe_call(step, call, &record));
            new_messages.push(Message::tool_result(
                &call.id,
                record.result.clone(),
                record.is_error,
            ));
            let is_last = i + 1 == calls.len();
            if fresh && !is_last {
                self.store
                    .record_outcome(&self.lease, step, &record, &events.take())?;
                fault::point("after_tool_outcome");
            } else if fresh {
                last_fresh = Some(record);
            }
        }
        self.commit(
            lp,
            next,
            new_messages,
            RunStatus::Running,
            None,
            None,
            last_fresh.as_ref(),
            &events,
        )?;
        Ok(None)
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
        let req = ModelRequest {
            system: &system,
            messages: lp.messages.get(1..).unwrap_or(&[]),
            tools: &tools,
            max_output_tokens: self.resolved.snapshot.max_output_tokens,
        };
        self.progress.say(format!(
            "agentrun: step {}/{}: asking {}",
            lp.state.steps + 1,
            self.max_steps,
            self.resolved
                .models
                .first()
                .map(|m| m.name())
                .unwrap_or_default()
        ));
        model::retry::complete(&self.resolved.models, &req, self.clock.as_ref(), events).await
    }

    /// Tools offered to the model this step: the task's subset, minus withdrawn ones.
    fn offered_tools(&self, state: &LoopState) -> Vec<ToolSpec> {
        let subset = self.resolved.snapshot.tool_subset.as_ref();
        self.resolved
            .tools
            .tools
            .values()
            .filter(|t| subset.is_none_or(|s| s.contains(&t.name)))
            .filter(|t| !state.disabled.contains(&t.name))
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.input_schema.clone(),
            })
            .collect()
    }

    /// Runs (or recovers from the journal) one tool call. Returns the record and
    /// whether it was produced now (and so still needs journaling).
    async fn run_call(
        &self,
        step: u32,
        call: &ToolCall,
        entry: Option<&JournalEntry>,
        events: &EventBuffer,
    ) -> Result<(CallRecord, bool), StoreError> {
        if let Some(e) = entry
            && let Some(result) = &e.result
            && matches!(e.status, CallStatus::Ok | CallStatus::Error)
        {
            let record = CallRecord {
                call_id: e.call_id.clone(),
                status: e.status,
                attempts: e.attempts,
                result: result.clone(),
                is_error: e.is_error,
                via: e.via.clone(),
            };
            return Ok((record, false));
        }
        let def = self.resolved.tools.tools.get(&call.name);
        // Only non-idempotent calls are marked started (an idempotent one may simply
        // run again), so a started call without an outcome may have had its effect.
        if entry.is_some_and(|e| e.started)
            && let Some(def) = def
        {
            return Ok((self.unknown_outcome(call, def, events), true));
        }
        if def.is_some_and(|d| !d.idempotent) {
            self.store.mark_started(&self.lease, step, &call.id)?;
        }
        fault::point("after_tool_intent");
        let ctx = CallContext {
            run_id: self.run_id().as_str(),
            call_id: &call.id,
            clock: self.clock.as_ref(),
            events,
        };
        let gate = |_def: &ToolDef, _args: &Value| Gate::Run;
        let exec = recovery::execute(
            &self.resolved.tools,
            &self.resolved.snapshot.prompts,
            &call.name,
            &call.args,
            &ctx,
            &gate,
        )
        .await;
        fault::point("after_tool_effect");
        let outcome = match exec {
            Execution::Done(o) => o,
            Execution::Paused { tool, .. } => {
                // Approvals arrive with the human queue; until then a pause is a denial.
                let err =
                    ToolError::new(ErrorKind::ApprovalDenied, format!("{tool} needs approval"));
                let content = err.to_model_json(0, self.resolved.snapshot.prompts.hint(err.kind));
                recovery::CallOutcome {
                    content,
                    is_error: true,
                    error: Some(err.kind),
                    attempts: 0,
                    via: None,
                }
            }
        };
        Ok((
            CallRecord {
                call_id: call.id.clone(),
                status: if outcome.is_error {
                    CallStatus::Error
                } else {
                    CallStatus::Ok
                },
                attempts: outcome.attempts,
                result: outcome.content,
                is_error: outcome.is_error,
                via: outcome.via,
            },
            true,
        ))
    }

    fn unknown_outcome(&self, call: &ToolCall, def: &ToolDef, events: &EventBuffer) -> CallRecord {
        let message = format!(
            "the run stopped while `{}` was running; it is unknown whether it took effect",
            call.name
        );
        events.emit_note("outcome_unknown", &message);
        if def.on_unknown == OnUnknown::Escalate {
            // The human queue lands with the escalation work; until then the model is
            // told, which is the safe reading of "never re-run it".
        }
        let err = ToolError::new(ErrorKind::OutcomeUnknown, message);
        CallRecord {
            call_id: call.id.clone(),
            status: CallStatus::Unknown,
            attempts: 0,
            result: err.to_model_json(0, self.resolved.snapshot.prompts.hint(err.kind)),
            is_error: true,
            via: None,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn commit(
        &self,
        lp: &mut Loop,
        next: LoopState,
        new_messages: Vec<Message>,
        status: RunStatus,
        answer: Option<&str>,
        error: Option<&str>,
        outcome: Option<&CallRecord>,
        events: &EventBuffer,
    ) -> Result<(), StoreError> {
        let state = serde_json::to_string(&next).map_err(|e| StoreError::Corrupt {
            run: self.run_id().to_string(),
            message: e.to_string(),
        })?;
        self.store.commit_step(
            &self.lease,
            &StepCommit {
                step: next.steps,
                messages: &new_messages,
                state: &state,
                input_tokens: next.input_tokens,
                output_tokens: next.output_tokens,
                status,
                answer,
                error,
                outcome,
                events: &events.take(),
            },
        )?;
        fault::point("after_commit");
        lp.messages.extend(new_messages);
        lp.state = next;
        Ok(())
    }

    fn fail_model(
        &self,
        lp: &Loop,
        step: u32,
        e: model::ModelError,
        events: &EventBuffer,
    ) -> Result<RunOutcome, StoreError> {
        let reason = format!("model call for step {step} failed: {e}");
        self.store
            .record_events(&self.lease, lp.state.steps, &events.take())?;
        self.store
            .set_status(&self.lease, RunStatus::Failed, Some(&reason))?;
        self.progress.say(format!("agentrun: {reason}"));
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
    ) -> Result<RunOutcome, StoreError> {
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
        self.commit(
            lp,
            next,
            vec![text_only, note],
            RunStatus::Failed,
            None,
            Some(&reason),
            None,
            events,
        )?;
        self.progress.say(format!("agentrun: {reason}"));
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

fn describe_call(step: u32, call: &ToolCall, r: &CallRecord) -> String {
    let attempts = match r.attempts {
        1 => "1 attempt".to_string(),
        n => format!("{n} attempts"),
    };
    let via = r
        .via
        .as_deref()
        .map(|v| format!(" via {v}"))
        .unwrap_or_default();
    let what = if r.is_error {
        let kind = r
            .result
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("error");
        format!("error {kind}")
    } else {
        "ok".to_string()
    };
    format!(
        "agentrun: step {step}: {} {what}{via} ({attempts})",
        call.name
    )
}

trait EmitNote {
    fn emit_note(&self, kind: &str, message: &str);
}

impl EmitNote for EventBuffer {
    fn emit_note(&self, kind: &str, message: &str) {
        use crate::trace::EventSink;
        self.emit(TraceEvent::Note {
            kind: kind.to_string(),
            message: message.to_string(),
        });
    }
}

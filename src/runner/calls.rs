//! One tool call inside a step: reuse a journaled outcome, honour a person's decision,
//! gate approvals and open circuits, run it through the recovery layer, or pause.

use super::escalate::Raise;
use super::observe::Notice;
use super::{RunError, Runner};
use crate::config::Policy;
use crate::config::{OnUnknown, ToolDef};
use crate::fault;
use crate::machine::policy::{call_key, circuit_open, needs_approval};
use crate::machine::state::LoopState;
use crate::model::{Message, ToolCall, ToolSpec};
use crate::recovery::chain::{Chain, Guards};
use crate::recovery::{self, CallOutcome, Execution, Gate};
use crate::store::{
    ApprovalFacts, CallFacts, CallRecord, CallStatus, EscalationId, EscalationKind, EscalationRow,
    Facts, JournalEntry, NewEscalation, QuestionFacts, Resolution, RunStatus,
};
use crate::tools::CallContext;
use crate::tools::outcome::{ErrorKind, ToolError};
use crate::trace::{EventBuffer, EventSink, NoteKind, TraceEvent};
use serde_json::{Value, json};

pub const ASK_USER: &str = "ask_user";

/// The built-in tool the model uses to ask a person a question.
pub fn ask_user_spec() -> ToolSpec {
    ToolSpec {
        name: ASK_USER.into(),
        description: "Ask the person responsible for this task a question only they can \
                      answer (for example, to confirm an email address or an order number). \
                      The run pauses until they reply; the reply is this tool's result."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {"question": {"type": "string", "description": "One clear question."}},
            "required": ["question"]
        }),
    }
}

/// How a call ended in this process.
pub enum CallResult {
    /// `fresh`: produced now, so it still needs journaling.
    Done { record: CallRecord, fresh: bool },
    /// The run pauses for a person.
    Paused {
        escalation: EscalationId,
        status: RunStatus,
    },
}

/// What the call needs from the step around it.
pub struct CallInput<'a> {
    pub step: u32,
    pub call: &'a ToolCall,
    pub entry: Option<&'a JournalEntry>,
    /// The latest decided escalation for this call, if any.
    pub decision: Option<&'a EscalationRow>,
    pub state: &'a LoopState,
    /// The call's position in its turn (from 0): beyond the cap it is not made.
    pub index: usize,
    /// Names of the tools offered to the model in this step; only these may run.
    pub offered: &'a [String],
    pub messages: &'a [Message],
    pub events: &'a EventBuffer,
}

impl Runner {
    pub(super) async fn run_call(&self, c: CallInput<'_>) -> Result<CallResult, RunError> {
        if let Some(record) = journaled(c.entry) {
            return Ok(CallResult::Done {
                record,
                fresh: false,
            });
        }
        let decided = |kind| {
            c.decision
                .filter(|d| d.kind == kind)
                .and_then(|d| d.resolution.as_ref())
        };
        if c.index >= crate::model::limits::MAX_CALLS_PER_TURN {
            let max = crate::model::limits::MAX_CALLS_PER_TURN;
            let err = ToolError::new(
                ErrorKind::TooManyCalls,
                format!("more than {max} tool calls in one turn; this one was not made"),
            );
            return Ok(CallResult::Done {
                record: self.record_from(c.call, Err(err), 0),
                fresh: true,
            });
        }
        if !c.offered.contains(&c.call.name) {
            // DESIGN §3 What runs: a tool defined in tools.toml but not offered in this
            // step (outside the task's subset, withdrawn, or the run is degraded) is
            // as unknown to the model as one never defined (issue 12).
            let err = ToolError::new(
                ErrorKind::UnknownTool,
                format!("no tool named `{}` is available in this step", c.call.name),
            );
            return Ok(CallResult::Done {
                record: self.record_from(c.call, Err(err), 0),
                fresh: true,
            });
        }
        if c.call.name == ASK_USER {
            return self.ask_user(&c, decided(EscalationKind::Question));
        }
        let def = self.resolved.tools.tools.get(&c.call.name);
        let interrupted = c.entry.is_some_and(|e| e.started);
        let unknown = decided(EscalationKind::OutcomeUnknown);
        if let (true, Some(def)) = (interrupted || unknown.is_some(), def)
            && let Some(result) = self.after_unknown(&c, def, unknown)?
        {
            return Ok(result);
        }
        let mut args = c.call.args.clone();
        let mut modified = None;
        if let Some(Resolution::Modify { args: new }) = decided(EscalationKind::ApprovalRequired) {
            args = new.clone();
            modified = Some(new.clone());
        }
        if self.must_not_repeat(c.call) {
            self.store.mark_started(&self.lease, c.step, &c.call.id)?;
        }
        fault::point("after_tool_intent");
        self.observer
            .call_started(&c.call.name, def.map_or(1, |d| d.retry.attempts));
        if let Some(result) = self.decided_hop(&c).await {
            fault::point("after_tool_effect");
            return Ok(result);
        }
        let exec = self.execute(&c, &args, c.decision).await;
        fault::point("after_tool_effect");
        match exec {
            Execution::Done(outcome)
                if outcome.error == Some(ErrorKind::OutcomeUnknown) && outcome.via.is_none() =>
            {
                self.unknown_now(&c, def, outcome, modified)
            }
            Execution::Done(outcome) => Ok(CallResult::Done {
                record: record_of(c.call, outcome, modified),
                fresh: true,
            }),
            Execution::Paused { tool, args } => self.pause_for_approval(&c, &tool, &args),
        }
    }

    /// A person decided on a fallback hop this call paused at: run that hop (approved)
    /// or report the denial, without re-running the tools that failed before it.
    async fn decided_hop(&self, c: &CallInput<'_>) -> Option<CallResult> {
        let d = c.decision?;
        let Facts::ApprovalRequired(facts) = &d.detail.facts else {
            return None;
        };
        let hop = facts.tool.as_str();
        if hop == c.call.name {
            return None;
        }
        let outcome = match d.resolution.as_ref()? {
            Resolution::Approve => {
                let key = self.idempotency_key(&c.call.id);
                let ctx = CallContext {
                    run_id: self.run_id().as_str(),
                    call_id: &c.call.id,
                    key: &key,
                    clock: self.clock.as_ref(),
                    events: c.events,
                };
                let hints = &self.resolved.snapshot.prompts;
                recovery::execute_approved_hop(&self.resolved.tools, hints, hop, &facts.args, &ctx)
                    .await
            }
            Resolution::Deny { reason } => {
                let err = ToolError::new(
                    ErrorKind::ApprovalDenied,
                    format!(
                        "{} failed, and a person declined its fallback {hop}: {reason}",
                        c.call.name
                    ),
                );
                CallOutcome {
                    content: err.to_model_json(0, self.resolved.snapshot.prompts.hint(err.kind)),
                    is_error: true,
                    error: Some(err.kind),
                    attempts: 0,
                    via: None,
                }
            }
            _ => return None,
        };
        Some(CallResult::Done {
            record: record_of(c.call, outcome, None),
            fresh: true,
        })
    }

    async fn execute(
        &self,
        c: &CallInput<'_>,
        args: &Value,
        decision: Option<&EscalationRow>,
    ) -> Execution {
        let key = self.idempotency_key(&c.call.id);
        let ctx = CallContext {
            run_id: self.run_id().as_str(),
            call_id: &c.call.id,
            key: &key,
            clock: self.clock.as_ref(),
            events: c.events,
        };
        let guards = RunGuards {
            state: c.state,
            policy: &self.resolved.tools.policy,
            decision,
        };
        let chain = Chain::new(
            &self.resolved.tools,
            &self.resolved.snapshot.prompts,
            &guards,
            &c.call.id,
            &c.call.name,
            args.clone(),
        );
        recovery::drive(chain, &ctx).await
    }

    fn pause_for_approval(
        &self,
        c: &CallInput<'_>,
        tool: &str,
        args: &Value,
    ) -> Result<CallResult, RunError> {
        let via = (tool != c.call.name).then(|| c.call.name.clone());
        let problem = match &via {
            Some(first) => format!(
                "{first} failed, and its fallback {tool} needs a person's approval before it runs with {args}"
            ),
            None => format!("{tool} needs a person's approval before it runs with {args}"),
        };
        let facts = Facts::ApprovalRequired(ApprovalFacts {
            call_id: c.call.id.as_str().into(),
            tool: tool.to_string(),
            args: args.clone(),
            digest: call_key(tool, args),
            requested_tool: c.call.name.clone(),
        });
        self.pause(c, problem, facts, RunStatus::AwaitingApproval)
    }

    /// Raises an escalation that blocks this call, and pauses.
    fn pause(
        &self,
        c: &CallInput<'_>,
        problem: String,
        facts: Facts,
        status: RunStatus,
    ) -> Result<CallResult, RunError> {
        let (summary, detail) = Raise {
            messages: c.messages,
            problem,
            facts,
        }
        .build();
        let new = NewEscalation {
            step: c.step,
            summary: &summary,
            detail: &detail,
        };
        let id = self
            .store
            .create_escalation(&self.lease, &new, Some(status), &c.events.take())?;
        self.observer.notice(&Notice::Escalated {
            id,
            kind: detail.kind(),
            summary,
        });
        Ok(CallResult::Paused {
            escalation: id,
            status,
        })
    }

    fn ask_user(
        &self,
        c: &CallInput<'_>,
        resolution: Option<&Resolution>,
    ) -> Result<CallResult, RunError> {
        let content = match resolution {
            Some(Resolution::Reply { text }) => Ok(json!({"answer": text})),
            Some(Resolution::Deny { reason }) => Err(ToolError::new(
                ErrorKind::ApprovalDenied,
                format!("the person declined to answer: {reason}"),
            )),
            _ => {
                let question = c
                    .call
                    .args
                    .get("question")
                    .and_then(Value::as_str)
                    .unwrap_or("(no question given)");
                let facts = Facts::Question(QuestionFacts {
                    call_id: c.call.id.as_str().into(),
                    tool: ASK_USER.into(),
                    question: question.to_string(),
                });
                let problem = format!("the agent asks: {question}");
                return self.pause(c, problem, facts, RunStatus::Escalated);
            }
        };
        Ok(CallResult::Done {
            record: self.record_from(c.call, content, 0),
            fresh: true,
        })
    }

    /// `AGENTRUN_CALL_ID` for a call of this run.
    fn idempotency_key(&self, call_id: &str) -> String {
        crate::tools::idempotency_key(
            self.run_id().as_str(),
            &self.resolved.snapshot.call_salt,
            call_id,
        )
    }

    /// A non-idempotent call whose attempt ended without proof that it did not act
    /// (a timeout, a reset, 500/502/504): handled exactly as a call lost in a crash —
    /// the journal keeps it started without an outcome, and the run escalates, or the
    /// model is told when the tool says `on_unknown = "tell_model"`.
    fn unknown_now(
        &self,
        c: &CallInput<'_>,
        def: Option<&ToolDef>,
        outcome: CallOutcome,
        modified: Option<Value>,
    ) -> Result<CallResult, RunError> {
        let message = outcome.content["message"]
            .as_str()
            .unwrap_or("it is unknown whether the call took effect")
            .to_string();
        c.events.emit(TraceEvent::Note {
            kind: NoteKind::OutcomeUnknown,
            message: message.clone(),
        });
        if def.is_some_and(|d| d.on_unknown == OnUnknown::TellModel) {
            let mut record = record_of(c.call, outcome, modified);
            record.status = CallStatus::Unknown;
            return Ok(CallResult::Done {
                record,
                fresh: true,
            });
        }
        let facts = Facts::OutcomeUnknown(CallFacts {
            call_id: c.call.id.as_str().into(),
            tool: c.call.name.clone(),
            args: c.call.args.clone(),
        });
        self.pause(c, message, facts, RunStatus::Escalated)
    }

    /// A call that was started but has no outcome (the process died during it).
    /// `None` means: run it (again).
    fn after_unknown(
        &self,
        c: &CallInput<'_>,
        def: &ToolDef,
        resolution: Option<&Resolution>,
    ) -> Result<Option<CallResult>, RunError> {
        let message = format!(
            "the run stopped while {} was running; it is unknown whether it took effect",
            def.name
        );
        if resolution.is_none() && !def.idempotent {
            c.events.emit(TraceEvent::Note {
                kind: NoteKind::OutcomeUnknown,
                message: message.clone(),
            });
        }
        let content = match resolution {
            Some(Resolution::Approve) => return Ok(None),
            Some(Resolution::Reply { text }) => Ok(json!({"reported_by_person": text})),
            Some(Resolution::Deny { reason }) => Err(ToolError::new(
                ErrorKind::OutcomeUnknown,
                format!("{message}; a person reports it did not take effect: {reason}"),
            )),
            Some(Resolution::Modify { .. }) | None if def.idempotent => return Ok(None),
            _ if def.on_unknown == OnUnknown::TellModel => {
                Err(ToolError::new(ErrorKind::OutcomeUnknown, message))
            }
            _ => {
                let facts = Facts::OutcomeUnknown(CallFacts {
                    call_id: c.call.id.as_str().into(),
                    tool: def.name.clone(),
                    args: c.call.args.clone(),
                });
                let paused = self.pause(c, message, facts, RunStatus::Escalated)?;
                return Ok(Some(paused));
            }
        };
        let mut record = self.record_from(c.call, content, 0);
        if record.is_error {
            record.status = CallStatus::Unknown;
        }
        Ok(Some(CallResult::Done {
            record,
            fresh: true,
        }))
    }

    fn record_from(
        &self,
        call: &ToolCall,
        content: Result<Value, ToolError>,
        attempts: u32,
    ) -> CallRecord {
        let hints = &self.resolved.snapshot.prompts;
        let (result, is_error) = match content {
            Ok(v) => (v, false),
            Err(e) => (e.to_model_json(attempts, hints.hint(e.kind)), true),
        };
        CallRecord {
            call_id: call.id.clone(),
            status: if is_error {
                CallStatus::Error
            } else {
                CallStatus::Ok
            },
            attempts,
            result,
            is_error,
            via: None,
        }
    }
}

/// The loop's answers to the chain's gates: approval rules and people's decisions,
/// then the breaker and withdrawn tools.
struct RunGuards<'a> {
    state: &'a LoopState,
    policy: &'a Policy,
    decision: Option<&'a EscalationRow>,
}

impl Guards for RunGuards<'_> {
    fn approval(&self, def: &ToolDef, args: &Value) -> Gate {
        if needs_approval(def, args, self.policy) {
            return approval_gate(self.decision, &def.name, args);
        }
        Gate::Run
    }

    fn breaker(&self, def: &ToolDef, args: &Value) -> Option<ToolError> {
        if self.state.disabled.contains(&def.name) {
            return Some(ToolError::new(
                ErrorKind::ToolDisabled,
                format!("{} was withdrawn after repeated failures", def.name),
            ));
        }
        circuit_open(self.state, &def.name, args).then(|| {
            ToolError::new(
                ErrorKind::CircuitOpen,
                format!(
                    "{} failed repeatedly with these arguments; the circuit is open",
                    def.name
                ),
            )
        })
    }
}

/// Approval for exactly this tool and these arguments (their digest), for this call.
fn approval_gate(decision: Option<&EscalationRow>, tool: &str, args: &Value) -> Gate {
    let Some((d, Facts::ApprovalRequired(facts))) = decision.map(|d| (d, &d.detail.facts)) else {
        return Gate::Pause;
    };
    let digest = call_key(tool, args);
    match d.resolution.as_ref() {
        Some(Resolution::Approve) if facts.digest == digest => Gate::Run,
        // Modified arguments are approved as given by the person.
        Some(Resolution::Modify { args: approved }) if call_key(tool, approved) == digest => {
            Gate::Run
        }
        Some(Resolution::Deny { reason }) if facts.tool == tool => Gate::Block(ToolError::new(
            ErrorKind::ApprovalDenied,
            format!("a person declined {tool}: {reason}"),
        )),
        _ => Gate::Pause,
    }
}

fn journaled(entry: Option<&JournalEntry>) -> Option<CallRecord> {
    let e = entry?;
    let result = e.result.clone()?;
    matches!(
        e.status,
        CallStatus::Ok | CallStatus::Error | CallStatus::Unknown
    )
    .then(|| CallRecord {
        call_id: e.call_id.clone(),
        status: e.status,
        attempts: e.attempts,
        result,
        is_error: e.is_error,
        via: e.via.clone(),
    })
}

fn record_of(call: &ToolCall, o: CallOutcome, modified: Option<Value>) -> CallRecord {
    // A person changed the arguments: the model must know what actually ran.
    let result = match (modified, o.is_error) {
        (Some(args), false) => json!({"result": o.content, "args_modified_by_person": args}),
        _ => o.content,
    };
    CallRecord {
        call_id: call.id.clone(),
        status: if o.is_error {
            CallStatus::Error
        } else {
            CallStatus::Ok
        },
        attempts: o.attempts,
        result,
        is_error: o.is_error,
        via: o.via,
    }
}

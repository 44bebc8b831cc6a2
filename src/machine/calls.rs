//! One tool call inside a step: reuse a journaled outcome, refuse a tool not offered,
//! honour a person's decision, handle a call a crash interrupted, hand the rest to the
//! recovery chain — or pause for a person.

use super::effects::{CallFinished, Effect, RunCall, Stop, StopReason};
use super::escalate::Raise;
use super::{Machine, Step};
use crate::config::{OnUnknown, ToolDef};
use crate::model::{Message, ToolCall, ToolSpec};
use crate::records::{
    ApprovalFacts, CallFacts, CallRecord, CallStatus, EscalationKind, EscalationRow, Facts,
    JournalEntry, QuestionFacts, Resolution, RunStatus,
};
use crate::recovery::{CallOutcome, Execution};
use crate::taxonomy::ErrorKind;
use crate::tools::outcome::ToolError;
use crate::trace::{NoteKind, TraceEvent};
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

/// Where a call stands after the machine looked at it.
pub(super) enum Next {
    /// It ended: its record, its error kind, and whether it was produced now.
    Ended(Ended),
    /// It waits for [`Effect::RunCall`]'s event, or the run paused.
    Waiting,
}

/// Where one call of the step stands.
pub(super) enum Slot {
    /// Not begun.
    Pending,
    /// Handed to the driver; `modified`: the arguments a person gave, if any.
    Running { modified: Option<Value> },
    /// Ran; its result waits for the calls before it.
    Arrived(Ended),
    /// Ran, and its result may pause the run: settled at the head, alone.
    Held {
        execution: Execution,
        modified: Option<Value>,
    },
    /// Applied.
    Done,
}

/// How a call not yet begun may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Answered without running (journaled, over the per-turn cap, not offered).
    Answered,
    /// Only the recovery chain: may run alongside others.
    Together,
    /// May pause, or depends on what the calls before it decide: runs alone.
    Alone,
}

pub(super) struct Ended {
    pub record: CallRecord,
    pub error: Option<ErrorKind>,
    /// Produced now (not reused from the journal).
    pub fresh: bool,
    /// Journaled when it arrived, ahead of the calls before it.
    pub journaled: bool,
    /// A sub-agent's call: what its child run spent, for this run's budgets.
    pub spent: Option<crate::records::Spent>,
}

impl Machine<'_> {
    /// Applies the step's calls in the model's order until one waits for the chain
    /// or a person, or the step is done; calls that may run together are handed to
    /// the driver as a batch ([`super::batch`]).
    pub(super) fn advance(&mut self) -> Vec<Effect> {
        let mut out = Vec::new();
        loop {
            let Some(step) = self.step.as_mut() else {
                return out;
            };
            let at = step.at;
            if at >= step.calls.len() {
                out.extend(self.finish_step());
                return out;
            }
            let running = step.running;
            let ready = match &step.slots[at] {
                Slot::Arrived(_) => true,
                Slot::Held { .. } => running == 0,
                Slot::Pending | Slot::Running { .. } | Slot::Done => false,
            };
            if ready {
                let next = match std::mem::replace(&mut step.slots[at], Slot::Done) {
                    Slot::Held {
                        execution,
                        modified,
                    } => self.settle(execution, modified, &mut out),
                    Slot::Arrived(ended) => Next::Ended(ended),
                    _ => Next::Waiting,
                };
                match next {
                    Next::Ended(ended) => out.extend(self.ended(ended)),
                    Next::Waiting => return out,
                }
                continue;
            }
            if !matches!(step.slots[at], Slot::Pending) {
                self.fill(&mut out);
                return out;
            }
            match self.kind(at) {
                Kind::Together => {
                    self.fill(&mut out);
                    return out;
                }
                Kind::Alone if running > 0 => return out,
                Kind::Alone | Kind::Answered => match self.begin_call(&mut out) {
                    Next::Ended(ended) => out.extend(self.ended(ended)),
                    Next::Waiting => return out,
                },
            }
        }
    }

    fn current(&self) -> Option<(&Step, &ToolCall)> {
        let step = self.step.as_ref()?;
        Some((step, step.calls.get(step.at)?))
    }

    fn begin_call(&mut self, out: &mut Vec<Effect>) -> Next {
        let Some((step, call)) = self.current() else {
            return Next::Waiting;
        };
        let call = call.clone();
        if let Some(ended) = journaled(step.journal.get(&call.id)) {
            return Next::Ended(ended);
        }
        let max = crate::model::limits::MAX_CALLS_PER_TURN;
        if step.at >= max {
            // docs/ARCHITECTURE.md §3.5 (issue 12 item 7): one turn may not run unbounded work.
            let (n, total) = (step.at + 1, step.calls.len());
            let err = ToolError::new(
                ErrorKind::TooManyCalls,
                format!(
                    "this turn asked for {total} tool calls and one turn may make at most \
                     {max}, so calls {} to {total} were not made (this is call {n}); ask for \
                     it again in a later turn",
                    max + 1
                ),
            );
            return Next::Ended(self.made(&call, Err(err), 0));
        }
        if !step.offered.contains(&call.name) {
            // docs/ARCHITECTURE.md §3.4: a tool defined in tools.toml but not offered in this
            // step (outside the task's subset, withdrawn, or the run is degraded) is
            // as unknown to the model as one never defined (issue 12).
            let err = ToolError::new(
                ErrorKind::UnknownTool,
                format!("no tool named `{}` is available in this step", call.name),
            );
            return Next::Ended(self.made(&call, Err(err), 0));
        }
        if call.name == ASK_USER {
            return self.ask_user(&call, out);
        }
        let def = self.rules.tools.tools.get(&call.name);
        let interrupted = step.journal.get(&call.id).is_some_and(|e| e.started);
        let unknown = self.decided(&call, EscalationKind::OutcomeUnknown).cloned();
        if let (true, Some(def)) = (interrupted || unknown.is_some(), def)
            && let Some(next) = self.after_unknown(&call, def, unknown.as_ref(), out)
        {
            return next;
        }
        self.run(&call, def, out)
    }

    /// The latest decision of this kind on this call, if any.
    fn decided(&self, call: &ToolCall, kind: EscalationKind) -> Option<&Resolution> {
        let step = self.step.as_ref()?;
        let d = step.decisions.get(&call.id).filter(|d| d.kind == kind)?;
        d.resolution.as_ref()
    }

    /// Hands the call to the recovery chain (or a decided fallback hop).
    fn run(&mut self, call: &ToolCall, def: Option<&ToolDef>, out: &mut Vec<Effect>) -> Next {
        let mut args = call.args.clone();
        let modified = match self.decided(call, EscalationKind::ApprovalRequired) {
            Some(Resolution::Modify { args: new }) => Some(new.clone()),
            _ => None,
        };
        if let Some(new) = &modified {
            args = new.clone();
        }
        let must_not_repeat = self.must_not_repeat(&call.name);
        let Some(step) = self.step.as_ref() else {
            return Next::Waiting;
        };
        let number = step.number;
        let decision = step.decisions.get(&call.id).cloned();
        if must_not_repeat {
            out.push(Effect::MarkStarted {
                step: number,
                call_id: call.id.clone(),
            });
        }
        let approved_hop = match self.decided_hop(call, decision.as_ref()) {
            Some(Ok(hop)) => Some(hop),
            Some(Err(denied)) => return Next::Ended(denied),
            None => None,
        };
        let Some(step) = self.step.as_mut() else {
            return Next::Waiting;
        };
        if let Some(slot) = step.calls.iter().position(|c| c.id == call.id) {
            step.slots[slot] = Slot::Running { modified };
            step.running += 1;
        }
        out.push(Effect::RunCall(Box::new(RunCall {
            step: number,
            call_id: call.id.clone(),
            tool: call.name.clone(),
            args,
            approved_hop,
            decision,
            max_attempts: def.map_or(1, |d| d.retry.attempts),
        })));
        Next::Waiting
    }

    /// A person decided on the fallback hop this call paused at: run that hop
    /// (approved: its name and arguments) or report the denial, without re-running
    /// the tools that failed before it.
    fn decided_hop(
        &self,
        call: &ToolCall,
        decision: Option<&EscalationRow>,
    ) -> Option<Result<(String, Value), Ended>> {
        let d = decision?;
        let Facts::ApprovalRequired(f) = &d.detail.facts else {
            return None;
        };
        if f.tool == call.name {
            return None;
        }
        match d.resolution.as_ref()? {
            Resolution::Approve => Some(Ok((f.tool.clone(), f.args.clone()))),
            Resolution::Deny { reason } => {
                let err = ToolError::new(
                    ErrorKind::ApprovalDenied,
                    format!(
                        "{} failed, and a person declined its fallback {}: {reason}",
                        call.name, f.tool
                    ),
                );
                let outcome = CallOutcome {
                    content: err.to_model_json(0, self.rules.prompts.hint(err.kind)),
                    is_error: true,
                    error: Some(err.kind),
                    attempts: 0,
                    via: None,
                    spent: None,
                };
                Some(Err(record_of(call, outcome, None)))
            }
            _ => None,
        }
    }

    /// The chain's answer for the call at the head of the step, once no other call
    /// is running (it may pause the run).
    pub(super) fn settle(
        &mut self,
        execution: Execution,
        modified: Option<Value>,
        out: &mut Vec<Effect>,
    ) -> Next {
        let Some((_, call)) = self.current() else {
            return Next::Waiting;
        };
        let call = call.clone();
        match execution {
            Execution::Done(o) if o.error == Some(ErrorKind::OutcomeUnknown) && o.via.is_none() => {
                self.unknown_now(&call, o, modified, out)
            }
            Execution::Done(o) => Next::Ended(record_of(&call, o, modified)),
            Execution::Paused {
                tool,
                args,
                asked_by,
            } => self.pause_for_approval(&call, &tool, &args, asked_by.as_deref(), out),
            Execution::ChildWaiting { reason } => self.wait_for_child(reason, out),
        }
    }

    /// A sub-agent's child run waits for a person (issue 26): the person answers the
    /// child's escalation, so this run files none; it stops, leaving the call without
    /// an outcome, and its resume runs the call again — which resumes the child.
    fn wait_for_child(&mut self, reason: String, out: &mut Vec<Effect>) -> Next {
        self.step = None;
        out.push(Effect::SetStatus {
            status: RunStatus::Escalated,
            reason: reason.clone(),
        });
        out.push(Effect::Stop(Stop {
            status: RunStatus::Escalated,
            reason: StopReason::Text(reason),
        }));
        Next::Waiting
    }

    fn pause_for_approval(
        &mut self,
        call: &ToolCall,
        tool: &str,
        args: &Value,
        asked_by: Option<&str>,
        out: &mut Vec<Effect>,
    ) -> Next {
        let mut problem = if tool != call.name {
            format!(
                "{} failed, and its fallback {tool} needs a person's approval before it runs with {args}",
                call.name
            )
        } else {
            format!("{tool} needs a person's approval before it runs with {args}")
        };
        // A hook that asked says why (issue 26): the person reads its reason.
        if let Some(why) = asked_by {
            problem.push_str(&format!("; {why}"));
        }
        let facts = Facts::ApprovalRequired(ApprovalFacts {
            call_id: call.id.as_str().into(),
            tool: tool.to_string(),
            args: args.clone(),
            digest: super::policy::call_key(tool, args),
            requested_tool: call.name.clone(),
        });
        self.pause(problem, facts, RunStatus::AwaitingApproval, out)
    }

    /// Raises an escalation that blocks this call, and pauses.
    fn pause(
        &mut self,
        problem: String,
        facts: Facts,
        status: RunStatus,
        out: &mut Vec<Effect>,
    ) -> Next {
        let (summary, detail) = Raise {
            messages: self.context.messages(),
            problem,
            facts,
        }
        .build();
        let step = self.step.take().map_or(self.state.steps + 1, |s| s.number);
        out.push(Effect::Escalate {
            step,
            summary,
            detail,
            pause_as: Some(status),
        });
        out.push(Effect::Stop(Stop {
            status,
            reason: StopReason::WaitingForEscalation,
        }));
        Next::Waiting
    }

    fn ask_user(&mut self, call: &ToolCall, out: &mut Vec<Effect>) -> Next {
        let content = match self.decided(call, EscalationKind::Question) {
            Some(Resolution::Reply { text }) => Ok(json!({"answer": text})),
            Some(Resolution::Deny { reason }) => Err(ToolError::new(
                ErrorKind::ApprovalDenied,
                format!("the person declined to answer: {reason}"),
            )),
            _ => {
                let question = call
                    .args
                    .get("question")
                    .and_then(Value::as_str)
                    .unwrap_or("(no question given)");
                let facts = Facts::Question(QuestionFacts {
                    call_id: call.id.as_str().into(),
                    tool: ASK_USER.into(),
                    question: question.to_string(),
                });
                let problem = format!("the agent asks: {question}");
                return self.pause(problem, facts, RunStatus::Escalated, out);
            }
        };
        Next::Ended(self.made(call, content, 0))
    }

    /// A non-idempotent call whose attempt ended without proof that it did not act
    /// (a timeout, a reset, 500/502/504): handled exactly as a call lost in a crash —
    /// the journal keeps it started without an outcome, and the run escalates, or the
    /// model is told when the tool says `on_unknown = "tell_model"`.
    fn unknown_now(
        &mut self,
        call: &ToolCall,
        outcome: CallOutcome,
        modified: Option<Value>,
        out: &mut Vec<Effect>,
    ) -> Next {
        let message = outcome.content["message"]
            .as_str()
            .unwrap_or("it is unknown whether the call took effect")
            .to_string();
        out.push(Effect::Trace(TraceEvent::Note {
            kind: NoteKind::OutcomeUnknown,
            message: message.clone(),
            at_ms: None,
        }));
        let def = self.rules.tools.tools.get(&call.name);
        if def.is_some_and(|d| d.on_unknown == OnUnknown::TellModel) {
            let mut ended = record_of(call, outcome, modified);
            ended.record.status = CallStatus::Unknown;
            return Next::Ended(ended);
        }
        let facts = Facts::OutcomeUnknown(CallFacts {
            call_id: call.id.as_str().into(),
            tool: call.name.clone(),
            args: call.args.clone(),
        });
        self.pause(message, facts, RunStatus::Escalated, out)
    }

    /// A call that was started but has no outcome (the process died during it).
    /// `None` means: run it (again).
    fn after_unknown(
        &mut self,
        call: &ToolCall,
        def: &ToolDef,
        resolution: Option<&Resolution>,
        out: &mut Vec<Effect>,
    ) -> Option<Next> {
        let message = format!(
            "the run stopped while {} was running; it is unknown whether it took effect",
            def.name
        );
        if resolution.is_none() && !def.idempotent {
            out.push(Effect::Trace(TraceEvent::Note {
                kind: NoteKind::OutcomeUnknown,
                message: message.clone(),
                at_ms: None,
            }));
        }
        let content = match resolution {
            Some(Resolution::Approve) => return None,
            Some(Resolution::Reply { text }) => Ok(json!({"reported_by_person": text})),
            Some(Resolution::Deny { reason }) => Err(ToolError::new(
                ErrorKind::OutcomeUnknown,
                format!("{message}; a person reports it did not take effect: {reason}"),
            )),
            Some(Resolution::Modify { .. }) | None if def.idempotent => return None,
            _ if def.on_unknown == OnUnknown::TellModel => {
                Err(ToolError::new(ErrorKind::OutcomeUnknown, message))
            }
            _ => {
                let facts = Facts::OutcomeUnknown(CallFacts {
                    call_id: call.id.as_str().into(),
                    tool: def.name.clone(),
                    args: call.args.clone(),
                });
                return Some(self.pause(message, facts, RunStatus::Escalated, out));
            }
        };
        let mut ended = self.made(call, content, 0);
        if ended.record.is_error {
            ended.record.status = CallStatus::Unknown;
        }
        Some(Next::Ended(ended))
    }

    /// A result made by the loop itself (no chain ran).
    fn made(&self, call: &ToolCall, content: Result<Value, ToolError>, attempts: u32) -> Ended {
        let hints = self.rules.prompts;
        let (result, error) = match content {
            Ok(v) => (v, None),
            Err(e) => (e.to_model_json(attempts, hints.hint(e.kind)), Some(e.kind)),
        };
        let is_error = error.is_some();
        Ended {
            record: CallRecord {
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
            },
            error,
            fresh: true,
            journaled: false,
            spent: None,
        }
    }

    /// A call ended: tell, add its result to the transcript, apply the policies, and
    /// journal it now when the step's commit is not next.
    fn ended(&mut self, ended: Ended) -> Vec<Effect> {
        let Some((step, call)) = self.current() else {
            return Vec::new();
        };
        let call = call.clone();
        let (number, last) = (step.number, step.at + 1 == step.calls.len());
        let r = &ended.record;
        let mut out = vec![Effect::CallFinished(CallFinished {
            step: number,
            tool: call.name.clone(),
            attempts: r.attempts,
            via: r.via.clone(),
            failed: r.is_error.then_some(ended.error),
        })];
        let message = Message::tool_result(&call.id, r.result.clone(), r.is_error);
        if let (Some(spent), Some(step)) = (&ended.spent, self.step.as_mut()) {
            step.next.children.add(spent);
        }
        out.extend(self.after_call(&call, &ended, message));
        // A non-idempotent outcome is journaled at once even when it is the last:
        // should the step commit be lost, it is reused instead of becoming unknown.
        let at_once = !last || self.must_not_repeat(&call.name);
        let Some(step) = self.step.as_mut() else {
            return out;
        };
        let unjournaled = ended.fresh && !ended.journaled;
        if unjournaled && at_once {
            out.push(Effect::RecordOutcome {
                step: number,
                record: ended.record,
            });
        } else if unjournaled {
            step.last_fresh = Some(ended.record);
        }
        step.at += 1;
        out
    }
}

/// Whether the journal holds the call's outcome (reused, never run again).
pub(super) fn has_outcome(entry: Option<&JournalEntry>) -> bool {
    entry.is_some_and(|e| {
        e.result.is_some()
            && matches!(
                e.status,
                CallStatus::Ok | CallStatus::Error | CallStatus::Unknown
            )
    })
}

fn journaled(entry: Option<&JournalEntry>) -> Option<Ended> {
    if !has_outcome(entry) {
        return None;
    }
    let e = entry?;
    let result = e.result.clone()?;
    // Read back from the store: the kind is parsed at this boundary only.
    let error = e
        .is_error
        .then(|| result.get("error").and_then(Value::as_str))
        .flatten()
        .and_then(ErrorKind::parse);
    Some(Ended {
        record: CallRecord {
            call_id: e.call_id.clone(),
            status: e.status,
            attempts: e.attempts,
            result,
            is_error: e.is_error,
            via: e.via.clone(),
        },
        error,
        fresh: false,
        journaled: false,
        spent: e.spent,
    })
}

pub(super) fn record_of(call: &ToolCall, o: CallOutcome, modified: Option<Value>) -> Ended {
    // A person changed the arguments: the model must know what actually ran.
    let result = match (modified, o.is_error) {
        (Some(args), false) => json!({"result": o.content, "args_modified_by_person": args}),
        _ => o.content,
    };
    Ended {
        record: CallRecord {
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
        },
        error: o.error,
        fresh: true,
        journaled: false,
        spent: o.spent,
    }
}

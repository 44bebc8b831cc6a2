//! The recovery policies applied to the loop after each call (breaker, tool
//! withdrawal, stuck detection, tool-bug reports), and people's decisions on
//! between-step escalations carried into a run.

use super::calls::{ASK_USER, Ended};
use super::effects::{Effect, Notice, Stop, StopReason};
use super::escalate::Raise;
use super::{Machine, policy};
use crate::model::{Message, Role, ToolCall};
use crate::records::{
    BreakerFacts, CallFacts, EscalationRow, Facts, Resolution, RunStatus, StuckFacts,
};
use crate::taxonomy::ErrorKind;
use serde_json::Value;

impl Machine<'_> {
    /// Adds a finished call's result to the step and feeds it to the policies.
    pub(super) fn after_call(
        &mut self,
        call: &ToolCall,
        ended: &Ended,
        result: Message,
    ) -> Vec<Effect> {
        let rules = self.rules;
        let Some(step) = self.step.as_mut() else {
            return Vec::new();
        };
        step.new_messages.push(result);
        if call.name == ASK_USER {
            return Vec::new();
        }
        let mut out = Vec::new();
        let record = &ended.record;
        let error = ended.error.filter(|_| record.is_error);
        if error == Some(ErrorKind::TooManyCalls) {
            // The turn's cap (docs/ARCHITECTURE.md §3.5) refused this call before anything ran:
            // it says nothing about the tool, and a burst of them is one oversized
            // turn, not a loop, so neither the breaker nor the stuck detector sees it.
            return out;
        }
        let message = record
            .result
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("");
        let p = &rules.tools.policy;
        let verdict = policy::record_result(&mut step.next, p, &call.name, &call.args, error);
        if verdict.breaker_opened && step.escalation.is_none() {
            let kind = error.map(ErrorKind::as_str).unwrap_or("error");
            step.escalation = Some((
                format!(
                    "{} failed {} times with the same arguments (last: {kind}, {} attempt(s): {message}); \
                     the circuit for this call is open",
                    call.name, p.breaker_threshold, record.attempts
                ),
                Facts::BreakerOpen(BreakerFacts {
                    call_id: call.id.as_str().into(),
                    tool: call.name.clone(),
                    args: call.args.clone(),
                    digest: policy::call_key(&call.name, &call.args),
                }),
            ));
        }
        if verdict.withdrawn {
            step.notes.push(Message::text(
                Role::System,
                format!(
                    "[agentrun] The tool `{}` failed {} times and has been withdrawn: it is no \
                     longer available in this run.",
                    call.name, p.disable_after
                ),
            ));
        }
        if ended.fresh && error == Some(ErrorKind::ToolBug) {
            out.push(self.report_tool_bug(call, message));
        }
        out.extend(self.observe_stuck(call, error.map(|k| (k, message))));
        out
    }

    /// The stuck detector: a nudge the first time, an escalation the second.
    fn observe_stuck(&mut self, call: &ToolCall, error: Option<(ErrorKind, &str)>) -> Vec<Effect> {
        let rules = self.rules;
        let Some(step) = self.step.as_mut() else {
            return Vec::new();
        };
        let repeats = rules.tools.policy.stuck_repeats;
        let next = &mut step.next;
        let Some(stuck) = policy::observe_call(next, repeats, &call.name, &call.args, error) else {
            return Vec::new();
        };
        policy::reset_stuck_history(next);
        if !next.nudged {
            next.nudged = true;
            let text = format!(
                "{}\n(agentrun saw {}.)",
                rules.prompts.stuck.trim(),
                stuck.describe()
            );
            step.notes.push(Message::text(Role::System, text));
            return vec![Effect::Notice(Notice::Nudged {
                step: step.number,
                what: stuck.describe(),
            })];
        }
        if step.escalation.is_none() {
            step.escalation = Some((
                format!("the agent kept looping after a nudge: {}", stuck.describe()),
                Facts::Stuck(StuckFacts {
                    tool: call.name.clone(),
                }),
            ));
        }
        Vec::new()
    }

    /// A tool bug is a report for the tool's owner; the run goes on.
    fn report_tool_bug(&self, call: &ToolCall, message: &str) -> Effect {
        let (summary, detail) = Raise {
            messages: self.context.messages(),
            problem: format!("{} failed with a tool bug: {message}", call.name),
            facts: Facts::ToolBug(CallFacts {
                call_id: call.id.as_str().into(),
                tool: call.name.clone(),
                args: call.args.clone(),
            }),
        }
        .build();
        Effect::Escalate {
            step: self.step.as_ref().map_or(self.state.steps, |s| s.number),
            summary,
            detail,
            pause_as: None,
        }
    }

    /// Carries people's decisions on between-step escalations (breaker, stuck) into the
    /// run, once each.
    pub(super) fn apply_decisions(&mut self, escalations: &[EscalationRow]) -> Vec<Effect> {
        let mut out = Vec::new();
        for e in escalations {
            if e.open || e.applied || !e.kind.pauses() || e.kind.blocks_a_call() {
                continue;
            }
            let Some(resolution) = &e.resolution else {
                continue;
            };
            let mut state = self.state.clone();
            let mut notes = Vec::new();
            let mut stop = None;
            match (&e.detail.facts, resolution) {
                (Facts::BreakerOpen(f), Resolution::Approve) => {
                    state.open_circuits.remove(&f.digest);
                    state.call_failures.remove(&f.digest);
                    state.disabled.remove(&f.tool);
                    state.tool_failures.remove(&f.tool);
                }
                (Facts::Stuck(_), Resolution::Approve) => {
                    policy::reset_stuck_history(&mut state);
                    state.nudged = false;
                }
                (Facts::Stuck(_), Resolution::Deny { reason }) => {
                    stop = Some(format!(
                        "stopped by a person (escalation {}): {reason}",
                        e.id
                    ));
                }
                (_, Resolution::Reply { text }) => notes.push(Message::text(
                    Role::User,
                    format!(
                        "[A person answered escalation {} ({})] {text}",
                        e.id, e.kind
                    ),
                )),
                _ => {}
            }
            self.context.extend(self.state.steps, &notes);
            self.state = state.clone();
            out.push(Effect::ApplyResolution {
                escalation: e.id,
                step: self.state.steps,
                notes,
                state,
                stop: stop.clone(),
            });
            if let Some(reason) = stop {
                out.push(Effect::Stop(Stop {
                    status: RunStatus::Failed,
                    reason: StopReason::Text(reason),
                }));
                return out;
            }
        }
        out
    }
}

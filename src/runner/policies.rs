//! Applying the recovery policies to the loop after each call (breaker, tool
//! withdrawal, stuck detection, tool-bug reports), committing a step with what they
//! decided, and carrying people's decisions on between-step escalations into a run.

use super::escalate::Raise;
use super::observe::Notice;
use super::{Commit, Loop, RunError, RunOutcome, Runner, StepPlan, state_json};
use crate::machine::policy;
use crate::machine::state::LoopState;
use crate::model::{Message, Role, ToolCall};
use crate::runner::calls::ASK_USER;
use crate::store::{
    BreakerFacts, CallFacts, CallRecord, EscalationRow, Facts, NewEscalation, Resolution,
    RunStatus, StoreError, StuckFacts,
};
use crate::tools::outcome::ErrorKind;
use crate::trace::EventBuffer;
use serde_json::Value;
use std::collections::HashMap;

/// A call that just finished, for the policies.
pub(super) struct Finished<'a> {
    pub step: u32,
    pub call: &'a ToolCall,
    pub record: &'a CallRecord,
    /// Produced now (not reused from the journal).
    pub fresh: bool,
}

impl Runner {
    /// Decided escalations that block a call of this step, by call id (latest wins).
    pub(super) fn decisions_for_step(
        &self,
        step: u32,
    ) -> Result<HashMap<String, EscalationRow>, StoreError> {
        let mut out = HashMap::new();
        for e in self.store.escalations_for_run(self.run_id())? {
            if e.step == step
                && !e.open
                && e.kind.blocks_a_call()
                && let Some(call) = e.call_id()
            {
                out.insert(call.to_string(), e);
            }
        }
        Ok(out)
    }

    /// Feeds a finished call to the recovery policies: breaker, withdrawal, stuck
    /// detection, tool-bug reports.
    pub(super) fn after_call(
        &self,
        next: &mut LoopState,
        plan: &mut StepPlan,
        f: &Finished<'_>,
        lp: &Loop,
    ) -> Result<(), RunError> {
        let (step, call, record, fresh) = (f.step, f.call, f.record, f.fresh);
        if call.name == ASK_USER {
            return Ok(());
        }
        let error = record
            .is_error
            .then(|| record.result.get("error").and_then(Value::as_str))
            .flatten()
            .and_then(ErrorKind::parse);
        let message = record
            .result
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("");
        let policy = &self.resolved.tools.policy;
        let verdict = policy::record_result(next, policy, &call.name, &call.args, error);
        if verdict.breaker_opened && plan.escalation.is_none() {
            let kind = error.map(ErrorKind::as_str).unwrap_or("error");
            plan.escalation = Some((
                format!(
                    "{} failed {} times with the same arguments (last: {kind}, {} attempt(s): {message}); \
                     the circuit for this call is open",
                    call.name, policy.breaker_threshold, record.attempts
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
            plan.notes.push(Message::text(
                Role::System,
                format!(
                    "[agentrun] The tool `{}` failed {} times and has been withdrawn: it is no \
                     longer available in this run.",
                    call.name, policy.disable_after
                ),
            ));
        }
        if fresh && error == Some(ErrorKind::ToolBug) {
            self.report_tool_bug(step, call, message, lp)?;
        }
        let observed = error.map(|k| (k, message));
        if let Some(stuck) =
            policy::observe_call(next, policy.stuck_repeats, &call.name, &call.args, observed)
        {
            policy::reset_stuck_history(next);
            if !next.nudged {
                next.nudged = true;
                let text = format!(
                    "{}\n(agentrun saw {}.)",
                    self.resolved.snapshot.prompts.stuck.trim(),
                    stuck.describe()
                );
                plan.notes.push(Message::text(Role::System, text));
                self.observer.notice(&Notice::Nudged {
                    step,
                    what: stuck.describe(),
                });
            } else if plan.escalation.is_none() {
                plan.escalation = Some((
                    format!("the agent kept looping after a nudge: {}", stuck.describe()),
                    Facts::Stuck(StuckFacts {
                        tool: call.name.clone(),
                    }),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn report_tool_bug(
        &self,
        step: u32,
        call: &ToolCall,
        message: &str,
        lp: &Loop,
    ) -> Result<(), RunError> {
        let (summary, detail) = Raise {
            messages: &lp.messages,
            problem: format!("{} failed with a tool bug: {message}", call.name),
            facts: Facts::ToolBug(CallFacts {
                call_id: call.id.as_str().into(),
                tool: call.name.clone(),
                args: call.args.clone(),
            }),
        }
        .build();
        let new = NewEscalation {
            step,
            summary: &summary,
            detail: &detail,
        };
        let id = self.store.create_escalation(&self.lease, &new, None, &[])?;
        self.observer.notice(&Notice::ToolBugQueued { id });
        Ok(())
    }

    /// Commits the step with what its calls decided: notes to the model, a degraded
    /// turn when no tool is left, and a pausing escalation.
    pub(super) fn finish_step(
        &self,
        lp: &mut Loop,
        mut next: LoopState,
        mut new_messages: Vec<Message>,
        mut plan: StepPlan,
        last: Option<&CallRecord>,
        events: &EventBuffer,
    ) -> Result<Option<RunOutcome>, RunError> {
        let all_withdrawn = self
            .configured_tools()
            .iter()
            .all(|t| next.disabled.contains(&t.name));
        if !next.degraded && !self.configured_tools().is_empty() && all_withdrawn {
            next.degraded = true;
            plan.notes.push(Message::text(
                Role::System,
                self.resolved.snapshot.prompts.degraded.trim(),
            ));
            self.observer.notice(&Notice::Degraded);
        }
        new_messages.extend(plan.notes);
        let Some((problem, facts)) = plan.escalation else {
            let commit = Commit {
                outcome: last,
                ..Commit::running()
            };
            self.commit(lp, next, new_messages, &commit, events)?;
            return Ok(None);
        };
        let mut transcript = lp.messages.clone();
        transcript.extend(new_messages.iter().cloned());
        let (summary, detail) = Raise {
            messages: &transcript,
            problem,
            facts,
        }
        .build();
        let new = NewEscalation {
            step: next.steps,
            summary: &summary,
            detail: &detail,
        };
        let commit = Commit {
            status: RunStatus::Escalated,
            outcome: last,
            escalation: Some(&new),
            ..Commit::running()
        };
        let id = self.commit(lp, next, new_messages, &commit, events)?;
        if let Some(id) = id {
            self.observer.notice(&Notice::Escalated {
                id,
                kind: detail.kind(),
                summary: summary.clone(),
            });
        }
        let mut o = self.outcome(lp, RunStatus::Escalated, Some(summary));
        o.escalation_id = id;
        Ok(Some(o))
    }

    /// Carries people's decisions on between-step escalations (breaker, stuck) into the
    /// run, once each.
    pub(super) fn apply_decisions(&self, lp: &mut Loop) -> Result<Option<RunOutcome>, RunError> {
        for e in self.store.escalations_for_run(self.run_id())? {
            if e.open || e.applied || !e.kind.pauses() || e.kind.blocks_a_call() {
                continue;
            }
            let Some(resolution) = &e.resolution else {
                continue;
            };
            let mut state = lp.state.clone();
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
            let json = state_json(self.run_id(), &state)?;
            let status = stop.as_deref().map(|r| (RunStatus::Failed, r));
            self.store.apply_resolution(
                &self.lease,
                e.id.0,
                lp.state.steps,
                &notes,
                &json,
                status,
            )?;
            lp.messages.extend(notes);
            lp.state = state;
            if let Some(reason) = stop {
                return Ok(Some(self.outcome(lp, RunStatus::Failed, Some(reason))));
            }
        }
        Ok(None)
    }
}

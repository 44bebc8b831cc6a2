//! Applying the recovery policies to the loop after each call (breaker, tool
//! withdrawal, stuck detection, tool-bug reports), committing a step with what they
//! decided, and carrying people's decisions on between-step escalations into a run.

use super::escalate::Handover;
use super::state::LoopState;
use super::{Loop, RunOutcome, Runner, StepPlan, state_json};
use crate::model::{Message, Role, ToolCall};
use crate::recovery::policy;
use crate::runner::calls::ASK_USER;
use crate::store::{
    CallRecord, EscalationKind, EscalationRow, NewEscalation, Resolution, RunStatus, StoreError,
};
use crate::tools::outcome::ErrorKind;
use crate::trace::EventBuffer;
use serde_json::{Value, json};
use std::collections::HashMap;

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
    #[allow(clippy::too_many_arguments)]
    pub(super) fn after_call(
        &self,
        next: &mut LoopState,
        plan: &mut StepPlan,
        step: u32,
        call: &ToolCall,
        record: &CallRecord,
        fresh: bool,
        lp: &Loop,
    ) -> Result<(), StoreError> {
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
                EscalationKind::BreakerOpen,
                format!(
                    "{} failed {} times with the same arguments (last: {kind}, {} attempt(s): {message}); \
                     the circuit for this call is open",
                    call.name, policy.breaker_threshold, record.attempts
                ),
                json!({"call_id": call.id, "tool": call.name, "args": call.args,
                       "key": policy::call_key(&call.name, &call.args)}),
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
                self.progress.say(format!(
                    "agentrun: step {step}: nudged: {}",
                    stuck.describe()
                ));
            } else if plan.escalation.is_none() {
                plan.escalation = Some((
                    EscalationKind::Stuck,
                    format!("the agent kept looping after a nudge: {}", stuck.describe()),
                    json!({"tool": call.name}),
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
    ) -> Result<(), StoreError> {
        let (summary, detail) = Handover {
            kind: EscalationKind::ToolBug,
            messages: &lp.messages,
            problem: format!("{} failed with a tool bug: {message}", call.name),
            facts: json!({"tool": call.name, "args": call.args, "call_id": call.id}),
        }
        .build();
        let new = NewEscalation {
            step,
            kind: EscalationKind::ToolBug,
            summary: &summary,
            detail: &detail,
        };
        let id = self.store.create_escalation(&self.lease, &new, None, &[])?;
        self.progress.say(format!(
            "agentrun: escalation {id} (tool_bug) queued for the tool's owner; the run goes on"
        ));
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
    ) -> Result<Option<RunOutcome>, StoreError> {
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
            self.progress
                .say("agentrun: every tool was withdrawn; asking for an answer without tools");
        }
        new_messages.extend(plan.notes);
        let Some((kind, problem, facts)) = plan.escalation else {
            self.commit(
                lp,
                next,
                new_messages,
                RunStatus::Running,
                None,
                None,
                last,
                events,
                None,
            )?;
            return Ok(None);
        };
        let mut transcript = lp.messages.clone();
        transcript.extend(new_messages.iter().cloned());
        let (summary, detail) = Handover {
            kind,
            messages: &transcript,
            problem,
            facts,
        }
        .build();
        let new = NewEscalation {
            step: next.steps,
            kind,
            summary: &summary,
            detail: &detail,
        };
        let id = self.commit(
            lp,
            next,
            new_messages,
            RunStatus::Escalated,
            None,
            None,
            last,
            events,
            Some(&new),
        )?;
        self.progress.say(format!(
            "agentrun: escalation {} ({kind}): {summary}",
            id.unwrap_or_default()
        ));
        let mut o = self.outcome(lp, RunStatus::Escalated, Some(summary));
        o.escalation_id = id;
        Ok(Some(o))
    }

    /// Carries people's decisions on between-step escalations (breaker, stuck) into the
    /// run, once each.
    pub(super) fn apply_decisions(&self, lp: &mut Loop) -> Result<Option<RunOutcome>, StoreError> {
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
            match (e.kind, resolution) {
                (EscalationKind::BreakerOpen, Resolution::Approve) => {
                    let key = e.detail["key"].as_str().unwrap_or_default();
                    state.open_circuits.remove(key);
                    state.call_failures.remove(key);
                    if let Some(tool) = e.detail["tool"].as_str() {
                        state.disabled.remove(tool);
                        state.tool_failures.remove(tool);
                    }
                }
                (EscalationKind::Stuck, Resolution::Approve) => {
                    policy::reset_stuck_history(&mut state);
                    state.nudged = false;
                }
                (EscalationKind::Stuck, Resolution::Deny { reason }) => {
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
                e.id,
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

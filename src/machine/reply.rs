//! A step from its model response to its commit: the answer, a response cut at the
//! token limit, a failed model call, and the commit of a step whose calls all ended.

use super::calls::Slot;
use super::effects::{Commit, Effect, Notice, Stop, StopReason};
use super::escalate::Raise;
use super::{Machine, Step};
use crate::config::ToolDef;
use crate::machine::state::LoopState;
use crate::model::{Message, ModelResponse, Part, Role, StopReason as ModelStop};
use crate::records::{
    AllToolsFailedFacts, EscalationRow, Facts, JournalEntry, RunStatus, ToolFailures,
};
use std::collections::HashMap;

impl Machine<'_> {
    /// The model's response for the next step (fresh, or replayed from the journal
    /// with what was stored for its calls).
    pub(super) fn reply(
        &mut self,
        response: ModelResponse,
        journal: Vec<JournalEntry>,
        escalations: &[EscalationRow],
    ) -> Vec<Effect> {
        let number = self.state.steps + 1;
        let mut next = self.state.clone();
        next.steps = number;
        next.input_tokens += response.usage.input;
        next.cached_input_tokens += response.usage.cached;
        next.cache_write_tokens += response.usage.cache_write;
        next.output_tokens += response.usage.output;
        next.usage_estimated |= response.usage.estimated;
        next.last_input = response.usage.input;
        next.cost_usd += self
            .rules
            .spend
            .pricing
            .cost(&response.model, &response.usage);
        let assistant = response.message;
        let calls = assistant.tool_calls();
        if response.stop == ModelStop::MaxTokens {
            return self.finish_truncated(next, assistant);
        }
        if calls.is_empty() {
            if super::parrot::repeats_a_note(&assistant.joined_text(), &self.notes_shown()) {
                return self.refuse_repeated_note(next, assistant);
            }
            return self.finish_answer(next, assistant);
        }
        let offered = self.offered_names(&self.state);
        let slots = calls.iter().map(|_| Slot::Pending).collect();
        self.step = Some(Step {
            number,
            next,
            calls,
            at: 0,
            offered,
            new_messages: vec![assistant],
            notes: Vec::new(),
            escalation: None,
            journal: journal
                .into_iter()
                .map(|e| (e.call_id.clone(), e))
                .collect(),
            decisions: decisions_for_step(escalations, number),
            last_fresh: None,
            slots,
            running: 0,
            scan: 0,
        });
        self.advance()
    }

    fn finish_answer(&mut self, next: LoopState, assistant: Message) -> Vec<Effect> {
        let mut answer = assistant.joined_text();
        if let Some(spec) = self.rules.output {
            match spec.check(&answer) {
                Ok(value) => answer = value.to_string(),
                Err(problems) => return self.reject_answer(next, assistant, problems),
            }
            self.checked_answer = Some(answer.clone());
        }
        let degraded = next.degraded;
        let notice = Effect::Notice(Notice::FinalAnswer {
            step: next.steps,
            degraded,
        });
        let reason = degraded
            .then(|| "degraded: answered without tools after every tool was withdrawn".to_string());
        let commit = self.commit(Commit {
            status: RunStatus::Completed,
            answer: Some(answer),
            error: reason.clone(),
            ..running(next, vec![assistant])
        });
        let stop = Stop {
            status: RunStatus::Completed,
            reason: reason.map_or(StopReason::None, StopReason::Text),
        };
        vec![notice, commit, Effect::Stop(stop)]
    }

    /// A response cut at the output-token limit is not an answer: keep it in the
    /// transcript with a note saying so, and stop honestly.
    fn finish_truncated(&mut self, next: LoopState, assistant: Message) -> Vec<Effect> {
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
        let commit = self.commit(Commit {
            status: RunStatus::Failed,
            error: Some(reason.clone()),
            ..running(next, vec![text_only, note])
        });
        let mut out = vec![commit];
        out.extend(failed(reason));
        out
    }

    pub(super) fn fail_model(&mut self, error: &str) -> Vec<Effect> {
        let reason = format!(
            "model call for step {} failed: {error}",
            self.state.steps + 1
        );
        let mut out = vec![
            Effect::RecordEvents {
                step: self.state.steps,
            },
            Effect::SetStatus {
                status: RunStatus::Failed,
                reason: reason.clone(),
            },
        ];
        out.extend(failed(reason));
        out
    }

    /// Commits the step with what its calls decided: notes to the model, a degraded
    /// turn when no tool is left, and a pausing escalation.
    pub(super) fn finish_step(&mut self) -> Vec<Effect> {
        let Some(mut step) = self.step.take() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let configured = self.configured_tools();
        let all_withdrawn = configured
            .iter()
            .all(|t| step.next.disabled.contains(&t.name));
        if !step.next.degraded && !configured.is_empty() && all_withdrawn {
            step.next.degraded = true;
            let text = self.rules.prompts.degraded.trim();
            step.notes.push(Message::text(Role::System, text));
            out.push(Effect::Notice(Notice::Degraded));
            let mut transcript = self.context.messages().to_vec();
            transcript.extend(step.new_messages.iter().cloned());
            out.push(report_all_tools_failed(
                &transcript,
                step.number,
                &step.next,
                &configured,
            ));
        }
        step.new_messages.append(&mut step.notes);
        let Some((problem, facts)) = step.escalation.take() else {
            out.push(self.commit(Commit {
                outcome: step.last_fresh,
                ..running(step.next, step.new_messages)
            }));
            out.extend(self.begin_step());
            return out;
        };
        let mut transcript = self.context.messages().to_vec();
        transcript.extend(step.new_messages.iter().cloned());
        let (summary, detail) = Raise {
            messages: &transcript,
            problem,
            facts,
        }
        .build();
        out.push(self.commit(Commit {
            status: RunStatus::Escalated,
            outcome: step.last_fresh,
            escalation: Some((summary.clone(), detail)),
            ..running(step.next, step.new_messages)
        }));
        out.push(Effect::Stop(Stop {
            status: RunStatus::Escalated,
            reason: StopReason::Escalated(summary),
        }));
        out
    }
}

/// Every tool was withdrawn: a report that does not pause (the run goes on to a
/// degraded answer), naming each tool and its failures.
fn report_all_tools_failed(
    messages: &[Message],
    step: u32,
    next: &LoopState,
    configured: &[&ToolDef],
) -> Effect {
    let tools: Vec<ToolFailures> = configured
        .iter()
        .map(|t| ToolFailures {
            tool: t.name.clone(),
            failures: next.tool_failures.get(&t.name).copied().unwrap_or(0),
        })
        .collect();
    let named: Vec<String> = tools
        .iter()
        .map(|t| format!("{} ({} failures)", t.tool, t.failures))
        .collect();
    let (summary, detail) = Raise {
        messages,
        problem: format!(
            "every tool was withdrawn after repeated failures: {}; the model was asked for \
                 an answer without tools",
            named.join(", ")
        ),
        facts: Facts::AllToolsFailed(AllToolsFailedFacts { tools }),
    }
    .build();
    Effect::Escalate {
        step,
        summary,
        detail,
        pause_as: None,
    }
}

impl Machine<'_> {
    /// The commit effect; the machine moves on as of it (a commit that fails ends the
    /// run in the driver).
    pub(super) fn commit(&mut self, mut c: Commit) -> Effect {
        c.state.active_ms = self.active_ms();
        self.keep_note(c.step);
        self.context.extend(c.step, &c.messages);
        self.state = c.state.clone();
        self.window_context();
        Effect::Commit(Box::new(c))
    }
}

pub(super) fn running(state: LoopState, messages: Vec<Message>) -> Commit {
    Commit {
        step: state.steps,
        messages,
        state,
        status: RunStatus::Running,
        answer: None,
        error: None,
        outcome: None,
        escalation: None,
    }
}

/// The run ends as failed: told, then stopped.
pub(super) fn failed(reason: String) -> [Effect; 2] {
    [
        Effect::Notice(Notice::Failed {
            reason: reason.clone(),
        }),
        Effect::Stop(Stop {
            status: RunStatus::Failed,
            reason: StopReason::Text(reason),
        }),
    ]
}

/// Decided escalations that block a call of this step, by call id (latest wins).
fn decisions_for_step(escalations: &[EscalationRow], step: u32) -> HashMap<String, EscalationRow> {
    let mut out = HashMap::new();
    for e in escalations {
        if e.step == step
            && !e.open
            && e.kind.blocks_a_call()
            && let Some(call) = e.call_id()
        {
            out.insert(call.to_string(), e.clone());
        }
    }
    out
}

//! Compaction before a step (issue 15): the machine's side of [`super::context`].
//! The decision is made in [`Machine::begin_step`] right after the budget guard; a
//! summary is asked for as the step's model call, journaled like one (so a crash
//! after it does not pay for it again) and committed as a step of its own whose one
//! message is the summary.

use super::context::{self, Compaction, Decision};
use super::effects::{Commit, Effect, Notice, SummaryAsk};
use super::{Machine, effects};
use crate::model::ModelResponse;
use crate::records::RunStatus;
use crate::trace::{NoteKind, TraceEvent};

/// A summary asked for and not yet committed.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Pending {
    kept_from: u32,
    /// The estimate that made it necessary, for the note.
    estimate: u64,
}

impl Machine<'_> {
    /// Shortens old tool results, or plans a summary, when the next request would not
    /// fit; the shortening mark rides in the loop state to the next commit.
    pub(super) fn compact_if_needed(&mut self) {
        let Some(window) = self.rules.window else {
            return;
        };
        let fixed = self.fixed_bytes();
        match context::decide(&mut self.context, &self.state, window, fixed) {
            Decision::Fits => {}
            Decision::Shortened { before } => {
                self.state.shortened_before = before;
                self.state.last_input = 0;
            }
            Decision::Summarise {
                shortened_before,
                kept_from,
                estimate,
            } => {
                if shortened_before > self.state.shortened_before {
                    self.state.shortened_before = shortened_before;
                    self.state.last_input = 0;
                }
                self.compacting = Some(Pending {
                    kept_from,
                    estimate,
                });
            }
        }
    }

    /// Bytes every request carries besides the context: the tool schemas.
    fn fixed_bytes(&self) -> usize {
        self.offered_tools(&self.state)
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.input_schema.to_string().len())
            .sum()
    }

    pub(super) fn turns_left_out(&self) -> u32 {
        self.state
            .compaction
            .as_ref()
            .map_or(0, |c| c.turns_left_out)
            + self.windowed_out
    }

    pub(super) fn ask_summary(&mut self) -> effects::Ask {
        let (Some(p), Some(window)) = (&self.compacting, self.rules.window) else {
            return self.ask();
        };
        self.asked_note = None;
        effects::Ask {
            step: self.state.steps + 1,
            system: context::COMPACT_PROMPT.to_string(),
            note: String::new(),
            tools: Vec::new().into(),
            summary: Some(SummaryAsk {
                messages: context::summary_request(&self.context, p.kept_from, window),
                max_output_tokens: window.summary_output_tokens(),
            }),
            turns_left_out: self.turns_left_out(),
            after_cut: None,
        }
    }

    /// Commits the compaction step: its one message is the summary; the context
    /// becomes the opening, the summary and the kept steps. Then the step it was for.
    pub(super) fn finish_compaction(&mut self, response: ModelResponse) -> Vec<Effect> {
        let Some(p) = self.compacting.take() else {
            return Vec::new();
        };
        let number = self.state.steps + 1;
        let mut next = self.state.clone();
        next.steps = number;
        next.input_tokens += response.usage.input;
        next.cached_input_tokens += response.usage.cached;
        next.cache_write_tokens += response.usage.cache_write;
        next.output_tokens += response.usage.output;
        next.usage_estimated |= response.usage.estimated;
        next.last_input = 0;
        next.cost_usd += self
            .rules
            .spend
            .pricing
            .cost(&response.model, &response.usage);
        next.active_ms = self.active_ms();
        let turns_left_out =
            self.turns_left_out() + context::turns_in_summary(&self.context, p.kept_from);
        next.compaction = Some(Compaction {
            step: number,
            kept_from: p.kept_from,
            turns_left_out,
        });
        let summary = context::summary_message(number, &response.message.joined_text());
        self.context
            .compact_at(summary.clone(), number, p.kept_from);
        // The next request starts anew after the summary: tell the budget again.
        self.told = None;
        self.state = next.clone();
        let after = self.context.estimate(&self.state, self.fixed_bytes());
        let kept = if p.kept_from < number {
            format!("; step {} kept as it was", number - 1)
        } else {
            String::new()
        };
        let mut out = vec![
            Effect::Trace(TraceEvent::Note {
                kind: NoteKind::Compacted,
                message: format!(
                    "context compacted: about {} tokens before, {after} after (window {}); \
                     {turns_left_out} earlier turn(s) summarised{kept}",
                    p.estimate,
                    self.rules.window.map_or(0, |w| w.tokens),
                ),
                at_ms: None,
            }),
            Effect::Notice(Notice::Compacted {
                step: number,
                before: p.estimate,
                after,
            }),
            Effect::Commit(Box::new(Commit {
                step: number,
                messages: vec![summary],
                state: next,
                status: RunStatus::Running,
                answer: None,
                error: None,
                outcome: None,
                escalation: None,
            })),
        ];
        out.extend(self.begin_step());
        out
    }
}

#[cfg(test)]
mod tests {
    //! The compaction step as effects: asked, journaled, committed, then the step.
    use super::super::context::{Context, Window};
    use super::super::effects::{Effect, Event};
    use super::super::state::LoopState;
    use super::super::{Machine, Rules};
    use crate::config::types::ToolsConfig;
    use crate::model::{Message, ModelResponse, Part, Role, StopReason, Usage};
    use crate::prompts::Prompts;
    use serde_json::json;

    fn transcript(steps: u32) -> Context {
        let mut ctx = Context::opening(vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "Find the code."),
        ]);
        for s in 1..=steps {
            let note = if s == 2 { "FACT:code=7" } else { "" };
            ctx.push(
                s,
                Message {
                    role: Role::Assistant,
                    content: vec![Part::ToolCall {
                        id: format!("c{s}"),
                        name: "echo".into(),
                        args: json!({"i": s, "note": note}),
                    }],
                },
            );
            ctx.push(
                s,
                Message::tool_result(format!("c{s}"), json!("y".repeat(80)), false),
            );
        }
        ctx
    }

    #[test]
    fn an_oversized_context_is_summarised_as_its_own_step_before_the_next() {
        let tools = ToolsConfig::default();
        let prompts = Prompts::builtin();
        let rules = Rules {
            window: Some(Window {
                tokens: 2000,
                max_output_tokens: 200,
            }),
            ..Rules::for_tests(&tools, &prompts)
        };
        let state = LoopState {
            steps: 30,
            ..Default::default()
        };
        let mut m = Machine::new(rules, state, transcript(30));
        let start = m.handle(Event::Start {
            escalations: Vec::new(),
        });
        assert_eq!(start, vec![Effect::LoadStep { step: 31 }]);
        let ask = m.load_empty_step();
        let summary = ask.summary.as_ref().expect("a summary request");
        assert!(ask.tools.is_empty());
        assert!(ask.system.starts_with("You are compacting"));
        assert!(summary.messages[0].joined_text().contains("FACT:code=7"));
        assert_eq!(summary.max_output_tokens, 200);

        let response = ModelResponse {
            message: Message::text(Role::Assistant, "FACT:code=7"),
            usage: Usage {
                input: 900,
                output: 10,
                cached: 0,
                cache_write: 0,
                ..Default::default()
            },
            stop: StopReason::EndTurn,
            model: "script:s".into(),
        };
        let out = m.handle(Event::ModelReplied(response.clone()));
        assert_eq!(
            out.first(),
            Some(&Effect::RecordModelTurn { step: 31, response })
        );
        let Some(Effect::Commit(c)) = out.iter().find(|e| matches!(e, Effect::Commit(_))) else {
            panic!("{out:?}")
        };
        assert_eq!(c.step, 31);
        assert_eq!(c.state.input_tokens, 900);
        let k = c.state.compaction.clone().expect("compaction mark");
        assert_eq!((k.step, k.kept_from, k.turns_left_out), (31, 30, 29));
        assert!(
            c.messages[0]
                .joined_text()
                .ends_with("Summary:\n\nFACT:code=7")
        );
        // Then the step it was for, from the compacted context.
        assert_eq!(out.last(), Some(&Effect::LoadStep { step: 32 }));
        let ask = m.load_empty_step();
        assert_eq!(ask.summary, None);
        assert_eq!(ask.turns_left_out, 29);
        // system, task, summary, step 30's call and result.
        assert_eq!(m.messages().len(), 5);
    }
}

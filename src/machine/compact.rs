//! Compaction before a step (issue 15): the machine's side of [`super::context`].
//! The decision is made in [`Machine::begin_step`] right after the budget guard; a
//! summary is asked for as the step's model call, journaled like one (so a crash
//! after it does not pay for it again) and committed as a step of its own whose one
//! message is the summary.

use super::context::{self, Compaction, Decision};
use super::effects::{Commit, Effect, Notice, SummaryAsk};
use super::{Machine, effects};
use crate::model::ModelResponse;
use crate::store::RunStatus;
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
    }

    pub(super) fn ask_summary(&self) -> effects::Ask {
        let (Some(p), Some(window)) = (&self.compacting, self.rules.window) else {
            return self.ask();
        };
        effects::Ask {
            step: self.state.steps + 1,
            system: context::COMPACT_PROMPT.to_string(),
            tools: Vec::new(),
            summary: Some(SummaryAsk {
                messages: context::summary_request(&self.context, p.kept_from, window),
                max_output_tokens: window.summary_output_tokens(),
            }),
            turns_left_out: self.turns_left_out(),
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
        next.output_tokens += response.usage.output;
        next.last_input = 0;
        let turns_left_out =
            self.turns_left_out() + context::turns_in_summary(&self.context, p.kept_from);
        next.compaction = Some(Compaction {
            step: number,
            kept_from: p.kept_from,
            turns_left_out,
        });
        let summary = context::summary_message(number, &response.message.joined_text());
        self.context.compact_at(summary.clone(), number, p.kept_from);
        self.state = next.clone();
        let after = self.context.estimate(&self.state, self.fixed_bytes());
        let kept = if p.kept_from <= number - 1 {
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

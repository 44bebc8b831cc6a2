//! A final answer that fails the task's output schema (issue 26): the step commits
//! the answer with a note telling the model exactly what failed (the validation
//! path), and the loop goes on — until `output_attempts` answers failed, when the run
//! fails `invalid_output` with the last answer as its partial answer.
//!
//! The check is part of the step ([`Machine::reply`]): a step replayed from the
//! journal is checked again and decides the same, so a crash between the answer and
//! the commit neither loses the verdict nor pays for the answer twice.

use super::Machine;
use super::effects::{Commit, Effect, Notice};
use super::reply::{failed, running};
use super::state::LoopState;
use crate::model::{Message, Role};
use crate::records::RunStatus;

/// Problems named in the note to the model; the rest are counted.
const SHOWN: usize = 10;

impl Machine<'_> {
    pub(super) fn reject_answer(
        &mut self,
        mut next: LoopState,
        assistant: Message,
        problems: Vec<String>,
    ) -> Vec<Effect> {
        let attempts = self.rules.output.map_or(1, |o| o.attempts);
        next.output_failures += 1;
        let step = next.steps;
        if next.output_failures >= attempts {
            let reason = format!(
                "invalid_output: {attempts} final answers failed the output schema; the last: {}",
                problems.join("; ")
            );
            let commit = self.commit(Commit {
                status: RunStatus::Failed,
                error: Some(reason.clone()),
                ..running(next, vec![assistant])
            });
            let mut out = vec![commit];
            out.extend(failed(reason));
            return out;
        }
        let notice = Effect::Notice(Notice::AnswerRejected {
            step,
            attempt: next.output_failures,
            attempts,
            problem: problems.first().cloned().unwrap_or_default(),
        });
        let note = Message::text(Role::System, rejection_note(&problems, &next, attempts));
        let commit = self.commit(running(next, vec![assistant, note]));
        let mut out = vec![notice, commit];
        out.extend(self.begin_step());
        out
    }
}

/// What the model reads after an invalid answer.
fn rejection_note(problems: &[String], state: &LoopState, attempts: u32) -> String {
    let mut lines: Vec<String> = problems
        .iter()
        .take(SHOWN)
        .map(|p| format!("- {p}"))
        .collect();
    if problems.len() > SHOWN {
        lines.push(format!("- … and {} more", problems.len() - SHOWN));
    }
    format!(
        "[agentrun] Your final answer is not valid against the task's output schema \
         (answer {} of {attempts} allowed):\n{}\nAnswer again with one JSON value that is \
         valid against the schema, and nothing else.",
        state.output_failures,
        lines.join("\n")
    )
}

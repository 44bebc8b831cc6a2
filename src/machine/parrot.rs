//! An answer that only repeats one of agentrun's own notes is not an answer (issue 23).
//!
//! On llama.cpp a 135M model answered the cut-off note with the note itself, and
//! agentrun took that as the run's final answer. agentrun's notes (the budget line,
//! the cut-off retry, nudges, withdrawn tools) are text the model was shown, not text
//! it produced; an answer made of one of them goes back to the model with a note, and
//! the step budget still bounds how often.

use super::Machine;
use super::effects::{Commit, Effect};
use super::state::LoopState;
use crate::model::{Message, Role};
use crate::trace::{NoteKind, TraceEvent};

/// A fragment shorter than this (after normalising) is too common to call a repeat.
const MIN_FRAGMENT: usize = 24;

/// Lower case, one space between words, without the `[agentrun]` marker.
fn normal(s: &str) -> String {
    let s = s.trim().to_lowercase();
    let s = s.trim_start_matches("[agentrun]");
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `answer` is one of `notes`, a sizeable piece of one, or one of them with
/// little around it (the note at least half of the answer).
pub fn repeats_a_note(answer: &str, notes: &[String]) -> bool {
    let a = normal(answer);
    if a.is_empty() {
        return false;
    }
    notes.iter().map(|n| normal(n)).any(|n| {
        !n.is_empty()
            && (a == n
                || (n.contains(&a) && a.len() >= MIN_FRAGMENT.min(n.len()))
                || (a.contains(&n) && n.len() * 2 >= a.len()))
    })
}

impl Machine<'_> {
    /// The notes the model may have been shown for this step: the per-step budget
    /// note, the cut-off note (always: a replayed step cannot tell whether it had a
    /// retry), and every note in the context.
    pub(super) fn notes_shown(&self) -> Vec<String> {
        let mut notes = vec![self.cut_note().joined_text()];
        notes.extend(self.asked_note.as_ref().map(|n| n.text.clone()));
        let context = self.messages().get(1..).unwrap_or(&[]);
        notes.extend(
            context
                .iter()
                .filter(|m| m.role == Role::System)
                .map(Message::joined_text),
        );
        notes
    }

    /// The answer repeated a note: keep it in the transcript, say so, take the next
    /// step.
    pub(super) fn refuse_repeated_note(
        &mut self,
        next: LoopState,
        assistant: Message,
    ) -> Vec<Effect> {
        let note = Message::text(
            Role::System,
            "[agentrun] Your reply only repeated a note from agentrun; it is not an answer. \
             Continue the task, then give your own final answer.",
        );
        let commit = self.commit(Commit {
            step: next.steps,
            messages: vec![assistant, note],
            state: next,
            status: crate::records::RunStatus::Running,
            answer: None,
            error: None,
            outcome: None,
            escalation: None,
        });
        let mut out = vec![
            Effect::Trace(TraceEvent::Note {
                kind: NoteKind::RepeatedNote,
                message: "the model's answer only repeated one of agentrun's notes; it was \
                          not taken as the final answer"
                    .into(),
                at_ms: None,
            }),
            commit,
        ];
        out.extend(self.begin_step());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::repeats_a_note;

    fn notes() -> Vec<String> {
        vec![
            "Budget: step 2 of 4, 3 left including this one; 900 of 1000 tokens left.".into(),
            "[agentrun] Your previous reply was cut off at the output limit of 200 tokens and was discarded.".into(),
        ]
    }

    #[test]
    fn the_note_itself_a_piece_of_it_or_it_with_little_around_is_a_repeat() {
        let n = notes();
        assert!(repeats_a_note(&n[1], &n));
        assert!(repeats_a_note(
            "  your previous reply was CUT OFF at the output limit ",
            &n
        ));
        assert!(repeats_a_note(&format!("{} ok", n[0]), &n));
        assert!(repeats_a_note(
            "Your previous reply was cut off at the output limit of 200 tokens and was discarded.",
            &n
        ));
    }

    #[test]
    fn a_real_answer_is_not_a_repeat_even_when_it_shares_words() {
        let n = notes();
        assert!(!repeats_a_note("The weather in Paris is sunny, 21 °C.", &n));
        assert!(!repeats_a_note("step 2", &n), "too short to call a repeat");
        assert!(!repeats_a_note("", &n));
        let long = format!(
            "I stayed within the budget ({}) and found the refund window: 30 days, as the \
             policy page and both tickets say; the customer qualifies.",
            n[0]
        );
        assert!(
            !repeats_a_note(&long, &n),
            "a note quoted inside a long answer"
        );
    }
}

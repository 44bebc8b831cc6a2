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

/// A piece of a note shorter than this many words is too common to call a repeat.
const MIN_WORDS: usize = 5;

/// Lower-case words (letters and digits), without the `[agentrun]` marker: what a model
/// keeps when it copies a note, whatever it does to spacing and punctuation.
fn words(s: &str) -> Vec<String> {
    let s = s.trim().to_lowercase();
    let s = s.trim_start_matches("[agentrun]");
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// How many words `a` and `b` share in order (longest common subsequence).
fn in_order(a: &[String], b: &[String]) -> usize {
    let mut row = vec![0usize; b.len() + 1];
    for x in a {
        let mut diagonal = 0;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if x == y {
                diagonal + 1
            } else {
                above.max(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Whether `answer` is one of `notes` or a piece of one — also when the model left out
/// or changed a few words of it (on llama.cpp it dropped a clause of the cut-off note and
/// the rest was taken as the run's answer) — or one of them with little around it (the
/// note at least half of the answer). Four in five words in the note's order count as
/// the note's.
pub fn repeats_a_note(answer: &str, notes: &[String]) -> bool {
    let a = words(answer);
    if a.is_empty() {
        return false;
    }
    notes.iter().map(|n| words(n)).any(|n| {
        // Neither test can pass for an answer over twice the note: skip the count.
        if n.is_empty() || a.len() > 2 * n.len() {
            return false;
        }
        let shared = in_order(&a, &n);
        shared >= MIN_WORDS.min(n.len())
            && (5 * shared >= 4 * a.len() || (5 * shared >= 4 * n.len() && 2 * n.len() >= a.len()))
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

    /// What SmolLM2-135M answered on llama.cpp to the cut-off note of a 96-token cap:
    /// the note without its parenthesis. It became the run's final answer.
    #[test]
    fn the_note_with_a_clause_left_out_or_words_changed_is_a_repeat() {
        let cut = "[agentrun] Your previous reply was cut off at the output limit of 96 tokens \
                   and was discarded. Reply again within 160 tokens: make fewer tool calls in \
                   one turn (the rest can follow in later turns), or answer more briefly.";
        let n = vec![cut.to_string()];
        let llama = "Your previous reply was cut off at the output limit of 96 tokens and was \
                     discarded. Reply again within 160 tokens: make fewer tool calls in one \
                     turn, or answer more briefly.";
        assert!(repeats_a_note(llama, &n));
        assert!(repeats_a_note(
            "My previous reply was cut off at the output limit of 96 tokens, and it was discarded.",
            &n
        ));
        assert!(repeats_a_note(
            &format!("{llama} The weather in Paris is sunny."),
            &n
        ));
    }

    #[test]
    fn a_real_answer_is_not_a_repeat_even_when_it_shares_words() {
        let n = notes();
        assert!(!repeats_a_note("The weather in Paris is sunny, 21 °C.", &n));
        assert!(!repeats_a_note("step 2", &n), "too short to call a repeat");
        assert!(!repeats_a_note("", &n));
        assert!(!repeats_a_note(
            "My reply was cut short before, sorry: the weather in Paris is sunny, 21 °C.",
            &n
        ));
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

//! The budget note: when agentrun tells the model its budget, and how that stays in
//! the requests (issue 23).
//!
//! **Append-only requests.** The note sent with step k's request stays in the context,
//! right before step k's model turn, so the request of step k+1 is the request of
//! step k plus the model's turn, the tool results and (maybe) a new note: a prompt
//! cache (a provider's, or a local server's KV cache) reuses all of it. A note dropped
//! from the next request would be evaluated again at every step, and everything after
//! it too.
//!
//! **Only when it says something new.** The note is told at the first step this
//! context has, when a budget has crossed half, a quarter or a tenth of what is left
//! since the last note, and at each of the last three steps. The rest of the time the
//! model has nothing new to learn from it, and every note costs its tokens once in
//! every later request.
//!
//! The notes live in the machine's context, not in the stored transcript: `runs show`
//! and exports show what the model and the tools said, as before. A run resumed by
//! another process rebuilds its context from the store (without the earlier notes)
//! and is told its budget again at its first step.

use super::Machine;
use super::state::{LoopState, budget_note, spend_note};

/// How far a run has gone into each budget: 0 more than half left, 1 half or less,
/// 2 a quarter or less, 3 a tenth or less.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    steps: u8,
    tokens: u8,
    cost: u8,
    time: u8,
}

impl Marks {
    /// Whether any budget is further gone than in `told`.
    fn beyond(&self, told: &Marks) -> bool {
        self.steps > told.steps
            || self.tokens > told.tokens
            || self.cost > told.cost
            || self.time > told.time
    }
}

/// The mark for `left` of `max`.
fn mark(left: f64, max: f64) -> u8 {
    if max <= 0.0 {
        return 0;
    }
    match left / max {
        s if s <= 0.1 => 3,
        s if s <= 0.25 => 2,
        s if s <= 0.5 => 1,
        _ => 0,
    }
}

/// A budget note for one step's request.
#[derive(Debug, Clone, PartialEq)]
pub struct StepNote {
    /// The step it is sent with.
    pub step: u32,
    pub text: String,
    marks: Marks,
}

/// Told at each of the last this-many steps.
const LAST_STEPS: u32 = 3;

impl Machine<'_> {
    /// The budget note for the next step's request, when there is something to tell.
    pub(super) fn step_note(&self) -> Option<StepNote> {
        let r = self.rules;
        let s: &LoopState = &self.state;
        let active_ms = self.active_ms();
        let steps_left = r.max_steps.saturating_sub(s.steps_used());
        let marks = Marks {
            steps: mark(f64::from(steps_left), f64::from(r.max_steps)),
            tokens: mark(
                r.max_tokens.saturating_sub(s.tokens_used()) as f64,
                r.max_tokens as f64,
            ),
            cost: r
                .spend
                .max_cost
                .map_or(0, |max| mark(max - s.cost_used(), max)),
            time: r.spend.max_duration_ms.map_or(0, |max| {
                mark(max.saturating_sub(active_ms) as f64, max as f64)
            }),
        };
        let tell = match &self.told {
            None => true,
            Some(told) => steps_left <= LAST_STEPS || marks.beyond(told),
        };
        tell.then(|| StepNote {
            step: s.steps + 1,
            text: budget_note(s, r.max_steps, r.max_tokens) + &spend_note(s, active_ms, &r.spend),
            marks,
        })
    }

    /// The note asked with this step goes into the context before the step's
    /// messages: the next request starts with everything this one sent.
    pub(super) fn keep_note(&mut self, step: u32) {
        let Some(note) = self.asked_note.take_if(|n| n.step == step) else {
            return;
        };
        self.context.push(
            step,
            crate::model::Message::text(crate::model::Role::System, note.text),
        );
        self.told = Some(note.marks);
    }
}

#[cfg(test)]
mod tests {
    use super::super::effects::Event;
    use super::super::tests::{H, ask, call, outcome, reply};
    use super::*;
    use crate::model::{Message, Role};
    use serde_json::json;

    /// Five steps, each a call: the note is told at step 1 and at each of the last
    /// three; each request's context is the previous one's plus its note, the model's
    /// turn and the result.
    #[test]
    fn each_request_starts_with_the_last_one_and_its_note() {
        let h = H::new();
        let mut m = h.machine(LoopState::default());
        let mut notes = vec![ask(&mut m).note];
        let mut before: Vec<Message> = m.messages().to_vec();
        for step in 1..=4u32 {
            let id = format!("c{step}");
            m.handle(Event::ModelReplied(reply(vec![call(
                &id,
                "lookup",
                json!({ "n": step }),
            )])));
            m.handle(Event::CallRan {
                call_id: id,
                execution: outcome(json!({ "n": step }), None, 1),
            });
            let next = m.load_empty_step();
            let now = m.messages();
            let sent = notes.last().expect("a note");
            let mut expected = before.clone();
            if !sent.is_empty() {
                expected.push(Message::text(Role::System, sent.clone()));
            }
            assert_eq!(
                now[..expected.len()],
                expected[..],
                "step {}: the context does not start with the last request",
                step + 1
            );
            assert_eq!(now[expected.len()].role, Role::Assistant);
            notes.push(next.note);
            before = now.to_vec();
        }
        let told: Vec<bool> = notes.iter().map(|n| !n.is_empty()).collect();
        assert_eq!(told, [true, false, true, true, true], "{notes:#?}");
        assert!(
            notes[2].starts_with("Budget: step 3 of 5, 3 left including this one;"),
            "{}",
            notes[2]
        );
    }

    #[test]
    fn marks_are_half_a_quarter_and_a_tenth() {
        let at = |left| mark(left, 100.0);
        assert_eq!(
            [
                at(100.0),
                at(51.0),
                at(50.0),
                at(26.0),
                at(25.0),
                at(11.0),
                at(10.0),
                at(0.0)
            ],
            [0, 0, 1, 1, 2, 2, 3, 3]
        );
        assert_eq!(mark(5.0, 0.0), 0, "no budget, no mark");
        let told = Marks {
            tokens: 1,
            ..Marks::default()
        };
        assert!(!told.beyond(&told));
        assert!(
            Marks {
                time: 1,
                ..Marks::default()
            }
            .beyond(&told)
        );
    }
}

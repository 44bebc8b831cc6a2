//! The [`Rules::keep_steps`] window (issue 14): the context keeps the opening and the
//! last steps, and the model is told how many turns it no longer holds.

use super::*;

#[test]
fn the_window_keeps_the_last_steps_and_counts_the_turns_left_out() {
    let h = H::new();
    let rules = Rules {
        max_steps: 10,
        max_tokens: 100_000,
        keep_steps: Some(2),
        ..Rules::for_tests(&h.tools, &h.prompts)
    };
    let opening = vec![
        Message::text(Role::System, "sys"),
        Message::text(Role::User, "Look things up."),
    ];
    let mut m = Machine::new(
        rules,
        LoopState::default(),
        super::super::context::Context::opening(opening),
    );
    let mut asked = ask(&mut m);
    for i in 0..5 {
        assert_eq!(asked.turns_left_out, i.max(2) - 2, "before step {}", i + 1);
        m.handle(Event::ModelReplied(reply(vec![call(
            &format!("c{i}"),
            "lookup",
            json!({ "i": i }),
        )])));
        m.handle(Event::CallRan {
            call_id: format!("c{i}"),
            execution: outcome(json!(i), None, 1),
        });
        let a = m.load_empty_step();
        check_pairing(&m);
        asked = a;
    }
    // Five steps taken: the opening and steps 4 and 5 remain.
    let assistants = m
        .messages()
        .iter()
        .filter(|x| x.role == Role::Assistant)
        .count();
    assert_eq!(
        (m.messages().len(), assistants, asked.turns_left_out),
        (2 + 4, 2, 3)
    );
    assert_eq!(super::super::first_kept_step(5, 2), 4);
}

//! People's messages (`runs send`, issue 21) as the machine delivers them: at a step
//! that has not begun, before the model is asked, into the context the request is
//! built from; never into a step whose model turn was already stored.

use super::context::Context;
use super::effects::{Effect, Event, Notice};
use super::state::LoopState;
use super::{Machine, Rules};
use crate::config::types::ToolsConfig;
use crate::model::{Message, ModelResponse, Role, StopReason, Usage};
use crate::prompts::Prompts;
use crate::records::{RunId, SentMessage};

fn machine<'a>(tools: &'a ToolsConfig, prompts: &'a Prompts, steps: u32) -> Machine<'a> {
    let rules = Rules::for_tests(tools, prompts);
    let opening = Context::opening(vec![
        Message::text(Role::System, "sys"),
        Message::text(Role::User, "Say hi."),
    ]);
    let state = LoopState {
        steps,
        ..LoopState::default()
    };
    Machine::new(rules, state, opening)
}

fn sent(id: i64, by: &str, text: &str) -> SentMessage {
    SentMessage {
        id,
        run: RunId("r1".into()),
        text: text.into(),
        by: by.into(),
        at: 0,
        delivered: None,
    }
}

fn loaded(turn: Option<ModelResponse>, sent: Vec<SentMessage>) -> Event {
    Event::StepLoaded {
        turn,
        journal: Vec::new(),
        escalations: Vec::new(),
        sent,
    }
}

#[test]
fn messages_are_delivered_after_the_last_step_before_the_model_is_asked() {
    let (tools, prompts) = (ToolsConfig::default(), Prompts::builtin());
    let mut m = machine(&tools, &prompts, 3);
    m.handle(Event::Start {
        escalations: Vec::new(),
    });
    let out = m.handle(loaded(
        None,
        vec![sent(7, "alice", "EU prices"), sent(8, "bob", "hurry")],
    ));
    let notes = vec![
        (
            7,
            Message::text(Role::User, "[A person (alice) sent a message] EU prices"),
        ),
        (
            8,
            Message::text(Role::User, "[A person (bob) sent a message] hurry"),
        ),
    ];
    assert_eq!(
        out[..3],
        [
            Effect::DeliverMessages {
                step: 3,
                messages: notes.clone()
            },
            Effect::Notice(Notice::MessageDelivered {
                step: 3,
                by: "alice".into()
            }),
            Effect::Notice(Notice::MessageDelivered {
                step: 3,
                by: "bob".into()
            }),
        ]
    );
    assert!(matches!(out[3..], [Effect::AskModel(_)]), "{out:?}");
    // The request is built from the context, which ends with them, in order.
    let context = m.messages();
    assert_eq!(
        context[context.len() - 2..],
        [notes[0].1.clone(), notes[1].1.clone()]
    );
}

#[test]
fn a_step_whose_model_turn_is_stored_delivers_nothing() {
    let (tools, prompts) = (ToolsConfig::default(), Prompts::builtin());
    let mut m = machine(&tools, &prompts, 0);
    m.handle(Event::Start {
        escalations: Vec::new(),
    });
    let turn = ModelResponse {
        message: Message::text(Role::Assistant, "hi"),
        usage: Usage::default(),
        stop: StopReason::EndTurn,
        model: "script:s".into(),
    };
    // (The driver reads no messages for such a step; should it hand some over, the
    // machine still leaves them for the next boundary.)
    let out = m.handle(loaded(Some(turn), vec![sent(1, "alice", "late")]));
    assert!(
        !out.iter()
            .any(|e| matches!(e, Effect::DeliverMessages { .. })),
        "{out:?}"
    );
}

#[test]
fn no_message_no_delivery() {
    let (tools, prompts) = (ToolsConfig::default(), Prompts::builtin());
    let mut m = machine(&tools, &prompts, 0);
    m.handle(Event::Start {
        escalations: Vec::new(),
    });
    let out = m.handle(loaded(None, Vec::new()));
    assert!(matches!(out[..], [Effect::AskModel(_)]), "{out:?}");
}

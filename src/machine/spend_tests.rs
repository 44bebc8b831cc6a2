//! The money and time budgets (issue 15) as the machine applies them: cost counted
//! from each response's usage and model, time from the clock the driver sets — here
//! set by hand, so no test sleeps.

use super::context::Context;
use super::effects::{Effect, Event, Notice, Stop, StopReason};
use super::state::LoopState;
use super::{Machine, Rules, Spend};
use crate::config::types::ToolsConfig;
use crate::model::prices::{Price, Pricing};
use crate::model::{Message, ModelResponse, Role, StopReason as ModelStop, Usage};
use crate::prompts::Prompts;
use crate::records::RunStatus;

fn machine<'a>(
    tools: &'a ToolsConfig,
    prompts: &'a Prompts,
    spend: Spend,
    state: LoopState,
) -> Machine<'a> {
    let rules = Rules {
        spend,
        ..Rules::for_tests(tools, prompts)
    };
    let opening = Context::opening(vec![
        Message::text(Role::System, "sys"),
        Message::text(Role::User, "Say hi."),
    ]);
    Machine::new(rules, state, opening)
}

fn answer(model: &str) -> ModelResponse {
    ModelResponse {
        message: Message::text(Role::Assistant, "hi"),
        usage: Usage {
            input: 1_000_000,
            output: 100_000,
            cached: 600_000,
            cache_write: 0,
            ..Default::default()
        },
        stop: ModelStop::EndTurn,
        model: model.into(),
    }
}

fn stopped(reason: &str) -> Vec<Effect> {
    vec![
        Effect::SetStatus {
            status: RunStatus::BudgetExhausted,
            reason: reason.into(),
        },
        Effect::Notice(Notice::Stopped {
            reason: reason.into(),
        }),
        Effect::Stop(Stop {
            status: RunStatus::BudgetExhausted,
            reason: StopReason::Text(reason.into()),
        }),
    ]
}

fn start(m: &mut Machine<'_>) -> Vec<Effect> {
    m.handle(Event::Start {
        escalations: Vec::new(),
    })
}

#[test]
fn each_response_is_priced_by_its_model_with_cached_input_at_its_own_price() {
    let (tools, prompts) = (ToolsConfig::default(), Prompts::builtin());
    let mut m = machine(&tools, &prompts, Spend::default(), LoopState::default());
    assert_eq!(start(&mut m), vec![Effect::LoadStep { step: 1 }]);
    let out = m.handle(Event::ModelReplied(answer("openai:gpt-4o-mini")));
    let Some(Effect::Commit(c)) = out.iter().find(|e| matches!(e, Effect::Commit(_))) else {
        panic!("{out:?}")
    };
    // 400k fresh × $0.15 + 600k cached × $0.075 + 100k out × $0.60, per million.
    let want = 0.06 + 0.045 + 0.06;
    assert!(
        (c.state.cost_usd - want).abs() < 1e-12,
        "{}",
        c.state.cost_usd
    );
}

#[test]
fn the_cost_guard_stops_like_the_step_guard_and_the_request_says_what_is_left() {
    let (tools, prompts) = (ToolsConfig::default(), Prompts::builtin());
    let spend = Spend {
        max_cost: Some(0.5),
        max_duration_ms: None,
        pricing: Pricing {
            given: Some(Price {
                input: 1.0,
                output: 1.0,
                cached_input: None,
                cache_write: None,
            }),
        },
    };
    let spent = LoopState {
        steps: 3,
        cost_usd: 0.5,
        ..Default::default()
    };
    let mut m = machine(&tools, &prompts, spend, spent);
    assert_eq!(
        start(&mut m),
        stopped("cost budget spent: $0.5000 of $0.5000 used")
    );

    let under = LoopState {
        cost_usd: 0.25,
        ..Default::default()
    };
    let mut m = machine(&tools, &prompts, spend, under);
    start(&mut m);
    let ask = m.load_empty_step();
    assert!(
        ask.note.ends_with(" $0.2500 of $0.5000 left."),
        "{}",
        ask.note
    );
}

#[test]
fn time_is_counted_across_resumes_from_the_injected_clock() {
    let (tools, prompts) = (ToolsConfig::default(), Prompts::builtin());
    let spend = Spend {
        max_duration_ms: Some(60_000),
        ..Spend::default()
    };
    // An earlier process drove the run for 50 s; this one starts at t = 1,000,000.
    let before = LoopState {
        active_ms: 50_000,
        ..Default::default()
    };
    let mut m = machine(&tools, &prompts, spend, before.clone());
    m.set_now(1_000_000);
    assert_eq!(start(&mut m), vec![Effect::LoadStep { step: 1 }]);
    // The model takes 4 s to answer with a call: the commit carries 54 s.
    m.set_now(1_004_000);
    let out = m.handle(Event::ModelReplied(ModelResponse {
        message: Message::text(Role::Assistant, "hi"),
        usage: Usage::default(),
        stop: ModelStop::EndTurn,
        model: "script:s".into(),
    }));
    let Some(Effect::Commit(c)) = out.iter().find(|e| matches!(e, Effect::Commit(_))) else {
        panic!("{out:?}")
    };
    assert_eq!(c.state.active_ms, 54_000);

    // Resumed later (the wait in between — for a person, or anything — is not
    // counted): 10 s more of driving passes the budget at the next step's guard.
    let mut m = machine(&tools, &prompts, spend, before);
    m.set_now(5_000_000);
    assert_eq!(start(&mut m), vec![Effect::LoadStep { step: 1 }]);
    m.set_now(5_010_000);
    assert_eq!(m.active_ms(), 60_000);
    m.state.steps = 1;
    assert_eq!(m.begin_step(), stopped("time budget spent: 1m of 1m used"));
}

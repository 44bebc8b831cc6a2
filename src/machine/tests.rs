//! Transition tests of the loop machine: events in, the whole list of effects out —
//! no store, no model, no tool, no clock. The recovery chain's own paths (the seeds'
//! failure matrix) are in `recovery::chain_tests`; these cover the loop around it:
//! budget, answers, approvals, outcome_unknown, resume as replay, the breaker,
//! degradation, stuck detection, tool-bug reports and people's decisions.
//!
//! The harness plays the model: on every `AskModel` it checks that the transcript
//! pairs each tool call with exactly one result, and each result with its call.

use super::effects::{Ask, CallFinished, Commit, Effect, Event, Notice, RunCall, Stop, StopReason};
use super::state::LoopState;
use super::{Machine, Rules, policy};
use crate::config::types::ToolsConfig;
use crate::model::{Message, ModelResponse, Part, Role, StopReason as ModelStop, Usage};
use crate::prompts::Prompts;
use crate::records::{
    AllToolsFailedFacts, BreakerFacts, CallRecord, CallStatus, EscalationDetail, EscalationId,
    EscalationKind, EscalationRow, Facts, Handover, JournalEntry, Resolution, RunId, RunStatus,
    ToolFailures,
};
use crate::recovery::{CallOutcome, Execution};
use crate::taxonomy::ErrorKind;
use crate::trace::{NoteKind, TraceEvent};
use serde_json::{Value, json};
use std::path::Path;

const TOOLS: &str = r#"
[tools.lookup]
description = "lookup"
input_schema = { type = "object" }
command = ["true"]
idempotent = true

[tools.refund]
description = "refund"
input_schema = { type = "object" }
command = ["true"]
"#;

pub(super) struct H {
    tools: ToolsConfig,
    prompts: Prompts,
    subset: Option<Vec<String>>,
}

impl H {
    pub(super) fn new() -> H {
        H {
            tools: crate::config::parse(TOOLS, Path::new("tools.toml")).expect("tools"),
            prompts: Prompts::builtin(),
            subset: None,
        }
    }

    pub(super) fn machine(&self, state: LoopState) -> Machine<'_> {
        self.machine_with(state, Default::default())
    }

    /// A machine with money and time budgets.
    pub(super) fn machine_with(&self, state: LoopState, spend: super::Spend) -> Machine<'_> {
        let rules = Rules {
            tool_subset: self.subset.as_deref(),
            max_steps: 5,
            max_tokens: 10_000,
            spend,
            ..Rules::for_tests(&self.tools, &self.prompts)
        };
        let messages = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "Refund order 1."),
        ];
        Machine::new(rules, state, super::context::Context::opening(messages))
    }
}

/// Starts the machine and plays its first model request; returns what asking gave.
pub(super) fn ask(m: &mut Machine<'_>) -> Ask {
    let start = m.handle(Event::Start {
        escalations: Vec::new(),
    });
    assert_eq!(
        start,
        vec![Effect::LoadStep {
            step: m.state().steps + 1
        }]
    );
    let ask = m.load_empty_step();
    check_pairing(m);
    ask
}

/// What the scripted model checks on every request.
fn check_pairing(m: &Machine<'_>) {
    if let Some(why) = crate::model::pairing::unpaired(m.messages()) {
        panic!("the request breaks the transcript: {why}");
    }
}

pub(super) fn reply(parts: Vec<Part>) -> ModelResponse {
    let calls = parts.iter().any(|p| matches!(p, Part::ToolCall { .. }));
    ModelResponse {
        message: Message {
            role: Role::Assistant,
            content: parts,
        },
        usage: Usage {
            input: 100,
            output: 10,
            ..Usage::default()
        },
        stop: if calls {
            ModelStop::ToolUse
        } else {
            ModelStop::EndTurn
        },
        model: "script:test".into(),
    }
}

pub(super) fn call(id: &str, name: &str, args: Value) -> Part {
    Part::ToolCall {
        id: id.into(),
        name: name.into(),
        args,
    }
}

pub(super) fn text(t: &str) -> Part {
    Part::Text { text: t.into() }
}

pub(super) fn outcome(content: Value, error: Option<ErrorKind>, attempts: u32) -> Execution {
    Execution::Done(CallOutcome {
        content,
        is_error: error.is_some(),
        error,
        attempts,
        via: None,
        spent: None,
    })
}

fn failure(kind: ErrorKind, message: &str, attempts: u32) -> Execution {
    let json = crate::tools::outcome::ToolError::new(kind, message)
        .to_model_json(attempts, Prompts::builtin().hint(kind));
    outcome(json, Some(kind), attempts)
}

/// The commit effect in `out`.
pub(super) fn commit(out: &[Effect]) -> &Commit {
    out.iter()
        .find_map(|e| match e {
            Effect::Commit(c) => Some(c.as_ref()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no commit in {out:?}"))
}

pub(super) fn run_call(step: u32, id: &str, tool: &str, max_attempts: u32) -> Effect {
    Effect::RunCall(Box::new(RunCall {
        step,
        call_id: id.into(),
        tool: tool.into(),
        args: json!({}),
        approved_hop: None,
        decision: None,
        max_attempts,
    }))
}

fn finished(tool: &str, attempts: u32, failed: Option<Option<ErrorKind>>) -> Effect {
    Effect::CallFinished(CallFinished {
        step: 1,
        tool: tool.into(),
        attempts,
        via: None,
        failed,
    })
}

#[test]
fn the_budget_guard_stops_before_asking_the_model() {
    let h = H::new();
    let mut m = h.machine(LoopState {
        steps: 5,
        ..LoopState::default()
    });
    let reason = "step budget spent: 5 of 5 steps used".to_string();
    assert_eq!(
        m.handle(Event::Start {
            escalations: Vec::new()
        }),
        vec![
            Effect::SetStatus {
                status: RunStatus::BudgetExhausted,
                reason: reason.clone()
            },
            Effect::Notice(Notice::Stopped {
                reason: reason.clone()
            }),
            Effect::Stop(Stop {
                status: RunStatus::BudgetExhausted,
                reason: StopReason::Text(reason)
            }),
        ]
    );
}

#[test]
fn the_request_offers_the_tools_and_ask_user_and_the_budget_line_comes_apart_from_the_system_prompt()
 {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    let ask = ask(&mut m);
    let names: Vec<&str> = ask.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["lookup", "refund", "ask_user"]);
    // The system prompt alone: the same bytes at every step (issue 23).
    assert_eq!(ask.system, "sys");
    assert_eq!(
        ask.note,
        "Budget: step 1 of 5, 5 left including this one; 10000 of 10000 tokens left."
    );
}

/// Issue 23: on llama.cpp a small model answered the cut-off note with the note, and
/// that was taken as the run's final answer.
#[test]
fn an_answer_that_only_repeats_agentruns_note_is_not_the_final_answer() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    let first = ask(&mut m);
    let out = m.handle(Event::ModelReplied(reply(vec![text(&first.note)])));
    let c = commit(&out);
    assert_eq!(c.status, RunStatus::Running, "{out:?}");
    assert_eq!(c.answer, None);
    assert_eq!(c.messages[1].role, Role::System, "{:?}", c.messages);
    assert!(
        c.messages[1].joined_text().contains("only repeated a note"),
        "{:?}",
        c.messages
    );
    assert!(
        matches!(out.last(), Some(Effect::LoadStep { step: 2 })),
        "the run goes on: {out:?}"
    );
}

#[test]
fn an_answer_is_journaled_committed_and_stops_the_run() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let r = reply(vec![text("Done.")]);
    let out = m.handle(Event::ModelReplied(r.clone()));
    let c = commit(&out);
    assert_eq!(
        (
            c.status,
            c.answer.as_deref(),
            c.state.steps,
            c.state.tokens_used()
        ),
        (RunStatus::Completed, Some("Done."), 1, 110)
    );
    assert_eq!(
        out,
        vec![
            Effect::RecordModelTurn {
                step: 1,
                response: r
            },
            Effect::Notice(Notice::FinalAnswer {
                step: 1,
                degraded: false
            }),
            Effect::Commit(Box::new(c.clone())),
            Effect::Stop(Stop {
                status: RunStatus::Completed,
                reason: StopReason::None
            }),
        ]
    );
}

#[test]
fn a_tool_call_runs_through_the_chain_and_the_step_commits() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let out = m.handle(Event::ModelReplied(reply(vec![call(
        "c1",
        "lookup",
        json!({}),
    )])));
    assert_eq!(out[1..], [run_call(1, "c1", "lookup", 3)]);
    let out = m.handle(Event::CallRan {
        call_id: "c1".into(),
        execution: outcome(json!({"found": true}), None, 1),
    });
    let c = commit(&out);
    assert_eq!(
        c.outcome,
        Some(CallRecord {
            call_id: "c1".into(),
            status: CallStatus::Ok,
            attempts: 1,
            result: json!({"found": true}),
            is_error: false,
            via: None,
        })
    );
    assert_eq!(
        out,
        vec![
            finished("lookup", 1, None),
            Effect::Commit(Box::new(c.clone())),
            Effect::LoadStep { step: 2 },
        ]
    );
    ask_again(&mut m);
}

/// The next step's request, checked for pairing.
fn ask_again(m: &mut Machine<'_>) {
    let out = m.handle(Event::StepLoaded {
        turn: None,
        journal: Vec::new(),
        escalations: Vec::new(),
        sent: Vec::new(),
    });
    assert!(matches!(out.as_slice(), [Effect::AskModel(_)]), "{out:?}");
    check_pairing(m);
}

#[test]
fn a_tool_not_offered_is_unknown_and_never_runs() {
    let mut h = H::new();
    h.subset = Some(vec!["lookup".into()]);
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let out = m.handle(Event::ModelReplied(reply(vec![call(
        "c1",
        "refund",
        json!({}),
    )])));
    assert!(
        !out.iter().any(|e| matches!(e, Effect::RunCall(_))),
        "{out:?}"
    );
    assert_eq!(
        out[1],
        finished("refund", 0, Some(Some(ErrorKind::UnknownTool)))
    );
    assert_eq!(
        commit(&out).messages[1].content[0],
        Part::ToolResult {
            call_id: "c1".into(),
            content: crate::tools::outcome::ToolError::new(
                ErrorKind::UnknownTool,
                "no tool named `refund` is available in this step"
            )
            .to_model_json(0, Prompts::builtin().hint(ErrorKind::UnknownTool)),
            is_error: true,
        }
    );
}

#[test]
fn a_call_waiting_for_approval_escalates_and_pauses() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    m.handle(Event::ModelReplied(reply(vec![call(
        "c1",
        "lookup",
        json!({"id": 1}),
    )])));
    let out = m.handle(Event::CallRan {
        call_id: "c1".into(),
        execution: Execution::Paused {
            tool: "lookup".into(),
            args: json!({"id": 1}),
            asked_by: None,
        },
    });
    let [
        Effect::Escalate {
            step: 1,
            detail,
            pause_as: Some(RunStatus::AwaitingApproval),
            ..
        },
        Effect::Stop(stop),
    ] = out.as_slice()
    else {
        panic!("{out:?}")
    };
    assert!(matches!(&detail.facts, Facts::ApprovalRequired(f)
        if f.digest == policy::call_key("lookup", &json!({"id": 1})) && f.call_id.as_str() == "c1"));
    assert_eq!(
        stop,
        &Stop {
            status: RunStatus::AwaitingApproval,
            reason: StopReason::WaitingForEscalation
        }
    );
    // Nothing was committed: the step is replayed on resume.
    assert_eq!(m.state().steps, 0);
}

#[test]
fn a_non_idempotent_call_is_marked_started_and_an_unknown_outcome_escalates() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let out = m.handle(Event::ModelReplied(reply(vec![call(
        "c1",
        "refund",
        json!({}),
    )])));
    assert_eq!(
        out[1..],
        [
            Effect::MarkStarted {
                step: 1,
                call_id: "c1".into()
            },
            run_call(1, "c1", "refund", 3),
        ]
    );
    let out = m.handle(Event::CallRan {
        call_id: "c1".into(),
        execution: failure(ErrorKind::OutcomeUnknown, "refund timed out", 1),
    });
    let [
        Effect::Trace(TraceEvent::Note { kind, .. }),
        Effect::Escalate {
            detail, pause_as, ..
        },
        Effect::Stop(_),
    ] = out.as_slice()
    else {
        panic!("{out:?}")
    };
    assert_eq!(
        (*kind, detail.kind(), *pause_as),
        (
            NoteKind::OutcomeUnknown,
            EscalationKind::OutcomeUnknown,
            Some(RunStatus::Escalated)
        )
    );
}

fn entry(id: &str, tool: &str, started: bool, result: Option<Value>) -> JournalEntry {
    JournalEntry {
        step: 1,
        idx: 0,
        call_id: id.into(),
        tool: tool.into(),
        args: json!({}),
        status: if result.is_some() {
            CallStatus::Ok
        } else {
            CallStatus::Pending
        },
        started,
        attempts: 1,
        result,
        is_error: false,
        via: None,
        spent: None,
    }
}

#[test]
fn resume_replays_the_stored_turn_and_reuses_a_journaled_outcome() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    m.handle(Event::Start {
        escalations: Vec::new(),
    });
    let out = m.handle(Event::StepLoaded {
        turn: Some(reply(vec![call("c1", "lookup", json!({}))])),
        journal: vec![entry("c1", "lookup", true, Some(json!("stored")))],
        escalations: Vec::new(),
        sent: Vec::new(),
    });
    // Neither the model nor the tool is asked again; nothing is journaled twice.
    assert_eq!(out[0], finished("lookup", 1, None));
    assert_eq!(commit(&out).outcome, None);
    assert_eq!(out.last(), Some(&Effect::LoadStep { step: 2 }));
    assert!(!out.iter().any(|e| matches!(
        e,
        Effect::RunCall(_) | Effect::RecordModelTurn { .. } | Effect::RecordOutcome { .. }
    )));
}

#[test]
fn resume_after_a_crash_during_a_non_idempotent_call_escalates_instead_of_rerunning() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    m.handle(Event::Start {
        escalations: Vec::new(),
    });
    let out = m.handle(Event::StepLoaded {
        turn: Some(reply(vec![call("c1", "refund", json!({}))])),
        journal: vec![entry("c1", "refund", true, None)],
        escalations: Vec::new(),
        sent: Vec::new(),
    });
    assert!(
        !out.iter().any(|e| matches!(e, Effect::RunCall(_))),
        "{out:?}"
    );
    assert!(
        matches!(
            out.as_slice(),
            [
                Effect::Trace(TraceEvent::Note {
                    kind: NoteKind::OutcomeUnknown,
                    ..
                }),
                Effect::Escalate {
                    pause_as: Some(RunStatus::Escalated),
                    ..
                },
                Effect::Stop(_)
            ]
        ),
        "{out:?}"
    );
}

#[test]
fn resume_after_a_crash_during_an_idempotent_call_runs_it_again() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    m.handle(Event::Start {
        escalations: Vec::new(),
    });
    let out = m.handle(Event::StepLoaded {
        turn: Some(reply(vec![call("c1", "lookup", json!({}))])),
        journal: vec![entry("c1", "lookup", true, None)],
        escalations: Vec::new(),
        sent: Vec::new(),
    });
    assert_eq!(out, vec![run_call(1, "c1", "lookup", 3)]);
}

#[test]
fn the_third_identical_failure_opens_the_circuit_and_escalates_at_the_commit() {
    let h = H::new();
    let key = policy::call_key("lookup", &json!({}));
    let mut state = LoopState::default();
    state.call_failures.insert(key.clone(), 2);
    let mut m = h.machine(state);
    ask(&mut m);
    m.handle(Event::ModelReplied(reply(vec![call(
        "c1",
        "lookup",
        json!({}),
    )])));
    let out = m.handle(Event::CallRan {
        call_id: "c1".into(),
        execution: failure(ErrorKind::Unavailable, "down", 3),
    });
    let c = commit(&out);
    let Some((_, detail)) = &c.escalation else {
        panic!("{c:?}")
    };
    assert!(matches!(&detail.facts, Facts::BreakerOpen(f) if f.digest == key));
    assert_eq!(
        (c.status, c.state.open_circuits.contains(&key)),
        (RunStatus::Escalated, true)
    );
    assert!(matches!(
        out.last(),
        Some(Effect::Stop(Stop {
            status: RunStatus::Escalated,
            reason: StopReason::Escalated(_)
        }))
    ));
}

#[test]
fn withdrawing_the_last_tool_degrades_the_run_to_an_answer_without_tools() {
    let mut h = H::new();
    h.subset = Some(vec!["lookup".into()]);
    let mut state = LoopState::default();
    state.tool_failures.insert("lookup".into(), 2);
    let mut m = h.machine(state);
    ask(&mut m);
    m.handle(Event::ModelReplied(reply(vec![call(
        "c1",
        "lookup",
        json!({"q": 1}),
    )])));
    let out = m.handle(Event::CallRan {
        call_id: "c1".into(),
        execution: failure(ErrorKind::NotFound, "none", 1),
    });
    assert!(out.contains(&Effect::Notice(Notice::Degraded)), "{out:?}");
    let c = commit(&out);
    assert!(c.state.degraded && c.state.disabled.contains("lookup"));
    let last = c
        .messages
        .last()
        .map(Message::joined_text)
        .unwrap_or_default();
    assert_eq!(last, h.prompts.degraded.trim());
    let next = ask_with_state(&mut m);
    assert!(next.tools.is_empty(), "no tools once degraded");
}

#[test]
fn withdrawing_the_last_tool_raises_an_all_tools_failed_report_that_does_not_pause() {
    let mut h = H::new();
    h.subset = Some(vec!["lookup".into()]);
    let mut state = LoopState::default();
    state.tool_failures.insert("lookup".into(), 2);
    let mut m = h.machine(state);
    ask(&mut m);
    m.handle(Event::ModelReplied(reply(vec![call(
        "c1",
        "lookup",
        json!({"q": 1}),
    )])));
    let out = m.handle(Event::CallRan {
        call_id: "c1".into(),
        execution: failure(ErrorKind::NotFound, "none", 1),
    });
    let raised: Vec<_> = out
        .iter()
        .filter_map(|e| match e {
            Effect::Escalate {
                pause_as, detail, ..
            } => Some((pause_as, detail)),
            _ => None,
        })
        .collect();
    assert_eq!(raised.len(), 1, "{out:?}");
    let (pause_as, detail) = raised[0];
    assert_eq!(*pause_as, None, "the run goes on to a degraded answer");
    assert_eq!(detail.kind(), EscalationKind::AllToolsFailed);
    assert_eq!(
        detail.facts,
        Facts::AllToolsFailed(AllToolsFailedFacts {
            tools: vec![ToolFailures {
                tool: "lookup".into(),
                failures: 3
            }]
        })
    );
    assert!(
        detail.handover.problem.contains("lookup (3 failures)"),
        "{}",
        detail.handover.problem
    );
    let c = commit(&out);
    assert!(c.escalation.is_none() && c.status == RunStatus::Running);
    assert_eq!(out.last(), Some(&Effect::LoadStep { step: 2 }));
}

fn ask_with_state(m: &mut Machine<'_>) -> Ask {
    let out = m.handle(Event::StepLoaded {
        turn: None,
        journal: Vec::new(),
        escalations: Vec::new(),
        sent: Vec::new(),
    });
    check_pairing(m);
    match out.as_slice() {
        [Effect::AskModel(a)] => a.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_third_identical_call_is_nudged_once() {
    let h = H::new();
    let key = policy::call_key("lookup", &json!({}));
    let state = LoopState {
        recent_calls: vec![key.clone(), key],
        ..LoopState::default()
    };
    let mut m = h.machine(state);
    ask(&mut m);
    m.handle(Event::ModelReplied(reply(vec![call(
        "c1",
        "lookup",
        json!({}),
    )])));
    let out = m.handle(Event::CallRan {
        call_id: "c1".into(),
        execution: outcome(json!("same"), None, 1),
    });
    assert!(
        matches!(&out[1], Effect::Notice(Notice::Nudged { step: 1, .. })),
        "{out:?}"
    );
    let c = commit(&out);
    assert!(c.state.nudged && c.escalation.is_none());
    assert_eq!(c.messages.last().map(|m| m.role), Some(Role::System));
}

#[test]
fn a_tool_bug_is_reported_without_pausing_the_run() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    m.handle(Event::ModelReplied(reply(vec![call(
        "c1",
        "lookup",
        json!({}),
    )])));
    let out = m.handle(Event::CallRan {
        call_id: "c1".into(),
        execution: failure(ErrorKind::ToolBug, "crashed", 1),
    });
    assert!(
        matches!(&out[1], Effect::Escalate { pause_as: None, detail, .. }
        if detail.kind() == EscalationKind::ToolBug),
        "{out:?}"
    );
    assert_eq!(out.last(), Some(&Effect::LoadStep { step: 2 }));
}

#[test]
fn a_failed_model_call_stores_the_trace_and_fails_the_run() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let reason = "model call for step 1 failed: HTTP 401".to_string();
    assert_eq!(
        m.handle(Event::ModelFailed("HTTP 401".into())),
        vec![
            Effect::RecordEvents { step: 0 },
            Effect::SetStatus {
                status: RunStatus::Failed,
                reason: reason.clone()
            },
            Effect::Notice(Notice::Failed {
                reason: reason.clone()
            }),
            Effect::Stop(Stop {
                status: RunStatus::Failed,
                reason: StopReason::Text(reason)
            }),
        ]
    );
}

#[test]
fn a_response_cut_at_the_token_limit_keeps_its_text_only_and_fails() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let mut r = reply(vec![text("partial"), call("c1", "lookup", json!({}))]);
    r.stop = ModelStop::MaxTokens;
    // The first cut is asked again once (`machine::cut`); the second ends the run.
    let again = m.handle(Event::ModelReplied(r.clone()));
    assert!(
        matches!(again.last(), Some(Effect::AskModel(_))),
        "{again:?}"
    );
    let out = m.handle(Event::ModelReplied(r));
    let c = commit(&out);
    assert_eq!(c.status, RunStatus::Failed);
    assert_eq!(c.messages[0].content, vec![text("partial")]);
    check_pairing(&m);
    assert!(matches!(
        out.last(),
        Some(Effect::Stop(Stop {
            status: RunStatus::Failed,
            ..
        }))
    ));
}

fn resolved(id: i64, step: u32, facts: Facts, r: Resolution) -> EscalationRow {
    EscalationRow {
        id: EscalationId(id),
        run_id: RunId("r".into()),
        step,
        kind: facts.kind(),
        open: false,
        summary: "s".into(),
        detail: EscalationDetail {
            facts,
            handover: Handover {
                request: String::new(),
                checked: Vec::new(),
                problem: String::new(),
                next_step: String::new(),
            },
        },
        created_at: 0,
        resolved_at: Some(0),
        resolved_by: Some("p".into()),
        resolution: Some(r),
        applied: false,
    }
}

#[test]
fn an_approved_breaker_closes_the_circuit_before_the_next_step() {
    let h = H::new();
    let key = policy::call_key("lookup", &json!({}));
    let mut state = LoopState::default();
    state.open_circuits.insert(key.clone());
    state.call_failures.insert(key.clone(), 3);
    let mut m = h.machine(state);
    let facts = Facts::BreakerOpen(BreakerFacts {
        call_id: "c1".into(),
        tool: "lookup".into(),
        args: json!({}),
        digest: key,
    });
    let out = m.handle(Event::Start {
        escalations: vec![resolved(4, 1, facts, Resolution::Approve)],
    });
    assert_eq!(
        out,
        vec![
            Effect::ApplyResolution {
                escalation: EscalationId(4),
                step: 0,
                notes: Vec::new(),
                state: LoopState::default(),
                stop: None,
            },
            Effect::LoadStep { step: 1 },
        ]
    );
}

#[test]
fn an_approval_decided_by_a_person_goes_to_the_gate_on_replay() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    m.handle(Event::Start {
        escalations: Vec::new(),
    });
    let facts = Facts::ApprovalRequired(crate::records::ApprovalFacts {
        call_id: "c1".into(),
        tool: "refund".into(),
        args: json!({}),
        digest: policy::call_key("refund", &json!({})),
        requested_tool: "refund".into(),
    });
    let decision = resolved(2, 1, facts, Resolution::Approve);
    let out = m.handle(Event::StepLoaded {
        turn: Some(reply(vec![call("c1", "refund", json!({}))])),
        journal: vec![entry("c1", "refund", false, None)],
        escalations: vec![decision.clone()],
        sent: Vec::new(),
    });
    let Some(Effect::RunCall(rc)) = out.last() else {
        panic!("{out:?}")
    };
    assert_eq!(rc.decision.as_ref(), Some(&decision));
}

#[test]
fn a_question_to_a_person_pauses_and_their_reply_is_the_result() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let q = call("c1", "ask_user", json!({"question": "Which order?"}));
    let out = m.handle(Event::ModelReplied(reply(vec![q.clone()])));
    assert!(
        matches!(&out[1], Effect::Escalate { detail, pause_as: Some(RunStatus::Escalated), .. }
        if detail.kind() == EscalationKind::Question),
        "{out:?}"
    );
    let mut m = h.machine(LoopState::default());
    m.handle(Event::Start {
        escalations: Vec::new(),
    });
    let facts = Facts::Question(crate::records::QuestionFacts {
        call_id: "c1".into(),
        tool: "ask_user".into(),
        question: "Which order?".into(),
    });
    let reply_text = Resolution::Reply {
        text: "ORD-1".into(),
    };
    let out = m.handle(Event::StepLoaded {
        turn: Some(reply(vec![q])),
        journal: Vec::new(),
        escalations: vec![resolved(1, 1, facts, reply_text)],
        sent: Vec::new(),
    });
    assert_eq!(
        commit(&out).messages[1].content[0],
        Part::ToolResult {
            call_id: "c1".into(),
            content: json!({"answer": "ORD-1"}),
            is_error: false
        }
    );
}

#[test]
fn calls_over_the_turn_cap_feed_neither_the_breaker_nor_the_stuck_detector() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let max = crate::model::limits::MAX_CALLS_PER_TURN;
    let parts = (0..max + 6)
        .map(|i| call(&format!("c{i}"), "lookup", json!({ "i": i })))
        .collect();
    let mut out = m.handle(Event::ModelReplied(reply(parts)));
    for i in 0..max {
        out = m.handle(Event::CallRan {
            call_id: format!("c{i}"),
            execution: outcome(json!(i), None, 1),
        });
    }
    // The six refused calls ended at once, after the last call that ran.
    let c = commit(&out);
    assert!(!c.state.nudged && c.escalation.is_none(), "{c:?}");
    assert!(
        c.state.recent_errors.is_empty(),
        "{:?}",
        c.state.recent_errors
    );
    assert!(c.state.call_failures.is_empty() && c.state.tool_failures.is_empty());
    assert!(
        !out.iter()
            .any(|e| matches!(e, Effect::Notice(Notice::Nudged { .. }))),
        "{out:?}"
    );
}

#[path = "batch_tests.rs"]
mod batch;

#[path = "window_tests.rs"]
mod window;

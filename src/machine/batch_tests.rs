//! Transition tests of running a step's calls together ([`crate::machine::batch`]):
//! which calls are handed out at once, journaling as results arrive, the model's
//! order in the transcript, and the rules that keep a call alone.

use super::*;

const GATED: &str = r#"
[tools.lookup]
description = "lookup"
input_schema = { type = "object" }
command = ["true"]
idempotent = true

[tools.refund]
description = "refund"
input_schema = { type = "object" }
command = ["true"]

[tools.delete]
description = "delete"
input_schema = { type = "object" }
command = ["true"]
approval = "always"
idempotent = true
"#;

fn run_with(id: &str, tool: &str, args: Value, max_attempts: u32) -> Effect {
    Effect::RunCall(Box::new(RunCall {
        step: 1,
        call_id: id.into(),
        tool: tool.into(),
        args,
        approved_hop: None,
        decision: None,
        max_attempts,
    }))
}

fn ran(m: &mut Machine<'_>, id: &str, content: Value) -> Vec<Effect> {
    m.handle(Event::CallRan {
        call_id: id.into(),
        execution: outcome(content, None, 1),
    })
}

fn record(id: &str, result: Value) -> CallRecord {
    CallRecord {
        call_id: id.into(),
        status: CallStatus::Ok,
        attempts: 1,
        result,
        is_error: false,
        via: None,
    }
}

/// The tool results of a commit, in transcript order: (call id, result).
fn results(c: &Commit) -> Vec<(String, Value)> {
    c.messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|p| match p {
            Part::ToolResult {
                call_id, content, ..
            } => Some((call_id.clone(), content.clone())),
            _ => None,
        })
        .collect()
}

fn ids(out: &[Effect]) -> Vec<&str> {
    out.iter()
        .filter_map(|e| match e {
            Effect::RunCall(c) => Some(c.call_id.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn independent_calls_run_together_and_land_in_the_models_order() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let out = m.handle(Event::ModelReplied(reply(vec![
        call("a", "lookup", json!({"q": 1})),
        call("b", "lookup", json!({"q": 2})),
        call("c", "refund", json!({})),
    ])));
    assert_eq!(
        out[1..],
        [
            run_with("a", "lookup", json!({"q": 1}), 3),
            run_with("b", "lookup", json!({"q": 2}), 3),
            Effect::MarkStarted {
                step: 1,
                call_id: "c".into()
            },
            run_with("c", "refund", json!({}), 3),
        ]
    );
    // The last call finishes first: journaled at once, applied later.
    assert_eq!(
        ran(&mut m, "c", json!("refunded")),
        vec![Effect::RecordOutcome {
            step: 1,
            record: record("c", json!("refunded"))
        }]
    );
    // The second next: journaled at once too (the first still runs).
    assert_eq!(
        ran(&mut m, "b", json!("two")),
        vec![Effect::RecordOutcome {
            step: 1,
            record: record("b", json!("two"))
        }]
    );
    // The first: the three are applied in the model's order, and the step commits
    // without journaling any of them twice.
    let out = ran(&mut m, "a", json!("one"));
    let c = commit(&out);
    assert_eq!(
        results(c),
        vec![
            ("a".to_string(), json!("one")),
            ("b".to_string(), json!("two")),
            ("c".to_string(), json!("refunded")),
        ]
    );
    assert_eq!(
        out.iter()
            .filter(|e| matches!(e, Effect::RecordOutcome { .. }))
            .collect::<Vec<_>>(),
        vec![&Effect::RecordOutcome {
            step: 1,
            record: record("a", json!("one"))
        }]
    );
    assert_eq!(c.outcome, None);
    ask_again(&mut m);
}

#[test]
fn a_call_with_the_same_tool_and_arguments_waits_for_its_twin() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let out = m.handle(Event::ModelReplied(reply(vec![
        call("a", "lookup", json!({"q": 1})),
        call("b", "lookup", json!({"q": 1})),
        call("c", "lookup", json!({"q": 2})),
    ])));
    assert_eq!(ids(&out), vec!["a"]);
    let out = m.handle(Event::CallRan {
        call_id: "a".into(),
        execution: failure(ErrorKind::Timeout, "slow", 3),
    });
    // b starts only now, gated by the state a's failure left (the breaker counts it).
    assert_eq!(ids(&out), vec!["b", "c"]);
    assert_eq!(m.pending_state().call_failures.values().sum::<u32>(), 1);
}

#[test]
fn a_call_needing_approval_runs_alone_after_the_calls_before_it() {
    let h = H {
        tools: crate::config::parse(GATED, Path::new("tools.toml")).expect("tools"),
        prompts: Prompts::builtin(),
        subset: None,
    };
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let out = m.handle(Event::ModelReplied(reply(vec![
        call("a", "lookup", json!({"q": 1})),
        call("b", "delete", json!({"id": 7})),
        call("c", "lookup", json!({"q": 2})),
    ])));
    assert_eq!(ids(&out), vec!["a"]);
    let out = ran(&mut m, "a", json!("one"));
    assert_eq!(ids(&out), vec!["b"]);
    // The chain's gate pauses it: nothing after it has run, nothing is left running.
    let out = m.handle(Event::CallRan {
        call_id: "b".into(),
        execution: Execution::Paused {
            tool: "delete".into(),
            args: json!({"id": 7}),
            asked_by: None,
        },
    });
    assert!(ids(&out).is_empty(), "{out:?}");
    assert!(
        matches!(
            out.last(),
            Some(Effect::Stop(Stop {
                status: RunStatus::AwaitingApproval,
                ..
            }))
        ),
        "{out:?}"
    );
}

#[test]
fn at_most_eight_calls_run_at_once_and_a_finished_one_makes_room() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let calls = (0..10)
        .map(|i| call(&format!("c{i}"), "lookup", json!({ "q": i })))
        .collect();
    let out = m.handle(Event::ModelReplied(reply(calls)));
    assert_eq!(ids(&out).len(), super::super::MAX_PARALLEL);
    let out = ran(&mut m, "c3", json!(3));
    assert_eq!(ids(&out), vec!["c8"]);
    let out = ran(&mut m, "c0", json!(0));
    assert_eq!(ids(&out), vec!["c9"]);
}

#[test]
fn an_unknown_outcome_waits_for_the_running_calls_then_escalates() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let out = m.handle(Event::ModelReplied(reply(vec![
        call("a", "refund", json!({"order": 1})),
        call("b", "lookup", json!({"q": 1})),
    ])));
    assert_eq!(ids(&out), vec!["a", "b"]);
    let out = m.handle(Event::CallRan {
        call_id: "a".into(),
        execution: failure(ErrorKind::OutcomeUnknown, "refund timed out", 1),
    });
    // Held: b still runs, so the run does not pause yet.
    assert!(out.is_empty(), "{out:?}");
    let out = ran(&mut m, "b", json!("found"));
    // b's outcome is journaled before the pause, so resume reuses it.
    let journal_at = out
        .iter()
        .position(|e| matches!(e, Effect::RecordOutcome { record, .. } if record.call_id == "b"));
    let escalate_at = out
        .iter()
        .position(|e| matches!(e, Effect::Escalate { .. }));
    assert!(
        matches!((journal_at, escalate_at), (Some(j), Some(e)) if j < e),
        "{out:?}"
    );
    assert!(
        matches!(
            out.last(),
            Some(Effect::Stop(Stop {
                status: RunStatus::Escalated,
                ..
            }))
        ),
        "{out:?}"
    );
}

#[test]
fn resume_reuses_the_outcomes_journaled_mid_batch_and_reruns_the_rest() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    m.handle(Event::Start {
        escalations: Vec::new(),
    });
    let mut b = entry("b", "lookup", true, Some(json!("two")));
    b.args = json!({"q": 2});
    let mut a = entry("a", "lookup", true, None);
    a.args = json!({"q": 1});
    let out = m.handle(Event::StepLoaded {
        turn: Some(reply(vec![
            call("a", "lookup", json!({"q": 1})),
            call("b", "lookup", json!({"q": 2})),
            call("c", "lookup", json!({"q": 3})),
        ])),
        journal: vec![a, b],
        escalations: Vec::new(),
        sent: Vec::new(),
    });
    assert_eq!(ids(&out), vec!["a", "c"]);
    ran(&mut m, "c", json!("three"));
    let out = ran(&mut m, "a", json!("one"));
    assert_eq!(
        results(commit(&out)),
        vec![
            ("a".to_string(), json!("one")),
            ("b".to_string(), json!("two")),
            ("c".to_string(), json!("three")),
        ]
    );
}

//! Transition tests for a stop at each phase of the machine (issue 21): before the
//! start, at a step boundary, while the model is asked, while calls run (idempotent
//! and not), when the work finishes before the driver aborts it, for the time
//! budget, and after the stop — effects compared whole, no IO.

use super::effects::{Effect, Event, Notice, Stop, StopReason};
use super::state::LoopState;
use super::stop::{Phase, StopCause, StopRequest};
use super::tests::{H, ask, call, commit, outcome, reply, run_call, text};
use crate::records::RunStatus;
use serde_json::json;

fn cancel() -> StopRequest {
    StopRequest {
        cause: StopCause::Cancel,
        by: "ana".into(),
        reason: Some("wrong customer".into()),
    }
}

/// The three effects every stop ends with.
fn stopped(status: RunStatus, reason: &str) -> Vec<Effect> {
    vec![
        Effect::SetStatus {
            status,
            reason: reason.into(),
        },
        Effect::Notice(Notice::Stopped {
            reason: reason.into(),
        }),
        Effect::Stop(Stop {
            status,
            reason: StopReason::Text(reason.into()),
        }),
    ]
}

fn start(m: &mut super::Machine<'_>) -> Vec<Effect> {
    m.handle(Event::Start {
        escalations: Vec::new(),
    })
}

#[test]
fn a_stop_before_the_start_ends_the_run_at_once_and_the_start_is_ignored() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    assert_eq!(m.phase(), Phase::Idle);
    let out = m.handle(Event::StopRequested(cancel()));
    assert_eq!(
        out,
        stopped(RunStatus::Cancelled, "cancelled by ana: wrong customer")
    );
    assert_eq!(m.phase(), Phase::Stopped);
    assert_eq!(start(&mut m), vec![]);
}

#[test]
fn a_stop_at_the_step_boundary_ends_the_run_before_the_step_is_loaded() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    assert_eq!(start(&mut m), vec![Effect::LoadStep { step: 1 }]);
    assert_eq!(m.phase(), Phase::Loading);
    let out = m.handle(Event::StopRequested(StopRequest::new(
        StopCause::Signal,
        "signal",
    )));
    assert_eq!(
        out,
        stopped(RunStatus::Interrupted, "interrupted by a signal")
    );
    let late = m.handle(Event::StepLoaded {
        turn: None,
        journal: Vec::new(),
        escalations: Vec::new(),
        sent: Vec::new(),
    });
    assert_eq!(late, vec![]);
}

#[test]
fn a_stop_while_the_model_is_asked_waits_then_an_abort_ends_the_run_with_nothing_journaled() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    assert_eq!(m.phase(), Phase::Asking);
    assert_eq!(m.handle(Event::StopRequested(cancel())), vec![]);
    assert_eq!(m.phase(), Phase::Asking);
    let out = m.handle(Event::Aborted);
    // No RecordModelTurn, no Commit: the request is asked again if the run goes on.
    assert_eq!(
        out,
        stopped(RunStatus::Cancelled, "cancelled by ana: wrong customer")
    );
    assert_eq!(m.state().steps, 0);
    // The reply that raced the abort is dropped.
    assert_eq!(
        m.handle(Event::ModelReplied(reply(vec![text("hi")]))),
        vec![]
    );
}

#[test]
fn a_reply_that_arrives_before_the_abort_finishes_the_step_and_the_run_stops_at_the_boundary() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let shutdown = StopRequest::new(StopCause::WorkerShutdown, "w-a");
    assert_eq!(m.handle(Event::StopRequested(shutdown)), vec![]);
    let out = m.handle(Event::ModelReplied(reply(vec![call(
        "c1",
        "lookup",
        json!({}),
    )])));
    assert_eq!(out[1..], [run_call(1, "c1", "lookup", 3)]);
    assert_eq!(m.phase(), Phase::Calling);
    let out = m.handle(Event::CallRan {
        call_id: "c1".into(),
        execution: outcome(json!({"found": true}), None, 1),
    });
    // The step commits; instead of loading step 2 the run goes back to the queue.
    let c = commit(&out).clone();
    assert_eq!(c.step, 1);
    let tail = out
        .iter()
        .skip_while(|e| !matches!(e, Effect::Commit(_)))
        .skip(1)
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(
        tail,
        stopped(
            RunStatus::Queued,
            "handed back to the queue (worker w-a stopping)"
        )
    );
}

#[test]
fn a_final_answer_that_arrives_before_the_abort_completes_the_run() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    m.handle(Event::StopRequested(cancel()));
    let out = m.handle(Event::ModelReplied(reply(vec![text("done")])));
    let Some(Effect::Stop(stop)) = out.last() else {
        panic!("{out:?}")
    };
    assert_eq!(stop.status, RunStatus::Completed);
    assert_eq!(m.phase(), Phase::Stopped);
}

#[test]
fn an_abort_while_a_non_idempotent_call_runs_says_resume_will_ask_a_person() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    let out = m.handle(Event::ModelReplied(reply(vec![call(
        "c1",
        "refund",
        json!({}),
    )])));
    assert!(out.contains(&Effect::MarkStarted {
        step: 1,
        call_id: "c1".into()
    }));
    m.handle(Event::StopRequested(StopRequest::new(
        StopCause::Signal,
        "signal",
    )));
    let out = m.handle(Event::Aborted);
    assert_eq!(
        out,
        stopped(
            RunStatus::Interrupted,
            "interrupted by a signal while `refund` was running; it is not idempotent, so \
             resume will ask a person whether it happened"
        )
    );
    // The call's late answer is not applied: the journal keeps it started, unknown.
    let late = m.handle(Event::CallRan {
        call_id: "c1".into(),
        execution: outcome(json!("refunded"), None, 1),
    });
    assert_eq!(late, vec![]);
}

#[test]
fn an_abort_while_an_idempotent_call_runs_stops_without_a_warning() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    m.handle(Event::ModelReplied(reply(vec![call(
        "c1",
        "lookup",
        json!({}),
    )])));
    m.handle(Event::StopRequested(cancel()));
    assert_eq!(
        m.handle(Event::Aborted),
        stopped(RunStatus::Cancelled, "cancelled by ana: wrong customer")
    );
}

#[test]
fn the_time_budget_running_out_mid_request_stops_the_run_as_budget_exhausted() {
    let h = H::new();
    let spend = super::Spend {
        max_duration_ms: Some(3_000),
        ..Default::default()
    };
    let mut m = h.machine_with(LoopState::default(), spend);
    m.set_now(10_000);
    ask(&mut m);
    assert_eq!(m.time_left_ms(), Some(3_000));
    m.set_now(12_000);
    assert_eq!(m.time_left_ms(), Some(1_000));
    m.set_now(13_000);
    assert_eq!(m.time_left_ms(), Some(0));
    m.handle(Event::StopRequested(StopRequest::new(
        StopCause::Deadline,
        "time budget",
    )));
    assert_eq!(
        m.handle(Event::Aborted),
        stopped(
            RunStatus::BudgetExhausted,
            "time budget spent: 3s of 3s used"
        )
    );
}

#[test]
fn no_time_budget_means_no_deadline() {
    let h = H::new();
    let m = h.machine(LoopState::default());
    assert_eq!(m.time_left_ms(), None);
}

#[test]
fn a_second_stop_request_does_not_replace_the_first() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    m.handle(Event::StopRequested(cancel()));
    m.handle(Event::StopRequested(StopRequest::new(
        StopCause::Signal,
        "signal",
    )));
    assert_eq!(
        m.handle(Event::Aborted),
        stopped(RunStatus::Cancelled, "cancelled by ana: wrong customer")
    );
}

#[test]
fn a_cancel_during_a_non_idempotent_call_does_not_promise_a_resume() {
    let h = H::new();
    let mut m = h.machine(LoopState::default());
    ask(&mut m);
    m.handle(Event::ModelReplied(reply(vec![call(
        "c1",
        "refund",
        json!({}),
    )])));
    m.handle(Event::StopRequested(cancel()));
    assert_eq!(
        m.handle(Event::Aborted),
        stopped(RunStatus::Cancelled, "cancelled by ana: wrong customer")
    );
}

//! kill -9 at every crash point of `runs fork` and `runs send` (issue 21): the points
//! in `fault::OPERATOR_POINTS`, each reached once — inside and after the fork's
//! transaction, inside and after the send's, inside and after the holder's delivery.
//! After each, the command (or resume) is done again, and the result is checked:
//! nothing lost, nothing twice — no copied step's effect repeated, no message dropped
//! or delivered twice.

use crate::common::{Db, Project};
use crate::fork_send::{
    check_delivered_once, check_fork, crashed, effects, project, runs, send, start, the_fork,
};
use serde_json::json;

type Check = fn(&Db, &'static str);

const CASES: &[(&str, Check)] = &[
    ("inside_fork", fork_crash),
    ("after_fork", fork_crash),
    ("inside_send", send_crash),
    ("after_send", send_crash),
    ("inside_delivery", delivery_crash),
    ("after_delivery", delivery_crash),
];

const TEXT: &str = "Use the EU price list.";

#[test]
fn a_crash_at_every_point_of_fork_and_send_loses_nothing_and_repeats_nothing() {
    every_operator_crash_point(&Db::Sqlite);
}

/// The suite on a backend (`tests/it/pg.rs` runs it on PostgreSQL).
pub fn every_operator_crash_point(db: &Db) {
    for (point, check) in CASES {
        check(db, point);
    }
}

#[test]
fn the_table_covers_every_operator_crash_point() {
    let points: Vec<&str> = CASES.iter().map(|(p, _)| *p).collect();
    assert_eq!(points, agentrun::fault::OPERATOR_POINTS);
}

/// A fork killed inside its transaction left nothing; one killed after it left the
/// fork, not started. Either way the fork then runs only the calls after its point.
fn fork_crash(db: &Db, point: &'static str) {
    let p = project(db, 3, "done");
    let original = start(&p);
    let before = p.show(&original);
    crashed(&p, &["runs", "fork", &original, "--at-step", "1"], point);
    let fork = if point == "inside_fork" {
        assert_eq!(runs(&p).len(), 1, "{point}: the fork was rolled back");
        let v = p
            .run(&["runs", "fork", &original, "--at-step", "1", "--json"])
            .expect_code(0)
            .json();
        v["run_id"].as_str().expect("run_id").to_string()
    } else {
        let fork = the_fork(&p, &original);
        let show = p.show(&fork);
        assert_eq!(show["status"], "interrupted", "{point}: {show}");
        assert_eq!(show["forked_from"], json!({"run_id": original, "step": 1}));
        p.run(&["resume", &fork, "--json"]).expect_code(0);
        fork
    };
    check_fork(&p, &original, &fork, 1, 3);
    assert_eq!(
        p.show(&original),
        before,
        "{point}: the original is untouched"
    );
}

/// A run stopped by its step budget after step 1 (one `once` call done), waiting.
fn waiting_run(db: &Db) -> (Project, String) {
    let p = project(db, 2, "done");
    p.task("max_steps = 1", "Do the work.");
    let v = p.run(&["start", "task.md", "--json"]).expect_code(4).json();
    (p, v["run_id"].as_str().expect("run_id").to_string())
}

fn resume_to_the_end(p: &Project, id: &str) {
    let v = p
        .run(&["resume", id, "--max-steps", "5", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(v["status"], "completed");
    let show = p.show(id);
    check_delivered_once(&show, "alice", TEXT, 1);
    let calls: Vec<String> = effects(p).into_iter().map(|(_, _, c)| c).collect();
    assert_eq!(calls, ["call_0_0", "call_1_0"], "each call's effect once");
}

/// A send killed inside its transaction stored nothing (the person sends again); one
/// killed after it stored the message once.
fn send_crash(db: &Db, point: &'static str) {
    let (p, id) = waiting_run(db);
    crashed(&p, &["runs", "send", &id, TEXT, "--by", "alice"], point);
    let stored = p.show(&id)["sent_messages"].as_array().expect("sent").len();
    if point == "inside_send" {
        assert_eq!(stored, 0, "{point}: rolled back");
        send(&p, &id, TEXT, "alice");
    } else {
        assert_eq!(stored, 1, "{point}: stored once");
    }
    resume_to_the_end(&p, &id);
}

/// The holder killed inside the delivery left the message undelivered (the next
/// resume delivers it); killed after it, the message is in the transcript and is not
/// delivered again.
fn delivery_crash(db: &Db, point: &'static str) {
    let (p, id) = waiting_run(db);
    send(&p, &id, TEXT, "alice");
    crashed(&p, &["resume", &id, "--max-steps", "5"], point);
    let show = p.show(&id);
    let delivered = &show["sent_messages"][0]["delivered_after_step"];
    let in_transcript = show["messages"].to_string().contains(TEXT);
    if point == "inside_delivery" {
        assert_eq!((delivered, in_transcript), (&json!(null), false), "{point}");
    } else {
        assert_eq!((delivered, in_transcript), (&json!(1), true), "{point}");
    }
    resume_to_the_end(&p, &id);
}

//! Exactly-once steps, proven by fault injection (issue 6 §1–2): the real binary is
//! aborted at every hit of every named crash point (`AGENTRUN_CRASH_AT=NAME:N`, debug
//! builds), resumed, and the finished run is compared with an uninterrupted one.
//!
//! The script mixes `idem` (idempotent: re-run after a crash) and `once` (never re-run;
//! `on_unknown = "tell_model"`) calls, two per step, each kind both first and last (a
//! step's last outcome is journaled apart from the step commit only when the call must
//! not be repeated). Where a crash leaves a `once` call
//! started without an outcome, the transcript differs from the uninterrupted one at
//! exactly that call's result, which is `outcome_unknown`; the table below says which
//! call that is and how many times each call's side effect happened.

use crate::common::{Db, Project};
use crate::exactly_once::{
    check_effects, check_no_stored_turn_requested_again, check_one_result_per_call,
    check_transcript, effect_counts, observed, project, project_on, run, turns_requested,
};
use serde_json::Value;

/// Step 1: `call_0_0` once, `call_0_1` idem. Step 2: `call_1_0` idem, `call_1_1` once.
/// Step 3: the answer.
const TURNS: &[&[&str]] = &[&["once", "idem"], &["idem", "once"]];
const CALLS: [&str; 4] = ["call_0_0", "call_0_1", "call_1_0", "call_1_1"];

struct Case {
    point: &'static str,
    /// Which hit of the point (from 1).
    nth: u32,
    /// The `once` call whose outcome the crash leaves unknown.
    unknown: Option<&'static str>,
    /// Side effects of CALLS, in order.
    effects: [usize; 4],
}

const fn case(
    point: &'static str,
    nth: u32,
    unknown: Option<&'static str>,
    effects: [usize; 4],
) -> Case {
    Case {
        point,
        nth,
        unknown,
        effects,
    }
}

const ONCE_EACH: [usize; 4] = [1, 1, 1, 1];

/// Every hit of every crash point in the script above, in the order a run reaches them.
const CASES: &[Case] = &[
    // The response is stored: it is reused, never asked for again.
    case("after_model_stored", 1, None, ONCE_EACH),
    case("after_model_stored", 2, None, ONCE_EACH),
    case("after_model_stored", 3, None, ONCE_EACH),
    // A started `once` call is never re-run, whether or not it got to run (intent: it
    // did not; effect: it did). An `idem` call simply runs again.
    case("after_tool_intent", 1, Some("call_0_0"), [0, 1, 1, 1]),
    case("after_tool_intent", 2, None, ONCE_EACH),
    case("after_tool_intent", 3, None, ONCE_EACH),
    case("after_tool_intent", 4, Some("call_1_1"), [1, 1, 1, 0]),
    case("after_tool_effect", 1, Some("call_0_0"), ONCE_EACH),
    case("after_tool_effect", 2, None, [1, 2, 1, 1]),
    case("after_tool_effect", 3, None, [1, 1, 2, 1]),
    case("after_tool_effect", 4, Some("call_1_1"), ONCE_EACH),
    // A journaled outcome is reused.
    case("after_tool_outcome", 1, None, ONCE_EACH),
    case("after_tool_outcome", 2, None, ONCE_EACH),
    case("after_tool_outcome", 3, None, ONCE_EACH),
    // The commit rolls back. An `idem` last call's outcome rode in it, so the call
    // runs again; a `once` call's outcome was journaled before, so it is reused.
    case("inside_commit", 1, None, [1, 2, 1, 1]),
    case("inside_commit", 2, None, ONCE_EACH),
    case("inside_commit", 3, None, ONCE_EACH),
    case("after_commit", 1, None, ONCE_EACH),
    case("after_commit", 2, None, ONCE_EACH),
    case("after_commit", 3, None, ONCE_EACH),
];

/// The table pins the order a step reaches its points in, so this project runs a
/// turn's calls one by one (`max_parallel_calls = 1`); crashes in the middle of calls
/// running together are in `parallel.rs`.
fn one_by_one(turns: &[&[&str]], db: &Db) -> Project {
    let p = project_on(turns, db);
    p.write(
        "tools.toml",
        &format!(
            "[policy]\nmax_parallel_calls = 1\n{}",
            crate::exactly_once::TOOLS
        ),
    );
    p
}

fn start_crashing_at(p: &Project, spec: &str) -> crate::common::Run {
    run(
        p,
        &["start", "task.md", "--json"],
        &[("AGENTRUN_CRASH_AT", spec)],
    )
}

/// The uninterrupted run every crashed one is compared with.
fn reference(db: &Db) -> Value {
    let p = one_by_one(TURNS, db);
    let v = run(&p, &["start", "task.md", "--json"], &[])
        .expect_code(0)
        .json();
    assert_eq!(
        (v["status"].as_str(), v["steps"].as_u64()),
        (Some("completed"), Some(3))
    );
    let seen = observed(&p);
    assert_eq!(turns_requested(&seen), [0, 1, 2]);
    assert!(effect_counts(&seen).values().all(|n| *n == 1), "{seen:?}");
    p.show(v["run_id"].as_str().expect("run_id"))
}

fn crash_and_resume(db: &Db, want: &Value, c: &Case) {
    let what = format!("{}:{}", c.point, c.nth);
    let p = one_by_one(TURNS, db);
    let crashed = start_crashing_at(&p, &what);
    assert_eq!(
        crashed.code, -1,
        "{what}: agentrun should have aborted\n{crashed}"
    );
    assert!(
        crashed
            .stderr
            .contains(&format!("crash point {} reached", c.point)),
        "{what}\n{crashed}"
    );
    let id = p.only_run();
    let resumed = run(&p, &["resume", &id, "--json"], &[]);
    let v = resumed.expect_code(0).json();
    assert_eq!(v["status"], "completed", "{what}");
    let show = p.show(&id);
    let seen = observed(&p);

    let unknown = check_transcript(want, &show).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        unknown,
        c.unknown.into_iter().collect::<Vec<_>>(),
        "{what}: unknown calls"
    );
    check_one_result_per_call(&show).unwrap_or_else(|e| panic!("{what}: {e}"));
    let effects = effect_counts(&seen);
    let got: Vec<usize> = CALLS
        .iter()
        .map(|id| effects.get(*id).copied().unwrap_or(0))
        .collect();
    assert_eq!(got, c.effects, "{what}: side effects of {CALLS:?}");
    check_effects(&show, &effects).unwrap_or_else(|e| panic!("{what}: {e}"));
    // Every crash point comes after the step's response is stored, so no turn is
    // ever asked for twice.
    assert_eq!(turns_requested(&seen), [0, 1, 2], "{what}: model requests");
    check_no_stored_turn_requested_again(&seen).unwrap_or_else(|e| panic!("{what}: {e}"));
}

#[test]
fn a_crash_at_every_point_resumes_to_the_uninterrupted_run_with_no_effect_repeated() {
    every_crash_point(&Db::Sqlite);
}

/// The crash-point suite on a backend (`tests/it/pg.rs` runs it on PostgreSQL).
pub fn every_crash_point(db: &Db) {
    let want = reference(db);
    // Split over two threads: each case is three or four short processes.
    let (a, b) = CASES.split_at(CASES.len() / 2);
    std::thread::scope(|s| {
        let want = &want;
        s.spawn(move || a.iter().for_each(|c| crash_and_resume(db, want, c)));
        b.iter().for_each(|c| crash_and_resume(db, want, c));
    });
}

#[test]
fn the_table_covers_every_hit_of_every_crash_point() {
    let mut points: Vec<&str> = CASES.iter().map(|c| c.point).collect();
    points.dedup();
    assert_eq!(
        points,
        agentrun::fault::POINTS,
        "a crash point without cases"
    );
    for point in agentrun::fault::POINTS {
        let hits = CASES.iter().filter(|c| c.point == *point).count() as u32;
        let nth: Vec<u32> = CASES
            .iter()
            .filter(|c| c.point == *point)
            .map(|c| c.nth)
            .collect();
        assert_eq!(nth, (1..=hits).collect::<Vec<_>>(), "{point}");
        // One hit past the table the run must finish without crashing.
        let p = one_by_one(TURNS, &Db::Sqlite);
        let r = start_crashing_at(&p, &format!("{point}:{}", hits + 1));
        assert_eq!(r.code, 0, "{point} is reached more than {hits} times\n{r}");
    }
}

/// The default `on_unknown` (escalate): a person is asked what happened, and the call is
/// not re-run (docs/ARCHITECTURE.md §5, §6).
#[test]
fn an_unknown_outcome_escalates_to_a_person_and_their_reply_is_the_result() {
    let p = project(&[&["once_escalate"]]);
    let crashed = start_crashing_at(&p, "after_tool_effect:1");
    assert_eq!(crashed.code, -1, "{crashed}");
    let id = p.only_run();

    let paused = run(&p, &["resume", &id, "--json"], &[]);
    let v = paused.expect_code(3).json();
    assert_eq!(v["status"], "escalated");
    let esc_id = v["escalation_id"]
        .as_str()
        .expect("escalation_id")
        .to_string();
    let list = p
        .run(&["escalations", "list", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list[0]["kind"], "outcome_unknown");
    assert_eq!(list[0]["run_id"], id.as_str());
    let show = p.show(&id);
    assert_eq!(show["status"], "escalated");
    assert_eq!(
        effect_counts(&observed(&p)).get("call_0_0"),
        Some(&1),
        "not re-run"
    );

    p.run(&[
        "escalations",
        "resolve",
        &esc_id,
        "--reply",
        "it went through",
    ])
    .expect_code(0);
    let done = run(&p, &["resume", &id, "--json"], &[])
        .expect_code(0)
        .json();
    assert_eq!(done["status"], "completed");
    let show = p.show(&id);
    check_one_result_per_call(&show).unwrap_or_else(|e| panic!("{e}"));
    let result = show["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("a tool message")["content"][0]
        .clone();
    assert_eq!(result["call_id"], "call_0_0");
    assert!(
        result["content"].to_string().contains("it went through"),
        "{result}"
    );
    assert_eq!(
        effect_counts(&observed(&p)).get("call_0_0"),
        Some(&1),
        "still once"
    );
    assert_eq!(turns_requested(&observed(&p)), [0, 1]);
}

//! Operators in control (issue 21), through the real binary on real SQLite (and on
//! PostgreSQL through `tests/it/pg.rs`): `runs cancel` from a second process stops a
//! run busy in a 30 s tool within a second and kills the tool's process group; a run
//! held by a worker is cancelled the same way; a queued run cancelled is never
//! claimed; a waiting run's escalations are closed; a cancelled run is final; the
//! time budget stops a run in the middle of a slow model request; and kill -9 at each
//! crash point of a cancel neither loses the cancel nor repeats an effect.

use crate::common::{Db, Project, Run};
use serde_json::{Value, json};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// `slow` (not idempotent) logs its call id to `effects.log`, writes its pid and a
/// background child's pid to `pids`, then waits 30 s (its timeout is longer, so on a
/// loaded machine only a stop ends it); `once` only logs.
const TOOLS: &str = r#"
[tools.slow]
description = "slow"
input_schema = { type = "object" }
command = ["sh", "slow.sh"]
timeout = "60s"

[tools.once]
description = "once"
input_schema = { type = "object" }
command = ["sh", "once.sh"]

[tools.send]
description = "send"
input_schema = { type = "object" }
command = ["sh", "once.sh"]
approval = "always"
"#;

fn project(db: &Db, turns: Value) -> Project {
    let p = Project::on(db);
    p.script(
        "slow.sh",
        "#!/bin/sh\ncat > /dev/null\necho \"$AGENTRUN_CALL_ID\" >> effects.log\n\
         sleep 30 &\necho $$ $! > pids.tmp && mv pids.tmp pids\nsleep 30\necho '\"slept\"'\n",
    );
    p.script(
        "once.sh",
        "#!/bin/sh\ncat > /dev/null\necho \"$AGENTRUN_CALL_ID\" >> effects.log\necho '\"done\"'\n",
    );
    p.write("tools.toml", TOOLS);
    p.model_script(turns);
    p.task("max_steps = 10", "Operate.");
    p
}

fn slow_then_answer() -> Value {
    json!([{"tool_calls": [{"name": "slow", "args": {}}]}, {"text": "finished"}])
}

fn spawn(p: &Project, args: &[&str], env: &[(&str, &str)]) -> Child {
    let mut c = p.command(args);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("spawn agentrun")
}

fn finish(child: Child) -> Run {
    Run::from_output(child.wait_with_output().expect("wait"))
}

/// Polls `what` until it holds, for at most 30 s.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pids the slow tool wrote (itself and its background child), once it has.
fn tool_pids(p: &Project) -> Vec<i32> {
    let file = p.path().join("pids");
    until("the slow tool to start", || file.exists());
    std::fs::read_to_string(file)
        .expect("pids")
        .split_whitespace()
        .map(|s| s.parse().expect("pid"))
        .collect()
}

/// Whether a process is gone (or only a zombie waiting to be reaped).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn effects(p: &Project) -> Vec<String> {
    std::fs::read_to_string(p.path().join("effects.log"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn status(p: &Project, id: &str) -> String {
    p.show(id)["status"].as_str().unwrap_or("").to_string()
}

fn only_run_when_listed(p: &Project) -> String {
    let mut id = String::new();
    until("the run to be listed", || {
        let list = p.run(&["runs", "list", "--json"]).json();
        match list.as_array().and_then(|a| a.first()) {
            Some(r) => {
                id = r["id"].as_str().unwrap_or("").to_string();
                true
            }
            None => false,
        }
    });
    id
}

fn cancel(p: &Project, id: &str) -> Run {
    p.run(&[
        "runs",
        "cancel",
        id,
        "--reason",
        "wrong customer",
        "--by",
        "ana",
    ])
}

fn submit(p: &Project) -> String {
    let v = p
        .run(&["submit", "task.md", "--json"])
        .expect_code(0)
        .json();
    v["run_id"].as_str().expect("run_id").to_string()
}

fn worker(p: &Project, name: &str, extra: &[&str]) -> Child {
    let mut args = vec![
        "worker",
        "--name",
        name,
        "--lease-ttl",
        "1s",
        "--poll",
        "20ms",
    ];
    args.extend_from_slice(extra);
    spawn(p, &args, &[])
}

/// Asserts the run is cancelled by ana for "wrong customer", for good.
fn assert_cancelled(p: &Project, id: &str) {
    let v = p.show(id);
    assert_eq!(v["status"], "cancelled", "{v}");
    assert_eq!(v["cancelled"]["by"], "ana", "{v}");
    assert_eq!(v["cancelled"]["reason"], "wrong customer", "{v}");
    assert!(v["cancelled"]["at"].is_string(), "{v}");
    let r = p.run(&["resume", id]);
    r.expect_code(2);
    assert!(
        r.stderr.contains(&format!("agentrun runs fork {id}")),
        "{r}"
    );
}

pub fn cancel_stops_a_run_busy_in_a_slow_tool(db: &Db) {
    let p = project(db, slow_then_answer());
    let holder = spawn(&p, &["start", "task.md", "--json"], &[]);
    let pids = tool_pids(&p);
    let id = only_run_when_listed(&p);
    let asked = Instant::now();
    let r = cancel(&p, &id);
    let took = asked.elapsed();
    r.expect_code(0);
    assert!(
        r.stderr.contains("cancelled (its holder stopped it)"),
        "{r}"
    );
    // The holder stopped the run within a second of the request (the stored times);
    // the command's own start and exit on a loaded machine are bounded apart.
    let stopped_after = p.show(&id)["cancelled"]["stopped_after_ms"].as_i64();
    assert!(
        stopped_after.is_some_and(|ms| ms < 1000),
        "the holder took {stopped_after:?} ms"
    );
    assert!(took < Duration::from_secs(5), "cancel took {took:?}\n{r}");
    let out = finish(holder);
    out.expect_code(5);
    let v = out.json();
    assert_eq!(
        (v["status"].as_str(), v["reason"].as_str()),
        (Some("cancelled"), Some("cancelled by ana: wrong customer")),
        "{out}"
    );
    // The tool and the child it left in the background went with the run's group.
    until("the tool's process group to be gone", || {
        pids.iter().all(|&pid| gone(pid))
    });
    assert_eq!(effects(&p).len(), 1);
    assert_cancelled(&p, &id);
    eprintln!(
        "cancel of a run busy in a 30 s tool: stopped {stopped_after:?} ms after the request; \
         `runs cancel` returned after {took:?}"
    );
}

pub fn cancel_reaches_a_run_held_by_a_worker(db: &Db) {
    let p = project(db, slow_then_answer());
    let id = submit(&p);
    let w = worker(&p, "w-a", &["--concurrency", "1"]);
    let pids = tool_pids(&p);
    let r = cancel(&p, &id);
    r.expect_code(0);
    until("the tool's process group to be gone", || {
        pids.iter().all(|&pid| gone(pid))
    });
    // The worker goes on taking runs; stop it.
    // SAFETY: kill(2) on the child we spawned.
    unsafe { libc::kill(w.id() as i32, libc::SIGTERM) };
    let out = finish(w);
    out.expect_code(0);
    assert!(
        out.stderr
            .contains(&format!("run {id} cancelled after 0 steps")),
        "{out}"
    );
    assert_cancelled(&p, &id);
    assert_eq!(effects(&p).len(), 1);
}

pub fn a_cancelled_queued_run_is_never_claimed(db: &Db) {
    let p = project(
        db,
        json!([{"tool_calls": [{"name": "once", "args": {}}]}, {"text": "finished"}]),
    );
    let first = submit(&p);
    let second = submit(&p);
    let r = cancel(&p, &first);
    r.expect_code(0);
    assert!(r.stderr.contains(&format!("run {first} cancelled")), "{r}");
    assert_eq!(status(&p, &first), "cancelled");
    finish(worker(&p, "w-a", &["--until-idle"])).expect_code(0);
    assert_eq!(status(&p, &second), "completed");
    assert_cancelled(&p, &first);
    // One run's effect: the cancelled run's tool never ran.
    assert_eq!(effects(&p).len(), 1);
    let list = p
        .run(&["runs", "list", "--status", "cancelled", "--json"])
        .json();
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
}

/// A cancelled run reads no more messages and is never resumed, but it can be forked
/// (issue 21): the fork, started at once, copies step 1 (its effect not repeated) and
/// is driven through the one lifecycle — so a cancel from a second process stops it
/// busy in its tool within a second, as it stops any run.
pub fn a_cancelled_run_is_forked_and_its_fork_can_be_cancelled(db: &Db) {
    let p = project(
        db,
        json!([
            {"tool_calls": [{"name": "once", "args": {}}]},
            {"tool_calls": [{"name": "slow", "args": {}}]},
            {"text": "finished"}
        ]),
    );
    let holder = spawn(&p, &["start", "task.md", "--json"], &[]);
    tool_pids(&p);
    let original = only_run_when_listed(&p);
    cancel(&p, &original).expect_code(0);
    finish(holder).expect_code(5);
    let r = p.run(&["runs", "send", &original, "Try again."]);
    r.expect_code(2);
    assert!(
        r.stderr
            .contains("is cancelled: it will read no more messages"),
        "{r}"
    );
    assert_eq!(p.show(&original)["sent_messages"], json!([]));

    std::fs::remove_file(p.path().join("pids")).expect("rm pids");
    // The cancel stopped `slow` after it started: its outcome is unknown, so the fork
    // carries it and asks a person first (docs/security.md, Forks) instead of running
    // it again on its own.
    let forked = p.run(&["runs", "fork", &original, "--json"]);
    let v = forked.expect_code(3).json();
    let fork = v["run_id"].as_str().expect("the fork").to_string();
    assert_eq!(v["status"], "escalated", "{v}");
    assert_eq!(
        p.show(&fork)["forked_from"],
        json!({"run_id": original, "step": 1})
    );
    let list = p.run(&["escalations", "list", "--json"]).json();
    let esc = list
        .as_array()
        .expect("escalations")
        .iter()
        .find(|e| e["run_id"] == fork.as_str() && e["kind"] == "outcome_unknown")
        .and_then(|e| e["id"].as_str())
        .expect("the fork's outcome_unknown escalation")
        .to_string();
    p.run(&["escalations", "resolve", &esc, "--approve"])
        .expect_code(0);
    let forker = spawn(&p, &["resume", &fork, "--json"], &[]);
    let pids = tool_pids(&p);
    cancel(&p, &fork).expect_code(0);
    let stopped_after = p.show(&fork)["cancelled"]["stopped_after_ms"].as_i64();
    assert!(
        stopped_after.is_some_and(|ms| ms < 1000),
        "the fork's holder took {stopped_after:?} ms"
    );
    let out = finish(forker);
    out.expect_code(5);
    assert_eq!(out.json()["status"], "cancelled", "{out}");
    until("the fork's tool group to be gone", || {
        pids.iter().all(|&pid| gone(pid))
    });
    assert_cancelled(&p, &fork);
    // Step 1's call ran once (the original's); step 2's slow call twice, the second
    // time (a person said to run it) under the original's call id.
    let calls: Vec<(String, String)> = effects(&p)
        .iter()
        .map(|key| {
            let run = key.split(':').next().unwrap_or("").to_string();
            let call = key.rsplit(':').next().unwrap_or("").to_string();
            (run, call)
        })
        .collect();
    assert_eq!(
        calls,
        [
            (original.clone(), "call_0_0".to_string()),
            (original.clone(), "call_1_0".to_string()),
            (original.clone(), "call_1_0".to_string()),
        ]
    );
}

#[test]
fn a_cancelled_run_refuses_messages_and_its_fork_runs_through_the_one_lifecycle() {
    a_cancelled_run_is_forked_and_its_fork_can_be_cancelled(&Db::Sqlite);
}

#[test]
fn cancel_of_a_run_busy_in_a_30s_tool_returns_within_a_second_and_kills_its_group() {
    cancel_stops_a_run_busy_in_a_slow_tool(&Db::Sqlite);
}

#[test]
fn cancel_from_a_second_process_stops_a_run_a_worker_holds() {
    cancel_reaches_a_run_held_by_a_worker(&Db::Sqlite);
}

#[test]
fn a_queued_run_cancelled_is_never_claimed_by_a_worker() {
    a_cancelled_queued_run_is_never_claimed(&Db::Sqlite);
}

#[test]
fn cancelling_a_waiting_run_closes_its_escalations_and_it_cannot_be_resolved() {
    let p = project(
        &Db::Sqlite,
        json!([{"tool_calls": [{"name": "send", "args": {}}]}, {"text": "sent"}]),
    );
    let v = p.run(&["start", "task.md", "--json"]).expect_code(3).json();
    let id = v["run_id"].as_str().expect("id").to_string();
    let esc = match &v["escalation_id"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    cancel(&p, &id).expect_code(0);
    assert_cancelled(&p, &id);
    let open = p.run(&["escalations", "list", "--json"]).json();
    assert_eq!(open, json!([]));
    let r = p.run(&["escalations", "resolve", &esc, "--approve"]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("closed when its run was cancelled"),
        "{r}"
    );
    assert!(effects(&p).is_empty());
    // Cancelling again changes nothing; a completed run has nothing to cancel.
    let again = cancel(&p, &id);
    again.expect_code(0);
    assert!(again.stderr.contains("was already cancelled"), "{again}");
}

#[test]
fn a_completed_run_is_not_cancelled_and_an_unknown_id_cancels_nothing() {
    let p = project(&Db::Sqlite, json!([{"text": "finished"}]));
    let v = p.run(&["start", "task.md", "--json"]).expect_code(0).json();
    let id = v["run_id"].as_str().expect("id").to_string();
    let r = p.run(&["runs", "cancel", &id, "--json"]);
    r.expect_code(2);
    assert_eq!(r.json()[0]["status"], "completed", "{r}");
    assert_eq!(status(&p, &id), "completed");
    let queued = submit(&p);
    let r = p.run(&["runs", "cancel", &queued, "nosuchrun"]);
    r.expect_code(2);
    assert!(r.stderr.contains("no run `nosuchrun`"), "{r}");
    assert_eq!(status(&p, &queued), "queued", "a typo cancels nothing");
}

#[test]
fn cancelled_runs_show_who_when_and_why_in_the_list_and_the_run() {
    let p = project(&Db::Sqlite, slow_then_answer());
    let id = submit(&p);
    cancel(&p, &id).expect_code(0);
    let list = p.run(&["runs", "list"]).expect_code(0).stdout.clone();
    assert!(list.contains("cancelled"), "{list}");
    let show = p.run(&["runs", "show", &id]).expect_code(0).stdout.clone();
    assert!(show.contains("cancelled by ana: wrong customer"), "{show}");
}

/// Kill -9 at each crash point of a cancel (`agentrun::fault::CANCEL_POINTS`): the
/// cancel is never lost (a second `runs cancel`, or the first one's own wait, finishes
/// it), no effect is repeated, and the run ends cancelled for good.
pub fn every_cancel_crash_point(db: &Db) {
    for point in agentrun::fault::CANCEL_POINTS {
        match *point {
            "inside_cancel" => crash_inside_cancel(db),
            "after_cancel_requested" => crash_after_cancel_requested(db),
            "cancel_seen" => crash_in_the_holder_after_it_saw_the_cancel(db),
            other => panic!("no case for the cancel crash point {other}"),
        }
    }
}

fn crash(point: &str) -> [(&str, &str); 1] {
    [("AGENTRUN_CRASH_AT", point)]
}

/// The transaction rolls back: the queued run is untouched, and cancelling again works.
fn crash_inside_cancel(db: &Db) {
    let p = project(db, slow_then_answer());
    let id = submit(&p);
    let r = p.run_env(
        &[
            "runs",
            "cancel",
            &id,
            "--by",
            "ana",
            "--reason",
            "wrong customer",
        ],
        &crash("inside_cancel"),
    );
    assert_ne!(r.code, 0, "{r}");
    assert!(
        r.stderr.contains("crash point inside_cancel reached"),
        "{r}"
    );
    let v = p.show(&id);
    assert_eq!(
        (v["status"].as_str(), &v["cancelled"]),
        (Some("queued"), &Value::Null)
    );
    cancel(&p, &id).expect_code(0);
    finish(worker(&p, "w-a", &["--until-idle"])).expect_code(0);
    assert_cancelled(&p, &id);
    assert!(effects(&p).is_empty());
}

/// `runs cancel` dies after asking: the holder still stops the run.
fn crash_after_cancel_requested(db: &Db) {
    let p = project(db, slow_then_answer());
    let holder = spawn(&p, &["start", "task.md"], &[]);
    let pids = tool_pids(&p);
    let id = only_run_when_listed(&p);
    let r = p.run_env(
        &[
            "runs",
            "cancel",
            &id,
            "--by",
            "ana",
            "--reason",
            "wrong customer",
        ],
        &crash("after_cancel_requested"),
    );
    assert!(
        r.stderr.contains("crash point after_cancel_requested"),
        "{r}"
    );
    finish(holder).expect_code(5);
    until("the tool's group to be gone", || {
        pids.iter().all(|&p| gone(p))
    });
    assert_cancelled(&p, &id);
    assert_eq!(effects(&p).len(), 1);
}

/// The holder dies after reading the request (its tool's group survives it, as after
/// any kill -9): `runs cancel` finds it dead and cancels the run itself.
fn crash_in_the_holder_after_it_saw_the_cancel(db: &Db) {
    let p = project(db, slow_then_answer());
    let holder = spawn(&p, &["start", "task.md"], &crash("cancel_seen"));
    let pids = tool_pids(&p);
    let id = only_run_when_listed(&p);
    // Reaped as soon as it dies, as a shell would: a zombie's pid still exists.
    let reaper = std::thread::spawn(move || finish(holder));
    let r = cancel(&p, &id);
    let out = reaper.join().expect("holder");
    assert!(
        out.stderr.contains("crash point cancel_seen reached"),
        "{out}"
    );
    r.expect_code(0);
    assert_cancelled(&p, &id);
    // The holder's abort left the tool running: end it (it would have no one to
    // report to), and check it was started once.
    for pid in pids {
        // SAFETY: kill(2) on processes this test's tool started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert_eq!(effects(&p).len(), 1);
    assert!(p.run(&["resume", &id]).code == 2);
}

#[test]
fn kill_9_at_every_crash_point_of_a_cancel_loses_and_repeats_nothing() {
    every_cancel_crash_point(&Db::Sqlite);
}

/// Issue 22: a 2 s time budget held against a model turn of 20 s (a real local server
/// that answers late): the request is dropped at the deadline, nothing of it stored.
#[test]
fn the_time_budget_drops_a_model_request_in_flight_at_its_deadline() {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let rt = crate::common::runtime();
    let server = rt.block_on(MockServer::start());
    rt.block_on(
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({"choices": [{"message": {"content": "late"},
                        "finish_reason": "stop"}]}))
                    .set_delay(Duration::from_secs(20)),
            )
            .mount(&server),
    );
    let p = Project::new();
    p.write("tools.toml", "");
    p.write(
        "task.md",
        "+++\nmodel = \"openai:m\"\nstream = false\nmax_duration = \"2s\"\n+++\nTake your time.\n",
    );
    let started = Instant::now();
    let mut cmd = p.command(&["start", "task.md", "--json"]);
    cmd.env_remove("OPENAI_API_KEY")
        .env("OPENAI_BASE_URL", format!("{}/v1", server.uri()));
    let r = Run::from_output(cmd.output().expect("spawn"));
    let took = started.elapsed();
    let v = r.expect_code(4).json();
    assert_eq!(v["status"], "budget_exhausted");
    let reason = v["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("time budget spent: 2s") && reason.ends_with(" of 2s used"),
        "{r}"
    );
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}: the request was waited for"
    );
    let show = p.show(v["run_id"].as_str().expect("id"));
    assert_eq!(
        (show["steps"].as_u64(), show["tokens"]["output"].as_u64()),
        (Some(0), Some(0))
    );
    eprintln!("2 s time budget against a 20 s model turn: stopped after {took:?}");
}

/// The same budget against a tool that would run 30 s: its process group is killed at
/// the deadline, and the run stops as budget-stopped (resumable with a new budget).
#[test]
fn the_time_budget_kills_a_tool_in_flight_at_its_deadline() {
    let p = project(&Db::Sqlite, slow_then_answer());
    p.task("max_duration = \"2s\"", "Operate.");
    let started = Instant::now();
    let holder = spawn(&p, &["start", "task.md", "--json"], &[]);
    let pids = tool_pids(&p);
    let out = finish(holder);
    let took = started.elapsed();
    let v = out.expect_code(4).json();
    assert_eq!(v["status"], "budget_exhausted");
    let reason = v["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("time budget spent: 2s")
            && reason.contains(" of 2s used while `slow` was running"),
        "{out}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    until("the tool's group to be gone", || {
        pids.iter().all(|&p| gone(p))
    });
    assert_eq!(effects(&p).len(), 1);
}

//! The run queue and its workers through the real binary (issue 17), on SQLite here
//! and on PostgreSQL through `tests/it/pg.rs`: submitted runs are taken and finished
//! by workers; a worker killed with -9 is taken over after the lease TTL (short here,
//! `--lease-ttl`) from the last committed step, with no non-idempotent effect
//! repeated; SIGTERM hands a run back to the queue; resolving an escalation re-queues
//! the run. Every wait polls observable state (files a tool writes, `runs list`)
//! against a deadline; nothing sleeps to wait.

use crate::common::{Db, Project, Run};
use serde_json::{Value, json};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// `once` (not idempotent) logs its call id to `effects.log`; `slow` (idempotent)
/// writes `slow.started`, then waits while `hold` exists.
const TOOLS: &str = r#"
[tools.once]
description = "once"
input_schema = { type = "object" }
command = ["sh", "once.sh"]

[tools.slow]
description = "slow"
input_schema = { type = "object" }
command = ["sh", "slow.sh"]
idempotent = true

[tools.send]
description = "send"
input_schema = { type = "object" }
command = ["sh", "once.sh"]
approval = "always"
"#;

fn project(db: &Db, turns: Value) -> Project {
    let p = Project::on(db);
    p.script(
        "once.sh",
        "#!/bin/sh\ncat > /dev/null\necho \"$AGENTRUN_CALL_ID\" >> effects.log\necho '\"done\"'\n",
    );
    p.script(
        "slow.sh",
        "#!/bin/sh\ncat > /dev/null\ntouch slow.started\nwhile [ -f hold ]; do sleep 0.02; done\necho '\"ok\"'\n",
    );
    p.write("tools.toml", TOOLS);
    p.model_script(turns);
    p.task("max_steps = 10", "Queue me.");
    p
}

fn submit(p: &Project) -> String {
    let v = p
        .run(&["submit", "task.md", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(v["status"], "queued");
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
    p.command(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn worker")
}

fn finish(child: Child) -> Run {
    Run::from_output(child.wait_with_output().expect("worker output"))
}

/// Polls `what` until it holds, for at most 60 s.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn status(p: &Project, id: &str) -> String {
    p.show(id)["status"].as_str().unwrap_or("").to_string()
}

fn effects(p: &Project) -> Vec<String> {
    std::fs::read_to_string(p.path().join("effects.log"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn list(p: &Project) -> Vec<Value> {
    p.run(&["runs", "list", "--json"])
        .expect_code(0)
        .json()
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn one_step_turns() -> Value {
    json!([{"tool_calls": [{"name": "once", "args": {}}]}, {"text": "finished"}])
}

pub fn workers_drain_the_queue(db: &Db) {
    let p = project(db, one_step_turns());
    let ids: Vec<String> = (0..6).map(|_| submit(&p)).collect();
    assert!(list(&p).iter().all(|r| r["status"] == "queued"));
    let text = p.run(&["runs", "list"]).expect_code(0).stdout.clone();
    assert_eq!(text.matches("queued").count(), 6, "{text}");
    let a = worker(&p, "w-a", &["--concurrency", "3", "--until-idle"]);
    let b = worker(&p, "w-b", &["--concurrency", "2", "--until-idle"]);
    finish(a).expect_code(0);
    finish(b).expect_code(0);
    for id in &ids {
        let v = p.show(id);
        assert_eq!(
            (v["status"].as_str(), v["answer"].as_str()),
            (Some("completed"), Some("finished")),
            "{id}"
        );
    }
    // Six runs, one non-idempotent call each, each exactly once.
    let mut seen = effects(&p);
    seen.sort();
    seen.dedup();
    assert_eq!((effects(&p).len(), seen.len()), (6, 6), "{:?}", effects(&p));
}

pub fn a_killed_worker_is_taken_over_without_repeating_effects(db: &Db) {
    // Step 1: `once` (its effect must not repeat). Step 2: `slow`, where the worker
    // is killed. Step 3: the answer.
    let p = project(
        db,
        json!([
            {"tool_calls": [{"name": "once", "args": {}}]},
            {"tool_calls": [{"name": "slow", "args": {}}]},
            {"text": "survived"}
        ]),
    );
    p.write("hold", "");
    let id = submit(&p);
    let mut a = worker(&p, "w-a", &["--concurrency", "1"]);
    until("the slow tool to start", || {
        p.path().join("slow.started").exists()
    });
    let held = list(&p);
    assert_eq!(held[0]["worker"], "w-a", "{held:?}");
    let text = p.run(&["runs", "list"]).expect_code(0).stdout.clone();
    assert!(text.contains("running (w-a)"), "{text}");
    a.kill().expect("kill -9 the worker");
    let killed = Instant::now();
    a.wait().expect("reap");
    std::fs::remove_file(p.path().join("slow.started")).expect("rm");
    std::fs::remove_file(p.path().join("hold")).expect("rm hold");
    let b = worker(&p, "w-b", &["--concurrency", "1", "--until-idle"]);
    until("the takeover", || {
        p.path().join("slow.started").exists() || status(&p, &id) == "completed"
    });
    let takeover = killed.elapsed();
    let out = finish(b);
    out.expect_code(0);
    let v = p.show(&id);
    assert_eq!(
        (v["status"].as_str(), v["answer"].as_str()),
        (Some("completed"), Some("survived")),
        "{out}"
    );
    assert_eq!(effects(&p).len(), 1, "the non-idempotent call ran once");
    // Step 1 was committed before the kill: it is not redone, and step 2 has one result.
    let results = crate::common::tool_results(&v);
    assert_eq!(results.len(), 2, "{results:?}");
    eprintln!("takeover after kill -9 with a 1 s lease TTL: {takeover:?}");
}

pub fn sigterm_hands_the_run_back_to_the_queue(db: &Db) {
    // Step 1 blocks in `slow` while `hold` exists; step 2 calls `once`, which is not
    // idempotent; then the answer. The stop is an event of the run's machine (issue
    // 21): the step in progress finishes within the grace and the run goes back to the
    // queue at that boundary, before step 2 begins — so `once` runs exactly once, by
    // the second worker.
    let p = project(
        db,
        json!([
            {"tool_calls": [{"name": "slow", "args": {}}]},
            {"tool_calls": [{"name": "once", "args": {}}]},
            {"text": "later"}
        ]),
    );
    p.write("hold", "");
    let id = submit(&p);
    let mut a = worker(&p, "w-a", &["--concurrency", "2", "--grace", "60s"]);
    until("the slow tool to start", || {
        p.path().join("slow.started").exists()
    });
    // SAFETY: sending SIGTERM to our own child.
    unsafe { libc::kill(a.id() as i32, libc::SIGTERM) };
    // Only once the worker has taken the stop in does the step finish.
    let (told, stopping) = std::sync::mpsc::channel();
    let stderr = a.stderr.take().expect("stderr");
    let log = std::thread::spawn(move || read_stderr_telling(stderr, "worker w-a stopping", told));
    stopping
        .recv_timeout(Duration::from_secs(60))
        .expect("the worker says it is stopping");
    std::fs::remove_file(p.path().join("hold")).expect("rm hold");
    let status_a = a.wait().expect("worker exit");
    let said = log.join().expect("stderr reader");
    assert_eq!(status_a.code(), Some(0), "{said}");
    assert!(said.contains("handed back to the queue"), "{said}");
    let v = p.show(&id);
    assert_eq!(v["status"], "queued", "{said}");
    assert_eq!(v["steps"], 1, "the slow step was finished: {v}");
    assert!(effects(&p).is_empty(), "step 2 never began under w-a");
    finish(worker(&p, "w-b", &["--until-idle"])).expect_code(0);
    let v = p.show(&id);
    assert_eq!(
        (v["status"].as_str(), v["answer"].as_str()),
        (Some("completed"), Some("later"))
    );
    assert_eq!(effects(&p).len(), 1, "the non-idempotent call ran once");
}

/// Reads a child's stderr to its end, sending on `told` once a line holds `marker`.
fn read_stderr_telling(
    stderr: std::process::ChildStderr,
    marker: &str,
    told: std::sync::mpsc::Sender<()>,
) -> String {
    use std::io::BufRead;
    let mut seen = String::new();
    for line in std::io::BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
    {
        if line.contains(marker) {
            let _ = told.send(());
        }
        seen.push_str(&line);
        seen.push('\n');
    }
    seen
}

pub fn resolving_an_escalation_requeues_the_run(db: &Db) {
    let p = project(
        db,
        json!([{"tool_calls": [{"name": "send", "args": {}}]}, {"text": "sent"}]),
    );
    let id = submit(&p);
    finish(worker(&p, "w-a", &["--until-idle"])).expect_code(0);
    assert_eq!(status(&p, &id), "awaiting_approval");
    assert!(effects(&p).is_empty());
    let esc = p
        .run(&["escalations", "list", "--json"])
        .expect_code(0)
        .json();
    let esc = match &esc[0]["id"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let r = p.run(&["escalations", "resolve", &esc, "--approve"]);
    r.expect_code(0);
    assert!(r.stderr.contains("queued again"), "{r}");
    assert_eq!(status(&p, &id), "queued");
    finish(worker(&p, "w-b", &["--until-idle"])).expect_code(0);
    assert_eq!(status(&p, &id), "completed");
    assert_eq!(effects(&p).len(), 1);
}

#[test]
fn submitted_runs_are_drained_by_two_workers() {
    workers_drain_the_queue(&Db::Sqlite);
}

#[test]
fn a_worker_killed_with_9_is_taken_over_after_the_ttl_without_repeating_effects() {
    a_killed_worker_is_taken_over_without_repeating_effects(&Db::Sqlite);
}

#[test]
fn sigterm_makes_a_worker_hand_its_runs_back() {
    sigterm_hands_the_run_back_to_the_queue(&Db::Sqlite);
}

#[test]
fn resolving_an_escalation_puts_a_submitted_run_back_in_the_queue() {
    resolving_an_escalation_requeues_the_run(&Db::Sqlite);
}

/// A worker's runs share a few threads and database connections, and one pulse
/// (issue 23): 20 runs in flight in `worker --concurrency 300` (more than the old
/// cap of 256) run on at most 8 slot threads and the main one, with as many handles
/// on the database file — not a thread and a connection per run. The pulse still
/// keeps every lease alive: the runs held for two TTLs are not taken over by a second
/// worker, and each tool ran once.
#[test]
fn twenty_runs_in_flight_share_a_few_threads_and_connections() {
    let p = project(
        &Db::Sqlite,
        json!([{"tool_calls": [{"name": "wait", "args": {}}]}, {"text": "done"}]),
    );
    p.script(
        "wait.sh",
        "#!/bin/sh\ncat > /dev/null\necho \"$AGENTRUN_RUN_ID\" >> effects.log\n\
         touch \"started.$AGENTRUN_RUN_ID\"\nwhile [ -f hold ]; do sleep 0.02; done\necho '\"ok\"'\n",
    );
    p.write(
        "tools.toml",
        "[tools.wait]\ndescription = \"wait\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"wait.sh\"]\nidempotent = true\ntimeout = \"120s\"\n",
    );
    let ids: Vec<String> = (0..20).map(|_| submit(&p)).collect();
    p.write("hold", "");
    // A 3 s TTL: on a loaded test machine a 1 s one can lapse between two beats.
    let slow_ttl = |name: &str, n: &str| {
        let args = [
            "worker",
            "--name",
            name,
            "--lease-ttl",
            "3s",
            "--poll",
            "20ms",
        ];
        p.command(&[&args[..], &["--concurrency", n, "--until-idle"]].concat())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn worker")
    };
    let a = slow_ttl("w-a", "300");
    let started = |p: &Project| {
        std::fs::read_dir(p.path())
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_string_lossy().starts_with("started.")
            })
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while started(&p) < 20 {
        assert!(
            Instant::now() < deadline,
            "only {} runs started",
            started(&p)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let proc_dir = format!("/proc/{}", a.id());
    let threads = std::fs::read_dir(format!("{proc_dir}/task"))
        .unwrap()
        .count();
    let db = std::fs::canonicalize(p.db()).unwrap();
    let db_handles = std::fs::read_dir(format!("{proc_dir}/fd"))
        .unwrap()
        .filter(|e| std::fs::read_link(e.as_ref().unwrap().path()).is_ok_and(|t| t == db))
        .count();
    // 8 slot threads and the main one, plus what may still be alive for a moment on
    // a loaded machine (the start-up delivery of pending notifications with its own
    // handle, an async runtime's blocking helper): a thread and a connection per run
    // would be 21 or more.
    assert!(threads <= 14, "{threads} threads for 20 runs in flight");
    assert!(
        db_handles <= 14,
        "{db_handles} database handles for 20 runs"
    );
    // Two TTLs pass with every run held: a second worker takes none over (it would
    // run that run's tool again).
    let b = slow_ttl("w-b", "4");
    let quiet = Instant::now() + Duration::from_secs(6);
    while Instant::now() < quiet {
        assert_eq!(effects(&p).len(), 20, "a run was taken over");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::remove_file(p.path().join("hold")).unwrap();
    let (a, b) = (finish(a), finish(b));
    a.expect_code(0);
    b.expect_code(0);
    assert!(!b.stderr.contains(" run "), "w-b took a run over: {b}");
    for id in &ids {
        assert_eq!(status(&p, id), "completed");
    }
    let mut ran = effects(&p);
    ran.sort();
    ran.dedup();
    assert_eq!(
        (effects(&p).len(), ran.len()),
        (20, 20),
        "each tool ran once"
    );
}

/// `submit`s started together on a database that does not exist yet: each creates or
/// joins the file, and every one is queued (two of them switching the new file to
/// WAL at once used to fail one with "locked" without waiting).
#[test]
fn submits_started_together_on_a_new_database_all_queue() {
    for round in 0..5 {
        let p = project(&Db::Sqlite, json!([{ "text": "done" }]));
        let children: Vec<Child> = (0..8)
            .map(|_| {
                p.command(&["submit", "task.md", "-q"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn submit")
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().expect("submit");
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let runs = p.run(&["runs", "list", "--json"]).expect_code(0).json();
        assert_eq!(runs.as_array().map(Vec::len), Some(8), "round {round}");
    }
}

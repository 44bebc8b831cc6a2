//! Operators' controls (issue 21): `runs fork` and `runs send`, through the binary on
//! real databases. A fork copies history up to a step and never repeats its effects;
//! a sent message is delivered exactly once, at a step boundary after the step's tool
//! results. Crash points of both are in `fork_send_crash.rs`.

use crate::common::{Db, Project, Run, transcript};
use crate::exactly_once::check_one_result_per_call;
use serde_json::{Value, json};

/// A tool that must not run twice (`once`): it appends its full `AGENTRUN_CALL_ID`
/// (run id, salt, call id) to `effects.log` before answering, so the log shows every
/// time its effect happened and for which run.
const ONCE_TOOL: &str = r#"#!/bin/sh
cat > /dev/null
echo "v1 $AGENTRUN_CALL_ID" >> effects.log
printf '{"done": "%s"}\n' "${AGENTRUN_CALL_ID##*:}"
"#;

const TOOLS: &str = r#"
[tools.once]
description = "A write that must not happen twice"
input_schema = { type = "object" }
command = ["sh", "once.sh"]
on_unknown = "tell_model"
"#;

/// A project whose script calls `once` on each of `calls` turns, then answers `answer`.
pub fn project(db: &Db, calls: usize, answer: &str) -> Project {
    let p = Project::on(db);
    p.script("once.sh", ONCE_TOOL);
    p.write("tools.toml", TOOLS);
    p.write("script.json", &script(calls, answer).to_string());
    p.task("max_steps = 12", "Do the work.");
    p
}

fn script(calls: usize, answer: &str) -> Value {
    let mut turns: Vec<Value> = (0..calls)
        .map(|t| {
            json!({"tool_calls": [{"name": "once", "args": {"turn": t}}],
                   "usage": {"input": 10, "output": 2}})
        })
        .collect();
    turns.push(json!({"text": answer, "usage": {"input": 10, "output": 3}}));
    json!({ "turns": turns })
}

/// Every line of `effects.log`: (tag, run id, call id).
pub fn effects(p: &Project) -> Vec<(String, String, String)> {
    std::fs::read_to_string(p.path().join("effects.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (tag, key) = l.split_once(' ').expect("tag and key");
            let run = key.split(':').next().expect("run id").to_string();
            let call = key.rsplit(':').next().expect("call id").to_string();
            (tag.to_string(), run, call)
        })
        .collect()
}

pub fn start(p: &Project) -> String {
    let v = p.run(&["start", "task.md", "--json"]).expect_code(0).json();
    assert_eq!(v["status"], "completed", "{v}");
    v["run_id"].as_str().expect("run_id").to_string()
}

/// The runs in the database, by id, from `runs list --json`.
pub fn runs(p: &Project) -> Vec<Value> {
    let list = p.run(&["runs", "list", "--json"]).expect_code(0).json();
    list.as_array().expect("array").clone()
}

/// The one run that is not `original`.
pub fn the_fork(p: &Project, original: &str) -> String {
    let others: Vec<String> = runs(p)
        .iter()
        .filter_map(|r| r["id"].as_str())
        .filter(|id| *id != original)
        .map(str::to_string)
        .collect();
    assert_eq!(others.len(), 1, "one fork expected: {others:?}");
    others[0].clone()
}

fn calls_of(list: &[(String, String, String)], run: &str) -> Vec<String> {
    list.iter()
        .filter(|(_, r, _)| r == run)
        .map(|(_, _, c)| c.clone())
        .collect()
}

/// The fork's transcript up to the fork point is the original's, its later calls are
/// its own, each paired with one result, and no effect of a copied step happened again.
pub fn check_fork(p: &Project, original: &str, fork: &str, at: u64, calls: usize) {
    let (want, got) = (p.show(original), p.show(fork));
    assert_eq!(got["status"], "completed", "{got}");
    assert_eq!(got["forked_from"], json!({"run_id": original, "step": at}));
    let copied: Vec<_> = transcript(&want)
        .into_iter()
        .filter(|(step, _, _)| *step <= at)
        .collect();
    assert_eq!(transcript(&got)[..copied.len()], copied[..]);
    check_one_result_per_call(&got).unwrap_or_else(|e| panic!("fork: {e}"));
    let log = effects(p);
    let all: Vec<String> = (0..calls).map(|t| format!("call_{t}_0")).collect();
    assert_eq!(
        calls_of(&log, original),
        all,
        "the original's effects, once each"
    );
    assert_eq!(
        calls_of(&log, fork),
        all[at as usize..],
        "the fork ran only the calls after step {at}, once each, under its own run id"
    );
}

#[test]
fn a_fork_at_step_n_repeats_none_of_the_effects_of_steps_1_to_n() {
    fork_repeats_no_effect(&Db::Sqlite);
}

/// The fork test on a backend (`tests/it/pg.rs` runs it on PostgreSQL).
pub fn fork_repeats_no_effect(db: &Db) {
    let p = project(db, 4, "all done");
    let original = start(&p);
    let before = p.show(&original);
    let r = p.run(&["runs", "fork", &original, "--at-step", "2", "--json"]);
    let v = r.expect_code(0).json();
    assert_eq!(
        (v["status"].as_str(), v["steps"].as_u64()),
        (Some("completed"), Some(5))
    );
    assert!(
        r.stderr.contains(&format!(
            "forked from {original} at step 2 (with the original config)"
        )),
        "{r}"
    );
    let fork = v["run_id"].as_str().expect("run_id").to_string();
    check_fork(&p, &original, &fork, 2, 4);
    // The journal of the copied steps is the original's; later calls are the fork's.
    let journal = p.show(&fork)["tool_calls"]
        .as_array()
        .expect("journal")
        .clone();
    assert_eq!(journal.len(), 4, "{journal:?}");
    assert_eq!(
        journal[..2],
        before["tool_calls"].as_array().expect("journal")[..2]
    );
    // The original is untouched.
    assert_eq!(p.show(&original), before);
    // Shown everywhere: the list, and the export.
    let listed = runs(&p);
    let row = listed
        .iter()
        .find(|r| r["id"] == fork.as_str())
        .expect("listed");
    assert_eq!(row["forked_from"], json!({"run_id": original, "step": 2}));
    let export = p.run(&["runs", "export", &fork]).expect_code(0).json();
    assert_eq!(export["forked_from"]["run_id"], original.as_str());
    let human = p.run(&["runs", "show", &fork]);
    human.expect_code(0);
    assert!(
        human.stdout.contains(&format!("from {original} at step 2")),
        "{human}"
    );
    let table = p.run(&["runs", "list"]);
    table.expect_code(0);
    assert!(
        table.stdout.contains(&format!("[fork of {original}@2]")),
        "{table}"
    );
}

#[test]
fn a_fork_defaults_to_the_last_committed_step_and_can_wait_with_no_start() {
    let p = project(&Db::Sqlite, 2, "all done");
    let original = start(&p);
    let v = p
        .run(&["runs", "fork", &original, "--no-start", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(v["status"], "interrupted");
    assert_eq!(v["forked_from"], json!({"run_id": original, "step": 3}));
    assert_eq!(v["config_replaced"], false);
    let fork = v["run_id"].as_str().expect("run_id").to_string();
    let show = p.show(&fork);
    assert_eq!(
        (show["status"].as_str(), show["steps"].as_u64()),
        (Some("interrupted"), Some(3))
    );
    assert!(
        show["error"]
            .as_str()
            .is_some_and(|e| e.contains("not started")),
        "{show}"
    );
    // Its steps, tokens and answer so far are the original's; nothing ran.
    assert_eq!(show["tokens"], p.show(&original)["tokens"]);
    assert_eq!(effects(&p).len(), 2);
}

#[test]
fn a_fork_with_model_and_tools_runs_with_the_new_config_and_says_so() {
    let p = project(&Db::Sqlite, 1, "first answer");
    let original = start(&p);
    // The replacement: a script that calls `once` once more, then answers otherwise,
    // and a tools.toml whose `once` tags its effects v2.
    p.write("other.json", &script(2, "second answer").to_string());
    // (A tool runs in its tools.toml's folder.)
    p.script(
        "v2/once.sh",
        &ONCE_TOOL.replace(
            "v1 $AGENTRUN_CALL_ID\" >> effects.log",
            "v2 $AGENTRUN_CALL_ID\" >> ../effects.log",
        ),
    );
    // It logs its effects in the project, above its own folder.
    p.write(
        "v2/tools.toml",
        &TOOLS.replace("on_unknown", "writable = [\"..\"]\non_unknown"),
    );
    let r = p.run(&[
        "runs",
        "fork",
        &original,
        "--at-step",
        "1",
        "--model",
        "script:other.json",
        "--tools",
        "v2/tools.toml",
        "--json",
    ]);
    let v = r.expect_code(0).json();
    assert_eq!(v["answer"], "second answer", "{r}");
    assert!(
        r.stderr
            .contains("config replaced: model script:other.json, tools v2/tools.toml"),
        "{r}"
    );
    let fork = v["run_id"].as_str().expect("run_id").to_string();
    let tags: Vec<(String, String)> = effects(&p).into_iter().map(|(t, r, _)| (t, r)).collect();
    assert_eq!(
        tags,
        [("v1".into(), original.clone()), ("v2".into(), fork.clone())],
        "the original's call once, then the fork's with the new tools"
    );
    let models = |id: &str| {
        p.run(&["runs", "export", id]).expect_code(0).json()["config_snapshot"]["models"].clone()
    };
    assert_eq!(models(&fork), json!(["script:other.json"]));
    assert_eq!(
        models(&original),
        json!(["script:script.json"]),
        "the original keeps its snapshot"
    );
}

#[test]
fn fork_and_send_refuse_bad_input_with_exit_2_and_write_nothing() {
    let p = project(&Db::Sqlite, 1, "done");
    let original = start(&p);
    let cases: [(&[&str], &str); 6] = [
        (
            &["runs", "fork", &original, "--at-step", "9"],
            "has 2 committed steps; it cannot be forked at step 9",
        ),
        (&["runs", "fork", "ffffffffffff"], "no run `ffffffffffff`"),
        (
            &["runs", "fork", &original, "--model", "nonsense"],
            "--model",
        ),
        (
            &["runs", "fork", &original, "--tools", "missing.toml"],
            "missing.toml: no such file",
        ),
        (
            &["runs", "send", &original, "hello"],
            "is completed: it will read no more messages",
        ),
        (&["runs", "send", &original, "  "], "the message is empty"),
    ];
    for (args, want) in cases {
        let r = p.run(args);
        r.expect_code(2);
        assert!(r.stderr.contains(want), "{args:?}: {r}");
    }
    assert_eq!(runs(&p).len(), 1, "no fork was made");
    assert_eq!(p.show(&original)["sent_messages"], json!([]));
}

/// `runs send` to a run that waits (here: stopped by its step budget) stores the
/// message and does not resume it; the resume delivers it once, after the last step's
/// tool results.
#[test]
fn a_message_for_a_waiting_run_waits_for_its_resume_and_is_delivered_once() {
    let p = project(&Db::Sqlite, 2, "done");
    p.task("max_steps = 1", "Do the work.");
    let v = p.run(&["start", "task.md", "--json"]).expect_code(4).json();
    let id = v["run_id"].as_str().expect("run_id").to_string();
    let sent = send(&p, &id, "Use the EU price list.", "alice");
    assert_eq!(sent["run_status"], "budget_exhausted");
    let show = p.show(&id);
    assert_eq!(
        show["status"], "budget_exhausted",
        "sending does not resume it"
    );
    assert_eq!(
        show["sent_messages"][0]["delivered_after_step"],
        Value::Null
    );
    p.run(&["resume", &id, "--max-steps", "5", "--json"])
        .expect_code(0);
    check_delivered_once(&p.show(&id), "alice", "Use the EU price list.", 1);
    let human = p.run(&["runs", "show", &id]);
    human.expect_code(0);
    assert!(human.stdout.contains("messages from people"), "{human}");
    assert!(human.stdout.contains("alice"), "{human}");
}

/// `runs send … --json`.
pub fn send(p: &Project, id: &str, text: &str, by: &str) -> Value {
    let v = p
        .run(&["runs", "send", id, text, "--by", by, "--json"])
        .expect_code(0)
        .json();
    assert_eq!(
        (v["run_id"].as_str(), v["by"].as_str()),
        (Some(id), Some(by))
    );
    v
}

/// The message is in the transcript exactly once, as a user message of step `after`
/// placed after that step's tool results, and the run records who sent it.
pub fn check_delivered_once(show: &Value, by: &str, text: &str, after: u64) {
    let note = format!("[A person ({by}) sent a message] {text}");
    let t = transcript(show);
    let at: Vec<usize> = t
        .iter()
        .enumerate()
        .filter(|(_, (_, _, c))| c.to_string().contains(&note))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "delivered once: {t:#?}");
    let (step, role, _) = &t[at[0]];
    assert_eq!((*step, role.as_str()), (after, "user"), "{t:#?}");
    // Right after step `after`'s last message (its tool results), before the next
    // step's model turn.
    assert!(
        t[at[0] - 1].0 == after && t[at[0] - 1].1 == "tool",
        "{t:#?}"
    );
    if let Some(next) = t.get(at[0] + 1) {
        assert_eq!(
            (next.0, next.1.as_str()),
            (after + 1, "assistant"),
            "{t:#?}"
        );
    }
    check_one_result_per_call(show).unwrap_or_else(|e| panic!("{e}"));
    let sent = show["sent_messages"].as_array().expect("sent_messages");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["by"], by);
    assert_eq!(sent[0]["delivered_after_step"], after);
}

/// For the crash tests: a run of `p` killed at `point`, and its id.
pub fn crashed(p: &Project, args: &[&str], point: &str) -> Run {
    let r = p.run_env(args, &[("AGENTRUN_CRASH_AT", point)]);
    assert_eq!(r.code, -1, "{point}: should have aborted\n{r}");
    assert!(r.stderr.contains("crash point"), "{point}\n{r}");
    r
}

/// An OpenAI-compatible model server on 127.0.0.1 that answers with recorded
/// responses (`tests/fixtures/providers/openai`) in order, keeps every request body,
/// and holds its first answer until the test releases it: a model request in flight
/// for as long as the test needs.
struct HoldingModel {
    url: String,
    arrived: std::sync::mpsc::Receiver<()>,
    release: std::sync::mpsc::Sender<()>,
    bodies: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl HoldingModel {
    fn start(fixtures: &[&str]) -> HoldingModel {
        use std::io::{Read, Write};
        let responses: Vec<String> = fixtures
            .iter()
            .map(|f| {
                let path = format!(
                    "{}/tests/fixtures/providers/openai/{f}",
                    env!("CARGO_MANIFEST_DIR")
                );
                let v: Value =
                    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture"))
                        .expect("fixture JSON");
                v["response"]["body"].to_string()
            })
            .collect();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
        let (arrived_tx, arrived) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = bodies.clone();
        std::thread::spawn(move || {
            for (i, response) in responses.iter().enumerate() {
                let Ok((mut conn, _)) = listener.accept() else {
                    return;
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                let body = loop {
                    let n = conn.read(&mut chunk).unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break buf[end + 4..end + 4 + len].to_vec();
                    }
                };
                kept.lock()
                    .expect("bodies")
                    .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                if i == 0 {
                    let _ = arrived_tx.send(());
                    let _ = release_rx.recv();
                }
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{response}",
                    response.len()
                );
            }
        });
        HoldingModel {
            url,
            arrived,
            release,
            bodies,
        }
    }
}

/// Issue 21: a message sent while the model request of step 1 is in flight is not
/// slipped into that step; it reaches the model once, in the next request, right
/// after step 1's tool result.
#[test]
fn a_message_sent_while_a_model_request_is_in_flight_is_delivered_once_after_that_step() {
    message_in_flight_delivered_once(&Db::Sqlite);
}

/// The in-flight test on a backend (`tests/it/pg.rs` runs it on PostgreSQL).
pub fn message_in_flight_delivered_once(db: &Db) {
    let p = Project::on(db);
    p.write(
        "tools.toml",
        "[tools.lookup_population]\ndescription = \"Population of a country\"\ninput_schema = { type = \"object\" }\ncommand = [\"echo\", \"{\\\"population\\\": 5}\"]\nidempotent = true\n",
    );
    p.write(
        "task.md",
        "+++\nmodel = \"openai:gpt-4o-mini\"\nstream = false\nmax_steps = 5\n+++\nCan Crumpet have dragons?\n",
    );
    let model = HoldingModel::start(&[
        "01_single_tool_call.json",
        "03_tool_results_final_answer.json",
    ]);
    let child = p
        .command(&["start", "task.md", "--json"])
        .env("OPENAI_BASE_URL", &model.url)
        .env_remove("OPENAI_API_KEY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn agentrun");
    // The first request has arrived and is held: the step is in flight.
    model
        .arrived
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the model was asked");
    let id = p.only_run();
    let sent = send(&p, &id, TEXT_IN_FLIGHT, "alice");
    assert_eq!(sent["run_status"], "running");
    model.release.send(()).expect("release");
    let run = Run::from_output(child.wait_with_output().expect("wait"));
    let v = run.expect_code(0).json();
    assert_eq!(v["answer"], "YES", "{run}");

    let bodies = model.bodies.lock().expect("bodies").clone();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    let note = format!("[A person (alice) sent a message] {TEXT_IN_FLIGHT}");
    assert!(
        !bodies[0].to_string().contains(TEXT_IN_FLIGHT),
        "not in the request in flight"
    );
    let messages = bodies[1]["messages"].as_array().expect("messages");
    let with_note: Vec<usize> = (0..messages.len())
        .filter(|&i| messages[i].to_string().contains(&note))
        .collect();
    let tool = messages
        .iter()
        .position(|m| m["role"] == "tool")
        .expect("a tool result");
    assert_eq!(
        with_note,
        [tool + 1],
        "once, right after the tool result: {messages:#?}"
    );
    assert_eq!(messages[tool + 1]["role"], "user");
    check_delivered_once(&p.show(&id), "alice", TEXT_IN_FLIGHT, 1);
}

const TEXT_IN_FLIGHT: &str = "Answer for the northern province only.";

#[test]
fn a_fork_keeps_the_cost_spent_up_to_its_step() {
    fork_keeps_cost(&Db::Sqlite);
}

/// A fork's `cost_usd` is the source's at the fork step, like its tokens: three turns
/// of $2.00 each (10,000 input tokens at $100 per million, 1,000 output at $1,000),
/// forked at step 1, have spent $2.00 and 10,000 input tokens.
pub fn fork_keeps_cost(db: &Db) {
    let p = Project::on(db);
    p.write("tools.toml", "");
    let turn = json!({"tool_calls": [{"name": "nothing", "args": {}}],
                      "usage": {"input": 10_000, "output": 1_000}});
    p.model_script(
        json!([turn, turn, {"text": "done", "usage": {"input": 10_000, "output": 1_000}}]),
    );
    p.task(
        "tools = []\nprice = { input = 100, output = 1000 }",
        "Spend.",
    );
    let original = start(&p);
    assert_eq!(p.show(&original)["cost_usd"], 6.0);
    let r = p.run(&[
        "runs",
        "fork",
        &original,
        "--at-step",
        "1",
        "--no-start",
        "--json",
    ]);
    let fork = r.expect_code(0).json()["run_id"]
        .as_str()
        .expect("run_id")
        .to_string();
    let show = p.show(&fork);
    assert_eq!(
        (show["cost_usd"].clone(), show["tokens"].clone()),
        (json!(2.0), json!({"input": 10_000, "output": 1_000})),
        "{show}"
    );
    // `runs list` reads the run's row, not its loop state.
    let row = runs(&p)
        .into_iter()
        .find(|r| r["id"] == fork.as_str())
        .expect("the fork is listed");
    assert_eq!(row["cost_usd"], 2.0, "{row}");
}

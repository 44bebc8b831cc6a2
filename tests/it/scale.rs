//! Costs that must not grow with the database (issue 14): what `runs list --limit`
//! reads. The timings themselves are the bench's (`docs/bench.md`); these tests pin
//! the shapes that make them independent of size, which no machine load can blur.

use crate::common::Project;
use agentrun::model::{Message, Role};
use agentrun::store::{NewRun, RunId, RunStatus, Store};

fn runs(store: &Store, n: usize) -> Vec<RunId> {
    let opening = [Message::text(Role::User, "task")];
    (0..n)
        .map(|_| {
            let id = RunId::generate();
            store
                .create_run(&NewRun {
                    id: id.clone(),
                    task: "task",
                    task_path: "task.md",
                    snapshot: "{}",
                    scripts: &Default::default(),
                    max_steps: 1,
                    max_tokens: 1,
                    messages: &opening,
                    state: "{}",
                })
                .expect("create run");
            id
        })
        .collect()
}

#[test]
fn runs_list_with_a_limit_walks_the_index_in_order_and_stops() {
    let p = Project::new();
    let store = Store::open(&p.db(), true).unwrap();
    runs(&store, 3);
    let plan = store.recent_runs_plan().unwrap();
    assert!(
        plan.iter().any(|l| l.contains("runs_by_created")),
        "reads the created_at index: {plan:?}"
    );
    assert!(
        !plan.iter().any(|l| l.contains("TEMP B-TREE")),
        "no sort of the whole table before the limit: {plan:?}"
    );
}

#[test]
fn recent_runs_are_the_newest_first_up_to_the_limit() {
    let p = Project::new();
    let store = Store::open(&p.db(), true).unwrap();
    let ids = runs(&store, 5);
    let newest: Vec<RunId> = store
        .recent_runs(None, Some(2))
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(newest, vec![ids[4].clone(), ids[3].clone()]);
    assert_eq!(store.recent_runs(None, None).unwrap().len(), 5);
    assert_eq!(store.list_runs(None).unwrap().len(), 5);
    assert!(
        store
            .recent_runs(Some(RunStatus::Completed), Some(2))
            .unwrap()
            .is_empty()
    );
}

/// Human `runs show` is written a window of steps at a time (issue 14): across window
/// and page boundaries, with failed calls and their trace, it is the same text as the
/// whole run rendered at once (which `--follow` still prints first).
#[test]
fn human_runs_show_streams_the_same_text_as_the_whole_render() {
    let p = Project::new();
    p.script(
        "flaky.sh",
        "#!/bin/sh\nread args\ncase \"$args\" in *7}*) exit 70;; esac\necho \"$args\"\n",
    );
    p.write(
        "tools.toml",
        r#"
[policy]
disable_after = 1000
breaker_threshold = 1000
[tools.t]
description = "t"
input_schema = { type = "object" }
command = ["sh", "flaky.sh"]
idempotent = true
"#,
    );
    let mut turns: Vec<serde_json::Value> = (0..150)
        .map(|i| {
            serde_json::json!({
                "text": format!("turn {i}"),
                "tool_calls": [{"name": "t", "args": {"i": i}}],
                "usage": {"input": 10, "output": 2}
            })
        })
        .collect();
    turns.push(serde_json::json!({"text": "done", "usage": {"input": 10, "output": 2}}));
    p.model_script(serde_json::Value::Array(turns));
    p.task("max_steps = 200", "Work.");
    let v = p.run(&["start", "task.md", "--json"]).expect_code(0).json();
    let id = v["run_id"].as_str().expect("run_id");
    let streamed = p.run(&["runs", "show", id]).expect_code(0).stdout.clone();
    let whole = p
        .run(&["runs", "show", id, "--follow"])
        .expect_code(0)
        .stdout
        .clone();
    assert!(streamed.contains("── step 151 ──"), "{streamed}");
    assert_eq!(
        format!("{streamed}run {id} completed after 151 steps\n"),
        whole
    );
}

/// The scripted model reads only the turn count, so the loop keeps the opening and the
/// last steps in memory and a resume reads only those (issue 14). A 40-step run (past
/// the window) killed after its 30th commit resumes to the same transcript as an
/// uninterrupted one, asking for each turn once: the turns left out are counted right.
#[test]
fn a_scripted_run_past_the_window_resumes_to_the_uninterrupted_transcript() {
    use crate::exactly_once::{
        check_no_stored_turn_requested_again, check_transcript, observed, project, run,
        turns_requested,
    };
    let turns: Vec<&[&str]> = (0..40).map(|_| &["idem"][..]).collect();
    let reference = project(&turns);
    let v = run(&reference, &["start", "task.md", "--json"], &[])
        .expect_code(0)
        .json();
    let want = reference.show(v["run_id"].as_str().expect("run_id"));

    let p = project(&turns);
    let crashed = run(
        &p,
        &["start", "task.md", "--json"],
        &[("AGENTRUN_CRASH_AT", "after_commit:30")],
    );
    assert_eq!(crashed.code, -1, "{crashed}");
    let id = p.only_run();
    let v = run(&p, &["resume", &id, "--json"], &[])
        .expect_code(0)
        .json();
    assert_eq!(
        (v["status"].as_str(), v["steps"].as_u64()),
        (Some("completed"), Some(41))
    );
    assert_eq!(v["answer"], "all done");
    let got = p.show(&id);
    assert_eq!(check_transcript(&want, &got), Ok(Vec::new()));
    let seen = observed(&p);
    assert_eq!(turns_requested(&seen), (0..=40).collect::<Vec<_>>());
    check_no_stored_turn_requested_again(&seen).expect("no turn asked for twice");
}

#[test]
fn runs_show_walks_a_long_run_whole_and_in_order() {
    runs_show_walks_every_page(&crate::common::Db::Sqlite);
}

/// 600 steps: more messages, events and steps than one page of the store's walks
/// (512 rows or steps), so `runs show --json` crosses page boundaries
/// (`tests/it/pg.rs` runs it on PostgreSQL, whose walks are paged).
pub fn runs_show_walks_every_page(db: &crate::common::Db) {
    use serde_json::json;
    let n = 600u64;
    let p = Project::on(db);
    p.write(
        "tools.toml",
        "[tools.echo]\ndescription = \"echo\"\ninput_schema = { type = \"object\" }\ncommand = [\"cat\"]\nidempotent = true\n",
    );
    let mut turns: Vec<_> = (0..n)
        .map(|i| json!({"tool_calls": [{"name": "echo", "args": {"i": i}}]}))
        .collect();
    turns.push(json!({"text": "done"}));
    p.model_script(json!(turns));
    p.task(&format!("max_steps = {}", n + 1), "Echo until done.");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let messages = show["messages"].as_array().expect("messages");
    // system, task, then a call and its result per step, then the answer.
    assert_eq!(messages.len() as u64, 2 + 2 * n + 1);
    let calls = show["tool_calls"].as_array().expect("tool_calls");
    let steps: Vec<u64> = calls.iter().map(|c| c["step"].as_u64().unwrap()).collect();
    assert_eq!(
        steps,
        (1..=n).collect::<Vec<_>>(),
        "each step's call once, in order"
    );
    let args: Vec<u64> = calls
        .iter()
        .map(|c| c["args"]["i"].as_u64().unwrap())
        .collect();
    assert_eq!(args, (0..n).collect::<Vec<_>>());
    let events = show["events"].as_array().expect("events");
    assert!(events.len() as u64 >= n, "{} events", events.len());
    let event_steps: Vec<u64> = events.iter().map(|e| e["step"].as_u64().unwrap()).collect();
    assert!(
        event_steps.windows(2).all(|w| w[0] <= w[1]),
        "events in order"
    );
}

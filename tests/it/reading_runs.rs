//! Issue 13, "reading runs": `runs list` filters and width, a killed run shown as
//! stale, `runs export`, `runs rm`, `runs prune` and `runs show --follow`, all through
//! the binary.

use crate::common::{Project, Run, blocked_run};
use serde_json::{Value, json};
use std::process::Stdio;

/// A project with three runs: completed, failed (cut-off answer), and a second
/// completed one with a long task.
fn three_runs() -> Project {
    let p = Project::new();
    p.model_script(json!([{"text": "done"}]));
    p.task("tools = []", "First task.");
    p.run(&["start", "task.md"]).expect_code(0);
    p.write(
        "cut.json",
        &json!({"turns": [{"text": "cut", "stop": "max_tokens"}]}).to_string(),
    );
    p.write(
        "cut.md",
        "+++\nmodel = \"script:cut.json\"\ntools = []\n+++\nSecond task.\n",
    );
    p.run(&["start", "cut.md"]).expect_code(1);
    p.task(
        "tools = []",
        &format!("Third task {}", "with many words ".repeat(12)),
    );
    p.run(&["start", "task.md"]).expect_code(0);
    p
}

fn ids(r: &Run) -> Vec<String> {
    r.json()
        .as_array()
        .unwrap_or_else(|| panic!("not an array\n{r}"))
        .iter()
        .map(|v| v["status"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn runs_list_takes_limit_since_several_statuses_and_the_ls_alias() {
    let p = three_runs();
    let all = p.run(&["runs", "ls", "--json"]);
    assert_eq!(ids(&all), ["completed", "failed", "completed"], "{all}");
    let two = p.run(&[
        "runs",
        "list",
        "--status",
        "failed",
        "--status",
        "completed",
        "--limit",
        "2",
        "--json",
    ]);
    assert_eq!(ids(&two), ["completed", "failed"]);
    let failed = p.run(&["runs", "list", "--status", "failed", "--json"]);
    assert_eq!(ids(&failed), ["failed"]);
    assert_eq!(
        ids(&p.run(&["runs", "list", "--since", "1h", "--json"])).len(),
        3
    );
    let future = p.run(&["runs", "list", "--since", "2999-01-01"]);
    assert_eq!(future.expect_code(0).stdout, "");
    assert!(future.stderr.starts_with("no matching runs"), "{future}");
    let bad = p.run(&["runs", "list", "--since", "yesterday-ish"]);
    bad.expect_code(2);
    assert!(bad.stderr.contains("neither a duration"), "{bad}");
    let bad = p.run(&["runs", "list", "--status", "done"]);
    bad.expect_code(2);
    assert!(
        bad.stderr.contains("possible values: running, completed"),
        "{bad}"
    );
}

#[test]
fn runs_list_fits_the_terminal_width() {
    let p = three_runs();
    for cols in [70usize, 200] {
        let r = p.run_env(&["runs", "list"], &[("COLUMNS", &cols.to_string())]);
        let widest = r
            .stdout
            .lines()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0);
        assert!(widest <= cols, "{cols} columns:\n{r}");
        assert_eq!(
            r.stdout
                .contains("with many words with many words with many words with many words"),
            cols == 200,
            "{r}"
        );
    }
}

#[test]
fn runs_list_into_a_closed_pipe_ends_quietly() {
    let p = three_runs();
    for args in [&["runs", "list", "--json"][..], &["runs", "list"][..]] {
        let mut child = p
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        drop(child.stdout.take()); // the reader (`head`) has gone before the write
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!((out.status.code(), err.as_ref()), (Some(0), ""), "{args:?}");
    }
}

#[test]
fn a_run_whose_process_was_killed_shows_as_stale() {
    let (p, id) = blocked_run();
    let list = p.run(&["runs", "list", "--json"]).json();
    assert_eq!(
        (list[0]["status"].clone(), list[0]["stale"].clone()),
        (json!("running"), json!(true))
    );
    let table = p.run(&["runs", "list"]);
    assert!(
        table
            .stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.contains(" stale ")),
        "{table}"
    );
    let show = p.run(&["runs", "show", &id]);
    assert!(
        show.stdout.contains(&format!(
            "stale: its process is gone; `agentrun resume {id}` continues it"
        )),
        "{show}"
    );
}

#[test]
fn runs_export_is_one_document_with_the_config_snapshot() {
    let p = three_runs();
    let id = p.run(&["runs", "list", "--json"]).json()[2]["id"]
        .as_str()
        .expect("id")
        .to_string();
    let v: Value = p.run(&["runs", "export", &id[..5]]).expect_code(0).json();
    assert_eq!(v["export_version"], 1);
    assert_eq!(v["id"], id.as_str());
    assert_eq!(v["models"], json!(["script:script.json"]));
    assert_eq!(
        v["config_snapshot"]["models"],
        json!(["script:script.json"])
    );
    assert!(
        v["messages"].as_array().is_some_and(|m| m.len() >= 3),
        "{v:#}"
    );
    // The script is stored beside the snapshot (it can be megabytes), and the export
    // puts it back in.
    let script: Value = serde_json::from_str(
        v["config_snapshot"]["scripts"]["script:script.json"]
            .as_str()
            .expect("the script's text in the export"),
    )
    .unwrap();
    assert_eq!(script["turns"][0]["text"], "done");
    let conn = rusqlite::Connection::open(p.db()).unwrap();
    let stored: String = conn
        .query_row(
            "SELECT snapshot FROM run_snapshots WHERE run_id = ?1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!stored.contains("\"scripts\""), "{stored}");
}

#[test]
fn runs_rm_removes_everything_of_a_run_and_refuses_typos_first() {
    let p = three_runs();
    let list = p.run(&["runs", "list", "--json"]).json();
    let (a, b) = (
        list[0]["id"].as_str().unwrap(),
        list[1]["id"].as_str().unwrap(),
    );
    let typo = p.run(&["runs", "rm", a, "zzzz"]);
    typo.expect_code(2);
    assert_eq!(
        p.run(&["runs", "list", "--json"])
            .json()
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    let r = p.run(&["runs", "rm", a, b]);
    assert_eq!(
        r.expect_code(0).stdout,
        format!("removed run {a}\nremoved run {b}\n")
    );
    assert_eq!(
        p.run(&["runs", "list", "--json"])
            .json()
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    p.run(&["runs", "show", a]).expect_code(2);
}

#[test]
fn runs_prune_keeps_runs_that_wait_for_a_person() {
    let p = Project::new();
    p.write(
        "tools.toml",
        "[tools.send]\ndescription = \"s\"\ninput_schema = { type = \"object\" }\ncommand = [\"cat\"]\napproval = \"always\"\n",
    );
    p.model_script(json!([{"tool_calls": [{"name": "send", "args": {}}]}, {"text": "sent"}]));
    p.task("", "Send it.");
    p.run(&["start", "task.md"]).expect_code(3);
    p.model_script(json!([{"text": "done"}]));
    p.task("tools = []", "Nothing.");
    p.run(&["start", "task.md"]).expect_code(0);
    let dry = p.run(&["runs", "prune", "--older-than", "0s", "--dry-run"]);
    assert!(
        dry.expect_code(0).stdout.starts_with(
            "would remove 1 run last updated more than 0s ago; kept 1 waiting for a person and 0 still running\n"
        ),
        "{dry}"
    );
    assert_eq!(
        p.run(&["runs", "list", "--json"])
            .json()
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    p.run(&["runs", "prune", "--older-than", "0s"])
        .expect_code(0);
    let left = p.run(&["runs", "list", "--json"]).json();
    assert_eq!(
        ids(&p.run(&["runs", "list", "--json"])),
        ["awaiting_approval"],
        "{left}"
    );
}

/// Polls `cond` until it holds or `secs` pass; a bounded wait on observable state.
fn wait_until(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

#[test]
fn runs_show_follow_prints_new_steps_until_the_run_ends() {
    let (p, id) = blocked_run();
    p.write("hold", "");
    let resumer = p
        .command(&["resume", &id])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn resume");
    // Follow once the resumer holds the run (it is no longer stale).
    assert!(wait_until(20, || {
        p.run(&["runs", "list", "--json"]).json()[0]["stale"] == json!(false)
    }));
    let mut follower = p
        .command(&["runs", "show", &id, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn follow");
    // Release the tool only once the follower has printed the run so far, so what
    // comes next can only arrive as followed lines.
    let mut stdout = std::io::BufReader::new(follower.stdout.take().expect("stdout"));
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).expect("first line");
    assert!(first.starts_with(&format!("run {id}")), "{first}");
    std::fs::remove_file(p.path().join("hold")).expect("release the tool");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).expect("follow output");
    let out = follower.wait_with_output().expect("follow ends");
    let _ = resumer.wait_with_output();
    let text = format!("{first}{rest}");
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("step 2: model: done"), "{text}");
    assert!(
        text.trim_end()
            .ends_with(&format!("run {id} completed after 2 steps")),
        "{text}"
    );
}

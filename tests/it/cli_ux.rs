//! What people see: `runs show` and `runs list` (snapshots, with run ids, times and
//! jittered waits normalised), live progress in a real pseudo-terminal versus plain
//! lines and `--quiet`, `init` end to end, completions and the man page.

use crate::common::{Project, Run};
use serde_json::json;

/// A project whose run exercises every kind of line `runs show` prints: a retried
/// call, a fallback hop to a stale tool, a permanent error, a long folded result.
fn eventful_project(backoff: &str) -> Project {
    let p = Project::new();
    p.script(
        "flaky.sh",
        "#!/bin/sh\ncat > /dev/null\nif [ ! -f flaky.once ]; then touch flaky.once; echo 'busy' >&2; exit 75; fi\necho '{\"status\": \"shipped\"}'\n",
    );
    p.script("down.sh", "#!/bin/sh\ncat > /dev/null\nexit 69\n");
    p.script(
        "cache.sh",
        "#!/bin/sh\ncat > /dev/null\necho '{\"status\": \"processing\"}'\n",
    );
    p.script(
        "missing.sh",
        "#!/bin/sh\ncat > /dev/null\necho '{\"error\": \"not_found\", \"message\": \"no customer C-9\"}'\nexit 66\n",
    );
    p.script("long.sh", "#!/bin/sh\ncat > /dev/null\nseq 1 400\n");
    let schema = r#"input_schema = { type = "object", properties = { id = { type = "string" } }, required = ["id"] }"#;
    let tool = |name: &str, script: &str, extra: &str| {
        format!(
            "[tools.{name}]\ndescription = \"{name}\"\n{schema}\ncommand = [\"sh\", \"{script}\"]\nidempotent = true\n{extra}\n"
        )
    };
    let tools = [
        format!("[defaults]\nbackoff = \"{backoff}\"\nmax_backoff = \"{backoff}\"\n"),
        tool("track", "flaky.sh", ""),
        tool(
            "status",
            "down.sh",
            "attempts = 1\nfallback = [{ tool = \"status_cache\" }]",
        ),
        tool("status_cache", "cache.sh", "stale = true"),
        tool("customer", "missing.sh", ""),
        tool("history", "long.sh", ""),
    ];
    p.write("tools.toml", &tools.join("\n"));
    let call = |name: &str| json!({"name": name, "args": {"id": "C-9"}});
    p.model_script(json!([
        {"text": "Tracking the parcel.", "tool_calls": [call("track")], "usage": {"input": 100, "output": 10}},
        {"tool_calls": [call("status"), call("customer")], "usage": {"input": 200, "output": 20}},
        {"tool_calls": [call("history")], "usage": {"input": 300, "output": 30}},
        {"text": "The parcel shipped.\nCustomer C-9 was not found.", "usage": {"input": 400, "output": 40}}
    ]));
    p.task(
        "max_steps = 8",
        "Where is the parcel of customer C-9?\nReply briefly.",
    );
    p
}

/// The run, after asserting its exit code.
fn expect(run: Run, code: i32) -> Run {
    run.expect_code(code);
    run
}

/// Replaces what changes from run to run with placeholders.
fn normalised(p: &Project, text: &str) -> String {
    let list = expect(p.run(&["runs", "list", "--json"]), 0).json();
    let mut out = text.to_string();
    for r in list.as_array().expect("array") {
        for (key, placeholder) in [
            ("id", "RUN_ID"),
            ("created_at", "TIME"),
            ("updated_at", "TIME"),
        ] {
            let v = r[key].as_str().expect("string field");
            // Same width as what it replaces, so table columns stay aligned.
            out = out.replace(v, &format!("{placeholder:_<width$}", width = v.len()));
        }
    }
    out
}

fn snapshot_filters() -> Vec<(&'static str, &'static str)> {
    vec![
        (r"\d+ ms", "N ms"),
        (r"\d+\.\d s", "N s"),
        // The AGE column: seconds, minutes, … since creation.
        (r"[ \d]\d[smhd]  ", "AGE  "),
        // runs show: local times and how long the run took.
        (
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d\d:\d\d",
            "LOCAL TIME",
        ),
        (r"(wall time +)\S+", "${1}DURATION"),
        (r"(driven +)\S+", "${1}DURATION"),
    ]
}

#[test]
fn runs_show_renders_steps_calls_retries_fallbacks_and_folded_results() {
    let p = eventful_project("10ms");
    p.run(&["start", "task.md", "--quiet"]).expect_code(0);
    let id = p.only_run();
    let show = expect(p.run(&["runs", "show", &id]), 0);
    insta::with_settings!({filters => snapshot_filters()}, {
        insta::assert_snapshot!(normalised(&p, &show.stdout));
    });
}

#[test]
fn runs_show_of_a_failed_run_gives_the_reason_and_the_runners_note() {
    let p = Project::new();
    p.model_script(json!([
        {"text": "A very long answer that was cut", "stop": "max_tokens", "usage": {"input": 50, "output": 4096}}
    ]));
    p.task("tools = []", "Write an essay.");
    p.run(&["start", "task.md", "--quiet"]).expect_code(1);
    let show = expect(p.run(&["runs", "show", &p.only_run()]), 0);
    insta::with_settings!({filters => snapshot_filters()}, {
        insta::assert_snapshot!(normalised(&p, &show.stdout));
    });
}

#[test]
fn runs_list_is_an_aligned_table_that_handles_wide_text() {
    let p = Project::new();
    p.model_script(json!([{"text": "done", "usage": {"input": 5, "output": 1}}]));
    p.task("tools = []", "日本語のタスク: 注文を確認して、顧客に返信してください。これは長い行で、表の幅を超えるはずです。");
    p.run(&["start", "task.md", "--quiet"]).expect_code(0);
    p.task("tools = []", "\n\nSecond task, after blank lines");
    p.run(&["start", "task.md", "--quiet"]).expect_code(0);
    let list = expect(p.run(&["runs", "list"]), 0);
    insta::with_settings!({filters => snapshot_filters()}, {
        insta::assert_snapshot!(normalised(&p, &list.stdout));
    });
}

#[test]
fn runs_list_with_no_runs_yet_says_how_to_start() {
    let p = Project::new();
    // The default database (none given) that does not exist yet: a new user.
    let mut cmd = p.command(&["runs", "list"]);
    cmd.env_remove("AGENTRUN_DB");
    let list = expect(Run::from_output(cmd.output().expect("spawn")), 0);
    assert_eq!(list.stdout, "", "{list}");
    assert_eq!(
        list.stderr,
        "no runs yet in .agentrun/agentrun.db — start one with `agentrun start TASK.md`\n"
    );
    let mut cmd = p.command(&["runs", "list", "--json"]);
    cmd.env_remove("AGENTRUN_DB");
    let json = expect(Run::from_output(cmd.output().expect("spawn")), 0);
    assert_eq!(json.json(), json!([]));
}

/// Runs `agentrun ARGS` inside a pseudo-terminal (util-linux `script`), returning
/// everything the terminal showed; `None` when `script` is not installed.
fn in_terminal(p: &Project, args: &str) -> Option<String> {
    let bin = crate::common::bin();
    let cmdline = format!("'{}' {args}", bin.display());
    let out = std::process::Command::new("script")
        .args(["-qfec", &cmdline, "/dev/null"])
        .current_dir(p.path())
        .env("AGENTRUN_DB", p.db())
        .env("TERM", "xterm-256color")
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) => Some(String::from_utf8_lossy(&o.stdout).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => crate::common::peer::available(
            "util-linux `script`",
            "`apt-get install util-linux`",
            || None,
        ),
        Err(e) => panic!("cannot run script: {e}"),
    }
}

#[test]
fn progress_on_a_terminal_is_live_with_step_counter_and_final_line() {
    let p = eventful_project("400ms");
    let Some(screen) = in_terminal(&p, "start task.md") else {
        return;
    };
    assert!(screen.contains("step 1/8"), "no step counter:\n{screen}");
    assert!(screen.contains("\x1b["), "no terminal rendering:\n{screen}");
    assert!(
        screen.contains("attempt 2"),
        "no retry attempt shown:\n{screen}"
    );
    assert!(
        screen.contains("completed") && screen.contains("after 4 steps"),
        "no final line:\n{screen}"
    );
}

#[test]
fn progress_without_a_terminal_is_plain_lines_and_quiet_silences_it() {
    let p = eventful_project("10ms");
    let run = expect(p.run(&["start", "task.md"]), 0);
    assert_eq!(
        run.stdout,
        "The parcel shipped.\nCustomer C-9 was not found.\n"
    );
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert!(
        lines.iter().all(|l| l.starts_with("agentrun: ")),
        "a line without the prefix:\n{run}"
    );
    for expected in [
        "agentrun: step 1/8",
        "agentrun:   track: waiting",
        "agentrun:   fallback: status failed, trying status_cache",
        "agentrun: run ",
    ] {
        assert!(
            run.stderr.contains(expected),
            "missing {expected:?}:\n{run}"
        );
    }
    assert!(
        !run.stderr.contains('\x1b'),
        "escape codes in a pipe:\n{run}"
    );

    let quiet = expect(
        eventful_project("10ms").run(&["start", "task.md", "--quiet"]),
        0,
    );
    assert_eq!(quiet.stderr, "", "{quiet}");
}

#[test]
fn init_then_tools_check_then_start_works_offline() {
    let p = Project::new();
    let init = expect(p.run(&["init"]), 0);
    assert!(init.stdout.contains("agentrun start task.md"), "{init}");
    p.run(&["tools", "check"]).expect_code(0);
    let run = expect(p.run(&["start", "task.md", "--json"]), 0);
    assert_eq!(run.json()["status"], "completed", "{run}");
    // The starter shows what its comments promise: the wiki is down, the notes answer.
    let show = p.show(run.json()["run_id"].as_str().expect("run_id"));
    assert_eq!(show["tool_calls"][0]["tool"], "search_wiki", "{show:#}");
    assert_eq!(show["tool_calls"][0]["via"], "search_notes", "{show:#}");
    let hints = std::fs::read_to_string(p.path().join("prompts/hints.toml")).expect("hints");
    assert!(
        hints.contains("[hints]") && hints.contains("timeout = "),
        "{hints}"
    );
}

#[test]
fn init_into_a_folder_with_starter_files_refuses_and_writes_nothing() {
    let p = Project::new();
    p.write("tools.toml", "# mine\n");
    let run = expect(p.run(&["init"]), 2);
    assert!(run.stderr.contains("tools.toml"), "{run}");
    assert!(run.stderr.contains("nothing was written"), "{run}");
    assert!(!p.path().join("task.md").exists(), "task.md was written");
    assert_eq!(
        std::fs::read_to_string(p.path().join("tools.toml")).expect("read"),
        "# mine\n"
    );
    // And a second init over a finished one refuses as well.
    p.run(&["init", "--dir", "fresh"]).expect_code(0);
    p.run(&["init", "--dir", "fresh"]).expect_code(2);
}

#[test]
fn completions_and_man_page_come_from_the_cli_definition() {
    let p = Project::new();
    let bash = expect(p.run(&["completions", "bash"]), 0);
    assert!(bash.stdout.contains("agentrun"), "{bash}");
    for shell in ["zsh", "fish"] {
        p.run(&["completions", shell]).expect_code(0);
    }
    let man = expect(p.run(&["man"]), 0);
    assert!(man.stdout.starts_with(".TH"), "{man}");
    assert!(man.stdout.contains("runs"), "{man}");
}

//! Issue 13, "the first hour": mistakes a new user makes are caught before anything is
//! written (exit 2), every message names what was looked at and says what to do, and
//! the database and tools.toml are found from any folder.

use crate::common::{Project, Run};
use serde_json::json;
use std::path::Path;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Stderr with the project's temporary path replaced, for snapshots.
fn scrub(p: &Project, text: &str) -> String {
    text.replace(&p.path().display().to_string(), "[project]")
}

#[test]
fn no_tools_toml_stops_before_the_run_and_names_the_paths_searched() {
    let p = Project::new();
    p.model_script(json!([{"text": "Done: Dana was emailed."}]));
    p.task("", "Email Dana.");
    let r = p.run(&["start", "task.md"]);
    r.expect_code(2);
    assert!(!p.db().exists(), "nothing may be written\n{r}");
    let err = scrub(&p, &r.stderr);
    assert!(
        err.starts_with(
            "agentrun: task.md: no tools.toml found; searched:\n  [project]/tools.toml\n"
        ),
        "{err}"
    );
    assert!(
        err.contains("`agentrun init`") && err.contains("tools = []"),
        "{err}"
    );
    // A task that says it needs no tools runs without one.
    p.task("tools = []", "Email Dana.");
    p.run(&["start", "task.md"]).expect_code(0);
}

#[test]
fn a_task_naming_tools_that_do_not_exist_stops_before_the_run() {
    let p = Project::new();
    p.model_script(json!([{"text": "x"}]));
    p.write(
        "tools.toml",
        "[tools.a]\ndescription = \"a\"\ninput_schema = { type = \"object\" }\ncommand = [\"cat\"]\n",
    );
    p.task("tools = [\"send_email\"]", "Email Dana.");
    let r = p.run(&["start", "task.md"]);
    r.expect_code(2);
    assert!(!p.db().exists(), "{r}");
    assert!(
        r.stderr
            .contains("names `send_email`, which is not defined here (defined: a)"),
        "{r}"
    );
}

/// Five ways a tool cannot start, each reported with its fix; `start` stops on them
/// too, before anything is written.
fn broken_tools(p: &Project) {
    p.write("tools/x.sh", "#!/bin/sh\necho ok\n"); // no run bit
    p.write(
        "tools.toml",
        r#"[tools.a]
description = "misspelt interpreter, no schema"
command = ["pyhton3", "tools/a.py"]
[tools.b]
description = "script without its run bit"
input_schema = { type = "object" }
command = ["./tools/x.sh"]
[tools.c]
description = "missing script"
input_schema = { type = "object" }
command = ["python3", "tools/missing.py"]
[tools.d]
description = "unset variable"
input_schema = { type = "object" }
http = { url = "http://127.0.0.1:9/x", headers = { Authorization = "Bearer ${AGENTRUN_TEST_UNSET}" } }
"#,
    );
}

#[test]
fn tools_check_catches_tools_that_cannot_start_with_the_fix() {
    let p = Project::new();
    broken_tools(&p);
    let mut c = p.command(&["tools", "check"]);
    c.env_remove("AGENTRUN_TEST_UNSET");
    let r = Run::from_output(c.output().expect("spawn"));
    r.expect_code(2);
    insta::assert_snapshot!(scrub(&p, &r.stderr));
}

#[test]
fn start_runs_the_same_pre_flight_and_writes_nothing() {
    let p = Project::new();
    broken_tools(&p);
    p.model_script(json!([{"text": "x"}]));
    p.task("tools = [\"b\"]", "Use b.");
    let r = p.run(&["start", "task.md"]);
    r.expect_code(2);
    assert!(!p.db().exists(), "{r}");
    assert_eq!(
        r.stderr,
        "agentrun: tools.toml: tool `b`: command[0]: `./tools/x.sh` is not executable; run `chmod +x tools/x.sh`\n\
         agentrun: 1 tool problem found, nothing was started (check again with `agentrun tools check --tools tools.toml`)\n"
    );
}

#[test]
fn a_run_with_an_open_tool_bug_report_says_so_on_its_last_line() {
    let p = Project::new();
    p.script(
        "crash.sh",
        "#!/bin/sh\ncat > /dev/null\necho 'Traceback: boom' >&2\nexit 70\n",
    );
    p.write(
        "tools.toml",
        "[tools.lookup]\ndescription = \"l\"\ninput_schema = { type = \"object\" }\ncommand = [\"./crash.sh\"]\n",
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "lookup", "args": {}}]},
        {"text": "I could not look it up."}
    ]));
    p.task("", "Look it up.");
    let r = p.run(&["start", "task.md"]);
    r.expect_code(0);
    let last = r.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("agentrun: 1 open tool_bug report for this run: ")
            && last.contains("(see `agentrun escalations show "),
        "{r}"
    );
}

#[test]
fn the_quick_start_works_from_any_folder() {
    let p = Project::new();
    let task = repo().join("examples/quickstart/task.md");
    let r = p.run(&["start", task.to_str().expect("utf-8 path"), "--json"]);
    r.expect_code(0);
    assert_eq!(r.json()["status"], "completed", "{r}");
}

#[test]
fn the_database_is_found_in_a_parent_folder_and_named_when_empty() {
    let p = Project::new();
    p.model_script(json!([{"text": "done"}]));
    p.task("tools = []", "Say done.");
    let at = |dir: &str, args: &[&str]| {
        let mut c = p.command(args);
        c.env_remove("AGENTRUN_DB").current_dir(p.path().join(dir));
        Run::from_output(c.output().expect("spawn"))
    };
    at(".", &["start", "task.md"]).expect_code(0);
    std::fs::create_dir_all(p.path().join("sub/deeper")).expect("mkdir");
    // From a subfolder, the run started at the top is found, like git finds .git.
    let list = at("sub/deeper", &["runs", "list", "--json"]);
    assert_eq!(
        list.expect_code(0).json().as_array().map(Vec::len),
        Some(1),
        "{list}"
    );
    // A database named explicitly that has no runs says which file it read.
    let other = p.path().join("other.db");
    let mut c = p.command(&["runs", "show", "abc"]);
    c.env("AGENTRUN_DB", &other);
    let r = Run::from_output(c.output().expect("spawn"));
    r.expect_code(2);
    assert!(r.stderr.contains(&other.display().to_string()), "{r}");
}

#[test]
fn a_config_file_gives_the_default_model_and_the_environment_overrides_it() {
    let p = Project::new();
    p.write(
        "a.json",
        &json!({"turns": [{"text": "from a"}]}).to_string(),
    );
    p.write(
        "b.json",
        &json!({"turns": [{"text": "from b"}]}).to_string(),
    );
    p.write("task.md", "+++\ntools = []\n+++\nWho answers?\n");
    p.write(".agentrun/config.toml", "model = \"script:a.json\"\n");
    let run = |env: &[(&str, &str)]| {
        let mut c = p.command(&["start", "task.md"]);
        c.env_remove("AGENTRUN_DB");
        for (k, v) in env {
            c.env(k, v);
        }
        Run::from_output(c.output().expect("spawn"))
    };
    assert_eq!(run(&[]).expect_code(0).stdout, "from a\n");
    assert_eq!(
        run(&[("AGENTRUN_MODEL", "script:b.json")])
            .expect_code(0)
            .stdout,
        "from b\n"
    );
    // The database defaulted to the project's .agentrun/ folder.
    assert!(p.path().join(".agentrun/agentrun.db").exists());
    p.write(".agentrun/config.toml", "modle = \"script:a.json\"\n");
    let bad = run(&[]);
    bad.expect_code(2);
    assert!(
        bad.stderr.contains("config.toml: unknown field `modle`"),
        "{bad}"
    );
}

#[test]
fn a_model_server_that_is_not_running_is_named_on_the_first_step() {
    // Bind, then drop: the port is closed for the next moment.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let p = Project::new();
    p.write("tools.toml", "");
    p.write("task.md", "+++\nmodel = \"openai:m\"\n+++\nhello\n");
    let mut cmd = p.command(&["start", "task.md"]);
    cmd.env_remove("OPENAI_API_KEY")
        .env("OPENAI_BASE_URL", format!("http://{addr}/v1"));
    let run = Run::from_output(cmd.output().expect("spawn"));
    run.expect_code(1);
    assert!(
        run.stderr.contains(&format!(
            "nothing is listening at {addr} — is the server running? (OPENAI_BASE_URL)"
        )),
        "{run}"
    );
    // Issue 27: ~2 s of tries on the first step, not the 15 s schedule of later steps.
    let show = p.show(&p.only_run());
    let waited: u64 = crate::common::events(&show, "model_retry")
        .iter()
        .map(|e| e["delay_ms"].as_u64().expect("delay_ms"))
        .sum();
    assert_eq!(waited, 2000, "{show:#}");
}

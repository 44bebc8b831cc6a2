//! Issue 13, "starting and steering": a task from stdin or from --prompt, switching a
//! run's model on resume, and resolving an escalation straight into the resumed run.

use crate::common::{Project, Run};
use serde_json::json;
use std::io::Write;
use std::process::Stdio;

#[test]
fn start_dash_reads_the_task_from_stdin() {
    let p = Project::new();
    p.model_script(json!([{"text": "from stdin"}]));
    let mut child = p
        .command(&["start", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"+++\nmodel = \"script:script.json\"\ntools = []\n+++\nSay hi.\n")
        .expect("write task");
    let r = Run::from_output(child.wait_with_output().expect("wait"));
    r.expect_code(0);
    assert_eq!(r.json()["answer"], "from stdin");
    let show = p.show(r.json()["run_id"].as_str().expect("id"));
    assert_eq!(show["task"], "Say hi.");
    assert_eq!(show["task_path"], "(stdin)");
}

#[test]
fn start_prompt_takes_the_task_as_text() {
    let p = Project::new();
    p.model_script(json!([{"text": "from a prompt"}]));
    p.write(
        "tools.toml",
        "[tools.a]\ndescription = \"a\"\ninput_schema = { type = \"object\" }\ncommand = [\"cat\"]\n",
    );
    let r = p.run(&[
        "start",
        "--prompt",
        "Say hi.",
        "--model",
        "script:script.json",
    ]);
    assert_eq!(r.expect_code(0).stdout, "from a prompt\n");
    // Without a model anywhere, it says where one can come from.
    let none = p.run(&["start", "--prompt", "Say hi."]);
    none.expect_code(2);
    assert!(none.stderr.contains("--model"), "{none}");
    // A file and --prompt together is a usage error.
    p.run(&["start", "task.md", "--prompt", "x"]).expect_code(2);
}

#[test]
fn resume_model_switches_a_failed_runs_model() {
    let p = Project::new();
    // The first model is refused at once, like a bad key (401 is never retried).
    p.write(
        "bad.json",
        &json!({"turns": [{"text": "x", "fail": {"status": 401}}]}).to_string(),
    );
    p.model_script(json!([{"text": "the second model answers"}]));
    p.write(
        "task.md",
        "+++\nmodel = \"script:bad.json\"\ntools = []\n+++\nAnswer.\n",
    );
    let first = p.run(&["start", "task.md", "--json"]);
    first.expect_code(1);
    let id = first.json()["run_id"].as_str().expect("id").to_string();
    let r = p.run(&["resume", &id, "--model", "script:script.json", "--json"]);
    r.expect_code(0);
    assert_eq!(r.json()["answer"], "the second model answers");
    assert_eq!(p.show(&id)["models"], json!(["script:script.json"]));
    let bad = p.run(&["resume", &id, "--model", "gpt-4o"]);
    bad.expect_code(2);
    assert!(
        bad.stderr
            .contains("--model: model `gpt-4o` has no provider"),
        "{bad}"
    );
}

#[test]
fn escalations_resolve_resume_continues_the_run() {
    let p = Project::new();
    p.write(
        "tools.toml",
        "[tools.send]\ndescription = \"s\"\ninput_schema = { type = \"object\" }\ncommand = [\"cat\"]\napproval = \"always\"\n",
    );
    p.model_script(
        json!([{"tool_calls": [{"name": "send", "args": {"to": "dana"}}]}, {"text": "sent"}]),
    );
    p.task("", "Send it.");
    let start = p.run(&["start", "task.md", "--json"]);
    start.expect_code(3);
    let esc = start.json()["escalation_id"]
        .as_str()
        .expect("escalation id")
        .to_string();
    let r = p.run(&["escalations", "resolve", &esc, "--approve", "--resume"]);
    r.expect_code(0);
    assert_eq!(r.stdout, "sent\n", "{r}");
    assert!(
        r.stderr
            .starts_with(&format!("agentrun: escalation {esc} resolved: approved\n")),
        "{r}"
    );
}

//! `runs export --as-test` and `agentrun test`: a recorded run re-run green, then the
//! same case failing with a readable diff after each kind of change a person makes —
//! a tool's schema, the task's prompt, the approval policy — and `--live-tools`
//! running the real tool where replay runs nothing.

use crate::common::{Project, Run};
use serde_json::json;

/// A two-tool shop: `lookup` records each real call in `calls.log`; the model looks up
/// an order, searches, and answers.
fn shop() -> Project {
    let p = Project::new();
    p.script(
        "tools/lookup.sh",
        "#!/bin/sh\ncat >/dev/null\necho called >> calls.log\necho '{\"order\":\"ORD-1\",\"delivered\":\"2026-11-16\"}'\n",
    );
    p.script(
        "tools/search.sh",
        "#!/bin/sh\ncat >/dev/null\necho '{\"hits\":[\"30 days\"],\"note\":\"token ghp_abcdefghijklmnopqrstuvwx\"}'\n",
    );
    p.write("tools.toml", &tools_toml("string", ""));
    p.task("", "Can ORD-1 be refunded?");
    p.model_script(json!([
        {"tool_calls": [{"name": "lookup", "args": {"order": "ORD-1"}}]},
        {"tool_calls": [{"name": "search", "args": {"q": "refund window"}}]},
        {"text": "Yes: within 30 days of delivery."}
    ]));
    p
}

/// tools.toml with `search`'s `q` of type `q_type`, and `lookup_extra` added to lookup.
fn tools_toml(q_type: &str, lookup_extra: &str) -> String {
    format!(
        r#"[defaults]
timeout = "5s"
sandbox = "off"

[tools.lookup]
description = "Look up an order"
input_schema = {{ type = "object", properties = {{ order = {{ type = "string" }} }}, required = ["order"] }}
command = ["sh", "tools/lookup.sh"]
idempotent = true
{lookup_extra}

[tools.search]
description = "Search the help centre"
input_schema = {{ type = "object", properties = {{ q = {{ type = "{q_type}" }} }}, required = ["q"] }}
command = ["sh", "tools/search.sh"]
idempotent = true
"#
    )
}

/// Runs the shop's task and exports the run as the case `cases/refund`.
fn recorded(p: &Project) -> Run {
    let (run, _) = p.start(&[]);
    run.expect_code(0);
    let id = run.json()["run_id"].as_str().unwrap().to_string();
    p.run(&["runs", "export", &id, "--as-test", "cases/refund"])
        .expect_code(0);
    std::fs::remove_file(p.path().join("calls.log")).unwrap();
    run
}

#[test]
fn a_recorded_run_exported_as_a_case_re_runs_green_without_running_tools() {
    let p = shop();
    let run = recorded(&p);
    let test = p.run(&["test", "cases/refund"]);
    test.expect_code(0);
    assert_eq!(test.stdout.trim(), "ok   cases/refund", "{test}");
    // Replayed: the real tool did not run.
    assert_eq!(p.lines("calls.log"), 0);
    // The case holds no id or time of the run, and redacts a credential the tool printed.
    let case = std::fs::read_to_string(p.path().join("cases/refund/case.json")).unwrap();
    let id = run.json()["run_id"].as_str().unwrap().to_string();
    assert!(!case.contains(&id), "{case}");
    assert!(!case.contains("ghp_"), "{case}");
    assert!(case.contains("token [redacted]"), "{case}");
    let script = std::fs::read_to_string(p.path().join("cases/refund/script.json")).unwrap();
    assert!(script.contains("\"refund window\""), "{script}");
}

#[test]
fn exporting_the_same_run_twice_writes_the_same_bytes() {
    let p = shop();
    recorded(&p);
    let read = |f: &str| std::fs::read(p.path().join("cases/refund").join(f)).unwrap();
    let first = (read("case.json"), read("script.json"));
    let id = p.only_run();
    p.run(&["runs", "export", &id, "--as-test", "cases/refund"])
        .expect_code(0);
    assert_eq!((read("case.json"), read("script.json")), first);
}

#[test]
fn a_tool_schema_change_fails_the_case_with_a_diff_naming_the_call() {
    let p = shop();
    recorded(&p);
    p.write("tools.toml", &tools_toml("integer", ""));
    let test = p.run(&["test", "cases/refund"]);
    test.expect_code(1);
    let out = &test.stdout;
    assert!(out.starts_with("FAIL cases/refund\n"), "{test}");
    assert!(
        out.contains(r#"- call call_1_0 search {"q":"refund window"} -> ok"#),
        "{test}"
    );
    assert!(
        out.contains(
            r#"+ call call_1_0 search {"q":"refund window"} -> error schema_violation (malformed)"#
        ) && out.contains("is not of type \"integer\""),
        "{test}"
    );
    // The unchanged call is context, not a difference.
    assert!(
        out.contains(r#"  call call_0_0 lookup {"order":"ORD-1"} -> ok"#),
        "{test}"
    );
}

#[test]
fn a_prompt_change_that_leaves_a_call_invalid_fails_the_case() {
    let p = shop();
    recorded(&p);
    // The task now offers only `search`: the recorded call of `lookup` is unknown.
    p.task("tools = [\"search\"]", "Can ORD-1 be refunded?");
    let test = p.run(&["test", "cases/refund", "--json"]);
    test.expect_code(1);
    let v = test.json();
    assert_eq!(v["failed"], 1);
    let diff = v["cases"][0]["diff"].as_array().unwrap();
    let now: Vec<&str> = diff
        .iter()
        .filter(|l| l["op"] == "now")
        .map(|l| l["line"].as_str().unwrap())
        .collect();
    assert!(
        now[0].starts_with(
            r#"call call_0_0 lookup {"order":"ORD-1"} -> error unknown_tool (malformed)"#
        ),
        "{v}"
    );
}

#[test]
fn a_policy_change_that_needs_approval_fails_the_case_as_an_escalation() {
    let p = shop();
    recorded(&p);
    p.write("tools.toml", &tools_toml("string", "approval = \"always\""));
    let test = p.run(&["test", "cases/refund"]);
    test.expect_code(1);
    let out = &test.stdout;
    for line in [
        r#"- call call_0_0 lookup {"order":"ORD-1"} -> ok"#,
        r#"+ call call_0_0 lookup {"order":"ORD-1"} -> no result (the run stopped before it ran)"#,
        "+ escalation approval_required",
        "- status completed",
        "+ status awaiting_approval",
        "- answer | Yes: within 30 days of delivery.",
        "+ answer (none)",
    ] {
        assert!(out.contains(line), "missing {line:?}\n{test}");
    }
}

#[test]
fn live_tools_run_the_real_tool_and_replay_does_not() {
    let p = shop();
    recorded(&p);
    p.run(&["test", "cases"]).expect_code(0);
    assert_eq!(p.lines("calls.log"), 0);
    p.run(&["test", "cases", "--live-tools"]).expect_code(0);
    assert_eq!(p.lines("calls.log"), 1);
}

#[test]
fn a_folder_without_a_case_is_bad_input() {
    let p = shop();
    std::fs::create_dir_all(p.path().join("empty")).unwrap();
    let test = p.run(&["test", "empty"]);
    test.expect_code(2);
    assert!(test.stderr.contains("empty: no case here"), "{test}");
    p.write("broken/case.json", "{\"format\": 1}");
    let test = p.run(&["test", "broken"]);
    test.expect_code(2);
    assert!(
        test.stderr.contains("broken/case.json: missing field"),
        "{test}"
    );
}

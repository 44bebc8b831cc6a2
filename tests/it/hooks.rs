//! Hooks (issue 26): a `before_tool` hook blocks a call, rewrites its arguments (checked
//! against the schema again), or asks a person (escalation → approve → the call runs
//! once); a failing or slow hook blocks unless `on_error = "allow"`; `after_tool` can
//! withhold a result; the decision survives kill -9 at every crash point without the
//! hook running twice (the hook counts its invocations); and a PreToolUse script from
//! Claude Code's documentation works unchanged.

use crate::common::{Project, tool_result};
use serde_json::{Value, json};

/// A tool that records each run (`calls.log`) and its arguments (`args.json`).
const TOOL: &str = r#"
[tools.refund]
description = "Refund an order"
input_schema = { type = "object", properties = { order_id = { type = "string" }, amount = { type = "integer" } }, required = ["order_id", "amount"] }
command = ["sh", "-c", "cat > args.json; echo ran >> calls.log; echo '{\"refunded\": true}'"]
idempotent = true
"#;

/// A hook script: counts its runs in `hook.log`, saves its input, then does `body`.
fn hook(p: &Project, body: &str) {
    p.script(
        "hooks/policy.sh",
        &format!("#!/bin/sh\ncat > hook-input.json\necho run >> hook.log\n{body}\n"),
    );
}

/// tools.toml with [`TOOL`] and one `before_tool` hook (`extra` keys added to it).
fn project(hook_body: &str, extra: &str) -> Project {
    let p = Project::new();
    p.fast_tools(&format!(
        "{TOOL}\n[hooks]\nbefore_tool = [{{ command = [\"sh\", \"hooks/policy.sh\"], tools = [\"ref*\"]{extra} }}]\n"
    ));
    hook(&p, hook_body);
    p.model_script(json!([
        {"tool_calls": [{"name": "refund", "args": {"order_id": "ORD-1", "amount": 500}}]},
        {"text": "done"}
    ]));
    p.task("", "Refund order ORD-1.");
    p
}

fn runs_of(p: &Project, file: &str) -> usize {
    p.lines(file)
}

#[test]
fn a_before_tool_hook_blocks_the_call_and_the_model_reads_its_reason() {
    let p = project("echo 'refunds over 100 need a manager' >&2; exit 2", "");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(
        (&content["error"], &content["class"]),
        (&json!("blocked_by_hook"), &json!("guard"))
    );
    let message = content["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("blocked by hook before_tool[0]: refunds over 100 need a manager"),
        "{message}"
    );
    assert!(
        content["hint"]
            .as_str()
            .unwrap_or_default()
            .starts_with("A policy hook blocked"),
        "{content}"
    );
    assert_eq!((runs_of(&p, "calls.log"), runs_of(&p, "hook.log")), (0, 1));
    // The hook read Claude Code's fields.
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(p.path().join("hook-input.json")).unwrap())
            .unwrap();
    assert_eq!(
        (
            &input["hook_event_name"],
            &input["tool_name"],
            &input["tool_input"],
            &input["tool_use_id"]
        ),
        (
            &json!("PreToolUse"),
            &json!("refund"),
            &json!({"order_id": "ORD-1", "amount": 500}),
            &json!("call_0_0")
        )
    );
    assert_eq!(input["session_id"], show["id"]);
}

#[test]
fn a_rewritten_input_is_checked_against_the_schema_again() {
    let cap = r#"echo '{"hookSpecificOutput": {"permissionDecision": "allow", "updatedInput": {"order_id": "ORD-1", "amount": 100}}}'"#;
    let p = project(cap, "");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    assert!(!tool_result(&show, "call_0_0").1);
    let args: Value =
        serde_json::from_str(&std::fs::read_to_string(p.path().join("args.json")).unwrap())
            .unwrap();
    assert_eq!(
        args,
        json!({"order_id": "ORD-1", "amount": 100}),
        "the tool ran with the hook's input"
    );

    let broken = r#"echo '{"updatedInput": {"order_id": "ORD-1", "amount": "all"}}'"#;
    let p = project(broken, "");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    let message = content["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("rewrote the arguments of refund into ones its schema refuses")
            && message.contains("/amount"),
        "{message}"
    );
    assert_eq!(runs_of(&p, "calls.log"), 0);
}

#[test]
fn ask_waits_for_a_person_and_the_call_runs_once_after_approval() {
    let p = project(
        r#"echo '{"permissionDecision": "ask", "permissionDecisionReason": "large refund"}'"#,
        "",
    );
    let run = p.run(&["start", "task.md", "--json"]);
    let v = run.expect_code(3).json();
    assert_eq!(v["status"], "awaiting_approval");
    let esc = v["escalation_id"].as_str().expect("escalation").to_string();
    let id = v["run_id"].as_str().unwrap().to_string();
    // The person reads why the hook asked, in the summary and the handover.
    let shown = p
        .run(&["escalations", "show", &esc, "--json"])
        .expect_code(0)
        .json();
    let summary = shown["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains("hook before_tool[0] asks: large refund"),
        "{summary}"
    );
    p.run(&["escalations", "resolve", &esc, "--approve"])
        .expect_code(0);
    let done = p.run(&["resume", &id, "--json"]);
    assert_eq!(done.expect_code(0).json()["status"], "completed");
    assert_eq!((runs_of(&p, "calls.log"), runs_of(&p, "hook.log")), (1, 1));
}

#[test]
fn a_denied_ask_is_approval_denied_and_nothing_runs() {
    let p = project(r#"echo '{"permissionDecision": "ask"}'"#, "");
    let v = p.run(&["start", "task.md", "--json"]).expect_code(3).json();
    let esc = v["escalation_id"].as_str().unwrap().to_string();
    let shown = p
        .run(&["escalations", "show", &esc, "--json"])
        .expect_code(0)
        .json();
    let summary = shown["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains("hook before_tool[0] asks for a person's approval"),
        "{summary}"
    );
    p.run(&["escalations", "resolve", &esc, "--deny", "not today"])
        .expect_code(0);
    let id = v["run_id"].as_str().unwrap().to_string();
    p.run(&["resume", &id]).expect_code(0);
    let (content, _) = tool_result(&p.show(&id), "call_0_0");
    assert_eq!(content["error"], "approval_denied");
    assert_eq!((runs_of(&p, "calls.log"), runs_of(&p, "hook.log")), (0, 1));
}

#[test]
fn a_failing_or_slow_hook_blocks_unless_it_allows_errors() {
    for (body, extra, runs) in [
        ("exit 1", "", 0),
        ("sleep 5", r#", timeout = "300ms""#, 0),
        ("exit 1", r#", on_error = "allow""#, 1),
    ] {
        let p = project(body, extra);
        let (run, show) = p.start(&[]);
        run.expect_code(0);
        assert_eq!(runs_of(&p, "calls.log"), runs, "{body} {extra}");
        if runs == 0 {
            let (content, _) = tool_result(&show, "call_0_0");
            assert_eq!(content["error"], "blocked_by_hook", "{body} {extra}");
        }
    }
}

#[test]
fn an_after_tool_hook_can_withhold_a_result() {
    let p = Project::new();
    p.fast_tools(&format!(
        "{TOOL}\n[hooks]\nafter_tool = [{{ command = [\"sh\", \"hooks/policy.sh\"] }}]\n"
    ));
    hook(
        &p,
        r#"echo '{"decision": "block", "reason": "results are audited first"}'"#,
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "refund", "args": {"order_id": "ORD-1", "amount": 5}}]},
        {"text": "done"}
    ]));
    p.task("", "Refund.");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert!(
        content["message"]
            .as_str()
            .unwrap_or_default()
            .contains("withheld its result: results are audited first")
    );
    assert_eq!((runs_of(&p, "calls.log"), runs_of(&p, "hook.log")), (1, 1));
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(p.path().join("hook-input.json")).unwrap())
            .unwrap();
    assert_eq!(
        (&input["hook_event_name"], &input["tool_response"]),
        (&json!("PostToolUse"), &json!({"refunded": true}))
    );
}

/// kill -9 (abort) at each crash point a hooked call passes, then resume: the hook
/// ran at most once, and exactly once wherever it got to run; the run completes.
#[test]
fn a_hooks_decision_survives_a_crash_at_every_point_without_running_twice() {
    // (point, hook runs, tool runs): a hook that was spawned and left no decision is
    // not run again — the call is blocked as after a failed hook.
    let cases = [
        ("after_tool_intent", 1, 1),
        ("after_hook_started", 0, 0),
        ("after_hook_ran", 1, 0),
        ("after_hook_decided", 1, 1),
        ("after_tool_effect", 1, 2),
        ("inside_commit", 1, 2),
        ("after_commit", 1, 1),
    ];
    for (point, hook_runs, tool_runs) in cases {
        let p = project("exit 0", "");
        let crashed = p.run_env(&["start", "task.md"], &[("AGENTRUN_CRASH_AT", point)]);
        assert_ne!(
            crashed.code, 0,
            "{point}: the crash point was not reached\n{crashed}"
        );
        let id = p.only_run();
        let done = p.run(&["resume", &id, "--json"]);
        assert_eq!(done.expect_code(0).json()["status"], "completed", "{point}");
        assert_eq!(
            (runs_of(&p, "hook.log"), runs_of(&p, "calls.log")),
            (hook_runs, tool_runs),
            "{point}: (hook runs, tool runs)"
        );
    }
}

/// An `idempotent = true` hook (one that only decides) whose decision was lost — at
/// `after_hook_started` (spawned, not yet run) and `after_hook_ran` (ran, decision not
/// written) — is asked again on resume instead of counting as failed: the call runs.
#[test]
fn an_idempotent_hooks_lost_decision_is_asked_again() {
    for (point, hook_runs) in [("after_hook_started", 1), ("after_hook_ran", 2)] {
        let p = project("exit 0", ", idempotent = true");
        let crashed = p.run_env(&["start", "task.md"], &[("AGENTRUN_CRASH_AT", point)]);
        assert_ne!(crashed.code, 0, "{point}: not reached\n{crashed}");
        let id = p.only_run();
        let done = p.run(&["resume", &id, "--json"]);
        assert_eq!(done.expect_code(0).json()["status"], "completed", "{point}");
        assert_eq!(
            (runs_of(&p, "hook.log"), runs_of(&p, "calls.log")),
            (hook_runs, 1),
            "{point}: (hook runs, tool runs)"
        );
    }
}

/// The "bash command validator" PreToolUse example of Claude Code's hooks
/// documentation, unchanged: a tool named `Bash` with a `command` argument.
const CLAUDE_CODE_VALIDATOR: &str = r#"#!/usr/bin/env python3
import json
import re
import sys

# Define validation rules as a list of (regex pattern, message) tuples
VALIDATION_RULES = [
    (
        r"\bgrep\b(?!.*\|)",
        "Use 'rg' (ripgrep) instead of 'grep' for better performance and features",
    ),
    (
        r"\bfind\s+\S+\s+-name\b",
        "Use 'rg --files | rg pattern' or 'rg --files -g pattern' instead of 'find -name' for better performance",
    ),
]


def validate_command(command: str) -> list[str]:
    issues = []
    for pattern, message in VALIDATION_RULES:
        if re.search(pattern, command):
            issues.append(message)
    return issues


try:
    input_data = json.load(sys.stdin)
except json.JSONDecodeError as e:
    print(f"Error: Invalid JSON input: {e}", file=sys.stderr)
    sys.exit(1)

tool_name = input_data.get("tool_name", "")
tool_input = input_data.get("tool_input", {})
command = tool_input.get("command", "")

if tool_name != "Bash" or not command:
    sys.exit(1)

# Validate the command
issues = validate_command(command)

if issues:
    for message in issues:
        print(f"• {message}", file=sys.stderr)
    # Exit code 2 blocks tool call and shows stderr to Claude
    sys.exit(2)
"#;

#[test]
fn claude_codes_documented_pretooluse_validator_works_unchanged() {
    let p = Project::new();
    p.script("hooks/bash_validator.py", CLAUDE_CODE_VALIDATOR);
    p.fast_tools(
        r#"
[tools.Bash]
description = "Run a shell command"
input_schema = { type = "object", properties = { command = { type = "string" } }, required = ["command"] }
command = ["sh", "-c", "cat > /dev/null; echo ran >> calls.log; echo ok"]
idempotent = true

[hooks]
before_tool = [{ command = ["python3", "hooks/bash_validator.py"], tools = ["Bash"] }]
"#,
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "Bash", "args": {"command": "grep -r TODO src"}}]},
        {"tool_calls": [{"name": "Bash", "args": {"command": "rg TODO src"}}]},
        {"text": "done"}
    ]));
    p.task("", "Find the TODOs.");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let (blocked, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert!(
        blocked["message"]
            .as_str()
            .unwrap_or_default()
            .contains("• Use 'rg' (ripgrep) instead of 'grep'"),
        "{blocked}"
    );
    assert!(!tool_result(&show, "call_1_0").1);
    assert_eq!(runs_of(&p, "calls.log"), 1);
}

#[test]
fn before_model_can_stop_a_run_and_run_end_is_told_how_it_ended() {
    let p = Project::new();
    p.fast_tools(&format!(
        "{TOOL}\n[hooks]\nbefore_model = [{{ command = [\"sh\", \"hooks/policy.sh\"] }}]\nrun_end = [{{ command = [\"sh\", \"hooks/end.sh\"] }}]\n"
    ));
    // The second request is refused: the quota is one model call.
    hook(
        &p,
        "[ \"$(wc -l < hook.log)\" -gt 1 ] && { echo 'model quota used up' >&2; exit 2; }; exit 0",
    );
    p.script("hooks/end.sh", "#!/bin/sh\ncat > end-input.json\n");
    p.model_script(json!([
        {"tool_calls": [{"name": "refund", "args": {"order_id": "ORD-1", "amount": 5}}]},
        {"text": "done"}
    ]));
    p.task("", "Refund.");
    let (run, _) = p.start(&[]);
    let v = run.expect_code(1).json();
    let reason = v["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("hook before_model[0] blocked the model request: model quota used up"),
        "{reason}"
    );
    let end: Value =
        serde_json::from_str(&std::fs::read_to_string(p.path().join("end-input.json")).unwrap())
            .unwrap();
    assert_eq!(
        (&end["hook_event_name"], &end["status"], &end["session_id"]),
        (&json!("SessionEnd"), &json!("failed"), &v["run_id"])
    );
}

#[test]
fn a_hook_whose_program_cannot_start_is_bad_config_before_anything_runs() {
    let p = project("exit 0", "");
    p.fast_tools(&format!(
        "{TOOL}\n[hooks]\nbefore_tool = [{{ command = [\"./hooks/missing.sh\"] }}]\n"
    ));
    for args in [&["tools", "check"][..], &["start", "task.md"][..]] {
        let run = p.run(args);
        run.expect_code(2);
        assert!(
            run.stderr
                .contains("hooks.before_tool[0].command[0]: `./hooks/missing.sh` does not exist"),
            "{args:?}: {run}"
        );
    }
    assert_eq!(runs_of(&p, "calls.log"), 0);
}

/// A model that inflates an argument a deny hook quotes makes the hook's answer longer
/// than its output cap; the cut answer no longer parses, and it must not read as an
/// allow (docs/security.md, Hooks).
#[test]
fn a_deny_answer_cut_at_the_output_cap_still_denies() {
    let quote = r#"python3 -c 'import json; i = json.load(open("hook-input.json")); print(json.dumps({"permissionDecision": "deny", "permissionDecisionReason": "refusing " + json.dumps(i["tool_input"])}))'"#;
    let p = project(quote, "");
    let huge = "A".repeat(70 * 1024);
    p.model_script(json!([
        {"tool_calls": [{"name": "refund", "args": {"order_id": huge, "amount": 5}}]},
        {"text": "done"}
    ]));
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error, "{content}");
    assert_eq!(content["error"], "blocked_by_hook", "{content}");
    let message = content["message"].as_str().unwrap_or_default();
    assert!(message.contains("more than its output cap"), "{message}");
    assert_eq!((runs_of(&p, "calls.log"), runs_of(&p, "hook.log")), (0, 1));
}

/// Text, JSON of the wrong shape, or an unknown decision from a gating hook is no
/// decision: the call is blocked unless the hook says `on_error = "allow"`.
#[test]
fn a_gating_hooks_malformed_answer_blocks_unless_it_allows_errors() {
    for (body, extra, runs) in [
        ("echo 'looks fine to me'", "", 0),
        (r#"echo '{"permissionDecision": "yes please"}'"#, "", 0),
        (r#"echo '{"permissionDecision": "deny"'"#, "", 0),
        ("kill -9 $$", "", 0),
        ("echo 'looks fine to me'", r#", on_error = "allow""#, 1),
    ] {
        let p = project(body, extra);
        let (run, show) = p.start(&[]);
        run.expect_code(0);
        assert_eq!(runs_of(&p, "calls.log"), runs, "{body} {extra}");
        if runs == 0 {
            let (content, _) = tool_result(&show, "call_0_0");
            assert_eq!(content["error"], "blocked_by_hook", "{body}: {content}");
        }
    }
}

/// A hook on `send_*` is asked when `send_email` is reached as another tool's fallback,
/// not only when the model names it (docs/security.md, Hooks).
#[test]
fn a_hook_on_send_blocks_the_fallback_hop_to_send_email() {
    let p = Project::new();
    p.fast_tools(
        r#"
[tools.notify_user]
description = "Tell the customer"
input_schema = { type = "object", properties = { to = { type = "string" }, text = { type = "string" } }, required = ["to", "text"] }
command = ["sh", "-c", "cat > /dev/null; echo down >&2; exit 1"]
idempotent = true
fallback = [{ tool = "send_email", map = { to = "to", text = "body" } }]

[tools.send_email]
description = "Send an email"
input_schema = { type = "object", properties = { to = { type = "string" }, body = { type = "string" } }, required = ["to", "body"] }
command = ["sh", "-c", "cat > /dev/null; echo sent >> calls.log; echo '{\"sent\": true}'"]
idempotent = true

[hooks]
before_tool = [{ command = ["sh", "hooks/policy.sh"], tools = ["send_*"] }]
"#,
    );
    hook(&p, "echo 'no outbound mail from agents' >&2; exit 2");
    p.model_script(json!([
        {"tool_calls": [{"name": "notify_user", "args": {"to": "a@example.com", "text": "hi"}}]},
        {"text": "done"}
    ]));
    p.task("", "Tell the customer.");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error, "{content}");
    assert_eq!(runs_of(&p, "calls.log"), 0, "send_email ran: {content}");
    assert_eq!(runs_of(&p, "hook.log"), 1);
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(p.path().join("hook-input.json")).unwrap())
            .unwrap();
    assert_eq!(
        (
            &input["tool_name"],
            &input["tool_input"],
            &input["tool_use_id"]
        ),
        (
            &json!("send_email"),
            &json!({"to": "a@example.com", "body": "hi"}),
            &json!("call_0_0")
        )
    );
}

/// Arguments a person changes while approving are a new question for the hooks: a
/// hook that asked about the model's arguments is asked again about the person's, and
/// its deny stands (docs/security.md, Hooks).
#[test]
fn a_call_modified_on_approval_is_asked_of_its_hooks_again() {
    let p = project(
        r#"grep -q '"amount": *900' hook-input.json && { echo 'over the limit' >&2; exit 2; }; echo '{"permissionDecision": "ask"}'"#,
        "",
    );
    let v = p.run(&["start", "task.md", "--json"]).expect_code(3).json();
    let esc = v["escalation_id"].as_str().unwrap().to_string();
    let id = v["run_id"].as_str().unwrap().to_string();
    p.run(&[
        "escalations",
        "resolve",
        &esc,
        "--modify",
        r#"{"order_id": "ORD-1", "amount": 900}"#,
    ])
    .expect_code(0);
    p.run(&["resume", &id]).expect_code(0);
    let (content, _) = tool_result(&p.show(&id), "call_0_0");
    assert_eq!(content["error"], "blocked_by_hook", "{content}");
    assert_eq!((runs_of(&p, "calls.log"), runs_of(&p, "hook.log")), (0, 2));
}

//! The human queue end to end: breakers, stuck loops, degradation, approvals,
//! questions, tool bugs and lost outcomes — raised by real runs, resolved through the
//! CLI, and continued with `resume`.

use crate::common::{Project, Run, notes, tool_results};
use serde_json::{Value, json};

/// A tool that logs each invocation (one line with its stdin) and exits with `$1`.
const LOGGING_TOOL: &str = r#"#!/bin/sh
input=$(cat)
echo "$input" >> "$(basename "$0").log"
code=${1:-0}
if [ "$code" = "0" ]; then printf '{"ok": true, "got": %s}\n' "$input"; else echo "failing with $code" >&2; fi
exit "$code"
"#;

fn project(tools: &str, turns: Value) -> Project {
    let p = Project::new();
    p.script("tool.sh", LOGGING_TOOL);
    p.write("tools.toml", tools);
    p.model_script(turns);
    p.task("max_steps = 20", "Handle it.");
    p
}

fn invocations(p: &Project) -> Vec<Value> {
    std::fs::read_to_string(p.path().join("tool.sh.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("logged JSON"))
        .collect()
}

fn call(name: &str, args: Value) -> Value {
    json!({"tool_calls": [{"name": name, "args": args}], "usage": {"input": 10, "output": 2}})
}

fn text(t: &str) -> Value {
    json!({"text": t, "usage": {"input": 10, "output": 2}})
}

fn start(p: &Project) -> (Run, Value) {
    let r = p.run(&["start", "task.md", "--json"]);
    let v = r.json();
    (r, v)
}

fn escalation(p: &Project, id: &Value) -> Value {
    let id = id.as_str().expect("escalation id");
    p.run(&["escalations", "show", id, "--json"])
        .expect_code(0)
        .json()
}

const POLICY: &str = "[policy]\nbreaker_threshold = 3\ndisable_after = 10\nstuck_repeats = 3\n";

#[test]
fn breaker_trips_after_three_identical_failures_and_the_fourth_never_reaches_the_tool() {
    let tools = format!(
        "{POLICY}[tools.lookup]\ndescription = \"l\"\ninput_schema = {{ type = \"object\" }}\ncommand = [\"sh\", \"tool.sh\", \"66\"]\n"
    );
    let same = json!({"a": 1, "b": 2});
    let p = project(
        &tools,
        json!([
            call("lookup", same.clone()),
            call("lookup", same.clone()),
            call("lookup", same),
            // The same call with its keys in another order: the same digest.
            call("lookup", json!({"b": 2, "a": 1})),
            text("I could not find it; handing over.")
        ]),
    );
    let (r, v) = start(&p);
    r.expect_code(3);
    assert_eq!(
        (v["status"].as_str(), v["steps"].as_u64()),
        (Some("escalated"), Some(3))
    );
    assert_eq!(invocations(&p).len(), 3);
    let e = escalation(&p, &v["escalation_id"]);
    assert_eq!(
        (e["kind"].as_str(), e["status"].as_str()),
        (Some("breaker_open"), Some("open"))
    );
    assert!(
        e["summary"]
            .as_str()
            .unwrap()
            .contains("lookup failed 3 times with the same arguments"),
        "{e}"
    );

    let id = v["run_id"].as_str().unwrap();
    // Still open: resume refuses with exit 3.
    p.run(&["resume", id]).expect_code(3);
    p.run(&[
        "escalations",
        "resolve",
        e["id"].as_str().unwrap(),
        "--reply",
        "the lookup service is down today",
    ])
    .expect_code(0);
    let v = p.run(&["resume", id, "--json"]).expect_code(0).json();
    assert_eq!(v["status"], "completed");
    assert_eq!(
        invocations(&p).len(),
        3,
        "the 4th identical call must not reach the tool"
    );
    let show = p.show(id);
    let results = tool_results(&show);
    assert_eq!(results[3]["error"], "circuit_open");
    assert_eq!(results[3]["class"], "guard");
    let reply = show["messages"].as_array().unwrap().iter().any(|m| {
        m["role"] == "user"
            && m["content"][0]["text"]
                .as_str()
                .unwrap_or("")
                .contains("the lookup service is down today")
    });
    assert!(reply, "the person's reply is in the transcript");
}

#[test]
fn approving_a_breaker_closes_the_circuit() {
    let tools = format!(
        "{POLICY}[tools.lookup]\ndescription = \"l\"\ninput_schema = {{ type = \"object\" }}\ncommand = [\"sh\", \"tool.sh\", \"66\"]\n"
    );
    let a = json!({"q": 1});
    let p = project(
        &tools,
        json!([
            call("lookup", a.clone()),
            call("lookup", a.clone()),
            call("lookup", a.clone()),
            call("lookup", a),
            text("done")
        ]),
    );
    let (_, v) = start(&p);
    p.run(&[
        "escalations",
        "resolve",
        v["escalation_id"].as_str().unwrap(),
        "--approve",
    ])
    .expect_code(0);
    p.run(&["resume", v["run_id"].as_str().unwrap()])
        .expect_code(0);
    assert_eq!(
        invocations(&p).len(),
        4,
        "after --approve the call may reach the tool again"
    );
}

#[test]
fn repeated_identical_calls_are_nudged_then_escalated() {
    let tools = format!(
        "{POLICY}[tools.echo]\ndescription = \"e\"\ninput_schema = {{ type = \"object\" }}\ncommand = [\"sh\", \"tool.sh\"]\n"
    );
    let same = call("echo", json!({"x": 1}));
    let turns: Vec<Value> = std::iter::repeat_n(same, 6).chain([text("done")]).collect();
    let p = project(&tools, json!(turns));
    let (r, v) = start(&p);
    r.expect_code(3);
    let show = p.show(v["run_id"].as_str().unwrap());
    let nudges = notes(&show);
    assert_eq!(nudges.len(), 1, "one nudge before the escalation");
    assert_eq!(nudges[0].0, 3);
    assert!(nudges[0].1.contains("the same call repeated"), "{nudges:?}");
    let e = escalation(&p, &v["escalation_id"]);
    assert_eq!(e["kind"], "stuck");
    assert_eq!(v["steps"], 6);
}

#[test]
fn alternating_calls_are_detected_as_oscillation() {
    let tools = format!(
        "{POLICY}[tools.echo]\ndescription = \"e\"\ninput_schema = {{ type = \"object\" }}\ncommand = [\"sh\", \"tool.sh\"]\n"
    );
    let (a, b) = (
        call("echo", json!({"x": "a"})),
        call("echo", json!({"x": "b"})),
    );
    let turns = json!([a, b, a, b, a, b, text("done")]);
    let p = project(&tools, turns);
    let (r, v) = start(&p);
    r.expect_code(0);
    let show = p.show(v["run_id"].as_str().unwrap());
    let notes = notes(&show);
    let (nudge_step, nudge) = notes.first().expect("a nudge");
    assert_eq!(*nudge_step, 6);
    assert!(nudge.contains("alternating between two calls"), "{nudge}");
}

#[test]
fn the_same_error_with_different_arguments_is_nudged() {
    let tools = format!(
        "{POLICY}[tools.lookup]\ndescription = \"l\"\ninput_schema = {{ type = \"object\" }}\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; echo no such order >&2; exit 66\"]\n"
    );
    let turns = json!([
        call("lookup", json!({"id": 1})),
        call("lookup", json!({"id": 2})),
        call("lookup", json!({"id": 3})),
        text("done")
    ]);
    let p = project(&tools, turns);
    let (r, v) = start(&p);
    r.expect_code(0);
    let show = p.show(v["run_id"].as_str().unwrap());
    let notes = notes(&show);
    let (_, nudge) = notes.first().expect("a nudge");
    assert!(nudge.contains("the same error repeated"), "{nudge}");
}

#[test]
fn when_every_tool_is_withdrawn_the_answer_is_degraded_and_disclosed() {
    let tools = "[policy]\ndisable_after = 2\nbreaker_threshold = 5\n[tools.kb]\ndescription = \"k\"\ninput_schema = { type = \"object\" }\ncommand = [\"sh\", \"tool.sh\", \"69\"]\nattempts = 1\n";
    let turns = json!([
        call("kb", json!({"q": 1})),
        call("kb", json!({"q": 2})),
        text("I could not check the knowledge base, so this is unverified: probably 30 days.")
    ]);
    let p = project(tools, turns);
    let (r, v) = start(&p);
    r.expect_code(0);
    assert_eq!(v["status"], "completed");
    assert!(v["reason"].as_str().unwrap().starts_with("degraded"), "{v}");
    let show = p.show(v["run_id"].as_str().unwrap());
    let system: Vec<String> = notes(&show).into_iter().map(|(_, text)| text).collect();
    assert!(
        system[0].contains("`kb` failed 2 times and has been withdrawn"),
        "{system:?}"
    );
    assert!(
        system[1].contains("No tools are available any more"),
        "{system:?}"
    );
}

#[test]
fn when_every_tool_is_withdrawn_an_all_tools_failed_report_is_raised_and_the_run_completes() {
    let tools = "[policy]\ndisable_after = 2\nbreaker_threshold = 5\n[tools.kb]\ndescription = \"k\"\ninput_schema = { type = \"object\" }\ncommand = [\"sh\", \"tool.sh\", \"69\"]\nattempts = 1\n";
    let turns = json!([
        call("kb", json!({"q": 1})),
        call("kb", json!({"q": 2})),
        text("I could not check the knowledge base, so this is unverified: probably 30 days.")
    ]);
    let p = project(tools, turns);
    let (r, v) = start(&p);
    r.expect_code(0);
    assert_eq!(v["status"], "completed");
    assert_eq!(v["escalation_id"], Value::Null, "the report does not pause");
    let list = p.run(&["escalations", "list", "--json"]).json();
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list[0]["kind"], "all_tools_failed");
    assert_eq!(list[0]["run_id"], v["run_id"]);
    let e = escalation(&p, &list[0]["id"]);
    assert_eq!(
        e["detail"]["tools"],
        json!([{"tool": "kb", "failures": 2}]),
        "{e}"
    );
    let problem = e["detail"]["handover"]["problem"]
        .as_str()
        .unwrap_or_default();
    assert!(problem.contains("kb (2 failures)"), "{problem}");
    let runs = p.run(&["runs", "list", "--json"]).json();
    assert_eq!(runs[0]["status"], "completed");
}

const SEND_TOOLS: &str = "[tools.send]\ndescription = \"send\"\ninput_schema = { type = \"object\", properties = { to = { type = \"string\" } }, required = [\"to\"] }\ncommand = [\"sh\", \"tool.sh\"]\napproval = \"always\"\n";

fn approval_project() -> (Project, String, String) {
    let p = project(
        SEND_TOOLS,
        json!([
            call("send", json!({"to": "dana@example.com"})),
            text("sent")
        ]),
    );
    let (r, v) = start(&p);
    r.expect_code(3);
    assert_eq!(v["status"], "awaiting_approval");
    assert!(invocations(&p).is_empty(), "never run before approval");
    let e = escalation(&p, &v["escalation_id"]);
    assert_eq!(e["kind"], "approval_required");
    assert_eq!(e["detail"]["args"], json!({"to": "dana@example.com"}));
    (
        p,
        v["run_id"].as_str().unwrap().to_string(),
        e["id"].as_str().unwrap().to_string(),
    )
}

#[test]
fn an_approved_call_runs_exactly_once() {
    let (p, run, esc) = approval_project();
    p.run(&["escalations", "resolve", &esc, "--approve", "--by", "ops"])
        .expect_code(0);
    p.run(&["resume", &run]).expect_code(0);
    assert_eq!(invocations(&p), vec![json!({"to": "dana@example.com"})]);
    let e = escalation(&p, &json!(esc));
    assert_eq!(
        (e["status"].as_str(), e["resolved_by"].as_str()),
        (Some("resolved"), Some("ops"))
    );
    // Resuming a completed run does not run anything again.
    p.run(&["resume", &run]).expect_code(0);
    assert_eq!(invocations(&p).len(), 1);
}

#[test]
fn a_modified_call_runs_with_the_new_arguments_and_the_model_is_told() {
    let (p, run, esc) = approval_project();
    p.run(&[
        "escalations",
        "resolve",
        &esc,
        "--modify",
        r#"{"to": "dana.r@example.com"}"#,
    ])
    .expect_code(0);
    p.run(&["resume", &run]).expect_code(0);
    assert_eq!(invocations(&p), vec![json!({"to": "dana.r@example.com"})]);
    let results = tool_results(&p.show(&run));
    assert_eq!(
        results[0]["args_modified_by_person"],
        json!({"to": "dana.r@example.com"})
    );
}

#[test]
fn a_denied_call_never_runs_and_the_model_sees_approval_denied() {
    let (p, run, esc) = approval_project();
    p.run(&["escalations", "resolve", &esc, "--deny", "wrong customer"])
        .expect_code(0);
    p.run(&["resume", &run]).expect_code(0);
    assert!(invocations(&p).is_empty());
    let results = tool_results(&p.show(&run));
    assert_eq!(
        (results[0]["error"].as_str(), results[0]["class"].as_str()),
        (Some("approval_denied"), Some("guard"))
    );
    assert!(
        results[0]["message"]
            .as_str()
            .unwrap()
            .contains("wrong customer")
    );
}

#[test]
fn decisions_are_checked_and_recorded_once() {
    let (p, _run, esc) = approval_project();
    let bad = p.run(&["escalations", "resolve", &esc, "--modify", r#"{"to": 5}"#]);
    bad.expect_code(2);
    assert!(
        bad.stderr.contains("do not fit send's input_schema"),
        "{bad}"
    );
    let wrong = p.run(&["escalations", "resolve", &esc, "--reply", "ok"]);
    wrong.expect_code(2);
    assert!(wrong.stderr.contains("--reply does not apply"), "{wrong}");
    p.run(&["escalations", "resolve", &esc, "--approve"])
        .expect_code(0);
    let twice = p.run(&["escalations", "resolve", &esc, "--deny", "no"]);
    twice.expect_code(2);
    assert!(twice.stderr.contains("already resolved"), "{twice}");
    p.run(&["escalations", "resolve", "999", "--approve"])
        .expect_code(2);
}

#[test]
fn an_approval_covers_only_that_call() {
    // The same arguments in a later step need a new approval.
    let p = project(
        SEND_TOOLS,
        json!([
            call("send", json!({"to": "a@x"})),
            call("send", json!({"to": "a@x"})),
            text("sent twice")
        ]),
    );
    let (_, v) = start(&p);
    let run = v["run_id"].as_str().unwrap();
    p.run(&[
        "escalations",
        "resolve",
        v["escalation_id"].as_str().unwrap(),
        "--approve",
    ])
    .expect_code(0);
    let v2 = p.run(&["resume", run, "--json"]).expect_code(3).json();
    assert_ne!(v2["escalation_id"], v["escalation_id"]);
    assert_eq!(invocations(&p).len(), 1);
}

#[test]
fn ask_user_pauses_and_the_reply_becomes_the_result() {
    let p = project(
        SEND_TOOLS,
        json!([
            call("ask_user", json!({"question": "Which email should I use?"})),
            text("thanks")
        ]),
    );
    let (r, v) = start(&p);
    r.expect_code(3);
    let e = escalation(&p, &v["escalation_id"]);
    assert_eq!(
        (e["kind"].as_str(), e["detail"]["question"].as_str()),
        (Some("question"), Some("Which email should I use?"))
    );
    let list = p
        .run(&["escalations", "list", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(list.as_array().unwrap().len(), 1);
    p.run(&[
        "escalations",
        "resolve",
        e["id"].as_str().unwrap(),
        "--reply",
        "dana@example.com",
    ])
    .expect_code(0);
    let run = v["run_id"].as_str().unwrap();
    p.run(&["resume", run]).expect_code(0);
    assert_eq!(
        tool_results(&p.show(run))[0],
        json!({"answer": "dana@example.com"})
    );
    assert!(
        p.run(&["escalations", "list", "--json"])
            .json()
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        p.run(&["escalations", "list", "--all", "--json"])
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

const GATED_FALLBACK: &str = "[tools.primary]\ndescription = \"p\"\ninput_schema = { type = \"object\", properties = { q = { type = \"string\" } } }\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; echo ran >> primary.log; exit 69\"]\nattempts = 1\nfallback = [{ tool = \"risky\" }]\n[tools.risky]\ndescription = \"r\"\ninput_schema = { type = \"object\", properties = { q = { type = \"string\" } } }\ncommand = [\"sh\", \"tool.sh\"]\napproval = \"always\"\n";

/// A run paused before its gated fallback `risky`: (project, run id, escalation id).
fn paused_at_a_gated_fallback() -> (Project, String, String) {
    let p = project(
        GATED_FALLBACK,
        json!([call("primary", json!({"q": "x"})), text("done")]),
    );
    let (r, v) = start(&p);
    r.expect_code(3);
    assert!(invocations(&p).is_empty(), "the gated fallback did not run");
    let e = escalation(&p, &v["escalation_id"]);
    assert_eq!(
        (
            e["detail"]["tool"].as_str(),
            e["detail"]["requested_tool"].as_str()
        ),
        (Some("risky"), Some("primary"))
    );
    let run = v["run_id"].as_str().unwrap().to_string();
    (p, run, e["id"].as_str().unwrap().to_string())
}

fn primary_runs(p: &Project) -> usize {
    std::fs::read_to_string(p.path().join("primary.log"))
        .unwrap()
        .lines()
        .count()
}

#[test]
fn a_fallback_that_needs_approval_pauses_and_runs_once_approved() {
    let (p, run, esc) = paused_at_a_gated_fallback();
    p.run(&["escalations", "resolve", &esc, "--approve"])
        .expect_code(0);
    p.run(&["resume", &run]).expect_code(0);
    assert_eq!(invocations(&p).len(), 1);
    assert_eq!(primary_runs(&p), 1, "the failed primary is not tried again");
    let result = &tool_results(&p.show(&run))[0];
    assert_eq!(
        (result["via"].as_str(), result["stale"].as_bool()),
        (Some("risky"), Some(false))
    );
}

#[test]
fn a_denied_fallback_never_runs_and_the_primary_is_not_retried() {
    let (p, run, esc) = paused_at_a_gated_fallback();
    p.run(&["escalations", "resolve", &esc, "--deny", "too risky today"])
        .expect_code(0);
    p.run(&["resume", &run]).expect_code(0);
    assert!(invocations(&p).is_empty());
    assert_eq!(primary_runs(&p), 1);
    let result = &tool_results(&p.show(&run))[0];
    assert_eq!(result["error"], "approval_denied");
    assert!(
        result["message"]
            .as_str()
            .unwrap()
            .contains("too risky today"),
        "{result}"
    );
}

#[test]
fn a_pattern_in_the_arguments_requires_approval() {
    let tools = "[policy]\napproval_patterns = [\"drop table\"]\n[tools.sql]\ndescription = \"s\"\ninput_schema = { type = \"object\" }\ncommand = [\"sh\", \"tool.sh\"]\n";
    let p = project(
        tools,
        json!([
            call("sql", json!({"q": "select 1"})),
            call("sql", json!({"q": "DROP TABLE users"})),
            text("done")
        ]),
    );
    let (r, v) = start(&p);
    r.expect_code(3);
    assert_eq!(invocations(&p), vec![json!({"q": "select 1"})]);
    assert_eq!(
        escalation(&p, &v["escalation_id"])["detail"]["args"],
        json!({"q": "DROP TABLE users"})
    );
}

#[test]
fn a_tool_bug_is_reported_for_its_owner_and_the_run_goes_on() {
    let tools = "[tools.broken]\ndescription = \"b\"\ninput_schema = { type = \"object\" }\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; echo Traceback >&2; exit 70\"]\n";
    let p = project(
        tools,
        json!([
            call("broken", json!({})),
            text("the tool is broken; handing over")
        ]),
    );
    let (r, v) = start(&p);
    r.expect_code(0);
    assert_eq!(v["escalation_id"], Value::Null);
    let list = p.run(&["escalations", "list", "--json"]).json();
    assert_eq!(list[0]["kind"], "tool_bug");
    let result = &tool_results(&p.show(v["run_id"].as_str().unwrap()))[0];
    assert_eq!(
        (result["error"].as_str(), result["class"].as_str()),
        (Some("tool_bug"), Some("permanent"))
    );
}

#[test]
fn a_lost_outcome_is_escalated_and_a_persons_account_goes_to_the_model() {
    // A non-idempotent tool that kills agentrun after its side effect: the outcome is lost.
    let p = Project::new();
    p.script("send.sh", "#!/bin/sh\ncat > /dev/null\necho sent >> sent.log\nif [ ! -f crashed ]; then touch crashed; kill -9 \"$PPID\"; fi\necho '\"sent\"'\n");
    p.write("tools.toml", "[tools.send]\ndescription = \"s\"\ninput_schema = { type = \"object\" }\ncommand = [\"sh\", \"send.sh\"]\n\
         # The tool kills agentrun (its parent) to stand for a crash: a sandboxed tool may not.\n\
         sandbox = \"off\"\n");
    p.model_script(json!([call("send", json!({})), text("done")]));
    p.task("", "Send it.");
    p.run(&["start", "task.md"]);
    let run = p.only_run();
    let v = p.run(&["resume", &run, "--json"]).expect_code(3).json();
    let e = escalation(&p, &v["escalation_id"]);
    assert_eq!(e["kind"], "outcome_unknown");
    p.run(&[
        "escalations",
        "resolve",
        e["id"].as_str().unwrap(),
        "--reply",
        "the email went out at 10:02",
    ])
    .expect_code(0);
    p.run(&["resume", &run]).expect_code(0);
    assert_eq!(
        std::fs::read_to_string(p.path().join("sent.log"))
            .unwrap()
            .lines()
            .count(),
        1,
        "never re-run"
    );
    let show = p.show(&run);
    assert_eq!(
        tool_results(&show)[0],
        json!({"reported_by_person": "the email went out at 10:02"})
    );
    let noted = show["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["event"] == "note" && e["kind"] == "outcome_unknown");
    assert!(
        noted,
        "the lost outcome is in the trace: {}",
        show["events"]
    );
}

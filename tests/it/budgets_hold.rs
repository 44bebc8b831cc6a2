//! Issue 22, budgets that hold: a stream that reports no usage (a compatible server
//! without `stream_options.include_usage`) still counts against `max_tokens` and
//! `max_cost`, through an estimate (about four characters a token) that `--json`,
//! `runs show` and its `usage` say is one. The stream is the recorded OpenAI one
//! (`openai/08`) with its usage chunk taken out, answering every step with the same
//! two tool calls, whose tool prints 4,000 characters each time. And `max_duration`
//! stops a streamed model turn in flight.

use crate::common::{Project, Run, runtime};
use serde_json::Value;
use std::time::{Duration, Instant};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/providers");

/// The recorded stream of two tool calls, without the chunk that carries usage.
fn stream_without_usage() -> String {
    let file = format!("{FIXTURES}/openai/08_stream_parallel_tool_calls.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let body = v["response"]["body_text"].as_str().unwrap();
    let events: Vec<&str> = body
        .split("\n\n")
        .filter(|e| !e.contains("\"usage\":{"))
        .collect();
    assert!(
        events.len() < body.split("\n\n").count(),
        "the usage chunk was there"
    );
    events.join("\n\n")
}

const TOOLS: &str = r#"
[tools.secret_retrieval_tool]
description = "A tool that requires a password to retrieve a secret."
input_schema = { type = "object", properties = { password = { type = "string" } }, required = ["password"] }
command = ["sh", "-c", "cat > /dev/null; head -c 4000 /dev/zero | tr '\\0' 'x'"]
"#;

/// `start --json` of a task with `front` against a server that never reports usage.
fn run(front: &str) -> (Project, Run) {
    run_delayed(front, Duration::ZERO)
}

/// The same, each answer starting after `delay`.
fn run_delayed(front: &str, delay: Duration) -> (Project, Run) {
    let rt = runtime();
    let server = rt.block_on(MockServer::start());
    rt.block_on(
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_raw(stream_without_usage().into_bytes(), "text/event-stream")
                    .set_delay(delay),
            )
            .mount(&server),
    );
    let p = Project::new();
    p.write("tools.toml", TOOLS);
    p.write(
        "task.md",
        &format!("+++\nmodel = \"openai:gpt-4o\"\nmax_steps = 8\n{front}\n+++\nGet the secret.\n"),
    );
    let mut cmd = p.command(&["start", "task.md", "--json"]);
    cmd.env("OPENAI_BASE_URL", format!("{}/v1", server.uri()))
        .env("OPENAI_API_KEY", "sk-test-estimate");
    let out = Run::from_output(cmd.output().expect("spawn agentrun"));
    (p, out)
}

/// The run says its usage is estimated in `--json`, `runs show` and `runs show --json`.
fn assert_marked_estimated(p: &Project, v: &Value) {
    assert_eq!(v["tokens"]["estimated"], true, "{v}");
    let id = v["run_id"].as_str().unwrap();
    let show = p.show(id);
    assert_eq!(show["usage"]["estimated"], true, "{}", show["usage"]);
    let human = p.run(&["runs", "show", id]);
    assert!(human.stdout.contains("estimated"), "{human}");
}

#[test]
fn the_cost_budget_trips_on_estimated_usage() {
    let (p, r) = run("max_cost = 0.01");
    let v = r.expect_code(4).json();
    assert_eq!(v["status"], "budget_exhausted");
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.starts_with("cost budget spent"), "{reason}");
    assert!(v["steps"].as_u64().unwrap() < 8, "{v}");
    assert!(v["cost_usd"].as_f64().unwrap() >= 0.01, "{v}");
    assert_marked_estimated(&p, &v);
}

#[test]
fn the_token_budget_trips_on_estimated_usage() {
    let (p, r) = run("max_tokens = 4000");
    let v = r.expect_code(4).json();
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.starts_with("token budget"), "{reason}");
    let used = v["tokens"]["input"].as_u64().unwrap() + v["tokens"]["output"].as_u64().unwrap();
    assert!(used >= 4000, "{v}");
    assert!(v["steps"].as_u64().unwrap() < 8, "{v}");
    assert_marked_estimated(&p, &v);
}

/// A 3 s time budget against a streamed model turn that would take 20 s: the request
/// is dropped at the deadline (the run stops in about 3 s, not 20), nothing of it kept.
#[test]
fn the_time_budget_stops_a_streamed_turn_in_flight() {
    let started = Instant::now();
    let (p, r) = run_delayed("max_duration = \"3s\"", Duration::from_secs(20));
    let took = started.elapsed();
    let v = r.expect_code(4).json();
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.starts_with("time budget spent: 3s"), "{reason}");
    assert!(
        took < Duration::from_secs(12),
        "took {took:?}: the turn was waited for"
    );
    let show = p.show(v["run_id"].as_str().unwrap());
    assert_eq!(show["steps"], 0, "no step of the dropped turn is kept");
    eprintln!("3 s time budget against a 20 s streamed turn: stopped after {took:?}");
}

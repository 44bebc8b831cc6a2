//! Requests a prompt cache can reuse (issue 23): within a run every request starts
//! with the same bytes — system prompt and tool list — and the transcript of one
//! request is the start of the next; what changes per step (the budget line) comes
//! last, as user-role text. Checked on what a local server really received from
//! `agentrun start`, answering with the recorded OpenAI and Anthropic responses.

use crate::common::{Project, Run};
use serde_json::{Value, json};
use std::sync::Mutex;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/providers");
const OPENAI: [&str; 3] = [
    "openai/01_single_tool_call",
    "openai/02_tool_result_then_second_tool_call",
    "openai/03_tool_results_final_answer",
];
const ANTHROPIC: [&str; 3] = [
    "anthropic/01_single_tool_use",
    "anthropic/02_tool_result_then_tool_use",
    "anthropic/03_tool_results_final_answer",
];

/// A recorded response body.
fn recorded(name: &str) -> Value {
    let file = format!("{FIXTURES}/{name}.json");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    v["response"]["body"].clone()
}

/// Answers each request with the next recorded body, keeping every request body.
struct Replay {
    answers: Vec<Value>,
    seen: Mutex<Vec<Value>>,
}

impl Respond for &'static Replay {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).expect("JSON request");
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.push(body);
        match self.answers.get(seen.len() - 1) {
            Some(answer) => ResponseTemplate::new(200).set_body_json(answer),
            None => ResponseTemplate::new(500).set_body_string("no more recorded answers"),
        }
    }
}

const TOOLS: &str = r#"
[defaults]
timeout = "5s"

[tools.lookup_population]
description = "Returns the current population of the specified fictional country"
input_schema = { type = "object", properties = { country = { type = "string" } }, required = ["country"] }
command = ["sh", "-c", "cat >/dev/null; echo 123124"]

[tools.can_have_dragons]
description = "Whether a country of that population can have dragons"
input_schema = { type = "object", properties = { population = { type = "integer" } } }
command = ["sh", "-c", "cat >/dev/null; echo true"]

[tools.passphrase_test_tool]
description = "Returns the secret phrase for a passphrase"
input_schema = { type = "object", properties = { passphrase = { type = "string" } }, required = ["passphrase"] }
command = ["sh", "-c", "cat >/dev/null; printf 'The cake is a lie.'"]
"#;

/// `agentrun start` of a three-step task on `model` against `replay`; the run and the
/// request bodies received.
fn run_against(model: &str, api_path: &str, answers: &[&str]) -> (Project, Run, Vec<Value>) {
    let replay: &'static Replay = Box::leak(Box::new(Replay {
        answers: answers.iter().map(|a| recorded(a)).collect(),
        seen: Mutex::new(Vec::new()),
    }));
    let rt = crate::common::runtime();
    let server = rt.block_on(MockServer::start());
    rt.block_on(
        Mock::given(method("POST"))
            .and(path(api_path))
            .respond_with(replay)
            .mount(&server),
    );
    let p = Project::new();
    p.write("tools.toml", TOOLS);
    p.write(
        "task.md",
        &format!("+++\nmodel = \"{model}\"\nmax_steps = 5\nstream = false\n+++\nCan the country of Crumpet have dragons?\n"),
    );
    let mut cmd = p.command(&["start", "task.md", "--json"]);
    cmd.env("OPENAI_BASE_URL", format!("{}/v1", server.uri()))
        .env("OPENAI_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let run = Run::from_output(cmd.output().expect("spawn agentrun"));
    let seen = replay
        .seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    (p, run, seen)
}

/// A request as a list of (role, block) strings in the order a model reads them, cache
/// markers left out (they move to the newest message by design).
fn blocks(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("cache_control");
        }
        v.to_string()
    };
    for t in body["tools"].as_array().into_iter().flatten() {
        out.push(format!("tool {}", strip(t)));
    }
    match &body["system"] {
        Value::String(s) => out.push(format!("system {s}")),
        Value::Array(parts) => out.extend(parts.iter().map(|p| format!("system {}", strip(p)))),
        _ => {}
    }
    for m in body["messages"].as_array().into_iter().flatten() {
        let role = m["role"].as_str().unwrap_or("?");
        match &m["content"] {
            Value::Array(parts) => {
                out.extend(parts.iter().map(|p| format!("{role} {}", strip(p))));
            }
            _ => out.push(format!("{role} {}", strip(m))),
        }
    }
    out
}

/// Every request of the run: no system message but the first; the budget line is the
/// end of the last message and nowhere else; and everything before that last message
/// (or block) is, byte for byte, the start of the next request.
fn assert_stable_prefix(bodies: &[Value]) {
    assert!(bodies.len() >= 3, "three steps: {bodies:#?}");
    for (i, b) in bodies.iter().enumerate() {
        let text = b.to_string();
        assert_eq!(
            text.matches("Budget: this is step").count(),
            1,
            "one budget line per request: {b:#}"
        );
        let all = blocks(b);
        let last = all.last().expect("a message");
        assert!(
            last.contains(&format!("Budget: this is step {} of 5", i + 1)),
            "the budget line comes last: {last}"
        );
        let systems = b["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "system").count());
        assert!(systems <= 1, "one system message at most: {b:#}");
        if let Some(next) = bodies.get(i + 1) {
            let next = blocks(next);
            let kept = &all[..all.len() - 1];
            assert_eq!(
                kept,
                &next[..kept.len()],
                "request {} is not the start of the next",
                i + 1
            );
        }
    }
}

#[test]
fn openai_requests_keep_one_prefix_and_put_the_budget_line_last() {
    let (_p, run, bodies) = run_against("openai:gpt-4o-mini", "/v1/chat/completions", &OPENAI);
    assert_eq!(run.expect_code(0).json()["answer"], json!("YES"), "{run}");
    assert_stable_prefix(&bodies);
}

#[test]
fn anthropic_requests_keep_one_prefix_and_put_the_budget_line_last() {
    let (_p, run, bodies) = run_against("anthropic:claude-sonnet-4-5", "/v1/messages", &ANTHROPIC);
    run.expect_code(0);
    assert_stable_prefix(&bodies);
}

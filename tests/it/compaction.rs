//! Context compaction (issue 15): a long run against a mock OpenAI server with a small
//! context window. The mock plays an agent that needs two facts found early and late
//! to finish, and an ideal summariser (it keeps every `FACT:` it is shown), and it
//! checks every request it receives: each tool call has its result, and no request
//! is larger than the window leaves room for.

use crate::common::{Project, Run, events};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const WINDOW: u64 = 4000;
const MAX_OUTPUT: u64 = 256;

/// What the mock saw, per request: a summary request or a step, and its size in
/// tokens (bytes/4 of the body, which is also what it reports as usage).
#[derive(Debug, Clone, Default)]
struct Seen {
    requests: Vec<(bool, u64)>,
    /// The lowest step index (`i`) present in each step request.
    oldest_call: Vec<Option<u64>>,
}

#[derive(Clone)]
struct Agent {
    steps: u64,
    seen: Arc<Mutex<Seen>>,
}

impl Agent {
    fn turn(&self, n: u64, body: &str) -> Value {
        if n + 1 >= self.steps {
            let found = body.contains("FACT:code=XYZ42") && body.contains("FACT:city=Oslo");
            let text = if found {
                "The code is XYZ42 and the city is Oslo."
            } else {
                "I lost the facts."
            };
            return json!({"role": "assistant", "content": text});
        }
        let note = match n {
            3 => "FACT:code=XYZ42",
            n if n == self.steps * 3 / 4 => "FACT:city=Oslo",
            _ => "",
        };
        let args = json!({"i": n, "note": note, "pad": "x".repeat(300)});
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call_{n}"), "type": "function",
            "function": {"name": "echo", "arguments": args.to_string()}}]})
    }
}

impl Respond for Agent {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body = String::from_utf8_lossy(&req.body).to_string();
        let v: Value = serde_json::from_str(&body).unwrap();
        let tokens = (body.len() as u64).div_ceil(4);
        let system = v["messages"][0]["content"].as_str().unwrap_or("");
        let summary = system.starts_with("You are compacting");
        let message = if summary {
            let mut facts: Vec<&str> = Vec::new();
            for (i, _) in body.match_indices("FACT:") {
                let end = body[i..]
                    .find(|c: char| !(c.is_alphanumeric() || ":=".contains(c)))
                    .map_or(body.len(), |e| i + e);
                if !facts.contains(&&body[i..end]) {
                    facts.push(&body[i..end]);
                }
            }
            json!({"role": "assistant", "content": format!("Facts found: {}", facts.join(" "))})
        } else {
            let calls: Vec<u64> = v["messages"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
                .map(|c| {
                    let args: Value =
                        serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
                    args["i"].as_u64().unwrap()
                })
                .collect();
            self.seen
                .lock()
                .unwrap()
                .oldest_call
                .push(calls.iter().min().copied());
            let next = calls.iter().max().map_or(0, |i| i + 1);
            self.turn(next, &body)
        };
        self.seen.lock().unwrap().requests.push((summary, tokens));
        let finish = if message["tool_calls"].is_array() {
            "tool_calls"
        } else {
            "stop"
        };
        ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": tokens, "completion_tokens": 20}
        }))
    }
}

struct Scenario {
    // Keeps the mock server running.
    _rt: tokio::runtime::Runtime,
    server: MockServer,
    project: Project,
    seen: Arc<Mutex<Seen>>,
}

impl Scenario {
    fn new(steps: u64) -> Scenario {
        let rt = crate::common::runtime();
        let server = rt.block_on(MockServer::start());
        let seen = Arc::new(Mutex::new(Seen::default()));
        let agent = Agent {
            steps,
            seen: seen.clone(),
        };
        rt.block_on(
            Mock::given(method("POST"))
                .and(path("/v1/chat/completions"))
                .and(crate::common::paired())
                .respond_with(agent)
                .mount(&server),
        );
        let project = Project::new();
        project.write(
            "tools.toml",
            r#"
[tools.echo]
description = "Echo the arguments back"
input_schema = { type = "object" }
command = ["cat"]
idempotent = true
"#,
        );
        project.write(
            "task.md",
            &format!(
                "+++\nmodel = \"openai:m\"\nstream = false\ncontext_window = {WINDOW}\n\
                 max_output_tokens = {MAX_OUTPUT}\nmax_steps = {}\nmax_tokens = 100000000\n+++\n\
                 Walk the steps and report the code and the city you find.\n",
                steps * 2
            ),
        );
        Scenario {
            _rt: rt,
            server,
            project,
            seen,
        }
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = self.project.command(args);
        cmd.env_remove("OPENAI_API_KEY")
            .env("OPENAI_BASE_URL", format!("{}/v1", self.server.uri()));
        for (k, v) in env {
            cmd.env(k, v);
        }
        Run::from_output(cmd.output().expect("spawn agentrun"))
    }

    fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }
}

/// Every request fits the room the window leaves for input; returns (summaries, steps).
fn check_sizes(seen: &Seen) -> (usize, usize) {
    let room = WINDOW - MAX_OUTPUT;
    let largest = seen.requests.iter().map(|r| r.1).max().unwrap_or(0);
    assert!(
        largest <= room,
        "a request of about {largest} tokens passed the room of {room}"
    );
    let summaries = seen.requests.iter().filter(|r| r.0).count();
    (summaries, seen.requests.len() - summaries)
}

#[test]
fn a_two_thousand_step_run_stays_under_a_small_window_and_the_summary_carries_the_facts() {
    let s = Scenario::new(2000);
    let started = std::time::Instant::now();
    let r = s.run(&["start", "task.md", "--json"], &[]);
    let v = r.expect_code(0).json();
    assert_eq!(
        v["answer"], "The code is XYZ42 and the city is Oslo.",
        "{r}"
    );
    let seen = s.seen();
    let (summaries, steps) = check_sizes(&seen);
    assert_eq!(steps, 2000);
    assert!(summaries >= 50, "{summaries} compactions");
    assert_eq!(v["steps"], (2000 + summaries) as u64);
    eprintln!(
        "2,000 steps, {summaries} compactions, largest request {} tokens, {:?}",
        seen.requests.iter().map(|r| r.1).max().unwrap(),
        started.elapsed()
    );
    // The full transcript stays in the database, with each summary at its step.
    let show = s.project.show(v["run_id"].as_str().unwrap());
    let calls = show["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1999);
    let notes = events(&show, "note")
        .into_iter()
        .filter(|e| e["kind"] == "compacted")
        .count();
    assert_eq!(notes, summaries);
    let compacted = show["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("[agentrun] Context compacted at step"))
        })
        .count();
    assert_eq!(compacted, summaries);
}

#[test]
fn a_crash_right_after_a_compaction_resumes_with_the_compacted_context_and_no_second_summary() {
    let s = Scenario::new(40);
    let crashed = s.run(
        &["start", "task.md", "--json"],
        &[("AGENTRUN_CRASH_AT", "after_compaction")],
    );
    assert_ne!(crashed.code, 0, "{crashed}");
    let before = s.seen();
    assert_eq!(check_sizes(&before).0, 1, "one summary before the crash");
    assert_eq!(before.requests.last().map(|r| r.0), Some(true));
    // The last step request before the summary held the run from step 0 on.
    assert_eq!(before.oldest_call.last(), Some(&Some(0)));

    let id = s.project.only_run();
    let resumed = s.run(&["resume", &id, "--json"], &[]);
    let v = resumed.expect_code(0).json();
    assert_eq!(v["answer"], "The code is XYZ42 and the city is Oslo.");
    let after = s.seen();
    check_sizes(&after);
    // The first request after the resume is a step, not a second summary, and it is
    // built from the compacted context: the early calls are gone from it.
    let first = &after.requests[before.requests.len()];
    assert!(!first.0, "the resume asked for the summary again");
    let oldest = after.oldest_call[before.oldest_call.len()];
    assert!(
        oldest.is_some_and(|i| i > 3),
        "the resumed request still holds early steps: {oldest:?}"
    );
}

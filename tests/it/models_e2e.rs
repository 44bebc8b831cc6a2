//! Real-model behaviour through the binary (issue 15, and the provider items of issue
//! 13): streaming with `--stream-json`, a cut stream retried and never journaled, model
//! settings from the front matter and the command line, the key checked up front, the
//! host named when it cannot be reached, and a heartbeat while waiting.

use crate::common::{Project, Run, events};
use serde_json::{Value, json};
use std::time::Duration;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const OPENAI_PATH: &str = "/v1/chat/completions";

struct Server {
    rt: tokio::runtime::Runtime,
    server: MockServer,
    project: Project,
}

impl Server {
    fn new(front: &str) -> Server {
        let rt = crate::common::runtime();
        let server = rt.block_on(MockServer::start());
        let project = Project::new();
        project.write("tools.toml", "");
        project.write(
            "task.md",
            &format!("+++\nmodel = \"openai:m\"\n{front}\n+++\nDo dragons live in Crumpet?\n"),
        );
        Server {
            rt,
            server,
            project,
        }
    }

    fn answer(&self, times: Option<u64>, response: ResponseTemplate) {
        let mut mock = Mock::given(method("POST"))
            .and(path(OPENAI_PATH))
            .and(crate::common::paired())
            .respond_with(response);
        if let Some(n) = times {
            mock = mock.up_to_n_times(n).with_priority(1);
        }
        self.rt.block_on(mock.mount(&self.server));
    }

    fn start(&self, extra: &[&str]) -> Run {
        let mut args = vec!["start", "task.md"];
        args.extend_from_slice(extra);
        let mut cmd = self.project.command(&args);
        cmd.env_remove("OPENAI_API_KEY")
            .env("OPENAI_BASE_URL", format!("{}/v1", self.server.uri()));
        Run::from_output(cmd.output().expect("spawn agentrun"))
    }

    fn bodies(&self) -> Vec<Value> {
        self.rt
            .block_on(self.server.received_requests())
            .unwrap()
            .iter()
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect()
    }
}

fn sse(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body.into_bytes(), "text/event-stream")
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

fn whole(pieces: &[&str]) -> String {
    let mut s: String = pieces
        .iter()
        .map(|p| chunk(json!({"content": p}), None))
        .collect();
    s.push_str(&chunk(json!({}), Some("stop")));
    s.push_str(&format!(
        "data: {}\n\ndata: [DONE]\n\n",
        json!({"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 4}})
    ));
    s
}

#[test]
fn stream_json_shows_the_answer_live_and_a_cut_stream_is_retried_not_journaled() {
    let s = Server::new("");
    // First attempt: two pieces, then the server closes without a finish reason.
    s.answer(
        Some(1),
        sse(format!(
            "{}{}",
            chunk(json!({"content": "No, "}), None),
            chunk(json!({"content": "drag"}), None)
        )),
    );
    s.answer(None, sse(whole(&["Yes, ", "dragons ", "live there."])));
    let run = s.start(&["--stream-json"]);
    run.expect_code(0);
    let lines: Vec<Value> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "text", "restart", "text", "text", "text"]);
    let streamed: String = lines[3..]
        .iter()
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, "Yes, dragons live there.");
    assert!(
        run.stdout.trim_end().ends_with("Yes, dragons live there."),
        "{run}"
    );
    let show = s.project.show(&s.project.only_run());
    let said: Vec<String> = show["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"][0]["text"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(said, ["Yes, dragons live there."]);
    let retries = events(&show, "model_retry");
    assert_eq!(retries.len(), 1, "{retries:#?}");
    assert!(
        retries[0]["error"]
            .as_str()
            .unwrap()
            .contains("stream ended before the response was complete"),
        "{}",
        retries[0]
    );
    assert_eq!(show["tokens"], json!({"input": 20, "output": 4}));
    let sent = s.bodies();
    assert_eq!(sent[0]["stream"], true);
}

#[test]
fn settings_come_from_the_front_matter_and_the_command_line_wins() {
    let s = Server::new(
        "max_output_tokens = 77\ntemperature = 0.5\ntool_choice = \"none\"\nstream = false\ntimeout = \"30s\"",
    );
    s.answer(
        None,
        ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1}})),
    );
    s.start(&[]).expect_code(0);
    s.start(&["--max-output-tokens", "99", "--temperature", "0"])
        .expect_code(0);
    let sent = s.bodies();
    assert_eq!(
        (&sent[0]["max_tokens"], &sent[0]["temperature"]),
        (&json!(77), &json!(0.5))
    );
    assert!(sent[0].get("stream").is_none(), "{}", sent[0]);
    // No tools offered, so no tool_choice either (the APIs reject one without tools).
    assert!(sent[0].get("tool_choice").is_none());
    assert_eq!(
        (&sent[1]["max_tokens"], &sent[1]["temperature"]),
        (&json!(99), &json!(0.0))
    );
}

#[test]
fn a_bad_setting_is_exit_2_naming_the_key() {
    let s = Server::new("idle_timeout = \"soon\"");
    let run = s.start(&[]);
    run.expect_code(2);
    assert!(run.stderr.contains("idle_timeout"), "{run}");
    let s = Server::new("temperature = 7.0");
    let run = s.start(&[]);
    run.expect_code(2);
    assert!(run.stderr.contains("temperature"), "{run}");
    let run = s.start(&["--tool-choice", "always"]);
    run.expect_code(2);
}

#[test]
fn a_public_endpoint_without_a_key_is_refused_before_anything_is_written() {
    let p = Project::new();
    p.write("tools.toml", "");
    p.write(
        "task.md",
        "+++\nmodel = \"openai:gpt-4o-mini\"\n+++\nhello\n",
    );
    let mut cmd = p.command(&["start", "task.md"]);
    cmd.env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL");
    let run = Run::from_output(cmd.output().unwrap());
    run.expect_code(2);
    assert!(run.stderr.contains("OPENAI_API_KEY"), "{run}");
    assert!(run.stderr.contains("api.openai.com"), "{run}");
    assert!(!p.db().exists(), "a database was written");
}

#[test]
fn waiting_on_a_slow_model_is_said_off_a_terminal() {
    let s = Server::new("stream = false");
    s.answer(
        None,
        ResponseTemplate::new(200)
            .set_body_json(json!({
                "choices": [{"message": {"content": "late"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1}}))
            .set_delay(Duration::from_millis(5600)),
    );
    let run = s.start(&[]);
    run.expect_code(0);
    let host = s.server.uri().trim_start_matches("http://").to_string();
    assert!(
        run.stderr
            .contains(&format!("still waiting for openai:m at {host} (5s")),
        "{run}"
    );
}

#[test]
fn a_turn_cut_at_the_output_limit_is_asked_again_and_nothing_is_left_pending() {
    let s = Server::new("stream = false\nmax_output_tokens = 50\nmax_output_tokens_retry = 400");
    // Twelve calls, the last one cut mid-arguments, then the limit.
    let mut calls: Vec<Value> = (0..12)
        .map(|i| {
            json!({"id": format!("c{i}"), "type": "function",
                   "function": {"name": "lookup", "arguments": "{\"q\": \"x\"}"}})
        })
        .collect();
    calls[11]["function"]["arguments"] = json!("{\"q\": \"x");
    s.answer(
        Some(1),
        ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"message": {"content": null, "tool_calls": calls}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 50}})),
    );
    s.answer(
        None,
        ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"message": {"content": "No dragons."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3}})),
    );
    let run = s.start(&["--json"]);
    let v = run.expect_code(0).json();
    assert_eq!(v["answer"], "No dragons.");
    assert_eq!(v["tokens"], json!({"input": 22, "output": 53}));
    let sent = s.bodies();
    assert_eq!(
        (&sent[0]["max_tokens"], &sent[1]["max_tokens"]),
        (&json!(50), &json!(400))
    );
    let show = s.project.show(v["run_id"].as_str().unwrap());
    assert_eq!(
        show["tool_calls"],
        json!([]),
        "no call journaled, none pending"
    );
    let notes = events(&show, "note");
    assert_eq!(notes.len(), 1, "{notes:#?}");
    assert_eq!(notes[0]["kind"], "truncated");
}

#[test]
fn each_model_retry_is_traced_at_the_time_it_happened() {
    // The retry keys are accepted in the front matter (backoff is under Retry-After).
    let s = Server::new(
        "stream = false\nmodel_attempts = 3\nmodel_backoff = \"10ms\"\nmodel_max_backoff = \"20ms\"\nmax_retry_after = \"5s\"\nmodel_cooldown = \"1m\"",
    );
    s.answer(
        Some(2),
        ResponseTemplate::new(503)
            .insert_header("retry-after", "1")
            .set_body_json(json!({"error": {"message": "busy"}})),
    );
    s.answer(
        None,
        ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1}})),
    );
    let v = s.start(&["--json"]).expect_code(0).json();
    let show = s.project.show(v["run_id"].as_str().unwrap());
    let at: Vec<String> = events(&show, "model_retry")
        .iter()
        .map(|e| e["at"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(at.len(), 2, "{show}");
    // One second apart (the server's Retry-After), not both stamped at write time.
    assert_ne!(at[0], at[1], "{at:?}");
}

#[test]
fn the_provider_timeout_is_set_in_the_front_matter_or_on_the_command_line() {
    for (front, flags) in [
        (
            "stream = false\nmodel_attempts = 1\ntimeout = \"300ms\"",
            &[][..],
        ),
        (
            "stream = false\nmodel_attempts = 1",
            &["--timeout", "300ms"][..],
        ),
    ] {
        let s = Server::new(front);
        s.answer(
            None,
            ResponseTemplate::new(200)
                .set_body_json(json!({"choices": [{"message": {"content": "late"},
                    "finish_reason": "stop"}]}))
                .set_delay(Duration::from_secs(20)),
        );
        let started = std::time::Instant::now();
        let run = s.start(flags);
        run.expect_code(1);
        assert!(run.stderr.contains("300ms"), "{run}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the 300ms limit was not applied ({flags:?})\n{run}"
        );
    }
}

/// Issue 15: tool attempts and backoffs are stamped when they happen, not when the
/// step's events are written (the two attempts are a Retry-After of 1 s apart).
#[test]
fn each_tool_attempt_is_traced_at_the_time_it_happened() {
    let rt = crate::common::runtime();
    let server = rt.block_on(MockServer::start());
    rt.block_on(
        Mock::given(method("GET"))
            .and(path("/kb"))
            .respond_with(ResponseTemplate::new(503).insert_header("retry-after", "1"))
            .up_to_n_times(1)
            .with_priority(1)
            .mount(&server),
    );
    rt.block_on(
        Mock::given(method("GET"))
            .and(path("/kb"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({"ok": true})))
            .mount(&server),
    );
    let p = Project::new();
    p.write(
        "tools.toml",
        &format!(
            "[tools.kb]\ndescription = \"kb\"\ninput_schema = {{ type = \"object\" }}\n\
             http = {{ method = \"GET\", url = \"{}/kb\" }}\nidempotent = true\n",
            server.uri()
        ),
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "kb", "args": {}}]},
        {"text": "done"}
    ]));
    p.task("", "Look it up.");
    let v = p.run(&["start", "task.md", "--json"]).expect_code(0).json();
    let show = p.show(v["run_id"].as_str().unwrap());
    let at: Vec<String> = events(&show, "tool_attempt")
        .iter()
        .map(|e| e["at"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(at.len(), 2, "{show}");
    assert_ne!(at[0], at[1], "{at:?}");
    // The JSON of an event is unchanged: the time is its `at`, nothing more.
    assert!(events(&show, "tool_attempt")[0].get("at_ms").is_none());
}

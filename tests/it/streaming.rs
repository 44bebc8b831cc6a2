//! Streaming (SSE) for both protocols: the recorded streams (openai 08, 09, 18 and
//! anthropic 09, 10, 18) parse to what was recorded, deltas reach the live view, and
//! the faults a stream can have — cut mid-token, stalled, a malformed event, an error
//! event — end as the right error, against a small local server that writes raw HTTP.

use agentrun::clock::FakeClock;
use agentrun::model::anthropic::{Anthropic, AnthropicConfig};
use agentrun::model::openai::{OpenAi, OpenAiConfig};
use agentrun::model::retry::{self, ModelRetryPolicy};
use agentrun::model::{
    ApiKey, Delta, LiveSink, Message, ModelError, ModelRequest, ModelResponse, Part, Provider,
    Role, StopReason, Timeouts, ToolChoice, Usage,
};
use agentrun::trace::{EventBuffer, TraceEvent};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/providers");

#[derive(Debug, Clone, Copy, PartialEq)]
enum Api {
    OpenAi,
    Anthropic,
}

fn provider(api: Api, base: &str, timeouts: Timeouts) -> Provider {
    match api {
        Api::OpenAi => Provider::OpenAi(
            OpenAi::new(OpenAiConfig {
                model: "m".into(),
                base_url: format!("{base}/v1"),
                api_key: ApiKey::new("sk-test"),
                timeouts,
                stream: true,
                temperature: None,
                tool_choice: None,
                prompt_cache: None,
            })
            .unwrap(),
        ),
        Api::Anthropic => Provider::Anthropic(
            Anthropic::new(AnthropicConfig {
                model: "m".into(),
                base_url: base.into(),
                api_key: ApiKey::new("sk-ant-test").unwrap(),
                timeouts,
                stream: true,
                temperature: None,
                tool_choice: None,
                prompt_cache: None,
            })
            .unwrap(),
        ),
    }
}

fn quick() -> Timeouts {
    Timeouts::all(Duration::from_secs(10))
}

/// Collects what a live view would show.
#[derive(Default)]
struct Seen(Mutex<Vec<Delta>>);

impl LiveSink for Seen {
    fn delta(&self, _model: &str, d: &Delta) {
        self.0.lock().unwrap().push(d.clone());
    }
}

impl Seen {
    fn text(&self) -> String {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|d| match d {
                Delta::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }
}

async fn ask(p: &Provider, live: &Seen) -> Result<ModelResponse, ModelError> {
    let msgs = [Message::text(Role::User, "hi")];
    p.complete(&ModelRequest {
        system: "",
        messages: &msgs,
        note: "",
        cache_key: "",
        tools: &[],
        max_output_tokens: 64,
        live: Some(live),
        purpose: agentrun::model::Purpose::Step,
        turns_left_out: 0,
        output: None,
        limits: None,
    })
    .await
}

fn recorded_stream(name: &str) -> String {
    let text = std::fs::read_to_string(format!("{FIXTURES}/{name}.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["response"]["body_text"].as_str().unwrap().to_string()
}

async fn serve_sse(api: Api, body: &str) -> MockServer {
    let server = MockServer::start().await;
    let p = match api {
        Api::OpenAi => "/v1/chat/completions",
        Api::Anthropic => "/v1/messages",
    };
    Mock::given(method("POST"))
        .and(path(p))
        .and(crate::common::paired())
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(body.as_bytes().to_vec(), "text/event-stream"),
        )
        .mount(&server)
        .await;
    server
}

async fn replay(api: Api, name: &str) -> (Result<ModelResponse, ModelError>, Seen, Value) {
    let server = serve_sse(api, &recorded_stream(name)).await;
    let seen = Seen::default();
    let r = ask(&provider(api, &server.uri(), quick()), &seen).await;
    let sent = server.received_requests().await.unwrap()[0]
        .body_json::<Value>()
        .unwrap();
    (r, seen, sent)
}

fn call(id: &str, password: &str) -> Part {
    Part::ToolCall {
        id: id.into(),
        name: "secret_retrieval_tool".into(),
        args: json!({"password": password}),
    }
}

// ---- the recorded streams ------------------------------------------------------------

#[tokio::test]
async fn openai_08_parallel_tool_call_deltas_are_assembled_with_usage_from_the_stream() {
    let (r, seen, sent) = replay(Api::OpenAi, "openai/08_stream_parallel_tool_calls").await;
    let r = r.unwrap();
    assert_eq!(
        r.message.content,
        [
            call("call_M26z19sncd7b4LBgzKRRbaUE", "mellon"),
            call("call_KPXe5NX7IcKkaBUhc6dto2QV", "radiance")
        ]
    );
    assert_eq!(r.stop, StopReason::ToolUse);
    assert_eq!(
        r.usage,
        Usage {
            input: 75,
            output: 53,
            cached: 0,
            cache_write: 0,
            ..Default::default()
        }
    );
    let calls: Vec<Delta> = seen.0.lock().unwrap().clone();
    let started = Delta::ToolCall {
        name: "secret_retrieval_tool".into(),
    };
    assert_eq!(calls, [started.clone(), started]);
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn openai_09_text_is_live_and_the_length_stop_is_kept() {
    let (r, seen, _) = replay(Api::OpenAi, "openai/09_stream_text_length").await;
    let r = r.unwrap();
    assert!(
        r.message
            .joined_text()
            .starts_with("Here is a list of all 50")
    );
    assert_eq!(seen.text(), r.message.joined_text());
    assert_eq!(r.stop, StopReason::MaxTokens);
    assert_eq!((r.usage.input, r.usage.output), (14, 50));
}

#[tokio::test]
async fn openai_18_an_error_inside_the_stream_is_an_error_not_a_turn() {
    let (r, _, _) = replay(Api::OpenAi, "openai/18_compat_openrouter_stream_error").await;
    let err = r.unwrap_err();
    assert!(
        matches!(&err, ModelError::Status { status: 400, message, .. } if message.contains("Token limit reached")),
        "{err:?}"
    );
    assert!(!err.is_transient());
}

#[tokio::test]
async fn anthropic_09_text_and_tool_use_blocks_are_assembled() {
    let (r, seen, sent) = replay(Api::Anthropic, "anthropic/09_stream_parallel_tool_use").await;
    let r = r.unwrap();
    assert_eq!(
        r.message.content,
        [
            Part::Text {
                text: "I'll retrieve the secrets for both passwords you provided.".into()
            },
            call("toolu_015cUijgET79LXjgeYQerN2h", "mellon"),
            call("toolu_01XZTimPexA7h3EVKesnKt5T", "radiance"),
        ]
    );
    assert_eq!(r.stop, StopReason::ToolUse);
    assert_eq!((r.usage.input, r.usage.output), (416, 109));
    assert_eq!(
        seen.text(),
        "I'll retrieve the secrets for both passwords you provided."
    );
    assert_eq!(sent["stream"], true);
}

#[tokio::test]
async fn anthropic_10_max_tokens_in_a_stream() {
    let (r, seen, _) = replay(Api::Anthropic, "anthropic/10_stream_max_tokens").await;
    let r = r.unwrap();
    assert_eq!(r.stop, StopReason::MaxTokens);
    assert_eq!((r.usage.input, r.usage.output), (15, 50));
    assert!(r.message.joined_text().ends_with("8. Delaware\n9"));
    assert_eq!(seen.text(), r.message.joined_text());
}

#[tokio::test]
async fn anthropic_18_an_overloaded_error_event_is_transient() {
    let (r, _, _) = replay(Api::Anthropic, "anthropic/18_stream_error_event_overloaded").await;
    let err = r.unwrap_err();
    assert!(
        matches!(&err, ModelError::Status { status: 529, .. }),
        "{err:?}"
    );
    assert!(err.is_transient());
}

#[tokio::test]
async fn a_server_that_ignores_stream_and_answers_json_is_read_as_json() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"message": {"content": "plain"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1}})))
        .mount(&server)
        .await;
    let r = ask(
        &provider(Api::OpenAi, &server.uri(), quick()),
        &Seen::default(),
    )
    .await
    .unwrap();
    assert_eq!(r.message.joined_text(), "plain");
}

#[tokio::test]
async fn settings_reach_the_wire_for_both_apis() {
    for api in [Api::OpenAi, Api::Anthropic] {
        let server = serve_sse(api, "").await;
        let p = match api {
            Api::OpenAi => Provider::OpenAi(
                OpenAi::new(OpenAiConfig {
                    model: "m".into(),
                    base_url: format!("{}/v1", server.uri()),
                    api_key: None,
                    timeouts: quick(),
                    stream: true,
                    temperature: Some(0.25),
                    tool_choice: Some(ToolChoice::Tool("lookup".into())),
                    prompt_cache: None,
                })
                .unwrap(),
            ),
            Api::Anthropic => Provider::Anthropic(
                Anthropic::new(AnthropicConfig {
                    model: "m".into(),
                    base_url: server.uri(),
                    api_key: ApiKey::new("k").unwrap(),
                    timeouts: quick(),
                    stream: true,
                    temperature: Some(0.25),
                    tool_choice: Some(ToolChoice::Tool("lookup".into())),
                    prompt_cache: None,
                })
                .unwrap(),
            ),
        };
        let tools = [agentrun::model::ToolSpec {
            name: "lookup".into(),
            description: "d".into(),
            input_schema: json!({"type": "object"}),
        }];
        let _ = p
            .complete(&ModelRequest {
                system: "",
                messages: &[Message::text(Role::User, "hi")],
                note: "",
                cache_key: "",
                tools: &tools,
                max_output_tokens: 7,
                live: None,
                purpose: agentrun::model::Purpose::Step,
                turns_left_out: 0,
                output: None,
                limits: None,
            })
            .await;
        let sent: Value = server.received_requests().await.unwrap()[0]
            .body_json()
            .unwrap();
        assert_eq!(sent["temperature"], 0.25, "{api:?}");
        let expected = match api {
            Api::OpenAi => json!({"type": "function", "function": {"name": "lookup"}}),
            Api::Anthropic => json!({"type": "tool", "name": "lookup"}),
        };
        assert_eq!(sent["tool_choice"], expected, "{api:?}");
    }
}

// ---- faults, against a raw local server ----------------------------------------------

/// What the raw server does with each connection, in order (the last one repeats).
#[derive(Clone)]
enum Script {
    /// Send these SSE bytes, then close (no end marker unless the bytes have one).
    Send(String),
    /// Send these bytes, then stay silent with the connection open.
    Stall(String),
    /// Send a keep-alive comment every 50 ms forever.
    Trickle,
}

/// A local HTTP server that answers every POST with a chunked `text/event-stream`
/// according to `scripts`; returns its base URL.
async fn raw_server(scripts: Vec<Script>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut n = 0;
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let script = scripts[n.min(scripts.len() - 1)].clone();
            n += 1;
            tokio::spawn(async move {
                read_request(&mut sock).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
                let _ = sock.write_all(head.as_bytes()).await;
                let chunk = |s: &str| format!("{:x}\r\n{s}\r\n", s.len());
                match script {
                    Script::Send(body) => {
                        let _ = sock.write_all(chunk(&body).as_bytes()).await;
                        if body.contains("[DONE]") || body.contains("message_stop") {
                            let _ = sock.write_all(b"0\r\n\r\n").await;
                        }
                        // Else: closed without the last chunk — cut mid-stream.
                    }
                    Script::Stall(body) => {
                        let _ = sock.write_all(chunk(&body).as_bytes()).await;
                        tokio::time::sleep(Duration::from_secs(30)).await;
                    }
                    Script::Trickle => loop {
                        if sock
                            .write_all(chunk(": ping\n\n").as_bytes())
                            .await
                            .is_err()
                        {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    },
                }
            });
        }
    });
    format!("http://{addr}")
}

async fn read_request(sock: &mut tokio::net::TcpStream) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        let Ok(n) = sock.read(&mut tmp).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&tmp[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return;
            }
        }
    }
}

fn openai_chunk(delta: Value, finish: Option<&str>) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

fn openai_full(text: &str) -> String {
    format!(
        "{}{}data: {}\n\ndata: [DONE]\n\n",
        openai_chunk(json!({"content": text}), None),
        openai_chunk(json!({}), Some("stop")),
        json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})
    )
}

/// A tool call whose arguments stop in the middle of a token.
fn openai_cut_mid_token() -> String {
    format!(
        "{}{}",
        openai_chunk(
            json!({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "t", "arguments": "{\"q\": \"par"}}]}),
            None
        ),
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"Pa"
    )
}

#[tokio::test]
async fn a_stream_cut_mid_token_is_transient_and_the_retry_answers_whole() {
    let base = raw_server(vec![
        Script::Send(openai_cut_mid_token()),
        Script::Send(openai_full("Paris")),
    ])
    .await;
    let models = [provider(Api::OpenAi, &base, quick())];
    let (clock, events) = (FakeClock::new(0), EventBuffer::default());
    let seen = Seen::default();
    let msgs = [Message::text(Role::User, "hi")];
    let req = ModelRequest {
        system: "",
        messages: &msgs,
        note: "",
        cache_key: "",
        tools: &[],
        max_output_tokens: 64,
        live: Some(&seen),
        purpose: agentrun::model::Purpose::Step,
        turns_left_out: 0,
        output: None,
        limits: None,
    };
    let policy = ModelRetryPolicy {
        attempts: 3,
        base: Duration::from_millis(10),
        max: Duration::from_secs(1),
        ..ModelRetryPolicy::default()
    };
    let r = retry::complete_with(&models, &req, &policy, &clock, &events)
        .await
        .unwrap();
    // Only the whole second answer: nothing of the cut first one.
    assert_eq!(r.message, Message::text(Role::Assistant, "Paris"));
    assert_eq!(r.stop, StopReason::EndTurn);
    let evs = events.take();
    assert!(
        matches!(&evs[..], [TraceEvent::ModelRetry { error, .. }] if error.contains("connection failed")),
        "{evs:?}"
    );
}

#[tokio::test]
async fn a_stream_cut_mid_token_without_retries_left_is_an_error_naming_the_host() {
    for api in [Api::OpenAi, Api::Anthropic] {
        let body = match api {
            Api::OpenAi => openai_cut_mid_token(),
            Api::Anthropic => "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Pa".to_string(),
        };
        let base = raw_server(vec![Script::Send(body)]).await;
        let err = ask(&provider(api, &base, quick()), &Seen::default())
            .await
            .unwrap_err();
        let host = base.trim_start_matches("http://");
        assert!(
            matches!(&err, ModelError::Connection { host: h, .. } if h == host),
            "{api:?}: {err:?}"
        );
        assert!(err.is_transient());
        assert!(err.to_string().contains(host), "{err}");
    }
}

#[tokio::test]
async fn a_stalled_stream_fails_on_the_idle_timeout() {
    let base = raw_server(vec![Script::Stall(openai_chunk(
        json!({"content": "thinking"}),
        None,
    ))])
    .await;
    let timeouts = Timeouts {
        connect: Duration::from_secs(5),
        idle: Duration::from_millis(300),
        total: Duration::from_secs(20),
    };
    let started = Instant::now();
    let seen = Seen::default();
    let err = ask(&provider(Api::OpenAi, &base, timeouts), &seen)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Timeout { idle: true, timeout, .. } if *timeout == Duration::from_millis(300)),
        "{err:?}"
    );
    assert!(err.is_transient());
    assert!(err.to_string().contains("idle_timeout"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(seen.text(), "thinking");
}

#[tokio::test]
async fn a_stream_that_never_ends_hits_the_overall_cap() {
    let base = raw_server(vec![Script::Trickle]).await;
    let timeouts = Timeouts {
        connect: Duration::from_secs(5),
        idle: Duration::from_millis(500),
        total: Duration::from_millis(700),
    };
    let started = Instant::now();
    let err = ask(&provider(Api::Anthropic, &base, timeouts), &Seen::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Timeout { idle: false, .. }),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_malformed_event_is_a_bad_response_not_a_turn() {
    for api in [Api::OpenAi, Api::Anthropic] {
        let base = raw_server(vec![Script::Send(
            "data: {\"choices\": [oops\n\ndata: [DONE]\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".into(),
        )])
        .await;
        let err = ask(&provider(api, &base, quick()), &Seen::default())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ModelError::BadResponse { message, .. } if message.contains("not JSON")),
            "{api:?}: {err:?}"
        );
        assert!(!err.is_transient());
    }
}

#[tokio::test]
async fn the_retry_schedule_rides_out_a_server_restart() {
    // A port with nothing listening (the server is "restarting"); it comes back after
    // 1.2 s. The schedule's minimum waits (0.1 + 0.2 + 0.4 + 0.8 s) outlast that.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = probe.local_addr().unwrap();
    drop(probe);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let listener = TcpListener::bind(addr).await.unwrap();
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                read_request(&mut sock).await;
                let body = openai_full("back");
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    let models = [provider(Api::OpenAi, &format!("http://{addr}"), quick())];
    let policy = ModelRetryPolicy {
        attempts: 6,
        base: Duration::from_millis(200),
        ..ModelRetryPolicy::default()
    };
    let events = EventBuffer::default();
    let msgs = [Message::text(Role::User, "hi")];
    let req = ModelRequest {
        system: "",
        messages: &msgs,
        note: "",
        cache_key: "",
        tools: &[],
        max_output_tokens: 64,
        live: None,
        purpose: agentrun::model::Purpose::Step,
        turns_left_out: 0,
        output: None,
        limits: None,
    };
    let r = retry::complete_with(
        &models,
        &req,
        &policy,
        &agentrun::clock::SystemClock,
        &events,
    )
    .await
    .unwrap();
    assert_eq!(r.message.joined_text(), "back");
    let refused = events
        .take()
        .iter()
        .filter(|e| matches!(e, TraceEvent::ModelRetry { reason: Some(r), .. } if r == "connection refused"))
        .count();
    assert!(refused >= 2, "{refused}");
}

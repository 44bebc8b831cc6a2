//! Issue 22, redaction of what a provider echoes: an API key inside an in-stream `error`
//! event (OpenAI's `error` object, Anthropic's `event: error`) or inside the streamed
//! answer text never reaches the database file, `runs show` (human and `--json`),
//! `runs export`, stderr, `--json` or `--stream-json`. The streams are the recorded ones
//! (`tests/fixtures/providers`), with the key put into the text the provider controls.

use crate::common::{Project, Run, runtime};
use serde_json::Value;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/providers");
const OPENAI_KEY: &str = "sk-proj-echoed-4f9a2c7e1b";
const ANTHROPIC_KEY: &str = "sk-ant-api03-echoed-8d3e5a";

fn recorded_stream(name: &str) -> String {
    let file = format!("{FIXTURES}/{name}.json");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let v: Value = serde_json::from_str(&text).unwrap();
    v["response"]["body_text"].as_str().unwrap().to_string()
}

/// A project whose task asks `model` once, against a local server answering every
/// request with the SSE `body`, run with `--json --stream-json`; returns what `start`
/// printed. The same is first run in the human view (progress lines on stderr, the
/// answer or error on stdout), which must not show the key either.
fn run_against(model: &str, body: String) -> (Project, Run) {
    let (p, human) = run_once(model, body.clone(), &["start", "task.md"]);
    for key in [OPENAI_KEY, ANTHROPIC_KEY] {
        assert!(!human.stdout.contains(key), "{human}");
        assert!(!human.stderr.contains(key), "{human}");
    }
    assert!(
        human.stderr.contains("agentrun"),
        "progress was shown: {human}"
    );
    assert_nowhere(&p, &human, OPENAI_KEY);
    assert_nowhere(&p, &human, ANTHROPIC_KEY);
    run_once(
        model,
        body,
        &["start", "task.md", "--json", "--stream-json"],
    )
}

fn run_once(model: &str, body: String, args: &[&str]) -> (Project, Run) {
    let rt = runtime();
    let server = rt.block_on(MockServer::start());
    for p in ["/v1/chat/completions", "/v1/messages"] {
        rt.block_on(
            Mock::given(method("POST"))
                .and(path(p))
                .respond_with(
                    ResponseTemplate::new(200)
                        .set_body_raw(body.clone().into_bytes(), "text/event-stream"),
                )
                .mount(&server),
        );
    }
    let project = Project::new();
    project.write(
        "task.md",
        &format!("+++\nmodel = \"{model}\"\ntools = []\nmax_steps = 2\n+++\nSay hi.\n"),
    );
    let mut cmd = project.command(args);
    cmd.env("OPENAI_BASE_URL", format!("{}/v1", server.uri()))
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env("ANTHROPIC_API_KEY", ANTHROPIC_KEY);
    let run = Run::from_output(cmd.output().expect("spawn agentrun"));
    (project, run)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The key is nowhere: not in what `start` printed, the database file and its WAL,
/// `runs show` (both views), `runs export`; and `[redacted]` stands where it was.
fn assert_nowhere(p: &Project, start: &Run, key: &str) {
    assert!(!start.stdout.contains(key), "stdout: {start}");
    assert!(!start.stderr.contains(key), "stderr: {start}");
    let id = p.only_run();
    let show = p.run(&["runs", "show", &id]);
    let show_json = p.run(&["runs", "show", &id, "--json"]);
    let export = p.run(&["runs", "export", &id]);
    for (what, out) in [
        ("show", &show),
        ("show --json", &show_json),
        ("export", &export),
    ] {
        out.expect_code(0);
        assert!(!out.stdout.contains(key), "{what}: {out}");
        assert!(!out.stderr.contains(key), "{what}: {out}");
    }
    assert!(
        show_json.stdout.contains("[redacted]"),
        "the echo is marked, not dropped: {show_json}"
    );
    assert!(
        !contains(&p.db_bytes(), key),
        "the database file holds the key"
    );
}

#[test]
fn a_key_echoed_in_an_openai_stream_error_event_is_redacted_everywhere() {
    let body = recorded_stream("openai/18_compat_openrouter_stream_error").replace(
        "\"message\":\"Token limit reached\"",
        &format!("\"message\":\"Token limit reached for key {OPENAI_KEY}\""),
    );
    assert!(body.contains(OPENAI_KEY));
    let (p, run) = run_against("openai:gpt-4o", body);
    assert_ne!(run.code, 0, "the error ends the run: {run}");
    assert!(run.stdout.contains("Token limit reached"), "{run}");
    assert_nowhere(&p, &run, OPENAI_KEY);
}

#[test]
fn a_key_echoed_in_an_anthropic_error_event_is_redacted_everywhere() {
    let body = recorded_stream("anthropic/18_stream_error_event_overloaded")
        .replace("overloaded_error", "invalid_request_error")
        .replace(
            "\"message\": \"Overloaded\"",
            &format!("\"message\": \"x-api-key {ANTHROPIC_KEY} is not allowed\""),
        );
    assert!(body.contains(ANTHROPIC_KEY));
    let (p, run) = run_against("anthropic:claude-sonnet-4-5", body);
    assert_ne!(run.code, 0, "the error ends the run: {run}");
    assert!(run.stdout.contains("is not allowed"), "{run}");
    assert_nowhere(&p, &run, ANTHROPIC_KEY);
}

/// The recorded OpenAI text stream, its first content delta replaced by the key split
/// over two deltas (a live view must not print the first half and then the second).
#[test]
fn a_key_echoed_in_streamed_openai_answer_text_is_redacted_everywhere() {
    let (a, b) = OPENAI_KEY.split_at(9);
    let body = recorded_stream("openai/09_stream_text_length")
        .replacen(
            "\"delta\":{\"content\":\"Here\"}",
            &format!("\"delta\":{{\"content\":\"Your key is {a}\"}}"),
            1,
        )
        .replacen(
            "\"delta\":{\"content\":\" is\"}",
            &format!("\"delta\":{{\"content\":\"{b} and it\"}}"),
            1,
        )
        .replace("\"finish_reason\":\"length\"", "\"finish_reason\":\"stop\"");
    assert!(body.contains(a) && body.contains(b));
    let (p, run) = run_against("openai:gpt-4o", body);
    run.expect_code(0);
    assert!(
        run.stdout.contains("Your key is [redacted] and it"),
        "{run}"
    );
    assert!(!run.stdout.contains(a), "half the key streamed: {run}");
    assert_nowhere(&p, &run, OPENAI_KEY);
}

#[test]
fn a_key_echoed_in_streamed_anthropic_answer_text_is_redacted_everywhere() {
    let (a, b) = ANTHROPIC_KEY.split_at(12);
    let body = recorded_stream("anthropic/10_stream_max_tokens")
        .replacen(
            "\"text\":\"Here are all \"",
            &format!("\"text\":\"Your key is {a}\""),
            1,
        )
        .replacen(
            "\"text\":\"50 U.S. states in\"",
            &format!("\"text\":\"{b} and it\""),
            1,
        )
        .replace(
            "\"stop_reason\":\"max_tokens\"",
            "\"stop_reason\":\"end_turn\"",
        );
    assert!(body.contains(a) && body.contains(b));
    let (p, run) = run_against("anthropic:claude-sonnet-4-5", body);
    run.expect_code(0);
    assert!(
        run.stdout.contains("Your key is [redacted] and it"),
        "{run}"
    );
    assert!(!run.stdout.contains(a), "half the key streamed: {run}");
    assert_nowhere(&p, &run, ANTHROPIC_KEY);
}

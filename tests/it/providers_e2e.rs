//! The providers end to end (issue 3): `agentrun start` with `openai:` and `anthropic:`
//! models against a local wiremock server answering with recorded real responses
//! (`tests/fixtures/providers`), through a real
//! tool call and back: the run completes with the fixture's answer, usage is summed,
//! the tool result goes where each API wants it, transient errors are retried, a
//! fallback model takes over, a truncated answer fails honestly, and the API key never
//! lands in the output, the database or stderr.
//!
//! The tools are named as in the recordings (`lookup_population`,
//! `passphrase_test_tool`), so the response bodies are used unchanged.

use crate::common::{Project, Run, events, journal, runtime, tool_result};
use serde_json::{Value, json};
use wiremock::matchers::{body_string_contains, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/providers");
const OPENAI_KEY: &str = "sk-test-secret";
const ANTHROPIC_KEY: &str = "sk-ant-test-secret-5e21c7";
const OPENAI_PATH: &str = "/v1/chat/completions";
const ANTHROPIC_PATH: &str = "/v1/messages";

/// A recorded exchange, e.g. `openai/01_single_tool_call`.
fn fixture(name: &str) -> Value {
    let file = format!("{FIXTURES}/{name}.json");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// The recorded response: its status and JSON body.
fn recorded(name: &str) -> ResponseTemplate {
    let f = fixture(name);
    let status = f["response"]["status"].as_u64().expect("status") as u16;
    ResponseTemplate::new(status).set_body_json(f["response"]["body"].clone())
}

/// The recorded response's usage, as agentrun counts it: (input, output).
fn usage_of(name: &str) -> (u64, u64) {
    let u = &fixture(name)["response"]["body"]["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or_else(|| panic!("{name}: usage.{k}"));
    if name.starts_with("openai/") {
        (n("prompt_tokens"), n("completion_tokens"))
    } else {
        (n("input_tokens"), n("output_tokens"))
    }
}

const TOOLS: &str = r#"
[defaults]
timeout = "5s"
backoff = "10ms"
max_backoff = "200ms"

[tools.lookup_population]
description = "Returns the current population of the specified fictional country"
input_schema = { type = "object", properties = { country = { type = "string" } }, required = ["country"] }
command = ["sh", "-c", "cat > args.json; echo 123124"]

[tools.passphrase_test_tool]
description = "Returns the secret phrase for a passphrase"
input_schema = { type = "object", properties = { passphrase = { type = "string" } }, required = ["passphrase"] }
command = ["sh", "-c", "cat > args.json; printf 'The cake is a lie.'"]
"#;

/// A project whose task uses `model` (a TOML value), with a local server standing in
/// for both APIs.
struct Api {
    rt: tokio::runtime::Runtime,
    server: MockServer,
    project: Project,
}

impl Api {
    fn new(model: &str) -> Api {
        let rt = runtime();
        let server = rt.block_on(MockServer::start());
        let project = Project::new();
        project.write("tools.toml", TOOLS);
        project.write(
            "task.md",
            &format!("+++\nmodel = {model}\nmax_steps = 5\n+++\nCan the country of Crumpet have dragons?\n"),
        );
        Api {
            rt,
            server,
            project,
        }
    }

    /// Answers POSTs to `api_path` with `response`; `when` narrows the match to request
    /// bodies containing it (and wins over mounts without one); `times` limits uses.
    fn answer(
        &self,
        api_path: &str,
        when: Option<&str>,
        times: Option<u64>,
        response: ResponseTemplate,
    ) {
        let mut mock = Mock::given(method("POST"))
            .and(path(api_path))
            .and(crate::common::paired());
        if let Some(text) = when {
            mock = mock.and(body_string_contains(text));
        }
        let mut mock = mock
            .respond_with(response)
            .with_priority(if when.is_some() { 1 } else { 2 });
        if let Some(n) = times {
            mock = mock.up_to_n_times(n);
        }
        self.rt.block_on(mock.mount(&self.server));
    }

    /// Runs `start task.md` with both APIs pointed at the server and the real
    /// providers' variables removed.
    fn start(&self, json: bool) -> Run {
        let mut args = vec!["start", "task.md"];
        if json {
            args.push("--json");
        }
        let mut cmd = self.project.command(&args);
        for var in [
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("OPENAI_BASE_URL", format!("{}/v1", self.server.uri()))
            .env("OPENAI_API_KEY", OPENAI_KEY)
            .env("ANTHROPIC_BASE_URL", self.server.uri())
            .env("ANTHROPIC_API_KEY", ANTHROPIC_KEY);
        let out = cmd.output().expect("spawn agentrun");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The bodies the server received at `api_path`, in order.
    fn bodies(&self, api_path: &str) -> Vec<Value> {
        self.requests(api_path)
            .iter()
            .map(|r| serde_json::from_slice(&r.body).expect("JSON request body"))
            .collect()
    }

    fn requests(&self, api_path: &str) -> Vec<wiremock::Request> {
        self.rt
            .block_on(self.server.received_requests())
            .expect("request recording is on")
            .into_iter()
            .filter(|r| r.url.path() == api_path)
            .collect()
    }

    /// Neither key anywhere agentrun writes: stdout, stderr, `runs show` (JSON and
    /// human) and every byte of the database.
    fn assert_no_keys(&self, run: &Run, id: &str) {
        let show_json = self.project.run(&["runs", "show", id, "--json"]);
        let show_human = self.project.run(&["runs", "show", id]);
        let db = String::from_utf8_lossy(&self.project.db_bytes()).into_owned();
        for key in [OPENAI_KEY, ANTHROPIC_KEY] {
            for (what, text) in [
                ("stdout", &run.stdout),
                ("stderr", &run.stderr),
                ("runs show --json", &show_json.stdout),
                ("runs show", &show_human.stdout),
                ("database", &db),
            ] {
                assert!(!text.contains(key), "the key {key} is in {what}");
            }
        }
    }
}

#[test]
fn an_openai_run_calls_a_tool_and_completes_with_the_recorded_answer() {
    let api = Api::new(r#""openai:gpt-4o-mini""#);
    api.answer(
        OPENAI_PATH,
        Some("tool_call_id"),
        Some(1),
        recorded("openai/03_tool_results_final_answer"),
    );
    api.answer(
        OPENAI_PATH,
        None,
        Some(1),
        recorded("openai/01_single_tool_call"),
    );
    let run = api.start(true);
    let v = run.expect_code(0).json();
    let (in1, out1) = usage_of("openai/01_single_tool_call");
    let (in2, out2) = usage_of("openai/03_tool_results_final_answer");
    assert_eq!(
        (&v["status"], &v["answer"], &v["steps"], &v["tokens"]),
        (
            &json!("completed"),
            &json!("YES"),
            &json!(2),
            &json!({"input": in1 + in2, "output": out1 + out2})
        )
    );
    let call_id = "call_TTY8UFNo7rNCaOBUNtlRSvMG";
    assert_eq!(
        std::fs::read_to_string(api.project.path().join("args.json")).unwrap(),
        r#"{"country":"Crumpet"}"#
    );
    let id = v["run_id"].as_str().unwrap();
    let show = api.project.show(id);
    assert_eq!(tool_result(&show, call_id), (json!(123124), false));
    assert_eq!(journal(&show, call_id)["tool"], "lookup_population");

    let bodies = api.bodies(OPENAI_PATH);
    assert_eq!(bodies.len(), 2);
    // The first request tells the model its budget, last, as user text (issue 23: the
    // system message stays the same bytes at every step); the second starts with all
    // of the first and tells nothing new (four of five steps left).
    assert_eq!(bodies[1]["messages"][0], bodies[0]["messages"][0]);
    let first = bodies[0]["messages"].as_array().unwrap();
    let last = first.last().unwrap();
    assert_eq!(last["role"], "user");
    let note = last["content"].as_str().unwrap();
    assert!(
        note.contains("\n\nBudget: step 1 of 5, 5 left including this one; "),
        "{note}"
    );
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(messages[..first.len()], first[..]);
    // The call and its result come last.
    let n = messages.len();
    assert_eq!(
        (
            &messages[n - 2]["role"],
            &messages[n - 2]["tool_calls"][0]["id"]
        ),
        (&json!("assistant"), &json!(call_id)),
        "the call precedes its result: {messages:#?}"
    );
    assert_eq!(
        messages[n - 1],
        json!({"role": "tool", "tool_call_id": call_id, "content": "123124"})
    );
    for r in api.requests(OPENAI_PATH) {
        assert_eq!(
            r.headers.get("authorization").unwrap(),
            &format!("Bearer {OPENAI_KEY}")
        );
    }
    api.assert_no_keys(&run, id);
}

#[test]
fn an_anthropic_run_calls_a_tool_and_completes_with_the_recorded_answer() {
    let api = Api::new(r#""anthropic:claude-sonnet-4-5""#);
    api.answer(
        ANTHROPIC_PATH,
        Some("tool_result"),
        Some(1),
        recorded("anthropic/03_tool_results_final_answer"),
    );
    api.answer(
        ANTHROPIC_PATH,
        None,
        Some(1),
        recorded("anthropic/01_single_tool_use"),
    );
    let run = api.start(true);
    let v = run.expect_code(0).json();
    let (in1, out1) = usage_of("anthropic/01_single_tool_use");
    let (in2, out2) = usage_of("anthropic/03_tool_results_final_answer");
    assert_eq!(
        (&v["status"], &v["answer"], &v["tokens"]),
        (
            &json!("completed"),
            &json!(
                "Success! Using the correct passphrase 'cake', the secret phrase retrieved is: \"The cake is a lie.\""
            ),
            &json!({"input": in1 + in2, "output": out1 + out2})
        )
    );
    let call_id = "toolu_01BKo1nKttK3Fg41xBQ1qBiX";
    assert_eq!(
        std::fs::read_to_string(api.project.path().join("args.json")).unwrap(),
        r#"{"passphrase":"portal"}"#
    );
    let bodies = api.bodies(ANTHROPIC_PATH);
    assert_eq!(bodies.len(), 2);
    let messages = bodies[1]["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user", "{messages:#?}");
    // The newest block carries the cache breakpoint (issue 23); no budget note at the
    // second of five steps.
    assert_eq!(
        last["content"],
        json!([{"type": "tool_result", "tool_use_id": call_id,
                "content": "The cake is a lie.", "is_error": false,
                "cache_control": {"type": "ephemeral"}}])
    );
    // The first request's budget note stays where it was sent, after the task.
    let task = &messages[0]["content"];
    assert!(
        task[1]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Budget: step 1 of 5,")),
        "{task:#}"
    );
    assert_eq!(task[1].get("cache_control"), None, "{task:#}");
    let assistant = &messages[messages.len() - 2];
    assert_eq!(
        (&assistant["role"], &assistant["content"][1]["id"]),
        (&json!("assistant"), &json!(call_id))
    );
    for r in api.requests(ANTHROPIC_PATH) {
        assert_eq!(r.headers.get("x-api-key").unwrap(), ANTHROPIC_KEY);
    }
    api.assert_no_keys(&run, v["run_id"].as_str().unwrap());
}

#[test]
fn a_rate_limited_model_call_is_retried_and_traced() {
    let api = Api::new(r#""openai:gpt-4o-mini""#);
    api.answer(
        OPENAI_PATH,
        Some("Crumpet"),
        Some(1),
        recorded("openai/14_error_429_rate_limit_tokens").insert_header("retry-after", "0"),
    );
    api.answer(
        OPENAI_PATH,
        None,
        None,
        recorded("openai/03_tool_results_final_answer"),
    );
    let run = api.start(true);
    let v = run.expect_code(0).json();
    assert_eq!(
        (&v["status"], &v["answer"]),
        (&json!("completed"), &json!("YES"))
    );
    assert_eq!(api.requests(OPENAI_PATH).len(), 2);
    let show = api.project.show(v["run_id"].as_str().unwrap());
    let retries = events(&show, "model_retry");
    assert_eq!(retries.len(), 1, "{retries:#?}");
    assert_eq!(
        (
            &retries[0]["model"],
            &retries[0]["attempt"],
            &retries[0]["delay_ms"]
        ),
        (&json!("openai:gpt-4o-mini"), &json!(1), &json!(0))
    );
    assert!(
        retries[0]["error"].as_str().unwrap().contains("429"),
        "{}",
        retries[0]
    );
    // Only the successful call's usage counts.
    let (i, o) = usage_of("openai/03_tool_results_final_answer");
    assert_eq!(v["tokens"], json!({"input": i, "output": o}));
    api.assert_no_keys(&run, v["run_id"].as_str().unwrap());
}

#[test]
fn a_fallback_model_takes_over_when_the_first_is_refused() {
    let api = Api::new(r#"["anthropic:claude-sonnet-4-5", "openai:gpt-4o-mini"]"#);
    // A 401 that echoes the key back, as some servers do: it must not be stored.
    let mut refused = fixture("anthropic/12_error_401_authentication")["response"]["body"].clone();
    refused["error"]["message"] = json!(format!("invalid x-api-key: {ANTHROPIC_KEY}"));
    api.answer(
        ANTHROPIC_PATH,
        None,
        None,
        ResponseTemplate::new(401).set_body_json(refused),
    );
    api.answer(
        OPENAI_PATH,
        None,
        None,
        recorded("openai/03_tool_results_final_answer"),
    );
    // Without --json, so the live progress lines on stderr are checked for the key too.
    let run = api.start(false);
    run.expect_code(0);
    assert_eq!(run.stdout.trim(), "YES", "{run}");
    assert!(
        run.stderr
            .contains("model fallback: anthropic:claude-sonnet-4-5 failed")
            && run.stderr.contains("trying openai:gpt-4o-mini"),
        "{run}"
    );
    assert_eq!(
        api.requests(ANTHROPIC_PATH).len(),
        1,
        "a 401 is not retried"
    );
    assert_eq!(api.requests(OPENAI_PATH).len(), 1);
    let id = api.project.only_run();
    let show = api.project.show(&id);
    assert_eq!(show["status"], "completed");
    let fallbacks = events(&show, "model_fallback");
    assert_eq!(fallbacks.len(), 1, "{fallbacks:#?}");
    assert_eq!(
        (&fallbacks[0]["from"], &fallbacks[0]["to"]),
        (
            &json!("anthropic:claude-sonnet-4-5"),
            &json!("openai:gpt-4o-mini")
        )
    );
    assert!(
        fallbacks[0]["error"].as_str().unwrap().contains("401"),
        "{}",
        fallbacks[0]
    );
    assert_eq!(events(&show, "model_retry"), Vec::<Value>::new());
    api.assert_no_keys(&run, &id);
}

#[test]
fn a_response_cut_at_the_output_limit_fails_the_run_with_the_reason() {
    let api = Api::new(r#""openai:gpt-4o-mini""#);
    api.answer(
        OPENAI_PATH,
        None,
        None,
        recorded("openai/07_finish_reason_length"),
    );
    let run = api.start(true);
    let v = run.expect_code(1).json();
    assert_eq!(v["status"], "failed");
    let reason = v["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("output-token limit"), "{v}");
    let show = api.project.show(v["run_id"].as_str().unwrap());
    assert_eq!(
        (&show["status"], &show["error"]),
        (&json!("failed"), &json!(reason))
    );
    assert_eq!(
        show["answer"],
        Value::Null,
        "a cut-off text is not an answer"
    );
    // Asked once more with a note (issue 15); both cut responses are paid for.
    let (i, o) = usage_of("openai/07_finish_reason_length");
    assert_eq!(v["tokens"], json!({"input": 2 * i, "output": 2 * o}));
    let bodies = api.bodies(OPENAI_PATH);
    assert_eq!(bodies.len(), 2);
    assert!(
        bodies[1]
            .to_string()
            .contains("was cut off at the output limit"),
        "{}",
        bodies[1]
    );
    assert_eq!(events(&show, "note").len(), 1);
    api.assert_no_keys(&run, v["run_id"].as_str().unwrap());
}

/// Issue 23, seen on llama.cpp: asked again after a cut-off reply, SmolLM2-135M
/// answered with agentrun's cut-off note minus its parenthesis, and the run completed
/// with that as its answer. It goes back to the model; the next answer is the answer.
#[test]
fn an_answer_copying_the_cut_off_note_with_a_clause_left_out_is_not_the_answer() {
    let api = Api::new(r#""openai:gpt-4o-mini""#);
    api.project.write(
        "task.md",
        "+++\nmodel = \"openai:gpt-4o-mini\"\nmax_steps = 5\nmax_output_tokens = 96\n\
         max_output_tokens_retry = 160\n+++\nCan the country of Crumpet have dragons?\n",
    );
    // What llama-server's model answered to the note, word for word.
    let copied = "Your previous reply was cut off at the output limit of 96 tokens and was \
                  discarded. Reply again within 160 tokens: make fewer tool calls in one turn, \
                  or answer more briefly.";
    let mut body = fixture("openai/03_tool_results_final_answer")["response"]["body"].clone();
    body["choices"][0]["message"]["content"] = json!(copied);
    api.answer(
        OPENAI_PATH,
        Some("only repeated a note"),
        Some(1),
        recorded("openai/03_tool_results_final_answer"),
    );
    api.answer(
        OPENAI_PATH,
        Some("was cut off at the output limit"),
        Some(1),
        ResponseTemplate::new(200).set_body_json(body),
    );
    api.answer(
        OPENAI_PATH,
        None,
        Some(1),
        recorded("openai/07_finish_reason_length"),
    );
    let run = api.start(true);
    let v = run.expect_code(0).json();
    assert_eq!(
        (&v["status"], &v["answer"]),
        (&json!("completed"), &json!("YES"))
    );
    let bodies = api.bodies(OPENAI_PATH);
    assert_eq!(bodies.len(), 3, "{bodies:#?}");
    // The copy is a fair one: the note sent holds every word of it, and more.
    let sent = bodies[1].to_string();
    assert!(
        sent.contains("or answer more briefly") && !sent.contains(copied),
        "{sent}"
    );
    let show = api.project.show(v["run_id"].as_str().unwrap());
    let kinds: Vec<Value> = events(&show, "note")
        .iter()
        .map(|e| e["kind"].clone())
        .collect();
    assert_eq!(
        kinds,
        [json!("truncated"), json!("repeated_note")],
        "{show:#}"
    );
}

/// Issue 27: a 401 names the variable holding the key and where it was sent, for each
/// provider (the servers' own text never does).
#[test]
fn a_401_names_the_key_variable_and_where_the_request_went() {
    for (model, api_path, fixture_name, var, base_var) in [
        (
            r#""openai:gpt-4o-mini""#,
            OPENAI_PATH,
            "openai/12_error_401_invalid_api_key",
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
        ),
        (
            r#""anthropic:claude-sonnet-4-5""#,
            ANTHROPIC_PATH,
            "anthropic/12_error_401_authentication",
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
        ),
    ] {
        let api = Api::new(model);
        let body = fixture(fixture_name)["response"]["body"].clone();
        api.answer(
            api_path,
            None,
            None,
            ResponseTemplate::new(401).set_body_json(body),
        );
        let run = api.start(false);
        run.expect_code(1);
        let want = format!(
            " — check {var}: it was sent to {}{api_path} ({base_var})",
            api.server.uri()
        );
        assert!(run.stderr.contains(&want), "want {want:?}\n{run}");
        assert_eq!(api.requests(api_path).len(), 1, "a 401 is not retried");
    }
}

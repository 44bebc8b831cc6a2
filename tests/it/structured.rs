//! Structured answers (issue 26): a task with `output_schema` ends with one JSON value
//! valid against it — on the first try, after one invalid answer the model is told
//! about (the validation path), or the run fails `invalid_output` after
//! `output_attempts` — with the scripted model, and with OpenAI and Anthropic answering
//! from a local server in the shape of the recorded fixtures (OpenAI's JSON answer in
//! `message.content`, Anthropic's as a call of the `final_answer` tool).

use crate::common::{Project, Run, notes, runtime};
use serde_json::{Value, json};
use std::sync::Mutex;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/providers");

const SCHEMA: &str = r#"output_schema = { type = "object", additionalProperties = false, required = ["dragons", "population"], properties = { dragons = { type = "boolean" }, population = { type = "integer" } } }"#;

fn schema() -> Value {
    json!({"type": "object", "additionalProperties": false,
           "required": ["dragons", "population"],
           "properties": {"dragons": {"type": "boolean"}, "population": {"type": "integer"}}})
}

fn valid() -> Value {
    json!({"dragons": true, "population": 123124})
}

fn invalid() -> Value {
    json!({"dragons": "yes", "population": 123124})
}

#[derive(Debug, Clone, Copy)]
enum Via {
    Script,
    OpenAi,
    Anthropic,
}

const ALL: [Via; 3] = [Via::Script, Via::OpenAi, Via::Anthropic];

/// A recorded response body with its answer replaced by `answer`.
fn recorded_answer(via: Via, answer: &Value, turn: usize) -> Value {
    let name = match via {
        Via::OpenAi => "openai/03_tool_results_final_answer",
        _ => "anthropic/01_single_tool_use",
    };
    let file = format!("{FIXTURES}/{name}.json");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut body =
        serde_json::from_str::<Value>(&text).expect("fixture")["response"]["body"].clone();
    match via {
        Via::OpenAi => body["choices"][0]["message"]["content"] = answer.to_string().into(),
        _ => {
            body["content"] = json!([{"type": "tool_use", "id": format!("toolu_answer_{turn}"),
                                      "name": "final_answer", "input": answer}]);
        }
    }
    body
}

/// Answers each request with the next body, in order.
struct InOrder(Mutex<Vec<Value>>);

impl Respond for InOrder {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let mut bodies = self.0.lock().unwrap();
        if bodies.is_empty() {
            return ResponseTemplate::new(500).set_body_string("no more answers scripted");
        }
        ResponseTemplate::new(200).set_body_json(bodies.remove(0))
    }
}

/// What one run with these answers gave: its `--json`, `runs show --json`, and the
/// model requests the server received.
struct Outcome {
    run: Run,
    show: Value,
    requests: Vec<Value>,
}

fn run_with(via: Via, answers: &[Value], front: &str) -> Outcome {
    let project = Project::new();
    let rt = runtime();
    let server = rt.block_on(MockServer::start());
    let (model, api_path) = match via {
        Via::Script => ("script:script.json", ""),
        Via::OpenAi => ("openai:gpt-4o-mini", "/v1/chat/completions"),
        Via::Anthropic => ("anthropic:claude-sonnet-4-0", "/v1/messages"),
    };
    project.write(
        "task.md",
        &format!("+++\nmodel = \"{model}\"\ntools = []\n{SCHEMA}\n{front}\n+++\nCan Crumpet have dragons?\n"),
    );
    project.model_script(
        answers
            .iter()
            .map(|a| json!({"text": a.to_string()}))
            .collect(),
    );
    let bodies = answers
        .iter()
        .enumerate()
        .map(|(i, a)| recorded_answer(via, a, i))
        .collect();
    rt.block_on(
        Mock::given(method("POST"))
            .and(path(api_path))
            .respond_with(InOrder(Mutex::new(bodies)))
            .mount(&server),
    );
    let mut cmd = project.command(&["start", "task.md", "--json"]);
    cmd.env("OPENAI_BASE_URL", format!("{}/v1", server.uri()))
        .env("OPENAI_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let run = Run::from_output(cmd.output().expect("spawn agentrun"));
    let id = run.json()["run_id"].as_str().expect("run_id").to_string();
    let show = project.show(&id);
    let requests = rt
        .block_on(server.received_requests())
        .unwrap_or_default()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).expect("JSON body"))
        .collect();
    Outcome {
        run,
        show,
        requests,
    }
}

/// The provider was asked for the schema natively.
fn assert_asked_natively(via: Via, request: &Value) {
    match via {
        Via::Script => {}
        Via::OpenAi => assert_eq!(
            request["response_format"],
            json!({"type": "json_schema",
                   "json_schema": {"name": "answer", "schema": schema(), "strict": true}}),
        ),
        Via::Anthropic => {
            let tools = request["tools"].as_array().expect("tools");
            let tool = tools.iter().find(|t| t["name"] == "final_answer");
            assert_eq!(
                tool.map(|t| &t["input_schema"]),
                Some(&schema()),
                "{request}"
            );
            assert_eq!(request["tool_choice"], json!({"type": "any"}));
        }
    }
}

#[test]
fn a_structured_answer_valid_on_the_first_try_is_the_json_answer() {
    for via in ALL {
        let o = run_with(via, &[valid()], "");
        let v = o.run.expect_code(0).json();
        assert_eq!(
            (&v["status"], &v["answer"], &v["steps"]),
            (&json!("completed"), &valid(), &json!(1)),
            "{via:?}"
        );
        assert_eq!(o.show["answer"], valid(), "{via:?}: runs show --json");
        if let Some(first) = o.requests.first() {
            assert_asked_natively(via, first);
        }
        assert_eq!(o.requests.len(), if let Via::Script = via { 0 } else { 1 });
    }
}

#[test]
fn an_invalid_structured_answer_is_corrected_after_the_model_is_told_the_path() {
    for via in ALL {
        let o = run_with(via, &[invalid(), valid()], "");
        let v = o.run.expect_code(0).json();
        assert_eq!(
            (&v["status"], &v["answer"], &v["steps"]),
            (&json!("completed"), &valid(), &json!(2)),
            "{via:?}"
        );
        let told = notes(&o.show);
        assert_eq!(told.len(), 1, "{via:?}: {told:?}");
        assert_eq!(told[0].0, 1);
        assert!(
            told[0]
                .1
                .contains("at /dragons: \"yes\" is not of type \"boolean\"")
                && told[0].1.contains("answer 1 of 3"),
            "{via:?}: {}",
            told[0].1
        );
        // The second request carried the note to the model.
        if let Some(second) = o.requests.get(1) {
            assert!(second.to_string().contains("at /dragons"), "{via:?}");
            assert_asked_natively(via, second);
        }
    }
}

#[test]
fn a_run_fails_invalid_output_after_output_attempts_invalid_answers() {
    for via in ALL {
        let o = run_with(via, &[invalid(), invalid(), valid()], "output_attempts = 2");
        let v = o.run.expect_code(1).json();
        assert_eq!(
            (&v["status"], &v["answer"], &v["steps"]),
            (&json!("failed"), &Value::Null, &json!(2)),
            "{via:?}"
        );
        assert_eq!(v["partial_answer"], json!(invalid().to_string()), "{via:?}");
        let reason = v["reason"].as_str().unwrap_or_default();
        assert!(
            reason.starts_with("invalid_output: 2 final answers failed the output schema")
                && reason.contains("at /dragons"),
            "{via:?}: {reason}"
        );
        assert_eq!(o.show["error"], v["reason"]);
        // The third answer was never asked for.
        let asked = if let Via::Script = via { 0 } else { 2 };
        assert_eq!(o.requests.len(), asked, "{via:?}");
    }
}

#[test]
fn runs_show_prints_a_structured_answer_formatted() {
    let project = Project::new();
    project.task(
        &format!("tools = []\n{SCHEMA}"),
        "Can Crumpet have dragons?",
    );
    project
        .model_script(json!([{"text": "```json\n{\"population\":123124,\"dragons\":true}\n```"}]));
    let run = project.run(&["start", "task.md"]);
    // Plain stdout is the answer; the fence the model added is gone.
    assert_eq!(
        run.expect_code(0).stdout.trim(),
        r#"{"dragons":true,"population":123124}"#
    );
    let id = project.only_run();
    let shown = project
        .run(&["runs", "show", &id])
        .expect_code(0)
        .stdout
        .clone();
    assert!(
        shown.contains("answer\n  {\n    \"dragons\": true,\n    \"population\": 123124\n  }\n"),
        "{shown}"
    );
}

#[test]
fn a_bad_output_schema_is_bad_input_naming_the_task_file() {
    let project = Project::new();
    project.model_script(json!([{"text": "{}"}]));
    for (front, want) in [
        (
            r#"output_schema = "missing.json""#,
            "task.md: front matter: `output_schema`: cannot read ",
        ),
        (
            r#"output_schema = { type = "nonsense" }"#,
            "task.md: front matter: `output_schema` is not a valid JSON Schema",
        ),
        (
            "output_attempts = 2",
            "task.md: front matter: `output_attempts` needs an `output_schema`",
        ),
    ] {
        project.task(front, "x");
        let run = project.run(&["start", "task.md"]);
        run.expect_code(2);
        assert!(run.stderr.contains(want), "{front}: {run}");
    }
}

/// The check is part of the step (docs/ARCHITECTURE.md §7): killed after the invalid answer was
/// journaled and before the step committed, the resumed run checks the stored answer
/// again — the model is not asked for it twice — and the verdict is the same.
#[test]
fn an_invalid_answer_is_checked_again_from_the_journal_after_a_crash() {
    use crate::exactly_once::{observed, run, turns_requested};
    for point in ["after_model_stored", "inside_commit", "after_commit"] {
        let project = Project::new();
        project.task(
            &format!("tools = []\n{SCHEMA}"),
            "Can Crumpet have dragons?",
        );
        project
            .model_script(json!([{"text": invalid().to_string()}, {"text": valid().to_string()}]));
        let crashed = run(
            &project,
            &["start", "task.md"],
            &[("AGENTRUN_CRASH_AT", point)],
        );
        assert_ne!(crashed.code, 0, "{point}: {crashed}");
        let id = project.only_run();
        let resumed = run(&project, &["resume", &id, "--json"], &[]);
        let v = resumed.expect_code(0).json();
        assert_eq!(
            (&v["answer"], &v["steps"]),
            (&valid(), &json!(2)),
            "{point}"
        );
        let show = project.show(&id);
        assert_eq!(
            notes(&show).len(),
            1,
            "{point}: one note for one invalid answer"
        );
        assert_eq!(turns_requested(&observed(&project)), [0, 1], "{point}");
    }
}

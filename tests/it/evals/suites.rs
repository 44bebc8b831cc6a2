//! `agentrun eval`: a 3-task suite × 2 fixture models × 5 repeats reporting the right
//! pass rates, a baseline comparison that exits 1 on a regression and 0 against
//! itself, kill -9 mid-eval then resume completing the same table, the quick-start
//! suite, and bad input.

use crate::common::{Project, Run};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Two OpenAI-compatible fixture models on one server: `good` answers every task;
/// `flaky` answers the colour task wrongly on 3 of every 5 requests (the 1st, 3rd and
/// 5th), so 5 repeats pass 2 of 5 whatever order they run in.
struct Models {
    flaky_colour: AtomicUsize,
}

impl Respond for Models {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or_default();
        let asked = body["messages"].to_string();
        let mut answer = if asked.contains("capital") {
            "Paris"
        } else if asked.contains("2 + 2") {
            "4"
        } else {
            "blue"
        };
        if body["model"] == "flaky" && answer == "blue" {
            let n = self.flaky_colour.fetch_add(1, Ordering::SeqCst);
            if (n % 5).is_multiple_of(2) {
                answer = "green";
            }
        }
        ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 1}
        }))
    }
}

struct Fixture {
    _rt: tokio::runtime::Runtime,
    server: MockServer,
    project: Project,
}

fn fixture() -> Fixture {
    let rt = crate::common::runtime();
    let server = rt.block_on(MockServer::start());
    rt.block_on(
        Mock::given(wiremock::matchers::method("POST"))
            .respond_with(Models {
                flaky_colour: AtomicUsize::new(0),
            })
            .mount(&server),
    );
    let project = Project::new();
    for (name, prompt) in [
        ("capital", "What is the capital of France?"),
        ("sum", "What is 2 + 2?"),
        ("colour", "What colour is a clear sky?"),
    ] {
        project.write(
            &format!("tasks/{name}.md"),
            &format!("+++\ntools = []\nstream = false\n+++\n{prompt}\n"),
        );
    }
    project.write(
        "suite.toml",
        r#"name = "trivia"
repeat = 5

[[task]]
name = "capital"
file = "tasks/capital.md"
checks = [{ answer_contains = "Paris" }, { max_steps = 1 }]

[[task]]
name = "sum"
file = "tasks/sum.md"
checks = [{ answer_matches = "^4$" }]

[[task]]
name = "colour"
file = "tasks/colour.md"
checks = [{ answer_contains = "blue" }, { no_escalation = true }]
"#,
    );
    Fixture {
        _rt: rt,
        server,
        project,
    }
}

impl Fixture {
    fn eval(&self, args: &[&str]) -> Run {
        let mut all = vec!["eval", "suite.toml", "--json"];
        all.extend_from_slice(args);
        let base = format!("{}/v1", self.server.uri());
        self.project.run_env(
            &all,
            &[("OPENAI_BASE_URL", &base), ("OPENAI_API_KEY", "test-key")],
        )
    }
}

/// (task, model, passed, runs) of every cell of an eval's `--json`.
fn rates(v: &Value) -> Vec<(String, String, u64, u64)> {
    v["cells"]
        .as_array()
        .unwrap_or_else(|| panic!("no cells: {v}"))
        .iter()
        .map(|c| {
            (
                c["task"].as_str().unwrap().to_string(),
                c["model"].as_str().unwrap().to_string(),
                c["passed"].as_u64().unwrap(),
                c["runs"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn cells(list: &[(&str, &str, u64, u64)]) -> Vec<(String, String, u64, u64)> {
    list.iter()
        .map(|(t, m, p, r)| (t.to_string(), m.to_string(), *p, *r))
        .collect()
}

#[test]
fn three_tasks_two_models_five_repeats_give_each_cell_its_pass_rate() {
    let f = fixture();
    let run = f.eval(&[
        "--model",
        "openai:good",
        "--model",
        "openai:flaky",
        "--concurrency",
        "3",
    ]);
    run.expect_code(0);
    let v = run.json();
    assert_eq!(
        rates(&v),
        cells(&[
            ("capital", "openai:good", 5, 5),
            ("capital", "openai:flaky", 5, 5),
            ("sum", "openai:good", 5, 5),
            ("sum", "openai:flaky", 5, 5),
            ("colour", "openai:good", 5, 5),
            ("colour", "openai:flaky", 2, 5),
        ])
    );
    let colour = &v["cells"][5];
    // The 95% Wilson interval of 2/5.
    let ci = (
        colour["ci"][0].as_f64().unwrap(),
        colour["ci"][1].as_f64().unwrap(),
    );
    assert!(
        (ci.0 - 0.1176).abs() < 1e-3 && (ci.1 - 0.7693).abs() < 1e-3,
        "{ci:?}"
    );
    assert_eq!(colour["median_steps"], 1.0);
    assert_eq!(colour["median_tokens"], 13.0);
    // Each run is an ordinary stored run.
    let id = colour["run_ids"][0].as_str().unwrap();
    let show = f.project.show(id);
    assert_eq!(show["status"], "completed");
    assert_eq!(
        f.project
            .run(&["runs", "list", "--json"])
            .json()
            .as_array()
            .unwrap()
            .len(),
        30
    );
}

#[test]
fn a_flaky_model_regresses_against_the_good_baseline_and_not_against_itself() {
    let f = fixture();
    f.eval(&["--model", "openai:good", "--name", "good"])
        .expect_code(0);
    let flaky = f.eval(&[
        "--model",
        "openai:flaky",
        "--name",
        "flaky",
        "--baseline",
        "good",
    ]);
    flaky.expect_code(1);
    let v = flaky.json();
    assert_eq!(v["regressions"], 1, "{v}");
    let regressed: Vec<&str> = v["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["baseline"]["regressed"] == true)
        .map(|c| c["task"].as_str().unwrap())
        .collect();
    assert_eq!(regressed, ["colour"]);
    let again = f.eval(&[
        "--model",
        "openai:flaky",
        "--name",
        "flaky-again",
        "--baseline",
        "flaky",
    ]);
    again.expect_code(0);
    assert_eq!(again.json()["regressions"], 0);
    // The Markdown report says the same, for a pull request.
    let md = f.project.run_env(
        &[
            "eval",
            "suite.toml",
            "--model",
            "openai:flaky",
            "--name",
            "flaky",
            "--baseline",
            "good",
            "--markdown",
        ],
        &[],
    );
    md.expect_code(1);
    assert!(
        md.stdout.contains("**1 regression(s)** against `good`"),
        "{md}"
    );
    assert!(
        md.stdout
            .contains("| colour | openai:flaky | 2/5 40% | 12%–77% |"),
        "{md}"
    );
}

/// A suite whose every run waits on a slow tool, with scripted models (the same turns
/// whenever a run is resumed), so an eval can be killed while runs are in flight.
fn slow_suite() -> Project {
    let p = Project::new();
    p.script(
        "slow.sh",
        "#!/bin/sh\ncat >/dev/null\nsleep 0.3\necho '{\"ok\":true}'\n",
    );
    p.write(
        "tools.toml",
        "[defaults]\nsandbox = \"off\"\n[tools.slow]\ndescription = \"Slow\"\ninput_schema = { type = \"object\" }\ncommand = [\"sh\", \"slow.sh\"]\nidempotent = true\n",
    );
    p.write(
        "m.json",
        r#"{"turns": [{"tool_calls": [{"name": "slow", "args": {}}]}, {"text": "done"}]}"#,
    );
    p.write("t.md", "+++\nmax_steps = 5\n+++\nDo the slow thing.\n");
    p.write(
        "suite.toml",
        "tools = \"tools.toml\"\nmodels = [\"script:m.json\"]\nrepeat = 4\n\
         [[task]]\nname = \"a\"\nfile = \"t.md\"\nchecks = [{ tool_called = \"slow\" }]\n\
         [[task]]\nname = \"b\"\nfile = \"t.md\"\nchecks = [{ answer_contains = \"done\" }, { max_steps = 2 }]\n",
    );
    p
}

/// How many slots of eval `name` are scored (read with the library, as the console does).
fn scored(p: &Project, name: &str) -> usize {
    let Ok(store) = agentrun::store::Store::open(&p.db(), false) else {
        return 0;
    };
    store
        .eval_slots(name)
        .map(|s| s.iter().filter(|r| r.result.is_some()).count())
        .unwrap_or(0)
}

#[test]
fn an_eval_killed_with_9_resumes_and_completes_the_same_table() {
    let p = slow_suite();
    let clean = p.run(&["eval", "suite.toml", "--name", "clean", "--json"]);
    clean.expect_code(0);
    let mut child = p
        .command(&[
            "eval",
            "suite.toml",
            "--name",
            "killed",
            "--concurrency",
            "2",
            "--json",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Bounded poll on the real condition: some runs scored, not all.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while scored(&p, "killed") < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the eval never scored a run"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the eval ended before the kill"
        );
        std::thread::yield_now();
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let done = scored(&p, "killed");
    assert!(
        done < 8,
        "the eval finished before the kill ({done} scored)"
    );
    let resumed = p.run(&["eval", "suite.toml", "--name", "killed", "--json"]);
    resumed.expect_code(0);
    let strip = |v: &Value| -> Vec<Value> {
        v["cells"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                json!([
                    c["task"],
                    c["model"],
                    c["passed"],
                    c["runs"],
                    c["median_steps"],
                    c["median_tokens"]
                ])
            })
            .collect()
    };
    assert_eq!(strip(&resumed.json()), strip(&clean.json()));
    assert_eq!(rates(&resumed.json())[0].2, 4);
    // Every slot has a run of its own, and every run the eval names completed.
    let ids: std::collections::BTreeSet<String> = resumed.json()["cells"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["run_ids"].as_array().unwrap().clone())
        .map(|i| i.as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 8);
    for id in &ids {
        assert_eq!(p.show(id)["status"], "completed", "{id}");
    }
}

#[test]
fn the_quick_start_suite_passes_with_the_scripted_model() {
    let root = env!("CARGO_MANIFEST_DIR");
    let p = Project::new();
    let out = std::process::Command::new(crate::common::bin())
        .current_dir(root)
        .env("AGENTRUN_DB", p.path().join("e.db"))
        .args(["eval", "examples/evals/shop.toml", "--json"])
        .output()
        .unwrap();
    let run = Run::from_output(out);
    run.expect_code(0);
    let v = run.json();
    for c in v["cells"].as_array().unwrap() {
        assert_eq!(c["passed"], c["runs"], "{c}");
        assert!(c["runs"].as_u64().unwrap() >= 1);
    }
}

#[test]
fn a_bad_suite_model_or_baseline_is_bad_input_and_runs_nothing() {
    let f = fixture();
    f.project.write(
        "bad.toml",
        "[[task]]\nname = \"a\"\nprompt = \"p\"\nchecks = [{ answer_matches = \"(\" }]\n",
    );
    let bad = f.project.run(&["eval", "bad.toml"]);
    bad.expect_code(2);
    assert!(
        bad.stderr.contains("bad.toml: task `a`: answer_matches"),
        "{bad}"
    );
    let bad = f.project.run(&["eval", "suite.toml", "--model", "nope:x"]);
    bad.expect_code(2);
    let bad = f.eval(&["--model", "openai:good", "--baseline", "never"]);
    bad.expect_code(2);
    assert!(bad.stdout.contains("no eval `never`"), "{bad}");
    assert_eq!(f.project.run(&["runs", "list", "--json"]).json(), json!([]));
}

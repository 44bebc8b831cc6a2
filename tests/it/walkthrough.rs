//! Issue 13: the README's "Your own tool and model" walkthrough, executed as written.
//! The shell and TOML blocks are read from README.md itself, so the README cannot drift
//! from what works: a fresh folder, `agentrun init`, the weather tool, the task, a run
//! of the tool with a four-line script as the model (before any server, issue 27),
//! `tools check`, and a run against an OpenAI-compatible server (a local mock started
//! here).
//! The only edits: `git clone`/`cargo install` are skipped (the binary under test is put
//! on PATH), `~` is a temporary HOME, the server address is the mock's, and
//! `<RUN_ID>` is the id of the run the walkthrough started.

use crate::common::Run;
use serde_json::{Value, json};
use wiremock::matchers::{body_string_contains, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const SECTION: &str = "## Your own tool and model";

/// The fenced blocks of the README section `SECTION`: (language, body), in order.
fn walkthrough_blocks() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme.find(SECTION).expect("the walkthrough section");
    let rest = &readme[start + SECTION.len()..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in section.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), String::new())),
            (Some(_), Some("")) => blocks.extend(open.take()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

/// One shell script doing what the reader is told to do, with the edits in the doc.
fn as_script(blocks: &[(String, String)], server: &str) -> String {
    let mut script = String::from("set -eu\n");
    for (lang, body) in blocks {
        match lang.as_str() {
            "sh" => {
                for line in body.lines() {
                    let command = line.split("  #").next().unwrap_or(line).trim_end();
                    if command.starts_with("git clone") || command.starts_with("cargo install") {
                        continue;
                    }
                    let command = if command.starts_with("export OPENAI_BASE_URL=") {
                        format!("export OPENAI_BASE_URL={server}/v1")
                    } else {
                        command.replace(
                            "<RUN_ID>",
                            r#""$(agentrun runs list --json | grep -o '"id":"[0-9a-f]*"' | head -1 | cut -d'"' -f4)""#,
                        )
                    };
                    script.push_str(&command);
                    script.push('\n');
                }
            }
            // "Declare it at the end of `tools.toml`".
            "toml" => script.push_str(&format!("cat >> tools.toml <<'TOML'\n{body}TOML\n")),
            other => panic!("a `{other}` block in the walkthrough: teach this test to run it"),
        }
    }
    script
}

fn sse(chunks: &[Value]) -> ResponseTemplate {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    ResponseTemplate::new(200).set_body_raw(body.into_bytes(), "text/event-stream")
}

fn delta(delta: Value, finish: Option<&str>) -> Value {
    json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

#[test]
fn the_readme_walkthrough_runs_my_own_tool_against_an_openai_compatible_server() {
    let blocks = walkthrough_blocks();
    assert!(
        blocks.len() >= 5,
        "the walkthrough lost its blocks: {blocks:?}"
    );
    // Issue 27: the offline step is there, a script of four lines calling the tool.
    let offline = blocks
        .iter()
        .find(|(_, body)| body.starts_with("cat > script.json"))
        .map(|(_, body)| body.as_str())
        .expect("the script.json step");
    let json: Vec<&str> = offline
        .lines()
        .skip(1)
        .take_while(|l| *l != "EOF")
        .collect();
    assert_eq!(json.len(), 4, "{offline}");
    assert!(json[1].contains(r#""name": "weather""#), "{offline}");
    let home = tempfile::tempdir().expect("home");
    let rt = crate::common::runtime();
    let server = rt.block_on(MockServer::start());
    // After the tool's result: the answer. Before: a call of the reader's tool.
    rt.block_on(
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .and(body_string_contains("\"role\":\"tool\""))
            .respond_with(sse(&[
                delta(
                    json!({"role": "assistant", "content": "Sunny, 21 °C: "}),
                    None,
                ),
                delta(json!({"content": "a T-shirt will do."}), Some("stop")),
            ]))
            .with_priority(1)
            .mount(&server),
    );
    rt.block_on(
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(sse(&[delta(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_w1",
                    "type": "function", "function": {"name": "weather",
                    "arguments": "{\"city\": \"Lisbon\"}"}}]}),
                Some("tool_calls"),
            )]))
            .with_priority(2)
            .mount(&server),
    );
    let script = as_script(&blocks, &server.uri());
    let mut cmd = std::process::Command::new("bash");
    cmd.arg("-c")
        .arg(&script)
        .current_dir(home.path())
        .env("HOME", home.path())
        .env("PATH", crate::common::path_with_bin())
        .stdin(std::process::Stdio::null());
    // The reader's shell has none of the test's settings.
    for (name, _) in std::env::vars() {
        if name.starts_with("AGENTRUN_") || name.starts_with("OPENAI_") {
            cmd.env_remove(name);
        }
    }
    let run = Run::from_output(cmd.output().expect("bash"));
    assert_eq!(
        run.code, 0,
        "the walkthrough failed\n--- script\n{script}\n{run}"
    );
    // The scripted run called the reader's tool and answered, with no server.
    assert!(
        run.stdout
            .contains("The weather tool answered; see it with agentrun runs show."),
        "{run}"
    );
    assert!(
        run.stderr.contains("step 1: weather ok (1 attempt)"),
        "{run}"
    );
    // `tools check` passed, the run answered, and `runs show` tells what happened.
    assert!(run.stdout.contains("ok, "), "{run}");
    assert!(
        run.stdout.contains("Sunny, 21 °C: a T-shirt will do."),
        "{run}"
    );
    assert!(
        run.stdout.contains("weather"),
        "runs show names the tool:\n{run}"
    );
    assert!(run.stdout.contains("\"forecast\":\"sunny\""), "{run}");
    // The server got the reader's tool and then its result; no key was needed.
    let bodies: Vec<Value> = rt
        .block_on(server.received_requests())
        .expect("requests")
        .iter()
        .map(|r| serde_json::from_slice(&r.body).expect("json"))
        .collect();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert_eq!(bodies[0]["model"], "qwen2.5:7b");
    let offered: Vec<&str> = bodies[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("name"))
        .collect();
    assert!(offered.contains(&"weather"), "{offered:?}");
    let tool_message = bodies[1]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the tool's result went back to the model");
    assert!(
        tool_message["content"]
            .as_str()
            .expect("text")
            .contains("high_c"),
        "{tool_message}"
    );
    // Everything stayed in the reader's folder.
    assert!(home.path().join("weather/.agentrun").is_dir());
}

#[test]
fn the_readme_points_only_at_files_in_the_repository_and_at_its_own_sections() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    // GitHub's anchors: lower case, spaces to dashes, punctuation dropped.
    let anchors: Vec<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| {
            h.to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect();
    let mut rest = readme.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let target = &rest[..rest.find(')').expect("closing parenthesis")];
        if let Some(anchor) = target.strip_prefix('#') {
            assert!(anchors.iter().any(|a| a == anchor), "no section #{anchor}");
        } else if !target.contains("://") {
            let file = target.split('#').next().unwrap_or(target);
            assert!(root.join(file).exists(), "README links to missing {target}");
        }
    }
    // The contract lives outside the repository: the README must stand alone.
    assert!(!readme.contains("DESIGN"), "the README points at DESIGN");
}

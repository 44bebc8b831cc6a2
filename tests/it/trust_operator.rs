//! Text a person gives a run (`runs send`, `escalations resolve`) is redacted like
//! everything else stored for it (docs/ARCHITECTURE.md §5): a secret the run's config knows — here
//! a command tool's secret-named variable — never reaches the database file or the
//! model, whoever pastes it.

use crate::common::Project;
use serde_json::json;

const TOKEN: &str = "tok-operator-pasted-7c1e9d";

const TOOLS: &str = "[tools.deploy]\ndescription = \"deploy\"\ninput_schema = { type = \"object\" }\ncommand = [\"sh\", \"-c\", \"cat > /dev/null; echo '{}'\"]\nenv = [\"DEPLOY_TOKEN\"]\napproval = \"always\"\n";

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn a_secret_in_a_sent_message_or_a_resolution_is_stored_redacted() {
    let p = Project::new();
    p.write("tools.toml", TOOLS);
    p.model_script(json!([
        {"tool_calls": [{"name": "deploy", "args": {}}], "usage": {"input": 10, "output": 2}},
        {"text": "done", "usage": {"input": 10, "output": 2}}
    ]));
    p.task("max_steps = 5", "Deploy.");
    let env = [("DEPLOY_TOKEN", TOKEN)];
    let v = p.run_env(&["start", "task.md", "--json"], &env).json();
    assert_eq!(v["status"], "awaiting_approval", "{v}");
    let run = v["run_id"].as_str().expect("run_id").to_string();
    let esc = v["escalation_id"].as_str().expect("escalation").to_string();

    let said = format!("Use {TOKEN} for the deploy.");
    p.run_env(&["runs", "send", &run, &said, "--by", "alice"], &env)
        .expect_code(0);
    let reason = format!("not with {TOKEN}");
    p.run_env(
        &[
            "escalations",
            "resolve",
            &esc,
            "--deny",
            &reason,
            "--by",
            "ops",
        ],
        &env,
    )
    .expect_code(0);
    p.run_env(&["resume", &run, "--json"], &env);

    let show = p.show(&run);
    let all = show.to_string();
    assert!(!all.contains(TOKEN), "{all}");
    assert!(
        all.contains("Use [redacted] for the deploy."),
        "the message is kept, redacted: {all}"
    );
    assert!(all.contains("not with [redacted]"), "{all}");
    assert!(
        !contains(&p.db_bytes(), TOKEN),
        "the token is in the database file"
    );
}

/// A name or a reason is stored like a message: `runs send --by`, `escalations resolve
/// --by` and `runs cancel --by/--reason` holding a secret the run knows are redacted
/// (the console calls the same functions with its reviewer's name).
#[test]
fn a_secret_in_a_name_or_a_cancel_reason_is_stored_redacted() {
    let p = Project::new();
    p.write("tools.toml", TOOLS);
    p.model_script(json!([
        {"tool_calls": [{"name": "deploy", "args": {}}]},
        {"tool_calls": [{"name": "deploy", "args": {}}]},
        {"text": "done"}
    ]));
    p.task("max_steps = 5", "Deploy.");
    let env = [("DEPLOY_TOKEN", TOKEN)];
    let v = p.run_env(&["start", "task.md", "--json"], &env).json();
    let run = v["run_id"].as_str().expect("run_id").to_string();
    let esc = v["escalation_id"].as_str().expect("escalation").to_string();
    let name = format!("alice {TOKEN}");
    p.run_env(&["runs", "send", &run, "hello", "--by", &name], &env)
        .expect_code(0);
    p.run_env(
        &["escalations", "resolve", &esc, "--approve", "--by", &name],
        &env,
    )
    .expect_code(0);
    let reason = format!("rotating {TOKEN}");
    p.run_env(
        &["runs", "cancel", &run, "--by", &name, "--reason", &reason],
        &env,
    )
    .expect_code(0);
    let all = p.show(&run).to_string();
    assert!(!all.contains(TOKEN), "{all}");
    assert!(all.contains("alice [redacted]"), "{all}");
    assert!(
        !contains(&p.db_bytes(), TOKEN),
        "the token is in the database file"
    );
}

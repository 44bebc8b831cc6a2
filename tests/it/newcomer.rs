//! What a new user trips on in the first hour, second pass (issue 27): `--json` errors,
//! the same answer from every list without a database, help that teaches, and error
//! lines that name the fix.

use crate::common::{Project, Run};
use serde_json::json;

/// `{"error": {"kind", "message"}}` and nothing else on stdout.
fn error_object(r: &Run, kind: &str) -> String {
    let v = r.json();
    assert_eq!(v["error"]["kind"], kind, "{r}");
    assert_eq!(v.as_object().map(|o| o.len()), Some(1), "{r}");
    v["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message\n{r}"))
        .to_string()
}

#[test]
fn json_prints_an_error_object_when_a_command_fails_before_its_output() {
    let p = Project::new();
    p.model_script(json!([{"text": "done"}]));
    p.task("tools = []", "x");
    p.run(&["start", "task.md"]).expect_code(0);
    for args in [
        &["start", "missing.md", "--json"][..],
        &["resume", "nosuchrun", "--json"],
        &["runs", "show", "nosuchrun", "--json"],
        &["escalations", "show", "99", "--json"],
        &["escalations", "resolve", "99", "--approve", "--json"],
        &["runs", "list", "--since", "yesterday-ish", "--json"],
    ] {
        let r = p.run(args);
        r.expect_code(2);
        let message = error_object(&r, "bad_input");
        assert!(
            r.stderr.contains(&message),
            "the same message on stderr\n{r}"
        );
    }
    // Usage errors found by the argument parser, too.
    let r = p.run(&["start", "--json", "--max-steps", "many"]);
    r.expect_code(2);
    assert!(error_object(&r, "usage").contains("many"), "{r}");
    // A command with an error shape of its own keeps it, as one object.
    let r = p.run(&["tools", "check", "--tools", "missing.toml", "--json"]);
    r.expect_code(2);
    assert_eq!(r.json()["ok"], false, "{r}");
}

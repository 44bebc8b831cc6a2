//! Every example in `examples/` runs as the README says, and ends as it should.

use crate::common::{notes, tool_results};
use serde_json::{Value, json};
use std::process::Command;

struct Example {
    db: tempfile::TempDir,
}

impl Example {
    fn new() -> Example {
        Example {
            db: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// Runs agentrun from the repository root, as the README does.
    fn run(&self, args: &[&str]) -> (i32, Value, String) {
        let out = Command::new(crate::common::bin())
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("AGENTRUN_DB", self.db.path().join("examples.db"))
            .args(args)
            .arg("--json")
            .output()
            .expect("spawn agentrun");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}\n{stderr}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        (out.status.code().unwrap_or(-1), v, stderr)
    }

    fn start(&self, name: &str) -> (i32, Value) {
        let (code, v, _) = self.run(&["start", &format!("examples/{name}/task.md")]);
        (code, v)
    }

    fn show(&self, run: &Value) -> Value {
        self.run(&["runs", "show", run["run_id"].as_str().unwrap()])
            .1
    }
}

#[test]
fn transient_failure_recovers_and_the_model_sees_only_the_success() {
    let ex = Example::new();
    let (code, v) = ex.start("transient");
    assert_eq!(code, 0, "{v}");
    let show = ex.show(&v);
    assert_eq!(show["tool_calls"][0]["attempts"], 3);
    assert_eq!(tool_results(&show)[0]["payment"], "captured");
    let backoffs = show["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "backoff")
        .count();
    assert_eq!(backoffs, 2);
}

#[test]
fn outage_falls_back_to_the_cache_and_discloses_it() {
    let ex = Example::new();
    let (code, v) = ex.start("outage");
    assert_eq!(code, 0, "{v}");
    let show = ex.show(&v);
    let r = &tool_results(&show)[0];
    assert_eq!(
        (r["via"].as_str(), r["stale"].as_bool()),
        (Some("kb_cache"), Some(true))
    );
    assert_eq!(show["tool_calls"][0]["via"], "kb_cache");
}

#[test]
fn permission_denied_is_tried_once_and_handed_over() {
    let ex = Example::new();
    let (code, v) = ex.start("permission");
    assert_eq!(code, 0, "{v}");
    let show = ex.show(&v);
    assert_eq!(tool_results(&show)[0]["error"], "permission_denied");
    assert_eq!(show["tool_calls"][0]["attempts"], 1);
    assert!(v["answer"].as_str().unwrap().contains("support team"));
}

#[test]
fn invalid_arguments_are_corrected_on_the_next_turn() {
    let ex = Example::new();
    let (code, v) = ex.start("invalid-args");
    assert_eq!(code, 0, "{v}");
    let r = tool_results(&ex.show(&v));
    assert_eq!(
        (r[0]["error"].as_str(), r[0]["class"].as_str()),
        (Some("schema_violation"), Some("malformed"))
    );
    assert_eq!(r[1]["found"], true);
}

#[test]
fn a_stuck_loop_is_nudged() {
    let ex = Example::new();
    let (code, v) = ex.start("stuck");
    assert_eq!(code, 0, "{v}");
    let show = ex.show(&v);
    let notes = notes(&show);
    let (step, nudge) = notes.first().expect("a nudge");
    assert_eq!(*step, 3);
    assert!(nudge.contains("repeating yourself"), "{nudge}");
}

#[test]
fn a_breaker_trip_is_escalated_and_the_run_resumes_after_a_reply() {
    let ex = Example::new();
    let (code, v) = ex.start("breaker");
    assert_eq!(code, 3, "{v}");
    let esc = v["escalation_id"].as_str().unwrap();
    let (code, e, _) = ex.run(&["escalations", "show", esc]);
    assert_eq!((code, e["kind"].as_str()), (0, Some("breaker_open")));
    let (code, _, _) = ex.run(&[
        "escalations",
        "resolve",
        esc,
        "--reply",
        "payments are down until 14:00",
    ]);
    assert_eq!(code, 0);
    let (code, done, _) = ex.run(&["resume", v["run_id"].as_str().unwrap()]);
    assert_eq!((code, done["status"].as_str()), (0, Some("completed")));
    let r = tool_results(&ex.show(&v));
    assert_eq!(r[3]["error"], "circuit_open");
}

#[test]
fn an_approval_is_required_then_the_run_finishes() {
    let ex = Example::new();
    let (code, v) = ex.start("approval");
    assert_eq!((code, v["status"].as_str()), (3, Some("awaiting_approval")));
    let esc = v["escalation_id"].as_str().unwrap();
    let (code, _, _) = ex.run(&["escalations", "resolve", esc, "--approve"]);
    assert_eq!(code, 0);
    let (code, done, _) = ex.run(&["resume", v["run_id"].as_str().unwrap()]);
    assert_eq!(
        (code, done["answer"].clone()),
        (
            0,
            json!("Done: Dana was emailed that the refund is approved.")
        )
    );
}

#[test]
fn a_structured_answer_is_corrected_and_printed_as_json() {
    let ex = Example::new();
    let (code, v) = ex.start("structured");
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["answer"],
        json!({"order_id": "ORD-1001", "delivered": "2026-11-16", "on_time": true})
    );
    let notes = notes(&ex.show(&v));
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].1.contains("at /on_time"), "{notes:?}");
}

#[test]
fn a_hook_refuses_a_large_refund_and_normalises_the_next_one() {
    let ex = Example::new();
    let (code, v) = ex.start("hooks");
    assert_eq!(code, 0, "{v}");
    let r = tool_results(&ex.show(&v));
    assert_eq!(r[0]["error"], "blocked_by_hook");
    assert!(
        r[0]["message"]
            .as_str()
            .unwrap()
            .contains("refunds over 100 need a manager")
    );
    assert_eq!(
        r[1]["refunded"],
        json!({"order_id": "ORD-1001", "amount": 100})
    );
}

#[test]
fn two_sub_agents_answer_in_parallel_as_child_runs() {
    let ex = Example::new();
    let (code, v) = ex.start("subagents");
    assert_eq!(code, 0, "{v}");
    let show = ex.show(&v);
    let results = tool_results(&show);
    assert_eq!(results.len(), 2, "{results:?}");
    for r in &results {
        assert_eq!(r["source"], "kb/refunds.md, kb/shipping.md", "{r}");
    }
    let children = show["children"].as_array().expect("children");
    assert_eq!(children.len(), 2, "{children:?}");
    assert!(children.iter().all(|c| c["status"] == "completed"));
    // Their spend counts against the lead's budget.
    assert_eq!(show["children_spent"]["steps"], 4);
}

/// The examples run their command tools, stdio MCP servers and hooks sandboxed
/// (issue 22): every one of them is confined, none says `sandbox = "off"`. The examples
/// without a tools.toml of their own use the repository's.
#[test]
fn every_example_runs_its_tools_and_hooks_sandboxed() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    let dirs = std::fs::read_dir(root.join("examples")).unwrap().flatten();
    for dir in dirs.map(|e| e.path()).chain([root.to_path_buf()]) {
        let path = dir.join("tools.toml");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let cfg = agentrun::config::parse(&text, &path)
            .unwrap_or_else(|e| panic!("{}: {e:?}", path.display()));
        for t in cfg.tools.values() {
            if let Some(sb) = cfg.sandbox_of(t) {
                assert!(
                    sb.confines(),
                    "{}: {} is not sandboxed",
                    path.display(),
                    t.name
                );
                checked += 1;
            }
        }
        for hooks in cfg.hooks.by_event.values() {
            for h in hooks {
                assert!(h.command.sandbox.confines(), "{}: a hook", path.display());
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "only {checked} tools and hooks found");
}

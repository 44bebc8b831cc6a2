//! Budgets in money and time (issue 15) through the binary: the guard stops like the
//! step and token budgets (exit 4, `budget_exhausted`, the reason names the budget),
//! the cost is in `--json`, progress and `runs show`, and `resume` raises a budget.
//! The time budget's arithmetic across resumes is pinned with an injected clock in
//! `machine::spend_tests`; here only its stop is checked.

use crate::common::Project;
use serde_json::json;

/// Three turns of 10,000 input and 1,000 output tokens: at the task's own price (USD
/// 100 in, 1,000 out per million) each costs $2.00.
fn project(front: &str) -> Project {
    let p = Project::new();
    p.write("tools.toml", "");
    let turn = |text: &str| json!({"text": text, "usage": {"input": 10_000, "output": 1_000}});
    p.model_script(json!([
        {"tool_calls": [{"name": "nothing", "args": {}}], "usage": {"input": 10_000, "output": 1_000}},
        {"tool_calls": [{"name": "nothing", "args": {}}], "usage": {"input": 10_000, "output": 1_000}},
        turn("done")
    ]));
    p.task(
        &format!("tools = []\nprice = {{ input = 100, output = 1000 }}\n{front}"),
        "Spend some money.",
    );
    p
}

#[test]
fn the_cost_budget_stops_the_run_like_the_step_budget_and_resume_raises_it() {
    let p = project("max_cost = 3");
    let r = p.run(&["start", "task.md", "--json"]);
    let v = r.expect_code(4).json();
    assert_eq!(v["status"], "budget_exhausted");
    assert_eq!(v["steps"], 2);
    assert_eq!(v["cost_usd"], 4.0);
    assert_eq!(v["reason"], "cost budget spent: $4.00 of $3.00 used");
    let id = v["run_id"].as_str().unwrap().to_string();
    let show = p.show(&id);
    assert_eq!(
        (show["cost_usd"].clone(), show["max_cost"].clone()),
        (json!(4.0), json!(3.0))
    );
    let human = p.run(&["runs", "show", &id]).expect_code(0).stdout.clone();
    assert!(human.contains("$4.00 of $3.00"), "{human}");

    let resumed = p.run(&["resume", &id, "--max-cost", "10", "--json"]);
    let v = resumed.expect_code(0).json();
    assert_eq!(v["status"], "completed");
    assert_eq!(v["cost_usd"], 6.0);
    assert_eq!(p.show(&id)["max_cost"], 10.0);
}

#[test]
fn progress_shows_the_cost_off_a_terminal() {
    let p = project("max_cost = 30");
    let r = p.run(&["start", "task.md"]);
    r.expect_code(0);
    assert!(
        r.stderr
            .contains("(22000/200000 tokens used, $4.00 of $30.00)"),
        "{}",
        r.stderr
    );
}

#[test]
fn the_time_budget_stops_the_run_with_the_same_outcome_shape() {
    // Five steps each starting a shell and committing: together far more than the
    // budget of one millisecond, so the guard stops the run at step 2 at the latest.
    let p = Project::new();
    p.write(
        "tools.toml",
        "[tools.work]\ndescription = \"work\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"-c\", \"true\"]\nidempotent = true\n",
    );
    let work = json!({"tool_calls": [{"name": "work", "args": {}}]});
    p.model_script(json!([work, work, work, work, work, {"text": "done"}]));
    p.task("max_duration = \"1ms\"", "Work.");
    let r = p.run(&["start", "task.md", "--json"]);
    let v = r.expect_code(4).json();
    assert_eq!(v["status"], "budget_exhausted");
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.starts_with("time budget spent: "), "{reason}");
    assert!(reason.ends_with(" of 1ms used"), "{reason}");
    let show = p.show(v["run_id"].as_str().unwrap());
    assert_eq!(show["max_duration_ms"], 1);
    assert!(show["duration_ms"].is_u64());
}

#[test]
fn a_money_budget_without_a_price_for_the_model_is_refused_before_anything_is_written() {
    let p = Project::new();
    p.write("tools.toml", "");
    p.model_script(json!([{"text": "hi"}]));
    p.task("tools = []\nmax_cost = 1", "Hi.");
    let r = p.run(&["start", "task.md"]);
    r.expect_code(2);
    assert!(
        r.stderr
            .contains("max_cost needs a price for `script:script.json`"),
        "{r}"
    );
    assert!(!p.db().exists());
}

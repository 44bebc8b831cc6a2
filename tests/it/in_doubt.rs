//! No path repeats an in-doubt effect (docs/security.md, Forks): after a crash inside a
//! non-idempotent call, `resume`, `runs fork` and a message sent before the resume all
//! raise the same `outcome_unknown` escalation and run the call zero times until a
//! person decides; a person who says "run it" gets it run once, under the original
//! call's `AGENTRUN_CALL_ID`, so a deduplicating service can drop it.

use crate::common::{Db, Project};
use serde_json::{Value, json};

/// A charge: appends its `AGENTRUN_CALL_ID` to `charges.log` each time it runs.
const CHARGE: &str = r#"
[tools.charge]
description = "Charge the customer"
input_schema = { type = "object", properties = { cents = { type = "integer" } }, required = ["cents"] }
command = ["sh", "-c", "cat > /dev/null; echo \"$AGENTRUN_CALL_ID\" >> charges.log; echo '{\"charged\": true}'"]
"#;

/// A run killed (crash point) after its charge ran and before the outcome was stored.
fn crashed_in_charge(db: &Db) -> (Project, String) {
    let p = Project::on(db);
    p.write("tools.toml", CHARGE);
    p.model_script(json!([
        {"tool_calls": [{"name": "charge", "args": {"cents": 500}}]},
        {"text": "charged"},
        {"text": "charged"}
    ]));
    p.task("", "Charge the customer 5 dollars.");
    let r = p.run_env(
        &["start", "task.md", "--json"],
        &[("AGENTRUN_CRASH_AT", "after_tool_effect:1")],
    );
    assert_eq!(r.code, -1, "should have crashed: {r}");
    let id = p.only_run();
    assert_eq!(charges(&p).len(), 1);
    (p, id)
}

fn charges(p: &Project) -> Vec<String> {
    std::fs::read_to_string(p.path().join("charges.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The one open escalation of `run`, which must be `outcome_unknown` about `charge`.
fn unknown_escalation(p: &Project, run: &str) -> String {
    let list = p
        .run(&["escalations", "list", "--json"])
        .expect_code(0)
        .json();
    let mine: Vec<&Value> = list
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["run_id"] == run)
        .collect();
    assert_eq!(mine.len(), 1, "{list}");
    assert_eq!(mine[0]["kind"], "outcome_unknown", "{list}");
    mine[0]["id"].to_string().trim_matches('"').to_string()
}

#[test]
fn a_fork_after_a_crash_in_a_charge_asks_a_person_and_reruns_it_under_the_original_id() {
    fork_runs_no_in_doubt_effect(&Db::Sqlite);
}

/// The suite on a backend (`tests/it/pg.rs` runs it on PostgreSQL).
pub fn fork_runs_no_in_doubt_effect(db: &Db) {
    let (p, original) = crashed_in_charge(db);
    let v = p
        .run(&["runs", "fork", &original, "--json"])
        .expect_code(3)
        .json();
    let fork = v["run_id"].as_str().expect("run_id").to_string();
    assert_ne!(fork, original);
    assert_eq!(v["status"], "escalated", "{v}");
    assert_eq!(charges(&p).len(), 1, "the fork ran the charge again");
    let esc = unknown_escalation(&p, &fork);
    p.run(&["escalations", "resolve", &esc, "--approve"])
        .expect_code(0);
    let done = p.run(&["resume", &fork, "--json"]).expect_code(0).json();
    assert_eq!(done["status"], "completed", "{done}");
    let log = charges(&p);
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(log[1], log[0], "re-run under the original call id");
    assert!(log[0].starts_with(&format!("{original}:")), "{log:?}");
}

#[test]
fn a_message_sent_before_the_resume_does_not_skip_the_in_doubt_charge() {
    let (p, original) = crashed_in_charge(&Db::Sqlite);
    p.run(&["runs", "send", &original, "Charge them now.", "--by", "ops"])
        .expect_code(0);
    let v = p
        .run(&["resume", &original, "--json"])
        .expect_code(3)
        .json();
    assert_eq!(v["status"], "escalated", "{v}");
    assert_eq!(charges(&p).len(), 1);
    unknown_escalation(&p, &original);
}

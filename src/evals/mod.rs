//! Changing with confidence (docs/testing-changes.md): recorded runs become regression
//! tests, and suites of tasks are scored against models.
//!
//! - `case`: a run turned into a self-contained test case (`runs export --as-test`).
//! - `observed`: what a run did — its calls in order with their outcomes, its
//!   escalations, its status and answer — as lines a person can diff.
//! - `diff`: a line diff of the recorded lines against the new ones.
//! - `replay`: the tools of a case answered from its recording (no side effects).
//! - `testrun`: one case re-run against the current configuration (`agentrun test`).
//! - `child`: runs started, resumed and read through agentrun's own command line.
//! - `suite`, `checks`, `eval`, `stats`, `report`: `agentrun eval` — a suite file, the
//!   checks that score a run, the slots driven as durable runs, pass rates with their
//!   noise and the regression rule, and the report.
//!
//! Everything here reads runs through the JSON of `runs show --json` (docs/cli.md), the
//! same document scripts read, so it does not depend on how the store keeps them.

pub mod case;
pub mod checks;
pub mod child;
pub mod diff;
pub mod eval;
pub mod observed;
pub mod replay;
pub mod report;
pub mod stats;
pub mod suite;
pub mod testrun;

/// JSON with its object keys sorted at every depth, so a file written from it is the
/// same bytes for the same content (stable to diff in git).
pub fn canonical(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = serde_json::Map::new();
            for k in keys {
                out.insert(k.clone(), canonical(&map[k]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// Compact canonical JSON text, for one-line renderings of arguments.
pub fn compact(v: &serde_json::Value) -> String {
    canonical(v).to_string()
}

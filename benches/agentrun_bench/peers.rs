//! The peers, side by side: when `benches/peers/run.sh` has left its figures in
//! `target/peers.json`, the report gets a table of the same workload run by
//! LangGraph + SqliteSaver and by DBOS on SQLite, as ratios to agentrun's figures and
//! to the floor measured in this run. Without the file the section says how to get it.
//!
//! The file: `{"load": "...", "peers": {NAME: {"version": "...", "per_step_ms":
//! {"100": ms, ...}, "bytes_per_step": n, "resume_ms": ms, "resume_steps": n,
//! "cold_start_ms": ms}}}`. Each figure is the peer's whole run divided by its steps
//! (a step: one scripted model turn calling one trivial tool, a durable checkpoint),
//! like agentrun's *whole run / step* column with the HTTP tool.

use super::Row;
use super::report::{Table, num};
use serde_json::Value;
use std::path::Path;

/// `own`: agentrun's own row for the second table (bytes / step, resume, cold start),
/// already formatted.
pub fn report(file: &Path, rows: &[Row], floor: f64, own: [String; 3]) -> String {
    let mut out = String::from("\n### Next to the peers (same workload, same machine)\n\n");
    let Some(peers) = std::fs::read_to_string(file)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
    else {
        out.push_str(&format!(
            "No peer figures ({} not found): run `benches/peers/run.sh` first \
             (it installs LangGraph and DBOS in a throwaway virtualenv).\n",
            file.display()
        ));
        return out;
    };
    if let Some(load) = peers["load"].as_str() {
        out.push_str(&format!("Peers measured with load average {load}.\n\n"));
    }
    let ours = |steps: u64| {
        rows.iter()
            .find(|r| r.tool == "HTTP" && u64::from(r.steps) == steps)
            .map(|r| r.wall_ms / r.steps as f64)
    };
    let mut t = Table::new(&[
        "peer",
        "steps",
        "peer ms / step",
        "× floor",
        "agentrun ms / step (HTTP, whole run)",
        "peer ÷ agentrun",
    ]);
    let empty = serde_json::Map::new();
    for (name, p) in peers["peers"].as_object().unwrap_or(&empty) {
        let version = p["version"].as_str().unwrap_or("?");
        for (steps, ms) in p["per_step_ms"].as_object().unwrap_or(&empty) {
            let (Ok(steps), Some(ms)) = (steps.parse::<u64>(), ms.as_f64()) else {
                continue;
            };
            let agentrun = ours(steps);
            t.row(vec![
                format!("{name} {version}"),
                steps.to_string(),
                num(ms),
                num(ms / floor),
                agentrun.map_or("—".into(), num),
                agentrun.map_or("—".into(), |a| format!("{}×", num(ms / a))),
            ]);
        }
    }
    out.push_str(&t.finish());
    let mut t = Table::new(&["peer", "bytes / step", "resume", "cold start"]);
    let [bytes, resume, cold] = own;
    t.row(vec!["agentrun".into(), bytes, resume, cold]);
    for (name, p) in peers["peers"].as_object().unwrap_or(&empty) {
        let f = |k: &str| p[k].as_f64().map_or("—".into(), num);
        t.row(vec![
            name.clone(),
            f("bytes_per_step"),
            format!(
                "{} ms ({} steps)",
                f("resume_ms"),
                p["resume_steps"].as_u64().unwrap_or(0)
            ),
            format!("{} ms", f("cold_start_ms")),
        ]);
    }
    out.push('\n');
    out.push_str(&t.finish());
    out
}

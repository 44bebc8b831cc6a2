//! Shared by `tests/crash.rs` and `tests/soak.rs` (issue 6): a project whose tools
//! record every side effect and whose scripted model records every request, both in
//! one append-only log, and the exactly-once checks run over a finished run.
//!
//! Why one log for both: ordering is the evidence. A tool of turn K only runs after
//! turn K's response was stored, and turn K+1 is only asked for after step K was
//! committed, so any request for turn K that comes after either in the log is a model
//! call paid for twice. The log is written by the process under test only through the
//! debug-only `fault::observe` hook (`AGENTRUN_OBSERVE_LOG`), and by the tools
//! themselves, so it sees requests and effects even when the database never does.

#![allow(dead_code)]

use crate::common::{Project, Run, transcript};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// `idem` may run again after a crash; `once` must not, and tells the model when its
/// outcome is unknown.
pub const TOOLS: &str = r#"
[tools.idem]
description = "An idempotent write"
input_schema = { type = "object" }
command = ["sh", "effect.sh", "idem"]
idempotent = true

[tools.once]
description = "A write that must not happen twice"
input_schema = { type = "object" }
command = ["sh", "effect.sh", "once"]
on_unknown = "tell_model"

[tools.once_escalate]
description = "A write that must not happen twice; a person decides when unsure"
input_schema = { type = "object" }
command = ["sh", "effect.sh", "once_escalate"]
"#;

/// Appends `effect TOOL CALL_ID` before answering, so the line exists whenever the
/// side effect does.
const EFFECT_TOOL: &str = r#"#!/bin/sh
cat > /dev/null
echo "effect $1 ${AGENTRUN_CALL_ID##*:}" >> observe.log
printf '{"done": "%s"}\n' "${AGENTRUN_CALL_ID##*:}"
"#;

/// A project whose script makes, per turn, one call to each tool named, then answers.
/// Call ids are the script's defaults: `call_{turn}_{index}`.
pub fn project(turns: &[&[&str]]) -> Project {
    project_on(turns, &crate::common::Db::Sqlite)
}

/// [`project`] with its database on `db`.
pub fn project_on(turns: &[&[&str]], db: &crate::common::Db) -> Project {
    let p = Project::on(db);
    p.script("effect.sh", EFFECT_TOOL);
    p.write("tools.toml", TOOLS);
    let mut script: Vec<Value> = turns
        .iter()
        .enumerate()
        .map(|(t, tools)| {
            let calls: Vec<Value> = tools
                .iter()
                .enumerate()
                .map(|(i, name)| json!({"name": name, "args": {"turn": t, "i": i}}))
                .collect();
            json!({"tool_calls": calls, "usage": {"input": 10, "output": 2}})
        })
        .collect();
    script.push(json!({"text": "all done", "usage": {"input": 10, "output": 3}}));
    p.model_script(json!(script));
    p.task(&format!("max_steps = {}", turns.len() + 5), "Do the work.");
    p
}

/// Runs agentrun with the observation log on, plus `extra` environment.
pub fn run(p: &Project, args: &[&str], extra: &[(&str, &str)]) -> Run {
    let log = p.path().join("observe.log");
    let mut env = vec![("AGENTRUN_OBSERVE_LOG", log.to_str().expect("utf-8 path"))];
    env.extend_from_slice(extra);
    p.run_env(args, &env)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The scripted model was asked for this turn.
    Turn(usize),
    Effect {
        tool: String,
        call_id: String,
    },
}

pub fn observed(p: &Project) -> Vec<Seen> {
    let text = std::fs::read_to_string(p.path().join("observe.log")).unwrap_or_default();
    text.lines()
        .map(|l| match l.split(' ').collect::<Vec<_>>()[..] {
            ["turn", k] => Seen::Turn(k.parse().expect("turn index")),
            ["effect", tool, id] => Seen::Effect {
                tool: tool.to_string(),
                call_id: id.to_string(),
            },
            _ => panic!("unexpected observe.log line {l:?}"),
        })
        .collect()
}

pub fn turns_requested(seen: &[Seen]) -> Vec<usize> {
    seen.iter()
        .filter_map(|s| match s {
            Seen::Turn(k) => Some(*k),
            Seen::Effect { .. } => None,
        })
        .collect()
}

pub fn effect_counts(seen: &[Seen]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for s in seen {
        if let Seen::Effect { call_id, .. } = s {
            *out.entry(call_id.clone()).or_default() += 1;
        }
    }
    out
}

/// No turn is asked for once there is evidence it was stored: a later turn was asked
/// for, or one of its tools ran.
pub fn check_no_stored_turn_requested_again(seen: &[Seen]) -> Result<(), String> {
    let mut stored_up_to: Option<usize> = None;
    for (i, s) in seen.iter().enumerate() {
        match s {
            Seen::Turn(k) if stored_up_to.is_some_and(|m| *k <= m) => {
                return Err(format!(
                    "turn {k} requested again (observe.log line {}) after it was stored: {seen:?}",
                    i + 1
                ));
            }
            Seen::Turn(k) => stored_up_to = k.checked_sub(1).max(stored_up_to),
            Seen::Effect { call_id, .. } => {
                let k = turn_of(call_id);
                stored_up_to = Some(stored_up_to.map_or(k, |m| m.max(k)));
            }
        }
    }
    Ok(())
}

fn turn_of(call_id: &str) -> usize {
    call_id
        .split('_')
        .nth(1)
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("call id {call_id} is not call_T_I"))
}

/// The finished run's journal row for each call id.
pub fn journal(show: &Value) -> BTreeMap<String, Value> {
    show["tool_calls"]
        .as_array()
        .expect("tool_calls")
        .iter()
        .map(|c| {
            (
                c["call_id"].as_str().expect("call_id").to_string(),
                c.clone(),
            )
        })
        .collect()
}

/// The transcript equals the uninterrupted one except for the results of calls the
/// journal says ended `unknown`: those must be `once` calls, and their result the
/// `outcome_unknown` error. Returns those call ids.
pub fn check_transcript(want: &Value, got: &Value) -> Result<Vec<String>, String> {
    let (want_t, got_t) = (transcript(want), transcript(got));
    if want_t.len() != got_t.len() {
        return Err(format!(
            "{} messages, want {}:\n{got_t:#?}",
            got_t.len(),
            want_t.len()
        ));
    }
    let journal = journal(got);
    let mut unknown = Vec::new();
    for (w, g) in want_t.iter().zip(&got_t) {
        if w == g {
            continue;
        }
        let id = g.2[0]["call_id"].as_str().unwrap_or_default().to_string();
        let row = journal.get(&id);
        let allowed = g.1 == "tool"
            && w.1 == "tool"
            && w.2[0]["call_id"] == g.2[0]["call_id"]
            && g.2[0]["is_error"] == true
            && g.2[0]["content"]["error"] == "outcome_unknown"
            && row.is_some_and(|r| r["status"] == "unknown" && r["tool"] == "once");
        if !allowed {
            return Err(format!("message differs:\n want {w:?}\n got  {g:?}"));
        }
        unknown.push(id);
    }
    Ok(unknown)
}

/// Every tool call in the transcript has exactly one result.
pub fn check_one_result_per_call(show: &Value) -> Result<(), String> {
    let parts: Vec<Value> = transcript(show)
        .into_iter()
        .flat_map(|(_, _, c)| c.as_array().cloned().unwrap_or_default())
        .collect();
    for call in parts.iter().filter(|p| p["type"] == "tool_call") {
        let n = parts
            .iter()
            .filter(|p| p["type"] == "tool_result" && p["call_id"] == call["id"])
            .count();
        if n != 1 {
            return Err(format!("call {} has {n} results", call["id"]));
        }
    }
    Ok(())
}

/// `once` calls with a known outcome ran exactly once, unknown ones at most once;
/// `idem` calls at least once.
pub fn check_effects(show: &Value, effects: &BTreeMap<String, usize>) -> Result<(), String> {
    for (id, row) in journal(show) {
        let n = effects.get(&id).copied().unwrap_or(0);
        let ok = match (row["tool"].as_str(), row["status"].as_str()) {
            (Some("idem"), _) => n >= 1,
            (Some("once"), Some("unknown")) => n <= 1,
            (Some("once"), _) => n == 1,
            _ => false,
        };
        if !ok {
            return Err(format!("call {id} ({row}) took effect {n} times"));
        }
    }
    Ok(())
}

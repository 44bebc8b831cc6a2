//! Tools answered from a case's recording, so `agentrun test` has no side effects.
//!
//! The current tools.toml is kept whole — schemas, approval, policy, hooks, fallbacks,
//! retries: everything a change could break — and only what each command or HTTP tool
//! *does* is swapped: it becomes `agentrun replay-tool CASE TOOL`, which prints the
//! result the recorded run got for the same call. Calls are matched by their id (a
//! script names them `call_{turn}_{index}`, the id ends `AGENTRUN_CALL_ID`) with the
//! same tool and arguments, else by the first recorded call of that tool with those
//! arguments. A call the recording never ran answers `not_found`, saying so, and the
//! test's diff shows it.

use super::case::{Case, Recorded};
use serde_json::Value;
use std::path::Path;

/// Keys of a tool table that say how it runs or what it may reach: dropped, since the
/// replay runs none of it.
const HOW_IT_RUNS: [&str; 8] = [
    "command", "http", "env", "set", "inherit", "sandbox", "writable", "network",
];

#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
pub struct ReplayError {
    pub path: String,
    pub why: String,
}

/// The text of a tools.toml like `current` (read from `path`) whose command and HTTP
/// tools answer from the case at `case_file` through `exe replay-tool`.
pub fn replay_config(
    current: &str,
    path: &Path,
    exe: &Path,
    case_file: &Path,
) -> Result<String, ReplayError> {
    let err = |why: String| ReplayError {
        path: path.display().to_string(),
        why,
    };
    let mut doc: toml::Table = current.parse().map_err(|e| err(format!("{e}")))?;
    let Some(tools) = doc.get_mut("tools").and_then(toml::Value::as_table_mut) else {
        return toml::to_string(&doc).map_err(|e| err(e.to_string()));
    };
    for (name, def) in tools.iter_mut() {
        let Some(def) = def.as_table_mut() else {
            continue;
        };
        if !def.contains_key("command") && !def.contains_key("http") {
            continue; // MCP and agent tools run as configured.
        }
        for key in HOW_IT_RUNS {
            def.remove(key);
        }
        let argv = [
            exe.display().to_string(),
            "replay-tool".into(),
            case_file.display().to_string(),
            name.clone(),
        ];
        def.insert("command".into(), toml::Value::from(argv.to_vec()));
        // Nothing to confine: the replay reads one file and prints.
        def.insert("sandbox".into(), "off".into());
        // A recorded transient failure is retried as configured, without the waits.
        def.insert("backoff".into(), "1ms".into());
        def.insert("max_backoff".into(), "1ms".into());
    }
    toml::to_string(&doc).map_err(|e| err(e.to_string()))
}

/// What `replay-tool` prints for a call of `tool` with `args` (`call_id`: the end of
/// `AGENTRUN_CALL_ID`).
pub fn answer(case: &Case, tool: &str, args: &Value, call_id: &str) -> String {
    let args = super::canonical(args);
    let same = |r: &&Recorded| r.tool == tool && super::canonical(&r.args) == args;
    let found = case
        .tool_results
        .iter()
        .filter(same)
        .find(|r| r.call == call_id)
        .or_else(|| case.tool_results.iter().find(same));
    match found {
        Some(r) if !r.is_error => match &r.content {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        },
        Some(r) => recorded_error(r),
        None => serde_json::json!({
            "error": "not_found",
            "message": format!(
                "replay: the recorded run never called {tool} with {}",
                super::compact(&args)
            ),
        })
        .to_string(),
    }
}

/// A recorded failure, as the tool reports it: the kinds a tool may name come back as
/// they were; one only agentrun gives (a schema failure, a guard) never reached the
/// tool in the recording, so there is nothing to replay.
fn recorded_error(r: &Recorded) -> String {
    let kind = r.content["error"].as_str().unwrap_or("tool_bug");
    let class = r.content["class"].as_str().unwrap_or_default();
    let message = r.content["message"].as_str().unwrap_or_default();
    let (kind, message) = if matches!(class, "transient" | "permanent") {
        (kind.to_string(), message.to_string())
    } else {
        (
            "not_found".to_string(),
            format!(
                "replay: the recorded run never ran this call of {} (it was {kind})",
                r.tool
            ),
        )
    };
    let mut out = serde_json::json!({"error": kind, "message": message});
    if let Some(s) = r.content.get("retry_after_s") {
        out["retry_after"] = s.clone();
    }
    out.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evals::case::TaskRef;
    use crate::evals::observed::Observed;
    use serde_json::json;

    fn case() -> Case {
        let rec = |call: &str, q: &str, content: Value, is_error| Recorded {
            call: call.into(),
            tool: "search".into(),
            args: json!({"q": q}),
            content,
            is_error,
        };
        Case {
            format: 1,
            task: TaskRef {
                file: None,
                text: String::new(),
            },
            tools: None,
            tool_results: vec![
                rec("call_0_0", "a", json!({"hits": 1}), false),
                rec("call_1_0", "a", json!("plain text"), false),
                rec(
                    "call_2_0",
                    "b",
                    json!({"error": "unavailable", "class": "transient", "message": "down"}),
                    true,
                ),
            ],
            expect: Observed {
                calls: vec![],
                escalations: vec![],
                status: "completed".into(),
                answer: None,
            },
        }
    }

    #[test]
    fn a_call_gets_its_own_recorded_result_then_the_first_with_its_arguments() {
        let c = case();
        assert_eq!(
            answer(&c, "search", &json!({"q": "a"}), "call_1_0"),
            "plain text"
        );
        assert_eq!(
            answer(&c, "search", &json!({"q": "a"}), "call_9_9"),
            r#"{"hits":1}"#
        );
        assert_eq!(
            answer(&c, "search", &json!({"q": "b"}), "call_2_0"),
            r#"{"error":"unavailable","message":"down"}"#
        );
        let none = answer(&c, "search", &json!({"q": "c"}), "call_0_0");
        let none: Value = serde_json::from_str(&none).unwrap();
        assert_eq!(
            none["message"],
            r#"replay: the recorded run never called search with {"q":"c"}"#
        );
    }

    #[test]
    fn only_what_a_tool_does_is_swapped() {
        let current = r#"
[policy]
breaker_threshold = 2
[tools.a]
description = "A"
input_schema = { type = "object" }
command = ["python3", "a.py"]
env = ["A_TOKEN"]
approval = "always"
"#;
        let out = replay_config(
            current,
            Path::new("tools.toml"),
            Path::new("/bin/agentrun"),
            Path::new("/c/case.json"),
        )
        .unwrap();
        let doc: toml::Table = out.parse().unwrap();
        let a = &doc["tools"]["a"];
        assert_eq!(
            a["command"],
            toml::Value::from(vec!["/bin/agentrun", "replay-tool", "/c/case.json", "a"])
        );
        assert_eq!(a["approval"].as_str(), Some("always"));
        assert!(a.get("env").is_none());
        assert_eq!(doc["policy"]["breaker_threshold"].as_integer(), Some(2));
    }
}

//! A recorded run as a self-contained regression test (`runs export RUN --as-test DIR`).
//!
//! A case is a folder of two files, both canonical JSON (sorted keys, no ids or times
//! that change between exports) so it diffs cleanly in git:
//!
//! - `script.json`: the model's turns, in the scripted model's format, so the case
//!   replays the model offline;
//! - `case.json`: the task (where its file is, relative to the case, and its text as
//!   recorded), the tools.toml it ran with, the tool results the run saw, and what to
//!   expect ([`Observed`]: the calls in order with arguments and outcomes, the
//!   escalations, the final status and answer).
//!
//! Secrets are redacted on the way out with the run's own redactor (the values its
//! config knows) and the value patterns of `redact::is_secret_value`.

use super::observed::{Observed, result_of};
use crate::redact::{REDACTED, Secrets, is_secret_value};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::{Component, Path, PathBuf};

pub const CASE_FILE: &str = "case.json";
pub const SCRIPT_FILE: &str = "script.json";
const FORMAT: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub format: u32,
    pub task: TaskRef,
    /// The tools.toml the run used, relative to the case folder (when it still exists).
    #[serde(default)]
    pub tools: Option<String>,
    pub tool_results: Vec<Recorded>,
    pub expect: Observed,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskRef {
    /// The task file, relative to the case folder: the current version is what a test
    /// runs (a prompt change shows up), the recorded text when it is gone.
    #[serde(default)]
    pub file: Option<String>,
    pub text: String,
}

/// One tool result the run saw, as the model saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recorded {
    pub call: String,
    pub tool: String,
    pub args: Value,
    pub content: Value,
    pub is_error: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    #[error("{path}: {why}")]
    Read { path: String, why: String },
    #[error("{path}: cannot write: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// What an export knows besides the run's JSON.
pub struct Source<'a> {
    /// `runs show --json` of the run.
    pub run: &'a Value,
    /// The run's task file as it is now, when it still holds the run's task.
    pub task_file: Option<PathBuf>,
    pub tools_file: Option<PathBuf>,
    /// The run's tool subset and step budget, to rebuild a task file that is gone.
    pub tool_subset: Option<Vec<String>>,
    pub secrets: &'a Secrets,
}

/// Writes the case for `src` into `dir` (created). Returns the expectations written.
pub fn export(src: &Source<'_>, dir: &Path) -> Result<Observed, CaseError> {
    std::fs::create_dir_all(dir).map_err(|source| CaseError::Write {
        path: dir.display().to_string(),
        source,
    })?;
    let mut ids = Vec::new();
    let expect = Observed::from_run(src.run, &mut ids);
    let messages = src.run["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let tool_results = ids
        .iter()
        .zip(&expect.calls)
        .filter_map(|((recorded, _), call)| {
            let (content, is_error) = result_of(messages, recorded)?;
            Some(Recorded {
                call: call.id.clone(),
                tool: call.tool.clone(),
                args: call.args.clone(),
                content: content.clone(),
                is_error,
            })
        })
        .collect();
    let case = Case {
        format: FORMAT,
        task: task_ref(src, dir),
        tools: src.tools_file.as_deref().map(|t| relative(dir, t)),
        tool_results,
        expect: expect.clone(),
    };
    let mut case_json = serde_json::to_value(&case).map_err(|e| CaseError::Read {
        path: dir.display().to_string(),
        why: e.to_string(),
    })?;
    let mut script = json!({ "turns": turns(messages) });
    scrub(&mut case_json, src.secrets);
    scrub(&mut script, src.secrets);
    write_json(&dir.join(CASE_FILE), &case_json)?;
    write_json(&dir.join(SCRIPT_FILE), &script)?;
    Ok(expect)
}

/// The task: its file (relative to the case) and text, or a file rebuilt from the
/// run's prompt, tool subset and step budget when the file is gone.
fn task_ref(src: &Source<'_>, dir: &Path) -> TaskRef {
    if let Some(file) = &src.task_file
        && let Ok(text) = std::fs::read_to_string(file)
    {
        return TaskRef {
            file: Some(relative(dir, file)),
            text,
        };
    }
    let mut front = String::new();
    if let Some(tools) = &src.tool_subset {
        front.push_str(&format!("tools = {}\n", json!(tools)));
    }
    if let Some(n) = src.run["max_steps"].as_u64() {
        front.push_str(&format!("max_steps = {n}\n"));
    }
    let prompt = src.run["task"].as_str().unwrap_or_default();
    TaskRef {
        file: None,
        text: format!("+++\n{front}+++\n{prompt}\n"),
    }
}

/// The model's turns as a script: text and calls of every assistant message, in order;
/// call ids are left to the script (`call_{turn}_{index}`), as [`Observed`] names them.
fn turns(messages: &[Value]) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| {
            let parts = m["content"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            let text: String = parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect();
            let calls: Vec<Value> = parts
                .iter()
                .filter(|p| p["type"] == "tool_call")
                .map(|p| json!({"name": p["name"], "args": p["args"]}))
                .collect();
            let mut turn = json!({});
            if !text.is_empty() || calls.is_empty() {
                turn["text"] = text.into();
            }
            if !calls.is_empty() {
                turn["tool_calls"] = calls.into();
            }
            turn
        })
        .collect()
}

/// Redacts every string: the values the run's config knows as secrets, then any word
/// shaped like a credential (token prefixes, keys, URL passwords).
pub fn scrub(v: &mut Value, secrets: &Secrets) {
    secrets.json(v);
    match v {
        Value::String(s) if s.split_whitespace().any(is_secret_value) => {
            *s = s
                .split_inclusive(char::is_whitespace)
                .map(|w| {
                    let word = w.trim_end();
                    if is_secret_value(word) {
                        format!("{REDACTED}{}", &w[word.len()..])
                    } else {
                        w.to_string()
                    }
                })
                .collect();
        }
        Value::Array(items) => items.iter_mut().for_each(|i| scrub(i, secrets)),
        Value::Object(map) => map.values_mut().for_each(|i| scrub(i, secrets)),
        _ => {}
    }
}

fn write_json(path: &Path, v: &Value) -> Result<(), CaseError> {
    let text = serde_json::to_string_pretty(&super::canonical(v)).unwrap_or_default() + "\n";
    std::fs::write(path, text).map_err(|source| CaseError::Write {
        path: path.display().to_string(),
        source,
    })
}

/// Reads a case folder's `case.json`.
pub fn load(dir: &Path) -> Result<Case, CaseError> {
    let path = dir.join(CASE_FILE);
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|e| CaseError::Read {
        path: shown.clone(),
        why: e.to_string(),
    })?;
    let case: Case = serde_json::from_str(&text).map_err(|e| CaseError::Read {
        path: shown.clone(),
        why: e.to_string(),
    })?;
    if case.format != FORMAT {
        return Err(CaseError::Read {
            path: shown,
            why: format!("format {} (this agentrun reads {FORMAT})", case.format),
        });
    }
    Ok(case)
}

/// `to` relative to the folder `from` (both made absolute against the current folder),
/// with `/` separators.
pub fn relative(from: &Path, to: &Path) -> String {
    let abs = |p: &Path| {
        let p = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        p.canonicalize().unwrap_or(p)
    };
    let (from, to) = (abs(from), abs(to));
    let a: Vec<Component> = from.components().collect();
    let b: Vec<Component> = to.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut parts: Vec<String> = vec!["..".into(); a.len() - common];
    parts.extend(
        b[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_climb_out_of_the_case_folder() {
        let from = Path::new("/a/b/cases/one");
        assert_eq!(
            relative(from, Path::new("/a/b/tools.toml")),
            "../../tools.toml"
        );
        assert_eq!(relative(from, Path::new("/a/b/cases/one/x")), "x");
    }

    #[test]
    fn scrub_redacts_known_values_and_credential_shaped_words() {
        let mut secrets = Secrets::default();
        secrets.add("hunter2-secret");
        let mut v = json!({"a": "pw hunter2-secret here", "b": ["key sk-abcdefghijklmnop end"]});
        scrub(&mut v, &secrets);
        assert_eq!(
            v,
            json!({"a": "pw [redacted] here", "b": ["key [redacted] end"]})
        );
    }

    #[test]
    fn an_assistant_turn_keeps_its_text_and_calls_without_ids() {
        let messages = [json!({"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_call", "id": "x9", "name": "a", "args": {"q": 1}}]})];
        assert_eq!(
            turns(&messages),
            [json!({"text": "Looking.", "tool_calls": [{"name": "a", "args": {"q": 1}}]})]
        );
    }
}

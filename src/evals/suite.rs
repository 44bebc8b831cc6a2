//! A suite file (`agentrun eval SUITE.toml`): tasks, each with the checks that score
//! its runs, and the models and repeats to run them with. Paths in it (task files,
//! tools.toml, `script:` models) are relative to the suite's folder.
//!
//! ```toml
//! name = "shop"
//! tools = "../quickstart/tools.toml"
//! models = ["script:good.json"]
//! repeat = 5
//!
//! [[task]]
//! name = "refund"
//! file = "../quickstart/task.md"      # or prompt = "..."
//! checks = [{ answer_contains = "30 days" }, { tool_called = "lookup_order" }]
//! ```

use super::checks::Check;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSuite {
    name: Option<String>,
    tools: Option<String>,
    #[serde(default)]
    models: Vec<String>,
    repeat: Option<u32>,
    #[serde(default)]
    task: Vec<RawTask>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    name: String,
    file: Option<String>,
    prompt: Option<String>,
    /// The status a passing run ends with.
    status: Option<String>,
    #[serde(default)]
    checks: Vec<Check>,
}

/// A suite, checked and with its paths resolved.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Suite {
    pub name: String,
    pub tools: Option<PathBuf>,
    pub models: Vec<String>,
    pub repeat: u32,
    pub tasks: Vec<SuiteTask>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SuiteTask {
    pub name: String,
    pub source: TaskSource,
    pub status: String,
    pub checks: Vec<Check>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum TaskSource {
    File(PathBuf),
    Prompt(String),
}

#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
pub struct SuiteError {
    pub path: String,
    pub why: String,
}

/// Reads and checks the suite at `path`.
pub fn load(path: &Path) -> Result<Suite, SuiteError> {
    let err = |why: String| SuiteError {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let raw: RawSuite = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let at = |rel: &str| dir.join(rel);
    if raw.task.is_empty() {
        return Err(err("no [[task]]: a suite needs at least one task".into()));
    }
    let mut tasks = Vec::new();
    for t in raw.task {
        if tasks.iter().any(|x: &SuiteTask| x.name == t.name) {
            return Err(err(format!("task `{}` is named twice", t.name)));
        }
        let source = match (t.file, t.prompt) {
            (Some(f), None) => TaskSource::File(at(&f)),
            (None, Some(p)) => TaskSource::Prompt(p),
            _ => {
                return Err(err(format!(
                    "task `{}`: give exactly one of `file` and `prompt`",
                    t.name
                )));
            }
        };
        for c in &t.checks {
            c.validate()
                .map_err(|why| err(format!("task `{}`: {why}", t.name)))?;
        }
        tasks.push(SuiteTask {
            name: t.name,
            source,
            status: t.status.unwrap_or_else(|| "completed".into()),
            checks: t.checks,
        });
    }
    Ok(Suite {
        name: raw.name.unwrap_or_else(|| stem(path)),
        tools: raw.tools.map(|t| at(&t)),
        models: raw.models.iter().map(|m| relative_script(dir, m)).collect(),
        repeat: raw.repeat.unwrap_or(1).max(1),
        tasks,
    })
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "eval".into())
}

/// A `script:` model named in the suite is relative to the suite's folder.
fn relative_script(dir: &Path, spec: &str) -> String {
    match spec.strip_prefix("script:") {
        Some(p) if Path::new(p).is_relative() => format!("script:{}", dir.join(p).display()),
        _ => spec.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite(text: &str) -> Result<Suite, SuiteError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, text).unwrap();
        load(&path)
    }

    #[test]
    fn a_suite_resolves_paths_against_its_folder() {
        let s = suite(
            "models = [\"script:m.json\", \"openai:x\"]\nrepeat = 3\n[[task]]\nname = \"a\"\nfile = \"t.md\"\nchecks = [{ answer_contains = \"x\" }, { max_steps = 3 }]\n",
        )
        .unwrap();
        assert_eq!(s.name, "s");
        assert_eq!(s.repeat, 3);
        assert!(s.models[0].ends_with("/m.json") && s.models[0].len() > 14);
        assert_eq!(s.models[1], "openai:x");
        assert_eq!(s.tasks[0].checks.len(), 2);
        assert_eq!(s.tasks[0].status, "completed");
    }

    #[test]
    fn mistakes_name_the_task_and_the_problem() {
        let e = suite("[[task]]\nname = \"a\"\n").unwrap_err();
        assert!(e.why.contains("task `a`: give exactly one of"), "{e}");
        let e = suite(
            "[[task]]\nname = \"a\"\nprompt = \"p\"\nchecks = [{ answer_matches = \"(\" }]\n",
        )
        .unwrap_err();
        assert!(e.why.contains("task `a`: answer_matches"), "{e}");
        let e = suite("[[task]]\nname = \"a\"\nprompt = \"p\"\nchecks = [{ colour = 1 }]\n")
            .unwrap_err();
        assert!(e.why.contains("unknown variant `colour`"), "{e}");
    }
}

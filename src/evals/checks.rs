//! The checks that score an eval's run, each read from the run's `runs show --json`
//! document. A run passes when it ended with the task's expected status and every
//! check passed.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// One check, written in a suite as a one-key table: `{ answer_contains = "30 days" }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Check {
    AnswerContains(String),
    /// A regular expression (Rust `regex` syntax) the answer must match.
    AnswerMatches(String),
    /// A JSON schema the answer (parsed as JSON) must validate against.
    AnswerSchema(Value),
    ToolCalled(String),
    ToolNotCalled(String),
    MaxSteps(u64),
    /// USD, at the model's list price.
    MaxCost(f64),
    NoEscalation(bool),
    /// A command given the run's JSON on stdin that prints a score; the run passes
    /// this check when the score is at least `min`.
    Scorer(Scorer),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scorer {
    pub command: Vec<String>,
    #[serde(default = "one")]
    pub min: f64,
}

fn one() -> f64 {
    1.0
}

/// How one check went on one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    pub check: String,
    pub passed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Check {
    /// What is wrong with the check itself (a bad pattern or schema), before any run.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Check::AnswerMatches(re) => regex::Regex::new(re)
                .map(|_| ())
                .map_err(|e| format!("answer_matches: {e}")),
            Check::AnswerSchema(s) => jsonschema::validator_for(s)
                .map(|_| ())
                .map_err(|e| format!("answer_schema: {e}")),
            Check::Scorer(s) if s.command.is_empty() => Err("scorer: `command` is empty".into()),
            _ => Ok(()),
        }
    }

    /// The check as a person reads it in a report.
    pub fn label(&self) -> String {
        match self {
            Check::AnswerContains(s) => format!("answer contains {s:?}"),
            Check::AnswerMatches(s) => format!("answer matches /{s}/"),
            Check::AnswerSchema(_) => "answer validates against the schema".into(),
            Check::ToolCalled(t) => format!("{t} was called"),
            Check::ToolNotCalled(t) => format!("{t} was not called"),
            Check::MaxSteps(n) => format!("at most {n} steps"),
            Check::MaxCost(c) => format!("at most ${c}"),
            Check::NoEscalation(_) => "no escalation".into(),
            Check::Scorer(s) => format!("score of `{}` >= {}", s.command.join(" "), s.min),
        }
    }

    /// Scores `run` (`runs show --json`); a scorer runs in `dir`.
    pub fn score(&self, run: &Value, dir: &Path) -> CheckResult {
        let (passed, detail) = self.outcome(run, dir);
        CheckResult {
            check: self.label(),
            passed,
            detail,
        }
    }

    fn outcome(&self, run: &Value, dir: &Path) -> (bool, Option<String>) {
        let answer = answer(run);
        let called = |t: &str| calls(run).any(|c| c == t);
        match self {
            Check::AnswerContains(s) => (answer.contains(s.as_str()), None),
            Check::AnswerMatches(re) => {
                let ok = regex::Regex::new(re).is_ok_and(|r| r.is_match(&answer));
                (ok, None)
            }
            Check::AnswerSchema(schema) => schema_outcome(schema, &answer),
            Check::ToolCalled(t) => (called(t), None),
            Check::ToolNotCalled(t) => (!called(t), None),
            Check::MaxSteps(n) => {
                let steps = run["steps"].as_u64().unwrap_or(0);
                (steps <= *n, Some(format!("{steps} steps")))
            }
            Check::MaxCost(c) => {
                let cost = run["cost_usd"].as_f64().unwrap_or(0.0);
                (cost <= *c, Some(format!("${cost:.4}")))
            }
            Check::NoEscalation(_) => {
                let n = run["escalations"].as_array().map_or(0, Vec::len);
                (n == 0, (n > 0).then(|| format!("{n} escalation(s)")))
            }
            Check::Scorer(s) => match run_scorer(s, run, dir) {
                Ok(score) => (score >= s.min, Some(format!("score {score}"))),
                Err(why) => (false, Some(why)),
            },
        }
    }
}

/// The run's answer as text ("" when it has none; a structured answer as JSON).
pub fn answer(run: &Value) -> String {
    match &run["answer"] {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The tools the run called, in order (the journal).
fn calls(run: &Value) -> impl Iterator<Item = &str> {
    run["tool_calls"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter_map(|c| c["tool"].as_str())
}

fn schema_outcome(schema: &Value, answer: &str) -> (bool, Option<String>) {
    let Ok(value) = serde_json::from_str::<Value>(answer) else {
        return (false, Some("the answer is not JSON".into()));
    };
    match jsonschema::validator_for(schema) {
        Ok(v) => match v.validate(&value) {
            Ok(()) => (true, None),
            Err(e) => (false, Some(e.to_string())),
        },
        Err(e) => (false, Some(e.to_string())),
    }
}

/// Runs a scorer with the run's JSON on stdin; its first word on stdout is the score.
fn run_scorer(s: &Scorer, run: &Value, dir: &Path) -> Result<f64, String> {
    let mut child = Command::new(&s.command[0])
        .args(&s.command[1..])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", s.command[0]))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A scorer that does not read its input is fine: ignore a closed pipe.
        let _ = stdin.write_all(run.to_string().as_bytes());
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "scorer exited {}: {}",
            out.status.code().unwrap_or(-1),
            crate::tools::command::tail(&err, 200)
        ));
    }
    text.split_whitespace()
        .next()
        .and_then(|w| w.parse::<f64>().ok())
        .filter(|f| f.is_finite())
        .ok_or_else(|| {
            format!(
                "scorer printed no score: {:?}",
                crate::tools::command::tail(&text, 80)
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run() -> Value {
        json!({"answer": "{\"days\": 30}", "steps": 3, "cost_usd": 0.002,
               "escalations": [], "tool_calls": [{"tool": "lookup"}]})
    }

    fn passes(c: Check) -> bool {
        c.score(&run(), Path::new(".")).passed
    }

    #[test]
    fn each_check_reads_its_part_of_the_run() {
        assert!(passes(Check::AnswerContains("30".into())));
        assert!(!passes(Check::AnswerContains("31".into())));
        assert!(passes(Check::AnswerMatches(r#""days": \d+"#.into())));
        assert!(passes(Check::AnswerSchema(
            json!({"type": "object", "required": ["days"]})
        )));
        assert!(!passes(Check::AnswerSchema(json!({"required": ["weeks"]}))));
        assert!(passes(Check::ToolCalled("lookup".into())));
        assert!(passes(Check::ToolNotCalled("send".into())));
        assert!(passes(Check::MaxSteps(3)) && !passes(Check::MaxSteps(2)));
        assert!(passes(Check::MaxCost(0.01)) && !passes(Check::MaxCost(0.001)));
        assert!(passes(Check::NoEscalation(true)));
    }

    #[test]
    fn a_scorer_reads_the_run_and_prints_a_score() {
        let scorer = |cmd: &str, min| {
            Check::Scorer(Scorer {
                command: vec!["sh".into(), "-c".into(), cmd.into()],
                min,
            })
        };
        assert!(passes(scorer("grep -q lookup && echo 0.8", 0.5)));
        assert!(!passes(scorer("echo 0.2", 0.5)));
        let r = scorer("echo nope", 0.5).score(&run(), Path::new("."));
        assert_eq!(
            r.detail.as_deref(),
            Some("scorer printed no score: \"nope\"")
        );
    }
}

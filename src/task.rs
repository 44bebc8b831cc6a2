//! The task file (docs/ARCHITECTURE.md §2): Markdown with optional TOML front matter between `+++`.

use crate::model::ModelSpec;
use crate::model::output::{self, OutputSpec};
use crate::model::settings::{CacheTtl, SettingsInput, ToolChoice, parse_duration};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub path: PathBuf,
    /// Model specs in fallback order; empty when the front matter names none.
    pub models: Vec<String>,
    pub max_steps: Option<u32>,
    pub max_tokens: Option<u64>,
    /// Subset of tools.toml offered to the model; `None` = all.
    pub tools: Option<Vec<String>>,
    /// The Markdown body: what the user asks for.
    pub prompt: String,
    /// Model settings the front matter gives (output cap, timeouts, …).
    pub settings: SettingsInput,
    /// What the final answer must be (`output_schema`, `output_attempts`; issue 26).
    pub output: Option<OutputSpec>,
}

#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct TaskError {
    pub path: PathBuf,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    model: Option<OneOrMany>,
    max_steps: Option<i64>,
    max_tokens: Option<i64>,
    tools: Option<Vec<String>>,
    // Model settings (docs/models.md).
    max_output_tokens: Option<i64>,
    max_output_tokens_retry: Option<i64>,
    temperature: Option<f64>,
    tool_choice: Option<String>,
    stream: Option<bool>,
    timeout: Option<String>,
    idle_timeout: Option<String>,
    connect_timeout: Option<String>,
    context_window: Option<i64>,
    model_attempts: Option<i64>,
    model_backoff: Option<String>,
    model_max_backoff: Option<String>,
    max_retry_after: Option<String>,
    model_cooldown: Option<String>,
    // Budgets in money and time (issue 15).
    price: Option<crate::model::prices::Price>,
    max_cost: Option<f64>,
    max_duration: Option<String>,
    // Structured answers (issue 26).
    output_schema: Option<toml::Value>,
    output_attempts: Option<i64>,
    // Prompt-cache hints (issue 23).
    prompt_cache: Option<bool>,
    prompt_cache_ttl: Option<String>,
}

impl FrontMatter {
    fn settings(&self) -> Result<SettingsInput, String> {
        let count = |key: &str, v: Option<i64>| -> Result<Option<u64>, String> {
            match v {
                Some(n) if n <= 0 => Err(format!("`{key}` must be positive, got {n}")),
                other => Ok(other.map(|n| n as u64)),
            }
        };
        let tokens = |key: &str, v: Option<i64>| -> Result<Option<u32>, String> {
            count(key, v)?
                .map(|n| u32::try_from(n).map_err(|_| format!("`{key}` is too large")))
                .transpose()
        };
        let duration = |key: &str, v: &Option<String>| {
            v.as_deref().map(|v| parse_duration(key, v)).transpose()
        };
        let input = SettingsInput {
            max_output_tokens: tokens("max_output_tokens", self.max_output_tokens)?,
            max_output_tokens_retry: tokens(
                "max_output_tokens_retry",
                self.max_output_tokens_retry,
            )?,
            temperature: self.temperature,
            tool_choice: self
                .tool_choice
                .as_deref()
                .map(ToolChoice::parse)
                .transpose()?,
            stream: self.stream,
            timeout: duration("timeout", &self.timeout)?,
            idle_timeout: duration("idle_timeout", &self.idle_timeout)?,
            connect_timeout: duration("connect_timeout", &self.connect_timeout)?,
            context_window: count("context_window", self.context_window)?,
            attempts: tokens("model_attempts", self.model_attempts)?,
            backoff: duration("model_backoff", &self.model_backoff)?,
            max_backoff: duration("model_max_backoff", &self.model_max_backoff)?,
            max_retry_after: duration("max_retry_after", &self.max_retry_after)?,
            cooldown: duration("model_cooldown", &self.model_cooldown)?,
            price: self.price,
            max_cost: self.max_cost,
            max_duration: duration("max_duration", &self.max_duration)?,
            prompt_cache: self.prompt_cache,
            prompt_cache_ttl: self
                .prompt_cache_ttl
                .as_deref()
                .map(CacheTtl::parse)
                .transpose()?,
        };
        input.validate()?;
        Ok(input)
    }
}

/// What each front-matter key must be, checked before serde reads the table so a
/// wrong type names its key and says what fits (serde's "invalid type: string
/// \"lots\", expected i64" names neither; issue 13).
const KEYS: &[(&str, Kind)] = &[
    ("model", Kind::Model),
    ("max_steps", Kind::Integer),
    ("max_tokens", Kind::Integer),
    ("tools", Kind::Names),
    ("max_output_tokens", Kind::Integer),
    ("max_output_tokens_retry", Kind::Integer),
    ("temperature", Kind::Number),
    ("tool_choice", Kind::Text),
    ("stream", Kind::Bool),
    ("timeout", Kind::Duration),
    ("idle_timeout", Kind::Duration),
    ("connect_timeout", Kind::Duration),
    ("context_window", Kind::Integer),
    ("model_attempts", Kind::Integer),
    ("model_backoff", Kind::Duration),
    ("model_max_backoff", Kind::Duration),
    ("max_retry_after", Kind::Duration),
    ("model_cooldown", Kind::Duration),
    ("max_cost", Kind::Number),
    ("max_duration", Kind::Duration),
    ("price", Kind::Price),
    ("output_schema", Kind::Schema),
    ("output_attempts", Kind::Integer),
    ("prompt_cache", Kind::Bool),
    ("prompt_cache_ttl", Kind::Text),
];

#[derive(Clone, Copy)]
enum Kind {
    Model,
    Integer,
    Number,
    Names,
    Text,
    Duration,
    Bool,
    Price,
    Schema,
}

impl Kind {
    fn fits(self, v: &toml::Value) -> bool {
        let strings = |v: &toml::Value| v.as_array().is_some_and(|a| a.iter().all(|x| x.is_str()));
        match self {
            Kind::Model => v.is_str() || strings(v),
            Kind::Integer => v.is_integer(),
            Kind::Number => v.is_float() || v.is_integer(),
            Kind::Names => strings(v),
            Kind::Text | Kind::Duration => v.is_str(),
            Kind::Bool => v.is_bool(),
            Kind::Schema => v.is_str() || v.is_table(),
            Kind::Price => v.as_table().is_some_and(|t| {
                t.iter().all(|(k, v)| {
                    ["input", "output", "cached_input", "cache_write"].contains(&k.as_str())
                        && (v.is_float() || v.is_integer())
                }) && t.contains_key("input")
                    && t.contains_key("output")
            }),
        }
    }

    fn wanted(self) -> &'static str {
        match self {
            Kind::Model => "a string such as \"openai:gpt-4o-mini\", or a list of them",
            Kind::Integer => "a whole number",
            Kind::Number => "a number",
            Kind::Names => "a list of tool names, such as [\"search_kb\"]",
            Kind::Text => "a string",
            Kind::Duration => "a duration string such as \"30s\"",
            Kind::Bool => "true or false",
            Kind::Schema => {
                "a JSON Schema: a table, a JSON string, or the path of a .json or .toml file"
            }
            Kind::Price => {
                "a table of USD per million tokens, such as \
                 { input = 0.15, output = 0.6, cached_input = 0.075 }"
            }
        }
    }
}

fn type_name(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a number with a fraction",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date",
        toml::Value::Array(_) => "a list",
        toml::Value::Table(_) => "a table",
    }
}

/// Unknown keys and wrong types, each named, before serde sees the text.
fn check_keys(text: &str) -> Result<(), String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| syntax_error(text, &e))?;
    for (key, v) in &table {
        let Some((_, kind)) = KEYS.iter().find(|(k, _)| k == key) else {
            // The same help as tools.toml gives for its keys (issue 27).
            let names: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
            return Err(format!(
                "front matter: unknown key `{key}`; {}",
                crate::config::key_hint(key, &names)
            ));
        };
        if !kind.fits(v) {
            return Err(format!(
                "front matter: `{key}` must be {}, not {} ({v})",
                kind.wanted(),
                type_name(v)
            ));
        }
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

pub fn load(path: &Path) -> Result<Task, TaskError> {
    let text = std::fs::read_to_string(path).map_err(|e| TaskError {
        path: path.to_path_buf(),
        message: format!("cannot read task file: {e}"),
    })?;
    parse(&text, path)
}

pub fn parse(text: &str, path: &Path) -> Result<Task, TaskError> {
    let err = |message: String| TaskError {
        path: path.to_path_buf(),
        message,
    };
    let (front, body) = split_front_matter(text).map_err(err)?;
    let fm: FrontMatter = match front {
        Some(f) => {
            check_keys(f).map_err(&err)?;
            toml::from_str(f)
                .map_err(|e| err(format!("front matter: {}", one_line(e.message()))))?
        }
        None => toml::from_str("").map_err(|e| err(format!("front matter: {e}")))?,
    };
    let settings = fm
        .settings()
        .map_err(|e| err(format!("front matter: {e}")))?;
    let output = output_spec(&fm, path).map_err(|e| err(format!("front matter: {e}")))?;
    let models = match fm.model {
        None => Vec::new(),
        Some(OneOrMany::One(m)) => vec![m],
        Some(OneOrMany::Many(ms)) if ms.is_empty() => {
            return Err(err("front matter: `model` is an empty list".into()));
        }
        Some(OneOrMany::Many(ms)) => ms,
    };
    for m in &models {
        ModelSpec::parse(m).map_err(|e| err(format!("front matter: {e}")))?;
    }
    let max_steps = positive(fm.max_steps, "max_steps").map_err(&err)?;
    let max_tokens = positive(fm.max_tokens, "max_tokens").map_err(&err)?;
    let prompt = body.trim().to_string();
    if prompt.is_empty() {
        return Err(err("the task has no text after the front matter".into()));
    }
    Ok(Task {
        path: path.to_path_buf(),
        models,
        max_steps: max_steps.map(|n| n as u32),
        max_tokens: max_tokens.map(|n| n as u64),
        tools: fm.tools,
        prompt,
        settings,
        output,
    })
}

/// `output_schema` (relative paths from the task's folder) and `output_attempts`.
fn output_spec(fm: &FrontMatter, path: &Path) -> Result<Option<OutputSpec>, String> {
    let attempts = match fm.output_attempts {
        Some(n) if n <= 0 => return Err(format!("`output_attempts` must be positive, got {n}")),
        Some(n) => u32::try_from(n).map_err(|_| "`output_attempts` is too large".to_string())?,
        None => output::DEFAULT_ATTEMPTS,
    };
    let Some(value) = &fm.output_schema else {
        if fm.output_attempts.is_some() {
            return Err("`output_attempts` needs an `output_schema`".into());
        }
        return Ok(None);
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let schema = output::read_schema(value, dir)?;
    Ok(Some(OutputSpec { schema, attempts }))
}

fn positive(v: Option<i64>, key: &str) -> Result<Option<i64>, String> {
    match v {
        Some(n) if n <= 0 => Err(format!("front matter: `{key}` must be positive, got {n}")),
        Some(n) if key == "max_steps" && n > u32::MAX as i64 => {
            Err(format!("front matter: `{key}` is too large"))
        }
        other => Ok(other),
    }
}

/// Splits `+++\nTOML\n+++\nbody`. A file that does not start with `+++` has no front
/// matter; one that opens it and never closes it is an error.
fn split_front_matter(text: &str) -> Result<(Option<&str>, &str), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text.strip_prefix("+++") else {
        if looks_like_yaml_front_matter(text) {
            return Err(
                "front matter is TOML between `+++` lines, not YAML between `---`: \
                        write `+++`, then `model = \"openai:gpt-4o-mini\"`, then `+++`"
                    .into(),
            );
        }
        return Ok((None, text));
    };
    let rest = rest
        .strip_prefix("\r\n")
        .or_else(|| rest.strip_prefix('\n'))
        .ok_or("the opening `+++` must be alone on the first line")?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "+++" {
            return Ok((Some(&rest[..offset]), &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    Err("front matter opened with `+++` is never closed".into())
}

/// `---` on the first line, a `key: value` line and a closing `---`: the YAML front
/// matter of other tools, which would otherwise become part of the prompt.
fn looks_like_yaml_front_matter(text: &str) -> bool {
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return false;
    }
    let block: Vec<&str> = lines.take_while(|l| l.trim_end() != "---").collect();
    block.iter().any(|l| {
        l.split_once(':').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_')
        })
    }) && text.lines().skip(1).any(|l| l.trim_end() == "---")
}

/// A TOML syntax error in the front matter, with its line in the task file (the
/// front matter starts on line 2, after the opening `+++`): `model = script:x.json`
/// unquoted is found at once in a long file (issue 27).
fn syntax_error(front: &str, e: &toml::de::Error) -> String {
    let message = one_line(e.message());
    match e.span() {
        Some(span) => {
            let line = front[..span.start.min(front.len())].matches('\n').count() + 2;
            format!("front matter: line {line}: {message}")
        }
        None => format!("front matter: {message}"),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<Task, String> {
        parse(s, Path::new("t.md")).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_front_matter_and_body() {
        let t = parse_str(
            "+++\nmodel = [\"script:a.json\", \"openai:gpt-4o\"]\nmax_steps = 5\nmax_tokens = 900\ntools = [\"x\"]\n+++\nDo it.\n",
        )
        .unwrap();
        assert_eq!(t.models, ["script:a.json", "openai:gpt-4o"]);
        assert_eq!((t.max_steps, t.max_tokens), (Some(5), Some(900)));
        assert_eq!(t.tools, Some(vec!["x".to_string()]));
        assert_eq!(t.prompt, "Do it.");
    }

    #[test]
    fn a_file_without_front_matter_is_all_prompt() {
        let t = parse_str("Just do it.").unwrap();
        assert_eq!((t.models.len(), t.prompt.as_str()), (0, "Just do it."));
    }

    #[test]
    fn rejects_defects_with_the_file_name() {
        let cases = [
            (
                "+++\nmax_steps = 3\nDo it",
                "t.md: front matter opened with `+++` is never closed",
            ),
            (
                "+++\nmax_steps = 0\n+++\nx",
                "t.md: front matter: `max_steps` must be positive, got 0",
            ),
            (
                "+++\nmodel = \"gpt-4o\"\n+++\nx",
                "t.md: front matter: model `gpt-4o` has no provider: write openai:MODEL, anthropic:MODEL or script:PATH",
            ),
            (
                "+++\n+++\n  \n",
                "t.md: the task has no text after the front matter",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse_str(input).unwrap_err(), want, "input {input:?}");
        }
        assert_eq!(
            parse_str("+++\nbogus = 1\n+++\nx").unwrap_err(),
            "t.md: front matter: unknown key `bogus`; expected one of: model, max_steps, max_tokens, tools, max_output_tokens, max_output_tokens_retry, temperature, tool_choice, stream, timeout, idle_timeout, connect_timeout, context_window, model_attempts, model_backoff, model_max_backoff, max_retry_after, model_cooldown, max_cost, max_duration, price, output_schema, output_attempts, prompt_cache, prompt_cache_ttl"
        );
    }

    /// Issue 27: a near miss gets "did you mean", as tools.toml keys do; a syntax
    /// error gets its line in the task file.
    #[test]
    fn a_typo_gets_a_suggestion_and_a_syntax_error_its_line() {
        assert_eq!(
            parse_str("+++\ntool = [\"x\"]\n+++\nx").unwrap_err(),
            "t.md: front matter: unknown key `tool`; did you mean `tools`?"
        );
        assert_eq!(
            parse_str("+++\nmax_steps = 3\nmodel = script:x.json\n+++\nx").unwrap_err(),
            "t.md: front matter: line 3: string values must be quoted, expected literal string"
        );
    }

    #[test]
    fn type_errors_name_the_key_and_what_fits() {
        assert_eq!(
            parse_str("+++\nmax_steps = \"lots\"\n+++\nx").unwrap_err(),
            "t.md: front matter: `max_steps` must be a whole number, not a string (\"lots\")"
        );
        assert_eq!(
            parse_str("+++\ntools = \"search_kb\"\n+++\nx").unwrap_err(),
            "t.md: front matter: `tools` must be a list of tool names, such as [\"search_kb\"], not a string (\"search_kb\")"
        );
        assert!(
            parse_str("+++\nmodel = 4\n+++\nx")
                .unwrap_err()
                .starts_with("t.md: front matter: `model` must be a string such as")
        );
    }

    #[test]
    fn yaml_front_matter_says_it_must_be_toml() {
        assert_eq!(
            parse_str("---\nmodel: openai:gpt-4o\n---\nDo it.").unwrap_err(),
            "t.md: front matter is TOML between `+++` lines, not YAML between `---`: write `+++`, then `model = \"openai:gpt-4o-mini\"`, then `+++`"
        );
        // A Markdown rule that opens a task is not front matter.
        assert!(parse_str("---\nJust a rule above the text.\n").is_ok());
    }
}

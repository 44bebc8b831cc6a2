//! The task file (DESIGN §2): Markdown with optional TOML front matter between `+++`.

use crate::model::ModelSpec;
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
}

#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct TaskError {
    pub path: PathBuf,
    pub message: String,
}

/// The front matter, read key by key so a wrong type names its key and says what
/// fits (serde's "invalid type: string \"lots\", expected i64" names neither).
#[derive(Default)]
struct FrontMatter {
    model: Option<OneOrMany>,
    max_steps: Option<i64>,
    max_tokens: Option<i64>,
    tools: Option<Vec<String>>,
}

enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

const KEYS: &str = "model, max_steps, max_tokens, tools";

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

fn strings(v: &toml::Value) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_str().map(str::to_string))
        .collect()
}

impl FrontMatter {
    fn read(text: &str) -> Result<FrontMatter, String> {
        let table: toml::Table =
            toml::from_str(text).map_err(|e| format!("front matter: {}", one_line(e.message())))?;
        let mut fm = FrontMatter::default();
        for (key, v) in &table {
            let wrong = |want: &str| {
                format!(
                    "front matter: `{key}` must be {want}, not {} ({v})",
                    type_name(v)
                )
            };
            match key.as_str() {
                "model" => {
                    fm.model = Some(match (v.as_str(), strings(v)) {
                        (Some(s), _) => OneOrMany::One(s.to_string()),
                        (None, Some(list)) => OneOrMany::Many(list),
                        _ => {
                            return Err(wrong(
                                "a string such as \"openai:gpt-4o-mini\", or a list of them",
                            ));
                        }
                    })
                }
                "max_steps" | "max_tokens" => {
                    let n = v.as_integer().ok_or_else(|| wrong("a whole number"))?;
                    if key == "max_steps" {
                        fm.max_steps = Some(n);
                    } else {
                        fm.max_tokens = Some(n);
                    }
                }
                "tools" => {
                    fm.tools =
                        Some(strings(v).ok_or_else(|| {
                            wrong("a list of tool names, such as [\"search_kb\"]")
                        })?)
                }
                other => {
                    return Err(format!(
                        "front matter: unknown key `{other}` (the keys are {KEYS})"
                    ));
                }
            }
        }
        Ok(fm)
    }
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
    let fm = match front {
        Some(f) => FrontMatter::read(f).map_err(&err)?,
        None => FrontMatter::default(),
    };
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
    })
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
            "t.md: front matter: unknown key `bogus` (the keys are model, max_steps, max_tokens, tools)"
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

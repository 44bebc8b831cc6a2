//! Structured answers (issue 26): the task's `output_schema`, checking a final answer
//! against it, and how each provider is asked for it natively.
//!
//! agentrun checks every answer itself, whatever the provider did: OpenAI gets
//! `response_format: json_schema` (strict when the schema allows it), Anthropic an
//! offered [`ANSWER_TOOL`] it must call (its input is the answer), the scripted model
//! nothing. The check runs in the machine, inside the step that produced the answer,
//! so a replayed step decides the same way (Pydantic AI #3549: validation outside the
//! durable step crashed the workflow).

use super::ToolSpec;
pub use super::types::OutputSpec;
use serde_json::{Value, json};

/// Answers checked before the run fails `invalid_output`, unless the task says.
pub const DEFAULT_ATTEMPTS: u32 = 3;

/// The tool a provider without a JSON mode answers through. tools.toml may not use
/// the name when a task has an output schema.
pub const ANSWER_TOOL: &str = "final_answer";

impl OutputSpec {
    /// The answer as a JSON value, or what is wrong with it, one line per problem
    /// (the validation path first). A single Markdown code fence around the JSON is
    /// taken off: models add one even when asked not to.
    pub fn check(&self, text: &str) -> Result<Value, Vec<String>> {
        let body = unfenced(text.trim());
        let value: Value = serde_json::from_str(body).map_err(|e| {
            vec![format!(
                "the answer is not JSON ({e}); answer with the JSON value alone"
            )]
        })?;
        let problems = crate::schema::validate(&self.schema, &value);
        if problems.is_empty() {
            Ok(value)
        } else {
            Err(problems)
        }
    }

    /// What the system prompt says about the answer (the same text on every request).
    pub fn instruction(&self) -> String {
        format!(
            "Your final answer must be one JSON value, valid against this JSON Schema, and \
             nothing else (when a `{ANSWER_TOOL}` tool is offered, call it with the answer \
             instead of writing it):\n{}",
            self.schema
        )
    }

    /// Whether OpenAI's strict mode accepts the schema: an object at the root, and
    /// every object closed (`additionalProperties: false`) with all its properties
    /// required. Other schemas are sent without `strict` (still checked here).
    pub fn strict_allowed(&self) -> bool {
        is_object_schema(&self.schema) && closed_everywhere(&self.schema)
    }

    /// OpenAI's `response_format`, or `None` when the root is not an object (the API
    /// wants one; the model is then told in the system prompt only).
    pub fn response_format(&self) -> Option<Value> {
        is_object_schema(&self.schema).then(|| {
            json!({"type": "json_schema", "json_schema": {
                "name": "answer", "schema": self.schema, "strict": self.strict_allowed(),
            }})
        })
    }

    /// The [`ANSWER_TOOL`] offered to Anthropic. A tool's input is always an object:
    /// any other schema is wrapped as `{"value": …}`.
    pub fn tool_spec(&self) -> ToolSpec {
        let input_schema = if is_object_schema(&self.schema) {
            self.schema.clone()
        } else {
            json!({"type": "object", "properties": {"value": self.schema}, "required": ["value"]})
        };
        ToolSpec {
            name: ANSWER_TOOL.to_string(),
            description: "Give the final answer. Call this once the task is done; its input \
                          is the answer."
                .to_string(),
            input_schema,
        }
    }

    /// The answer an [`ANSWER_TOOL`] call carries, as JSON text (unwrapped when
    /// [`OutputSpec::tool_spec`] wrapped it).
    pub fn answer_from_tool(&self, input: &Value) -> String {
        let value = match input.get("value") {
            Some(v) if !is_object_schema(&self.schema) => v,
            _ => input,
        };
        value.to_string()
    }
}

/// The front matter's `output_schema`: an inline table, a JSON Schema as a JSON
/// string, or a path (JSON, or TOML when it ends in `.toml`) relative to the task
/// file's folder. The schema must compile.
pub fn read_schema(value: &toml::Value, task_dir: &std::path::Path) -> Result<Value, String> {
    let schema = match value {
        toml::Value::String(s) if s.trim_start().starts_with('{') => serde_json::from_str(s)
            .map_err(|e| format!("`output_schema` is not valid JSON: {e}"))?,
        toml::Value::String(s) => read_schema_file(&task_dir.join(s))?,
        toml::Value::Table(_) => serde_json::to_value(value)
            .map_err(|e| format!("`output_schema` cannot be read as JSON: {e}"))?,
        _ => return Err("`output_schema` must be a table, a JSON string or a path".into()),
    };
    if let Err(e) = jsonschema::validator_for(&schema) {
        return Err(format!(
            "`output_schema` is not a valid JSON Schema: {}",
            e.to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    Ok(schema)
}

fn read_schema_file(path: &std::path::Path) -> Result<Value, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("`output_schema`: cannot read {shown}: {e}"))?;
    if path.extension().is_some_and(|x| x == "toml") {
        let table: toml::Table =
            toml::from_str(&text).map_err(|e| format!("`output_schema`: {shown}: {e}"))?;
        return serde_json::to_value(table).map_err(|e| format!("`output_schema`: {shown}: {e}"));
    }
    serde_json::from_str(&text).map_err(|e| format!("`output_schema`: {shown}: {e}"))
}

fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// Every object schema in `schema` is closed and requires all its properties.
fn closed_everywhere(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            if is_object_schema(schema) {
                let props = map.get("properties").and_then(Value::as_object);
                let required: Vec<&str> = map
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let all_required =
                    props.is_none_or(|p| p.keys().all(|k| required.contains(&k.as_str())));
                if map.get("additionalProperties") != Some(&Value::Bool(false)) || !all_required {
                    return false;
                }
            }
            map.values().all(closed_everywhere)
        }
        Value::Array(items) => items.iter().all(closed_everywhere),
        _ => true,
    }
}

/// The text inside one ```` ``` ```` fence (with or without a language), or `text`.
fn unfenced(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    // The info string ("json") runs to the first newline.
    body.split_once('\n').map_or(body, |(_, b)| b).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(schema: Value) -> OutputSpec {
        OutputSpec {
            schema,
            attempts: DEFAULT_ATTEMPTS,
        }
    }

    fn order() -> OutputSpec {
        spec(json!({"type": "object", "additionalProperties": false,
                    "properties": {"days": {"type": "integer"}}, "required": ["days"]}))
    }

    #[test]
    fn a_valid_answer_is_its_json_value_fenced_or_not() {
        assert_eq!(order().check(" {\"days\": 30}\n"), Ok(json!({"days": 30})));
        assert_eq!(
            order().check("```json\n{\"days\": 30}\n```"),
            Ok(json!({"days": 30}))
        );
    }

    #[test]
    fn an_invalid_answer_names_the_path_that_failed() {
        assert_eq!(
            order().check("{\"days\": \"thirty\"}"),
            Err(vec![
                "at /days: \"thirty\" is not of type \"integer\"".to_string()
            ])
        );
        let prose = order().check("The window is 30 days.").unwrap_err();
        assert!(prose[0].starts_with("the answer is not JSON"), "{prose:?}");
    }

    #[test]
    fn strict_only_for_closed_objects_requiring_everything() {
        assert!(order().strict_allowed());
        let open = spec(json!({"type": "object", "properties": {"a": {"type": "string"}}}));
        assert!(!open.strict_allowed());
        let nested_open = spec(json!({"type": "object", "additionalProperties": false,
            "required": ["a"], "properties": {"a": {"type": "object"}}}));
        assert!(!nested_open.strict_allowed());
        assert_eq!(spec(json!({"type": "array"})).response_format(), None);
        assert_eq!(
            order().response_format().unwrap()["json_schema"]["strict"],
            json!(true)
        );
    }

    #[test]
    fn a_schema_is_read_inline_as_json_or_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s.json"), r#"{"type": "array"}"#).unwrap();
        std::fs::write(dir.path().join("s.toml"), "type = \"string\"").unwrap();
        let read = |v: toml::Value| read_schema(&v, dir.path());
        assert_eq!(read("s.json".into()), Ok(json!({"type": "array"})));
        assert_eq!(read("s.toml".into()), Ok(json!({"type": "string"})));
        assert_eq!(
            read(r#"{"type": "integer"}"#.into()),
            Ok(json!({"type": "integer"}))
        );
        let table: toml::Table = toml::from_str("type = \"object\"").unwrap();
        assert_eq!(read(table.into()), Ok(json!({"type": "object"})));
        let missing = read("nope.json".into()).unwrap_err();
        assert!(
            missing.starts_with("`output_schema`: cannot read "),
            "{missing}"
        );
        let bad = read(r#"{"type": "nonsense"}"#.into()).unwrap_err();
        assert!(
            bad.starts_with("`output_schema` is not a valid JSON Schema"),
            "{bad}"
        );
    }

    #[test]
    fn a_non_object_answer_goes_through_the_tool_wrapped() {
        let list = spec(json!({"type": "array", "items": {"type": "string"}}));
        assert_eq!(list.tool_spec().input_schema["required"], json!(["value"]));
        assert_eq!(list.answer_from_tool(&json!({"value": ["a"]})), "[\"a\"]");
        assert_eq!(
            order().answer_from_tool(&json!({"days": 3})),
            "{\"days\":3}"
        );
    }
}

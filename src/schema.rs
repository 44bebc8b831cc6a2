//! Argument validation against a tool's JSON schema, and checking that a schema is one.
//!
//! Validators are compiled once per schema and kept for the process (a few per
//! tools.toml): compiling one cost ~75,000 instructions per call in the issue-14
//! profile, a tenth of a step's CPU. The cache is per thread (the driver runs on one)
//! and looked up by the schema's value, so an edited schema is never matched to a stale
//! validator.
//!
//! Whether a schema is acceptable at all is checked when tools.toml is loaded
//! (`config::validate::check_input_schema`); the crate is built without its remote and
//! file resolvers, so a schema whose `$ref` points outside itself is refused there.

use serde_json::Value;
use std::rc::Rc;

/// Longest validation message kept; messages quote the offending value, which the
/// model may have made very long.
const MAX_LINE: usize = 300;

/// Validation errors, one line each ("at /path: message"); empty when the arguments
/// are valid.
pub fn validate(schema: &Value, args: &Value) -> Vec<String> {
    let validator = match compiled(schema) {
        Ok(v) => v,
        // Config validation rejects such schemas; if one slips through, say so rather
        // than let every call through unchecked.
        Err(e) => return vec![format!("the tool's input_schema is not valid: {e}")],
    };
    validator
        .iter_errors(args)
        .map(|e| {
            let path = e.instance_path().as_str();
            let path = if path.is_empty() { "/" } else { path };
            shorten(format!("at {path}: {e}"))
        })
        .collect()
}

/// Schemas compiled on this thread, at most [`CACHED`] (then the oldest goes).
const CACHED: usize = 64;

thread_local! {
    static VALIDATORS: std::cell::RefCell<Vec<(Value, Rc<jsonschema::Validator>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn compiled(schema: &Value) -> Result<Rc<jsonschema::Validator>, String> {
    let hit = VALIDATORS.with_borrow(|cache| {
        cache
            .iter()
            .find(|(s, _)| s == schema)
            .map(|(_, v)| v.clone())
    });
    if let Some(v) = hit {
        return Ok(v);
    }
    let v = Rc::new(jsonschema::validator_for(schema).map_err(|e| e.to_string())?);
    VALIDATORS.with_borrow_mut(|cache| {
        if cache.len() >= CACHED {
            cache.remove(0);
        }
        cache.push((schema.clone(), v.clone()));
    });
    Ok(v)
}

fn shorten(line: String) -> String {
    if line.chars().count() <= MAX_LINE {
        return line;
    }
    crate::text::truncate(&line, MAX_LINE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q_schema() -> Value {
        json!({"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}, "required": ["q"]})
    }

    #[test]
    fn valid_arguments_give_no_errors() {
        assert_eq!(
            validate(&q_schema(), &json!({"q": "refund"})),
            Vec::<String>::new()
        );
    }

    #[test]
    fn each_problem_is_one_line_with_its_path() {
        let errors = validate(&q_schema(), &json!({"n": "two"}));
        assert_eq!(
            errors,
            vec![
                r#"at /: "q" is a required property"#.to_string(),
                r#"at /n: "two" is not of type "integer""#.to_string()
            ]
        );
    }

    #[test]
    fn a_schema_that_does_not_compile_fails_every_call() {
        let errors = validate(&json!({"type": "strnig"}), &json!({}));
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("the tool's input_schema is not valid: "),
            "{errors:?}"
        );
    }

    #[test]
    fn long_messages_are_shortened() {
        let errors = validate(
            &q_schema(),
            &json!({"q": "x".repeat(1000).chars().collect::<Vec<_>>()}),
        );
        assert!(errors[0].chars().count() <= MAX_LINE + 1, "{errors:?}");
    }
}

//! Message content, tool arguments and results on spans: only when the person opted
//! in (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`), redacted, and cut to
//! a bound. Tool results and model answers are already redacted where they enter
//! agentrun (`tools::attempt`, `model::Provider`); arguments come from the model and
//! may repeat a secret it saw, so values that look like secrets are blanked here too.

use serde_json::Value;

/// Characters of content kept on one attribute.
pub const MAX_CHARS: usize = 8 * 1024;

fn bounded(mut text: String) -> String {
    if text.len() > MAX_CHARS {
        let mut cut = MAX_CHARS;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("…[cut]");
    }
    text
}

fn blank_secrets(v: &mut Value) {
    match v {
        Value::String(s) if crate::redact::is_secret_value(s) => {
            *s = crate::redact::REDACTED.to_string();
        }
        Value::Array(items) => items.iter_mut().for_each(blank_secrets),
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if crate::redact::is_secret_name(key) && value.is_string() {
                    *value = Value::String(crate::redact::REDACTED.into());
                } else {
                    blank_secrets(value);
                }
            }
        }
        _ => {}
    }
}

/// A JSON value as span text, secrets blanked.
pub fn json(v: &Value) -> String {
    let mut v = v.clone();
    blank_secrets(&mut v);
    bounded(v.to_string())
}

/// A model's message as span text.
pub fn message(m: &crate::model::Message) -> String {
    match serde_json::to_value(m) {
        Ok(v) => json(&v),
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_blanked_and_text_is_bounded() {
        let args = serde_json::json!({"q": "refund", "api_key": "abcd1234", "n": ["ghp_0123456789abcdef"]});
        let text = json(&args);
        assert!(
            !text.contains("abcd1234") && !text.contains("ghp_0123"),
            "{text}"
        );
        assert!(text.contains("refund"), "{text}");
        let long = json(&Value::String("é".repeat(MAX_CHARS)));
        assert!(long.len() <= MAX_CHARS + 16 && long.ends_with("…[cut]"));
    }
}

//! Redaction (DESIGN §5, issue 12 item 5): every secret value agentrun knows is replaced
//! by `[redacted]` before anything is journaled, shown or sent to the model.
//!
//! Which values are secrets is decided where they are used, because that is where they
//! are known: an HTTP tool's attempt collects the values its `${VAR}` headers expanded
//! to and the credentials in its URL; a command tool's attempt collects the values of
//! the secret-named variables it passed to the child (listed in `env`, or set with
//! `set`) and any `://user:password@` in them. The attempt's result — output and error
//! message alike — is redacted in `tools::attempt`, the one place a tool's result
//! enters agentrun, so retries' trace events, the journal, the transcript, escalation
//! summaries and `runs show` only ever see the redacted form. Model providers redact
//! their API key from error messages in `model::wire`.
//!
//! Not covered: a secret the tool transforms (base64, split across lines, reversed)
//! before printing it, and values shorter than [`MIN_LEN`] characters, which would
//! otherwise blank out ordinary words and numbers.

use serde_json::Value;

pub const REDACTED: &str = "[redacted]";
/// Shorter values are not treated as secrets (see the module doc).
pub const MIN_LEN: usize = 4;

/// Substrings (upper-cased) that mark a variable name as holding a secret (DESIGN §3).
pub const SECRET_MARKERS: [&str; 10] = [
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASS",
    "PWD",
    "AUTH",
    "CREDENTIAL",
    "PAT",
    "DSN",
];

/// Whether a variable name looks like it holds a secret (case-insensitive substring).
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKERS.iter().any(|m| upper.contains(m))
}

/// The `user:password` of the first `scheme://user:password@host` in `value`, if any.
pub fn url_credentials(value: &str) -> Option<&str> {
    let start = value.find("://")? + 3;
    let rest = &value[start..];
    let authority_end = rest.find(['/', '?', '#', ' ']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let at = authority.rfind('@')?;
    let userinfo = &authority[..at];
    userinfo.contains(':').then_some(userinfo)
}

/// The secret values known for one attempt.
#[derive(Debug, Default, Clone)]
pub struct Secrets {
    values: Vec<String>,
}

impl Secrets {
    /// Remembers `value` as a secret (ignored when shorter than [`MIN_LEN`]). A value
    /// holding URL credentials also adds the credentials and the password alone.
    pub fn add(&mut self, value: &str) {
        if let Some(userinfo) = url_credentials(value) {
            let userinfo = userinfo.to_string();
            if let Some((_, password)) = userinfo.split_once(':') {
                self.push(password);
            }
            self.push(&userinfo);
        }
        self.push(value);
    }

    fn push(&mut self, value: &str) {
        if value.chars().count() >= MIN_LEN && !self.values.iter().any(|v| v == value) {
            self.values.push(value.to_string());
            // Longest first, so a value containing another is replaced whole.
            self.values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every known secret replaced by [`REDACTED`].
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for v in &self.values {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), REDACTED);
            }
        }
        out
    }

    /// Redacts every string (and object key) inside a JSON value, in place.
    pub fn json(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => *s = self.text(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.json(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (k, mut v) in entries {
                    self.json(&mut v);
                    map.insert(self.text(&k), v);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_known_secret_is_replaced_in_text_and_json() {
        let mut s = Secrets::default();
        s.add("kb-secret-123");
        s.add("postgres://app:pw-9f8e@db.internal/prod");
        s.add("ab");
        assert_eq!(
            s.text("Authorization: Bearer kb-secret-123 (ab)"),
            "Authorization: Bearer [redacted] (ab)"
        );
        let mut v = json!({"echo": ["x kb-secret-123", {"kb-secret-123": "app:pw-9f8e"}], "n": 1});
        s.json(&mut v);
        assert_eq!(
            v,
            json!({"echo": ["x [redacted]", {"[redacted]": "[redacted]"}], "n": 1})
        );
        assert_eq!(
            s.text("password pw-9f8e leaked"),
            "password [redacted] leaked"
        );
    }

    #[test]
    fn secret_names_and_url_credentials_are_recognised() {
        for name in [
            "GITHUB_PAT",
            "MYSQL_PWD",
            "SENTRY_DSN",
            "SSH_AUTH_SOCK",
            "aws_secret_access_key",
            "DB_PASS",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        assert!(!is_secret_name("LANG"));
        assert_eq!(url_credentials("http://u:p@proxy:3128"), Some("u:p"));
        assert_eq!(url_credentials("https://host/a@b"), None);
        assert_eq!(url_credentials("https://user@host/"), None);
    }
}

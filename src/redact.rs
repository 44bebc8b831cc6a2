//! Redaction (docs/ARCHITECTURE.md §5, issue 12 item 5): every secret value agentrun knows is
//! replaced by `[redacted]` before anything is journaled, shown or sent to the model.
//!
//! Which values are secrets is decided where they are used, because that is where they
//! are known: an HTTP tool's attempt collects the values its `${VAR}` headers expanded
//! to and the credentials in its URL; a command tool's attempt collects the values of
//! the secret-named variables it passed to the child (listed in `env`, or set with
//! `set`) and any `://user:password@` in them. The attempt's result — output and error
//! message alike — is redacted in `tools::attempt`, the one place a tool's result
//! enters agentrun, so retries' trace events, the journal, the transcript, escalation
//! summaries and `runs show` only ever see the redacted form. Model providers redact
//! their API key and the credentials of their base URL (as written, decoded, and as
//! the `Basic` value sent for them) from error messages in `model::wire`.
//!
//! Whatever a provider sends back is redacted the same way in [`crate::model::Provider`]:
//! the answer, in-stream `error` events and every error message — and the live view of a
//! streamed answer through [`StreamText`], which holds back a piece's end while it could
//! still be the start of a secret.
//!
//! Not covered: a secret the tool transforms (base64, split across lines, reversed)
//! before printing it, and values shorter than [`MIN_LEN`] characters, which would
//! otherwise blank out ordinary words and numbers.

use serde_json::Value;

pub const REDACTED: &str = "[redacted]";
/// Shorter values are not treated as secrets (see the module doc).
pub const MIN_LEN: usize = 4;

/// Substrings (upper-cased) that mark a variable name as holding a secret (docs/ARCHITECTURE.md
/// §3.1).
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

/// Prefixes of well-known token formats (GitHub, GitLab, Slack, OpenAI/Anthropic-style
/// `sk-`, Stripe, npm, PyPI, Google API keys, AWS access key ids) and the hosts of
/// webhook URLs, which carry their secret in the path.
const SECRET_VALUE_MARKS: [&str; 19] = [
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xapp-",
    "sk-",
    "sk_live_",
    "rk_live_",
    "npm_",
    "pypi-",
    "AIza",
    "hooks.slack.com/",
    "discord.com/api/webhooks/",
];

/// Whether a variable's value looks like a secret whatever its name (issue 22:
/// `inherit = "all"` passed `SLACK_WEBHOOK_URL`, `glpat-…` and
/// `https://ghp_…@github.com`): a well-known token prefix at the start of a word, an
/// AWS access key id, a private key block, a JWT, or a URL with userinfo.
pub fn is_secret_value(value: &str) -> bool {
    if userinfo(value).is_some() || value.contains("-----BEGIN") {
        return true;
    }
    let words = value.split(|c: char| !(c.is_ascii_alphanumeric() || "_-./:".contains(c)));
    words.into_iter().any(|w| {
        let token = |mark: &str| {
            w.find(mark).is_some_and(|at| {
                let before = &w[..at];
                let at_start = before.is_empty() || before.ends_with(['/', ':', '.']);
                at_start && w.len() - at - mark.len() >= 8
            })
        };
        SECRET_VALUE_MARKS.iter().any(|m| token(m))
            || is_aws_key_id(w)
            || (w.starts_with("eyJ") && w.matches('.').count() == 2 && w.len() > 30)
    })
}

/// Whether a command-line flag (`--api-key`, `-token`) names a secret. `PATH` holds the
/// marker `PAT` but no secret.
fn is_secret_flag(flag: &str) -> bool {
    let name = flag.trim_start_matches('-').to_ascii_uppercase();
    name.len() < flag.len() && is_secret_name(&name.replace("PATH", ""))
}

/// The credentials written literally into a program's arguments (issue 22: an MCP
/// server's `command`), with their index in `argv`: the value of a secret-named flag
/// (`--token VALUE`, `--api-key=VALUE`), or an argument that looks like a secret
/// ([`is_secret_value`]: a token format, a URL with userinfo).
pub fn secret_args(argv: &[String]) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    for (i, arg) in argv.iter().enumerate().skip(1) {
        let value = match arg.split_once('=') {
            Some((flag, value)) if is_secret_flag(flag) => Some(value),
            _ if is_secret_flag(&argv[i - 1]) && !argv[i - 1].contains('=') => Some(arg.as_str()),
            _ => None,
        };
        match value {
            Some(v) if !v.is_empty() && !v.starts_with('-') && !v.contains("${") => {
                out.push((i, v))
            }
            _ if is_secret_value(arg) => out.push((i, arg.as_str())),
            _ => {}
        }
    }
    out
}

fn is_aws_key_id(w: &str) -> bool {
    (w.starts_with("AKIA") || w.starts_with("ASIA"))
        && w.len() == 20
        && w.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
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

/// The userinfo (before `@`) of `scheme://userinfo@host…`, if any.
pub fn userinfo(value: &str) -> Option<&str> {
    let start = value.find("://")? + 3;
    let rest = &value[start..];
    let authority_end = rest.find(['/', '?', '#', ' ']).unwrap_or(rest.len());
    let at = rest[..authority_end].rfind('@')?;
    Some(&rest[..at]).filter(|u| !u.is_empty())
}

/// `value` with the userinfo of a URL in it replaced by [`REDACTED`], for showing a
/// configured URL (a provider's base URL in an error or a `Debug`).
pub fn url_shown(value: &str) -> String {
    match userinfo(value) {
        Some(u) => value.replacen(&format!("{u}@"), &format!("{REDACTED}@"), 1),
        None => value.to_string(),
    }
}

/// Standard base64 with padding (RFC 4648), for the `Basic` form of URL credentials.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
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
            self.add_userinfo(userinfo);
        }
        self.push(value);
    }

    /// Remembers the credentials of a URL used to reach a server (a provider's base
    /// URL): its whole userinfo, with or without a password, since a lone
    /// `https://TOKEN@host` is a credential too. The URL itself stays showable.
    pub fn add_url(&mut self, url: &str) {
        if let Some(userinfo) = userinfo(url) {
            self.add_userinfo(userinfo);
        }
    }

    /// `user:password` as written, percent-decoded, the password alone, and the
    /// `Basic` value an HTTP client sends for them (an echo of the header is a leak too).
    fn add_userinfo(&mut self, userinfo: &str) {
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
        for v in [
            userinfo.to_string(),
            decode(userinfo),
            password.to_string(),
            decode(password),
        ] {
            self.push(&v);
        }
        if password.is_empty() {
            // A lone token: the user part is the secret.
            self.push(&decode(user));
        }
        self.push(&base64(
            format!("{}:{}", decode(user), decode(password)).as_bytes(),
        ));
    }

    fn push(&mut self, value: &str) {
        if value.chars().count() >= MIN_LEN && !self.values.iter().any(|v| v == value) {
            self.values.push(value.to_string());
            // Longest first, so a value containing another is replaced whole.
            self.values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        }
    }

    /// Remembers every value `other` knows.
    pub fn extend(&mut self, other: &Secrets) {
        for v in &other.values {
            self.push(v);
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

    /// How much of the end of `text` could be the start of a secret that the next
    /// piece of a stream completes: the byte length of the longest such suffix.
    fn unfinished_tail(&self, text: &str) -> usize {
        let mut longest = 0;
        for v in &self.values {
            let max = v.len().saturating_sub(1).min(text.len());
            for len in (longest + 1..=max).rev() {
                let start = text.len() - len;
                if text.is_char_boundary(start) && v.starts_with(&text[start..]) {
                    longest = len;
                    break;
                }
            }
        }
        longest
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

/// Redaction of a text that arrives in pieces (a streamed answer): a secret split over
/// two pieces is caught because the end of a piece that could begin a secret is held
/// back until the next piece says whether it does.
#[derive(Debug)]
pub struct StreamText<'a> {
    secrets: &'a Secrets,
    held: String,
}

impl<'a> StreamText<'a> {
    pub fn new(secrets: &'a Secrets) -> StreamText<'a> {
        StreamText {
            secrets,
            held: String::new(),
        }
    }

    /// What may be shown of the text so far, given its next `piece`.
    pub fn push(&mut self, piece: &str) -> String {
        self.held.push_str(piece);
        let text = self.secrets.text(&self.held);
        let keep = self.secrets.unfinished_tail(&text);
        self.held = text[text.len() - keep..].to_string();
        text[..text.len() - keep].to_string()
    }

    /// The text ended whole: what was held back (it turned out to be no secret).
    pub fn finish(self) -> String {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_args_are_flag_values_and_secret_looking_arguments() {
        let argv: Vec<String> = [
            "server",
            "--token",
            "tok-5678",
            "--api-key=k-1234",
            "--path",
            "/srv",
            "ghp_abcdefgh12345678",
            "--verbose",
            "https://bob:pw@db.example/x",
            "--port=80",
        ]
        .map(String::from)
        .to_vec();
        let found: Vec<(usize, &str)> = secret_args(&argv);
        assert_eq!(
            found,
            [
                (2, "tok-5678"),
                (3, "k-1234"),
                (6, "ghp_abcdefgh12345678"),
                (8, "https://bob:pw@db.example/x")
            ]
        );
        // The program itself, and a flag followed by another flag, are not secrets.
        let argv = ["ghp_abcdefgh12345678", "--token", "--x"].map(String::from);
        assert!(secret_args(&argv).is_empty());
    }
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
    fn url_credentials_are_redacted_as_written_decoded_and_as_basic() {
        let mut s = Secrets::default();
        s.add_url("https://alice:p%40ss-word@llm.internal/v1");
        assert_eq!(
            s.text("alice:p%40ss-word alice:p@ss-word p@ss-word Basic YWxpY2U6cEBzcy13b3Jk"),
            "[redacted] [redacted] [redacted] Basic [redacted]"
        );
        let mut t = Secrets::default();
        t.add_url("https://sk-lonetoken@llm.internal/v1");
        assert_eq!(t.text("got sk-lonetoken"), "got [redacted]");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(
            url_shown("https://alice:pw@llm.internal/v1"),
            "https://[redacted]@llm.internal/v1"
        );
        assert_eq!(url_shown("http://host/a@b"), "http://host/a@b");
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
        for value in [
            "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX",
            "glpat-abcdefghij0123456789",
            "https://ghp_abcdefghij0123456789@github.com/org/repo.git",
            "https://x-access-token:abc@github.com",
            "ghp_abcdefghij0123456789",
            "Bearer sk-abcdefghij0123456789",
            "AKIAABCDEFGHIJKLMNOP",
            "xoxb-123456789012-abcdefghij",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTYifQ.c2lnbmF0dXJlLXZhbHVl",
        ] {
            assert!(is_secret_value(value), "{value}");
        }
        for value in [
            "/usr/bin:/bin",
            "en_US.UTF-8",
            "vi",
            "task-runner",
            "https://example.com/a/b",
            "desk-top",
            "/home/u/.cache",
        ] {
            assert!(!is_secret_value(value), "{value}");
        }
        assert_eq!(url_credentials("http://u:p@proxy:3128"), Some("u:p"));
        assert_eq!(url_credentials("https://host/a@b"), None);
        assert_eq!(url_credentials("https://user@host/"), None);
    }

    #[test]
    fn a_secret_split_over_stream_pieces_never_shows_in_part() {
        let mut s = Secrets::default();
        s.add("sk-abcdef123456");
        let text = "key sk-abcdef123456 and sk-abc but é sk";
        for a in 0..text.len() {
            for b in a..text.len() {
                if !(text.is_char_boundary(a) && text.is_char_boundary(b)) {
                    continue;
                }
                let mut st = StreamText::new(&s);
                let mut shown = Vec::new();
                for piece in [&text[..a], &text[a..b], &text[b..]] {
                    shown.push(st.push(piece));
                }
                shown.push(st.finish());
                assert!(
                    shown.iter().all(|p| !p.contains("sk-abcdef")),
                    "{a} {b}: {shown:?}"
                );
                assert_eq!(
                    shown.concat(),
                    "key [redacted] and sk-abc but é sk",
                    "{a} {b}"
                );
            }
        }
    }
}

//! tools.toml (docs/ARCHITECTURE.md §3): parsing the raw file and resolving it into a validated
//! [`ToolsConfig`].
//!
//! Two stages (STYLE habit 6): [`raw`] reads the file as written, with spans, into
//! structs of `Option`s that deny unknown keys; [`resolve`] applies defaults and runs
//! the checks in [`validate`]. Neither stops at the first problem: every problem is a
//! one-line [`ConfigError`] naming the file, the tool and the key.

pub mod agents;
mod fields;
pub mod hooks;
mod limits;
pub use limits::parse_rate;
mod mcp;
mod notify;
pub use notify::section_of as notify_section;
pub mod kernel;
pub mod layout;
pub mod own_files;
pub mod preflight;
mod raw;
pub(crate) use raw::hint as key_hint;
mod resolve;
pub mod types;
pub mod validate;

#[cfg(test)]
mod tests;

pub use types::*;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One problem in a tools.toml, located as precisely as we can.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// The tool the problem is in, when it is in one.
    pub tool: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tool {
            Some(t) => write!(f, "{}: tool `{t}`: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// Every problem found in one file (validation does not stop at the first).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(|e| e.to_string()).collect();
        f.write_str(&lines.join("\n"))
    }
}

impl std::error::Error for ConfigErrors {}

/// Reads and validates a tools.toml; returns the config and the file's text (for the
/// run's config snapshot).
pub fn load(path: &Path) -> Result<(ToolsConfig, String), ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: path.to_path_buf(),
            tool: None,
            message: match e.kind() {
                std::io::ErrorKind::NotFound => {
                    "no such file; `agentrun init` writes a starter, or pass --tools PATH".into()
                }
                _ => format!("cannot read: {e}"),
            },
        }])
    })?;
    let cfg = parse(&text, path)?;
    Ok((cfg, text))
}

/// Validates tools.toml text. `origin` names the file in errors, and its directory is
/// where relative command paths and the child's working directory resolve.
pub fn parse(text: &str, origin: &Path) -> Result<ToolsConfig, ConfigErrors> {
    let mut sink = Sink::new(origin);
    let doc = match toml::de::DeTable::parse(text) {
        Ok(doc) => doc.into_inner(),
        Err(e) => {
            let at = e.span().map_or(String::new(), |s| {
                format!(" at {}", raw::location(text, s.start))
            });
            sink.top(format!("syntax error{at}: {}", raw::one_line(e.message())));
            return sink.finish(ToolsConfig::default());
        }
    };
    let file = raw::read_file(doc, text, &mut sink);
    let config = resolve::resolve(file, origin, &mut sink);
    sink.finish(config)
}

/// All problems, one per line, then a count: what `tools check` prints.
pub fn render_errors(errs: &ConfigErrors) -> String {
    let n = errs.0.len();
    let noun = if n == 1 { "problem" } else { "problems" };
    format!("{errs}\n{n} {noun} found\n")
}

/// Collects problems as they are found, so validation never stops at the first.
pub(crate) struct Sink {
    file: PathBuf,
    errors: Vec<ConfigError>,
}

impl Sink {
    fn new(file: &Path) -> Self {
        Sink {
            file: file.to_path_buf(),
            errors: Vec::new(),
        }
    }

    /// A problem outside any tool.
    fn top(&mut self, message: String) {
        self.push(None, message);
    }

    /// A problem in a tool (or in the tool's name).
    fn tool(&mut self, tool: &str, message: String) {
        self.push(Some(tool), message);
    }

    /// A problem in a section or tool as a whole.
    fn at(&mut self, place: raw::Where<'_>, message: String) {
        match place {
            raw::Where::Section(s) => self.top(format!("{s}: {message}")),
            raw::Where::Tool(t) => self.tool(t, message),
        }
    }

    /// A problem with one key: `defaults.timeout: ...` or, in a tool, `timeout: ...`.
    fn key(&mut self, place: raw::Where<'_>, key: &str, message: String) {
        match place {
            raw::Where::Section(s) => self.top(format!("{s}.{key}: {message}")),
            raw::Where::Tool(t) => self.tool(t, format!("{key}: {message}")),
        }
    }

    fn push(&mut self, tool: Option<&str>, message: String) {
        // Quoted TOML keys may hold line breaks; escape them so each error stays one line.
        let tool = tool.map(|t| {
            if t.contains(char::is_control) {
                t.escape_debug().to_string()
            } else {
                t.to_string()
            }
        });
        let message = message.replace(['\n', '\r'], " ");
        self.errors.push(ConfigError {
            file: self.file.clone(),
            tool,
            message,
        });
    }

    /// File-level problems first, then each tool's together, each in the order found.
    fn finish<T>(mut self, value: T) -> Result<T, ConfigErrors> {
        if self.errors.is_empty() {
            return Ok(value);
        }
        self.errors.sort_by(|a, b| a.tool.cmp(&b.tool));
        Err(ConfigErrors(self.errors))
    }
}

/// Parses durations such as `"500ms"`, `"8s"`, `"2m"`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("bad duration {s:?}: {e}"))
}

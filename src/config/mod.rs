//! tools.toml: parsing the raw file and resolving it into a validated [`ToolsConfig`].
//! STUB: to be implemented (raw structs with deny_unknown_fields, defaults, validation).

pub mod types;

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
            message: format!("cannot read: {e}"),
        }])
    })?;
    let cfg = parse(&text, path)?;
    Ok((cfg, text))
}

/// Validates tools.toml text. `origin` names the file in errors, and its directory is
/// where relative command paths and the child's working directory resolve.
pub fn parse(_text: &str, _origin: &Path) -> Result<ToolsConfig, ConfigErrors> {
    Ok(ToolsConfig::default())
}

/// Parses durations such as `"500ms"`, `"8s"`, `"2m"`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("bad duration {s:?}: {e}"))
}

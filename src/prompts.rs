//! The texts the model runs under: the system prompt, recovery hints, the stuck nudge
//! and the degraded-answer request.
//!
//! They live in a `prompts/` folder beside tools.toml so a team can tune them; any file
//! that is missing falls back to the copy built into the binary (the repository's own
//! `prompts/`). A run snapshots them at start so a resumed run reads what it began with.

use crate::tools::outcome::ErrorKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

const SYSTEM: &str = include_str!("../prompts/system.md");
const STUCK: &str = include_str!("../prompts/stuck.md");
const DEGRADED: &str = include_str!("../prompts/degraded.md");
const HINTS: &str = include_str!("../prompts/hints.toml");

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prompts {
    pub system: String,
    pub stuck: String,
    pub degraded: String,
    /// Error kind (as in the JSON `error` field) -> recovery hint.
    pub hints: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct PromptsError {
    pub path: String,
    pub message: String,
}

impl Prompts {
    /// The prompts compiled into the binary.
    pub fn builtin() -> Prompts {
        Prompts {
            system: SYSTEM.to_string(),
            stuck: STUCK.to_string(),
            degraded: DEGRADED.to_string(),
            // The built-in table is part of the build; a test pins that it parses.
            hints: parse_hints(HINTS, "prompts/hints.toml").unwrap_or_default(),
        }
    }

    /// Reads `dir/system.md`, `dir/stuck.md`, `dir/degraded.md`, `dir/hints.toml`,
    /// each falling back to the built-in copy when absent. Hints from the file extend
    /// and override the built-in table.
    pub fn load(dir: &Path) -> Result<Prompts, PromptsError> {
        let mut p = Prompts::builtin();
        if let Some(s) = read_optional(&dir.join("system.md"))? {
            p.system = s;
        }
        if let Some(s) = read_optional(&dir.join("stuck.md"))? {
            p.stuck = s;
        }
        if let Some(s) = read_optional(&dir.join("degraded.md"))? {
            p.degraded = s;
        }
        let hints_path = dir.join("hints.toml");
        if let Some(s) = read_optional(&hints_path)? {
            let extra = parse_hints(&s, &hints_path.display().to_string())?;
            p.hints.extend(extra);
        }
        Ok(p)
    }

    /// The hint for an error kind; a generic one when the table has none.
    pub fn hint(&self, kind: ErrorKind) -> &str {
        self.hints
            .get(kind.as_str())
            .map(String::as_str)
            .unwrap_or("Explain what could not be done and offer a handover to a person.")
    }
}

fn read_optional(path: &Path) -> Result<Option<String>, PromptsError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(PromptsError {
            path: path.display().to_string(),
            message: e.to_string(),
        }),
    }
}

fn parse_hints(text: &str, path: &str) -> Result<BTreeMap<String, String>, PromptsError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct HintsFile {
        hints: BTreeMap<String, String>,
    }
    let file: HintsFile = toml::from_str(text).map_err(|e| PromptsError {
        path: path.to_string(),
        message: e.message().to_string(),
    })?;
    for kind in file.hints.keys() {
        if ErrorKind::parse(kind).is_none() {
            return Err(PromptsError {
                path: path.to_string(),
                message: format!("unknown error kind `{kind}` in [hints]"),
            });
        }
    }
    Ok(file.hints)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_hints_cover_every_error_kind() {
        let p = Prompts::builtin();
        for kind in ErrorKind::ALL {
            assert!(p.hints.contains_key(kind.as_str()), "no hint for {kind:?}");
        }
    }

    #[test]
    fn a_hints_file_with_an_unknown_kind_is_refused() {
        let err = parse_hints("[hints]\nbogus = \"x\"\n", "h.toml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "h.toml: unknown error kind `bogus` in [hints]"
        );
    }
}

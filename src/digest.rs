//! Digests of command tools' program files (issue 12): recorded in the run's config
//! snapshot at start, so `resume` can say when a program was edited after approval.

use crate::config::{ToolKind, ToolsConfig};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Interpreters whose first argument, when it is a file, is the program that matters.
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "python", "python3", "node", "ruby", "perl", "deno", "bun",
];

/// Tool name → (program file, SHA-256 hex), for each command tool whose file is found,
/// and for each sub-agent its task file (issue 26: a child run started later reads it).
pub fn program_digests(cfg: &ToolsConfig) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for (name, def) in &cfg.tools {
        let file = match &def.kind {
            ToolKind::Command(spec) => program_file(&spec.argv, &spec.cwd, spec.program.as_deref()),
            ToolKind::Agent(spec) => Some(spec.task_path.clone()),
            _ => None,
        };
        let Some(file) = file else {
            continue;
        };
        if let Some(d) = file_digest(&file) {
            out.insert(name.clone(), (file.display().to_string(), d));
        }
    }
    out
}

/// One line per tool whose recorded program file changed (or vanished) since start.
pub fn changed(recorded: &BTreeMap<String, (String, String)>) -> Vec<String> {
    recorded
        .iter()
        .filter(|(_, (file, d))| file_digest(Path::new(file)).as_ref() != Some(d))
        .map(|(tool, (file, _))| {
            format!("agentrun: tool `{tool}`: {file} changed since the run started")
        })
        .collect()
}

/// The file that matters for `argv`: the script after an interpreter, else `program`
/// (argv[0] as resolved for the run), else argv[0] looked up as the spawn would.
fn program_file(argv: &[String], cwd: &Path, program: Option<&Path>) -> Option<PathBuf> {
    let first = argv.first()?;
    let base = Path::new(first).file_name()?.to_str()?;
    if INTERPRETERS.contains(&base)
        && let Some(script) = argv.get(1).filter(|a| !a.starts_with('-'))
    {
        let p = cwd.join(script);
        if p.is_file() {
            return Some(p);
        }
    }
    if let Some(p) = program {
        return Some(p.to_path_buf());
    }
    if first.contains('/') {
        return Some(cwd.join(first));
    }
    crate::tools::spawn::find_on_path(first, &std::env::var_os("PATH")?, cwd)
}

fn file_digest(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    Some(
        Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_after_an_interpreter_is_the_program_and_an_edit_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t.py"), "print(1)").unwrap();
        let argv = vec!["python3".to_string(), "t.py".to_string()];
        let file = program_file(&argv, dir.path(), None).unwrap();
        assert_eq!(file, dir.path().join("t.py"));
        let rec = BTreeMap::from([(
            "t".to_string(),
            (file.display().to_string(), file_digest(&file).unwrap()),
        )]);
        assert!(changed(&rec).is_empty());
        std::fs::write(&file, "print(2)").unwrap();
        assert_eq!(changed(&rec).len(), 1);
        assert!(changed(&rec)[0].contains("t.py"), "{:?}", changed(&rec));
    }
}

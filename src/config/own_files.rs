//! agentrun's own files — the SQLite database and the config files in use — which no
//! sandboxed child may reach, whatever the layout (docs/ARCHITECTURE.md §8,
//! Sandbox). Recorded by the command layer as soon as it knows them, before anything
//! is spawned, and by the run's setup when it reads tools.toml; read by the sandbox
//! when it prepares a child's policy and by the pre-flight checks. A global: the few
//! facts about the process a spawn needs and is not handed, so no call site has to
//! carry them.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

static OWN: Mutex<Own> = Mutex::new(Own {
    database: None,
    files: Vec::new(),
});

struct Own {
    database: Option<PathBuf>,
    files: Vec<PathBuf>,
}

/// `path` made absolute, through its links where it exists.
fn absolute(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    std::fs::canonicalize(&abs).unwrap_or(abs)
}

/// The SQLite database in use.
pub fn protect_database(path: &Path) {
    let mut own = OWN.lock().unwrap_or_else(|e| e.into_inner());
    own.database = Some(absolute(path));
}

/// A config file of agentrun's (tools.toml, the settings file).
pub fn protect_file(path: &Path) {
    let path = absolute(path);
    let mut own = OWN.lock().unwrap_or_else(|e| e.into_inner());
    if !own.files.contains(&path) {
        own.files.push(path);
    }
}

pub fn database() -> Option<PathBuf> {
    OWN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .database
        .clone()
}

pub fn files() -> Vec<PathBuf> {
    OWN.lock().unwrap_or_else(|e| e.into_inner()).files.clone()
}

//! Where things are: the database, the config file with defaults, and tools.toml
//! (issue 13, "where is my database?").
//!
//! The database is found the way git finds `.git`: the nearest folder, from the
//! current one up, that holds `.agentrun/`. Without one, `./.agentrun/agentrun.db` is
//! created on first use (docs/ARCHITECTURE.md §1). Settings come from, strongest first:
//!
//! 1. the command line (`--db`, `--model`, `--tools`);
//! 2. the environment (`AGENTRUN_DB`, `AGENTRUN_MODEL`, `AGENTRUN_TOOLS`);
//! 3. the config file: `AGENTRUN_CONFIG`, else `.agentrun/config.toml` in that folder;
//! 4. built-in defaults.
//!
//! `[notify]` (issue 24) may be in the config file too, for every project that uses it;
//! a tools.toml with a `[notify]` of its own replaces it as a whole for its runs (the
//! project's choice beats the person's default). Either is copied into the run's
//! snapshot at start, so whichever process delivers an event uses what the run began
//! with.
//!
//! A model from 2 or 3 is a default for tasks whose front matter names none; `--model`
//! overrides the task. `.env` files are not read: agentrun passes its environment on
//! to tools (through an allow-list) and to providers, and a file that silently adds
//! keys from whichever folder the command happens to run in is a way to use the wrong
//! key, or leak one, without noticing. Use `set -a; . ./.env; set +a` when wanted.

use super::{BadInput, Cli};
use serde::Deserialize;
use std::path::{Path, PathBuf};

pub const DEFAULT_DB: &str = ".agentrun/agentrun.db";
const CONFIG_NAME: &str = "config.toml";

/// The config file as written: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    model: Option<String>,
    database: Option<PathBuf>,
    tools: Option<PathBuf>,
    /// Checked by [`crate::config::notify_section`], which names its keys.
    notify: Option<toml::Value>,
    /// PostgreSQL connections per process (issue 25).
    db_pool: Option<u32>,
    /// The sandbox of tools whose tools.toml does not name one, on this machine
    /// (`"off"` where the kernel cannot sandbox: docs/security.md, Sandbox).
    sandbox: Option<String>,
}

/// The config file's `[notify]`, checked, as a run's snapshot keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigNotify {
    /// The config file (named in errors).
    pub file: PathBuf,
    /// The project folder: where a relative `command` runs.
    pub cwd: PathBuf,
    /// The section alone, as TOML (`[notify]` …): no other key of the file (its
    /// `database` may hold a password) is copied into a run.
    pub toml: String,
}

/// Settings after precedence is applied.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub db: PathBuf,
    /// The user chose the database (flag, env or config): a missing file is a typo,
    /// not "no runs yet".
    pub db_chosen: bool,
    /// A model for tasks that name none.
    pub model: Option<String>,
    /// tools.toml chosen by env or config (the flag is the command's own).
    pub tools: Option<PathBuf>,
    /// `[notify]` of the config file, for runs whose tools.toml has none.
    pub notify: Option<ConfigNotify>,
    /// PostgreSQL connections per process, from `AGENTRUN_DB_POOL` or `db_pool` (the
    /// `--db-pool` flag is applied over it by [`load`]).
    pub db_pool: Option<u32>,
    /// The config file read, if any (hidden from sandboxed children).
    pub config: Option<PathBuf>,
    /// The config file's `sandbox`: the mode of tools whose tools.toml names none.
    pub sandbox: Option<crate::config::SandboxMode>,
}

/// Reads the process environment and current folder.
pub fn load(cli: &Cli) -> anyhow::Result<Settings> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let mut settings = resolve(cli.db.clone(), &cwd, &|k| std::env::var_os(k))?;
    settings.db_pool = cli.db_pool.or(settings.db_pool);
    Ok(settings)
}

/// Applies the precedence; `env` and `cwd` are injected for tests.
pub fn resolve(
    db_flag: Option<PathBuf>,
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> anyhow::Result<Settings> {
    let project = find_project(cwd);
    let config_path = env("AGENTRUN_CONFIG").map(PathBuf::from).or_else(|| {
        project
            .as_ref()
            .map(|p| p.join(".agentrun").join(CONFIG_NAME))
            .filter(|p| p.is_file())
    });
    let (file, base) = match &config_path {
        Some(p) => (read_config(p)?, config_base(p)),
        None => (ConfigFile::default(), cwd.to_path_buf()),
    };
    let notify = match (&config_path, file.notify) {
        (Some(path), Some(section)) => Some(config_notify(path, &base, section)?),
        _ => None,
    };
    let non_empty = |k: &str| env(k).filter(|v| !v.is_empty());
    let (db, db_chosen) = match (db_flag, file.database) {
        (Some(p), _) => (p, true),
        // A PostgreSQL URL is not a path relative to the config file.
        (None, Some(p)) if p.to_str().is_some_and(crate::store::is_postgres_url) => (p, true),
        (None, Some(p)) => (base.join(p), true),
        (None, None) => match &project {
            Some(p) => (p.join(DEFAULT_DB), false),
            None => (PathBuf::from(DEFAULT_DB), false),
        },
    };
    let model = non_empty("AGENTRUN_MODEL")
        .map(|v| v.to_string_lossy().into_owned())
        .or(file.model);
    let tools = non_empty("AGENTRUN_TOOLS")
        .map(PathBuf::from)
        .or(file.tools.map(|t| base.join(t)));
    let db_pool = match non_empty("AGENTRUN_DB_POOL") {
        Some(v) => Some(pool_size(&v.to_string_lossy()).ok_or_else(|| {
            BadInput(format!(
                "AGENTRUN_DB_POOL={}: not a whole number from 1 to {MAX_POOL}",
                v.to_string_lossy()
            ))
        })?),
        None => file.db_pool,
    };
    let sandbox = match (&file.sandbox, &config_path) {
        (Some(v), Some(p)) => Some(crate::config::SandboxMode::parse(v).ok_or_else(|| {
            BadInput(format!(
                "{}: sandbox = {v:?}: must be \"workspace\", \"read-only\" or \"off\"",
                p.display()
            ))
        })?),
        _ => None,
    };
    if let (Some(n), Some(p)) = (db_pool, &config_path)
        && !(1..=MAX_POOL).contains(&n)
    {
        return Err(BadInput(format!(
            "{}: db_pool = {n} is not a whole number from 1 to {MAX_POOL}",
            p.display()
        ))
        .into());
    }
    Ok(Settings {
        db,
        db_chosen,
        model,
        tools,
        notify,
        db_pool,
        config: config_path,
        sandbox,
    })
}

/// The largest `--db-pool`: far above what one process needs, below a server's
/// connection limit many times over.
pub const MAX_POOL: u32 = 1000;

/// A pool size as the flag and `AGENTRUN_DB_POOL` take it: 1 to [`MAX_POOL`].
pub fn pool_size(text: &str) -> Option<u32> {
    text.trim()
        .parse()
        .ok()
        .filter(|n| (1..=MAX_POOL).contains(n))
}

/// The nearest folder from `cwd` up that holds a `.agentrun/` folder.
pub fn find_project(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors()
        .find(|dir| dir.join(".agentrun").is_dir())
        .map(Path::to_path_buf)
}

/// Relative paths in a config file start at the project folder: the one holding the
/// `.agentrun/` the file is in, else the file's own folder.
fn config_base(config: &Path) -> PathBuf {
    let dir = config.parent().unwrap_or(Path::new("."));
    match dir.file_name() {
        Some(n) if n == ".agentrun" => dir.parent().unwrap_or(Path::new(".")).to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

/// Checks the config file's `[notify]` (every problem, one line each, naming the file
/// and key: exit 2) and keeps it as TOML for the run's snapshot.
fn config_notify(path: &Path, base: &Path, section: toml::Value) -> anyhow::Result<ConfigNotify> {
    let mut table = toml::Table::new();
    table.insert("notify".into(), section);
    let text = toml::to_string(&table)
        .map_err(|e| BadInput(format!("{}: [notify]: {e}", path.display())))?;
    // Checked in the file's own text, so errors carry its line numbers.
    let whole = std::fs::read_to_string(path).unwrap_or_default();
    crate::config::notify_section(&whole, path, base).map_err(|e| BadInput(e.to_string()))?;
    Ok(ConfigNotify {
        file: path.to_path_buf(),
        cwd: base.to_path_buf(),
        toml: text,
    })
}

fn read_config(path: &Path) -> anyhow::Result<ConfigFile> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| BadInput(format!("{}: cannot read config file: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| {
        let msg = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
        BadInput(format!(
            "{}: {msg} (keys: model, database, tools, db_pool, [notify])",
            path.display()
        ))
        .into()
    })
}

/// The tools.toml files `start` looks for, in order, when none is chosen: beside the
/// task, then in each folder above it, then in the current folder.
pub fn tools_candidates(task_dir: &Path, cwd: &Path) -> Vec<PathBuf> {
    let dir = if task_dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        task_dir
    };
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut out: Vec<PathBuf> = abs.ancestors().map(|d| d.join("tools.toml")).collect();
    let here = cwd.join("tools.toml");
    if !out.contains(&here) {
        out.push(here);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn the_database_is_found_in_a_parent_folder_like_git() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".agentrun")).unwrap();
        let deep = dir.path().join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        let s = resolve(None, &deep, &env_of(&[])).unwrap();
        assert_eq!(s.db, dir.path().join(".agentrun/agentrun.db"));
        assert!(!s.db_chosen);
    }

    #[test]
    fn flag_beats_config_and_env_beats_config_for_model_and_tools() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".agentrun")).unwrap();
        std::fs::write(
            dir.path().join(".agentrun/config.toml"),
            "model = \"script:a.json\"\ndatabase = \"runs.db\"\ntools = \"conf/tools.toml\"\n",
        )
        .unwrap();
        let s = resolve(None, dir.path(), &env_of(&[])).unwrap();
        assert_eq!(s.db, dir.path().join("runs.db"));
        assert_eq!(s.model.as_deref(), Some("script:a.json"));
        assert_eq!(s.tools, Some(dir.path().join("conf/tools.toml")));
        let s = resolve(
            Some("x.db".into()),
            dir.path(),
            &env_of(&[("AGENTRUN_MODEL", "openai:m"), ("AGENTRUN_TOOLS", "t.toml")]),
        )
        .unwrap();
        assert_eq!(s.db, PathBuf::from("x.db"));
        assert_eq!(s.model.as_deref(), Some("openai:m"));
        assert_eq!(s.tools, Some(PathBuf::from("t.toml")));
    }

    #[test]
    fn a_bad_config_key_names_the_file_and_the_keys() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("c.toml");
        std::fs::write(&cfg, "modle = \"x\"\n").unwrap();
        let path: &'static str = Box::leak(cfg.display().to_string().into_boxed_str());
        let err = resolve(
            None,
            dir.path(),
            &env_of(Box::leak(Box::new([("AGENTRUN_CONFIG", path)]))),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with(&format!("{path}: unknown field `modle`")),
            "{err}"
        );
        assert!(
            err.ends_with("(keys: model, database, tools, db_pool, [notify])"),
            "{err}"
        );
    }
}

//! `agentrun test`: one case re-run against the current configuration.
//!
//! The order, for each case: read `case.json`; choose the task (its file as it is now,
//! else the recorded text) and tools.toml (`--tools`, else the case's); build a scratch
//! folder holding the task, the tools.toml (replayed unless `--live-tools`, see
//! [`super::replay`]) and links to everything beside the real tools.toml (prompts,
//! programs, hooks), so relative paths mean what they meant; run `agentrun start` there
//! with the case's script as the model, on a scratch database; read the run back and
//! diff it against the case's expectations. The scratch folder goes when the case ends.

use super::case::{self, Case, CaseError, SCRIPT_FILE};
use super::child::{Agentrun, ChildError};
use super::diff::{Line, diff};
use super::observed::Observed;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Run the tools for real instead of replaying them.
    pub live_tools: bool,
    /// The tools.toml to test against, instead of the one the case names.
    pub tools: Option<PathBuf>,
}

/// How a case went.
#[derive(Debug)]
pub enum Verdict {
    Passed,
    /// What changed, recorded (`-`) against now (`+`); `note` says why there is no run
    /// to compare when it could not start.
    Failed {
        diff: Vec<Line>,
        note: Option<String>,
    },
}

/// A case that cannot be tested as given (exit 2): a missing or damaged case file, no
/// tools.toml to test against.
#[derive(Debug, thiserror::Error)]
pub enum TestError {
    #[error(transparent)]
    Case(#[from] CaseError),
    #[error("{case}: {why}")]
    Input { case: String, why: String },
    #[error(transparent)]
    Child(#[from] ChildError),
    #[error("cannot prepare a scratch folder: {0}")]
    Scratch(std::io::Error),
}

impl TestError {
    pub fn is_bad_input(&self) -> bool {
        matches!(self, TestError::Case(_) | TestError::Input { .. })
    }
}

/// Re-runs the case in `dir`.
pub fn run(dir: &Path, opts: &Options) -> Result<Verdict, TestError> {
    let case = case::load(dir)?;
    let tools = tools_file(dir, &case, opts)?;
    let scratch = Scratch::new().map_err(TestError::Scratch)?;
    // The run's folder (task, tools.toml and what lies beside it) and its database
    // apart, so nothing linked in can stand for the database.
    let home = scratch.path.join("home");
    std::fs::create_dir(&home).map_err(TestError::Scratch)?;
    let task = home.join("task.md");
    std::fs::write(&task, task_text(dir, &case)).map_err(TestError::Scratch)?;
    let tools = if opts.live_tools {
        std::path::absolute(&tools).unwrap_or(tools)
    } else {
        replayed_tools(dir, &tools, &home)?
    };
    let script = std::path::absolute(dir.join(SCRIPT_FILE)).map_err(TestError::Scratch)?;
    let agentrun = Agentrun::this(&scratch.path.join("runs.db"))?;
    let args: Vec<OsString> = vec![
        "start".into(),
        task.into(),
        "--tools".into(),
        tools.into(),
        "--model".into(),
        format!("script:{}", script.display()).into(),
    ];
    let started = match agentrun.json(&args) {
        Ok(s) => s,
        Err(ChildError::Failed { stderr, .. }) => {
            return Ok(Verdict::Failed {
                diff: case.expect.lines().into_iter().map(Line::Gone).collect(),
                note: Some(format!("the run did not start: {stderr}")),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let id = started.json["run_id"].as_str().unwrap_or_default();
    let now = Observed::from_run(&agentrun.show(id)?, &mut Vec::new());
    Ok(match diff(&case.expect.lines(), &now.lines()) {
        None => Verdict::Passed,
        Some(diff) => Verdict::Failed { diff, note: None },
    })
}

fn tools_file(dir: &Path, case: &Case, opts: &Options) -> Result<PathBuf, TestError> {
    let input = |why: String| TestError::Input {
        case: dir.display().to_string(),
        why,
    };
    let path = match (&opts.tools, &case.tools) {
        (Some(p), _) => p.clone(),
        (None, Some(rel)) => dir.join(rel),
        (None, None) => {
            return Err(input(
                "the case names no tools.toml; pass --tools PATH".into(),
            ));
        }
    };
    if !path.is_file() {
        return Err(input(format!(
            "{}: no such tools.toml (pass --tools PATH)",
            path.display()
        )));
    }
    Ok(path)
}

/// The task as it is now: its file when the case names one that exists (a prompt
/// change is part of what is tested), else the text recorded with the case.
fn task_text(dir: &Path, case: &Case) -> String {
    case.task
        .file
        .as_ref()
        .and_then(|f| std::fs::read_to_string(dir.join(f)).ok())
        .unwrap_or_else(|| case.task.text.clone())
}

/// Writes the replaying tools.toml into `scratch`, beside links to every other entry of
/// the real tools.toml's folder.
fn replayed_tools(dir: &Path, tools: &Path, scratch: &Path) -> Result<PathBuf, TestError> {
    let text = std::fs::read_to_string(tools).map_err(|e| TestError::Input {
        case: dir.display().to_string(),
        why: format!("{}: {e}", tools.display()),
    })?;
    let exe = std::env::current_exe().map_err(TestError::Scratch)?;
    let case_dir = std::path::absolute(dir).map_err(TestError::Scratch)?;
    let replay = super::replay::replay_config(&text, tools, &exe, &case_dir).map_err(|e| {
        TestError::Input {
            case: dir.display().to_string(),
            why: e.to_string(),
        }
    })?;
    let out = scratch.join("tools.toml");
    std::fs::write(&out, replay).map_err(TestError::Scratch)?;
    let home = std::path::absolute(tools.parent().unwrap_or(Path::new(".")))
        .map_err(TestError::Scratch)?;
    let home = if home.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        home
    };
    for entry in std::fs::read_dir(&home).map_err(TestError::Scratch)? {
        let entry = entry.map_err(TestError::Scratch)?;
        let name = entry.file_name();
        let link = scratch.join(&name);
        if !link.exists() {
            std::os::unix::fs::symlink(entry.path(), link).map_err(TestError::Scratch)?;
        }
    }
    Ok(out)
}

/// A folder under the system's temporary folder, removed on drop.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new() -> std::io::Result<Scratch> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "agentrun-test-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst),
            rand::random::<u32>()
        ));
        std::fs::create_dir(&path)?;
        Ok(Scratch { path })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

//! `agentrun init`: a starter project that runs offline at once — a task, a scripted
//! model, a tools.toml showing each kind of tool, a command tool's script, and the
//! prompts to tune.
//!
//! It never overwrites: if any file it would write exists, it lists them all, writes
//! nothing and exits 2, so running it in the wrong folder costs nothing.

use super::{BadInput, Cli, Exit, output};
use crate::prompts::Prompts;
use anyhow::Context;
use clap::Args;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Write a starter project: task.md, tools.toml, tools/, prompts/ and a scripted model.
///
/// Then `agentrun tools check` and `agentrun start task.md` work offline. Existing
/// files are never overwritten: if any is in the way, nothing is written (exit 2).
///
/// Example:
///   agentrun init --dir support-bot
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct InitArgs {
    /// Folder to write into (created if missing) [default: the current folder]
    #[arg(
        long,
        value_name = "PATH",
        default_value = ".",
        hide_default_value = true
    )]
    pub dir: PathBuf,
}

/// One file of the starter project.
struct Starter {
    path: &'static str,
    text: String,
    executable: bool,
}

fn starter_files() -> anyhow::Result<Vec<Starter>> {
    let file = |path, text: &str, executable| Starter {
        path,
        text: text.to_string(),
        executable,
    };
    let prompts = Prompts::builtin();
    Ok(vec![
        file(
            "task.md",
            include_str!("../../templates/init/task.md"),
            false,
        ),
        file(
            "script.json",
            include_str!("../../templates/init/script.json"),
            false,
        ),
        file(
            "tools.toml",
            include_str!("../../templates/init/tools.toml"),
            false,
        ),
        file(
            "tools/search_notes.py",
            include_str!("../../templates/init/tools/search_notes.py"),
            true,
        ),
        file(
            "tools/send_reply.py",
            include_str!("../../templates/init/tools/send_reply.py"),
            true,
        ),
        file("prompts/system.md", &prompts.system, false),
        file("prompts/stuck.md", &prompts.stuck, false),
        file("prompts/degraded.md", &prompts.degraded, false),
        file("prompts/hints.toml", &hints_toml(&prompts.hints)?, false),
    ])
}

/// The hint table written back as TOML that `Prompts::load` reads.
fn hints_toml(hints: &BTreeMap<String, String>) -> anyhow::Result<String> {
    #[derive(serde::Serialize)]
    struct HintsFile<'a> {
        hints: &'a BTreeMap<String, String>,
    }
    let body = toml::to_string(&HintsFile { hints }).context("cannot write prompts/hints.toml")?;
    Ok(format!(
        "# Recovery hints, one per error kind: the runner puts the hint for a failure's kind\n\
         # into the tool result the model reads. Edit freely; a kind left out falls back\n\
         # to the built-in hint.\n{body}"
    ))
}

pub fn run(cli: &Cli, args: &InitArgs) -> anyhow::Result<Exit> {
    let files = starter_files()?;
    let taken: Vec<String> = files
        .iter()
        .map(|f| args.dir.join(f.path))
        // symlink_metadata: a dangling symlink is in the way too.
        .filter(|p| p.symlink_metadata().is_ok())
        .map(|p| p.display().to_string())
        .collect();
    if !taken.is_empty() {
        return Err(BadInput(format!(
            "init: nothing was written, because {} already exist{}:\n  {}\n\
             Move them aside, or write the starter elsewhere with `agentrun init --dir NEW_FOLDER`.",
            if taken.len() == 1 { "this file" } else { "these files" },
            if taken.len() == 1 { "s" } else { "" },
            taken.join("\n  ")
        ))
        .into());
    }
    for f in &files {
        write_new(&args.dir.join(f.path), f)?;
    }
    report(cli, &args.dir, &files)
}

/// Creates the file, refusing to replace one that appeared since the check.
fn write_new(path: &Path, f: &Starter) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("init: cannot create folder {}", dir.display()))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    if f.executable {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o755);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("init: cannot create {}", path.display()))?;
    file.write_all(f.text.as_bytes())
        .with_context(|| format!("init: cannot write {}", path.display()))
}

fn report(cli: &Cli, dir: &Path, files: &[Starter]) -> anyhow::Result<Exit> {
    let paths: Vec<String> = files
        .iter()
        .map(|f| dir.join(f.path).display().to_string())
        .collect();
    if cli.json {
        output::print_json(&serde_json::json!({"dir": dir.display().to_string(), "files": paths}))?;
        return Ok(Exit::Completed);
    }
    for p in &paths {
        crate::outln!("created {p}")?;
    }
    let cd = if dir == Path::new(".") {
        String::new()
    } else {
        format!("cd {} && ", dir.display())
    };
    crate::outln!("\nnext:\n  {cd}agentrun tools check\n  {cd}agentrun start task.md")?;
    Ok(Exit::Completed)
}

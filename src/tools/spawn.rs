//! The one way agentrun starts a child process: command tools, stdio MCP servers and
//! hooks all come through [`command`] (issue 23).
//!
//! Why it matters: the standard library starts a child with `posix_spawn` (on Linux,
//! `clone3(CLONE_VFORK)`: the child borrows agentrun's memory until it execs) only when
//! nothing forces it to run code of ours in the child. Two things do: a `pre_exec`
//! closure, and a program named without a `/` while the environment is set explicitly
//! (the child's `PATH` must then be searched in the child). Either makes std `fork`
//! the whole multi-threaded process — copying its page tables per tool call, which at
//! 200 runs in flight cost 45 s of kernel CPU in 51 s (issue 23). So:
//! - the program is resolved to an absolute path once per run ([`resolve_programs`],
//!   from the run's setup), on the child's own `PATH`, as std would have;
//! - the environment is built explicitly ([`super::env::child_env`]), the child
//!   leads its own process group (`process_group(0)`, which `posix_spawn` supports);
//! - nothing here may add a `pre_exec` closure. What must happen in the child before
//!   exec (the sandbox, a death signal: [`Before`]) is done by agentrun's trampoline
//!   ([`super::trampoline`]), itself spawned this way, which then execs the program.

pub use super::before::Before;
use super::env::{ChildEnv, child_env};
use crate::config::{CommandSpec, McpTransport, ToolKind, ToolsConfig};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// Why a child could not be prepared.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpawnError {
    #[error("command with an empty argv")]
    EmptyArgv,
    #[error("`{0}` is not on PATH")]
    NotOnPath(String),
    /// The sandbox could not be set up (agentrun cannot find its own executable).
    #[error("{0}")]
    Trampoline(String),
    /// The program is not there: said before the trampoline starts, as a direct
    /// spawn would say it.
    #[error("{0}")]
    Missing(String),
}

/// A child ready to start: the caller sets its stdio (and `kill_on_drop`) and spawns.
pub struct Prepared {
    pub cmd: tokio::process::Command,
    /// Secret values in its environment, to redact from what it says.
    pub env: ChildEnv,
}

/// A command for `spec` with agentrun's own variables `extra` added to its environment.
/// Its program is `spec.program` when the run resolved it, else resolved now. A child
/// whose sandbox confines anything, or that must die with agentrun, starts as
/// agentrun's trampoline, which applies that and then execs the program — spawned the
/// same way, so it costs one more exec, never a fork of agentrun.
pub fn command(
    spec: &CommandSpec,
    extra: &[(&str, &str)],
    before: Before<'_>,
) -> Result<Prepared, SpawnError> {
    let Some(arg0) = spec.argv.first() else {
        return Err(SpawnError::EmptyArgv);
    };
    let program = match &spec.program {
        Some(p) => p.clone(),
        None => resolve(spec, std::env::var_os("PATH").as_deref())?,
    };
    let env = child_env(std::env::vars_os(), spec);
    let policy = super::trampoline::policy(spec, before);
    // A confined child starts a session of its own in the trampoline (no terminal),
    // which makes it its group's leader too; `setsid` fails for one that already is.
    let own_group = !policy.as_ref().is_some_and(|p| p.confined);
    let mut cmd = match policy {
        None => {
            let mut cmd = tokio::process::Command::new(program);
            cmd.arg0(arg0).args(&spec.argv[1..]);
            cmd
        }
        Some(policy) => {
            if let Err(e) = std::fs::metadata(&program) {
                return Err(SpawnError::Missing(e.to_string()));
            }
            let (me, argv) = super::trampoline::wrap(&policy, &program, arg0, &spec.argv[1..])
                .map_err(SpawnError::Trampoline)?;
            let mut cmd = tokio::process::Command::new(me);
            cmd.args(argv);
            cmd
        }
    };
    cmd.current_dir(&spec.cwd)
        .env_clear()
        .envs(env.vars.iter().map(|(k, v)| (k, v)))
        .envs(extra.iter().copied());
    if own_group {
        cmd.process_group(0);
    }
    if let Some(tmp) = before.tmp {
        cmd.env("TMPDIR", tmp);
    }
    Ok(Prepared { cmd, env })
}

/// Fills `program` of every command tool and stdio MCP server of `cfg`: once per run,
/// so no step searches `PATH` (or forks to have the child search it). A program not
/// found now is left to be looked for again when it is first called, which then says
/// it is missing.
pub fn resolve_programs(cfg: &mut ToolsConfig) {
    let path = std::env::var_os("PATH");
    let specs = cfg
        .tools
        .values_mut()
        .filter_map(|t| match &mut t.kind {
            ToolKind::Command(spec) => Some(spec),
            _ => None,
        })
        .chain(cfg.mcp.values_mut().filter_map(|s| match &mut s.transport {
            McpTransport::Stdio(spec) => Some(spec),
            McpTransport::Http { .. } => None,
        }));
    for spec in specs {
        spec.program = resolve(spec, path.as_deref()).ok();
    }
}

/// The absolute path `spec`'s argv[0] names: relative to the tools.toml folder when it
/// holds a `/`, else the first executable file of that name on the child's `PATH` (its
/// `set` one, else `parent_path`).
pub fn resolve(spec: &CommandSpec, parent_path: Option<&OsStr>) -> Result<PathBuf, SpawnError> {
    let arg0 = spec.argv.first().ok_or(SpawnError::EmptyArgv)?;
    if arg0.contains('/') {
        // Absolute even when the tools.toml folder is given relatively: the child
        // changes into that folder before exec, so a relative path would miss.
        let joined = spec.cwd.join(arg0);
        return Ok(std::path::absolute(&joined).unwrap_or(joined));
    }
    let path: Option<OsString> = match spec.set.get("PATH") {
        Some(p) => Some(p.into()),
        None => parent_path.map(OsStr::to_os_string),
    };
    path.as_deref()
        .and_then(|p| find_on_path(arg0, p, &spec.cwd))
        .ok_or_else(|| SpawnError::NotOnPath(arg0.clone()))
}

/// The first executable regular file `name` in the directories of `path` (relative
/// directories count from `cwd`, where the child runs).
pub fn find_on_path(name: &str, path: &OsStr, cwd: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .map(|dir| {
            let dir = if dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                dir
            };
            let p = dir.join(name);
            if p.is_absolute() {
                p
            } else {
                let joined = cwd.join(p);
                std::path::absolute(&joined).unwrap_or(joined)
            }
        })
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn spec(argv0: &str, cwd: &Path, set_path: Option<&str>) -> CommandSpec {
        CommandSpec {
            argv: vec![argv0.into(), "arg".into()],
            program: None,
            env: Vec::new(),
            set: set_path
                .map(|p| ("PATH".to_string(), p.to_string()))
                .into_iter()
                .collect(),
            inherit_all: false,
            cwd: cwd.to_path_buf(),
            output_cap: 1024,
            sandbox: Default::default(),
        }
    }

    fn executable(dir: &Path, name: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn a_bare_name_is_the_first_executable_on_path_skipping_files_without_the_run_bit() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        executable(&a, "tool", 0o644);
        let want = executable(&b, "tool", 0o755);
        let path = std::env::join_paths([&a, &b]).unwrap();
        let got = resolve(&spec("tool", dir.path(), None), Some(&path));
        assert_eq!(got, Ok(want));
    }

    #[test]
    fn the_childs_own_path_wins_over_agentruns() {
        let dir = tempfile::tempdir().unwrap();
        let want = executable(dir.path(), "tool", 0o755);
        let s = spec("tool", Path::new("/"), Some(dir.path().to_str().unwrap()));
        assert_eq!(resolve(&s, Some(OsStr::new("/nonexistent"))), Ok(want));
    }

    #[test]
    fn a_relative_path_is_made_absolute_from_the_tools_folder() {
        let got = resolve(&spec("./t.sh", Path::new("conf"), None), None).unwrap();
        assert!(got.is_absolute(), "{got:?}");
        assert!(got.ends_with("conf/t.sh"), "{got:?}");
    }

    #[test]
    fn a_missing_program_is_named() {
        let s = spec("no-such-program-here", Path::new("/"), None);
        assert_eq!(
            resolve(&s, Some(OsStr::new("/nonexistent"))),
            Err(SpawnError::NotOnPath("no-such-program-here".into()))
        );
        let mut empty = s.clone();
        empty.argv.clear();
        assert_eq!(resolve(&empty, None), Err(SpawnError::EmptyArgv));
    }

    /// The class of issue 23: std forks the whole process when a spawn has a
    /// `pre_exec` closure. None may exist anywhere in agentrun's sources; what must run
    /// in the child before exec goes through a helper spawned without one.
    #[test]
    fn no_source_file_installs_a_pre_exec_closure() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let p = entry.path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|e| e == "rs") && !p.ends_with("evals/child.rs")
                {
                    // `agentrun eval` starts agentrun itself (not a tool) with a death
                    // signal set before exec; its fork is no tool call's.
                    let text = std::fs::read_to_string(&p).unwrap();
                    // Split so this file does not match itself.
                    if text.contains(concat!(".pre", "_exec(")) {
                        found.push(p.display().to_string());
                    }
                }
            }
        }
        assert!(found.is_empty(), "pre_exec in {found:?}");
    }
}

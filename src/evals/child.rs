//! Runs driven by agentrun's own command line, in a child process: `start`, `resume`
//! and `runs show`, each with `--json`. A test case or an eval run is then an ordinary
//! run — set up, checked, leased, driven and stored exactly as `agentrun start` does
//! it — and a run killed with its child can be resumed like any other.

use serde_json::Value;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    #[error("cannot run {exe}: {source}")]
    Spawn { exe: String, source: std::io::Error },
    /// The command printed no JSON object: its exit code and stderr say why.
    #[error("`agentrun {command}` exited {code}: {stderr}")]
    Failed {
        command: String,
        code: i32,
        stderr: String,
    },
}

/// One finished child command.
#[derive(Debug)]
pub struct Finished {
    pub code: i32,
    pub json: Value,
    pub stderr: String,
}

/// The agentrun binary and the database its children use.
#[derive(Debug, Clone)]
pub struct Agentrun {
    pub exe: PathBuf,
    pub db: PathBuf,
}

impl Agentrun {
    /// This very program.
    pub fn this(db: &Path) -> Result<Agentrun, ChildError> {
        let exe = std::env::current_exe().map_err(|source| ChildError::Spawn {
            exe: "agentrun".into(),
            source,
        })?;
        Ok(Agentrun {
            exe,
            db: db.to_path_buf(),
        })
    }

    /// Runs `agentrun --db DB --json --quiet ARGS…`; an exit without a JSON object on
    /// stdout is an error carrying its stderr.
    pub fn json(&self, args: &[OsString]) -> Result<Finished, ChildError> {
        let mut cmd = Command::new(&self.exe);
        cmd.arg("--db")
            .arg(&self.db)
            .args(["--json", "--quiet"])
            .args(args)
            .stdin(Stdio::null());
        die_with_parent(&mut cmd);
        let out = cmd.output().map_err(|source| ChildError::Spawn {
            exe: self.exe.display().to_string(),
            source,
        })?;
        let code = out.status.code().unwrap_or(-1);
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let json: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let command = || {
            args.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        if !json.is_object() && !json.is_array() {
            return Err(ChildError::Failed {
                command: command(),
                code,
                stderr,
            });
        }
        if let Some(message) = json["error"]["message"].as_str() {
            return Err(ChildError::Failed {
                command: command(),
                code,
                stderr: message.to_string(),
            });
        }
        Ok(Finished { code, json, stderr })
    }

    /// `runs show RUN --json`.
    pub fn show(&self, run_id: &str) -> Result<Value, ChildError> {
        Ok(self
            .json(&["runs".into(), "show".into(), run_id.into()])?
            .json)
    }
}

/// The child is killed (SIGKILL) when this process dies, however it dies: an eval
/// killed with -9 leaves no run driven by an orphan, so running the eval again resumes
/// each run from its last committed step at once (its holder is gone) instead of
/// finding it held by a process nobody waits for.
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: between fork and exec only async-signal-safe calls are made: prctl,
    // getppid and _exit.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before prctl took effect: nobody will wait for us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

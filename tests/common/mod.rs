//! Shared helpers for the end-to-end tests: a temporary project folder with its own
//! database, one-line writers for task files, tools.toml and scripts, and a runner for
//! the real `agentrun` binary that prints everything useful when an assertion fails.

#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub struct Project {
    pub dir: tempfile::TempDir,
}

/// The result of one `agentrun` invocation.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// A run from a `Command` the test built itself.
    pub fn from_output(out: Output) -> Run {
        Run::from(out)
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{self}"))
    }

    /// Asserts the exit code, showing the whole output when it differs.
    pub fn expect_code(&self, code: i32) -> &Run {
        assert_eq!(self.code, code, "unexpected exit code\n{self}");
        self
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_agentrun"))
}

impl Project {
    pub fn new() -> Project {
        Project {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn db(&self) -> PathBuf {
        self.path().join("runs.db")
    }

    /// Writes a file relative to the project, creating folders.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path().join(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(&p, text).expect("write");
        p
    }

    /// Writes an executable script (shell or python by its shebang).
    pub fn script(&self, rel: &str, text: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.write(rel, text);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    /// A task file using `script.json` as its model.
    pub fn task(&self, front: &str, body: &str) -> PathBuf {
        self.write(
            "task.md",
            &format!("+++\nmodel = \"script:script.json\"\n{front}\n+++\n{body}\n"),
        )
    }

    /// The scripted model's turns, as JSON.
    pub fn model_script(&self, turns: Value) -> PathBuf {
        self.write(
            "script.json",
            &serde_json::json!({ "turns": turns }).to_string(),
        )
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.current_dir(self.path())
            .env("AGENTRUN_DB", self.db())
            .env_remove("AGENTRUN_CRASH_AT")
            .args(args)
            .stdin(Stdio::null());
        c
    }

    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.command(args).output().expect("spawn agentrun"))
    }

    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut c = self.command(args);
        for (k, v) in env {
            c.env(k, v);
        }
        Run::from(c.output().expect("spawn agentrun"))
    }

    /// `runs show --json` of a run.
    pub fn show(&self, run_id: &str) -> Value {
        self.run(&["runs", "show", run_id, "--json"])
            .expect_code(0)
            .json()
    }

    /// The id of the only run in the database.
    pub fn only_run(&self) -> String {
        let list = self.run(&["runs", "list", "--json"]).expect_code(0).json();
        let runs = list.as_array().expect("array");
        assert_eq!(runs.len(), 1, "expected one run: {list}");
        runs[0]["id"].as_str().expect("id").to_string()
    }
}

/// A transcript without per-run noise: (step, role, content) of every message.
pub fn transcript(show: &Value) -> Vec<(u64, String, Value)> {
    show["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["step"].as_u64().expect("step"),
                m["role"].as_str().expect("role").to_string(),
                m["content"].clone(),
            )
        })
        .collect()
}

//! A benchmark project on disk: a task file, a tools.toml with one tool named `t`,
//! scripted-model files, and `agentrun` invocations against a database of its own.

use super::http::Server;
use super::procs::{self, Measured, Stdout};
use super::tool;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// The one tool every scripted step calls.
#[derive(Clone)]
pub enum Tool {
    /// The compiled helper ([`tool`]). `idempotent = false` adds the "started" mark,
    /// one more commit per step (journal.rs module doc).
    Command { idempotent: bool },
    /// The same helper, idempotent, with `sandbox = "workspace"` (issue 22): started
    /// through the trampoline, under Landlock; `network = false` adds the seccomp
    /// filter and Landlock's TCP rules.
    Sandboxed { network: bool },
    /// A GET to the bench's loopback server.
    Http(Arc<Server>),
}

pub struct Project {
    bin: PathBuf,
    dir: PathBuf,
    task: PathBuf,
    tools: PathBuf,
    stamps: PathBuf,
    tool: Tool,
}

/// One `agentrun start` of a scripted run.
pub struct StepRun {
    pub measured: Measured,
    pub run_id: String,
    /// Nanoseconds between consecutive tool calls: one whole step each.
    pub intervals: Vec<u64>,
}

impl Project {
    pub fn new(bin: &Path, root: &Path, name: &str, tool: Tool) -> Project {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).expect("create project folder");
        let stamps = dir.join("stamps.txt");
        let task = dir.join("task.md");
        // A huge token budget: only the step budget should ever stop a bench run.
        std::fs::write(
            &task,
            "+++\nmax_tokens = 1000000000000\n+++\nCall the tool until told to stop.\n",
        )
        .expect("write task");
        let tools = dir.join("tools.toml");
        std::fs::write(&tools, tools_toml(&tool, &stamps)).expect("write tools.toml");
        Project {
            bin: bin.to_path_buf(),
            dir,
            task,
            tools,
            stamps,
            tool,
        }
    }

    pub fn db(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A script of `calls` tool-call turns (arguments differ per turn, so no stuck or
    /// repeat detector ever fires) and a final answer. Written once per size.
    ///
    /// Written as text, not built as a `serde_json::Value`: 10,000 turns as a value
    /// tree take tens of MB, and the bench's own peak RSS must stay small because a
    /// child inherits it into its `ru_maxrss` (see `procs`).
    pub fn script(&self, calls: u32) -> PathBuf {
        let path = self.dir.join(format!("script-{calls}.json"));
        if !path.exists() {
            let mut text = String::from("{\"turns\": [\n");
            for i in 0..calls {
                text.push_str(&format!(
                    "{{\"tool_calls\": [{{\"name\": \"t\", \"args\": {{\"i\": {i}}}}}]}},\n"
                ));
            }
            text.push_str("{\"text\": \"done\"}\n]}\n");
            std::fs::write(&path, text).expect("write script");
        }
        path
    }

    /// `agentrun ARGS` against `db`.
    pub fn agentrun(&self, db: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.current_dir(&self.dir)
            .env("AGENTRUN_DB", db)
            .env_remove("AGENTRUN_CRASH_AT")
            .args(args);
        c
    }

    /// `agentrun start` with a script of `calls` tool turns and `max_steps`, measured.
    pub fn start(&self, db: &Path, calls: u32, max_steps: u32) -> Measured {
        procs::run(&mut self.start_command(db, calls, max_steps), Stdout::Keep)
    }

    pub fn start_command(&self, db: &Path, calls: u32, max_steps: u32) -> Command {
        let model = format!("script:{}", self.script(calls).display());
        let max_steps = max_steps.to_string();
        let task = self.task.display().to_string();
        let tools = self.tools.display().to_string();
        self.agentrun(
            db,
            &[
                "start",
                &task,
                "--tools",
                &tools,
                "--model",
                &model,
                "--max-steps",
                &max_steps,
                "--json",
            ],
        )
    }

    /// A run of exactly `n` tool steps that stops on its step budget (exit 4) with one
    /// scripted turn left, so `resume --max-steps n+1` finishes it in one more step.
    pub fn step_run(&self, db: &Path, n: u32) -> StepRun {
        self.take_stamps();
        let measured = self
            .start(db, n, n)
            .expect_code(4, &format!("start, {n} steps"));
        let run_id = measured.json()["run_id"]
            .as_str()
            .expect("run_id in the JSON outcome")
            .to_string();
        let stamps = self.take_stamps();
        assert_eq!(stamps.len(), n as usize, "one tool call per step");
        let intervals = stamps.windows(2).map(|w| w[1] - w[0]).collect();
        StepRun {
            measured,
            run_id,
            intervals,
        }
    }

    fn take_stamps(&self) -> Vec<u64> {
        match &self.tool {
            Tool::Command { .. } | Tool::Sandboxed { .. } => {
                let stamps = tool::read_stamps(&self.stamps);
                let _ = std::fs::remove_file(&self.stamps);
                stamps
            }
            Tool::Http(server) => server.take_stamps(),
        }
    }
}

fn tools_toml(tool: &Tool, stamps: &Path) -> String {
    let how = match tool {
        Tool::Command { idempotent } => format!(
            "command = {}\nidempotent = {idempotent}\n",
            json!(tool::argv(stamps))
        ),
        // The stamps file is in the project folder, which the tool may write.
        Tool::Sandboxed { network } => format!(
            "command = {}\nidempotent = true\nsandbox = \"workspace\"\nnetwork = {network}\n",
            json!(tool::argv(stamps))
        ),
        Tool::Http(server) => format!(
            "http = {{ method = \"GET\", url = \"http://127.0.0.1:{}/t?i={{i}}\" }}\nidempotent = true\n",
            server.port
        ),
    };
    // One attempt and a long timeout: a bench step must never be a retry.
    format!(
        "[defaults]\ntimeout = \"60s\"\nattempts = 1\n\n[tools.t]\n\
         description = \"benchmark tool\"\n\
         input_schema = {{ type = \"object\", properties = {{ i = {{ type = \"integer\" }} }}, required = [\"i\"] }}\n\
         {how}"
    )
}

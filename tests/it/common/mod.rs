//! Shared helpers for the end-to-end tests: a temporary project folder with its own
//! database, one-line writers for task files, tools.toml and scripts, and a runner for
//! the real `agentrun` binary that prints everything useful when an assertion fails.

#![allow(dead_code)]

pub mod peer;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub struct Project {
    pub dir: tempfile::TempDir,
    /// A PostgreSQL database (URL) instead of the project's SQLite file.
    pub pg: Option<String>,
}

/// Which backend a durability test runs against (issue 17): the same test bodies run
/// on SQLite always and on PostgreSQL when `AGENTRUN_TEST_PG` names a server.
#[derive(Debug, Clone)]
pub enum Db {
    Sqlite,
    /// The server's URL; each project gets a fresh schema of its own there.
    Pg(String),
}

/// The PostgreSQL server for the tests, from `AGENTRUN_TEST_PG`.
pub fn test_pg() -> Option<String> {
    std::env::var("AGENTRUN_TEST_PG")
        .ok()
        .filter(|v| !v.is_empty())
}

/// A fresh, empty schema on the server `url`, as a URL whose connections use it: every
/// project (and test) sees only its own runs, on one shared server.
pub fn fresh_pg_schema(url: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!(
        "t_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
        rand_suffix()
    );
    let mut c = postgres::Client::connect(url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("AGENTRUN_TEST_PG={url}: cannot connect: {e}"));
    c.batch_execute(&format!("CREATE SCHEMA {name}"))
        .expect("create schema");
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{name}")
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64)
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

/// `PATH` with the binary under test first, for shells that run `agentrun` by name.
pub fn path_with_bin() -> String {
    format!(
        "{}:{}",
        bin().parent().expect("bin dir").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Whether this kernel can enforce the default sandbox. Where it cannot, every
/// project's tools run with `sandbox = "off"` (its `.agentrun/config.toml` says so, as
/// a person on such a machine would), the sandbox's own tests skip, and one line says
/// so; CI (`AGENTRUN_TEST_REQUIRE_PEERS`) requires it.
pub fn can_sandbox() -> bool {
    static CAN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CAN.get_or_init(|| {
        let k = agentrun::config::preflight::Support::probe();
        let missing = agentrun::config::preflight::sandbox_missing(&Default::default(), k);
        if let Some(why) = &missing {
            assert!(
                std::env::var_os("AGENTRUN_TEST_REQUIRE_PEERS").is_none(),
                "AGENTRUN_TEST_REQUIRE_PEERS is set but this kernel cannot sandbox: {why}"
            );
            eprintln!("skipped: the sandbox (this kernel lacks {why}); tools run unsandboxed");
        }
        missing.is_none()
    })
}

impl Project {
    pub fn new() -> Project {
        let p = Project {
            dir: tempfile::tempdir().expect("tempdir"),
            pg: None,
        };
        if !can_sandbox() {
            p.write(".agentrun/config.toml", "sandbox = \"off\"\n");
        }
        p
    }

    /// A project whose database is on `db`.
    pub fn on(db: &Db) -> Project {
        let mut p = Project::new();
        p.pg = match db {
            Db::Sqlite => None,
            Db::Pg(url) => Some(fresh_pg_schema(url)),
        };
        p
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The `--db` value: the SQLite file, or the PostgreSQL URL. In a folder of its
    /// own inside the project, as `agentrun init` lays it out: beside tools.toml a
    /// sandboxed tool could write it, and `start` refuses that.
    pub fn db(&self) -> PathBuf {
        match &self.pg {
            Some(url) => PathBuf::from(url),
            None => self.path().join(".agentrun/runs.db"),
        }
    }

    /// Writes `bytes` where the database goes, creating its folder.
    pub fn write_db(&self, bytes: impl AsRef<[u8]>) {
        let db = self.db();
        std::fs::create_dir_all(db.parent().expect("db folder")).expect("db folder");
        std::fs::write(db, bytes).expect("write db");
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

// ---- Helpers for the recovery and provider end-to-end tests ----------------------------

/// `[defaults]` with short waits, so a retried call costs milliseconds. The exact delay
/// schedule is unit-tested with an injected clock; end to end we only need it bounded.
pub const FAST_DEFAULTS: &str = r#"[defaults]
timeout = "5s"
attempts = 3
backoff = "10ms"
max_backoff = "200ms"
"#;

impl Project {
    /// Writes tools.toml: [`FAST_DEFAULTS`] followed by `tools`.
    pub fn fast_tools(&self, tools: &str) -> PathBuf {
        self.write("tools.toml", &format!("{FAST_DEFAULTS}\n{tools}"))
    }

    /// `start task.md --json` with extra environment; returns the run and its
    /// `runs show --json` (printing everything when the run printed no JSON).
    pub fn start(&self, env: &[(&str, &str)]) -> (Run, Value) {
        let run = self.run_env(&["start", "task.md", "--json"], env);
        let id = run.json()["run_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no run_id\n{run}"))
            .to_string();
        let show = self.show(&id);
        (run, show)
    }

    /// Lines in a project file; 0 when it does not exist (the tool never ran).
    pub fn lines(&self, rel: &str) -> usize {
        std::fs::read_to_string(self.path().join(rel))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    /// Every byte of the database: the main file, its WAL and shared memory.
    pub fn db_bytes(&self) -> Vec<u8> {
        let name = self.db().file_name().expect("db name").to_os_string();
        let mut bytes = Vec::new();
        let dir = self.db().parent().expect("db folder").to_path_buf();
        for entry in std::fs::read_dir(&dir).expect("read the database folder") {
            let entry = entry.expect("dir entry");
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(&*name.to_string_lossy())
            {
                bytes.extend(std::fs::read(entry.path()).expect("read db file"));
            }
        }
        assert!(!bytes.is_empty(), "no database files in {dir:?}");
        bytes
    }
}

/// The trace events of one kind (`backoff`, `tool_attempt`, `fallback`, `model_retry`,
/// `model_fallback`, `note`) from `runs show --json`, in order.
pub fn events(show: &Value, kind: &str) -> Vec<Value> {
    show["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["event"] == kind)
        .cloned()
        .collect()
}

/// The tool result the model saw for `call_id`: its content and `is_error`.
pub fn tool_result(show: &Value, call_id: &str) -> (Value, bool) {
    let parts: Vec<&Value> = show["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .flat_map(|m| m["content"].as_array().expect("content").iter())
        .filter(|p| p["type"] == "tool_result" && p["call_id"] == call_id)
        .collect();
    assert_eq!(parts.len(), 1, "one result for {call_id}: {show:#}");
    (
        parts[0]["content"].clone(),
        parts[0]["is_error"].as_bool().expect("is_error"),
    )
}

/// The journal row (`tool_calls[]`) of `call_id`.
pub fn journal(show: &Value, call_id: &str) -> Value {
    let rows: Vec<&Value> = show["tool_calls"]
        .as_array()
        .expect("tool_calls")
        .iter()
        .filter(|c| c["call_id"] == call_id)
        .collect();
    assert_eq!(rows.len(), 1, "one journal row for {call_id}: {show:#}");
    rows[0].clone()
}

/// A current-thread tokio runtime for driving wiremock from a plain `#[test]` (the mock
/// server serves from its own thread, so the binary can run with std::process while
/// this runtime sits idle).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Runs one of the store's async writes (the step path's) to its end, as the loop
/// awaits it.
pub fn wait<T>(f: impl std::future::Future<Output = T>) -> T {
    runtime().block_on(f)
}

/// A run whose holder was killed (by its own tool) in step 1. Resumed, the tool blocks
/// while a `hold` file exists, so a test can keep a resumer busy for as long as it needs.
pub fn blocked_run() -> (Project, String) {
    blocked_run_on(&Db::Sqlite)
}

/// [`blocked_run`] on a chosen backend.
pub fn blocked_run_on(db: &Db) -> (Project, String) {
    let p = Project::on(db);
    p.script(
        "slow.sh",
        "#!/bin/sh\ncat > /dev/null\nif [ -f die ]; then rm -f die; kill -9 \"$PPID\"; exit 0; fi\nwhile [ -f hold ]; do sleep 0.02; done\necho '\"ok\"'\n",
    );
    p.write(
        "tools.toml",
        "[tools.slow]\ndescription = \"slow\"\ninput_schema = { type = \"object\" }\ncommand = [\"sh\", \"slow.sh\"]\nidempotent = true\n\
         # The tool kills agentrun (its parent) to stand for a crash: a sandboxed tool may not.\n\
         sandbox = \"off\"\n",
    );
    p.model_script(serde_json::json!([{"tool_calls": [{"name": "slow"}]}, {"text": "done"}]));
    p.task("", "Be slow.");
    p.write("die", "");
    assert_eq!(p.run(&["start", "task.md"]).code, -1, "killed by its tool");
    let id = p.only_run();
    (p, id)
}

/// The content of every tool result the model saw, in transcript order.
pub fn tool_results(show: &Value) -> Vec<Value> {
    show["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["content"].as_array().expect("content").clone())
        .filter(|p| p["type"] == "tool_result")
        .map(|p| p["content"].clone())
        .collect()
}

/// The runner's notes to the model after the opening prompt (nudges, withdrawn tools,
/// the degraded-answer request): (step, text).
pub fn notes(show: &Value) -> Vec<(u64, String)> {
    show["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "system" && m["step"].as_u64() > Some(0))
        .map(|m| {
            let text = m["content"][0]["text"].as_str().unwrap_or_default();
            (m["step"].as_u64().unwrap_or_default(), text.to_string())
        })
        .collect()
}

/// A wiremock matcher for model APIs: the request's transcript pairs every tool call
/// with exactly one result, and every result with a call before it (OpenAI
/// `tool_calls`/`tool_call_id`, Anthropic `tool_use`/`tool_result`). A request that
/// breaks it matches no mock, so the run fails and the test with it.
pub fn paired() -> Paired {
    Paired
}

pub struct Paired;

impl wiremock::Match for Paired {
    fn matches(&self, request: &wiremock::Request) -> bool {
        let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
            return true;
        };
        let mut calls: Vec<(String, u32)> = Vec::new();
        let ok = visit(&body, &mut calls) && calls.iter().all(|(_, n)| *n == 1);
        if !ok {
            eprintln!("model request breaks the tool call/result pairing: {body}");
        }
        ok
    }
}

/// Walks a request body in order, counting results per call; false on a result
/// without an earlier call, or a call id seen twice.
fn visit(v: &Value, calls: &mut Vec<(String, u32)>) -> bool {
    match v {
        Value::Array(items) => items.iter().all(|i| visit(i, calls)),
        Value::Object(o) => {
            let call = match (o.get("type").and_then(Value::as_str), o.get("id")) {
                (Some("tool_use") | Some("function"), Some(Value::String(id))) => Some(id),
                _ => None,
            };
            if let Some(id) = call {
                if calls.iter().any(|(c, _)| c == id) {
                    return false;
                }
                calls.push((id.clone(), 0));
            }
            let result = o
                .get("tool_call_id")
                .or_else(|| o.get("tool_use_id"))
                .and_then(Value::as_str);
            if let Some(id) = result {
                match calls.iter_mut().find(|(c, _)| c == id) {
                    Some((_, n)) => *n += 1,
                    None => return false,
                }
            }
            o.values().all(|x| visit(x, calls))
        }
        _ => true,
    }
}

/// The smallest stdio MCP server (Python's standard library only): answers
/// `initialize`, lists one tool (`ping`) and answers its calls with "pong".
pub const PING_MCP_SERVER: &str = r#"import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "tiny", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "ping", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "pong"}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"#;

/// A new run on `store`, leased to this process, with a system and a user message.
pub fn leased_run(store: &agentrun::store::Store) -> agentrun::store::Lease {
    use agentrun::model::{Message, Role};
    let messages = [
        Message::text(Role::System, "sys"),
        Message::text(Role::User, "task"),
    ];
    store
        .create_run(&agentrun::store::NewRun {
            id: agentrun::store::RunId::generate(),
            task: "task",
            task_path: "task.md",
            snapshot: "{}",
            scripts: &Default::default(),
            max_steps: 10,
            max_tokens: 1000,
            messages: &messages,
            state: "{}",
        })
        .expect("create run")
}

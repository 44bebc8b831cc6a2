//! `agentrun serve` (issue 24): the console over real HTTP against a real binary and
//! database (`http.rs`), and in a real headless Chromium through WebDriver
//! (`browser.rs`, skipped with one line when Chromium or chromedriver is missing).

mod browser;
mod http;
mod notify_wait;
mod sessions;

use crate::common::Project;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The access token the tests' consoles use.
pub const TOKEN: &str = "test-token-0123456789abcdef";

/// A running `agentrun serve` on a free loopback port; killed when dropped.
pub struct Console {
    child: Child,
    pub base: String,
    /// Its first line on stderr (the address, and the login link when it printed one).
    pub first: String,
    /// Its later lines on stderr.
    pub lines: std::sync::mpsc::Receiver<String>,
}

impl Console {
    /// With [`TOKEN`] as `AGENTRUN_SERVE_TOKEN`.
    pub fn start(p: &Project) -> Console {
        Console::start_with(p, Some(TOKEN))
    }

    /// With `token` as `AGENTRUN_SERVE_TOKEN`, or none (serve prints login links).
    pub fn start_with(p: &Project, token: Option<&str>) -> Console {
        Console::start_args(p, token, &[])
    }

    /// As [`Console::start_with`], with more arguments to `serve`.
    pub fn start_args(p: &Project, token: Option<&str>, more: &[&str]) -> Console {
        let mut args = vec!["serve", "--addr", "127.0.0.1:0"];
        args.extend_from_slice(more);
        let mut cmd = p.command(&args);
        match token {
            Some(t) => cmd.env("AGENTRUN_SERVE_TOKEN", t),
            None => cmd.env_remove("AGENTRUN_SERVE_TOKEN"),
        };
        let mut child = cmd
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agentrun serve");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let first = lines.next().expect("a line").expect("read stderr");
        // "agentrun: console at http://127.0.0.1:PORT/ (…)"
        let base = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .trim_end_matches('/')
            .to_string();
        // Keep draining stderr so the server never blocks on a full pipe.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Console {
            child,
            base,
            first,
            lines: rx,
        }
    }

    /// The next line on stderr that holds a login link: its path (`/login?code=…`).
    pub fn next_link(&self) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .expect("serve printed a login link");
            if let Some(path) = link_in(&line) {
                return path;
            }
        }
    }
}

/// The path of the login link in a line serve printed, if any.
pub fn link_in(line: &str) -> Option<String> {
    line.split_whitespace().find_map(|w| {
        w.split_once("/login?code=")
            .map(|(_, c)| format!("/login?code={c}"))
    })
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tool that answers `{"sent": ARGS}`.
const SEND_TOOL: &str = "#!/bin/sh\nprintf '{\"sent\": %s}\\n' \"$(cat)\"\n";

/// A run paused on `send_email` (approval always), whose next turn answers "sent".
pub fn paused_for_approval() -> (Project, String) {
    let p = Project::new();
    p.script("send.sh", SEND_TOOL);
    p.write(
        "tools.toml",
        "[tools.send_email]\ndescription = \"Send an email\"\n\
         input_schema = { type = \"object\", properties = { to = { type = \"string\" } }, required = [\"to\"], additionalProperties = false }\n\
         command = [\"sh\", \"send.sh\"]\napproval = \"always\"\n",
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "send_email", "args": {"to": "dana@example.com"}}], "usage": {"input": 10, "output": 2}},
        {"text": "The email was sent.", "usage": {"input": 10, "output": 2}}
    ]));
    p.task("max_steps = 10", "Tell Dana the refund was approved.");
    p.run(&["start", "task.md"]).expect_code(3);
    let id = p.only_run();
    (p, id)
}

/// Markup that would run script if a page rendered it as HTML.
pub const XSS_TOOL: &str = "<script>document.title='pwned-tool'</script><img src=x onerror=\"document.title='pwned-img'\">";
pub const XSS_QUESTION: &str = "Which one? <img src=x onerror=\"document.title='pwned-ask'\"><script>document.title='pwned-ask2'</script>";

/// A run whose tool returned [`XSS_TOOL`] and which then asked [`XSS_QUESTION`].
pub fn hostile_run() -> (Project, String) {
    let p = Project::new();
    p.script(
        "evil.sh",
        &format!(
            "#!/bin/sh\ncat >/dev/null\nprintf '%s' '{}'\n",
            XSS_TOOL.replace('\'', "'\\''")
        ),
    );
    p.write(
        "tools.toml",
        "[tools.lookup]\ndescription = \"Look up\"\ninput_schema = { type = \"object\" }\ncommand = [\"sh\", \"evil.sh\"]\n",
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "lookup", "args": {}}], "usage": {"input": 10, "output": 2}},
        {"tool_calls": [{"name": "ask_user", "args": {"question": XSS_QUESTION}}], "usage": {"input": 10, "output": 2}},
        {"text": "ok", "usage": {"input": 10, "output": 2}}
    ]));
    p.task("max_steps = 10", "Look it up.");
    p.run(&["start", "task.md"]).expect_code(3);
    let id = p.only_run();
    (p, id)
}

/// Polls `runs show --json` until the run has `status` (at most 20 s).
pub fn wait_status(p: &Project, id: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let show = p.show(id);
        if show["status"] == status {
            return show;
        }
        assert!(
            Instant::now() < deadline,
            "run {id} never became {status}: {}",
            show["status"]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The open escalations, as `escalations list --json` gives them.
pub fn open_escalations(p: &Project) -> Vec<Value> {
    p.run(&["escalations", "list", "--json"])
        .expect_code(0)
        .json()
        .as_array()
        .expect("array")
        .clone()
}

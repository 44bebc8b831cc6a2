//! Issue 22 — MCP servers held to the same trust rules as command tools: an answer
//! nested too deeply fails at once, servers start only for tasks that use them and
//! never outlive the run, and literal credentials in their config are warned about and
//! never stored. Each test fails on the code before its fix.

use crate::common::{Project, tool_result};
use crate::trust_again::{alive, eventually};
use serde_json::{Value, json};

/// A stdio MCP server small enough to read (Python's standard library only): answers
/// `initialize`, lists `ping`, `deep` and `wait`, answers `ping` with "pong" and `deep`
/// with a result nested 125 levels deep, and never answers `wait` (it creates `waiting`). It adds its pid to the file named by its first argument
/// (`server.pid` when none) as it starts.
const SERVER: &str = r#"import json, os, sys
with open(sys.argv[1] if len(sys.argv) > 1 else "server.pid", "a") as f:
    f.write(f"{os.getpid()}\n")
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "tiny", "version": "1"}}
    elif method == "tools/list":
        names = ("ping", "deep", "wait")
        tools = [{"name": n, "inputSchema": {"type": "object"}} for n in names]
        result = {"tools": tools}
    elif method == "tools/call" and msg["params"]["name"] == "deep":
        nested = 1
        for _ in range(125):
            nested = [nested]
        result = {"content": [{"type": "text", "text": "deep"}], "structuredContent": {"x": nested}}
    elif method == "tools/call" and msg["params"]["name"] == "wait":
        open("waiting", "w").close()
        continue  # never answered
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "pong"}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"#;

fn project(tools: &str) -> Project {
    let p = Project::new();
    p.write("server.py", SERVER);
    p.fast_tools(tools);
    p
}

/// Before: the SDK dropped the unparseable line and the call waited out its timeout,
/// failing `timeout`; now it fails `tool_bug` at once, naming the depth.
#[test]
fn a_result_nested_125_levels_deep_fails_tool_bug_at_once() {
    let p = project("[mcp.tiny]\ncommand = [\"python3\", \"server.py\"]\ntimeout = \"20s\"\n");
    p.model_script(json!([
        {"tool_calls": [{"name": "tiny__deep", "args": {}}]},
        {"tool_calls": [{"name": "tiny__ping", "args": {}}]},
        {"text": "done"}
    ]));
    p.task("", "Go deep.");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error, "{content}");
    assert_eq!(content["error"], "tool_bug", "{content}");
    let message = content["message"].as_str().unwrap_or_default();
    assert!(message.contains("nested 1"), "{message}");
    // The server is still usable.
    assert_eq!(tool_result(&show, "call_1_0"), (json!("pong"), false));
}

/// Whether a server wrote its start marker (`NAME.pid`).
fn started(p: &Project, name: &str) -> bool {
    p.path().join(format!("{name}.pid")).exists()
}

/// Two servers (`one`, `two`), a command tool, and a sub-agent whose task may call
/// `two__ping`; each server marks its start in `NAME.pid`.
fn two_servers() -> Project {
    let p = project(
        "[mcp.one]\ncommand = [\"python3\", \"server.py\", \"one.pid\"]\n\n\
         [mcp.two]\ncommand = [\"python3\", \"server.py\", \"two.pid\"]\n\n\
         [tools.echo]\ndescription = \"echo\"\ninput_schema = { type = \"object\" }\ncommand = [\"cat\"]\n\n\
         [agents.helper]\ntask = \"helper.md\"\ndescription = \"helps\"\n",
    );
    p.write(
        "helper.md",
        "+++\nmodel = \"script:script.json\"\ntools = [\"two__ping\"]\n+++\nHelp.\n",
    );
    p.model_script(json!([{"text": "done"}]));
    p
}

/// Before: every server was started (and listed) at `start`, even for `tools = []`.
/// A server starts only when the task's `tools` list can reach one of its tools:
/// named (`SERVER__TOOL`, `SERVER__*`), or through a sub-agent the task may call.
#[test]
fn a_server_starts_only_for_a_task_that_can_use_its_tools() {
    let cases: [(&str, bool, bool); 5] = [
        ("tools = []", false, false),
        ("tools = [\"echo\"]", false, false),
        ("tools = [\"one__ping\"]", true, false),
        ("tools = [\"one__*\", \"helper\"]", true, true),
        ("", true, true), // no list: every tool
    ];
    for (front, one, two) in cases {
        let p = two_servers();
        p.task(front, "Answer.");
        let (run, show) = p.start(&[]);
        run.expect_code(0);
        assert_eq!(show["status"], "completed", "{front}: {run}");
        assert_eq!(
            (started(&p, "one"), started(&p, "two")),
            (one, two),
            "{front}: which servers started"
        );
    }
}

/// Put before [`SERVER`]: before serving, the server starts three `sleep 600` helpers —
/// one in its process group, one in a session of its own (`setsid`), one double-forked
/// daemon in a session of its own whose parent is gone at once — and writes their pids
/// and its own to `helpers.pid`. It ignores SIGTERM and SIGHUP, and EOF (after its input
/// ends it sleeps on).
const LEAKY: &str = r#"import os, signal, subprocess, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
pids = [subprocess.Popen(["sleep", "600"]).pid]
pids.append(subprocess.Popen(["sleep", "600"], start_new_session=True).pid)
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    pid = os.fork()
    if pid == 0:
        os.execvp("sleep", ["sleep", "600"])
    os.write(w, f"{pid}\n".encode())
    os._exit(0)
os.wait()
pids.append(int(os.read(r, 64)))
with open("helpers.tmp", "w") as f:
    f.write(" ".join(str(p) for p in pids + [os.getpid()]) + "\n")
os.rename("helpers.tmp", "helpers.pid")
"#;

/// A project whose `leaky` server is [`LEAKY`] + [`SERVER`].
fn leaky(turns: Value) -> Project {
    let p = Project::new();
    p.write(
        "server.py",
        &format!("{LEAKY}{SERVER}\nwhile True:\n    time.sleep(60)\n"),
    );
    p.fast_tools("[mcp.leaky]\ncommand = [\"python3\", \"server.py\"]\n");
    p.model_script(turns);
    p.task("", "Go.");
    p
}

/// The server's helpers and the server itself, once it has written them down.
fn helpers(p: &Project) -> Vec<i32> {
    let file = p.path().join("helpers.pid");
    assert!(eventually(|| file.exists()), "the server never started");
    let text = std::fs::read_to_string(file).unwrap();
    text.split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect()
}

/// Kills what is still alive (the test cleans up what it started), and says which.
fn survivors(pids: &[i32]) -> Vec<i32> {
    let left: Vec<i32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    for &pid in &left {
        // SAFETY: kill(2); these are the test's own processes.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    left
}

/// Before: only the server's process group was killed when the run ended, so a helper
/// in a session of its own and a double-forked daemon outlived the run.
#[test]
fn everything_a_stdio_server_started_ends_with_the_run() {
    let p = leaky(json!([
        {"tool_calls": [{"name": "leaky__ping", "args": {}}]},
        {"text": "done"}
    ]));
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    assert_eq!(tool_result(&show, "call_0_0"), (json!("pong"), false));
    let pids = helpers(&p);
    let gone = eventually(|| pids.iter().all(|&p| !alive(p)));
    assert!(gone, "outlived the run: {:?} of {pids:?}", survivors(&pids));
}

/// Before: agentrun killed with -9 left the server's helpers running (and, before the
/// death signal, the server itself).
#[test]
fn everything_a_stdio_server_started_ends_when_agentrun_is_killed_9() {
    let p = leaky(json!([
        {"tool_calls": [{"name": "leaky__wait", "args": {}}]},
        {"text": "never reached"}
    ]));
    let mut agent = p
        .command(&["start", "task.md", "--json"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn agentrun");
    let pids = helpers(&p);
    assert!(eventually(|| p.path().join("waiting").exists()));
    assert!(pids.iter().all(|&p| alive(p)));
    agent.kill().expect("kill -9 agentrun");
    agent.wait().expect("reap agentrun");
    let gone = eventually(|| pids.iter().all(|&p| !alive(p)));
    assert!(
        gone,
        "outlived agentrun: {:?} of {pids:?}",
        survivors(&pids)
    );
}

/// A streamable-HTTP MCP server (JSON answers, no event stream) whose one tool, `whoami`,
/// answers with the `Authorization` header the call came with. Prints its port.
const ECHO_HTTP: &str = r#"import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        self.send_response(405); self.send_header("Content-Length", "0"); self.end_headers()
    do_DELETE = do_GET
    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "id" not in msg:
            self.send_response(202); self.send_header("Content-Length", "0"); self.end_headers()
            return
        method = msg["method"]
        if method == "initialize":
            result = {"protocolVersion": msg["params"]["protocolVersion"],
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "echo", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [{"name": "whoami", "inputSchema": {"type": "object"}}]}
        else:
            said = self.headers.get("Authorization", "none")
            result = {"content": [{"type": "text", "text": f"you sent {said}"}]}
        body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// [`ECHO_HTTP`], stopped on drop.
struct EchoServer(std::process::Child, u16);

impl EchoServer {
    fn start() -> EchoServer {
        use std::io::BufRead;
        let mut child = std::process::Command::new("python3")
            .args(["-c", ECHO_HTTP])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
        let port = line.trim().parse().expect("the server's port");
        EchoServer(child, port)
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Before: no warning for credentials written into an MCP server's section, and the
/// `Basic` value sent for a URL's `user:password@` was stored as the server echoed it.
/// Now `start` warns once per field, naming server and field but never the value, and
/// the userinfo, its password and its `Basic` form are `[redacted]` in what the run
/// keeps and shows.
#[test]
fn literal_mcp_credentials_are_warned_about_and_url_userinfo_never_kept() {
    let echo = EchoServer::start();
    let p = project(&format!(
        "[mcp.web]\nurl = \"http://alice:s3cret-pass@127.0.0.1:{}/mcp\"\n\
         headers = {{ X-Api-Key = \"k-12345678\" }}\n\n\
         [mcp.tiny]\ncommand = [\"python3\", \"server.py\", \"tiny.pid\", \"--token\", \"tok-5678abcd\"]\n\
         set = {{ TINY_TOKEN = \"set-9876wxyz\" }}\n",
        echo.1
    ));
    p.model_script(json!([
        {"tool_calls": [{"name": "web__whoami", "args": {}}]},
        {"text": "done"}
    ]));
    p.task("tools = [\"web__whoami\"]", "Who am I?");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let warnings: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("agentrun: warning:"))
        .collect();
    let mut said: Vec<String> = warnings
        .iter()
        .map(|l| l.split(" holds").next().unwrap_or_default().to_string())
        .collect();
    said.sort();
    assert_eq!(
        said,
        [
            "agentrun: warning: tools.toml: mcp server `tiny`: command[4]",
            "agentrun: warning: tools.toml: mcp server `tiny`: set.TINY_TOKEN",
            "agentrun: warning: tools.toml: mcp server `web`: headers.X-Api-Key",
            "agentrun: warning: tools.toml: mcp server `web`: url",
        ],
        "{run}"
    );
    let basic = "YWxpY2U6czNjcmV0LXBhc3M="; // base64("alice:s3cret-pass")
    for secret in ["s3cret-pass", "k-12345678", "tok-5678abcd", "set-9876wxyz"] {
        assert!(!run.stderr.contains(secret), "{secret} printed:\n{run}");
    }
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(!is_error, "{content}");
    assert_eq!(content, json!("you sent Basic [redacted]"));
    let id = show["id"].as_str().expect("run id");
    let export = p.run(&["runs", "export", id]).expect_code(0).stdout.clone();
    let human = p.run(&["runs", "show", id]).expect_code(0).stdout.clone();
    for text in [&export, &human, &show.to_string()] {
        assert!(!text.contains(basic), "the Basic value is kept:\n{text}");
        assert!(text.contains("you sent Basic [redacted]"), "{text}");
    }
}

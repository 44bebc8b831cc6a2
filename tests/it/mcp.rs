//! MCP tool servers end to end (issue 16), against real servers nobody here wrote: the
//! reference `@modelcontextprotocol/server-everything` from npm (stdio and streamable
//! HTTP) and `mcp-server-time` from PyPI. `.ci/run` installs both; where a server is not
//! installed its tests skip with one line naming the install command
//! ([`crate::common::peer`]), whatever else the machine has.
//!
//! Faults are injected by `proxy.py`, a stdio pass-through placed between agentrun and
//! the server: on the first `tools/call` agentrun sends, it kills the server (its own
//! process group) or agentrun itself before passing the call on. The kill therefore
//! lands after agentrun sent the request and before any answer, whatever the machine's
//! speed.

use crate::common::{Project, Run, journal, peer, tool_result};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// Forwards stdin to the server it starts (argv after the victim); the server writes
/// straight to our stdout. On the first `tools/call`, before forwarding it (so the
/// server can never answer first), kills `server` (the whole process group: this proxy
/// and the server) or `agentrun` (our supervisor's parent) — once per project,
/// remembered in `fired`.
const PROXY: &str = r#"import os, signal, subprocess, sys
victim = sys.argv[1]
server = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE)
fired = os.path.exists("fired")
while True:
    line = sys.stdin.buffer.readline()
    if not line:
        break
    if not fired and b'"tools/call"' in line:
        fired = True
        open("fired", "w").close()
        if victim == "server":
            os.killpg(os.getpgid(0), signal.SIGKILL)
        elif victim == "agentrun":
            # Our parent is the server's supervisor; agentrun is its parent.
            with open(f"/proc/{os.getppid()}/stat") as f:
                agentrun = int(f.read().rsplit(")", 1)[1].split()[1])
            os.kill(agentrun, signal.SIGKILL)
    server.stdin.write(line)
    server.stdin.flush()
server.stdin.close()
server.wait()
"#;

/// The reference server's program: `.ci/run` installs it under `.mcp-peers/npm`; a
/// global `npm install -g` works too. `None`: skipped (said once), also where Node.js
/// is installed but the server is not (issue 27).
fn everything() -> Option<PathBuf> {
    peer::available(
        "MCP server-everything",
        "`npm install --prefix .mcp-peers/npm @modelcontextprotocol/server-everything`, or run .ci/run",
        || {
            peer::on_path("node")?; // the server is a Node.js program
            let local = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join(".mcp-peers/npm/node_modules/.bin/mcp-server-everything");
            if local.exists() {
                return Some(local);
            }
            peer::on_path("mcp-server-everything")
        },
    )
}

/// Whether `mcp-server-time` (PyPI) can be imported; `false`: skipped (said once).
fn time_server() -> bool {
    peer::available(
        "MCP mcp-server-time",
        "`python3 -m pip install mcp-server-time`, or run .ci/run",
        || {
            Command::new("python3")
                .args(["-c", "import mcp_server_time"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
                .then_some(())
        },
    )
    .is_some()
}

/// A TOML string literal (paths may hold anything).
fn lit(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// A project with server-everything over stdio as `[mcp.everything]`, optionally
/// behind the fault proxy (`victim`), plus `extra` keys for the server section.
fn project(victim: Option<&str>, extra: &str) -> Option<Project> {
    let server = everything()?;
    let p = Project::new();
    let server = lit(&server.display().to_string());
    let command = match victim {
        Some(v) => {
            p.write("proxy.py", PROXY);
            format!("[\"python3\", \"proxy.py\", \"{v}\", {server}, \"stdio\"]")
        }
        None => format!("[{server}, \"stdio\"]"),
    };
    p.write(
        "tools.toml",
        &format!(
            "[defaults]\ntimeout = \"20s\"\nattempts = 3\nbackoff = \"10ms\"\n\n\
             [mcp.everything]\ncommand = {command}\n{extra}\n"
        ),
    );
    Some(p)
}

/// One turn calling `tool` with `args`, then an answer.
fn one_call(p: &Project, tool: &str, args: Value) {
    p.model_script(json!([
        {"tool_calls": [{"name": tool, "args": args}]},
        {"text": "done"}
    ]));
    p.task("", "Use the tool.");
}

/// The escalation a paused run printed in its `--json`.
fn escalation_id(run: &Run) -> String {
    match &run.json()["escalation_id"] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => panic!("no escalation id ({other})\n{run}"),
    }
}

fn start(p: &Project) -> (Run, Value) {
    p.start(&[])
}

#[test]
fn discovery_names_tools_server_tool_and_a_call_returns_the_servers_answer() {
    let Some(p) = project(None, "") else { return };
    one_call(&p, "everything__echo", json!({"message": "hello"}));
    let (run, show) = start(&p);
    run.expect_code(0);
    assert_eq!(
        tool_result(&show, "call_0_0"),
        (json!("Echo: hello"), false)
    );
    let check = p.run(&["tools", "check", "--json"]).expect_code(0).json();
    let tools = check["tools"].as_array().expect("tools");
    for name in ["everything__echo", "everything__get-sum"] {
        assert!(tools.contains(&json!(name)), "{name} not in {check}");
    }
    // The discovered list is part of the run's snapshot: runs show names the server.
    let human = p.run(&["runs", "show", &p.only_run()]);
    assert!(human.stdout.contains("everything__echo"), "{human}");
}

#[test]
fn a_stdio_server_gets_the_command_tool_environment_and_its_secrets_are_redacted() {
    let Some(p) = project(None, "env = [\"SHOP_REGION\", \"SHOP_API_TOKEN\"]") else {
        return;
    };
    one_call(&p, "everything__get-env", json!({}));
    let env = [
        ("SHOP_REGION", "eu-west"),
        ("SHOP_API_TOKEN", "tok-5f2a9c81d3"),
        ("UNLISTED_SETTING", "should-not-pass"),
        ("OTHER_PASSWORD", "hunter2-hunter2"),
    ];
    let (run, show) = p.start(&env);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(!is_error, "{content}");
    // Listed names pass; a listed secret's value never reaches the journal or model.
    assert_eq!(content["SHOP_REGION"], "eu-west", "{content}");
    assert_eq!(content["SHOP_API_TOKEN"], "[redacted]", "{content}");
    for absent in ["UNLISTED_SETTING", "OTHER_PASSWORD"] {
        assert!(content.get(absent).is_none(), "{absent} leaked: {content}");
    }
    assert!(!String::from_utf8_lossy(&p.db_bytes()).contains("tok-5f2a9c81d3"));
}

#[test]
fn a_server_that_does_not_start_stops_the_run_before_anything_is_written() {
    // No Node.js needed: this "server" exits at once, before any handshake.
    let p = Project::new();
    p.write(
        "tools.toml",
        "[mcp.broken]\ncommand = [\"sh\", \"-c\", \"echo not an MCP server >&2; exit 3\"]\n",
    );
    one_call(&p, "broken__anything", json!({}));
    let run = p.run(&["start", "task.md"]);
    run.expect_code(2);
    assert!(run.stderr.contains("mcp server `broken`"), "{run}");
    assert!(
        run.stderr.contains("not an MCP server"),
        "server stderr is shown\n{run}"
    );
    assert!(!p.db().exists(), "nothing was written");
    let check = p.run(&["tools", "check"]);
    check.expect_code(2);
    assert!(
        check.stderr.contains("mcp server `broken`: cannot start"),
        "{check}"
    );
    // Issue 27: the server's stderr was printed twice in each message.
    for out in [&run, &check] {
        assert_eq!(
            out.stderr
                .matches("(server stderr: not an MCP server)")
                .count(),
            1,
            "{out}"
        );
    }
}

#[test]
fn a_task_may_offer_every_tool_of_a_server_with_server_star() {
    let Some(p) = project(None, "tools = [\"echo\", \"get-sum\"]") else {
        return;
    };
    p.model_script(json!([
        {"tool_calls": [{"name": "everything__get-sum", "args": {"a": 2, "b": 3}}]},
        {"text": "5"}
    ]));
    p.task("tools = [\"everything__*\"]", "Add.");
    let (run, show) = start(&p);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(!is_error && content.to_string().contains('5'), "{content}");
}

#[test]
fn arguments_that_fail_the_discovered_schema_are_malformed_and_never_sent() {
    let Some(p) = project(Some("server"), "") else {
        return;
    };
    // Were it sent, the proxy would kill the server on this call.
    one_call(&p, "everything__echo", json!({"msg": "no message field"}));
    let (run, show) = start(&p);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(content["error"], "schema_violation", "{content}");
    assert_eq!(content["attempts"], 0);
    assert!(
        !p.path().join("fired").exists(),
        "the call reached the server"
    );
}

#[test]
fn a_server_killed_mid_call_is_restarted_and_an_idempotent_call_retried() {
    let Some(p) = project(Some("server"), "idempotent = [\"echo\"]") else {
        return;
    };
    one_call(&p, "everything__echo", json!({"message": "again"}));
    let (run, show) = start(&p);
    run.expect_code(0);
    assert!(
        p.path().join("fired").exists(),
        "the server was never killed"
    );
    assert_eq!(
        tool_result(&show, "call_0_0"),
        (json!("Echo: again"), false)
    );
    assert_eq!(journal(&show, "call_0_0")["attempts"], 2, "{show:#}");
    let attempts = crate::common::events(&show, "tool_attempt");
    assert_eq!(attempts[0]["error"], "unavailable", "{attempts:#?}");
    let notes = crate::common::events(&show, "note");
    assert!(
        notes.iter().any(|n| n["kind"] == "mcp_server_restarted"
            && n["message"]
                .as_str()
                .unwrap_or_default()
                .contains("MCP server everything")),
        "{notes:#?}"
    );
}

#[test]
fn a_server_killed_mid_call_leaves_a_non_idempotent_call_outcome_unknown() {
    let Some(p) = project(Some("server"), "on_unknown = \"tell_model\"") else {
        return;
    };
    p.model_script(json!([
        {"tool_calls": [{"name": "everything__echo", "args": {"message": "once"}}]},
        {"tool_calls": [{"name": "everything__echo", "args": {"message": "after restart"}}]},
        {"text": "done"}
    ]));
    p.task("", "Echo.");
    let (run, show) = start(&p);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(content["error"], "outcome_unknown", "{content}");
    assert_eq!(content["attempts"], 1, "not retried: {content}");
    // The next call finds the server started again.
    assert_eq!(
        tool_result(&show, "call_1_0"),
        (json!("Echo: after restart"), false)
    );
}

#[test]
fn by_default_a_lost_non_idempotent_mcp_call_escalates_for_a_person() {
    let Some(p) = project(Some("server"), "") else {
        return;
    };
    one_call(&p, "everything__echo", json!({"message": "once"}));
    let run = p.run(&["start", "task.md", "--json"]);
    run.expect_code(3);
    let list = p
        .run(&["escalations", "list", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(list[0]["kind"], "outcome_unknown", "{list}");
}

#[test]
fn a_tool_error_from_the_server_is_the_tools_error() {
    if !time_server() {
        return;
    }
    let p = Project::new();
    p.write(
        "tools.toml",
        "[mcp.time]\ncommand = [\"python3\", \"-m\", \"mcp_server_time\", \"--local-timezone\", \"UTC\"]\nidempotent = [\"get_current_time\"]\n",
    );
    p.model_script(json!([
        {"tool_calls": [
            {"name": "time__get_current_time", "args": {"timezone": "Mars/Olympus_Mons"}},
            {"name": "time__get_current_time", "args": {"timezone": "Asia/Tokyo"}}
        ]},
        {"text": "done"}
    ]));
    p.task("", "What time is it?");
    let (run, show) = start(&p);
    run.expect_code(0);
    let (err, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error, "{err}");
    assert_eq!(err["class"], "permanent", "{err}");
    assert_eq!(
        err["attempts"], 1,
        "a tool's own error is not retried: {err}"
    );
    assert!(
        err["message"].as_str().unwrap_or_default().contains("Mars"),
        "{err}"
    );
    let (ok, is_error) = tool_result(&show, "call_0_1");
    assert!(!is_error && ok["timezone"] == "Asia/Tokyo", "{ok}");
}

#[test]
fn a_call_over_streamable_http() {
    let Some(server) = everything() else { return };
    let http = HttpServer::start(&server);
    let p = Project::new();
    p.write(
        "tools.toml",
        &format!(
            "[mcp.ev]\nurl = \"http://127.0.0.1:{}/mcp\"\nheaders = {{ X-Trace = \"agentrun-${{USER_TAG}}\" }}\ntools = [\"echo\"]\n",
            http.port
        ),
    );
    one_call(&p, "ev__echo", json!({"message": "over http"}));
    let (run, show) = p.start(&[("USER_TAG", "t1")]);
    run.expect_code(0);
    assert_eq!(
        tool_result(&show, "call_0_0"),
        (json!("Echo: over http"), false)
    );
    // `${VAR}` header values are read at connect time and never stored.
    assert!(!String::from_utf8_lossy(&p.db_bytes()).contains("agentrun-t1"));
}

#[test]
fn an_mcp_tool_waits_for_approval_and_runs_once_approved() {
    let Some(p) = project(None, "approval = { \"echo\" = \"always\" }") else {
        return;
    };
    one_call(&p, "everything__echo", json!({"message": "approved"}));
    let run = p.run(&["start", "task.md", "--json"]);
    run.expect_code(3);
    let id = escalation_id(&run);
    p.run(&["escalations", "resolve", &id, "--approve"])
        .expect_code(0);
    let run_id = p.only_run();
    p.run(&["resume", &run_id]).expect_code(0);
    assert_eq!(
        tool_result(&p.show(&run_id), "call_0_0"),
        (json!("Echo: approved"), false)
    );
}

#[test]
fn a_resumed_run_is_told_clearly_when_the_server_no_longer_offers_a_tool() {
    let Some(server) = everything() else { return };
    if !time_server() {
        return;
    }
    let p = Project::new();
    // Which server answers is read from a file, so the test can swap it between runs.
    p.write("server.txt", &format!("{} stdio", server.display()));
    p.write(
        "tools.toml",
        "[mcp.everything]\ncommand = [\"sh\", \"-c\", \"exec $(cat server.txt)\"]\napproval = { \"echo\" = \"always\" }\n",
    );
    one_call(&p, "everything__echo", json!({"message": "hi"}));
    let run = p.run(&["start", "task.md", "--json"]);
    run.expect_code(3);
    let id = escalation_id(&run);
    p.write(
        "server.txt",
        "python3 -m mcp_server_time --local-timezone UTC",
    );
    p.run(&["escalations", "resolve", &id, "--approve"])
        .expect_code(0);
    let run_id = p.only_run();
    p.run(&["resume", &run_id]).expect_code(0);
    let (err, is_error) = tool_result(&p.show(&run_id), "call_0_0");
    assert!(is_error);
    assert_eq!(err["error"], "not_found", "{err}");
    let message = err["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("no longer offers `echo` (it did when this run started"),
        "{message}"
    );
}

#[test]
fn kill_9_of_agentrun_during_an_mcp_call_then_resume() {
    // The proxy plays the crash by killing agentrun, which a sandboxed server may not:
    // this server runs unsandboxed to stand in for a power cut.
    // Idempotent: the resumed run calls it again, with the same idempotency key.
    let Some(p) = project(
        Some("agentrun"),
        "idempotent = [\"echo\"]\nsandbox = \"off\"",
    ) else {
        return;
    };
    one_call(&p, "everything__echo", json!({"message": "survived"}));
    let run = p.run(&["start", "task.md"]);
    assert_eq!(run.code, -1, "agentrun was not killed\n{run}");
    let id = p.only_run();
    p.run(&["resume", &id]).expect_code(0);
    let show = p.show(&id);
    assert_eq!(
        tool_result(&show, "call_0_0"),
        (json!("Echo: survived"), false)
    );

    // Not idempotent: nothing is re-run; a person is asked what happened.
    let Some(p) = project(Some("agentrun"), "sandbox = \"off\"") else {
        return;
    };
    one_call(&p, "everything__echo", json!({"message": "once"}));
    assert_eq!(p.run(&["start", "task.md"]).code, -1);
    let id = p.only_run();
    let resumed = p.run(&["resume", &id, "--json"]);
    resumed.expect_code(3);
    let list = p
        .run(&["escalations", "list", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(list[0]["kind"], "outcome_unknown", "{list}");
}

#[test]
fn the_example_runs_with_one_command() {
    if everything().is_none() || !time_server() {
        return;
    }
    let db = tempfile::tempdir().expect("tempdir");
    let out = Command::new(crate::common::bin())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("AGENTRUN_DB", db.path().join("examples.db"))
        .args(["start", "examples/mcp/task.md", "--json"])
        .output()
        .expect("spawn agentrun");
    let run = Run::from_output(out);
    run.expect_code(0);
    let answer = run.json()["answer"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(answer.contains("42") && answer.contains("18:30"), "{run}");
}

/// server-everything in streamable HTTP mode on a free port, stopped on drop.
struct HttpServer {
    child: Child,
    port: u16,
}

impl HttpServer {
    fn start(program: &PathBuf) -> HttpServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut child = Command::new(program)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start server-everything");
        // It says so on stderr once it listens.
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let ready = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains("listening on port"));
        assert!(ready, "server-everything did not start listening");
        std::thread::spawn(move || lines.for_each(drop));
        HttpServer { child, port }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

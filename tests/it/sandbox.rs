//! Issue 22 — the sandbox of command tools: a tool that reaches for a planted
//! `~/.ssh/id_ed25519`, writes outside its folder, or connects to a loopback port with
//! `network = false` is denied, the call fails `permission_denied` naming what was
//! denied, and the run goes on; the same tools with `sandbox = "off"` can.

use crate::common::{self, Project, tool_result};
use agentrun::config::preflight::Support;
use serde_json::{Value, json};
use std::net::TcpListener;

/// `None` (and one line) where this kernel cannot enforce the sandbox.
fn kernel() -> Option<()> {
    let k = Support::probe();
    if k.landlock_abi < 1 || !k.seccomp {
        eprintln!(
            "skipped: this kernel has no Landlock or no seccomp, so the sandbox cannot be tested"
        );
        return None;
    }
    Some(())
}

/// A temp HOME with a planted private key, a loopback listener, and a project whose
/// tools try to read the key, write beside HOME, connect to the listener, and write
/// in their own folder.
struct Scene {
    home: tempfile::TempDir,
    listener: TcpListener,
    p: Project,
}

fn scene(defaults: &str) -> Scene {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".ssh")).unwrap();
    std::fs::write(home.path().join(".ssh/id_ed25519"), "PRIVATE-KEY-9c1e\n").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let p = Project::new();
    let tool = |name: &str, shell: &str, body: &str| {
        format!(
            "[tools.{name}]\ndescription = \"{name}\"\ninput_schema = {{ type = \"object\" }}\n\
             command = [\"{shell}\", \"-c\", \"cat >/dev/null; {body}\"]\nattempts = 1\n"
        )
    };
    p.write(
        "tools.toml",
        &format!(
            "[defaults]\ntimeout = \"10s\"\n{defaults}\n\n{}{}{}{}",
            tool("read_key", "sh", "cat $HOME/.ssh/id_ed25519"),
            tool(
                "write_out",
                "sh",
                "echo x > $HOME/outside.txt && echo wrote"
            ),
            tool(
                "connect",
                "bash",
                &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")
            ),
            tool(
                "write_in",
                "sh",
                "echo x > inside.txt && cat /etc/hostname >/dev/null && echo ok"
            ),
        ),
    );
    let calls: Vec<Value> = ["read_key", "write_out", "connect", "write_in"]
        .iter()
        .map(|n| json!({"name": n}))
        .collect();
    p.model_script(json!([{ "tool_calls": calls }, {"text": "done"}]));
    p.task("", "Try everything.");
    Scene { home, listener, p }
}

impl Scene {
    fn run(&self) -> Value {
        let home = self.home.path().to_str().unwrap();
        let (run, show) = self.p.start(&[("HOME", home)]);
        // The run goes on past every denial and completes.
        run.expect_code(0);
        show
    }
}

#[test]
fn a_sandboxed_tool_is_denied_secrets_outside_writes_and_loopback_and_the_run_goes_on() {
    let Some(()) = kernel() else { return };
    let s = scene("sandbox = \"workspace\"\nnetwork = false");
    let show = s.run();
    // The key is not there at all: `~/.ssh` is covered by an empty folder.
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error, "{content}");
    assert!(
        content["message"]
            .as_str()
            .unwrap_or_default()
            .contains("No such file")
    );
    for (call, denied) in [("call_0_1", "outside.txt"), ("call_0_2", "127.0.0.1")] {
        let (content, is_error) = tool_result(&show, call);
        assert!(is_error, "{call}: {content}");
        assert_eq!(content["error"], "permission_denied", "{call}: {content}");
        let message = content["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("sandbox denied") && message.contains(denied),
            "{call}: {message}"
        );
    }
    assert!(!show.to_string().contains("PRIVATE-KEY-9c1e"));
    assert!(!s.home.path().join("outside.txt").exists());
    assert!(s.listener.set_nonblocking(true).is_ok());
    assert!(s.listener.accept().is_err(), "nothing connected");
    // Its own folder stays writable, the rest of the system readable.
    assert_eq!(tool_result(&show, "call_0_3"), (json!("ok"), false));
    assert!(s.p.path().join("inside.txt").exists());
    // `tools check` and `runs show` say what each tool was confined to.
    let check = s.p.run(&["tools", "check"]);
    check.expect_code(0);
    assert!(
        check.stdout.contains("(sandbox workspace, network off)"),
        "{check}"
    );
    let id = s.p.only_run();
    let human = s.p.run(&["runs", "show", &id]);
    assert!(
        human
            .stdout
            .contains("sandbox workspace, network off (connect, read_key, write_in, write_out)"),
        "{human}"
    );
}

#[test]
fn the_same_tools_with_sandbox_off_can() {
    let Some(()) = kernel() else { return };
    let s = scene("sandbox = \"off\"");
    let show = s.run();
    assert_eq!(
        tool_result(&show, "call_0_0"),
        (json!("PRIVATE-KEY-9c1e"), false)
    );
    assert_eq!(tool_result(&show, "call_0_1"), (json!("wrote"), false));
    assert_eq!(tool_result(&show, "call_0_2"), (json!("connected"), false));
    assert!(s.home.path().join("outside.txt").exists());
    assert!(s.listener.accept().is_ok());
}

/// A hook runs in the sandbox of `[defaults]` like a command tool (issues 22, 26): a
/// `before_tool` hook that blocks the call only when it could read the planted key.
fn hook_scene(sandbox: &str) -> (tempfile::TempDir, Project) {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".ssh")).unwrap();
    std::fs::write(home.path().join(".ssh/id_ed25519"), "PRIVATE-KEY-9c1e\n").unwrap();
    let p = Project::new();
    p.write(
        "tools.toml",
        &format!(
            "[defaults]\ntimeout = \"10s\"\nattempts = 1\nsandbox = \"{sandbox}\"\n\n\
             [tools.noop]\ndescription = \"noop\"\ninput_schema = {{ type = \"object\" }}\n\
             command = [\"sh\", \"-c\", \"cat >/dev/null; echo ran\"]\n\n\
             [hooks]\nbefore_tool = [{{ command = [\"sh\", \"hook.sh\"] }}]\n"
        ),
    );
    p.write(
        "hook.sh",
        "cat >/dev/null\nif cat \"$HOME/.ssh/id_ed25519\" >/dev/null 2>&1; then \
         echo 'the hook read the key' >&2; exit 2; fi\n",
    );
    p.model_script(json!([{ "tool_calls": [{"name": "noop"}] }, {"text": "done"}]));
    p.task("", "Run it.");
    (home, p)
}

#[test]
fn a_hook_runs_in_the_sandbox_of_its_defaults() {
    let Some(()) = kernel() else { return };
    let (home, p) = hook_scene("workspace");
    let (run, show) = p.start(&[("HOME", home.path().to_str().unwrap())]);
    run.expect_code(0);
    // Denied the key, the hook let the call through.
    assert_eq!(tool_result(&show, "call_0_0"), (json!("ran"), false));

    let (home, p) = hook_scene("off");
    let (run, show) = p.start(&[("HOME", home.path().to_str().unwrap())]);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error, "{content}");
    let message = content["message"].as_str().unwrap_or_default();
    assert!(message.contains("the hook read the key"), "{content}");
}

/// A tool that looks for a value planted in agentrun's own environment (where the
/// provider keys are) through `/proc/$PPID/environ`, then says what capabilities it
/// holds.
fn peek_scene(sandbox: &str) -> Project {
    let p = Project::new();
    p.write(
        "tools.toml",
        &format!(
            "[defaults]\ntimeout = \"10s\"\nattempts = 1\nsandbox = \"{sandbox}\"\n\n\
             [tools.peek]\ndescription = \"peek\"\ninput_schema = {{ type = \"object\" }}\n\
             command = [\"sh\", \"peek.sh\"]\n"
        ),
    );
    p.write(
        "peek.sh",
        "cat >/dev/null\n\
         if { tr '\\0' '\\n' < /proc/$PPID/environ; } 2>/dev/null | grep -q PLANTED-7d2a; \
         then echo leaked; else echo kept; fi\n\
         grep CapEff /proc/self/status | tr -d ' \\t'\n",
    );
    p.model_script(json!([{ "tool_calls": [{"name": "peek"}] }, {"text": "done"}]));
    p.task("", "Peek.");
    p
}

#[test]
fn a_sandboxed_tool_cannot_read_agentruns_environment_and_holds_no_capability() {
    let Some(()) = kernel() else { return };
    let planted = [("AGENTRUN_TEST_PLANTED", "PLANTED-7d2a")];
    let (run, show) = peek_scene("workspace").start(&planted);
    run.expect_code(0);
    // Run as root, the tool kept CAP_SYS_PTRACE and read agentrun's environment
    // although Landlock confined it.
    assert_eq!(
        tool_result(&show, "call_0_0"),
        (json!("kept\nCapEff:0000000000000000"), false)
    );
    // The check can see a leak: unconfined, the tool reads it.
    let (run, show) = peek_scene("off").start(&planted);
    run.expect_code(0);
    let (content, _) = tool_result(&show, "call_0_0");
    assert!(
        content.as_str().unwrap_or_default().starts_with("leaked"),
        "{content}"
    );
}

/// `tools check` and `runs show` name the sandbox of every process a run starts: its
/// command tools, the stdio MCP servers its task can use (not the others) and its
/// hooks. Before, `runs show` named only command tools, and `tools check` no hook.
#[test]
fn tools_check_and_runs_show_name_the_sandbox_of_tools_servers_and_hooks() {
    let Some(()) = kernel() else { return };
    let p = Project::new();
    p.write("server.py", common::PING_MCP_SERVER);
    p.write(
        "tools.toml",
        "[defaults]\ntimeout = \"20s\"\nattempts = 1\nsandbox = \"workspace\"\n\n\
         [tools.echo]\ndescription = \"echo\"\ninput_schema = { type = \"object\" }\n\
         command = [\"cat\"]\nnetwork = false\n\n\
         [mcp.tiny]\ncommand = [\"python3\", \"server.py\"]\n\n\
         [mcp.unused]\ncommand = [\"python3\", \"server.py\"]\n\n\
         [hooks]\nbefore_tool = [{ command = [\"sh\", \"-c\", \"cat >/dev/null\"] }]\n",
    );
    let check = p.run(&["tools", "check"]);
    check.expect_code(0);
    for line in [
        "tiny__ping",
        "hooks:\n  before_tool          sh -c cat >/dev/null\n                       (sandbox workspace, network on)",
    ] {
        assert!(check.stdout.contains(line), "{line:?}\n{check}");
    }
    p.model_script(json!([
        {"tool_calls": [{"name": "echo", "args": {}}, {"name": "tiny__ping", "args": {}}]},
        {"text": "done"}
    ]));
    p.task("tools = [\"echo\", \"tiny__ping\"]", "Ping.");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    assert_eq!(tool_result(&show, "call_0_1"), (json!("pong"), false));
    let human = p.run(&["runs", "show", &p.only_run()]);
    assert!(
        human.stdout.contains(
            "sandbox workspace, network off (echo); \
             sandbox workspace, network on (MCP server tiny, before_tool hook)"
        ),
        "{human}"
    );
    assert!(!human.stdout.contains("unused"), "{human}");
}

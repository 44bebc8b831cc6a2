//! Issue 22 — MCP servers held to the same trust rules as command tools: an answer
//! nested too deeply fails at once, servers start only for tasks that use them and
//! never outlive the run, and literal credentials in their config are warned about and
//! never stored. Each test fails on the code before its fix.

use crate::common::{Project, tool_result};
use serde_json::json;

/// A stdio MCP server small enough to read (Python's standard library only): answers
/// `initialize`, lists `ping` and `deep`, answers `ping` with "pong" and `deep` with a
/// result nested 125 levels deep. It adds its pid to the file named by its first argument
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
        tools = [{"name": n, "inputSchema": {"type": "object"}} for n in ("ping", "deep")]
        result = {"tools": tools}
    elif method == "tools/call" and msg["params"]["name"] == "deep":
        nested = 1
        for _ in range(125):
            nested = [nested]
        result = {"content": [{"type": "text", "text": "deep"}], "structuredContent": {"x": nested}}
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

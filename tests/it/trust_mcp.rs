//! Issue 22 — MCP servers held to the same trust rules as command tools: an answer
//! nested too deeply fails at once, servers start only for tasks that use them and
//! never outlive the run, and literal credentials in their config are warned about and
//! never stored. Each test fails on the code before its fix.

use crate::common::{Project, tool_result};
use serde_json::json;

/// A stdio MCP server small enough to read (Python's standard library only): answers
/// `initialize`, lists `ping` and `deep`, answers `ping` with "pong" and `deep` with a
/// result nested 125 levels deep. It writes its pid to `server.pid` when it starts.
const SERVER: &str = r#"import json, os, sys
with open("server.pid", "a") as f:
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

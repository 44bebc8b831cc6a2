//! Tests for tools.toml parsing: whole-config comparisons and exact error lines.

use super::*;
use serde_json::json;
use std::collections::BTreeMap;

const CONTRACT_EXAMPLE: &str = r#"
[defaults]
timeout = "8s"          # per attempt
attempts = 3
backoff = "500ms"       # base; delay = min(max_backoff, base * 2^attempt), full jitter
max_backoff = "30s"

[policy]
breaker_threshold = 3   # identical failing calls (tool + args digest) before the circuit opens
disable_after = 3       # failures of one tool (any args) before it is withdrawn from the model
stuck_repeats = 3       # identical consecutive calls, or identical consecutive errors
approval_patterns = ["rm -rf", "drop table"]   # an argument matching one needs approval

[tools.search_kb]
description = "Search the knowledge base"
input_schema = { type = "object", properties = { q = { type = "string" } }, required = ["q"] }
http = { method = "GET", url = "http://127.0.0.1:8080/search?q={q}",
         headers = { Authorization = "Bearer ${KB_TOKEN}" } }
timeout = "8s"
idempotent = true
fallback = [{ tool = "kb_cache", map = { q = "query" } }]

[tools.kb_cache]
description = "Cached knowledge base answers (may be stale)"
input_schema = { type = "object", properties = { query = { type = "string" } }, required = ["query"] }
command = ["python3", "tools/kb_cache.py"]
stale = true            # results are disclosed to the model as possibly stale

[tools.delete_record]
description = "Delete a record"
input_schema = { type = "object", properties = { id = { type = "string" } }, required = ["id"] }
command = ["./tools/delete_record.sh"]
approval = "always"     # "always" | "never" | "auto" (auto: approval_patterns decide)
"#;

fn parse_ok(text: &str) -> ToolsConfig {
    match parse(text, Path::new("conf/tools.toml")) {
        Ok(cfg) => cfg,
        Err(e) => panic!("expected a valid config, got:\n{e}\n--- text:\n{text}"),
    }
}

/// Asserts the exact error lines (as `tools check` prints them) for `text`.
fn assert_errors(text: &str, expected: &[&str]) {
    let got: Vec<String> = match parse(text, Path::new("tools.toml")) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    };
    assert_eq!(got, expected, "--- text:\n{text}");
    for line in &got {
        assert!(!line.contains('\n'), "multi-line error: {line:?}");
    }
}

/// A valid command tool `name` plus `extra` lines.
fn cmd_tool(name: &str, extra: &str) -> String {
    format!("[tools.{name}]\ndescription = \"d\"\ncommand = [\"run\"]\n{extra}\n")
}

/// An HTTP tool with one property, `q`, and the given `url`.
fn http_tool(name: &str, url: &str) -> String {
    http_tool_with(name, &format!("url = \"{url}\""))
}

/// An HTTP tool with one property, `q`, and the given keys inside `http = { ... }`.
fn http_tool_with(name: &str, http: &str) -> String {
    format!(
        "[tools.{name}]\ndescription = \"d\"\n\
         input_schema = {{ type = \"object\", properties = {{ q = {{ type = \"string\" }} }} }}\n\
         http = {{ {http} }}\n"
    )
}

fn schema(prop: &str) -> serde_json::Value {
    json!({"type": "object", "properties": {prop: {"type": "string"}}, "required": [prop]})
}

fn command(argv: &[&str]) -> ToolKind {
    ToolKind::Command(CommandSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        program: None,
        env: Vec::new(),
        set: Default::default(),
        inherit_all: false,
        cwd: PathBuf::from("conf"),
        output_cap: DEFAULT_OUTPUT_CAP,
        sandbox: Default::default(),
    })
}

fn tool(name: &str, description: &str, input_schema: serde_json::Value, kind: ToolKind) -> ToolDef {
    ToolDef {
        name: name.into(),
        description: description.into(),
        input_schema,
        kind,
        retry: RetryPolicy::default(),
        idempotent: false,
        fallback: Vec::new(),
        stale: false,
        approval: Approval::Auto,
        on_unknown: OnUnknown::Escalate,
    }
}

#[test]
fn design_example_parses_to_the_expected_config() {
    let search_kb = ToolDef {
        idempotent: true,
        fallback: vec![FallbackStep {
            tool: "kb_cache".into(),
            map: BTreeMap::from([("q".into(), "query".into())]),
        }],
        ..tool(
            "search_kb",
            "Search the knowledge base",
            schema("q"),
            ToolKind::Http(HttpSpec {
                method: "GET".into(),
                url: "http://127.0.0.1:8080/search?q={q}".into(),
                headers: BTreeMap::from([("Authorization".into(), "Bearer ${KB_TOKEN}".into())]),
                output_cap: DEFAULT_OUTPUT_CAP,
            }),
        )
    };
    let kb_cache = ToolDef {
        stale: true,
        ..tool(
            "kb_cache",
            "Cached knowledge base answers (may be stale)",
            schema("query"),
            command(&["python3", "tools/kb_cache.py"]),
        )
    };
    let delete_record = ToolDef {
        approval: Approval::Always,
        ..tool(
            "delete_record",
            "Delete a record",
            schema("id"),
            command(&["./tools/delete_record.sh"]),
        )
    };
    let expected = ToolsConfig {
        defaults: RetryPolicy::default(),
        policy: Policy {
            approval_patterns: vec!["rm -rf".into(), "drop table".into()],
            ..Policy::default()
        },
        tools: [search_kb, kb_cache, delete_record]
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect(),
        mcp: Default::default(),
        hooks: Default::default(),
        notify: None,
        limits: Default::default(),
    };
    assert_eq!(parse_ok(CONTRACT_EXAMPLE), expected);
}

#[test]
fn empty_file_is_a_config_without_tools() {
    assert_eq!(parse_ok(""), ToolsConfig::default());
    assert_eq!(parse_ok("# only a comment\n"), ToolsConfig::default());
}

#[test]
fn retry_values_inherit_tool_then_defaults_then_built_in() {
    let text = format!(
        "[defaults]\ntimeout = \"2s\"\nattempts = 5\n{}{}",
        cmd_tool("plain", ""),
        cmd_tool(
            "custom",
            "attempts = 1\nbackoff = \"1s\"\nmax_backoff = \"2m\""
        ),
    );
    let cfg = parse_ok(&text);
    let inherited = RetryPolicy {
        timeout: Duration::from_secs(2),
        attempts: 5,
        ..RetryPolicy::default()
    };
    assert_eq!(cfg.defaults, inherited);
    assert_eq!(cfg.tools["plain"].retry, inherited);
    let custom = RetryPolicy {
        attempts: 1,
        backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(120),
        ..inherited
    };
    assert_eq!(cfg.tools["custom"].retry, custom);
}

#[test]
fn optional_keys_resolve_to_their_values() {
    let extra = "env = [\"GH_TOKEN\"]\noutput_cap = 1024\non_unknown = \"tell_model\"\napproval = \"never\"";
    let text = format!(
        "[policy]\napproval_patterns = [\"RM  -RF\", \"re:A\\\\s\"]\n{}",
        cmd_tool("t", extra)
    );
    let cfg = parse_ok(&text);
    assert_eq!(cfg.policy.approval_patterns, vec!["rm -rf", r"re:A\s"]);
    let t = &cfg.tools["t"];
    assert_eq!(
        (t.on_unknown, t.approval),
        (OnUnknown::TellModel, Approval::Never)
    );
    let ToolKind::Command(spec) = &t.kind else {
        panic!("not a command tool: {t:?}")
    };
    assert_eq!(
        (spec.env.clone(), spec.output_cap),
        (vec!["GH_TOKEN".to_string()], 1024)
    );
    // A tool without arguments may leave out its schema.
    assert_eq!(t.input_schema, json!({"type": "object", "properties": {}}));
}

#[test]
fn http_method_defaults_to_get_and_is_upper_cased() {
    let cfg = parse_ok(&http_tool_with(
        "a",
        "method = \"post\", url = \"https://x.test/{q}\"",
    ));
    let ToolKind::Http(spec) = &cfg.tools["a"].kind else {
        panic!("not http")
    };
    assert_eq!(spec.method, "POST");
    let cfg = parse_ok(&http_tool("a", "https://x.test/{q}"));
    let ToolKind::Http(spec) = &cfg.tools["a"].kind else {
        panic!("not http")
    };
    assert_eq!(spec.method, "GET");
}

#[test]
fn syntax_error_has_line_and_column() {
    assert_errors(
        "[defaults]\ntimeout = \"8s\nattempts = 3\n",
        &["tools.toml: syntax error at line 2, column 14: invalid basic string, expected `\"`"],
    );
}

#[test]
fn unknown_keys_are_named_with_where_and_a_suggestion() {
    let text = format!(
        "[tool.x]\n[defaults]\nretries = 3\n{}",
        cmd_tool("a", "timout = \"1s\"")
    );
    assert_errors(
        &text,
        &[
            "tools.toml: unknown key `tool` at top level (line 1, column 2); did you mean `tools`?",
            "tools.toml: defaults: unknown key `retries` (line 3, column 1); expected one of: timeout, attempts, backoff, max_backoff, max_retry_after, env, inherit, sandbox, writable, network",
            "tools.toml: tool `a`: unknown key `timout` (line 7, column 1); did you mean `timeout`?",
        ],
    );
}

#[test]
fn wrong_types_are_all_reported_with_their_location() {
    assert_errors(
        &cmd_tool(
            "a",
            "attempts = \"3\"\nidempotent = \"yes\"\n[tools.a.http]\nmehtod = \"GET\"",
        ),
        &[
            "tools.toml: tool `a`: attempts: invalid type: string \"3\", expected an integer (line 4, column 12)",
            "tools.toml: tool `a`: http: unknown key `mehtod`, expected one of `method`, `url`, `headers` (line 7, column 1)",
            "tools.toml: tool `a`: idempotent: invalid type: string \"yes\", expected a boolean (line 5, column 14)",
        ],
    );
}

/// Each defect alone, with its exact line.
#[test]
fn each_defect_has_its_own_one_line_message() {
    let cases: Vec<(String, &str)> = vec![
        (
            cmd_tool("a", "timeout = \"8 parsecs\""),
            "tools.toml: tool `a`: timeout: bad duration \"8 parsecs\": unknown time unit \"parsecs\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations)",
        ),
        (
            cmd_tool("a", "timeout = \"0s\""),
            "tools.toml: tool `a`: timeout: must be greater than zero",
        ),
        (
            cmd_tool("a", "attempts = 0"),
            "tools.toml: tool `a`: attempts: must be between 1 and 20, not 0",
        ),
        (
            "[defaults]\nattempts = 21".into(),
            "tools.toml: defaults.attempts: must be between 1 and 20, not 21",
        ),
        (
            cmd_tool("a", "backoff = \"1m\""),
            "tools.toml: tool `a`: backoff: 1m is longer than max_backoff 30s",
        ),
        (
            "[policy]\nbreaker_threshold = 0".into(),
            "tools.toml: policy.breaker_threshold: must be at least 1, not 0",
        ),
        (
            "[policy]\napproval_patterns = [\"re:rm (-rf\"]".into(),
            "tools.toml: policy.approval_patterns[0]: not a valid regular expression: unclosed group",
        ),
        (
            "[policy]\napproval_patterns = [\"rm\", \" \"]".into(),
            "tools.toml: policy.approval_patterns[1]: must not be empty (it would match every argument)",
        ),
        (
            "[tools.a]\ncommand = [\"run\"]".into(),
            "tools.toml: tool `a`: description: missing",
        ),
        (
            "[tools.a]\ndescription = \" \"\ncommand = [\"run\"]".into(),
            "tools.toml: tool `a`: description: must not be empty",
        ),
        (
            cmd_tool("\"search kb\"", ""),
            "tools.toml: tool `search kb`: name must match ^[A-Za-z0-9_-]{1,64}$ (model providers require it)",
        ),
        (
            cmd_tool("ask_user", ""),
            "tools.toml: tool `ask_user`: name `ask_user` is reserved for the built-in tool",
        ),
        (
            cmd_tool("a", "http = { url = \"https://x.test/\" }"),
            "tools.toml: tool `a`: set exactly one of `command` or `http`, not both",
        ),
        (
            "[tools.a]\ndescription = \"d\"".into(),
            "tools.toml: tool `a`: missing `command` or `http` (set exactly one)",
        ),
        (
            "[tools.a]\ndescription = \"d\"\ncommand = []".into(),
            "tools.toml: tool `a`: command: must not be empty (an argv such as [\"python3\", \"tool.py\"])",
        ),
        (
            http_tool_with("a", "method = \"FETCH\", url = \"https://x.test/\""),
            "tools.toml: tool `a`: http.method: must be one of GET, POST, PUT, PATCH, DELETE, not \"FETCH\"",
        ),
        (
            http_tool("a", "https://{q}.example.com/"),
            "tools.toml: tool `a`: http.url: placeholder `{q}` is in the host; placeholders are only allowed in the path or query",
        ),
        (
            http_tool("a", "ftp://x.test/{q}"),
            "tools.toml: tool `a`: http.url: \"ftp://x.test/{q}\" must start with http:// or https://",
        ),
        (
            http_tool("a", "https://x.test/{id}"),
            "tools.toml: tool `a`: http.url: placeholder `{id}` is not a property in input_schema",
        ),
        (
            cmd_tool("a", "input_schema = { type = \"string\" }"),
            "tools.toml: tool `a`: input_schema: must be an object schema (type = \"object\")",
        ),
        (
            cmd_tool(
                "a",
                "input_schema = { type = \"object\", properties = { q = { type = \"strin\" } } }",
            ),
            "tools.toml: tool `a`: input_schema: not a valid JSON Schema at /properties/q/type: \"strin\" is not valid under any of the schemas listed in the 'anyOf' keyword",
        ),
        (
            cmd_tool("a", "fallback = [{ tool = \"b\" }]"),
            "tools.toml: tool `a`: fallback[0].tool: unknown tool `b`",
        ),
        (
            cmd_tool("a", "fallback = [{ tool = \"a\" }]"),
            "tools.toml: tool `a`: fallback[0].tool: a tool cannot fall back to itself",
        ),
        (
            format!(
                "{}{}",
                cmd_tool("a", "fallback = [{ tool = \"b\", map = { q = \"q\" } }]"),
                http_tool("b", "https://x.test/")
            ),
            "tools.toml: tool `a`: fallback[0].map: `q` is not a property in this tool's input_schema",
        ),
        (
            format!(
                "{}{}",
                http_tool("a", "https://x.test/"),
                "fallback = [{ tool = \"b\", map = { q = \"query\" } }]\n"
            ) + &http_tool("b", "https://x.test/"),
            "tools.toml: tool `a`: fallback[0].map: `query` is not a property in `b`'s input_schema",
        ),
        (
            cmd_tool("a", "approval = \"sometimes\""),
            "tools.toml: tool `a`: approval: must be \"always\", \"never\" or \"auto\", not \"sometimes\"",
        ),
        (
            cmd_tool("a", "on_unknown = \"retry\""),
            "tools.toml: tool `a`: on_unknown: must be \"escalate\" or \"tell_model\", not \"retry\"",
        ),
        (
            cmd_tool("a", "output_cap = 0"),
            "tools.toml: tool `a`: output_cap: must be at least 1, not 0",
        ),
        (
            cmd_tool("a", "env = [\"MY-TOKEN\"]"),
            "tools.toml: tool `a`: env[0]: \"MY-TOKEN\" is not a valid environment variable name",
        ),
        (
            format!(
                "{}env = [\"KB_TOKEN\"]\n",
                http_tool("a", "https://x.test/")
            ),
            "tools.toml: tool `a`: env: only command tools take `env`; http tools read `${VAR}` in headers",
        ),
        (
            http_tool_with(
                "a",
                "url = \"https://x.test/\", headers = { Authorization = \"Bearer ${KB_TOKEN\" }",
            ),
            "tools.toml: tool `a`: http.headers.Authorization: unclosed `${`",
        ),
    ];
    assert!(cases.len() >= 15);
    for (text, expected) in &cases {
        assert_errors(text, &[expected]);
    }
}

#[test]
fn fallback_cycle_is_reported_with_its_path() {
    let text = cmd_tool("a", "fallback = [{ tool = \"b\" }]")
        + &cmd_tool("b", "fallback = [{ tool = \"a\" }]");
    assert_errors(
        &text,
        &["tools.toml: tool `a`: fallback: cycle a -> b -> a"],
    );
}

#[test]
fn longer_cycle_is_reported_once_from_its_first_tool() {
    let text = cmd_tool("c", "fallback = [{ tool = \"a\" }]")
        + &cmd_tool("b", "fallback = [{ tool = \"c\" }]")
        + &cmd_tool("a", "fallback = [{ tool = \"b\" }]");
    assert_errors(
        &text,
        &["tools.toml: tool `a`: fallback: cycle a -> b -> c -> a"],
    );
}

#[test]
fn every_defect_in_a_file_is_reported_in_one_run() {
    let text = format!(
        "[defaults]\ntimeout = \"fast\"\n[policy]\nstuck_repeats = 0\n{}{}{}",
        cmd_tool("a", "attempts = 99\nfallback = [{ tool = \"nope\" }]"),
        http_tool("b", "http://{q}@x.test/"),
        "[tools.c]\ncommand = [\"run\"]\nstale = \"yes\"\n",
    );
    assert_errors(
        &text,
        &[
            "tools.toml: defaults.timeout: bad duration \"fast\": expected number at 0",
            "tools.toml: policy.stuck_repeats: must be at least 1, not 0",
            "tools.toml: tool `a`: attempts: must be between 1 and 20, not 99",
            "tools.toml: tool `a`: fallback[0].tool: unknown tool `nope`",
            "tools.toml: tool `b`: http.url: placeholder `{q}` is in the userinfo; placeholders are only allowed in the path or query",
            "tools.toml: tool `c`: stale: invalid type: string \"yes\", expected a boolean (line 16, column 9)",
            "tools.toml: tool `c`: description: missing",
        ],
    );
}

#[test]
fn render_errors_lists_every_line_and_a_count() {
    let Err(errs) = parse("[tools.a]\n", Path::new("tools.toml")) else {
        panic!("expected errors")
    };
    assert_eq!(
        render_errors(&errs),
        "tools.toml: tool `a`: description: missing\n\
         tools.toml: tool `a`: missing `command` or `http` (set exactly one)\n\
         2 problems found\n"
    );
}

#[test]
fn load_returns_the_config_and_the_raw_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tools.toml");
    std::fs::write(&path, CONTRACT_EXAMPLE).unwrap();
    let (cfg, text) = load(&path).unwrap();
    assert_eq!(text, CONTRACT_EXAMPLE);
    let ToolKind::Command(spec) = &cfg.tools["kb_cache"].kind else {
        panic!("not a command")
    };
    assert_eq!(spec.cwd, dir.path());
}

#[test]
fn load_reports_a_missing_file() {
    let errs = load(Path::new("/nonexistent/tools.toml")).unwrap_err();
    assert_eq!(errs.0.len(), 1);
    assert_eq!(
        errs.0[0].to_string(),
        "/nonexistent/tools.toml: no such file; `agentrun init` writes a starter, or pass --tools PATH"
    );
}

#[test]
fn hooks_resolve_with_their_defaults_and_patterns() {
    use super::hooks::{HookEvent, OnHookError};
    let cfg = parse_ok(
        "[defaults]\nenv = [\"HOME_DIR\"]\n[hooks]\nbefore_tool = [{ command = [\"python3\", \"h.py\"], tools = [\"send_*\"], timeout = \"2s\" }]\nrun_end = [{ command = [\"./end.sh\"], on_error = \"allow\" }]\n",
    );
    let before: Vec<_> = cfg
        .hooks
        .for_event(HookEvent::BeforeTool, Some("send_email"))
        .collect();
    assert_eq!(before.len(), 1);
    let (_, hook) = before[0];
    assert_eq!(
        (
            hook.timeout,
            hook.on_error,
            hook.command.env.clone(),
            hook.command.cwd.clone()
        ),
        (
            std::time::Duration::from_secs(2),
            OnHookError::Block,
            vec!["HOME_DIR".to_string()],
            std::path::PathBuf::from("conf")
        )
    );
    assert_eq!(
        cfg.hooks
            .for_event(HookEvent::BeforeTool, Some("lookup"))
            .count(),
        0
    );
    let end: Vec<_> = cfg.hooks.for_event(HookEvent::RunEnd, None).collect();
    assert_eq!(end[0].1.on_error, OnHookError::Allow);
}

#[test]
fn each_hook_defect_names_the_hook() {
    assert_errors(
        "[hooks]\nbefore_tool = [{ command = [], timeout = \"soon\", on_error = \"maybe\" }]\n",
        &[
            "tools.toml: hooks.before_tool[0].command: must not be empty (an argv such as [\"python3\", \"tool.py\"])",
            "tools.toml: hooks.before_tool[0].timeout: bad duration \"soon\": expected number at 0",
            "tools.toml: hooks.before_tool[0].on_error: must be \"block\" (the default) or \"allow\", not \"maybe\"",
        ],
    );
}

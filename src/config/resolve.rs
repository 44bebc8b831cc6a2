//! Stage two of tools.toml: raw sections resolved into a [`ToolsConfig`].
//!
//! Values inherit tool -> `[defaults]` -> built-in defaults. Every check reports into
//! the [`Sink`] and resolution carries on with a stand-in value, so one run lists every
//! problem; the caller discards the config if any were found.

use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::Sink;
use super::fields::*;
use super::raw::{RawFile, RawHttp, RawPolicy, RawTool, Section, Where};
use super::types::*;
use super::validate::{self, check_count};

const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

/// Resolves the whole file. `origin` is the tools.toml path.
pub fn resolve(raw: RawFile, origin: &Path, sink: &mut Sink) -> ToolsConfig {
    let d = &raw.defaults.value;
    let fields = RetryFields {
        timeout: d.timeout.as_deref(),
        attempts: d.attempts,
        backoff: d.backoff.as_deref(),
        max_backoff: d.max_backoff.as_deref(),
        max_retry_after: d.max_retry_after.as_deref(),
    };
    let cwd = command_cwd(origin);
    let sandbox_keys = SandboxKeys {
        sandbox: d.sandbox.as_deref(),
        writable: &d.writable,
        network: d.network,
    };
    let env_defaults = EnvDefaults {
        env: d.env.clone().unwrap_or_default(),
        inherit_all: inherit(d.inherit.as_deref(), Where::Section("defaults"), sink)
            .unwrap_or(false),
        sandbox: sandbox(
            &sandbox_keys,
            &Sandbox::base(),
            &cwd,
            Where::Section("defaults"),
            sink,
        ),
    };
    check_env_names(&env_defaults.env, Where::Section("defaults"), sink);
    let defaults = resolve_retry(
        &fields,
        &RetryPolicy::default(),
        Where::Section("defaults"),
        sink,
    );
    let limits = super::limits::resolve(&raw, sink);
    let policy = resolve_policy(raw.policy.value, sink);
    let mut tools = BTreeMap::new();
    let mut props = BTreeMap::new();
    for (name, section) in raw.tools {
        let (tool, known) = resolve_tool(&name, section, &defaults, &env_defaults, &cwd, sink);
        props.insert(name.clone(), known);
        tools.insert(name, tool);
    }
    let mcp = super::mcp::resolve_servers(raw.mcp, &defaults, &env_defaults, &cwd, sink);
    check_fallbacks(&tools, &props, &mcp, sink);
    super::agents::resolve(raw.agents, &mut tools, &cwd, sink);
    let hooks = super::hooks::resolve(raw.hooks.value, &env_defaults, &cwd, sink);
    let notify = raw
        .notify
        .map(|n| super::notify::resolve(n.value, &defaults, &cwd, sink));
    ToolsConfig {
        defaults,
        policy,
        tools,
        mcp,
        hooks,
        notify,
        limits,
    }
}

/// The child's working directory: where the tools.toml is, so relative paths in it
/// mean the same thing whatever directory agentrun is started from.
fn command_cwd(origin: &Path) -> PathBuf {
    match origin.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn resolve_policy(raw: RawPolicy, sink: &mut Sink) -> Policy {
    let mut p = Policy::default();
    let place = Where::Section("policy");
    let counts = [
        (
            "breaker_threshold",
            raw.breaker_threshold,
            &mut p.breaker_threshold,
        ),
        ("disable_after", raw.disable_after, &mut p.disable_after),
        ("stuck_repeats", raw.stuck_repeats, &mut p.stuck_repeats),
    ];
    for (key, value, slot) in counts {
        match value.map(|v| check_count(v, 1, None)) {
            Some(Ok(n)) => *slot = n,
            Some(Err(e)) => sink.key(place, key, e),
            None => {}
        }
    }
    let max_calls = crate::model::limits::MAX_CALLS_PER_TURN as i64;
    match raw
        .max_parallel_calls
        .map(|v| check_count(v, 1, Some(max_calls)))
    {
        Some(Ok(n)) => p.max_parallel_calls = n,
        Some(Err(e)) => sink.key(place, "max_parallel_calls", e),
        None => {}
    }
    match raw.max_depth.map(|v| check_count(v, 0, Some(16))) {
        Some(Ok(n)) => p.max_depth = n,
        Some(Err(e)) => sink.key(place, "max_depth", e),
        None => {}
    }
    for (i, pattern) in raw
        .approval_patterns
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        if pattern.trim().is_empty() {
            let msg = "must not be empty (it would match every argument)".into();
            sink.key(place, &format!("approval_patterns[{i}]"), msg);
        }
        // `re:…` is a regular expression, checked here so a typo fails at load time;
        // anything else is a substring compared case- and whitespace-insensitively.
        if let Some(re) = pattern.strip_prefix(REGEX_PREFIX) {
            if let Err(e) = pattern_regex(re) {
                // regex's message is several lines with a caret; its last line says why.
                let text = e.to_string();
                let why = text.lines().last().unwrap_or_default().trim();
                let why = why.strip_prefix("error: ").unwrap_or(why);
                let msg = format!("not a valid regular expression: {why}");
                sink.key(place, &format!("approval_patterns[{i}]"), msg);
            }
            p.approval_patterns.push(pattern);
        } else {
            p.approval_patterns.push(normalise_text(&pattern));
        }
    }
    p
}

/// Resolves one tool; also returns its schema's property names when the schema is good.
fn resolve_tool(
    name: &str,
    section: Section<RawTool>,
    defaults: &RetryPolicy,
    env_defaults: &EnvDefaults,
    cwd: &Path,
    sink: &mut Sink,
) -> (ToolDef, Option<BTreeSet<String>>) {
    let Section { value: raw, broken } = section;
    let place = Where::Tool(name);
    if let Err(e) = validate::check_tool_name(name) {
        sink.tool(name, e);
    }
    let description = raw.description.clone().unwrap_or_default();
    if description.trim().is_empty() && !broken.contains("description") {
        let problem = if raw.description.is_some() {
            "must not be empty"
        } else {
            "missing"
        };
        sink.key(place, "description", problem.into());
    }
    // A tool without arguments may leave the schema out; providers still need one.
    let input_schema = raw
        .input_schema
        .clone()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    let props = match validate::check_input_schema(&input_schema) {
        Ok(p) => Some(p),
        Err(e) if !broken.contains("input_schema") => {
            sink.key(place, "input_schema", e);
            None
        }
        Err(_) => None,
    };
    let fields = RetryFields {
        timeout: raw.timeout.as_deref(),
        attempts: raw.attempts,
        backoff: raw.backoff.as_deref(),
        max_backoff: raw.max_backoff.as_deref(),
        max_retry_after: raw.max_retry_after.as_deref(),
    };
    let retry = resolve_retry(&fields, defaults, place, sink);
    let kind = resolve_kind(name, &raw, &broken, props.as_ref(), env_defaults, cwd, sink);
    let tool = ToolDef {
        name: name.to_string(),
        description,
        input_schema,
        kind,
        retry,
        idempotent: raw.idempotent.unwrap_or(false),
        fallback: raw
            .fallback
            .unwrap_or_default()
            .into_iter()
            .map(fallback_step)
            .collect(),
        stale: raw.stale.unwrap_or(false),
        approval: approval(raw.approval.as_deref(), place, sink),
        on_unknown: on_unknown(raw.on_unknown.as_deref(), place, sink),
    };
    (tool, props)
}

/// Command or HTTP: exactly one, each checked on its own terms.
fn resolve_kind(
    name: &str,
    raw: &RawTool,
    broken: &BTreeSet<String>,
    props: Option<&BTreeSet<String>>,
    env_defaults: &EnvDefaults,
    cwd: &Path,
    sink: &mut Sink,
) -> ToolKind {
    let place = Where::Tool(name);
    let output_cap = match raw.output_cap.map(|v| check_count(v, 1, None)) {
        Some(Ok(n)) => n as usize,
        Some(Err(e)) => {
            sink.key(place, "output_cap", e);
            DEFAULT_OUTPUT_CAP
        }
        None => DEFAULT_OUTPUT_CAP,
    };
    match (&raw.command, &raw.http) {
        (Some(_), Some(_)) => sink.tool(
            name,
            "set exactly one of `command` or `http`, not both".into(),
        ),
        (None, None) if !broken.contains("command") && !broken.contains("http") => {
            sink.tool(name, "missing `command` or `http` (set exactly one)".into());
        }
        (None, Some(http)) => {
            return ToolKind::Http(http_spec(name, http, raw, props, output_cap, sink));
        }
        _ => {}
    }
    let argv = raw.command.clone().unwrap_or_default();
    check_command(name, &argv, raw.command.is_some(), sink);
    let env = ChildEnv {
        env: &raw.env,
        set: &raw.set,
        inherit: raw.inherit.as_deref(),
        sandbox: SandboxKeys {
            sandbox: raw.sandbox.as_deref(),
            writable: &raw.writable,
            network: raw.network,
        },
    };
    ToolKind::Command(command_spec(
        argv,
        env,
        env_defaults,
        cwd,
        output_cap,
        place,
        sink,
    ))
}

fn http_spec(
    name: &str,
    http: &RawHttp,
    raw: &RawTool,
    props: Option<&BTreeSet<String>>,
    output_cap: usize,
    sink: &mut Sink,
) -> HttpSpec {
    let place = Where::Tool(name);
    for (key, present) in [
        ("env", raw.env.is_some()),
        ("set", raw.set.is_some()),
        ("inherit", raw.inherit.is_some()),
    ] {
        if present {
            let msg =
                format!("only command tools take `{key}`; http tools read `${{VAR}}` in headers");
            sink.key(place, key, msg);
        }
    }
    for (key, present) in [
        ("sandbox", raw.sandbox.is_some()),
        ("writable", raw.writable.is_some()),
        ("network", raw.network.is_some()),
    ] {
        if present {
            let msg = format!("only command tools take `{key}`; an http tool runs no process");
            sink.key(place, key, msg);
        }
    }
    let method = http.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
    if !METHODS.contains(&method.as_str()) {
        let msg = format!("must be one of {}, not {method:?}", METHODS.join(", "));
        sink.key(place, "http.method", msg);
    }
    let url = http.url.clone().unwrap_or_default();
    match &http.url {
        None => sink.key(place, "http.url", "missing".into()),
        Some(u) => check_url(u, props, place, sink),
    }
    let headers = http.headers.clone().unwrap_or_default();
    for (key, value) in &headers {
        if let Err(e) = validate::check_header_template(value) {
            sink.key(place, &format!("http.headers.{key}"), e);
        }
    }
    HttpSpec {
        method,
        url,
        headers,
        output_cap,
    }
}

fn check_url(url: &str, props: Option<&BTreeSet<String>>, place: Where<'_>, sink: &mut Sink) {
    if let Err(e) = validate::check_url_template(url) {
        sink.key(place, "http.url", e);
        return;
    }
    let (Some(props), Ok(holes)) = (props, validate::url_placeholders(url)) else {
        return;
    };
    for hole in holes.iter().filter(|h| !props.contains(&h.name)) {
        let msg = format!(
            "placeholder `{{{}}}` is not a property in input_schema",
            hole.name
        );
        sink.key(place, "http.url", msg);
    }
}

/// Fallbacks must name other existing tools, map onto real properties, and never loop.
fn check_fallbacks(
    tools: &BTreeMap<String, ToolDef>,
    props: &BTreeMap<String, Option<BTreeSet<String>>>,
    mcp: &BTreeMap<String, McpServer>,
    sink: &mut Sink,
) {
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, tool) in tools {
        let edges = graph.entry(name.clone()).or_default();
        for (i, step) in tool.fallback.iter().enumerate() {
            let key = format!("fallback[{i}]");
            if step.tool == *name {
                sink.key(
                    Where::Tool(name),
                    &format!("{key}.tool"),
                    "a tool cannot fall back to itself".into(),
                );
            } else if super::mcp::is_mcp_name(&step.tool, mcp) {
                // An MCP tool: known only once discovered at `start`, checked then.
            } else if !tools.contains_key(&step.tool) {
                sink.key(
                    Where::Tool(name),
                    &format!("{key}.tool"),
                    format!("unknown tool `{}`", step.tool),
                );
            } else {
                edges.push(step.tool.clone());
                check_map(name, &key, step, props, sink);
            }
        }
    }
    for cycle in validate::find_cycles(&graph) {
        let path = cycle.join(" -> ");
        sink.key(Where::Tool(&cycle[0]), "fallback", format!("cycle {path}"));
    }
}

/// `map = { from = "to" }`: `to` must be a property of the fallback's schema and
/// `from` of this tool's, or the rename silently does nothing.
fn check_map(
    name: &str,
    key: &str,
    step: &FallbackStep,
    props: &BTreeMap<String, Option<BTreeSet<String>>>,
    sink: &mut Sink,
) {
    let own = props.get(name).and_then(Option::as_ref);
    let target = props.get(&step.tool).and_then(Option::as_ref);
    for (from, to) in &step.map {
        if own.is_some_and(|p| !p.contains(from)) {
            let msg = format!("`{from}` is not a property in this tool's input_schema");
            sink.key(Where::Tool(name), &format!("{key}.map"), msg);
        }
        if target.is_some_and(|p| !p.contains(to)) {
            let msg = format!("`{to}` is not a property in `{}`'s input_schema", step.tool);
            sink.key(Where::Tool(name), &format!("{key}.map"), msg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cwd_is_the_tools_toml_directory() {
        assert_eq!(
            command_cwd(Path::new("conf/tools.toml")),
            PathBuf::from("conf")
        );
        assert_eq!(command_cwd(Path::new("tools.toml")), PathBuf::from("."));
        assert_eq!(command_cwd(Path::new("")), PathBuf::from("."));
    }
}

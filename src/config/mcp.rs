//! `[mcp.NAME]` sections of tools.toml (issue 16): MCP servers whose tools are
//! discovered when a run starts.
//!
//! A server gives either `command` (stdio) or `url` (streamable HTTP). Retry keys
//! inherit from `[defaults]` like a tool's; `idempotent`, `approval` and `fallback` name
//! the server's tools by the server's own names, since the list is not known until the
//! server is asked. Whether those names exist is checked at discovery (`tools::mcp`).

use std::collections::BTreeMap;
use std::path::Path;

use super::Sink;
use super::fields::{
    ChildEnv, EnvDefaults, RetryFields, approval, command_spec, fallback_step, on_unknown,
    resolve_retry,
};
use super::raw::{RawMcp, Section, Where};
use super::types::*;
use super::validate::{self, check_count};

/// Resolves every `[mcp.NAME]`; `cwd` is the tools.toml folder (the server's cwd).
pub fn resolve_servers(
    raw: BTreeMap<String, Section<RawMcp>>,
    defaults: &RetryPolicy,
    env_defaults: &EnvDefaults,
    cwd: &Path,
    sink: &mut Sink,
) -> BTreeMap<String, McpServer> {
    raw.into_iter()
        .map(|(name, section)| {
            let server = resolve_server(&name, section, defaults, env_defaults, cwd, sink);
            (name, server)
        })
        .collect()
}

/// True when `name` is `SERVER__TOOL` for a declared server.
pub fn is_mcp_name(name: &str, servers: &BTreeMap<String, McpServer>) -> bool {
    name.split_once(MCP_SEPARATOR)
        .is_some_and(|(server, tool)| !tool.is_empty() && servers.contains_key(server))
}

/// Server names become the prefix of tool names, so they must fit the provider's
/// tool-name shape and leave the separator unambiguous.
pub fn check_server_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if name.is_empty() || name.len() > 32 || !name.chars().all(ok_char) || name.contains("__") {
        return Err(
            "server name must match ^[A-Za-z0-9_-]{1,32}$ without `__` (tools are named SERVER__TOOL)"
                .into(),
        );
    }
    Ok(())
}

fn resolve_server(
    name: &str,
    section: Section<RawMcp>,
    defaults: &RetryPolicy,
    env_defaults: &EnvDefaults,
    cwd: &Path,
    sink: &mut Sink,
) -> McpServer {
    let Section { value: raw, broken } = section;
    let label = format!("mcp.{name}");
    let place = Where::Section(&label);
    if let Err(e) = check_server_name(name) {
        sink.at(place, e);
    }
    let fields = RetryFields {
        timeout: raw.timeout.as_deref(),
        attempts: raw.attempts,
        backoff: raw.backoff.as_deref(),
        max_backoff: raw.max_backoff.as_deref(),
        max_retry_after: None,
    };
    let retry = resolve_retry(&fields, defaults, place, sink);
    let output_cap = match raw.output_cap.map(|v| check_count(v, 1, None)) {
        Some(Ok(n)) => n as usize,
        Some(Err(e)) => {
            sink.key(place, "output_cap", e);
            DEFAULT_OUTPUT_CAP
        }
        None => DEFAULT_OUTPUT_CAP,
    };
    let transport = transport(&raw, &broken, place, env_defaults, cwd, output_cap, sink);
    let approvals = raw
        .approval
        .unwrap_or_default()
        .into_iter()
        .map(|(tool, value)| {
            let key = format!("approval.{tool}");
            let value = approval(
                Some(&value),
                Where::Section(&format!("{label}.{key}")),
                sink,
            );
            (tool, value)
        })
        .collect();
    let fallback = raw
        .fallback
        .unwrap_or_default()
        .into_iter()
        .map(|(tool, steps)| (tool, steps.into_iter().map(fallback_step).collect()))
        .collect();
    McpServer {
        name: name.to_string(),
        transport,
        tools: raw.tools,
        retry,
        idempotent: raw.idempotent.unwrap_or_default(),
        approval: approvals,
        fallback,
        on_unknown: on_unknown(raw.on_unknown.as_deref(), place, sink),
        output_cap,
    }
}

/// `command` or `url`: exactly one.
fn transport(
    raw: &RawMcp,
    broken: &std::collections::BTreeSet<String>,
    place: Where<'_>,
    env_defaults: &EnvDefaults,
    cwd: &Path,
    output_cap: usize,
    sink: &mut Sink,
) -> McpTransport {
    match (&raw.command, &raw.url) {
        (Some(_), Some(_)) => sink.at(
            place,
            "set exactly one of `command` (stdio) or `url` (streamable HTTP), not both".into(),
        ),
        (None, None) if !broken.contains("command") && !broken.contains("url") => sink.at(
            place,
            "missing `command` (stdio) or `url` (streamable HTTP); set exactly one".into(),
        ),
        (None, Some(url)) => {
            for (key, set) in [
                ("env", raw.env.is_some()),
                ("set", raw.set.is_some()),
                ("inherit", raw.inherit.is_some()),
                ("sandbox", raw.sandbox.is_some()),
                ("writable", raw.writable.is_some()),
                ("network", raw.network.is_some()),
            ] {
                if set {
                    let msg = format!("only stdio servers (`command`) take `{key}`");
                    sink.key(place, key, msg);
                }
            }
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                sink.key(place, "url", format!("must be an http(s) URL, not {url:?}"));
            }
            let headers = raw.headers.clone().unwrap_or_default();
            for (key, value) in &headers {
                if let Err(e) = validate::check_header_template(value) {
                    sink.key(place, &format!("headers.{key}"), e);
                }
            }
            return McpTransport::Http {
                url: url.clone(),
                headers,
            };
        }
        _ => {}
    }
    let argv = raw.command.clone().unwrap_or_default();
    if raw.command.is_some() && argv.first().is_none_or(|a| a.trim().is_empty()) {
        sink.key(
            place,
            "command",
            "must name a program (an argv such as [\"npx\", \"-y\", \"some-server\"])".into(),
        );
    }
    if raw.headers.is_some() {
        sink.key(
            place,
            "headers",
            "only HTTP servers (`url`) take `headers`".into(),
        );
    }
    let env = ChildEnv {
        env: &raw.env,
        set: &raw.set,
        inherit: raw.inherit.as_deref(),
        sandbox: super::fields::SandboxKeys {
            sandbox: raw.sandbox.as_deref(),
            writable: &raw.writable,
            network: raw.network,
        },
    };
    McpTransport::Stdio(command_spec(
        argv,
        env,
        env_defaults,
        cwd,
        output_cap,
        place,
        sink,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    #[test]
    fn a_stdio_server_inherits_defaults_and_keeps_its_lists() {
        let text = r#"
[defaults]
attempts = 2
[mcp.everything]
command = ["npx", "-y", "@modelcontextprotocol/server-everything"]
tools = ["echo", "get-sum"]
timeout = "10s"
idempotent = ["echo"]
approval = { "get-sum" = "always" }
"#;
        let cfg = parse(text, Path::new("conf/tools.toml")).unwrap();
        let s = &cfg.mcp["everything"];
        assert_eq!(s.retry.attempts, 2);
        assert_eq!(s.retry.timeout, std::time::Duration::from_secs(10));
        assert_eq!(
            s.tools.as_deref(),
            Some(&["echo".into(), "get-sum".into()][..])
        );
        assert_eq!(s.idempotent, ["echo"]);
        assert_eq!(s.approval["get-sum"], Approval::Always);
        let McpTransport::Stdio(spec) = &s.transport else {
            panic!("stdio expected");
        };
        assert_eq!(spec.argv[0], "npx");
        assert_eq!(spec.cwd, Path::new("conf"));
    }

    #[test]
    fn every_problem_in_a_server_is_reported() {
        let text = r#"
[mcp."bad__name"]
command = ["x"]
url = "ftp://x"
[mcp.h]
url = "ftp://x"
env = ["A"]
headers = { Authorization = "Bearer ${TOKEN" }
approval = { "w" = "sometimes" }
[mcp.none]
tools = ["a"]
"#;
        let errs = parse(text, Path::new("tools.toml"))
            .unwrap_err()
            .to_string();
        for needle in [
            "mcp.bad__name: server name must match",
            "mcp.bad__name: set exactly one of `command` (stdio) or `url`",
            "mcp.h.url: must be an http(s) URL",
            "mcp.h.env: only stdio servers",
            "mcp.h.headers.Authorization: unclosed",
            "mcp.h.approval.w.approval: must be",
            "mcp.none: missing `command` (stdio) or `url`",
        ] {
            assert!(errs.contains(needle), "{needle:?} not in:\n{errs}");
        }
    }

    #[test]
    fn fallbacks_may_name_mcp_tools_before_discovery() {
        let text = r#"
[tools.local]
description = "d"
command = ["true"]
fallback = [{ tool = "everything__echo" }]
[mcp.everything]
command = ["x"]
"#;
        assert!(parse(text, Path::new("tools.toml")).is_ok());
    }
}

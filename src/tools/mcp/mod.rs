//! MCP tool servers (issue 16): discovery, and one attempt of an MCP tool call.
//!
//! An MCP tool is a tool kind like command and HTTP tools: [`call`] runs one attempt,
//! and everything around it — schema check, approval gate, breaker, retries, fallbacks,
//! journal — is the one recovery chain every tool goes through. This module only says
//! what an attempt ended as:
//!
//! - a result → the tool's output (structured content if the server gives it, else the
//!   text, parsed as JSON when it is JSON);
//! - `isError` → the tool's error; its kind when the server names one
//!   (`{"error": KIND, ...}` as structured content or text), else `tool_bug`;
//! - JSON-RPC "invalid params" → `invalid_arguments`; "method not found" → `not_found`;
//!   "internal error" → `server_error`; any other code → `tool_bug`;
//! - the server could not be reached or started → `unavailable`, marked as proof the
//!   tool did not act (nothing was sent), so it is retried whatever the tool;
//! - the server died or timed out during the call → `unavailable` / `timeout`, without
//!   that proof: the retry layer retries it only for a tool declared `idempotent`; for
//!   any other tool the outcome is unknown and the loop escalates (or tells the model,
//!   `on_unknown = "tell_model"`) exactly as after a crash (docs/ARCHITECTURE.md §3.3).
//!
//! Servers are started once per run by [`server::Pool`] (on a thread of their own, so a
//! run's connection outlives the short runtime used for discovery), restarted after a
//! crash with backoff, and killed with their process group when the run's config is
//! dropped.

pub mod depth;
mod result;
mod server;

pub use server::{Pool, secrets_of};

use crate::config::types::{
    Approval, MCP_SEPARATOR, McpServer, McpSpec, ToolDef, ToolKind, ToolsConfig,
};
use crate::config::validate;
use crate::tools::CallContext;
use crate::tools::outcome::{AttemptResult, ErrorKind, ToolError};
use crate::trace::{NoteKind, TraceEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What a server said about one of its tools at `start`; stored in the run's config
/// snapshot so a resumed run offers exactly the same tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiscoveredTool {
    /// The server's name for it.
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// Discovered tools by server name.
pub type Discovered = BTreeMap<String, Vec<DiscoveredTool>>;

/// How long discovery waits for a server to start and list its tools.
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// One problem found while discovering or installing a server's tools.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub server: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mcp server `{}`: {}", self.server, self.message)
    }
}

/// Starts every server, asks each for its tools (blocking; call outside a runtime).
/// Returns the pool, which keeps the servers running for the run that follows.
pub fn discover(
    servers: &BTreeMap<String, McpServer>,
) -> (Arc<Pool>, Result<Discovered, Vec<Problem>>) {
    let pool = Arc::new(Pool::start(servers.clone()));
    let mut found = Discovered::new();
    let mut problems = Vec::new();
    for name in servers.keys() {
        match pool.list_blocking(name, DISCOVERY_TIMEOUT) {
            Ok(tools) => {
                found.insert(name.clone(), tools);
            }
            // Said on the terminal: the server's credentials never are (issue 22).
            Err(message) => problems.push(Problem {
                server: name.clone(),
                message: server::secrets_of(&servers[name]).text(&message),
            }),
        }
    }
    let result = if problems.is_empty() {
        Ok(found)
    } else {
        Err(problems)
    };
    (pool, result)
}

/// agentrun's name for a server's tool.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("{server}{MCP_SEPARATOR}{tool}")
}

/// Adds the discovered tools of every server to `cfg.tools`, checked like any tool:
/// names, schemas, and the server section's `tools`/`idempotent`/`approval`/`fallback`
/// must name tools the server offers.
pub fn install(cfg: &mut ToolsConfig, found: &Discovered) -> Result<(), Vec<Problem>> {
    let mut problems = Vec::new();
    let servers = cfg.mcp.clone();
    for (name, server) in &servers {
        // A server the task cannot reach was not started: it offers nothing here.
        let Some(listed) = found.get(name) else {
            continue;
        };
        let mut say = |message: String| {
            problems.push(Problem {
                server: name.clone(),
                message,
            })
        };
        let offered: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
        let named = server
            .tools
            .iter()
            .flatten()
            .map(|t| ("tools", t))
            .chain(server.idempotent.iter().map(|t| ("idempotent", t)))
            .chain(server.approval.keys().map(|t| ("approval", t)))
            .chain(server.fallback.keys().map(|t| ("fallback", t)));
        for (key, tool) in named {
            if !offered.contains(&tool.as_str()) {
                say(format!(
                    "`{key}` names `{tool}`, which the server does not offer (it offers: {})",
                    if offered.is_empty() {
                        "nothing".to_string()
                    } else {
                        offered.join(", ")
                    }
                ));
            }
        }
        let chosen = listed
            .iter()
            .filter(|t| server.tools.as_ref().is_none_or(|l| l.contains(&t.name)));
        for tool in chosen {
            match tool_def(server, tool) {
                Ok(def) if cfg.tools.contains_key(&def.name) => say(format!(
                    "its tool `{}` clashes with [tools.{}]",
                    tool.name, def.name
                )),
                Ok(def) => {
                    cfg.tools.insert(def.name.clone(), def);
                }
                Err(e) => say(format!("tool `{}`: {e}", tool.name)),
            }
        }
    }
    check_fallback_targets(cfg, found, &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Fallbacks that name MCP tools were taken on trust at parse time, and an MCP tool's
/// own fallbacks could not be checked before it existed; check both now. A fallback to
/// a server that was not started belongs to a tool the task cannot call.
fn check_fallback_targets(cfg: &ToolsConfig, found: &Discovered, problems: &mut Vec<Problem>) {
    for def in cfg.tools.values() {
        for step in &def.fallback {
            if cfg.tools.contains_key(&step.tool) {
                continue;
            }
            let (server, message) = match (&def.kind, step.tool.split_once(MCP_SEPARATOR)) {
                (_, Some((server, _)))
                    if cfg.mcp.contains_key(server) && !found.contains_key(server) =>
                {
                    continue;
                }
                (_, Some((server, _))) if cfg.mcp.contains_key(server) => (
                    server,
                    format!(
                        "`{}` falls back to `{}`, which the server does not offer",
                        def.name, step.tool
                    ),
                ),
                (ToolKind::Mcp(spec), _) => (
                    spec.server.as_str(),
                    format!(
                        "`fallback` of `{}` names unknown tool `{}`",
                        spec.tool, step.tool
                    ),
                ),
                _ => continue,
            };
            problems.push(Problem {
                server: server.to_string(),
                message,
            });
        }
    }
}

fn tool_def(server: &McpServer, tool: &DiscoveredTool) -> Result<ToolDef, String> {
    let name = tool_name(&server.name, &tool.name);
    validate::check_tool_name(&name)?;
    validate::check_input_schema(&tool.input_schema).map_err(|e| format!("input_schema {e}"))?;
    let description = if tool.description.trim().is_empty() {
        format!("{} (from MCP server {})", tool.name, server.name)
    } else {
        tool.description.clone()
    };
    Ok(ToolDef {
        name,
        description,
        input_schema: tool.input_schema.clone(),
        kind: ToolKind::Mcp(McpSpec {
            server: server.name.clone(),
            tool: tool.name.clone(),
            output_cap: server.output_cap,
        }),
        retry: server.retry.clone(),
        idempotent: server.idempotent.contains(&tool.name),
        fallback: server.fallback.get(&tool.name).cloned().unwrap_or_default(),
        stale: false,
        approval: server
            .approval
            .get(&tool.name)
            .copied()
            .unwrap_or(Approval::Auto),
        on_unknown: server.on_unknown,
    })
}

/// A task's `tools` list with `SERVER__*` expanded to that server's tools (sorted).
pub fn expand_subset(subset: &[String], cfg: &ToolsConfig) -> Vec<String> {
    let mut out = Vec::new();
    for name in subset {
        match name.strip_suffix(&format!("{MCP_SEPARATOR}*")) {
            Some(server) if cfg.mcp.contains_key(server) => {
                let prefix = format!("{server}{MCP_SEPARATOR}");
                out.extend(
                    cfg.tools
                        .keys()
                        .filter(|t| t.starts_with(&prefix))
                        .filter(|t| !out.contains(*t))
                        .cloned()
                        .collect::<Vec<_>>(),
                );
            }
            _ if !out.contains(name) => out.push(name.clone()),
            _ => {}
        }
    }
    out
}

/// One attempt of an MCP tool call, bounded by the tool's per-attempt timeout.
pub async fn call(
    spec: &McpSpec,
    def: &ToolDef,
    args: &Value,
    ctx: &CallContext<'_>,
) -> AttemptResult {
    let Some(pool) = ctx.mcp else {
        let msg = format!("{}: no connection to MCP server {}", def.name, spec.server);
        return Err(ToolError::new(ErrorKind::ToolBug, msg));
    };
    let request = server::CallRequest {
        server: spec.server.clone(),
        tool: spec.tool.clone(),
        args: args.clone(),
        meta: serde_json::json!({
            "agentrun/run_id": ctx.run_id,
            "agentrun/call_id": idempotency_key(ctx),
        }),
        timeout: def.retry.timeout,
    };
    let ended = pool.call(request).await;
    if let server::CallEnded::Answered {
        restarted: Some(start),
        ..
    } = &ended
    {
        ctx.events.emit(TraceEvent::Note {
            kind: NoteKind::McpServerRestarted,
            message: format!(
                "MCP server {} had stopped and was started again (start {start} in this run)",
                spec.server
            ),
            at_ms: None,
        });
    }
    let result = result::attempt_result(def, spec, ended);
    super::redacted(result, &pool.secrets(&spec.server))
}

/// The same key command tools get as `AGENTRUN_CALL_ID`: unique across runs, stable
/// across retries and resumes of the call.
fn idempotency_key(ctx: &CallContext<'_>) -> String {
    ctx.key.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use serde_json::json;
    use std::path::Path;

    fn config() -> ToolsConfig {
        let text = r#"
[mcp.ev]
command = ["x"]
idempotent = ["echo"]
approval = { "add" = "always" }
"#;
        parse(text, Path::new("tools.toml")).unwrap()
    }

    fn found(names: &[&str]) -> Discovered {
        let tools = names
            .iter()
            .map(|n| DiscoveredTool {
                name: n.to_string(),
                description: String::new(),
                input_schema: json!({"type": "object", "properties": {}}),
            })
            .collect();
        BTreeMap::from([("ev".to_string(), tools)])
    }

    #[test]
    fn discovered_tools_become_server_prefixed_tools() {
        let mut cfg = config();
        install(&mut cfg, &found(&["echo", "add"])).unwrap();
        let echo = &cfg.tools["ev__echo"];
        assert!(echo.idempotent);
        assert_eq!(echo.description, "echo (from MCP server ev)");
        assert_eq!(cfg.tools["ev__add"].approval, Approval::Always);
        assert!(!cfg.tools["ev__add"].idempotent);
    }

    #[test]
    fn names_the_server_does_not_offer_are_problems() {
        let mut cfg = config();
        let errs = install(&mut cfg, &found(&["echo"])).unwrap_err();
        assert_eq!(
            errs[0].to_string(),
            "mcp server `ev`: `approval` names `add`, which the server does not offer (it offers: echo)"
        );
    }

    #[test]
    fn a_bad_schema_is_reported_like_any_tools() {
        let mut cfg = config();
        let mut f = found(&["echo", "add"]);
        f.get_mut("ev").unwrap()[0].input_schema = json!({"type": "string"});
        let errs = install(&mut cfg, &f).unwrap_err();
        assert!(
            errs[0]
                .message
                .contains("tool `echo`: input_schema must be an object schema")
        );
    }

    #[test]
    fn server_star_expands_to_its_tools() {
        let mut cfg = config();
        install(&mut cfg, &found(&["echo", "add"])).unwrap();
        let subset = ["ev__*".to_string(), "ev__echo".to_string()];
        assert_eq!(expand_subset(&subset, &cfg), ["ev__add", "ev__echo"]);
    }
}

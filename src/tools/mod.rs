//! Tools: running one attempt of a command, HTTP or MCP tool, and checking arguments
//! against a tool's schema. Retries and fallbacks sit above this, in `recovery`.

mod before;
pub mod command;
mod env;
pub mod http;
pub mod mcp;
pub mod outcome;
pub mod sandbox;
pub mod spawn;
mod supervise;
pub mod trampoline;
pub mod unpassed;

use crate::clock::Clock;
use crate::config::types::{ToolDef, ToolKind};
use crate::redact::Secrets;
use crate::trace::EventSink;
use outcome::{AttemptResult, ToolError};
use serde_json::Value;

/// What a tool attempt may know about the call it belongs to.
pub struct CallContext<'a> {
    pub run_id: &'a str,
    /// The model's id for the call (trace events and the journal use it).
    pub call_id: &'a str,
    /// `AGENTRUN_CALL_ID`: the idempotency key, unique across every run in every
    /// database and stable across retries and resumes of this call ([`idempotency_key`]).
    pub key: &'a str,
    pub clock: &'a dyn Clock,
    pub events: &'a dyn EventSink,
    /// The run's MCP servers (started once per run); `None` when it has none. A
    /// connection, not configuration, so it travels with the call, not in `ToolDef`.
    pub mcp: Option<&'a mcp::Pool>,
    /// The call's `before_tool` hooks, for the fallback hops the chain reaches
    /// (`None`: the caller has none, as a notification's delivery).
    pub hooks: Option<&'a dyn ToolHooks>,
    /// The rate limits each attempt waits its turn under (docs/rate-limits.md).
    pub limits: Option<&'a crate::govern::Gate<'a>>,
}

/// What a tool's `before_tool` hooks decided (the driver asks them).
#[derive(Debug, Clone, PartialEq)]
pub enum HookAnswer {
    /// Run it with these arguments (a hook may have rewritten them).
    Run(Value),
    /// Do not run it: a hook blocked it, or failed.
    Refused(ToolError),
    /// A hook asks a person to approve it (with these arguments) first.
    Paused { args: Value, asked_by: String },
}

/// The `before_tool` hooks of one call, asked by the chain for each fallback hop (the
/// loop asks them for the tool the model named before the chain starts). Declared
/// here, below the chain, because the call's context carries them.
pub trait ToolHooks {
    fn before_tool<'a>(
        &'a self,
        tool: &'a str,
        args: Value,
        ctx: &'a CallContext<'a>,
    ) -> futures_util::future::LocalBoxFuture<'a, HookAnswer>;
}

/// Runs one attempt, bounded by the tool's per-attempt timeout.
/// A result nested deeper than [`crate::model::limits::MAX_DEPTH`] becomes a
/// `tool_bug`: stored, it could never be read back (issue 12 item 7).
///
/// Under a `rate` or `max_concurrent` of the tool (or its MCP server) the attempt
/// first waits its turn, shared with every run on the database, and holds its slot
/// until it ends; the wait is not part of the attempt's timeout.
pub async fn attempt(def: &ToolDef, args: &Value, ctx: &CallContext<'_>) -> AttemptResult {
    let gate = ctx.limits.and_then(|g| Some((g, g.tool_key(def)?)));
    let ticket = match &gate {
        // The store out of reach: the call goes ungoverned.
        Some((g, key)) => g.enter(key, 0, None).await.ok(),
        None => None,
    };
    let result = attempt_once(def, args, ctx).await;
    if let (Some((g, _)), Some(ticket)) = (gate, ticket) {
        g.settle(ticket, Some(0), None).await;
    }
    result
}

async fn attempt_once(def: &ToolDef, args: &Value, ctx: &CallContext<'_>) -> AttemptResult {
    let result = match &def.kind {
        ToolKind::Command(spec) => command::run(spec, def, args, ctx).await,
        ToolKind::Http(spec) => http::run(spec, def, args, ctx).await,
        ToolKind::Mcp(spec) => mcp::call(spec, def, args, ctx).await,
        // The driver runs an agent's calls as child runs (`runner::children`); no
        // chain reaches here with one (a fallback may not name an agent).
        ToolKind::Agent(_) => Err(outcome::ToolError::new(
            outcome::ErrorKind::ToolBug,
            format!("{}: a sub-agent is not run as a tool attempt", def.name),
        )),
    };
    let max = crate::model::limits::MAX_DEPTH;
    match result {
        Ok(v) if crate::model::limits::depth(&v) > max => Err(outcome::ToolError::new(
            outcome::ErrorKind::ToolBug,
            format!("{}: the result nests deeper than {max} levels", def.name),
        )),
        other => other,
    }
}

/// An attempt's result with every secret it may carry replaced (crate::redact): the one
/// place a tool's output and error messages enter agentrun.
pub(crate) fn redacted(result: AttemptResult, secrets: &Secrets) -> AttemptResult {
    if secrets.is_empty() {
        return result;
    }
    match result {
        Ok(mut v) => {
            secrets.json(&mut v);
            Ok(v)
        }
        Err(mut e) => {
            e.message = secrets.text(&e.message);
            Err(e)
        }
    }
}

/// `AGENTRUN_CALL_ID` for a call: `RUN:SALT:CALL` (docs/ARCHITECTURE.md §3.1). The run id
/// alone is 48 random bits; the run's salt (64 more, fixed at start and stored with the
/// run) keeps keys from two databases apart. The model's call id comes last, so a tool
/// can still read it as the part after the last `:`.
pub fn idempotency_key(run_id: &str, salt: &str, call_id: &str) -> String {
    if salt.is_empty() {
        format!("{run_id}:{call_id}")
    } else {
        format!("{run_id}:{salt}:{call_id}")
    }
}

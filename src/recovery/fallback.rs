//! Declared fallback chains (docs/ARCHITECTURE.md §3, `fallback = [{ tool, map }]`).
//!
//! **When a chain starts.** Only after a failure that a different tool could fix:
//! the transient kinds (timeout, rate_limited, unavailable, server_error) and
//! `tool_bug` (the tool itself is broken; the question may still be answerable
//! elsewhere). Never after:
//! - `permission_denied`: a denial is final; answering through another tool is exactly
//!   the workaround the seeds forbid.
//! - `not_found`: the primary source answered; a cache or mirror saying otherwise would
//!   be older news presented as fact. The model should ask the user to confirm.
//! - `invalid_arguments`, `conflict`: the request itself must change.
//! - malformed and guard kinds: no call was made, or policy/a person decided.
//!
//! **How it walks.** Hops run in declared order, each with its own retries. Arguments are
//! mapped by renaming keys listed in `map` (`{ q = "query" }`: `q` becomes `query`);
//! keys not listed pass through unchanged, and a renamed key wins over a passed-through
//! key of the same name. Non-object arguments pass through as they are. Mapped
//! arguments are checked against the hop's schema and the gate is consulted for the hop
//! (approval applies to fallbacks too). Only the primary's chain is walked, not the
//! hops' own chains, so a chain cannot loop.
//!
//! A hop's failure moves on to the next hop (a cache miss is a reason to try a mirror),
//! except a denial (`permission_denied`, `approval_denied`), which ends the chain, and
//! an `outcome_unknown` (a hop that is not idempotent timed out: it may have acted, so
//! nothing further runs). When
//! no hop succeeds the call fails with `all_tools_failed`, naming every tool tried.

use super::CallOutcome;
use crate::prompts::Prompts;
use crate::tools::outcome::{ErrorKind, ToolError};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Whether a failure of the tool asked for starts its fallback chain.
pub fn triggers(kind: ErrorKind) -> bool {
    kind.is_retryable() || kind == ErrorKind::ToolBug
}

/// Whether a hop's failure stops the chain instead of moving on.
pub(super) fn ends_chain(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::PermissionDenied | ErrorKind::ApprovalDenied | ErrorKind::OutcomeUnknown
    )
}

/// One tool of the chain that failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Tried {
    pub tool: String,
    pub attempts: u32,
    pub kind: ErrorKind,
}

impl Tried {
    pub fn new(tool: &str, attempts: u32, err: &ToolError) -> Tried {
        Tried {
            tool: tool.to_string(),
            attempts,
            kind: err.kind,
        }
    }

    pub(super) fn describe(&self) -> String {
        match self.attempts {
            0 => format!("{}: {}, not called", self.tool, self.kind.as_str()),
            1 => format!("{}: {} after 1 attempt", self.tool, self.kind.as_str()),
            n => format!("{}: {} after {n} attempts", self.tool, self.kind.as_str()),
        }
    }
}

/// Renames keys per `map`; see the module doc.
pub fn map_args(args: &Value, map: &BTreeMap<String, String>) -> Value {
    let Value::Object(obj) = args else {
        return args.clone();
    };
    let mut out: Map<String, Value> = obj
        .iter()
        .filter(|(k, _)| !map.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (from, to) in map {
        if let Some(v) = obj.get(from) {
            out.insert(to.clone(), v.clone());
        }
    }
    Value::Object(out)
}

pub(super) fn all_failed(tried: &[Tried], prompts: &Prompts) -> CallOutcome {
    let message = tried
        .iter()
        .map(Tried::describe)
        .collect::<Vec<_>>()
        .join("; ");
    let attempts = tried.iter().map(|t| t.attempts).sum();
    super::failed(
        &ToolError::new(ErrorKind::AllToolsFailed, message),
        attempts,
        prompts,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mapped_keys_are_renamed_and_others_pass_through() {
        let map = BTreeMap::from([("q".to_string(), "query".to_string())]);
        let args = json!({"q": "refund", "limit": 3, "query": "ignored"});
        assert_eq!(
            map_args(&args, &map),
            json!({"query": "refund", "limit": 3})
        );
        assert_eq!(map_args(&json!("text"), &map), json!("text"));
    }

    #[test]
    fn only_failures_another_tool_could_fix_start_a_chain() {
        let starting: Vec<_> = ErrorKind::ALL
            .into_iter()
            .filter(|k| triggers(*k))
            .collect();
        use ErrorKind::*;
        assert_eq!(
            starting,
            vec![Timeout, RateLimited, Unavailable, ServerError, ToolBug]
        );
    }

    #[test]
    fn the_summary_names_each_tool() {
        let t = |tool: &str, attempts, kind| Tried {
            tool: tool.into(),
            attempts,
            kind,
        };
        let tried = [
            t("search_kb", 3, ErrorKind::Timeout),
            t("kb_cache", 1, ErrorKind::NotFound),
            t("kb_mirror", 0, ErrorKind::SchemaViolation),
        ];
        let outcome = all_failed(&tried, &Prompts::builtin());
        assert_eq!(outcome.attempts, 4);
        assert_eq!(
            outcome.content["message"],
            "search_kb: timeout after 3 attempts; kb_cache: not_found after 1 attempt; kb_mirror: schema_violation, not called"
        );
    }
}

/// The fallback tools whose results, in `messages`, are marked stale
/// (`{"result", "via", "stale": true}`), each once, in the order first seen: what an
/// answer built on them should disclose to the person reading it.
pub fn stale_sources(messages: &[crate::model::Message]) -> Vec<String> {
    let mut via: Vec<String> = Vec::new();
    let results = messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|p| match p {
            crate::model::Part::ToolResult { content, .. } => Some(content),
            _ => None,
        });
    for content in results {
        let stale = content.get("stale").and_then(serde_json::Value::as_bool) == Some(true);
        let hop = content.get("via").and_then(serde_json::Value::as_str);
        if let (true, Some(hop)) = (stale, hop)
            && !via.iter().any(|v| v == hop)
        {
            via.push(hop.to_string());
        }
    }
    via
}

#[cfg(test)]
mod stale_tests {
    use super::stale_sources;
    use crate::model::{Message, Part, Role};
    use serde_json::json;

    fn result(content: serde_json::Value) -> Message {
        Message {
            role: Role::Tool,
            content: vec![Part::ToolResult {
                call_id: "c".into(),
                content,
                is_error: false,
            }],
        }
    }

    #[test]
    fn only_fallback_results_marked_stale_are_named_once_each() {
        let messages = [
            result(json!({"result": 1, "via": "kb_cache", "stale": true})),
            result(json!({"result": 2, "via": "mirror", "stale": false})),
            result(json!({"stale": true})),
            result(json!({"result": 3, "via": "kb_cache", "stale": true})),
        ];
        assert_eq!(stale_sources(&messages), vec!["kb_cache".to_string()]);
    }
}

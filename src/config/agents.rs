//! `[agents.NAME]` in tools.toml (issue 26): sub-agents the model calls like tools.
//!
//! ```toml
//! [agents.research]
//! task = "agents/research.md"        # its own model, tools subset, prompts, output_schema
//! description = "Research one question and answer it with sources"
//! # input_schema defaults to { task: string }
//! ```
//!
//! Each agent becomes a [`ToolDef`] of kind [`ToolKind::Agent`], so it is offered,
//! checked against its schema, hooked, journaled and run in parallel like any tool;
//! what calling one does (a child run in the same database) is `runner::children`.

use super::Sink;
pub use super::raw::RawAgent;
use super::raw::{Section, Where};
pub use super::types::DEFAULT_MAX_DEPTH;
use super::types::*;
use super::validate;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The schema of an agent that gives none: one string, the work to do.
pub fn default_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"task": {"type": "string", "description": "The work to hand to this agent, in full: it sees nothing else of this conversation."}},
        "required": ["task"]
    })
}

/// Resolves every `[agents.NAME]` into `tools` (a name a tool has already is refused).
pub(super) fn resolve(
    raw: BTreeMap<String, Section<RawAgent>>,
    tools: &mut BTreeMap<String, ToolDef>,
    cwd: &Path,
    sink: &mut Sink,
) {
    for (name, section) in raw {
        let place_name = format!("agents.{name}");
        let place = Where::Section(&place_name);
        if let Err(e) = validate::check_tool_name(&name) {
            sink.at(place, e);
        }
        if tools.contains_key(&name) {
            sink.at(
                place,
                format!(
                    "`{name}` is also a [tools.{name}]: an agent and a tool need different names"
                ),
            );
            continue;
        }
        if let Some(def) = resolve_one(&name, section, cwd, place, sink) {
            tools.insert(name, def);
        }
    }
}

fn resolve_one(
    name: &str,
    section: Section<RawAgent>,
    cwd: &Path,
    place: Where<'_>,
    sink: &mut Sink,
) -> Option<ToolDef> {
    let Section { value: raw, broken } = section;
    let task = match raw.task.as_deref().map(str::trim) {
        Some(t) if !t.is_empty() => Some(t.to_string()),
        Some(_) => {
            sink.key(place, "task", "must not be empty".into());
            None
        }
        None if broken.contains("task") => None,
        None => {
            let msg = "missing: the agent's task file, e.g. task = \"agents/research.md\"";
            sink.key(place, "task", msg.into());
            None
        }
    };
    let description = raw.description.clone().unwrap_or_default();
    if description.trim().is_empty() && !broken.contains("description") {
        let problem = if raw.description.is_some() {
            "must not be empty"
        } else {
            "missing: say what the agent does, so the model knows when to call it"
        };
        sink.key(place, "description", problem.into());
    }
    let input_schema = raw.input_schema.unwrap_or_else(default_input_schema);
    if let Err(e) = validate::check_input_schema(&input_schema)
        && !broken.contains("input_schema")
    {
        sink.key(place, "input_schema", e);
    }
    let task = task?;
    Some(ToolDef {
        name: name.to_string(),
        description,
        input_schema,
        kind: ToolKind::Agent(AgentSpec {
            task_path: cwd.join(&task),
            task,
        }),
        // A call runs the child run once; running it "again" finds that same child
        // by the call's key (`runner::children`), so it is safe to re-run.
        retry: RetryPolicy {
            attempts: 1,
            ..RetryPolicy::default()
        },
        idempotent: true,
        fallback: Vec::new(),
        stale: false,
        approval: Approval::Never,
        on_unknown: OnUnknown::Escalate,
    })
}

/// The agents of a config, by name.
pub fn agents(cfg: &ToolsConfig) -> impl Iterator<Item = (&String, &AgentSpec)> {
    cfg.tools.iter().filter_map(|(name, def)| match &def.kind {
        ToolKind::Agent(spec) => Some((name, spec)),
        _ => None,
    })
}

/// The names of a config's agents.
pub fn agent_names(cfg: &ToolsConfig) -> BTreeSet<&str> {
    agents(cfg).map(|(n, _)| n.as_str()).collect()
}

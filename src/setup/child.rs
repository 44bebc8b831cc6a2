//! A child run's config snapshot (issue 26), made from its parent's snapshot and the
//! agent's task file: the parent's tools.toml, MCP tools and program digests as they
//! were when the parent started; the agent's own model (else the parent's), tools
//! subset, model settings, `output_schema` and budgets; its `prompts/` folder beside
//! the task file when it has one (else the parent's prompts).

use crate::config::{self, AgentSpec, agents};
use crate::model::ModelSettings;
use crate::prompts::Prompts;
use crate::setup::{self, DEFAULT_MAX_STEPS, DEFAULT_MAX_TOKENS, Resolved, SetupError, Snapshot};
use crate::task::{self, Task};
use crate::tools::mcp;
use std::path::{Path, PathBuf};

/// What a child run starts from: its snapshot, its task, and its own budgets (before
/// the parent's remaining ones cap them).
pub struct ChildPlan {
    pub snapshot: Snapshot,
    pub task: Task,
    pub max_steps: u32,
    pub max_tokens: u64,
}

/// Reads the agent's task file into the plan of a child of `parent`.
pub fn plan(parent: &Snapshot, agent: &AgentSpec) -> Result<ChildPlan, SetupError> {
    let task = task::load(&agent.task_path)?;
    let at = |message: String| SetupError::Input {
        path: agent.task_path.display().to_string(),
        message,
    };
    let (models, scripts) = if task.models.is_empty() {
        (parent.models.clone(), parent.scripts.clone())
    } else {
        let scripts = setup::read_scripts(&task.models, &task.path)?;
        (task.models.clone(), scripts)
    };
    let mut settings = ModelSettings::default();
    task.settings.apply(&mut settings);
    let own_prompts = task.path.parent().map(|d| d.join("prompts"));
    let prompts = match own_prompts.filter(|d| d.is_dir() && !same_dir(d, parent)) {
        Some(dir) => Prompts::load(&dir)?,
        None => parent.prompts.clone(),
    };
    let tool_subset = match &task.tools {
        Some(subset) => Some(subset_of(parent, subset).map_err(at)?),
        None => None,
    };
    let snapshot = Snapshot {
        tools_path: parent.tools_path.clone(),
        tools_toml: parent.tools_toml.clone(),
        prompts,
        models,
        scripts,
        tool_subset,
        mcp_tools: parent.mcp_tools.clone(),
        max_output_tokens: settings.max_output_tokens,
        settings,
        call_salt: format!("{:016x}", rand::random::<u64>()),
        program_digests: parent.program_digests.clone(),
        output: task.output.clone(),
        depth: parent.depth + 1,
        notify: parent.notify.clone(),
        carried: None,
    };
    Ok(ChildPlan {
        max_steps: task.max_steps.unwrap_or(DEFAULT_MAX_STEPS),
        max_tokens: task.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        snapshot,
        task,
    })
}

/// Whether `dir` is the parent's own `prompts/` (beside its tools.toml).
fn same_dir(dir: &Path, parent: &Snapshot) -> bool {
    let theirs = Path::new(&parent.tools_path)
        .parent()
        .map(|d| d.join("prompts"));
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    theirs.is_some_and(|t| canon(&t) == canon(dir))
}

/// The agent's `tools` subset, with `SERVER__*` expanded, each name checked against
/// the parent's tools.toml.
fn subset_of(parent: &Snapshot, subset: &[String]) -> Result<Vec<String>, String> {
    let mut cfg = config::parse(&parent.tools_toml, &PathBuf::from(&parent.tools_path))
        .map_err(|e| e.to_string())?;
    // Names only: the tools themselves were checked when the parent started.
    let _ = mcp::install(&mut cfg, &parent.mcp_tools);
    let names = mcp::expand_subset(subset, &cfg);
    if let Some(missing) = names.iter().find(|n| !cfg.tools.contains_key(*n)) {
        let defined: Vec<&str> = cfg.tools.keys().map(String::as_str).collect();
        return Err(format!(
            "front matter `tools` names `{missing}`, which {} does not define (defined: {})",
            parent.tools_path,
            defined.join(", ")
        ));
    }
    Ok(names)
}

/// Every sub-agent a run about to start can call, planned and resolved as its child
/// will be, so a bad agent task file (or model) stops `start` with exit 2 instead of
/// failing the model's call mid-run. One it cannot call may name tools of MCP servers
/// that were not started for this task.
pub fn check_agents(resolved: &Resolved) -> Result<(), SetupError> {
    let reachable = setup::reachable(&resolved.tools, resolved.snapshot.tool_subset.as_deref());
    for (name, spec) in agents::agents(&resolved.tools) {
        if reachable.as_ref().is_some_and(|r| !r.contains(name)) {
            continue;
        }
        let plan = plan(&resolved.snapshot, spec)?;
        setup::resolve(plan.snapshot)?;
    }
    Ok(())
}

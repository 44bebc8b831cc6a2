//! Turning the user's files into a run: resolving paths, validating everything before
//! anything is written, and the config snapshot that makes a resumed run use exactly
//! what it started with.

pub mod child;

use crate::config::{self, ConfigErrors, McpServer, ToolsConfig};
use crate::model::anthropic::Anthropic;
use crate::model::openai::OpenAi;
use crate::model::script::ScriptModel;
use crate::model::settings::SettingsInput;
use crate::model::{ModelSettings, ModelSpec, Provider};
use crate::prompts::{Prompts, PromptsError};
use crate::task::{self, Task, TaskError};
use crate::tools::mcp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const DEFAULT_MAX_STEPS: u32 = 30;
pub const DEFAULT_MAX_TOKENS: u64 = 200_000;

/// Problems with what the user gave us; all exit 2 and write nothing.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Task(#[from] TaskError),
    #[error(transparent)]
    Config(#[from] ConfigErrors),
    #[error(transparent)]
    Prompts(#[from] PromptsError),
    #[error("{path}: {message}")]
    Input { path: String, message: String },
    #[error("{0}")]
    Usage(String),
}

/// What a run is started with, stored in `runs.snapshot`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Where tools.toml was (relative command paths resolve against its folder).
    pub tools_path: String,
    pub tools_toml: String,
    pub prompts: Prompts,
    /// Model specs in fallback order.
    pub models: Vec<String>,
    /// Script texts by spec, for `script:` models. Stored beside the snapshot's JSON,
    /// not in it (`Store::scripts`): a script can be megabytes that only driving the
    /// run needs. Snapshots written before that have them here.
    #[serde(default, skip_serializing)]
    pub scripts: BTreeMap<String, String>,
    /// Tools offered to the model; `None` = all in tools.toml. `SERVER__*` is expanded
    /// at start, so this lists names.
    pub tool_subset: Option<Vec<String>>,
    /// The tools each MCP server offered at start: a resumed run offers the same.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_tools: mcp::Discovered,
    pub max_output_tokens: u32,
    /// How the model is asked (front matter and command line, defaults filled in).
    /// Absent in snapshots written before it existed: the defaults then.
    #[serde(default)]
    pub settings: ModelSettings,
    /// Random per-run salt for `AGENTRUN_CALL_ID` (issue 12): with it the key is unique
    /// across databases even should two run ids collide. Empty for runs started before.
    #[serde(default)]
    pub call_salt: String,
    /// Tool name → (program file, SHA-256) at start; `resume` says when one changed.
    /// Empty for runs started before (issue 12).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub program_digests: BTreeMap<String, (String, String)>,
    /// What the final answer must be (the task's `output_schema`, issue 26).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<crate::model::output::OutputSpec>,
    /// How deep this run is among sub-agents (issue 26): 0 for a run people start, its
    /// parent's plus one for a child run.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
    /// The config file's `[notify]`, kept when tools.toml has none of its own (issue
    /// 24): events of this run go where the person starting it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<NotifySnapshot>,
    /// A fork carried another run's in-doubt turn: that step's calls are the other
    /// run's and keep its `AGENTRUN_CALL_ID` (docs/security.md, Forks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried: Option<CarriedCalls>,
}

/// Whose calls one step of a fork holds (written by the store when it forks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CarriedCalls {
    pub run_id: String,
    pub salt: String,
    pub step: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// A `[notify]` section from outside tools.toml, as a snapshot keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotifySnapshot {
    /// The file it came from (named in errors).
    pub file: String,
    /// Where a relative `command` runs.
    pub cwd: String,
    /// The section alone, as TOML.
    pub toml: String,
}

impl Snapshot {
    /// `AGENTRUN_CALL_ID` of call `call_id` of `step` in run `run_id`: the run's own
    /// key, or the original run's for a step a fork carried.
    pub fn call_key(&self, run_id: &str, step: u32, call_id: &str) -> String {
        match &self.carried {
            Some(c) if c.step == step => crate::tools::idempotency_key(&c.run_id, &c.salt, call_id),
            _ => crate::tools::idempotency_key(run_id, &self.call_salt, call_id),
        }
    }

    /// Where this run's events go: tools.toml's `[notify]`, else the config file's as
    /// the run began with; `None` when neither says (or, for a snapshot damaged since,
    /// when it no longer parses).
    pub fn notify(&self) -> Option<crate::config::NotifyConfig> {
        let tools = config::parse(&self.tools_toml, Path::new(&self.tools_path)).ok()?;
        tools.notify.or_else(|| self.outside_notify())
    }

    /// The config file's `[notify]` the run began with.
    fn outside_notify(&self) -> Option<crate::config::NotifyConfig> {
        let n = self.notify.as_ref()?;
        config::notify_section(&n.toml, Path::new(&n.file), Path::new(&n.cwd))
            .ok()
            .flatten()
    }
}

impl Resolved {
    /// [`Snapshot::notify`] without parsing tools.toml again.
    pub fn notify(&self) -> Option<crate::config::NotifyConfig> {
        self.tools
            .notify
            .clone()
            .or_else(|| self.snapshot.outside_notify())
    }
}

/// A validated snapshot, ready to drive.
pub struct Resolved {
    pub snapshot: Snapshot,
    pub tools: ToolsConfig,
    pub models: Vec<Provider>,
    /// Models skipped after failing, for the rest of this process's run.
    pub breaker: crate::model::retry::ModelBreaker,
    /// The run's MCP servers, when tools.toml declares any.
    pub mcp: Option<Arc<mcp::Pool>>,
}

pub struct StartOptions {
    pub task: PathBuf,
    /// The task's text when it did not come from the file `task` (`start -`,
    /// `start --prompt`); `task` then only names it and places relative paths.
    pub task_text: Option<String>,
    pub tools: Option<PathBuf>,
    pub model: Option<String>,
    pub max_steps: Option<u32>,
    pub max_tokens: Option<u64>,
    /// Model settings from the command line: over the task's, over the defaults.
    pub settings: SettingsInput,
    /// `[notify]` of the config file, used when tools.toml has none.
    pub notify: Option<NotifySnapshot>,
}

pub struct Prepared {
    pub task: Task,
    pub resolved: Resolved,
    pub max_steps: u32,
    pub max_tokens: u64,
}

/// Reads and validates everything `start` needs.
pub fn prepare_start(opts: &StartOptions) -> Result<Prepared, SetupError> {
    let task = match &opts.task_text {
        Some(text) => task::parse(text, &opts.task)?,
        None => task::load(&opts.task)?,
    };
    let tools_path = find_tools(&opts.task, opts.tools.as_deref())?;
    let (tools_toml, prompts, cfg) = match &tools_path {
        Some(p) => {
            let (mut cfg, text) = config::load(p)?;
            // Hidden from every sandboxed child, the MCP servers discovery starts first.
            crate::tools::sandbox::protect_file(p);
            // Before discovery starts the MCP servers (issue 23: spawned without fork).
            crate::tools::spawn::resolve_programs(&mut cfg);
            let dir = p.parent().unwrap_or(Path::new("."));
            (text, Prompts::load(&dir.join("prompts"))?, cfg)
        }
        None => (String::new(), Prompts::builtin(), ToolsConfig::default()),
    };
    let models = match &opts.model {
        Some(m) => {
            ModelSpec::parse(m).map_err(|e| SetupError::Usage(format!("--model: {e}")))?;
            vec![m.clone()]
        }
        None => task.models.clone(),
    };
    if models.is_empty() {
        // A --prompt task has no front matter to point to (issue 27).
        let front_matter = if task.path == std::path::Path::new("(prompt)") {
            ""
        } else {
            "set `model = \"openai:gpt-4o-mini\"` in the front matter, "
        };
        return Err(SetupError::Input {
            path: task.path.display().to_string(),
            message: format!(
                "no model: {front_matter}pass --model openai:gpt-4o-mini (or anthropic:…, \
                 script:…), or set a default with AGENTRUN_MODEL or `model` in \
                 .agentrun/config.toml"
            ),
        });
    }
    if task.output.is_some() && cfg.tools.contains_key(crate::model::output::ANSWER_TOOL) {
        return Err(SetupError::Input {
            path: tools_path
                .as_deref()
                .unwrap_or(Path::new("tools.toml"))
                .display()
                .to_string(),
            message: format!(
                "tool `{}` has the name agentrun gives the structured answer of a task with \
                 `output_schema`: rename it",
                crate::model::output::ANSWER_TOOL
            ),
        });
    }
    let scripts = read_scripts(&models, &task.path)?;
    let mut settings = ModelSettings::default();
    task.settings.apply(&mut settings);
    opts.settings.apply(&mut settings);
    check_pricing(&settings, &models)?;
    // MCP servers start now and stay up for the run (discovery, issue 16), but only
    // those whose tools the task can call (issue 22: `tools = []` started them all).
    let servers = servers_used(&cfg, task.tools.as_deref());
    let (pool, mcp_tools) = if servers.is_empty() {
        (None, mcp::Discovered::new())
    } else {
        let (pool, found) = mcp::discover(&servers);
        let path = tools_path.as_deref().unwrap_or(Path::new("tools.toml"));
        (Some(pool), found.map_err(|p| mcp_problems(path, &p))?)
    };
    let mut snapshot = Snapshot {
        tools_path: tools_path
            .as_deref()
            .map(|p| absolute(p).display().to_string())
            .unwrap_or_else(|| "tools.toml".into()),
        tools_toml,
        prompts,
        models,
        scripts,
        tool_subset: task.tools.clone(),
        mcp_tools,
        max_output_tokens: settings.max_output_tokens,
        settings,
        call_salt: format!("{:016x}", rand::random::<u64>()),
        program_digests: crate::digest::program_digests(&cfg),
        output: task.output.clone(),
        depth: 0,
        notify: cfg.notify.is_none().then(|| opts.notify.clone()).flatten(),
        carried: None,
    };
    if let Some(subset) = &snapshot.tool_subset {
        let mut with_mcp = cfg.clone();
        // Names only: problems in the tools themselves are reported by `resolve_with`.
        let _ = mcp::install(&mut with_mcp, &snapshot.mcp_tools);
        snapshot.tool_subset = Some(mcp::expand_subset(subset, &with_mcp));
    }
    let resolved = resolve_with(snapshot, pool)?;
    // Each sub-agent's task file, read now as its child will read it (issue 26): a bad
    // one stops the run before anything is written, not mid-run.
    child::check_agents(&resolved)?;
    Ok(Prepared {
        max_steps: task.max_steps.unwrap_or(DEFAULT_MAX_STEPS),
        max_tokens: task.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        task,
        resolved,
    })
}

/// `resume --model SPEC`, `runs fork --model SPEC`: the run continues with SPEC alone.
/// A script path resolves beside the task file first, then in the current folder, as
/// at start; the script is read and checked whole now (a resumed run reads each turn
/// only when it comes).
pub fn switch_model(
    snapshot: &mut Snapshot,
    spec: &str,
    task_path: &str,
) -> Result<(), SetupError> {
    let parsed = ModelSpec::parse(spec).map_err(|e| SetupError::Usage(format!("--model: {e}")))?;
    if let ModelSpec::Script(path) = parsed {
        let beside = Path::new(task_path)
            .parent()
            .unwrap_or(Path::new(""))
            .join(&path);
        let chosen = if beside.is_file() { beside } else { path };
        let shown = chosen.display().to_string();
        let text = std::fs::read_to_string(&chosen).map_err(|e| SetupError::Input {
            path: shown.clone(),
            message: format!("cannot read script for --model {spec}: {e}"),
        })?;
        ScriptModel::check(&shown, &text).map_err(SetupError::Usage)?;
        snapshot.scripts.insert(spec.to_string(), text);
    }
    snapshot.models = vec![spec.to_string()];
    Ok(())
}

/// Replaces a snapshot's tools: the tools.toml at `path` and the prompts beside it,
/// read and checked as at start (`runs fork --tools`, issue 21). The model list, the
/// task's tool subset and the call salt stay.
pub fn retool(snapshot: &mut Snapshot, path: &Path) -> Result<(), SetupError> {
    let (cfg, text) = config::load(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    snapshot.prompts = Prompts::load(&dir.join("prompts"))?;
    snapshot.tools_toml = text;
    snapshot.tools_path = absolute(path).display().to_string();
    snapshot.program_digests = crate::digest::program_digests(&cfg);
    // The servers are asked for their tools now, as at start; they start again when
    // the fork first calls one.
    let servers = servers_used(&cfg, snapshot.tool_subset.as_deref());
    snapshot.mcp_tools = if servers.is_empty() {
        mcp::Discovered::new()
    } else {
        let (_pool, found) = mcp::discover(&servers);
        found.map_err(|p| mcp_problems(path, &p))?
    };
    Ok(())
}

/// A money budget needs a price for every model the run may use (issue 15): the
/// shipped table's, or the run's own `price`.
pub fn check_pricing(settings: &ModelSettings, models: &[String]) -> Result<(), SetupError> {
    if settings.max_cost.is_none() {
        return Ok(());
    }
    let pricing = settings.pricing();
    match models.iter().find(|m| pricing.price(m).is_none()) {
        None => Ok(()),
        Some(m) => Err(SetupError::Usage(format!(
            "max_cost needs a price for `{m}`, which the price table does not know: set \
             `price = {{ input = …, output = …, cached_input = … }}` (USD per million \
             tokens) in the task's front matter"
        ))),
    }
}

/// Validates a snapshot (fresh, or read back from the store) into live parts.
pub fn resolve(snapshot: Snapshot) -> Result<Resolved, SetupError> {
    resolve_with(snapshot, None)
}

/// [`resolve`], reusing the MCP servers discovery started (`None`: they start on first
/// use, as on resume).
pub(crate) fn resolve_with(
    snapshot: Snapshot,
    pool: Option<Arc<mcp::Pool>>,
) -> Result<Resolved, SetupError> {
    let tools_path = PathBuf::from(&snapshot.tools_path);
    let mut tools = config::parse(&snapshot.tools_toml, &tools_path)?;
    crate::tools::sandbox::protect_file(&tools_path);
    // Once per run: no step searches PATH, nor forks for the child to (issue 23).
    crate::tools::spawn::resolve_programs(&mut tools);
    let pool = if tools.mcp.is_empty() {
        None
    } else {
        mcp::install(&mut tools, &snapshot.mcp_tools).map_err(|p| mcp_problems(&tools_path, &p))?;
        Some(pool.unwrap_or_else(|| Arc::new(mcp::Pool::start(tools.mcp.clone()))))
    };
    if let Some(subset) = &snapshot.tool_subset {
        for name in subset {
            if !tools.tools.contains_key(name) {
                let defined: Vec<&str> = tools.tools.keys().map(String::as_str).collect();
                return Err(SetupError::Input {
                    path: snapshot.tools_path.clone(),
                    message: format!(
                        "the task's front matter `tools` names `{name}`, which is not defined here (defined: {})",
                        if defined.is_empty() {
                            "none".to_string()
                        } else {
                            defined.join(", ")
                        }
                    ),
                });
            }
        }
    }
    let models = snapshot
        .models
        .iter()
        .map(|spec| build_provider(spec, &snapshot.scripts, &snapshot.settings))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Resolved {
        snapshot,
        tools,
        models,
        breaker: Default::default(),
        mcp: pool,
    })
}

/// Every MCP problem, one per line, as a bad-input error naming the file.
/// The tools a task can reach (issue 22): its `tools` list, the fallbacks of those
/// tools (an MCP server's too), and the `tools` lists of the sub-agents among them, in
/// turn. `None`: every tool — the task has no list, or one of those sub-agents has
/// none or a task file that cannot be read (`start` reports the file afterwards).
pub fn reachable(cfg: &ToolsConfig, subset: Option<&[String]>) -> Option<Vec<String>> {
    let mut names: Vec<String> = subset?.to_vec();
    let mut i = 0;
    while i < names.len() {
        let name = names[i].clone();
        i += 1;
        let mut more: Vec<String> = Vec::new();
        if let Some((server, _)) = name.split_once(config::MCP_SEPARATOR)
            && let Some(def) = cfg.mcp.get(server)
        {
            more.extend(def.fallback.values().flatten().map(|s| s.tool.clone()));
        }
        if let Some(tool) = cfg.tools.get(&name) {
            more.extend(tool.fallback.iter().map(|s| s.tool.clone()));
            if let config::ToolKind::Agent(agent) = &tool.kind {
                more.extend(task::load(&agent.task_path).ok()?.tools?);
            }
        }
        for n in more {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    Some(names)
}

/// The MCP servers `start` starts: those with a tool the task can reach
/// ([`reachable`]: `SERVER__TOOL` or `SERVER__*`). No `tools` list means every server;
/// `tools = []` means none (issue 22: every server was started).
pub fn servers_used(cfg: &ToolsConfig, subset: Option<&[String]>) -> BTreeMap<String, McpServer> {
    let Some(names) = reachable(cfg, subset) else {
        return cfg.mcp.clone();
    };
    let named = |server: &str| {
        names.iter().any(|n| {
            n.split_once(config::MCP_SEPARATOR)
                .is_some_and(|(s, _)| s == server)
        })
    };
    cfg.mcp
        .iter()
        .filter(|(name, _)| named(name))
        .map(|(name, def)| (name.clone(), def.clone()))
        .collect()
}

fn mcp_problems(path: &Path, problems: &[mcp::Problem]) -> SetupError {
    let lines: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    SetupError::Input {
        path: path.display().to_string(),
        message: lines.join("\n"),
    }
}

pub(crate) fn build_provider(
    spec: &str,
    scripts: &BTreeMap<String, String>,
    settings: &ModelSettings,
) -> Result<Provider, SetupError> {
    let parsed = ModelSpec::parse(spec).map_err(SetupError::Usage)?;
    let usage = |e: crate::model::ModelError| SetupError::Usage(format!("model `{spec}`: {e}"));
    Ok(match parsed {
        ModelSpec::OpenAi(m) => Provider::OpenAi(OpenAi::from_env(&m, settings).map_err(usage)?),
        ModelSpec::Anthropic(m) => {
            Provider::Anthropic(Anthropic::from_env(&m, settings).map_err(usage)?)
        }
        ModelSpec::Script(path) => {
            let text = scripts.get(spec).ok_or_else(|| {
                SetupError::Usage(format!("model `{spec}`: script text missing from snapshot"))
            })?;
            let name = path.display().to_string();
            Provider::Script(ScriptModel::from_snapshot(&name, text.clone()).map_err(
                |message| SetupError::Input {
                    path: name.clone(),
                    message: message.trim_start_matches(&format!("{name}: ")).to_string(),
                },
            )?)
        }
    })
}

/// `--tools`, else tools.toml beside the task file, else in the current directory.
fn find_tools(task: &Path, flag: Option<&Path>) -> Result<Option<PathBuf>, SetupError> {
    if let Some(p) = flag {
        if !p.is_file() {
            return Err(SetupError::Input {
                path: p.display().to_string(),
                message: "no such file (from --tools)".into(),
            });
        }
        return Ok(Some(p.to_path_buf()));
    }
    let beside = task.parent().unwrap_or(Path::new("")).join("tools.toml");
    if beside.is_file() {
        return Ok(Some(beside));
    }
    let here = PathBuf::from("tools.toml");
    Ok(here.is_file().then_some(here))
}

/// Script paths resolve against the task file's folder first, then the current one.
pub(crate) fn read_scripts(
    models: &[String],
    task: &Path,
) -> Result<BTreeMap<String, String>, SetupError> {
    let mut out = BTreeMap::new();
    for spec in models {
        let Ok(ModelSpec::Script(path)) = ModelSpec::parse(spec) else {
            continue;
        };
        let beside = task.parent().unwrap_or(Path::new("")).join(&path);
        let chosen = if beside.is_file() {
            beside
        } else {
            path.clone()
        };
        let text = std::fs::read_to_string(&chosen).map_err(|e| SetupError::Input {
            path: chosen.display().to_string(),
            message: format!("cannot read script for model `{spec}`: {e}"),
        })?;
        // Validate now so a bad script is exit 2 before anything is stored.
        ScriptModel::check(&chosen.display().to_string(), &text).map_err(|message| {
            SetupError::Input {
                path: chosen.display().to_string(),
                message: message
                    .trim_start_matches(&format!("{}: ", chosen.display()))
                    .to_string(),
            }
        })?;
        out.insert(spec.clone(), text);
    }
    Ok(out)
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

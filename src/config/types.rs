//! The validated tools configuration (docs/ARCHITECTURE.md §3), after defaults are applied.
//!
//! `config::load` turns a tools.toml file into these; everything downstream reads only
//! these types, never the raw TOML.

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// Retry settings for one tool (from `[defaults]`, overridable per tool).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Per-attempt timeout.
    pub timeout: Duration,
    /// Total attempts for transient failures (1 = no retry).
    pub attempts: u32,
    /// Base delay: delay = min(max_backoff, backoff * 2^attempt), full jitter.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// A server's `Retry-After` above this is not waited for: the call fails
    /// `rate_limited` with `retry_after_s` (docs/ARCHITECTURE.md §3.3).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            timeout: Duration::from_secs(8),
            attempts: 3,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// `[policy] max_depth` when not given: a run's children may have children, no more.
pub const DEFAULT_MAX_DEPTH: u32 = 2;

/// `[policy]`: when the loop stops trusting a tool or itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub breaker_threshold: u32,
    pub disable_after: u32,
    pub stuck_repeats: u32,
    /// Normalised substrings ([`normalise_text`]) or `re:`-prefixed regular
    /// expressions (validated at load); an argument matching one needs approval.
    pub approval_patterns: Vec<String>,
    /// At most this many calls of one turn run at the same time (issue 14); 1 runs
    /// them one by one.
    pub max_parallel_calls: u32,
    /// How deep sub-agents may nest (issue 26): a run at this depth (the top run is
    /// at 0) starts no child.
    pub max_depth: u32,
}

/// `[policy] max_parallel_calls` when not given.
pub const DEFAULT_MAX_PARALLEL_CALLS: u32 = 8;

impl Default for Policy {
    fn default() -> Self {
        Policy {
            breaker_threshold: 3,
            disable_after: 3,
            stuck_repeats: 3,
            approval_patterns: Vec::new(),
            max_parallel_calls: DEFAULT_MAX_PARALLEL_CALLS,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Approval {
    Always,
    Never,
    /// `approval_patterns` decide.
    #[default]
    Auto,
}

/// What to do with a non-idempotent call whose outcome was lost in a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnUnknown {
    /// Queue an `outcome_unknown` escalation for a person.
    #[default]
    Escalate,
    /// Give the model an `outcome_unknown` error with a hint to check state.
    TellModel,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CommandSpec {
    /// argv; argv[0] relative paths resolve against the tools.toml directory.
    pub argv: Vec<String>,
    /// argv[0] as an absolute path, resolved once for the run
    /// ([`crate::tools::spawn::resolve_programs`]); `None` as parsed (parsing does not
    /// read the machine) and while not found.
    pub program: Option<std::path::PathBuf>,
    /// Variable names passed through from agentrun's environment (the tool's `env`
    /// and `[defaults]`'s), on top of the core set.
    pub env: Vec<String>,
    /// Variables set for the child (`set = { NAME = "value" }`).
    pub set: BTreeMap<String, String>,
    /// `inherit = "all"`: the whole environment minus secret-looking names and values.
    pub inherit_all: bool,
    /// Working directory for the child: the tools.toml directory.
    pub cwd: std::path::PathBuf,
    /// stdout beyond this many bytes is cut with a note.
    pub output_cap: usize,
    /// What the child may touch (issue 22): `sandbox`, `writable`, `network`.
    pub sandbox: Sandbox,
}

impl ToolsConfig {
    /// The sandbox a tool's process runs in: a command tool's own, an MCP tool's
    /// server's (stdio); `None` for tools that start no process (HTTP, MCP over HTTP,
    /// sub-agents, whose own tools have their own sandboxes).
    pub fn sandbox_of<'a>(&'a self, tool: &'a ToolDef) -> Option<&'a Sandbox> {
        match &tool.kind {
            ToolKind::Command(spec) => Some(&spec.sandbox),
            ToolKind::Mcp(spec) => match &self.mcp.get(&spec.server)?.transport {
                McpTransport::Stdio(spec) => Some(&spec.sandbox),
                McpTransport::Http { .. } => None,
            },
            ToolKind::Http(_) | ToolKind::Agent(_) => None,
        }
    }
}

/// `sandbox = "workspace" | "read-only" | "off"` (issue 22, docs/ARCHITECTURE.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// Runs with all of the user's rights: only when the config says so.
    Off,
    /// Reads everywhere except credential stores and agentrun's own files; writes in
    /// the tool's folder, a per-call temp dir and `writable`. The default for a
    /// command tool, hook or stdio MCP server whose config does not say (docs/ARCHITECTURE.md §8).
    #[default]
    Workspace,
    /// As `Workspace`, but no writes in the tool's folder.
    ReadOnly,
}

impl SandboxMode {
    pub fn parse(s: &str) -> Option<SandboxMode> {
        match s {
            "off" => Some(SandboxMode::Off),
            "workspace" => Some(SandboxMode::Workspace),
            "read-only" => Some(SandboxMode::ReadOnly),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Off => "off",
            SandboxMode::Workspace => "workspace",
            SandboxMode::ReadOnly => "read-only",
        }
    }
}

/// A child's confinement: the mode, extra writable paths, and whether it may open
/// network connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub mode: SandboxMode,
    /// Absolute paths (relative ones in tools.toml count from its folder).
    pub writable: Vec<std::path::PathBuf>,
    /// `false`: no new IPv4/IPv6 sockets, loopback included.
    pub network: bool,
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox {
            mode: SandboxMode::Workspace,
            writable: Vec::new(),
            network: true,
        }
    }
}

/// The mode a tools.toml that does not name `sandbox` gets: `workspace`, unless the
/// person's config file says otherwise for this machine (`sandbox = "off"` where the
/// kernel cannot sandbox). Set once by the command layer, before any tools.toml is read.
static BASE_MODE: std::sync::OnceLock<SandboxMode> = std::sync::OnceLock::new();

/// Sets [`Sandbox::base`]'s mode for this process (the first call wins).
pub fn set_base_sandbox(mode: SandboxMode) {
    let _ = BASE_MODE.set(mode);
}

impl Sandbox {
    /// What `[defaults]` starts from: [`Sandbox::default`] in the mode this process
    /// was told ([`set_base_sandbox`]).
    pub fn base() -> Sandbox {
        Sandbox {
            mode: BASE_MODE.get().copied().unwrap_or_default(),
            ..Sandbox::default()
        }
    }

    /// No confinement at all (`sandbox = "off"`).
    pub fn off() -> Sandbox {
        Sandbox {
            mode: SandboxMode::Off,
            ..Sandbox::default()
        }
    }
}

impl Sandbox {
    /// Whether anything is enforced (the child then starts through the trampoline).
    pub fn confines(&self) -> bool {
        self.mode != SandboxMode::Off || !self.network
    }

    /// One line for `tools check` and `runs show`: `workspace, network off, writable: /x`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "sandbox {}, network {}",
            self.mode.as_str(),
            if self.network { "on" } else { "off" }
        );
        if !self.writable.is_empty() && self.mode != SandboxMode::Off {
            let paths: Vec<String> = self
                .writable
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            s.push_str(&format!(", writable: {}", paths.join(" ")));
        }
        s
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct HttpSpec {
    pub method: String,
    /// URL template: `{name}` placeholders, only in path and query.
    pub url: String,
    /// Header templates; `${VAR}` is read from the environment at call time.
    pub headers: BTreeMap<String, String>,
    /// Response bodies beyond this many bytes are cut with a note.
    pub output_cap: usize,
}

/// A tool an MCP server offers, called through that server's connection.
#[derive(Debug, Clone, PartialEq)]
pub struct McpSpec {
    /// The `[mcp.NAME]` it comes from.
    pub server: String,
    /// The server's own name for the tool (agentrun's is `SERVER__TOOL`).
    pub tool: String,
    pub output_cap: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ToolKind {
    Command(CommandSpec),
    Http(HttpSpec),
    Mcp(McpSpec),
    /// A sub-agent (`[agents.NAME]`, issue 26): a call is a child run.
    Agent(AgentSpec),
}

/// `[agents.NAME]`: the task file a child run is started from.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSpec {
    /// As written in tools.toml.
    pub task: String,
    /// Resolved against tools.toml's folder.
    pub task_path: std::path::PathBuf,
}

/// How agentrun reaches an MCP server.
#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on stdin/stdout; its argv, working directory
    /// and environment (the same allow-list) are a command tool's.
    Stdio(CommandSpec),
    /// Streamable HTTP; `${VAR}` in headers is read from the environment at connect
    /// time and never stored.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// `[mcp.NAME]`, validated. Its tools become [`ToolDef`]s once discovered.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServer {
    pub name: String,
    pub transport: McpTransport,
    /// The server's tools to offer (its names); `None`: all it lists.
    pub tools: Option<Vec<String>>,
    pub retry: RetryPolicy,
    pub idempotent: Vec<String>,
    pub approval: BTreeMap<String, Approval>,
    pub fallback: BTreeMap<String, Vec<FallbackStep>>,
    pub on_unknown: OnUnknown,
    pub output_cap: usize,
}

/// Separates the server from the tool in agentrun's name for an MCP tool.
pub const MCP_SEPARATOR: &str = "__";

#[derive(Debug, Clone, PartialEq)]
pub struct FallbackStep {
    pub tool: String,
    /// Argument renames: key in the failing call's args -> key in the fallback's args.
    /// Arguments not named here pass through unchanged.
    pub map: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    pub kind: ToolKind,
    pub retry: RetryPolicy,
    pub idempotent: bool,
    pub fallback: Vec<FallbackStep>,
    /// Results are disclosed to the model as possibly stale.
    pub stale: bool,
    pub approval: Approval,
    pub on_unknown: OnUnknown,
}

/// A whole tools.toml, validated.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolsConfig {
    pub defaults: RetryPolicy,
    pub policy: Policy,
    pub tools: BTreeMap<String, ToolDef>,
    /// MCP servers; their tools join `tools` once discovered (`tools::mcp`).
    pub mcp: BTreeMap<String, McpServer>,
    /// `[hooks]` (issue 26).
    pub hooks: Hooks,
    /// `[notify]`: where escalations and run ends are announced (issue 24).
    pub notify: Option<NotifyConfig>,
    /// Rate limits shared by every run on the database (docs/rate-limits.md).
    pub limits: crate::govern::Limits,
}

pub const DEFAULT_OUTPUT_CAP: usize = 64 * 1024;

/// An `approval_patterns` entry starting with this is a regular expression.
pub const REGEX_PREFIX: &str = "re:";

/// Lower-cases and turns every whitespace run into one space, so `DROP  TABLE` and
/// `drop\ttable` both read `drop table`.
pub fn normalise_text(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Compiles an approval pattern's regular expression (case-insensitive).
pub fn pattern_regex(re: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(re).case_insensitive(true).build()
}

/// An event `[notify]` can announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NotifyEvent {
    EscalationFiled,
    EscalationResolved,
    RunEnded,
}

impl NotifyEvent {
    pub const ALL: [NotifyEvent; 3] = [
        NotifyEvent::EscalationFiled,
        NotifyEvent::EscalationResolved,
        NotifyEvent::RunEnded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::EscalationFiled => "escalation_filed",
            NotifyEvent::EscalationResolved => "escalation_resolved",
            NotifyEvent::RunEnded => "run_ended",
        }
    }

    pub fn parse(s: &str) -> Option<NotifyEvent> {
        NotifyEvent::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

/// `[notify]`, validated: a webhook and/or a command, the events they get, and the
/// retry policy of a delivery (from `[defaults]` unless given).
#[derive(Debug, Clone, PartialEq)]
pub struct NotifyConfig {
    /// `https://…` (or `http://`); `${VAR}` is read from the environment when sending.
    pub webhook: Option<String>,
    pub command: Option<Vec<String>>,
    pub events: Vec<NotifyEvent>,
    /// Where `agentrun serve` is reached (`https://console.example.com`): events then
    /// carry a link to the escalation or run.
    pub public_url: Option<String>,
    pub retry: RetryPolicy,
    /// Where `command` runs and a relative program resolves: the folder of the file
    /// that holds the section (tools.toml's, or the project folder for the config
    /// file), whichever process delivers.
    pub cwd: std::path::PathBuf,
}

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookEvent {
    BeforeTool,
    AfterTool,
    BeforeModel,
    RunEnd,
}

impl HookEvent {
    pub const ALL: [HookEvent; 4] = [
        HookEvent::BeforeTool,
        HookEvent::AfterTool,
        HookEvent::BeforeModel,
        HookEvent::RunEnd,
    ];

    /// The key in `[hooks]`.
    pub fn key(self) -> &'static str {
        match self {
            HookEvent::BeforeTool => "before_tool",
            HookEvent::AfterTool => "after_tool",
            HookEvent::BeforeModel => "before_model",
            HookEvent::RunEnd => "run_end",
        }
    }
}

/// What a hook that fails (exits other than 0 or 2, cannot start, times out) means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnHookError {
    /// The call (or request) is blocked: a policy that cannot answer does not let
    /// things through.
    #[default]
    Block,
    /// The failure is recorded and the call goes on.
    Allow,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    pub command: CommandSpec,
    /// Tool-name patterns (`*` matches any run of characters); empty: every tool.
    pub tools: Vec<String>,
    pub timeout: Duration,
    pub on_error: OnHookError,
    /// Run again when agentrun died before its decision was journaled; otherwise
    /// such a lost decision counts as a failure (`on_error` decides).
    pub idempotent: bool,
}

impl Hook {
    /// Whether the hook runs for calls of `tool`.
    pub fn matches(&self, tool: &str) -> bool {
        self.tools.is_empty() || self.tools.iter().any(|p| glob(p, tool))
    }
}

/// The hooks of a tools.toml, by event, in file order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hooks {
    pub by_event: BTreeMap<HookEvent, Vec<Hook>>,
}

impl Hooks {
    /// The hooks of `event` that run for `tool` (every hook of the event for `None`).
    pub fn for_event<'h>(
        &'h self,
        event: HookEvent,
        tool: Option<&'h str>,
    ) -> impl Iterator<Item = (usize, &'h Hook)> + 'h {
        self.by_event
            .get(&event)
            .into_iter()
            .flatten()
            .enumerate()
            .filter(move |(_, h)| tool.is_none_or(|t| h.matches(t)))
    }

    pub fn is_empty(&self) -> bool {
        self.by_event.values().all(Vec::is_empty)
    }
}

/// `*` matches any run of characters; everything else itself.
pub(super) fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = &parts[..] else {
        return pattern == name;
    };
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn patterns_match_whole_names_with_stars_for_any_run() {
        for (pattern, name, want) in [
            ("send_email", "send_email", true),
            ("send_email", "send_emails", false),
            ("send_*", "send_email", true),
            ("*", "anything", true),
            ("*_order", "lookup_order", true),
            ("*_order", "lookup_orders", false),
            ("kb*cache", "kb_cache", true),
            ("a*b*c", "abc", true),
            ("a*b*c", "acb", false),
        ] {
            assert_eq!(glob(pattern, name), want, "{pattern} vs {name}");
        }
    }
}

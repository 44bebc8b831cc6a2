//! `[hooks]` in tools.toml (issue 26): commands the user owns, run before or after
//! each tool call, before each model request and at the run's end.
//!
//! ```toml
//! [hooks]
//! before_tool = [{ command = ["python3", "hooks/policy.py"], tools = ["send_*"], timeout = "5s" }]
//! run_end = [{ command = ["./hooks/notify.sh"], on_error = "allow" }]
//! ```
//!
//! A hook is spawned exactly like a command tool (argv without a shell, the same
//! environment allow-list from `[defaults]` plus its own `env`/`set`, its own process
//! group, killed with everything it started on timeout). What it is told and how its
//! answer is read is `crate::hooks`.

use super::Sink;
use super::raw::Where;
use super::resolve::{ChildEnv, EnvDefaults, check_command_at, command_spec};
use super::types::{CommandSpec, DEFAULT_OUTPUT_CAP};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// A hook's time limit when it gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHooks {
    pub before_tool: Option<Vec<RawHook>>,
    pub after_tool: Option<Vec<RawHook>>,
    pub before_model: Option<Vec<RawHook>>,
    pub run_end: Option<Vec<RawHook>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHook {
    pub command: Vec<String>,
    pub tools: Option<Vec<String>>,
    pub timeout: Option<String>,
    pub on_error: Option<String>,
    /// The hook only decides (reads its input, writes nothing): run it again when its
    /// decision was lost in a crash.
    pub idempotent: Option<bool>,
    pub env: Option<Vec<String>>,
    pub set: Option<BTreeMap<String, String>>,
    pub inherit: Option<String>,
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
fn glob(pattern: &str, name: &str) -> bool {
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

/// Resolves `[hooks]`, reporting each problem with its event and index
/// (`hooks.before_tool[0].timeout: …`).
pub(super) fn resolve(
    raw: RawHooks,
    env_defaults: &EnvDefaults,
    cwd: &Path,
    sink: &mut Sink,
) -> Hooks {
    let mut by_event = BTreeMap::new();
    let lists = [
        (HookEvent::BeforeTool, raw.before_tool),
        (HookEvent::AfterTool, raw.after_tool),
        (HookEvent::BeforeModel, raw.before_model),
        (HookEvent::RunEnd, raw.run_end),
    ];
    for (event, list) in lists {
        let hooks: Vec<Hook> = list
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, raw)| {
                let place = format!("hooks.{}[{i}]", event.key());
                resolve_one(raw, &place, env_defaults, cwd, sink)
            })
            .collect();
        if !hooks.is_empty() {
            by_event.insert(event, hooks);
        }
    }
    Hooks { by_event }
}

fn resolve_one(
    raw: RawHook,
    place: &str,
    env_defaults: &EnvDefaults,
    cwd: &Path,
    sink: &mut Sink,
) -> Hook {
    let at = Where::Section(place);
    check_command_at(at, &raw.command, sink);
    let timeout = match raw.timeout.as_deref().map(super::parse_duration) {
        None => DEFAULT_TIMEOUT,
        Some(Ok(d)) if !d.is_zero() => d,
        Some(Ok(_)) => {
            sink.key(at, "timeout", "must be greater than zero".into());
            DEFAULT_TIMEOUT
        }
        Some(Err(e)) => {
            sink.key(at, "timeout", e);
            DEFAULT_TIMEOUT
        }
    };
    let on_error = match raw.on_error.as_deref() {
        None | Some("block") => OnHookError::Block,
        Some("allow") => OnHookError::Allow,
        Some(other) => {
            let msg = format!("must be \"block\" (the default) or \"allow\", not {other:?}");
            sink.key(at, "on_error", msg);
            OnHookError::Block
        }
    };
    let env = ChildEnv {
        env: &raw.env,
        set: &raw.set,
        inherit: raw.inherit.as_deref(),
        // A hook runs in `[defaults]`'s sandbox (issue 22); it has no keys of its own.
        sandbox: super::resolve::SandboxKeys {
            sandbox: None,
            writable: &None,
            network: None,
        },
    };
    let command = command_spec(
        raw.command,
        env,
        env_defaults,
        cwd,
        DEFAULT_OUTPUT_CAP,
        at,
        sink,
    );
    Hook {
        command,
        tools: raw.tools.unwrap_or_default(),
        timeout,
        on_error,
        idempotent: raw.idempotent.unwrap_or(false),
    }
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

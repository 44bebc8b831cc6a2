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
use super::fields::{ChildEnv, EnvDefaults, check_command_at, command_spec};
use super::raw::Where;
pub use super::raw::{RawHook, RawHooks};
use super::types::DEFAULT_OUTPUT_CAP;
pub use super::types::{Hook, HookEvent, Hooks, OnHookError};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// A hook's time limit when it gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

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
        sandbox: super::fields::SandboxKeys {
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

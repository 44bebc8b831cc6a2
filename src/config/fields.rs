//! The field readers tools.toml's sections share (issue 25 split them from `resolve`,
//! so that `[tools]`, `[mcp]`, `[hooks]` and `[notify]` all read retries, approvals,
//! child environments and commands one way, and `resolve` — which assembles those
//! sections — sits above all of them).

use super::raw::{RawFallback, Where};
use super::types::*;
use super::validate::{self, check_count};
use super::{Sink, parse_duration};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Most attempts a tool may ask for: more only burns time against a broken service.
const MAX_ATTEMPTS: i64 = 20;

/// The retry keys shared by `[defaults]` and each tool.
pub(super) struct RetryFields<'a> {
    pub timeout: Option<&'a str>,
    pub attempts: Option<i64>,
    pub backoff: Option<&'a str>,
    pub max_backoff: Option<&'a str>,
    pub max_retry_after: Option<&'a str>,
}

/// The environment keys of `[defaults]`, inherited by every command tool.
pub(super) struct EnvDefaults {
    pub env: Vec<String>,
    pub inherit_all: bool,
    pub sandbox: Sandbox,
}

/// The sandbox keys as written, in `[defaults]`, a tool or a stdio MCP server.
pub(super) struct SandboxKeys<'a> {
    pub sandbox: Option<&'a str>,
    pub writable: &'a Option<Vec<String>>,
    pub network: Option<bool>,
}

/// `sandbox`, `writable` and `network` over `base` (`[defaults]`'s, or the built-in).
pub(super) fn sandbox(
    keys: &SandboxKeys<'_>,
    base: &Sandbox,
    cwd: &Path,
    place: Where<'_>,
    sink: &mut Sink,
) -> Sandbox {
    let mut out = base.clone();
    if let Some(mode) = keys.sandbox {
        match SandboxMode::parse(mode) {
            Some(m) => out.mode = m,
            None => sink.key(
                place,
                "sandbox",
                format!("must be \"workspace\", \"read-only\" or \"off\", not {mode:?}"),
            ),
        }
    }
    if let Some(paths) = keys.writable {
        out.writable = Vec::new();
        for (i, p) in paths.iter().enumerate() {
            if p.trim().is_empty() {
                sink.key(place, &format!("writable[{i}]"), "must name a path".into());
                continue;
            }
            let p = expand_home(p);
            let joined = cwd.join(p);
            out.writable
                .push(std::path::absolute(&joined).unwrap_or(joined));
        }
    }
    if let Some(n) = keys.network {
        out.network = n;
    }
    out
}

/// `~/x` as `$HOME/x` (writable paths are often under the home folder).
fn expand_home(p: &str) -> PathBuf {
    match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(p),
    }
}

/// `inherit = "all"` is the only value; `None` when absent or wrong (reported).
pub(super) fn inherit(value: Option<&str>, place: Where<'_>, sink: &mut Sink) -> Option<bool> {
    match value? {
        "all" => Some(true),
        "none" => Some(false),
        other => {
            let msg = format!("must be \"all\" (or \"none\", the default), not {other:?}");
            sink.key(place, "inherit", msg);
            None
        }
    }
}

pub(super) fn check_env_names(names: &[String], place: Where<'_>, sink: &mut Sink) {
    for (i, var) in names.iter().enumerate() {
        if let Err(e) = validate::check_env_name(var) {
            sink.key(place, &format!("env[{i}]"), e);
        }
    }
}

pub(super) fn resolve_retry(
    f: &RetryFields<'_>,
    base: &RetryPolicy,
    place: Where<'_>,
    sink: &mut Sink,
) -> RetryPolicy {
    let mut p = base.clone();
    if let Some(d) = duration(f.timeout, "timeout", place, sink) {
        if d.is_zero() {
            sink.key(place, "timeout", "must be greater than zero".into());
        } else {
            p.timeout = d;
        }
    }
    if let Some(n) = f.attempts {
        match check_count(n, 1, Some(MAX_ATTEMPTS)) {
            Ok(n) => p.attempts = n,
            Err(e) => sink.key(place, "attempts", e),
        }
    }
    p.backoff = duration(f.backoff, "backoff", place, sink).unwrap_or(p.backoff);
    p.max_backoff = duration(f.max_backoff, "max_backoff", place, sink).unwrap_or(p.max_backoff);
    p.max_retry_after =
        duration(f.max_retry_after, "max_retry_after", place, sink).unwrap_or(p.max_retry_after);
    // Only blame the place that set one of the two, not every tool that inherits them.
    let set_here = f.backoff.is_some() || f.max_backoff.is_some();
    if set_here && p.backoff > p.max_backoff {
        let (b, m) = (
            humantime::format_duration(p.backoff),
            humantime::format_duration(p.max_backoff),
        );
        sink.key(
            place,
            "backoff",
            format!("{b} is longer than max_backoff {m}"),
        );
    }
    p
}

fn duration(value: Option<&str>, key: &str, place: Where<'_>, sink: &mut Sink) -> Option<Duration> {
    match parse_duration(value?) {
        Ok(d) => Some(d),
        Err(e) => {
            sink.key(place, key, e);
            None
        }
    }
}

pub(super) fn fallback_step(raw: RawFallback) -> FallbackStep {
    FallbackStep {
        tool: raw.tool,
        map: raw.map.unwrap_or_default(),
    }
}

pub(super) fn approval(value: Option<&str>, place: Where<'_>, sink: &mut Sink) -> Approval {
    match value {
        None | Some("auto") => Approval::Auto,
        Some("always") => Approval::Always,
        Some("never") => Approval::Never,
        Some(other) => {
            sink.key(
                place,
                "approval",
                format!("must be \"always\", \"never\" or \"auto\", not {other:?}"),
            );
            Approval::Auto
        }
    }
}

pub(super) fn on_unknown(value: Option<&str>, place: Where<'_>, sink: &mut Sink) -> OnUnknown {
    match value {
        None | Some("escalate") => OnUnknown::Escalate,
        Some("tell_model") => OnUnknown::TellModel,
        Some(other) => {
            sink.key(
                place,
                "on_unknown",
                format!("must be \"escalate\" or \"tell_model\", not {other:?}"),
            );
            OnUnknown::Escalate
        }
    }
}

/// The environment keys of a child process, as written (a command tool's or a stdio
/// MCP server's: both follow the same allow-list, docs/ARCHITECTURE.md §3.1).
pub(super) struct ChildEnv<'a> {
    pub env: &'a Option<Vec<String>>,
    pub set: &'a Option<BTreeMap<String, String>>,
    pub inherit: Option<&'a str>,
    pub sandbox: SandboxKeys<'a>,
}

/// A child process's spec: `[defaults]` env names plus its own, its `set`, and
/// `inherit`, each checked.
pub(super) fn command_spec(
    argv: Vec<String>,
    raw: ChildEnv<'_>,
    env_defaults: &EnvDefaults,
    cwd: &Path,
    output_cap: usize,
    place: Where<'_>,
    sink: &mut Sink,
) -> CommandSpec {
    let own = raw.env.clone().unwrap_or_default();
    check_env_names(&own, place, sink);
    let mut env = env_defaults.env.clone();
    env.extend(own);
    let set = raw.set.clone().unwrap_or_default();
    for name in set.keys() {
        if let Err(e) = validate::check_env_name(name) {
            sink.key(place, &format!("set.{name}"), e);
        }
    }
    let inherit_all = inherit(raw.inherit, place, sink).unwrap_or(env_defaults.inherit_all);
    let sandbox = sandbox(&raw.sandbox, &env_defaults.sandbox, cwd, place, sink);
    CommandSpec {
        argv,
        program: None,
        env,
        set,
        inherit_all,
        cwd: cwd.to_path_buf(),
        output_cap,
        sandbox,
    }
}

pub(super) fn check_command(name: &str, argv: &[String], present: bool, sink: &mut Sink) {
    if present {
        check_command_at(Where::Tool(name), argv, sink);
    } else if argv.first().is_some_and(|a| a.trim().is_empty()) {
        sink.key(
            Where::Tool(name),
            "command[0]",
            "must name a program".into(),
        );
    }
}

/// A `command` that is present: not empty, and naming a program.
pub(super) fn check_command_at(place: Where<'_>, argv: &[String], sink: &mut Sink) {
    if argv.is_empty() {
        sink.key(
            place,
            "command",
            "must not be empty (an argv such as [\"python3\", \"tool.py\"])".into(),
        );
    } else if argv.first().is_some_and(|a| a.trim().is_empty()) {
        sink.key(place, "command[0]", "must name a program".into());
    }
}

//! A child process's environment (docs/ARCHITECTURE.md §3.1): the allow-list every command tool,
//! hook and stdio MCP server is started with, and the secret values it carries (to redact
//! from the child's output). Its own module so that `command` (running tools) and
//! `spawn` (starting any child) both read it and neither imports the other's.

use crate::config::types::CommandSpec;
use crate::redact::{self, Secrets};
use std::ffi::OsString;

/// What every command tool receives from agentrun's environment (docs/ARCHITECTURE.md §3.1), plus
/// `LC_*`.
const CORE_ENV: [&str; 9] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TMPDIR", "TZ", "LANG",
];

/// Whether every child gets `name` from agentrun's environment without being asked for
/// it (the core set and `LC_*`).
pub fn passes_by_default(name: &str) -> bool {
    CORE_ENV.contains(&name) || name.starts_with("LC_")
}

/// A child's environment and the secret values in it (to redact from its output).
#[derive(Debug, Default)]
pub struct ChildEnv {
    pub vars: Vec<(OsString, OsString)>,
    pub secrets: Secrets,
}

/// The child's environment (docs/ARCHITECTURE.md §3.1, issue 12 item 6): an allow-list — the core
/// set, the names listed in `env` (the tool's and `[defaults]`'s), and `set`. With
/// `inherit = "all"` every other variable passes too, except secret-looking names
/// ([`redact::is_secret_name`]) and values ([`redact::is_secret_value`]: token
/// formats, webhook URLs, URLs with credentials). The values of
/// secret-looking variables the child does get are remembered for redaction.
pub fn child_env(
    parent: impl Iterator<Item = (OsString, OsString)>,
    spec: &CommandSpec,
) -> ChildEnv {
    let mut out = ChildEnv::default();
    for (name, value) in parent {
        let (n, v) = (name.to_string_lossy(), value.to_string_lossy());
        if spec.set.contains_key(n.as_ref()) {
            continue;
        }
        let listed = spec.env.iter().any(|a| *a == n);
        let core = passes_by_default(&n);
        // Most of the parent's variables are neither listed nor core: without
        // `inherit = "all"` they are dropped before the (allocating) secret test, which
        // was a sixth of a step's CPU when run on every variable (issue 14 profile).
        if !listed && !core && !spec.inherit_all {
            continue;
        }
        let secret = || redact::is_secret_name(&n) || redact::is_secret_value(&v);
        if listed && secret() {
            out.secrets.add(&v);
        }
        if listed || core || (spec.inherit_all && !secret()) {
            out.vars.push((name, value));
        }
    }
    for (name, value) in &spec.set {
        if redact::is_secret_name(name) || redact::url_credentials(value).is_some() {
            out.secrets.add(value);
        }
        out.vars.push((name.into(), value.into()));
    }
    out
}

//! Pre-flight: the checks that need the machine, not only the file (issue 13).
//!
//! [`super::parse`] proves a tools.toml is well formed; it cannot know that
//! `pyhton3` is not on PATH, that `tools/x.sh` lost its run bit, that a script was
//! never written, or that `${KB_TOKEN}` is unset in this shell. Each of those used to
//! pass `tools check` and fail on the model's first call, mid-run. `tools check` and
//! `start` both run these checks, and `start` stops (exit 2, nothing written) on any.
//! Every message carries the fix.
//!
//! They are not part of `parse`, because a resumed run re-reads its snapshot with
//! `parse`: a machine that changed since must not make a stored run unreadable.

use super::{ConfigError, McpTransport, Sandbox, SandboxMode, ToolKind, ToolsConfig};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// What the checks read from the process: injectable so tests never depend on the
/// machine's PATH, environment or kernel.
pub struct Env<'a> {
    pub var: &'a dyn Fn(&str) -> Option<OsString>,
    pub kernel: Support,
    /// The SQLite database in use (its place decides what a sandbox may hold).
    pub db: Option<PathBuf>,
}

impl Env<'static> {
    /// The real process environment.
    pub fn process() -> Env<'static> {
        Env {
            var: &|name| std::env::var_os(name),
            kernel: Support::probe(),
            db: super::own_files::database(),
        }
    }
}

pub use super::kernel::{Support, sandbox_missing};

/// Interpreters people type; a name on PATH within two edits of a missing one is
/// offered as "did you mean".
const INTERPRETERS: &[&str] = &[
    "python3", "python", "node", "bash", "sh", "ruby", "perl", "deno", "bun", "uv", "php",
];

/// Script extensions: an argv[1] ending in one is a file the interpreter must find.
const SCRIPT_EXTENSIONS: &[&str] = &[".py", ".sh", ".js", ".mjs", ".ts", ".rb", ".pl", ".php"];

/// Every pre-flight problem of `cfg` (read from `origin`, whose text is `text`),
/// limited to the tools named in `only` (and their fallbacks) when given.
pub fn check(
    cfg: &ToolsConfig,
    text: &str,
    origin: &Path,
    only: Option<&[String]>,
    env: &Env<'_>,
) -> Vec<ConfigError> {
    let wanted = closure(cfg, only);
    let declared = schemas_declared(text);
    let mut out = Vec::new();
    for (name, tool) in &cfg.tools {
        if !wanted.iter().any(|w| w == name) {
            continue;
        }
        if let ToolKind::Agent(spec) = &tool.kind {
            out.extend(agent_problem(name, spec, origin));
            continue;
        }
        let mut problem = |message: String| {
            out.push(ConfigError {
                file: origin.to_path_buf(),
                tool: Some(name.clone()),
                message,
            });
        };
        if !declared.iter().any(|d| d == name) {
            problem(
                "input_schema: missing; the model needs it to call the tool (with no \
                 arguments, write `input_schema = { type = \"object\" }`)"
                    .into(),
            );
        }
        match &tool.kind {
            ToolKind::Command(spec) => {
                for m in command_problems(&spec.argv, &spec.cwd, env) {
                    problem(m);
                }
                for m in sandbox_problems(spec, env) {
                    problem(m);
                }
            }
            ToolKind::Http(spec) => {
                for (header, value) in &spec.headers {
                    for var in unset_vars(value, env) {
                        problem(format!(
                            "http.headers.{header}: `${{{var}}}` is not set in this \
                             environment; export {var}=… before the run"
                        ));
                    }
                }
            }
            // Discovered from their server, after these checks (`tools::mcp`).
            ToolKind::Mcp(_) => {}
            ToolKind::Agent(_) => {}
        }
    }
    out.extend(mcp_problems(cfg, origin, env));
    out.extend(hook_problems(cfg, origin, env));
    out
}

/// Hooks (issue 26): each hook's program must be startable, like a command tool's (a
/// hook that cannot start blocks every call it guards).
fn hook_problems(cfg: &ToolsConfig, origin: &Path, env: &Env<'_>) -> Vec<ConfigError> {
    let mut out = Vec::new();
    for (event, hooks) in &cfg.hooks.by_event {
        for (i, hook) in hooks.iter().enumerate() {
            let spec = &hook.command;
            let mut problems = command_problems(&spec.argv, &spec.cwd, env);
            problems.extend(sandbox_problems(spec, env));
            out.extend(problems.into_iter().map(|m| ConfigError {
                file: origin.to_path_buf(),
                tool: None,
                message: format!("hooks.{}[{i}].{m}", event.key()),
            }));
        }
    }
    out
}

/// MCP servers (issue 16): the stdio program must be startable, header `${VAR}`s set.
fn mcp_problems(cfg: &ToolsConfig, origin: &Path, env: &Env<'_>) -> Vec<ConfigError> {
    let mut out = Vec::new();
    for (name, server) in &cfg.mcp {
        let messages = match &server.transport {
            McpTransport::Stdio(spec) => {
                let mut m = command_problems(&spec.argv, &spec.cwd, env);
                m.extend(sandbox_problems(spec, env));
                m
            }
            McpTransport::Http { headers, .. } => headers
                .iter()
                .flat_map(|(header, value)| {
                    unset_vars(value, env).into_iter().map(move |var| {
                        format!(
                            "headers.{header}: `${{{var}}}` is not set in this environment; \
                             export {var}=… before the run"
                        )
                    })
                })
                .collect(),
        };
        out.extend(messages.into_iter().map(|m| ConfigError {
            file: origin.to_path_buf(),
            tool: None,
            message: format!("mcp.{name}.{m}"),
        }));
    }
    out
}

/// A child's sandbox: enforceable on this kernel, and holding nothing it must not
/// (docs/ARCHITECTURE.md §8: no credential store under a folder it may write, nor the folder of the
/// database itself).
fn sandbox_problems(spec: &super::CommandSpec, env: &Env<'_>) -> Vec<String> {
    let mut out: Vec<String> = sandbox_problem(&spec.sandbox, env).into_iter().collect();
    if spec.sandbox.mode == SandboxMode::Off {
        return out;
    }
    let home = (env.var)("HOME").map(PathBuf::from);
    out.extend(super::layout::problems(
        &spec.sandbox,
        &spec.cwd,
        home.as_deref(),
        env.db.as_deref(),
    ));
    out
}

/// Issue 22, docs/ARCHITECTURE.md §7: a sandbox the kernel cannot enforce stops the run before it
/// starts, never a silent no-op.
fn sandbox_problem(sandbox: &Sandbox, env: &Env<'_>) -> Option<String> {
    let lacks = sandbox_missing(sandbox, env.kernel)?;
    Some(format!(
        "sandbox: this kernel cannot enforce `sandbox = \"{}\"`{}: it lacks {lacks}; \
         run on a kernel that has it, or set `sandbox = \"off\"` (and `network = true`) \
         for this tool to run it unconfined",
        sandbox.mode.as_str(),
        if sandbox.network {
            ""
        } else {
            " with `network = false`"
        },
    ))
}

/// The tools a run may call: `only` plus every fallback reachable from them.
fn closure(cfg: &ToolsConfig, only: Option<&[String]>) -> Vec<String> {
    let mut out: Vec<String> = match only {
        Some(names) => names.to_vec(),
        None => return cfg.tools.keys().cloned().collect(),
    };
    let mut i = 0;
    while i < out.len() {
        if let Some(t) = cfg.tools.get(&out[i]) {
            for step in &t.fallback {
                if !out.contains(&step.tool) {
                    out.push(step.tool.clone());
                }
            }
        }
        i += 1;
    }
    out
}

/// Names of the tools whose table sets `input_schema` (the resolved config fills in
/// a stand-in, so presence is read from the text).
fn schemas_declared(text: &str) -> Vec<String> {
    let Ok(doc) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    let Some(tools) = doc.get("tools").and_then(|t| t.as_table()) else {
        return Vec::new();
    };
    tools
        .iter()
        .filter(|(_, v)| v.get("input_schema").is_some())
        .map(|(k, _)| k.clone())
        .collect()
}

/// Problems starting a command tool's argv from `cwd` (the tools.toml folder).
fn command_problems(argv: &[String], cwd: &Path, env: &Env<'_>) -> Vec<String> {
    let Some(program) = argv.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if program.contains('/') {
        out.extend(file_problem(program, cwd, true));
    } else if find_on_path(program, env).is_none() {
        let hint = did_you_mean(program, env)
            .map(|m| format!(" (did you mean `{m}`?)"))
            .unwrap_or_default();
        out.push(format!(
            "command[0]: `{program}` is not on PATH{hint}; install it, fix the name, or give \
             its full path"
        ));
    } else if let Some(script) = argv.get(1).filter(|a| looks_like_script(a)) {
        // `python3 tools/kb.py`: the interpreter exists, so the script must too.
        out.extend(file_problem(script, cwd, false).map(|m| m.replace("command[0]", "command[1]")));
    }
    out
}

fn looks_like_script(arg: &str) -> bool {
    !arg.starts_with('-') && SCRIPT_EXTENSIONS.iter().any(|e| arg.ends_with(e))
}

/// A file named relative to `cwd` (or absolute) that must exist, and be executable
/// when it is run directly.
fn file_problem(rel: &str, cwd: &Path, must_execute: bool) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let path: PathBuf = cwd
        .join(rel)
        .components()
        .filter(|c| *c != std::path::Component::CurDir)
        .collect();
    let shown = display(&path);
    match std::fs::metadata(&path) {
        Err(_) => Some(format!(
            "command[0]: `{rel}` does not exist (looked for {shown}; relative paths start \
             at the tools.toml folder)"
        )),
        Ok(m) if m.is_dir() => Some(format!("command[0]: `{rel}` is a folder ({shown})")),
        Ok(m) if must_execute && m.permissions().mode() & 0o111 == 0 => Some(format!(
            "command[0]: `{rel}` is not executable; run `chmod +x {shown}`"
        )),
        Ok(_) => None,
    }
}

/// `./tools/x.sh` joined to `.` reads `././tools/x.sh`; show it as people write it.
fn display(p: &Path) -> String {
    let mut s = p.display().to_string();
    while let Some(rest) = s.strip_prefix("./") {
        s = rest.to_string();
    }
    s
}

fn find_on_path(program: &str, env: &Env<'_>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = (env.var)("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

fn did_you_mean(program: &str, env: &Env<'_>) -> Option<&'static str> {
    INTERPRETERS
        .iter()
        .filter(|i| edit_distance(program, i) <= 2)
        .min_by_key(|i| edit_distance(program, i))
        .filter(|i| find_on_path(i, env).is_some())
        .copied()
}

/// Levenshtein distance, with a swap of two neighbours counting as one edit
/// (`pyhton3` is one edit from `python3`).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// `${VAR}` names in a header template that the environment does not set.
fn unset_vars(template: &str, env: &Env<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else { break };
        let name = &after[..end];
        if (env.var)(name).is_none() && !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
        rest = &after[end + 1..];
    }
    out
}

/// Warnings (issue 12 item 9): credentials written literally into tools.toml — a
/// secret-looking header not built from `${VAR}`, a secret-named `set` value, a URL
/// with `user:password@`, and in an MCP server's section also a credential among its
/// `command` arguments (issue 22). They work, so they are not errors; but the file gets
/// copied, committed and snapshotted into every run. Each line names file, tool (or
/// server), key and fix — never the value. `tools check` and `start` print them.
pub fn literal_credentials(cfg: &ToolsConfig, origin: &Path) -> Vec<String> {
    use crate::redact::url_credentials;
    let file = origin.display();
    let mut out = Vec::new();
    for (name, tool) in &cfg.tools {
        let mut warn = |key: String, fix: &str| {
            out.push(format!(
                "agentrun: warning: {file}: tool `{name}`: {key} holds a literal credential; {fix}"
            ));
        };
        match &tool.kind {
            ToolKind::Http(spec) => {
                if url_credentials(&spec.url).is_some() {
                    warn(
                        "url".into(),
                        "remove `user:password@` and send an `Authorization` header built from `${VAR}`",
                    );
                }
                for (header, value) in &spec.headers {
                    if literal_header(header, value) {
                        warn(
                            format!("headers.{header}"),
                            "use `${VAR}` (e.g. \"Bearer ${API_TOKEN}\") and export VAR",
                        );
                    }
                }
            }
            ToolKind::Command(spec) => {
                for (var, value) in &spec.set {
                    if literal_set(var, value) {
                        warn(
                            format!("set.{var}"),
                            "export it and list it in `env` instead (the `${VAR}` way)",
                        );
                    }
                }
            }
            ToolKind::Mcp(_) | ToolKind::Agent(_) => {}
        }
    }
    for (name, server) in &cfg.mcp {
        for (key, fix) in mcp_literal_credentials(&server.transport) {
            out.push(format!(
                "agentrun: warning: {file}: mcp server `{name}`: {key} holds a literal credential; {fix}"
            ));
        }
    }
    out
}

/// The fields of an MCP server's section holding a literal credential (issue 22), with
/// the fix for each: its `command` arguments, `set` values, URL and headers.
fn mcp_literal_credentials(transport: &McpTransport) -> Vec<(String, &'static str)> {
    use crate::redact::{secret_args, url_credentials, userinfo};
    let mut out = Vec::new();
    match transport {
        McpTransport::Stdio(spec) => {
            for (i, _) in secret_args(&spec.argv) {
                out.push((
                    format!("command[{i}]"),
                    "give the server its credential in the environment: export it and list it in `env`",
                ));
            }
            for (var, value) in &spec.set {
                if literal_set(var, value) {
                    out.push((
                        format!("set.{var}"),
                        "export it and list it in `env` instead (the `${VAR}` way)",
                    ));
                }
            }
        }
        McpTransport::Http { url, headers } => {
            if userinfo(url).is_some() || url_credentials(url).is_some() {
                out.push((
                    "url".into(),
                    "remove `user:password@` and send an `Authorization` header built from `${VAR}`",
                ));
            }
            for (header, value) in headers {
                if literal_header(header, value) {
                    out.push((
                        format!("headers.{header}"),
                        "use `${VAR}` (e.g. \"Bearer ${API_TOKEN}\") and export VAR",
                    ));
                }
            }
        }
    }
    out
}

/// A header holding a credential written out rather than built from `${VAR}`.
fn literal_header(header: &str, value: &str) -> bool {
    let scheme = ["bearer ", "basic ", "token "]
        .iter()
        .any(|s| value.to_ascii_lowercase().starts_with(s));
    let secret = crate::redact::is_secret_name(header) || header.eq_ignore_ascii_case("cookie");
    (secret || scheme) && !value.contains("${")
}

/// A `set` value that is a credential: a secret-named variable's, or a URL's userinfo.
fn literal_set(var: &str, value: &str) -> bool {
    // `PATH` contains the marker `PAT` but holds no secret.
    let secret = crate::redact::is_secret_name(&var.to_ascii_uppercase().replace("PATH", ""));
    (secret && !value.is_empty()) || crate::redact::url_credentials(value).is_some()
}

/// A sub-agent's task file (issue 26) must exist and read as a task; what it names
/// (its model, its tools) is checked at `start` with the rest of the run
/// (`setup::prepare_agents`).
fn agent_problem(
    name: &str,
    spec: &crate::config::AgentSpec,
    origin: &Path,
) -> Option<ConfigError> {
    let message = if !spec.task_path.is_file() {
        format!(
            "task: no such file `{}` (a path relative to the folder of {})",
            spec.task,
            origin.display()
        )
    } else {
        match crate::task::load(&spec.task_path) {
            Ok(_) => return None,
            Err(e) => format!("task: {e}"),
        }
    };
    Some(ConfigError {
        file: origin.to_path_buf(),
        tool: None,
        message: format!("agents.{name}.{message}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel with every sandbox feature, so tests do not depend on this machine's.
    const FULL_KERNEL: Support = Support::FULL;

    fn no_env() -> Env<'static> {
        Env {
            var: &|_| None,
            kernel: FULL_KERNEL,
            db: None,
        }
    }

    #[test]
    fn a_transposed_interpreter_is_one_edit_away() {
        assert_eq!(edit_distance("pyhton3", "python3"), 1);
        assert_eq!(edit_distance("python3", "python3"), 0);
        assert_eq!(edit_distance("nod", "node"), 1);
    }

    #[test]
    fn unset_header_variables_are_named_once() {
        let env = Env {
            var: &|n| (n == "SET").then(|| OsString::from("x")),
            kernel: FULL_KERNEL,
            db: None,
        };
        assert_eq!(
            unset_vars("Bearer ${TOKEN} ${SET} ${TOKEN}", &env),
            ["TOKEN"]
        );
    }

    #[test]
    fn a_bare_program_not_on_path_says_so() {
        let got = command_problems(&["nosuchprog".into()], Path::new("."), &no_env());
        assert_eq!(
            got,
            [
                "command[0]: `nosuchprog` is not on PATH; install it, fix the name, or give its full path"
            ]
        );
    }

    #[test]
    fn schemas_are_read_from_the_text() {
        let text =
            "[tools.a]\ninput_schema = { type = \"object\" }\n[tools.b]\ncommand = [\"x\"]\n";
        assert_eq!(schemas_declared(text), ["a"]);
    }
}

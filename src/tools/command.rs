//! Command tools (DESIGN §3): one attempt runs argv without a shell, in its own process
//! group, with the arguments as JSON on stdin and a cleaned environment.
//!
//! Exit codes follow sysexits(3):
//!
//! | exit | kind | why |
//! | --- | --- | --- |
//! | 0 | ok | stdout is the result (JSON if it parses, else text) |
//! | 75 `EX_TEMPFAIL`, 69 `EX_UNAVAILABLE` | `unavailable` | both mean "try again later"; `timeout` is kept for our own per-attempt timeout and `rate_limited` needs a self-report, so a script cannot be misread |
//! | 64 `EX_USAGE`, 65 `EX_DATAERR` | `invalid_arguments` | |
//! | 66 `EX_NOINPUT` | `not_found` | |
//! | 77 `EX_NOPERM` | `permission_denied` | |
//! | 70 `EX_SOFTWARE`, any other, killed by a signal | `tool_bug` | |
//!
//! A tool may name its kind itself by printing `{"error": KIND, "message": "..."}` on
//! stdout (optionally `"retry_after": SECONDS`); that wins over the exit code, with exit 0
//! too. Only the kinds a tool can meaningfully report (transient and permanent ones) are
//! accepted; the guard and malformed kinds belong to agentrun.

use super::CallContext;
use super::outcome::{AttemptResult, ErrorClass, ErrorKind, ToolError};
use crate::config::types::{CommandSpec, ToolDef};
use crate::redact::{self, Secrets};
use serde_json::Value;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Enough stderr to explain a failure; the rest is read and dropped.
const STDERR_CAP: usize = 16 * 1024;
/// How much of stderr goes into an error message.
const STDERR_TAIL: usize = 500;
/// What every command tool receives from agentrun's environment (DESIGN §3), plus `LC_*`.
const CORE_ENV: [&str; 9] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TMPDIR", "TZ", "LANG",
];

pub async fn run(
    spec: &CommandSpec,
    def: &ToolDef,
    args: &Value,
    ctx: &CallContext<'_>,
) -> AttemptResult {
    let (mut cmd, secrets) = build(spec, ctx)?;
    descendants::become_subreaper();
    let result = run_child(&mut cmd, spec, def, args).await;
    super::redacted(result, &secrets)
}

async fn run_child(
    cmd: &mut tokio::process::Command,
    spec: &CommandSpec,
    def: &ToolDef,
    args: &Value,
) -> AttemptResult {
    let mut child = cmd.spawn().map_err(|e| {
        let msg = format!("{}: cannot start `{}`: {e}", def.name, spec.argv[0]);
        ToolError::new(ErrorKind::ToolBug, msg)
    })?;
    // The child leads its own group (process_group(0)), so its pid is the group id.
    let mut group = GroupGuard(child.id());
    let input = args.to_string();
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let work = async {
        let feed = async {
            if let Some(mut pipe) = stdin {
                // A tool that exits without reading its input closes the pipe; that is
                // its business, not an error.
                let _ = pipe.write_all(input.as_bytes()).await;
            }
        };
        let wait = async {
            let status = child.wait().await;
            // Leftover background processes of the tool would hold the output pipes
            // open and outlive the attempt; the attempt is over, so they go too. While
            // any member lives the kernel keeps the group id from being reused, so this
            // cannot hit a stranger's group.
            group.kill();
            status
        };
        let (_, out, err, status) = tokio::join!(
            feed,
            read_capped(stdout, spec.output_cap),
            read_capped(stderr, STDERR_CAP),
            wait
        );
        (out, err, status)
    };
    // Bind first: the borrows of `child` and `group` inside `work` must end before the
    // timeout branch uses them again.
    let finished = tokio::time::timeout(def.retry.timeout, work).await;
    match finished {
        Ok((out, err, Ok(status))) => classify(&def.name, status, &out, &err),
        Ok((_, _, Err(e))) => Err(ToolError::new(
            ErrorKind::ToolBug,
            format!("{}: wait failed: {e}", def.name),
        )),
        Err(_) => {
            // Everything the tool started goes, `setsid` escapees included (issue 12
            // item 9): the whole tree is frozen, then killed, then reaped.
            let tree = child.id().map(descendants::freeze).unwrap_or_default();
            group.kill();
            let killed = descendants::kill(&tree);
            // Reap the direct child first: its exit hands its children to us (we are
            // their subreaper), and so on down the tree.
            let _ = child.wait().await;
            descendants::reap(&killed);
            let limit = humantime::format_duration(def.retry.timeout);
            Err(ToolError::new(
                ErrorKind::Timeout,
                format!("{} exceeded {limit}", def.name),
            ))
        }
    }
}

fn build(
    spec: &CommandSpec,
    ctx: &CallContext<'_>,
) -> Result<(tokio::process::Command, Secrets), ToolError> {
    let Some(program) = spec.argv.first() else {
        return Err(ToolError::new(
            ErrorKind::ToolBug,
            "command tool with an empty argv",
        ));
    };
    // A relative path names a file beside tools.toml; a bare name is looked up in PATH.
    let program = if program.contains('/') {
        spec.cwd.join(program)
    } else {
        program.into()
    };
    let env = child_env(std::env::vars_os(), spec);
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(&spec.argv[1..])
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(env.vars)
        .env("AGENTRUN_RUN_ID", ctx.run_id)
        .env("AGENTRUN_CALL_ID", ctx.key)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Ok((cmd, env.secrets))
}

/// A child's environment and the secret values in it (to redact from its output).
#[derive(Debug, Default)]
pub struct ChildEnv {
    pub vars: Vec<(OsString, OsString)>,
    pub secrets: Secrets,
}

/// The child's environment (DESIGN §3, issue 12 item 6): an allow-list — the core set,
/// the names listed in `env` (the tool's and `[defaults]`'s), and `set`. With
/// `inherit = "all"` every other variable passes too, except secret-looking names
/// ([`redact::is_secret_name`]) and values holding `://user:password@`. The values of
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
        let secret = redact::is_secret_name(&n) || redact::url_credentials(&v).is_some();
        let listed = spec.env.iter().any(|a| *a == n);
        let core = CORE_ENV.contains(&n.as_ref()) || n.starts_with("LC_");
        if listed && secret {
            out.secrets.add(&v);
        }
        if listed || core || (spec.inherit_all && !secret) {
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

/// Kills the child's whole process group when dropped, so a cancelled attempt (Ctrl-C,
/// a dropped future) leaves nothing behind either.
struct GroupGuard(Option<u32>);

impl GroupGuard {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take().and_then(|p| libc::pid_t::try_from(p).ok()) {
            // SAFETY: kill(2) has no memory-safety preconditions. A group that is
            // already gone gives ESRCH, which is fine.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The processes a tool started, found through `/proc` (Linux). agentrun is a child
/// subreaper, so a descendant whose parent died is handed to agentrun rather than to
/// init and can still be reaped here.
mod descendants {
    /// Marks agentrun as a child subreaper (once; harmless to repeat).
    pub fn become_subreaper() {
        #[cfg(target_os = "linux")]
        {
            static ONCE: std::sync::Once = std::sync::Once::new();
            // SAFETY: prctl(2) with PR_SET_CHILD_SUBREAPER takes plain integers.
            ONCE.call_once(|| unsafe {
                libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
            });
        }
    }

    /// `(pid, parent pid)` of every process we can see.
    fn table() -> Vec<(i32, i32)> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| {
            let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
            let rest = &stat[stat.rfind(')')? + 1..];
            let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect()
    }

    /// Every descendant of `root` (not `root` itself), parents before children, each
    /// stopped with SIGSTOP so none can fork a new one behind our back. Scans until a
    /// pass finds nothing new.
    pub fn freeze(root: u32) -> Vec<i32> {
        let Ok(root) = i32::try_from(root) else {
            return Vec::new();
        };
        let mut found: Vec<i32> = Vec::new();
        for _ in 0..100 {
            let table = table();
            let mut grew = false;
            let mut i = 0;
            loop {
                let parents: Vec<i32> = std::iter::once(root)
                    .chain(found[i..].iter().copied())
                    .collect();
                let before = found.len();
                for &(pid, ppid) in &table {
                    if parents.contains(&ppid) && pid != root && !found.contains(&pid) {
                        // SAFETY: kill(2) has no memory-safety preconditions.
                        unsafe { libc::kill(pid, libc::SIGSTOP) };
                        found.push(pid);
                    }
                }
                if found.len() == before {
                    break;
                }
                grew = true;
                i = before;
            }
            if !grew {
                break;
            }
        }
        found
    }

    /// Kills the tree; returns the processes that were killed (not one we may not
    /// signal, which `reap` must then not wait for).
    pub fn kill(tree: &[i32]) -> Vec<i32> {
        // SAFETY: as above. A stopped process still dies of SIGKILL.
        let killed = |pid: &&i32| unsafe { libc::kill(**pid, libc::SIGKILL) } == 0;
        tree.iter().filter(killed).copied().collect()
    }

    /// Waits for each killed descendant that has become our child. Parents come first,
    /// so by the time a process is waited for, its parent's exit has handed it to us;
    /// one that is not ours (ECHILD) is skipped.
    pub fn reap(tree: &[i32]) {
        for &pid in tree {
            let mut status = 0;
            // SAFETY: waitpid(2) writes only to `status`. The pid was SIGKILLed, so this
            // returns as soon as the kernel has torn it down.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
    }
}

/// Output read up to a cap; `total` counts everything the child wrote.
struct Captured {
    bytes: Vec<u8>,
    total: usize,
}

/// Reads a pipe to its end, keeping the first `cap` bytes. Reading goes on past the cap
/// so a chatty child never blocks on a full pipe.
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>, cap: usize) -> Captured {
    let mut out = Captured {
        bytes: Vec::new(),
        total: 0,
    };
    let Some(mut pipe) = pipe else { return out };
    let mut buf = vec![0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => {
                let keep = n.min(cap.saturating_sub(out.bytes.len()));
                out.bytes.extend_from_slice(&buf[..keep]);
                out.total += n;
            }
        }
    }
}

impl Captured {
    fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.bytes).into_owned();
        if self.total > self.bytes.len() {
            text.push_str(&format!("\n[output cut at {} bytes]", self.bytes.len()));
        }
        text
    }
}

/// Maps a finished child to the attempt's result (the table in the module doc).
fn classify(tool: &str, status: ExitStatus, out: &Captured, err: &Captured) -> AttemptResult {
    let text = out.text();
    let parsed = (out.total == out.bytes.len())
        .then(|| serde_json::from_str::<Value>(&text).ok())
        .flatten();
    let stderr = tail(&err.text(), STDERR_TAIL);
    if let Some(reported) = parsed.as_ref().and_then(|v| self_report(tool, v, &stderr)) {
        return Err(reported);
    }
    let kind = match status.code() {
        // `echo` ends text with a newline the model does not need to see.
        Some(0) => {
            return Ok(
                parsed.unwrap_or_else(|| Value::String(text.trim_end_matches('\n').to_string()))
            );
        }
        Some(code) => exit_kind(code),
        None => ErrorKind::ToolBug,
    };
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        (None, None) => "ended abnormally".to_string(),
    };
    let mut message = format!("{tool} {how}");
    if !stderr.is_empty() {
        message.push_str(": ");
        message.push_str(&stderr);
    }
    let err = ToolError::new(kind, message);
    // sysexits 75/69 say "not done, try later": proof enough to retry a tool that is
    // not idempotent (DESIGN §3 Retries).
    Err(match status.code() {
        Some(69 | 75) => err.not_acted(),
        _ => err,
    })
}

/// The kind for a non-zero sysexits code.
pub fn exit_kind(code: i32) -> ErrorKind {
    match code {
        69 | 75 => ErrorKind::Unavailable,
        64 | 65 => ErrorKind::InvalidArguments,
        66 => ErrorKind::NotFound,
        77 => ErrorKind::PermissionDenied,
        _ => ErrorKind::ToolBug,
    }
}

/// `{"error": KIND, "message": ...}` printed by the tool, when KIND is one a tool may use.
fn self_report(tool: &str, v: &Value, stderr: &str) -> Option<ToolError> {
    let kind = ErrorKind::parse(v.get("error")?.as_str()?)?;
    let message = match v.get("message").and_then(Value::as_str) {
        Some(m) => m.to_string(),
        None if !stderr.is_empty() => stderr.to_string(),
        None => format!("{tool} reported {}", kind.as_str()),
    };
    if !matches!(kind.class(), ErrorClass::Transient | ErrorClass::Permanent)
        || matches!(kind, ErrorKind::OutcomeUnknown | ErrorKind::AllToolsFailed)
    {
        let msg = format!(
            "{tool} reported error kind `{}`, which only agentrun may use",
            kind.as_str()
        );
        return Some(ToolError::new(ErrorKind::ToolBug, msg));
    }
    let mut err = ToolError::new(kind, message);
    // A tool that says it is rate limited or unavailable says it did not act.
    err.not_acted = matches!(kind, ErrorKind::RateLimited | ErrorKind::Unavailable);
    err.retry_after = v
        .get("retry_after")
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64);
    Some(err)
}

/// The last `max` characters of `s`, trimmed.
pub fn tail(s: &str, max: usize) -> String {
    let s = s.trim();
    let count = s.chars().count();
    if count <= max {
        return s.to_string();
    }
    let cut: String = s.chars().skip(count - max).collect();
    format!("…{}", cut.trim_start())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    fn spec(listed: &[&str], set: &[(&str, &str)], inherit_all: bool) -> CommandSpec {
        CommandSpec {
            argv: vec!["t".into()],
            env: listed.iter().map(|s| s.to_string()).collect(),
            set: set
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            inherit_all,
            cwd: ".".into(),
            output_cap: 1024,
        }
    }

    /// The leaks of issue 12 item 6, all at once.
    fn parent() -> Vec<(OsString, OsString)> {
        env(&[
            ("PATH", "/bin"),
            ("LC_ALL", "C"),
            ("EDITOR", "vi"),
            ("GITHUB_PAT", "ghp_abcdef"),
            ("DATABASE_URL", "postgres://u:pw12@h/db"),
            ("HTTPS_PROXY", "http://proxyuser:proxypass@proxy:3128"),
            ("MYSQL_PWD", "mysqlpw"),
            ("SENTRY_DSN", "https://abc@sentry.io/1"),
            ("SSH_AUTH_SOCK", "/tmp/agent.sock"),
            ("KB_TOKEN", "kb-secret"),
        ])
    }

    #[test]
    fn only_the_core_set_listed_names_and_set_values_reach_the_child() {
        let got = child_env(
            parent().into_iter(),
            &spec(&["KB_TOKEN", "EDITOR"], &[("MODE", "test")], false),
        );
        assert_eq!(
            got.vars,
            env(&[
                ("PATH", "/bin"),
                ("LC_ALL", "C"),
                ("EDITOR", "vi"),
                ("KB_TOKEN", "kb-secret"),
                ("MODE", "test"),
            ])
        );
        assert_eq!(got.secrets.text("x kb-secret y"), "x [redacted] y");
    }

    #[test]
    fn inherit_all_still_removes_secret_names_and_credential_values() {
        let got = child_env(parent().into_iter(), &spec(&[], &[], true));
        assert_eq!(
            got.vars,
            env(&[("PATH", "/bin"), ("LC_ALL", "C"), ("EDITOR", "vi")])
        );
    }

    #[test]
    fn sysexits_codes_map_to_kinds() {
        let kinds: Vec<_> = [75, 69, 64, 65, 66, 77, 70, 1, 2].map(exit_kind).to_vec();
        use ErrorKind::*;
        let want = [
            Unavailable,
            Unavailable,
            InvalidArguments,
            InvalidArguments,
            NotFound,
            PermissionDenied,
            ToolBug,
            ToolBug,
            ToolBug,
        ];
        assert_eq!(kinds, want);
    }

    #[test]
    fn a_tool_cannot_claim_a_guard_kind() {
        let v = serde_json::json!({"error": "circuit_open", "message": "x"});
        let err = self_report("t", &v, "").unwrap();
        assert_eq!(err.kind, ErrorKind::ToolBug);
    }

    #[test]
    fn an_error_field_that_is_not_a_kind_is_data() {
        let v = serde_json::json!({"error": "no results"});
        assert_eq!(self_report("t", &v, ""), None);
    }

    #[test]
    fn tail_keeps_the_end() {
        assert_eq!(tail("  abc  ", 10), "abc");
        assert_eq!(tail("0123456789", 3), "…789");
    }
}

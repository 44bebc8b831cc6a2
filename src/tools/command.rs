//! Command tools (docs/ARCHITECTURE.md §3.1): one attempt runs argv without a shell, in its own
//! process group, with the arguments as JSON on stdin and a cleaned environment.
//!
//! Exit codes follow sysexits(3):
//!
//! | exit | kind | why |
//! | --- | --- | --- |
//! | 0 | ok | stdout is the result (JSON if it parses, else text) |
//! | 75 `EX_TEMPFAIL`, 69 `EX_UNAVAILABLE` | `unavailable` | both mean "try again later"; `timeout`
//! is kept for our own per-attempt timeout and `rate_limited` needs a self-report, so a script
//! cannot be misread | | 64 `EX_USAGE`, 65 `EX_DATAERR` | `invalid_arguments` | | | 66 `EX_NOINPUT`
//! | `not_found` | | | 77 `EX_NOPERM` | `permission_denied` | |
//! | 70 `EX_SOFTWARE`, any other, killed by a signal | `tool_bug` | |
//!
//! A tool may name its kind itself by printing `{"error": KIND, "message": "..."}` on
//! stdout (optionally `"retry_after": SECONDS`); that wins over the exit code, with exit 0
//! too. Only the kinds a tool can meaningfully report (transient and permanent ones) are
//! accepted; the guard and malformed kinds belong to agentrun.

use super::CallContext;
pub use super::env::{ChildEnv, child_env};
use super::outcome::{AttemptResult, ErrorClass, ErrorKind, ToolError};
use super::sandbox;
use crate::config::types::{CommandSpec, ToolDef};
use crate::redact::Secrets;
use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Enough stderr to explain a failure; the rest is read and dropped.
const STDERR_CAP: usize = 16 * 1024;
/// How much of stderr goes into an error message.
const STDERR_TAIL: usize = 500;

pub async fn run(
    spec: &CommandSpec,
    def: &ToolDef,
    args: &Value,
    ctx: &CallContext<'_>,
) -> AttemptResult {
    let tmp = CallTemp::for_sandbox(spec, ctx.key);
    let (mut cmd, secrets) = build(spec, &def.name, tmp.as_ref().map(CallTemp::path), ctx)?;
    descendants::become_subreaper();
    let run = Run {
        name: &def.name,
        timeout: def.retry.timeout,
        input: args.to_string(),
    };
    let result = run_child(&mut cmd, spec, run, ctx.key)
        .await
        .and_then(|(status, out, err)| classify(&def.name, status, &out, &err));
    let result = sandbox_denied(spec, &def.name, result);
    if let Some(tmp) = tmp {
        tmp.done(&result);
    }
    super::redacted(result, &secrets)
}

/// How a hook ended (issue 26): its exit code (`None`: killed by a signal), stdout
/// and stderr, secrets redacted. The hook decides what the code means.
#[derive(Debug, Clone, PartialEq)]
pub struct HookExit {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// stdout was longer than the hook's output cap and was cut: not a decision.
    pub cut: bool,
}

/// Runs a hook exactly as a command tool attempt is run — the same spawn, environment
/// allow-list, process group, timeout and cleanup — with `input` on stdin. A timeout
/// or a failure to start is the error.
pub async fn run_hook(
    spec: &CommandSpec,
    name: &str,
    timeout: Duration,
    input: &Value,
    ctx: &CallContext<'_>,
) -> Result<HookExit, ToolError> {
    // A hook is sandboxed like a command tool (issue 26), with a temp dir of its own
    // that does not outlive it.
    let tmp = CallTemp::fresh(spec, &format!("{}-{name}", ctx.key));
    let (mut cmd, secrets) = build(spec, name, tmp.as_ref().map(CallTemp::path), ctx)?;
    descendants::become_subreaper();
    let run = Run {
        name,
        timeout,
        input: input.to_string(),
    };
    let ran = run_child(&mut cmd, spec, run, ctx.key).await;
    if let Some(tmp) = tmp {
        tmp.remove();
    }
    let (status, out, err) = ran.map_err(|mut e| {
        e.message = secrets.text(&e.message);
        e
    })?;
    Ok(HookExit {
        code: status.code(),
        cut: out.total > out.bytes.len(),
        stdout: secrets.text(&out.text()),
        stderr: secrets.text(&tail(&err.text(), STDERR_TAIL)),
    })
}

/// One child to run: whose it is (for messages), its time limit and its stdin.
struct Run<'a> {
    name: &'a str,
    timeout: Duration,
    input: String,
}

/// A sandboxed tool that failed saying it was refused access is `permission_denied`,
/// with a hint naming what it was denied (docs/ARCHITECTURE.md §7).
fn sandbox_denied(spec: &CommandSpec, tool: &str, result: AttemptResult) -> AttemptResult {
    match result {
        Err(e) if spec.sandbox.confines() && e.kind == ErrorKind::ToolBug => {
            match sandbox::denial(&spec.sandbox, &e.message) {
                Some(hint) => Err(ToolError::new(
                    ErrorKind::PermissionDenied,
                    format!("{tool}: {hint}"),
                )),
                None => Err(e),
            }
        }
        other => other,
    }
}

/// The per-call temp dir of a sandboxed tool (its `TMPDIR`, writable): named after the
/// call's idempotency key (which holds the run's random salt), so every attempt of the
/// call finds what the last one left there (a tool counting its own attempts does);
/// removed once the call cannot be retried (success, or a failure that is not
/// transient). A dir already at that name is reused only when it is this user's own,
/// private (0700) and not a link; anything else — planted by another local user — is
/// left alone and a fresh one is made (docs/security.md, Temp folders).
struct CallTemp(std::path::PathBuf);

impl CallTemp {
    fn for_sandbox(spec: &CommandSpec, key: &str) -> Option<CallTemp> {
        if spec.sandbox.mode == crate::config::SandboxMode::Off {
            return None;
        }
        let dir = call_parent().join(format!("agentrun-call-{}", safe_name(key)));
        match make_private(&dir) {
            Ok(()) => Some(CallTemp(dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && is_own_private(&dir) => {
                Some(CallTemp(dir))
            }
            Err(_) => CallTemp::fresh(spec, key),
        }
    }

    /// A new private dir with a random name, never one that existed before (a hook's:
    /// its key, `step-1` or `run-end`, is known to anyone).
    fn fresh(spec: &CommandSpec, key: &str) -> Option<CallTemp> {
        if spec.sandbox.mode == crate::config::SandboxMode::Off {
            return None;
        }
        (0..8).find_map(|_| {
            let name = format!(
                "agentrun-call-{}-{:016x}",
                safe_name(key),
                rand::random::<u64>()
            );
            let dir = call_parent().join(name);
            make_private(&dir).ok().map(|()| CallTemp(dir))
        })
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// Removes the dir unless `result` may be retried.
    fn done(self, result: &AttemptResult) {
        let retried = matches!(result, Err(e) if e.kind.class() == ErrorClass::Transient);
        if !retried {
            self.remove();
        }
    }

    fn remove(self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where call temp dirs are made: one root per user, which every sandboxed child sees
/// empty but for its own (docs/security.md, Sandbox) — when that root is this user's
/// own and private; else the system's temp dir.
fn call_parent() -> std::path::PathBuf {
    let root = sandbox::temp_root();
    match make_private(&root) {
        Ok(()) => root,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && is_own_private(&root) => root,
        Err(_) => std::env::temp_dir(),
    }
}

fn safe_name(key: &str) -> String {
    key.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Creates `dir` with mode 0700; fails if anything is there already.
fn make_private(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

/// A dir (not a link) owned by this user that nobody else may enter.
fn is_own_private(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == me && m.mode() & 0o077 == 0)
}

async fn run_child(
    cmd: &mut tokio::process::Command,
    spec: &CommandSpec,
    run: Run<'_>,
    key: &str,
) -> Result<(ExitStatus, Captured, Captured), ToolError> {
    let Run {
        name,
        timeout,
        input,
    } = run;
    let mut child = cmd.spawn().map_err(|e| {
        let msg = format!("{name}: cannot start `{}`: {e}", spec.argv[0]);
        ToolError::new(ErrorKind::ToolBug, msg)
    })?;
    // The child leads its own group (process_group(0)), so its pid is the group id.
    let mut leftovers = Leftovers::new(child.id(), key);
    let spawned = descendants::Spawned::new(child.id(), key);
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
            // Reaped: its pid may now be anyone's.
            drop(spawned);
            // The attempt is over: whatever the tool left running (background jobs in
            // its group, double-forked daemons handed to us as their subreaper) would
            // hold the output pipes open and outlive it, so it goes now, and is reaped.
            let killed = leftovers.stop(None);
            descendants::reap(&killed);
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
    // Bind first: the borrows of `child` and `leftovers` inside `work` must end before
    // the timeout branch uses them again.
    let finished = tokio::time::timeout(timeout, work).await;
    match finished {
        Ok((out, err, Ok(status))) => Ok((status, out, err)),
        Ok((_, _, Err(e))) => Err(ToolError::new(
            ErrorKind::ToolBug,
            format!("{name}: wait failed: {e}"),
        )),
        Err(_) => {
            // Everything the tool started goes, `setsid` escapees and daemons whose
            // parent already exited included (issue 12 item 9): frozen, killed, reaped.
            let killed = leftovers.stop(child.id());
            // Reap the direct child first: its exit hands its children to us (we are
            // their subreaper), and so on down the tree.
            let _ = child.wait().await;
            descendants::reap(&killed);
            let limit = humantime::format_duration(timeout);
            Err(ToolError::new(
                ErrorKind::Timeout,
                format!("{name} exceeded {limit}"),
            ))
        }
    }
}

fn build(
    spec: &CommandSpec,
    name: &str,
    tmp: Option<&std::path::Path>,
    ctx: &CallContext<'_>,
) -> Result<(tokio::process::Command, Secrets), ToolError> {
    // The call's span, so what the tool calls joins the run's trace (off: absent).
    let traceparent = crate::telemetry::traceparent(ctx.run_id, ctx.call_id);
    let all = [
        ("AGENTRUN_RUN_ID", ctx.run_id),
        ("AGENTRUN_CALL_ID", ctx.key),
        ("TRACEPARENT", traceparent.as_deref().unwrap_or_default()),
    ];
    let extra = &all[..if traceparent.is_some() { 3 } else { 2 }];
    // A sandboxed tool starts through the trampoline anyway: it dies with agentrun too.
    let before = super::spawn::Before {
        tmp,
        die_with_parent: spec.sandbox.confines(),
        supervise: false,
    };
    let mut child = super::spawn::command(spec, extra, before).map_err(|e| {
        let arg0 = spec.argv.first().map(String::as_str).unwrap_or_default();
        ToolError::new(
            ErrorKind::ToolBug,
            format!("{name}: cannot start `{arg0}`: {e}"),
        )
    })?;
    child
        .cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Ok((child.cmd, child.env.secrets))
}

/// What one attempt may leave behind: its process group and every process carrying
/// its `AGENTRUN_CALL_ID` that was handed to agentrun as an orphan. Dropped without
/// [`Leftovers::stop`] (a cancelled attempt: Ctrl-C, a dropped future), it still kills
/// them all; only the reaping is then left to agentrun's exit.
struct Leftovers {
    /// The tool's process group, until it has been killed once: after that every member
    /// is gone and the id may be reused, so it is never signalled again.
    pgid: Option<i32>,
    key: String,
    armed: bool,
}

impl Leftovers {
    fn new(pgid: Option<u32>, key: &str) -> Leftovers {
        Leftovers {
            pgid: pgid.and_then(|p| i32::try_from(p).ok()),
            key: key.to_string(),
            armed: true,
        }
    }

    /// Freezes and kills everything the attempt started: `child` (the tool itself, when
    /// it still runs) and its descendants, the members of its group, and the orphans
    /// carrying its call id with theirs. Returns the processes killed besides `child`,
    /// for [`descendants::reap`] once `child` has been waited for.
    fn stop(&mut self, child: Option<u32>) -> Vec<i32> {
        self.armed = false;
        let child = child.and_then(|p| i32::try_from(p).ok());
        let tree = descendants::freeze(child, self.pgid, &self.key);
        if let Some(pgid) = self.pgid.take() {
            // SAFETY: kill(2) has no memory-safety preconditions. A group that is
            // already gone gives ESRCH, which is fine. While any member lives the
            // kernel keeps the group id from being reused, so this cannot hit a
            // stranger's group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
        descendants::kill(&tree)
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        if self.armed {
            self.stop(None);
        }
    }
}

/// The processes a tool started, found through `/proc` (Linux). agentrun is a child
/// subreaper, so a descendant whose parent died is handed to agentrun rather than to
/// init, and can be told apart by the `AGENTRUN_CALL_ID` in its environment, killed and
/// reaped here. Elsewhere `/proc` is absent and only the process group is killed.
mod descendants {
    use std::time::{Duration, Instant};

    /// How long reaping waits for killed processes to die before leaving them to
    /// agentrun's exit (SIGKILL is not instant for a process in uninterruptible sleep).
    const REAP_WITHIN: Duration = Duration::from_secs(2);

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

    fn me() -> i32 {
        i32::try_from(std::process::id()).unwrap_or(-1)
    }

    /// The tools agentrun started and has not reaped yet, with their call's key
    /// (issue 23): a worker with hundreds of runs has as many tools running, all its
    /// children, and each call's scan for leftovers would otherwise read two `/proc`
    /// files of every one of them — most of a busy worker's CPU per tool call. Another
    /// call's tool is passed by at once; unknown children (orphans) are read as before.
    static SPAWNED: std::sync::Mutex<Vec<(i32, String)>> = std::sync::Mutex::new(Vec::new());

    /// A tool's entry in [`SPAWNED`], removed when dropped (once it has been reaped).
    pub struct Spawned(Option<i32>);

    impl Spawned {
        pub fn new(pid: Option<u32>, key: &str) -> Spawned {
            let pid = pid.and_then(|p| i32::try_from(p).ok());
            if let Some(pid) = pid {
                let mut all = SPAWNED.lock().unwrap_or_else(|e| e.into_inner());
                all.push((pid, key.to_string()));
            }
            Spawned(pid)
        }
    }

    impl Drop for Spawned {
        fn drop(&mut self) {
            if let Some(pid) = self.0 {
                let mut all = SPAWNED.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(at) = all.iter().position(|(p, _)| *p == pid) {
                    all.swap_remove(at);
                }
            }
        }
    }

    /// The running tools of calls other than `key`, as of now.
    fn others(key: &str) -> std::collections::HashSet<i32> {
        let all = SPAWNED.lock().unwrap_or_else(|e| e.into_inner());
        all.iter()
            .filter(|(_, k)| k != key)
            .map(|(p, _)| *p)
            .collect()
    }

    /// One line of the process table.
    #[derive(Clone, Copy)]
    struct Proc {
        pid: i32,
        ppid: i32,
        pgrp: i32,
    }

    fn stat(pid: i32) -> Option<Proc> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
        let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace().skip(1);
        let ppid = rest.next()?.parse().ok()?;
        let pgrp = rest.next()?.parse().ok()?;
        Some(Proc { pid, ppid, pgrp })
    }

    /// Every process we can see.
    fn table() -> Vec<Proc> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| stat(e.ok()?.file_name().to_str()?.parse().ok()?))
            .collect()
    }

    /// Whether `pid` was started with `AGENTRUN_CALL_ID=key` in its environment.
    /// Readable for processes of our own user (and for root, any); a zombie's is empty.
    fn carries(pid: i32, key: &str) -> bool {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            return false;
        };
        let want = format!("AGENTRUN_CALL_ID={key}");
        environ.split(|b| *b == 0).any(|v| v == want.as_bytes())
    }

    /// The children of `pid` (every thread's), from `/proc/PID/task/*/children` when
    /// the kernel has them (3.5+, CONFIG_PROC_CHILDREN): a few reads instead of one per
    /// process on the machine.
    ///
    /// For agentrun itself only its main thread's: an orphan is handed to the first live
    /// thread of its subreaper, which is the main thread for as long as the process
    /// lives, and the other threads' children are what agentrun started itself (tools,
    /// servers), never leftovers. A worker has a dozen threads and hundreds of tools
    /// running; reading every thread's list after every call cost ~5 % of its CPU.
    fn children(pid: i32) -> Option<Vec<i32>> {
        if pid == me() {
            let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
            return Some(
                text.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect(),
            );
        }
        let mut out = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
        {
            // A thread that ended since the listing has no file any more; the others
            // still count (failing the whole scan would miss every leftover).
            let Ok(text) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
        Some(out)
    }

    /// Who is whose child, as of one scan.
    enum Tree {
        /// Ask `/proc/PID/task/*/children` as needed.
        Children,
        /// The whole process table, where those files are missing.
        Table(Vec<Proc>),
    }

    impl Tree {
        fn now() -> Tree {
            static HAS_CHILDREN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            let me = me();
            let has = *HAS_CHILDREN.get_or_init(|| {
                std::fs::metadata(format!("/proc/{me}/task/{me}/children")).is_ok()
            });
            if has {
                Tree::Children
            } else {
                Tree::Table(table())
            }
        }

        fn children(&self, pid: i32) -> Vec<i32> {
            match self {
                Tree::Children => children(pid).unwrap_or_default(),
                Tree::Table(t) => t.iter().filter(|p| p.ppid == pid).map(|p| p.pid).collect(),
            }
        }
    }

    /// Everything the attempt started, besides `child` itself: `child`'s descendants,
    /// and our orphans (parent = agentrun) that are in the tool's group `pgid` or carry
    /// its call id, with their descendants. Parents come before children and each is
    /// stopped with SIGSTOP as found, so none can fork a new one behind our back; scans
    /// until a pass finds nothing new.
    pub fn freeze(child: Option<i32>, pgid: Option<i32>, key: &str) -> Vec<i32> {
        let me = me();
        let mut found: Vec<i32> = Vec::new();
        // Orphans already ruled out (their environment will not change).
        let mut strangers: Vec<i32> = Vec::new();
        for _ in 0..100 {
            let tree = Tree::now();
            let before = found.len();
            let others = others(key);
            for pid in tree.children(me) {
                if Some(pid) == child
                    || found.contains(&pid)
                    || strangers.contains(&pid)
                    || others.contains(&pid)
                {
                    continue;
                }
                let in_group = || pgid.is_some() && stat(pid).is_some_and(|p| Some(p.pgrp) == pgid);
                if in_group() || carries(pid, key) {
                    stop(pid);
                    found.push(pid);
                } else {
                    strangers.push(pid);
                }
            }
            // Then everything below the child and the orphans found, level by level.
            let mut i = 0;
            loop {
                let parents: Vec<i32> = child
                    .into_iter()
                    .chain(found[i..].iter().copied())
                    .collect();
                let level = found.len();
                for parent in parents {
                    for pid in tree.children(parent) {
                        if Some(pid) != child && !found.contains(&pid) {
                            stop(pid);
                            found.push(pid);
                        }
                    }
                }
                if found.len() == level {
                    break;
                }
                i = level;
            }
            if found.len() == before {
                break;
            }
        }
        found
    }

    fn stop(pid: i32) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
    }

    /// Kills the tree; returns the processes that were killed (not one we may not
    /// signal, which `reap` must then not wait for).
    pub fn kill(tree: &[i32]) -> Vec<i32> {
        // SAFETY: as above. A stopped process still dies of SIGKILL.
        let killed = |pid: &&i32| unsafe { libc::kill(**pid, libc::SIGKILL) } == 0;
        tree.iter().filter(killed).copied().collect()
    }

    /// Waits for each killed process, so none is left a zombie. A process whose parent
    /// was killed too becomes our child once that parent has died (we are the
    /// subreaper); one whose parent is someone else's is not ours to reap.
    pub fn reap(killed: &[i32]) {
        let me = me();
        let deadline = Instant::now() + REAP_WITHIN;
        let mut left = killed.to_vec();
        while !left.is_empty() {
            let before = left.len();
            left.retain(|&pid| {
                let mut status = 0;
                // SAFETY: waitpid(2) writes only to `status`; WNOHANG never blocks.
                match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
                    0 => true, // ours, still dying
                    r if r == pid => false,
                    _ => match stat(pid) {
                        // Not (yet) our child: keep waiting while its parent is one of
                        // the killed, which hands it to us when it dies.
                        Some(p) => p.ppid != me && killed.contains(&p.ppid),
                        None => false,
                    },
                }
            });
            if Instant::now() >= deadline {
                return;
            }
            if left.len() == before {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    #[cfg(test)]
    mod tests {
        use super::*;

        /// A `sleep` carrying `AGENTRUN_CALL_ID=key` whose parent has exited: an orphan
        /// handed to this process (a subreaper, as agentrun is).
        fn orphan(key: &str) -> i32 {
            become_subreaper();
            let out = std::process::Command::new("sh")
                .args(["-c", "sleep 30 </dev/null >/dev/null 2>&1 & echo $!"])
                .env("AGENTRUN_CALL_ID", key)
                .output()
                .expect("sh");
            let pid = String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("pid");
            // Past its execve: its environment is in place.
            assert!((0..10_000).any(|_| carries(pid, key)));
            pid
        }

        fn kill_and_reap(pid: i32) {
            // SAFETY: kill(2) and waitpid(2) with plain integers and a null status.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }

        #[test]
        fn another_calls_running_tool_is_passed_by_until_it_is_reaped() {
            let pid = orphan("r:s:mine");
            let theirs = Spawned::new(Some(pid as u32), "r:s:theirs");
            assert!(others("r:s:mine").contains(&pid));
            assert!(!others("r:s:theirs").contains(&pid), "not for its own call");
            // Even carrying this call's id, a tool another call started is not this
            // call's leftover while that call holds it.
            assert_eq!(freeze(None, None, "r:s:mine"), Vec::<i32>::new());
            drop(theirs);
            assert!(!others("r:s:mine").contains(&pid));
            assert_eq!(freeze(None, None, "r:s:mine"), vec![pid], "an orphan again");
            kill_and_reap(pid);
        }

        #[test]
        fn both_ways_of_reading_the_tree_find_an_orphan_and_its_call_id() {
            let pid = orphan("r:s:unit-test");
            let me = me();
            assert!(Tree::now().children(me).contains(&pid));
            assert!(Tree::Table(table()).children(me).contains(&pid));
            assert!(!carries(pid, "r:s:unit"));
            kill_and_reap(pid);
        }

        #[test]
        fn orphans_are_handed_to_the_main_thread_which_alone_is_read() {
            // Spawned from this (test) thread, a child is this thread's, and not one
            // the scan of agentrun's own children sees: what agentrun starts itself is
            // never a leftover; orphans go to the main thread, whose list is read.
            let mut child = std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("sleep");
            let direct = i32::try_from(child.id()).expect("pid");
            let pid = orphan("r:s:main");
            let seen = Tree::now().children(me());
            assert!(seen.contains(&pid), "{seen:?}");
            assert!(!seen.contains(&direct), "{seen:?}");
            let _ = child.kill();
            let _ = child.wait();
            kill_and_reap(pid);
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
    // not idempotent (docs/ARCHITECTURE.md §3.3).
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
    use std::ffi::OsString;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    fn spec(listed: &[&str], set: &[(&str, &str)], inherit_all: bool) -> CommandSpec {
        CommandSpec {
            argv: vec!["t".into()],
            program: None,
            env: listed.iter().map(|s| s.to_string()).collect(),
            set: set
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            inherit_all,
            cwd: ".".into(),
            output_cap: 1024,
            sandbox: Default::default(),
        }
    }

    fn sandboxed() -> CommandSpec {
        let mut s = spec(&[], &[], false);
        s.sandbox.mode = crate::config::SandboxMode::Workspace;
        s
    }

    /// A dir another local user planted at a call's temp name is never used; a hook's
    /// temp dir is fresh, private and random every time (docs/security.md).
    #[test]
    fn a_planted_temp_dir_is_never_reused_and_hooks_get_fresh_private_ones() {
        use std::os::unix::fs::PermissionsExt;
        let key = format!("planted-{:016x}", rand::random::<u64>());
        let planted = call_parent().join(format!("agentrun-call-{key}"));
        std::fs::create_dir(&planted).unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
        let tmp = CallTemp::for_sandbox(&sandboxed(), &key).expect("a temp dir");
        assert_ne!(tmp.path(), planted.as_path());
        let mode = std::fs::metadata(tmp.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        tmp.remove();
        let _ = std::fs::remove_dir(&planted);

        let (a, b) = (
            CallTemp::fresh(&sandboxed(), "step-1").expect("a"),
            CallTemp::fresh(&sandboxed(), "step-1").expect("b"),
        );
        assert_ne!(a.path(), b.path());
        assert!(is_own_private(a.path()) && is_own_private(b.path()));
        let (pa, pb) = (a.path().to_path_buf(), b.path().to_path_buf());
        a.remove();
        b.remove();
        assert!(!pa.exists() && !pb.exists(), "removed after");
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
            // Issue 22: secret values under innocent names.
            (
                "SLACK_WEBHOOK_URL",
                "https://hooks.slack.com/services/T0/B0/abcdefghijkl",
            ),
            ("GITLAB_CI_VAR", "glpat-abcdefghij0123456789"),
            (
                "REPO_URL",
                "https://ghp_abcdefghij0123456789@github.com/o/r.git",
            ),
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

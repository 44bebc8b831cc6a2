//! The trampoline (issue 22; the spawn design of issue 23): what must happen in a
//! child before it execs its program — the sandbox, the death signal — without a
//! `pre_exec` closure, which would make the standard library fork all of agentrun.
//!
//! [`super::spawn::command`] spawns agentrun *itself* (the absolute path of its own
//! executable, resolved once) with `posix_spawn`, as `agentrun __exec-tool POLICY PROGRAM ARGV0 [ARGS…]`. `main`
//! hands that to [`run_if_asked`] before parsing anything or starting a runtime; it
//! applies the policy to its own, single-threaded process and execs `PROGRAM` with the
//! environment it was given. The pid, the process group and the pipes stay the
//! tool's, so everything that watches the child (timeouts, group kills) is unchanged.

pub use super::before::Before;
use super::before::SETUP_FAILED;
use super::sandbox::{self, Policy};
use crate::config::CommandSpec;
use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// The reserved first argument. Not a subcommand: clap never sees it.
pub const ARG: &str = "__exec-tool";

static ME: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();

/// agentrun's own executable, resolved once.
fn me() -> Option<&'static Path> {
    ME.get_or_init(|| std::env::current_exe().ok()).as_deref()
}

/// Makes `program` (an agentrun executable) the trampoline instead of this process's
/// own executable: for a program that links agentrun's library but is not agentrun —
/// a test binary running tools in process. Only before the first sandboxed spawn.
pub fn use_program(program: &Path) {
    let _ = ME.set(Some(program.to_path_buf()));
}

/// The program and arguments that run `program` (as `argv0`, with `args`) under
/// `policy`: agentrun itself as the trampoline.
pub fn wrap(
    policy: &Policy,
    program: &Path,
    argv0: &str,
    args: &[String],
) -> Result<(PathBuf, Vec<OsString>), String> {
    let me = me().ok_or("cannot find agentrun's own executable to start the sandbox")?;
    let policy = serde_json::to_string(policy).map_err(|e| e.to_string())?;
    let mut argv: Vec<OsString> = vec![ARG.into(), policy.into(), program.into(), argv0.into()];
    argv.extend(args.iter().map(OsString::from));
    Ok((me.to_path_buf(), argv))
}

/// The policy a child of `spec` must start under, or `None` when nothing is to be
/// done before it execs (then it is spawned directly).
pub fn policy(spec: &CommandSpec, before: Before<'_>) -> Option<Policy> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let db = sandbox::database();
    let files = sandbox::protected_files();
    let places = sandbox::Places {
        cwd: &spec.cwd,
        tmp: before.tmp,
        db: db.as_deref(),
        files: &files,
        home: home.as_deref(),
    };
    Policy::new(&spec.sandbox, &places, before)
}

/// When this process was started as the trampoline: applies the policy and execs the
/// program (never returns). Otherwise returns at once.
pub fn run_if_asked() {
    let mut args = std::env::args_os();
    if args.nth(1).as_deref() != Some(OsStr::new(ARG)) {
        return;
    }
    std::process::exit(trampoline(args));
}

fn trampoline(mut args: std::env::ArgsOs) -> i32 {
    let (Some(policy), Some(program), Some(argv0)) = (args.next(), args.next(), args.next()) else {
        crate::errln!("agentrun: {ARG} POLICY PROGRAM ARGV0 [ARGS…] (used by agentrun itself)");
        return SETUP_FAILED;
    };
    let policy: Policy = match policy.to_str().map(serde_json::from_str) {
        Some(Ok(p)) => p,
        _ => {
            crate::errln!("agentrun: {ARG}: the policy is not valid");
            return SETUP_FAILED;
        }
    };
    let args: Vec<OsString> = args.collect();
    if policy.supervise {
        // An MCP server: a supervisor stays, and the server starts in its child.
        if policy.confined {
            // The supervisor leads the session its server's is made from (spawned
            // confined, it is no group's leader yet, so this cannot fail).
            // SAFETY: setsid takes nothing.
            unsafe { libc::setsid() };
        }
        let server = Policy {
            die_with_parent: false,
            supervise: false,
            ..policy.clone()
        };
        return super::supervise::run(policy.parent, || {
            exec_under(&server, &program, &argv0, &args)
        });
    }
    exec_under(&policy, &program, &argv0, &args)
}

/// Applies `policy` and execs `program`; returns only on failure, with the status.
fn exec_under(policy: &Policy, program: &OsStr, argv0: &OsStr, args: &[OsString]) -> i32 {
    if let Err(e) = sandbox::apply(policy) {
        crate::errln!("agentrun: {e}");
        return SETUP_FAILED;
    }
    let err = std::process::Command::new(program)
        .arg0(argv0)
        .args(args)
        .exec();
    crate::errln!(
        "agentrun: cannot start `{}`: {err}",
        Path::new(program).display()
    );
    // As a shell says of a program it cannot run.
    if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

//! The supervisor of a stdio MCP server (issue 22): what makes everything a server
//! started go when the server is stopped, dies, or agentrun dies — even killed with -9.
//!
//! A process group is not enough: a server's helper may call `setsid` (a new session,
//! out of the group), or double-fork so that its parent is gone and it is handed to
//! init; and when agentrun is killed with -9 nobody is left to kill the group at all.
//! So the trampoline ([`super::trampoline`]) of a server does not exec it directly: it
//! becomes a *child subreaper* — every orphan below it is handed to it, not to init,
//! so nothing the server starts can leave its tree — forks, and the child applies the
//! sandbox and execs the server. The supervisor holds none of the server's pipes. It
//! waits for a signal:
//! - the server exited → everything left below the supervisor is killed, and it exits
//!   with the server's status;
//! - SIGTERM (agentrun stops the server) or its death signal (agentrun died: the
//!   supervisor's `PR_SET_PDEATHSIG` is SIGTERM) → the same, at once.
//!
//! Killing: every process below the supervisor is stopped with SIGSTOP as it is found
//! (so none forks behind our back), then all get SIGKILL and are reaped. The limit: a
//! process that is sent elsewhere on purpose (re-parented with `PR_SET_CHILD_SUBREAPER`
//! of its own, or by ptrace) or the supervisor itself being killed with SIGKILL; a
//! cgroup would be needed for those.

/// Signals the supervisor waits for.
#[cfg(target_os = "linux")]
const SIGNALS: [i32; 4] = [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Runs `exec` (which applies the sandbox and execs the server; it returns only on
/// failure, with an exit status) in a child, and supervises it. Returns the exit status.
/// `parent`: agentrun's pid, to check the death signal against.
#[cfg(target_os = "linux")]
pub fn run(parent: u32, exec: impl FnOnce() -> i32) -> i32 {
    // SAFETY: plain libc calls on a single-threaded process (the trampoline runs before
    // any thread or runtime starts), with pointers to locals that outlive the calls.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        // Blocked before the fork, so none is lost; waited for with sigwait.
        libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
        if std::os::unix::process::parent_id() != parent {
            return super::before::SETUP_FAILED;
        }
        let me = std::process::id();
        match libc::fork() {
            -1 => {
                crate::errln!(
                    "agentrun: cannot start the MCP server: fork: {}",
                    std::io::Error::last_os_error()
                );
                super::before::SETUP_FAILED
            }
            0 => {
                libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
                // The server dies with its supervisor too.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                if std::os::unix::process::parent_id() != me {
                    libc::_exit(super::before::SETUP_FAILED);
                }
                libc::_exit(exec())
            }
            server => {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                for fd in 0..3 {
                    libc::dup2(null, fd);
                }
                watch(server, &set)
            }
        }
    }
}

/// Without Linux's subreaper and death signal, the server is simply exec'd.
#[cfg(not(target_os = "linux"))]
pub fn run(_parent: u32, exec: impl FnOnce() -> i32) -> i32 {
    exec()
}

/// Waits for the server to exit or for a stop signal; then kills and reaps everything
/// below us. Returns the server's exit status (128 + signal when killed).
#[cfg(target_os = "linux")]
fn watch(server: i32, set: &libc::sigset_t) -> i32 {
    let mut status = None;
    loop {
        let mut sig = 0;
        // SAFETY: sigwait writes the signal number to `sig`.
        if unsafe { libc::sigwait(set, &mut sig) } != 0 {
            continue;
        }
        if sig != libc::SIGCHLD {
            break;
        }
        status = reap_any(server).or(status);
        if status.is_some() {
            break;
        }
    }
    kill_all_below();
    status.unwrap_or(128 + libc::SIGTERM)
}

/// Reaps every child that has exited; the server's exit status when it was one of them.
#[cfg(target_os = "linux")]
fn reap_any(server: i32) -> Option<i32> {
    let mut found = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only to `status`; WNOHANG never blocks.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return found;
        }
        if pid == server {
            found = Some(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            });
        }
    }
}

/// Stops, kills and reaps every process below this one (see the module doc).
#[cfg(target_os = "linux")]
fn kill_all_below() {
    let me = i32::try_from(std::process::id()).unwrap_or(-1);
    let mut found: Vec<i32> = Vec::new();
    // Until a whole pass finds nothing new: a process found running may have forked
    // before it was stopped.
    for _ in 0..100 {
        let before = found.len();
        let mut parents = vec![me];
        while let Some(parent) = parents.pop() {
            for pid in children(parent) {
                if !found.contains(&pid) {
                    // SAFETY: kill(2) has no memory-safety preconditions.
                    unsafe { libc::kill(pid, libc::SIGSTOP) };
                    found.push(pid);
                }
                parents.push(pid);
            }
        }
        if found.len() == before {
            break;
        }
    }
    for &pid in &found {
        // SAFETY: as above; a stopped process still dies of SIGKILL.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    // Each killed process is ours to reap once its parent is gone (we are their
    // subreaper); ECHILD ends it.
    let mut status = 0;
    // SAFETY: waitpid writes only to `status`.
    while unsafe { libc::waitpid(-1, &mut status, 0) } > 0 {}
}

/// The children of `pid`, read from `/proc` (every thread's list, since an orphan is
/// handed to one thread of its subreaper; the whole table where those lists are missing).
#[cfg(target_os = "linux")]
fn children(pid: i32) -> Vec<i32> {
    let listed = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()
        .and_then(|tasks| {
            let mut out = Vec::new();
            for task in tasks.flatten() {
                let text = std::fs::read_to_string(task.path().join("children")).ok()?;
                out.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                );
            }
            Some(out)
        });
    listed.unwrap_or_else(|| table_children(pid))
}

#[cfg(target_os = "linux")]
fn table_children(pid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let ppid = |p: &str| {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        stat[stat.rfind(')')? + 1..]
            .split_whitespace()
            .nth(1)?
            .parse::<i32>()
            .ok()
    };
    dir.flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|p| ppid(p) == Some(pid))
        .filter_map(|p| p.parse().ok())
        .collect()
}

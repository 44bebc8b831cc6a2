//! The sandbox of command tools, hooks and stdio MCP servers (docs/ARCHITECTURE.md §7 and §8;
//! docs/ARCHITECTURE.md, Sandbox), Linux. One file per mechanism:
//!
//! | file | mechanism | what it holds |
//! | --- | --- | --- |
//! | [`hide`] | a private mount namespace (a user namespace where not root) | agentrun's database
//! folder, config files and other calls' temp folders, the credential stores and the terminals are
//! covered by empty, read-only mounts: not there, whatever Landlock grants around them | | [`caps`]
//! | capabilities | none left (root's CAP_SYS_PTRACE would read agentrun's memory) | | [`rules`] |
//! Landlock | reads everywhere but `/dev` (only `null`, `zero`, `full`, `random`, `urandom`);
//! writes and truncation only in the workspace, the call's `TMPDIR` and `writable`; no device ioctl
//! (ABI 5); no signal or abstract Unix socket out of the sandbox (ABI 6) | | [`seccomp`] | a
//! seccomp filter | no `TIOCSTI`/`TIOCLINUX`, no `kill(-1)` nor a signal to agentrun; with `network
//! = false` no socket but Unix ones (so no `listen()` either) and no io_uring |
//!
//! Every sandboxed child also starts a session of its own (`setsid`): no controlling
//! terminal, so `/dev/tty` cannot be opened.
//!
//! Why a mount namespace: Landlock grants, it cannot deny a path below a granted one,
//! and `agentrun init` keeps the database in `.agentrun/` inside the very folder a
//! `workspace` tool may write. Covering it with a mount is what codex and Claude
//! Code's sandboxes do (bubblewrap) for `.git` and their own folders. Where the kernel
//! refuses user namespaces (Ubuntu 24.04's AppArmor default), the run refuses to start
//! with a sandbox, naming the fix ([`crate::config::preflight`]).
//!
//! Everything is decided by agentrun when it prepares the [`Policy`]; the trampoline
//! ([`super::trampoline`]) applies it to itself just before it execs the program, so
//! the program and all it starts inherit it.

#[cfg(target_os = "linux")]
mod caps;
#[cfg(target_os = "linux")]
mod hide;
#[cfg(target_os = "linux")]
mod rules;
#[cfg(target_os = "linux")]
mod seccomp;

use super::before::Before;
use crate::config::{Sandbox, SandboxMode};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use crate::config::layout::CREDENTIALS;

/// Device files a sandboxed child may read and write (`> /dev/null`); nothing else
/// under `/dev` is readable, terminals least of all.
const DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Where terminals live: covered, so no pseudo-terminal of the user can be opened.
const TERMINALS: &str = "/dev/pts";

pub use crate::config::own_files::{
    database, files as protected_files, protect_database, protect_file,
};

/// The folder every sandboxed call's temp dir is made in (`agentrun-UID` under the
/// system's temp dir): hidden from every sandboxed child but for its own.
pub fn temp_root() -> PathBuf {
    // SAFETY: getuid never fails and takes nothing.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("agentrun-{uid}"))
}

/// Everything the trampoline needs to confine one child, passed on its command line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Policy {
    /// `None`: no filesystem rules (only the death signal or the network filter).
    pub fs: Option<FsPolicy>,
    pub network: bool,
    /// Anything confined: a session of its own, no capability, the seccomp filter.
    pub confined: bool,
    /// The Landlock ABI agentrun found: the trampoline never probes the kernel.
    pub abi: i32,
    /// Kill the child when agentrun dies (`PR_SET_PDEATHSIG`), checked against `parent`.
    pub die_with_parent: bool,
    pub parent: u32,
    /// Start the program under a supervisor that kills all it started when it is
    /// stopped or agentrun dies ([`super::supervise`]): stdio MCP servers.
    pub supervise: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct FsPolicy {
    /// Readable (and executable) beneath.
    pub read: Vec<PathBuf>,
    /// Writable beneath (the devices included).
    pub write: Vec<PathBuf>,
    /// Covered by an empty read-only folder.
    pub hide_dirs: Vec<PathBuf>,
    /// Covered by `/dev/null`.
    pub hide_files: Vec<PathBuf>,
    /// The temp root, covered, and the call's own temp dir in it, shown again.
    pub tmp: Option<(PathBuf, PathBuf)>,
}

/// Where a child is confined to, besides its sandbox keys.
pub struct Places<'a> {
    /// The tool's working folder (its tools.toml folder).
    pub cwd: &'a Path,
    /// The per-call temp dir, if one was made.
    pub tmp: Option<&'a Path>,
    /// The agentrun database.
    pub db: Option<&'a Path>,
    /// agentrun's config files.
    pub files: &'a [PathBuf],
    pub home: Option<&'a Path>,
}

impl Policy {
    /// The policy for `sandbox` (`None` when it confines nothing and no death signal
    /// is asked for).
    pub fn new(sandbox: &Sandbox, at: &Places<'_>, before: Before<'_>) -> Option<Policy> {
        if !sandbox.confines() && !before.die_with_parent && !before.supervise {
            return None;
        }
        let fs = (sandbox.mode != SandboxMode::Off).then(|| fs_policy(sandbox, at));
        Some(Policy {
            fs,
            network: sandbox.network,
            confined: sandbox.confines(),
            abi: crate::config::preflight::Support::probe().landlock_abi,
            die_with_parent: before.die_with_parent,
            parent: std::process::id(),
            supervise: before.supervise,
        })
    }
}

use crate::config::layout::real as absolute;

fn real(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

fn fs_policy(sandbox: &Sandbox, at: &Places<'_>) -> FsPolicy {
    let mut write: Vec<PathBuf> = crate::config::layout::write_grants(sandbox, at.cwd)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let own_tmp = at.tmp.map(real);
    let root = real(&temp_root());
    // Everything the child must see: what it writes and where it runs.
    let mut needed = write.clone();
    needed.push(absolute(at.cwd));
    needed.extend(own_tmp.iter().cloned());
    let covers = |dir: &Path| !needed.iter().any(|n| n.starts_with(dir));
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut files: Vec<PathBuf> = at.files.iter().map(|f| real(f)).collect();
    if let Some(home) = at.home {
        for c in CREDENTIALS {
            let path = real(&home.join(c));
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => dirs.push(path),
                Ok(_) => files.push(path),
                Err(_) => {}
            }
        }
    }
    if let Some(db) = at.db {
        // Made now if it is not there yet (the store would make it on first use):
        // a folder that does not exist cannot be covered, and a child started before
        // the store — an MCP server at discovery — could plant a database in its place.
        if let Some(dir) = db.parent() {
            use std::os::unix::fs::DirBuilderExt;
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir);
        }
        let db = real(db);
        match db.parent().map(real) {
            // Its folder, unless the child works in it or below: then its files.
            Some(dir) if covers(&dir) => dirs.push(dir),
            _ => files.extend(sqlite_files(&db)),
        }
    }
    dirs.push(PathBuf::from(TERMINALS));
    // Keep only what exists, is not the root, and is not inside another covered
    // folder (the outer cover already hides it; the inner mount point is gone).
    dirs.retain(|d| d.is_dir() && d != Path::new("/"));
    dirs.sort();
    dirs.dedup();
    let outer = dirs.clone();
    let inside = |p: &Path| outer.iter().any(|d| p != d && p.starts_with(d));
    dirs.retain(|d| !inside(d));
    files.retain(|f| f.is_file() && !inside(f));
    files.sort();
    files.dedup();
    let tmp = own_tmp
        .clone()
        .filter(|t| t.starts_with(&root) && t != &root && !inside(&root))
        .map(|t| (root.clone(), t));
    write.extend(own_tmp);
    write.extend(DEVICES.iter().map(PathBuf::from));
    let mut read = readable_roots(&[PathBuf::from("/dev")]);
    read.extend(DEVICES.iter().map(PathBuf::from));
    FsPolicy {
        read,
        write,
        hide_dirs: dirs,
        hide_files: files,
        tmp,
    }
}

/// The database and the files SQLite keeps beside it.
fn sqlite_files(db: &Path) -> Vec<PathBuf> {
    ["", "-wal", "-shm", "-journal"]
        .iter()
        .map(|s| {
            let mut name = db.as_os_str().to_os_string();
            name.push(s);
            PathBuf::from(name)
        })
        .collect()
}

/// Applies `policy` to the calling (single-threaded) process: its own session and
/// the death signal first, then the hiding mounts, then no capability, Landlock and
/// the seccomp filter. Called by the trampoline only.
#[cfg(target_os = "linux")]
pub fn apply(policy: &Policy) -> Result<(), String> {
    if policy.confined {
        // SAFETY: setsid takes nothing. It fails only for a group leader, which a
        // confined child is not spawned as.
        if unsafe { libc::setsid() } < 0 {
            return Err(format!(
                "cannot set up the sandbox: setsid: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    if policy.die_with_parent {
        // SAFETY: prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
        // The parent may have died between spawning us and the prctl: then nobody
        // would ever send the signal.
        if std::os::unix::process::parent_id() != policy.parent {
            return Err("agentrun exited while the process was starting".into());
        }
    }
    if !policy.confined {
        return Ok(());
    }
    if let Some(fs) = &policy.fs {
        hide::apply(fs)?;
    }
    caps::drop_all()?;
    rules::restrict(policy.fs.as_ref(), policy.abi)?;
    seccomp::install(policy.network, policy.parent)
}

#[cfg(not(target_os = "linux"))]
pub fn apply(_policy: &Policy) -> Result<(), String> {
    Err("the sandbox is Linux-only".into())
}

/// The paths to grant read access beneath so that everything is readable except the
/// `deny` paths: each sibling along the way down to a denied path. A symbolic link is
/// granted as its target, unless that leads into a denied path.
pub fn readable_roots(deny: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(Path::new("/"), deny, &mut out);
    out
}

fn walk(dir: &Path, deny: &[PathBuf], out: &mut Vec<PathBuf>) {
    if deny.iter().any(|d| d == dir) {
        return;
    }
    if !deny.iter().any(|d| d.starts_with(dir)) {
        out.push(dir.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
        if is_link {
            let Ok(target) = std::fs::canonicalize(&path) else {
                continue;
            };
            let touches = deny
                .iter()
                .any(|d| target.starts_with(d) || d.starts_with(&target));
            if !touches {
                out.push(target);
            }
            continue;
        }
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&path, deny, out);
        } else if !deny.contains(&path) {
            out.push(path);
        }
    }
}

/// A failed sandboxed call that looks like a sandbox denial: the line of stderr that
/// says so and the path or address in it, as a hint for the model and the person
/// reading the run. Heuristic: the kernel tells the tool `EACCES`/`EPERM`, and only
/// the tool's own message says what it was doing.
pub fn denial(sandbox: &Sandbox, stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("permission denied")
                || l.contains("operation not permitted")
                || l.contains("eacces")
                || l.contains("eperm")
        })
        .collect();
    let named = |l: &&str| {
        path_in(l)
            .map(|p| format!("`{p}`"))
            .or_else(|| address_in(l).map(|a| format!("a connection to {a}")))
    };
    // The first line that says what was refused, else the first that says it was.
    let (line, what) = match lines.iter().find_map(|l| Some((*l, named(l)?))) {
        Some((l, w)) => (l, Some(w)),
        None => (*lines.first()?, None),
    };
    let about_network = what.as_deref().is_none_or(|w| {
        w.contains("/dev/tcp/") || w.contains("/dev/udp/") || w.starts_with("a connection")
    });
    let why = match (about_network, sandbox.network) {
        (true, false) => "network = false: no network sockets, loopback included".to_string(),
        _ => format!(
            "sandbox = \"{}\": reads everywhere except credential stores and agentrun's \
             own files, writes only in the tool's folder, its TMPDIR and `writable`",
            sandbox.mode.as_str()
        ),
    };
    let what = what.unwrap_or_else(|| "it".into());
    Some(format!(
        "the sandbox denied {what} ({why}); if the tool needs it, add the path to \
         `writable`, set `network = true`, or `sandbox = \"off\"` for this tool \
         — tool said: {}",
        line.trim()
    ))
}

fn path_in(line: &str) -> Option<String> {
    line.split(|c: char| c.is_whitespace() || "'\"`,;()[]".contains(c))
        .map(|w| w.trim_end_matches(':'))
        .find(|w| w.starts_with('/') || w.starts_with("~/"))
        .map(str::to_string)
}

fn address_in(line: &str) -> Option<String> {
    line.split(|c: char| c.is_whitespace() || "'\"`,;()[]".contains(c))
        .find(|w| {
            let host = w.rsplit_once(':').map_or(*w, |(h, _)| h);
            host.parse::<std::net::IpAddr>().is_ok() || host == "localhost"
        })
        .map(str::to_string)
}

#[cfg(test)]
mod tests;

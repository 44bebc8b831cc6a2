//! The sandbox of command tools and stdio MCP servers (issue 22, docs/ARCHITECTURE.md §7), Linux.
//!
//! What `sandbox = "workspace"` enforces, with Landlock (filesystem) and a seccomp
//! filter (network), applied by the trampoline ([`super::spawn`]) to itself just
//! before it execs the tool, so the tool and everything it starts inherit it:
//! - reads (and execution) everywhere except the credential stores ([`CREDENTIALS`]
//!   under `$HOME`) and the agentrun database's folder;
//! - writes only beneath the tool's folder (not with `"read-only"`), a per-call temp
//!   dir (`TMPDIR`), the paths in `writable`, and `/dev/null` and its kin;
//! - with `network = false`, no IPv4/IPv6/packet socket can be created (loopback
//!   included) and io_uring, which could create one behind the filter, is refused.
//!
//! Landlock grants, it cannot deny: "everything but `~/.ssh`" is built by granting
//! each sibling along the way down to every denied path. The directories on that way
//! (`/`, `$HOME`, …) can still be walked through and their files read, but not listed.
//!
//! Not enforced: Unix-domain sockets (a tool can still reach a local daemon's socket,
//! e.g. Docker's), reading through file descriptors agentrun passed in (only stdio),
//! resource use (CPU, memory), and anything on kernels without Landlock — where a tool
//! that asks for a sandbox does not start at all
//! ([`crate::config::preflight::sandbox_missing`]).

use super::before::Before;
use crate::config::{Sandbox, SandboxMode};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Folders and files under `$HOME` a sandboxed tool may not read (issue 22).
pub const CREDENTIALS: [&str; 8] = [
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
    ".config/agentrun",
];

/// Device files every program expects to write (`> /dev/null`) or read.
const DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// The SQLite database in use, whose folder sandboxed children may not read. Set once
/// by the command layer when it opens the store: the one fact about the process a
/// tool attempt needs and is not handed (a global, so no call site has to carry it).
static DATABASE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

pub fn protect_database(path: &Path) {
    let _ = DATABASE.set(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
}

pub fn database() -> Option<&'static Path> {
    DATABASE.get().map(PathBuf::as_path)
}

/// Everything the trampoline needs to confine one child, passed on its command line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Policy {
    /// `None`: no filesystem rules (only the death signal or the network filter).
    pub fs: Option<FsPolicy>,
    pub network: bool,
    /// Kill the child when agentrun dies (`PR_SET_PDEATHSIG`), checked against `parent`.
    pub die_with_parent: bool,
    pub parent: u32,
    /// Start the program under a supervisor that kills all it started when it is
    /// stopped or agentrun dies ([`super::supervise`]): stdio MCP servers.
    #[serde(default)]
    pub supervise: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FsPolicy {
    pub deny_read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
}

/// Where a child is confined to, besides its sandbox keys.
pub struct Places<'a> {
    /// The tool's working folder (its tools.toml folder).
    pub cwd: &'a Path,
    /// The per-call temp dir, if one was made.
    pub tmp: Option<&'a Path>,
    /// The agentrun database, whose folder is denied.
    pub db: Option<&'a Path>,
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
            die_with_parent: before.die_with_parent,
            parent: std::process::id(),
            supervise: before.supervise,
        })
    }
}

fn real(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

fn fs_policy(sandbox: &Sandbox, at: &Places<'_>) -> FsPolicy {
    let mut write: Vec<PathBuf> = Vec::new();
    if sandbox.mode == SandboxMode::Workspace {
        write.push(real(at.cwd));
    }
    write.extend(at.tmp.map(real));
    write.extend(sandbox.writable.iter().map(|p| real(p)));
    let mut deny_read: Vec<PathBuf> = at
        .home
        .map(|h| CREDENTIALS.iter().map(|c| real(&h.join(c))).collect())
        .unwrap_or_default();
    // The database folder, unless the tool works in it (a project keeping runs.db
    // beside tools.toml): denying it would deny the workspace itself.
    if let Some(dir) = at.db.and_then(Path::parent).map(real)
        && !write
            .iter()
            .any(|w| w.starts_with(&dir) || dir.starts_with(w))
        && dir != Path::new("/")
    {
        deny_read.push(dir);
    }
    FsPolicy { deny_read, write }
}

/// Applies `policy` to the calling (single-threaded) process: the death signal first,
/// then Landlock, then the seccomp filter. Called by the trampoline only.
#[cfg(target_os = "linux")]
pub fn apply(policy: &Policy) -> Result<(), String> {
    if policy.die_with_parent {
        // SAFETY: prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
        // The parent may have died between spawning us and the prctl: then nobody
        // would ever send the signal.
        if std::os::unix::process::parent_id() != policy.parent {
            return Err("agentrun exited while the process was starting".into());
        }
    }
    if policy.fs.is_some() || !policy.network {
        drop_capabilities()?;
    }
    // TCP connections are refused by Landlock where it can (ABI 4, Linux 6.7): at
    // connect(2), so the tool's message names the address. Elsewhere the seccomp
    // filter refuses the socket itself.
    let tcp_by_landlock =
        !policy.network && crate::config::preflight::Support::probe().landlock_abi >= 4;
    if policy.fs.is_some() || tcp_by_landlock {
        landlock(policy.fs.as_ref(), tcp_by_landlock)?;
    }
    if !policy.network {
        seccomp::deny_network(tcp_by_landlock)?;
    }
    Ok(())
}

/// A confined child keeps no capability. Started by root, a tool would otherwise keep
/// CAP_SYS_PTRACE, with which it reads agentrun's environment (the provider keys) and
/// memory through `/proc` — Landlock's ptrace rule does not bind it —, CAP_MKNOD (a
/// node for the raw disk in its own folder), CAP_SYS_MODULE and the rest: each a way
/// around Landlock. Emptying the permitted set is what holds: `no_new_privs`, set with
/// Landlock and seccomp right after, caps what the exec (or a setuid program) may give
/// at what the process had. The bounding set is emptied as well where this process
/// may (CAP_SETPCAP).
#[cfg(target_os = "linux")]
fn drop_capabilities() -> Result<(), String> {
    /// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
    const VERSION_3: u32 = 0x2008_0522;
    // SAFETY (the prctl calls): integer arguments only. PR_CAPBSET_READ fails
    // (EINVAL) past the kernel's last capability.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    for cap in
        (0..64).take_while(|&c| unsafe { libc::prctl(libc::PR_CAPBSET_READ, c, 0, 0, 0) } >= 0)
    {
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    }
    // `__user_cap_header_struct` {version, pid 0: this process} and two
    // `__user_cap_data_struct`s {effective, permitted, inheritable}, all empty.
    let header: [u32; 2] = [VERSION_3, 0];
    let data = [0u32; 6];
    // SAFETY: capset reads the header and the two data structs laid out above.
    if unsafe { libc::syscall(libc::SYS_capset, header.as_ptr(), data.as_ptr()) } != 0 {
        return Err(format!(
            "cannot set up the sandbox: cannot drop capabilities: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub fn apply(_policy: &Policy) -> Result<(), String> {
    Err("the sandbox is Linux-only".into())
}

#[cfg(target_os = "linux")]
fn landlock(fs: Option<&FsPolicy>, tcp: bool) -> Result<(), String> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetError, RulesetStatus,
    };
    // V3: reading, writing, refer (rename across folders) and truncate. Device ioctls
    // (V5) are left unhandled, so terminals keep working.
    let abi = ABI::V3;
    let (read, all) = (AccessFs::from_read(abi), AccessFs::from_all(abi));
    let mut grants: Vec<(PathBuf, _)> = Vec::new();
    if let Some(fs) = fs {
        grants.extend(readable_roots(&fs.deny_read).into_iter().map(|p| (p, read)));
        for path in &fs.write {
            if !fs.deny_read.iter().any(|d| path.starts_with(d)) {
                grants.push((path.clone(), all));
            }
        }
        grants.extend(DEVICES.iter().map(|d| (PathBuf::from(d), all)));
    }
    // A path that vanished since it was listed is simply not granted.
    let rules = grants.into_iter().filter_map(|(path, rights)| {
        let rights = if path.is_dir() {
            rights
        } else {
            rights & AccessFs::from_file(abi)
        };
        let fd = PathFd::new(&path).ok()?;
        Some(Ok::<_, RulesetError>(PathBeneath::new(fd, rights)))
    });
    let err = |e: RulesetError| format!("cannot set up the sandbox: {e}");
    let mut ruleset = Ruleset::default();
    if fs.is_some() {
        ruleset = ruleset.handle_access(all).map_err(err)?;
    }
    if tcp {
        // Handled with no rule: every TCP connect and bind is refused.
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(err)?;
    }
    let status = ruleset
        .create()
        .map_err(err)?
        .add_rules(rules)
        .map_err(err)?
        .restrict_self()
        .map_err(err)?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("cannot set up the sandbox: Landlock is not enforced by this kernel".into());
    }
    Ok(())
}

/// The paths to grant read access beneath so that everything is readable except the
/// `deny` paths: each sibling along the way down to a denied path (see the module doc).
/// A symbolic link is granted as its target, unless that leads into a denied path.
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
        (true, false) => "network = false: no new connections, loopback included".to_string(),
        _ => format!(
            "sandbox = \"{}\": reads everywhere except credential stores, writes only in \
             the tool's folder, its TMPDIR and `writable`",
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

/// The seccomp filter for `network = false`.
#[cfg(target_os = "linux")]
mod seccomp {
    const AUDIT_ARCH: u32 = if cfg!(target_arch = "x86_64") {
        0xC000_003E
    } else {
        0xC000_00B7 // aarch64
    };
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_KILL_PROCESS: u32 = 0x8000_0000;
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JSET_K: u16 = 0x45;
    const RET_K: u16 = 0x06;
    /// Offsets in `struct seccomp_data`: nr, arch, args[0] (low half, little endian).
    const NR: u32 = 0;
    const ARCH: u32 = 4;
    const ARG0: u32 = 16;
    const ARG1: u32 = 24;
    const ARG2: u32 = 32;
    const AND_K: u16 = 0x54;
    const JA: u16 = 0x05;
    /// x32 system calls carry this bit on x86_64; they would dodge the numbers below.
    const X32_BIT: u32 = 0x4000_0000;

    fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
        libc::sock_filter { code, jt, jf, k }
    }

    /// socket(AF_INET | AF_INET6 | AF_PACKET, …) fails with EACCES — except plain TCP
    /// sockets when `tcp_by_landlock` (Landlock then refuses their connect and bind;
    /// it covers TCP only, so UDP, raw, SCTP and MPTCP sockets stay refused here);
    /// io_uring_setup fails with EPERM; a foreign architecture's call kills the process.
    pub fn deny_network(tcp_by_landlock: bool) -> Result<(), String> {
        let socket = libc::SYS_socket as u32;
        let uring = libc::SYS_io_uring_setup as u32;
        let eacces = RET_ERRNO | libc::EACCES as u32;
        let eperm = RET_ERRNO | libc::EPERM as u32;
        // With Landlock on TCP, an IPv4/IPv6 socket is allowed when its type is
        // SOCK_STREAM and its protocol 0 or IPPROTO_TCP; without, never.
        let to_deny = if tcp_by_landlock { 0 } else { 6 };
        let prog = [
            /* 0 */ op(LD_W_ABS, 0, 0, ARCH),
            /* 1 */ op(JEQ_K, 1, 0, AUDIT_ARCH),
            /* 2 */ op(RET_K, 0, 0, RET_KILL_PROCESS),
            /* 3 */ op(LD_W_ABS, 0, 0, NR),
            /* 4 */ op(JSET_K, 0, 1, X32_BIT),
            /* 5 */ op(RET_K, 0, 0, eperm),
            /* 6 */ op(JEQ_K, 0, 1, uring),
            /* 7 */ op(RET_K, 0, 0, eperm),
            /* 8 */ op(JEQ_K, 0, 12, socket), // -> 21 allow
            /* 9 */ op(LD_W_ABS, 0, 0, ARG0),
            /* 10 */ op(JEQ_K, 9, 0, libc::AF_PACKET as u32), // -> 20 deny
            /* 11 */ op(JEQ_K, 1, 0, libc::AF_INET as u32),
            /* 12 */ op(JEQ_K, 0, 8, libc::AF_INET6 as u32), // other families -> 21
            /* 13 */ op(JA, 0, 0, to_deny), // no TCP by Landlock: -> 20 deny
            /* 14 */ op(LD_W_ABS, 0, 0, ARG1),
            /* 15 */ op(AND_K, 0, 0, 0xf), // SOCK_TYPE_MASK: drop NONBLOCK/CLOEXEC
            /* 16 */ op(JEQ_K, 0, 3, libc::SOCK_STREAM as u32), // -> 20 deny
            /* 17 */ op(LD_W_ABS, 0, 0, ARG2),
            /* 18 */ op(JEQ_K, 2, 0, 0), // -> 21 allow
            /* 19 */ op(JEQ_K, 1, 0, libc::IPPROTO_TCP as u32), // -> 21 allow
            /* 20 */ op(RET_K, 0, 0, eacces),
            /* 21 */ op(RET_K, 0, 0, RET_ALLOW),
        ];
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_ptr().cast_mut(),
        };
        // SAFETY: prctl with integers; then PR_SET_SECCOMP reads `fprog`, which points
        // at `prog`, alive for the whole call. No new privileges is required for an
        // unprivileged filter (Landlock set it already when it ran).
        let rc = unsafe {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const libc::sock_fprog,
            )
        };
        if rc != 0 {
            return Err(format!(
                "cannot set up the network filter: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_roots_skip_exactly_the_denied_paths() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path().canonicalize().unwrap();
        for d in [".ssh", "work", ".config/gcloud", ".config/fish"] {
            std::fs::create_dir_all(h.join(d)).unwrap();
        }
        std::fs::write(h.join(".netrc"), "x").unwrap();
        std::fs::write(h.join(".bashrc"), "x").unwrap();
        std::os::unix::fs::symlink(h.join(".ssh"), h.join("keys")).unwrap();
        let deny = vec![h.join(".ssh"), h.join(".netrc"), h.join(".config/gcloud")];
        let roots = readable_roots(&deny);
        for want in [h.join("work"), h.join(".bashrc"), h.join(".config/fish")] {
            assert!(roots.contains(&want), "{want:?} missing from {roots:?}");
        }
        for d in &deny {
            assert!(
                !roots.iter().any(|r| r.starts_with(d) || d.starts_with(r)),
                "{d:?}"
            );
        }
        assert!(
            !roots.contains(&h.join("keys")),
            "a link into .ssh is not granted"
        );
    }

    #[test]
    fn a_denial_names_the_path_or_the_address() {
        let sb = Sandbox {
            mode: SandboxMode::Workspace,
            writable: Vec::new(),
            network: false,
        };
        let hint = denial(&sb, "cat: /h/.ssh/id_ed25519: Permission denied\n").unwrap();
        assert!(hint.contains("`/h/.ssh/id_ed25519`"), "{hint}");
        let hint = denial(&sb, "PermissionError: [Errno 13] Permission denied").unwrap();
        assert!(hint.contains("network = false"), "{hint}");
        let hint = denial(&sb, "connect 127.0.0.1:8080: Permission denied").unwrap();
        assert!(hint.contains("127.0.0.1:8080"), "{hint}");
        assert_eq!(denial(&sb, "no such file"), None);
    }
}

//! The seccomp filter of every confined child, built as a list of [`Rule`]s:
//! - no `TIOCSTI` or `TIOCLINUX` ioctl: nothing typed into a terminal (belt and
//!   braces: the child has no controlling terminal and no tty device anyway);
//! - no `kill(-1)` (every process of the user) and no signal or pidfd to agentrun
//!   (Landlock's signal scope, ABI 6, covers the rest where the kernel has it);
//! - with `network = false`: no socket but a Unix one — no IPv4/IPv6 (so no
//!   `listen()`, which would bind a port by itself), no packet, netlink or vsock
//!   socket —, and no io_uring, which could open one behind the filter;
//! - a foreign architecture's call kills the process; x32 calls fail.

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
const JA: u16 = 0x05;
const RET_K: u16 = 0x06;
/// Offsets in `struct seccomp_data`: nr, arch.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// x32 system calls carry this bit on x86_64; they would dodge the numbers below.
const X32_BIT: u32 = 0x4000_0000;

/// The low half of argument `i` (little endian) in `struct seccomp_data`.
const fn arg(i: u32) -> u32 {
    16 + 8 * i
}

/// When a call fails, and with which errno.
enum Check {
    Always,
    /// Argument (offset) is one of these.
    ArgIn(u32, Vec<u32>),
    /// Argument (offset) is not this.
    ArgNot(u32, u32),
}

struct Rule {
    nr: i64,
    check: Check,
    errno: i32,
}

fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

fn rules(network: bool, parent: u32) -> Vec<Rule> {
    let deny = |nr, check| Rule {
        nr,
        check,
        errno: libc::EPERM,
    };
    let ioctls = vec![libc::TIOCSTI as u32, libc::TIOCLINUX as u32];
    let mut out = vec![
        deny(libc::SYS_ioctl, Check::ArgIn(arg(1), ioctls)),
        deny(libc::SYS_kill, Check::ArgIn(arg(0), vec![parent, u32::MAX])),
        deny(libc::SYS_tkill, Check::ArgIn(arg(0), vec![parent])),
        deny(libc::SYS_tgkill, Check::ArgIn(arg(0), vec![parent])),
        deny(libc::SYS_pidfd_open, Check::ArgIn(arg(0), vec![parent])),
    ];
    if !network {
        out.push(deny(libc::SYS_io_uring_setup, Check::Always));
        out.push(Rule {
            nr: libc::SYS_socket,
            check: Check::ArgNot(arg(0), libc::AF_UNIX as u32),
            errno: libc::EACCES,
        });
    }
    out
}

/// The program: the architecture checks, each rule in turn, then allow.
fn program(rules: &[Rule]) -> Vec<libc::sock_filter> {
    let eperm = RET_ERRNO | libc::EPERM as u32;
    let mut prog = vec![
        op(LD_W_ABS, 0, 0, ARCH),
        op(JEQ_K, 1, 0, AUDIT_ARCH),
        op(RET_K, 0, 0, RET_KILL_PROCESS),
        op(LD_W_ABS, 0, 0, NR),
        op(JSET_K, 0, 1, X32_BIT),
        op(RET_K, 0, 0, eperm),
    ];
    for rule in rules {
        let ret = op(RET_K, 0, 0, RET_ERRNO | rule.errno as u32);
        // Each block starts with the call number loaded; its size after the jump
        // over it decides that jump.
        let block: Vec<libc::sock_filter> = match &rule.check {
            Check::Always => vec![ret],
            Check::ArgIn(at, values) => {
                let n = values.len();
                let mut b = vec![op(LD_W_ABS, 0, 0, *at)];
                for (i, v) in values.iter().enumerate() {
                    // Matched: to the return, past the other values and the `ja`.
                    b.push(op(JEQ_K, (n - i) as u8, 0, *v));
                }
                b.push(op(JA, 0, 0, 1));
                b.push(ret);
                b
            }
            Check::ArgNot(at, v) => vec![op(LD_W_ABS, 0, 0, *at), op(JEQ_K, 1, 0, *v), ret],
        };
        prog.push(op(LD_W_ABS, 0, 0, NR));
        prog.push(op(JEQ_K, 0, block.len() as u8, rule.nr as u32));
        prog.extend(block);
    }
    prog.push(op(RET_K, 0, 0, RET_ALLOW));
    prog
}

/// Installs the filter on the calling process (and so on all it starts).
pub fn install(network: bool, parent: u32) -> Result<(), String> {
    let prog = program(&rules(network, parent));
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
            "cannot set up the sandbox: cannot install the seccomp filter: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

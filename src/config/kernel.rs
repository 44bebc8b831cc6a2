//! What this kernel can enforce of a sandbox, guarantee by guarantee (docs/ARCHITECTURE.md §7, §8;
//! docs/ARCHITECTURE.md, Sandbox): each restriction a sandbox promises is either
//! enforced here or the run refuses to start, naming what is missing and the opt-out.
//! `tools check` prints the list.

use super::{Sandbox, SandboxMode};

/// What this kernel offers, read once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    /// The Landlock ABI version; 0 when Landlock is missing or disabled.
    pub landlock_abi: i32,
    pub seccomp: bool,
    /// A process may make a mount namespace of its own (as root, or through an
    /// unprivileged user namespace) and mount in it: what hides agentrun's files.
    pub mount_ns: bool,
}

impl Support {
    pub fn probe() -> Support {
        static ONCE: std::sync::OnceLock<Support> = std::sync::OnceLock::new();
        *ONCE.get_or_init(|| Support {
            landlock_abi: landlock_abi(),
            seccomp: seccomp_available(),
            mount_ns: mount_ns_available(),
        })
    }

    /// Every feature the sandbox uses: for tests that must not depend on the machine.
    pub const FULL: Support = Support {
        landlock_abi: 7,
        seccomp: true,
        mount_ns: true,
    };
}

/// One restriction a sandbox promises: what it is, what enforces it, and whether this
/// kernel does. An `optional` one is used where present and never refused for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guarantee {
    pub what: &'static str,
    pub needs: &'static str,
    pub enforced: bool,
    pub optional: bool,
}

/// The guarantees `sandbox` promises, as this kernel holds them.
pub fn guarantees(sandbox: &Sandbox, k: Support) -> Vec<Guarantee> {
    let g = |what, needs, enforced, optional| Guarantee {
        what,
        needs,
        enforced,
        optional,
    };
    let mut out = Vec::new();
    if sandbox.mode != SandboxMode::Off {
        out.extend([
            g(
                "writes only in the workspace, TMPDIR and `writable`",
                "Landlock (Linux 5.13 or later, enabled at boot: `lsm=…,landlock`)",
                k.landlock_abi >= 1,
                false,
            ),
            g(
                "no truncating files outside them",
                "Landlock ABI 3 for truncate (Linux 6.2 or later)",
                k.landlock_abi >= 3,
                false,
            ),
            g(
                "agentrun's database, config and temp folders and the credential stores hidden",
                "a mount namespace (unprivileged user namespaces: `sysctl \
                 kernel.unprivileged_userns_clone=1`, and on Ubuntu 24.04 \
                 `kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile \
                 allowing `userns` for agentrun)",
                k.mount_ns,
                false,
            ),
            g(
                "no device ioctl",
                "Landlock ABI 5 (Linux 6.10)",
                k.landlock_abi >= 5,
                true,
            ),
        ]);
    }
    if sandbox.confines() {
        out.push(g(
            "no terminal: own session, no TIOCSTI, no signal to agentrun",
            "seccomp filters",
            k.seccomp,
            false,
        ));
        out.push(g(
            "no signal or abstract Unix socket out of the sandbox",
            "Landlock ABI 6 scopes (Linux 6.12)",
            k.landlock_abi >= 6,
            true,
        ));
    }
    if !sandbox.network {
        out.push(g(
            "no network sockets, listening included",
            "seccomp filters",
            k.seccomp,
            false,
        ));
    }
    out
}

/// What this kernel lacks to enforce `sandbox`, in words for a person; `None` when
/// every guarantee it requires is enforceable (never a silent no-op).
pub fn sandbox_missing(sandbox: &Sandbox, k: Support) -> Option<String> {
    if !cfg!(target_os = "linux") && sandbox.confines() {
        return Some("Landlock and seccomp (the sandbox is Linux-only so far)".into());
    }
    let mut lacks: Vec<String> = Vec::new();
    for g in guarantees(sandbox, k) {
        if !g.enforced && !g.optional && !lacks.iter().any(|l| l.starts_with(g.needs)) {
            lacks.push(format!("{} ({})", g.needs, g.what));
        }
    }
    (!lacks.is_empty()).then(|| lacks.join(" and "))
}

#[cfg(target_os = "linux")]
fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer and size 0 this only returns the version.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(v).unwrap_or(0).max(0)
}

#[cfg(not(target_os = "linux"))]
fn landlock_abi() -> i32 {
    0
}

#[cfg(target_os = "linux")]
fn seccomp_available() -> bool {
    // SAFETY: PR_GET_SECCOMP takes no pointers; it fails with EINVAL when the kernel
    // was built without seccomp.
    let on = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } >= 0;
    on && cfg!(any(target_arch = "x86_64", target_arch = "aarch64"))
}

#[cfg(not(target_os = "linux"))]
fn seccomp_available() -> bool {
    false
}

/// Whether the sandbox can make its mount namespace, read from the kernel's settings
/// (a probe by trying would fork agentrun, which no run may: docs/ARCHITECTURE.md,
/// Spawning): root holding CAP_SYS_ADMIN can; anyone else needs unprivileged user
/// namespaces, which Debian's `unprivileged_userns_clone`, `max_user_namespaces` and
/// Ubuntu's AppArmor restriction may deny. Where this guesses wrong, the child fails
/// to start, naming the namespace: closed, never silently open.
#[cfg(target_os = "linux")]
fn mount_ns_available() -> bool {
    /// Its bit in the capability sets (linux/capability.h).
    const CAP_SYS_ADMIN: u32 = 21;
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let cap_sys_admin = read("/proc/self/status").is_some_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
    });
    if cap_sys_admin {
        return true;
    }
    let allowed = |p: &str, refused: &str| read(p).is_none_or(|v| v != refused);
    allowed("/proc/sys/kernel/unprivileged_userns_clone", "0")
        && allowed("/proc/sys/user/max_user_namespaces", "0")
        && allowed(
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1",
        )
}

#[cfg(not(target_os = "linux"))]
fn mount_ns_available() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace(network: bool) -> Sandbox {
        Sandbox {
            mode: SandboxMode::Workspace,
            writable: Vec::new(),
            network,
        }
    }

    #[test]
    fn a_kernel_without_landlock_is_named_as_sandbox_missing() {
        let none = Support {
            landlock_abi: 0,
            seccomp: false,
            mount_ns: false,
        };
        let why = sandbox_missing(&workspace(false), none).unwrap();
        assert!(why.contains("Landlock") && why.contains("seccomp"), "{why}");
        let off = Sandbox {
            mode: SandboxMode::Off,
            ..workspace(true)
        };
        assert_eq!(sandbox_missing(&off, none), None);
    }

    /// Landlock ABI 2 (Linux 5.19–6.1: Debian 12, Ubuntu 22.04) cannot stop truncate.
    #[test]
    fn landlock_abi_2_refuses_a_workspace_tool_naming_truncate() {
        let abi2 = Support {
            landlock_abi: 2,
            ..Support::FULL
        };
        let why = sandbox_missing(&workspace(true), abi2).unwrap();
        assert!(why.contains("truncate"), "{why}");
        assert!(!why.contains("Landlock (Linux 5.13"), "{why}");
    }

    #[test]
    fn without_user_namespaces_the_hiding_is_named() {
        let k = Support {
            mount_ns: false,
            ..Support::FULL
        };
        let why = sandbox_missing(&workspace(true), k).unwrap();
        assert!(why.contains("user namespaces"), "{why}");
    }

    #[test]
    fn scopes_and_device_ioctls_are_used_where_present_never_refused_for() {
        let k = Support {
            landlock_abi: 4,
            ..Support::FULL
        };
        assert_eq!(sandbox_missing(&workspace(false), k), None);
        let listed = guarantees(&workspace(false), k);
        assert!(listed.iter().any(|g| !g.enforced && g.optional));
        assert!(
            guarantees(&workspace(false), Support::FULL)
                .iter()
                .all(|g| g.enforced)
        );
    }

    #[test]
    fn the_probe_agrees_with_itself() {
        assert_eq!(Support::probe(), Support::probe());
    }
}

//! A confined child keeps no capability. Started by root, a tool would otherwise keep
//! CAP_SYS_PTRACE, with which it reads agentrun's environment (the provider keys) and
//! memory through `/proc` — Landlock's ptrace rule does not bind it —, CAP_MKNOD (a
//! node for the raw disk in its own folder), CAP_SYS_ADMIN (unmounting what
//! [`super::hide`] mounted) and the rest: each a way around the sandbox. Emptying the
//! permitted set is what holds: `no_new_privs`, set with Landlock and seccomp right
//! after, caps what the exec (or a setuid program) may give at what the process had.
//! The bounding set is emptied as well where this process may (CAP_SETPCAP).

/// Drops every capability of the calling process.
pub fn drop_all() -> Result<(), String> {
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

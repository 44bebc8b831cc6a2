//! Hiding agentrun's files and the credential stores from a sandboxed child: a mount
//! namespace of its own, in which each is covered by an empty read-only mount.
//!
//! Landlock cannot deny a path below one it grants, and in the layout `agentrun init`
//! makes, the database folder (`.agentrun/`) is inside the workspace a tool may write.
//! A mount over it hides it from the child alone, whatever Landlock grants around it;
//! the child cannot take the mount away: it keeps no capability ([`super::caps`]),
//! Landlock forbids a sandboxed process to mount or unmount, and a user namespace it
//! might make of its own inherits these mounts locked.
//!
//! - folders (the database's, `~/.ssh`, `/dev/pts`, …): an empty read-only tmpfs;
//! - files (tools.toml, `~/.netrc`, the database's files when its folder holds the
//!   workspace): `/dev/null`, bound over them;
//! - the temp root: an empty tmpfs in which only the call's own temp dir is bound
//!   back, then made read-only: other runs' temp dirs are not there.
//!
//! As root, a mount namespace alone; otherwise a user namespace first, mapping the
//! user to itself (so files keep their owner).

use super::FsPolicy;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub fn apply(fs: &FsPolicy) -> Result<(), String> {
    if fs.hide_dirs.is_empty() && fs.hide_files.is_empty() && fs.tmp.is_none() {
        return Ok(());
    }
    enter()?;
    // Nothing mounted from here on reaches agentrun's namespace.
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    // The call's own temp dir, held open before its folder is covered.
    let own = match &fs.tmp {
        Some((_, own)) => Some(std::fs::File::open(own).map_err(|e| fail(own, &e.to_string()))?),
        None => None,
    };
    let sealed = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    for dir in &fs.hide_dirs {
        mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            sealed,
            Some("size=4k,mode=0555"),
        )?;
    }
    for file in &fs.hide_files {
        mount(Some("/dev/null"), file, None, libc::MS_BIND, None)?;
    }
    if let (Some((root, own_path)), Some(own)) = (&fs.tmp, own) {
        let open = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        mount(
            Some("tmpfs"),
            root,
            Some("tmpfs"),
            open,
            Some("size=4k,mode=0700"),
        )?;
        let name = own_path.file_name().unwrap_or_default();
        let target = root.join(name);
        std::fs::create_dir(&target).map_err(|e| fail(&target, &e.to_string()))?;
        use std::os::fd::AsRawFd;
        let fd = format!("/proc/self/fd/{}", own.as_raw_fd());
        mount(Some(&fd), &target, None, libc::MS_BIND, None)?;
        mount(None, root, None, libc::MS_REMOUNT | sealed, None)?;
    }
    Ok(())
}

/// A mount namespace of our own: as root directly, else inside a user namespace.
fn enter() -> Result<(), String> {
    // SAFETY: getuid/getgid/unshare take integers only.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } == 0 {
        return Ok(());
    }
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        return Err(format!(
            "cannot set up the sandbox: this kernel refuses a user namespace, which hides \
             agentrun's files from the tool: {}",
            std::io::Error::last_os_error()
        ));
    }
    // Without `deny`, an unprivileged process may not write its gid map.
    let _ = std::fs::write("/proc/self/setgroups", "deny");
    for (file, id) in [("/proc/self/uid_map", uid), ("/proc/self/gid_map", gid)] {
        std::fs::write(file, format!("{id} {id} 1"))
            .map_err(|e| format!("cannot set up the sandbox: {file}: {e}"))?;
    }
    Ok(())
}

fn fail(path: &Path, why: &str) -> String {
    format!(
        "cannot set up the sandbox: cannot hide `{}`: {why}",
        path.display()
    )
}

fn mount(
    source: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    let c = |s: &str| CString::new(s).map_err(|_| fail(target, "a NUL in a name"));
    let source = source.map(c).transpose()?;
    let fstype = fstype.map(c).transpose()?;
    let data = data.map(c).transpose()?;
    let path = CString::new(target.as_os_str().as_bytes()).map_err(|_| fail(target, "NUL"))?;
    let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is null or a NUL-terminated string alive for the call.
    let rc = unsafe {
        libc::mount(
            ptr(&source),
            path.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if rc != 0 {
        return Err(fail(target, &std::io::Error::last_os_error().to_string()));
    }
    Ok(())
}

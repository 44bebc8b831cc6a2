//! The lease that lets exactly one process drive a run at a time: the proof a holder
//! carries on every write (its fencing token), how long a silent holder keeps it, and
//! how a holder on this machine is known to be gone.

use crate::records::RunId;

/// Proof that this process holds a run. Writes carry `token`; a higher token taken by
/// another process makes them fail with [`StoreError::LeaseLost`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub run: RunId,
    pub token: i64,
}

/// A lease whose holder has not written for this long is considered abandoned even if
/// a process with its pid exists (the pid may have been reused, or the holder hangs).
/// The driver heartbeats far more often than this; see `Store::with_lease_ttl`.
pub const LEASE_TTL_MS: i64 = 60_000;

/// Whether a process with this pid exists (on this machine).
pub(crate) fn process_alive(pid: i64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 performs no action; it only checks that the pid exists
    // and we may signal it.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

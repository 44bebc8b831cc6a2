//! When a write is done: how far it must survive once its commit returns, how long it
//! waits for another writer, and the wall clock rows are stamped with.

use std::time::Duration;

/// How long a write waits for another process's write lock before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How far a write must survive once its commit returns (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=FULL`: fsynced before the commit returns; survives a power cut.
    PowerCut,
    /// `synchronous=NORMAL`: survives a killed process at once, and a power cut once
    /// the next [`Durability::PowerCut`] commit of this database returns.
    Process,
}

/// Milliseconds since the epoch, for row timestamps and heartbeats.
pub(crate) fn now_ms() -> i64 {
    crate::clock::Clock::now_ms(&crate::clock::SystemClock)
}

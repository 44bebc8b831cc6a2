//! The SQLite store: one file per installation holding every run, its transcript, the
//! tool-call journal, the trace and the human queue.
//!
//! [`Store::open`] does everything a connection needs up front (folder, WAL,
//! `synchronous=FULL`, busy timeout, migrations, 0600 permissions) so no caller can
//! forget a pragma. Every write goes through `BEGIN IMMEDIATE`, and every write made on
//! behalf of a running loop carries the run's lease token, so a process that lost its
//! lease cannot write late (fencing).
//!
//! **One fsync per step (issue 14).** Each write says how far it must survive
//! ([`Durability`]). Step commits, "started" marks and everything outside the step
//! path are `synchronous=FULL`: the commit returns after the WAL is fsynced. The
//! within-step journal (the model's response, a call's outcome) is committed with
//! `synchronous=NORMAL`: no fsync of its own. That is safe because of how WAL works:
//! commits append frames to one file in order, a later commit's fsync flushes the
//! whole file (so every earlier frame with it), and recovery after a power cut keeps
//! the longest prefix of whole, checksummed transactions. So a NORMAL commit survives
//! a killed process at once (it is in the OS's page cache) and a power cut as soon as
//! the next FULL commit returns; a power cut before that rolls back only a suffix of
//! the journal, never a hole in it. What a power cut can then cost is listed in the
//! module doc of `journal.rs` and in the README ("Durability").
//!
//! Damaged storage is reported, never repaired or overwritten (issue 6): a file that is
//! not SQLite, a damaged (e.g. truncated) one, a read-only one, or one another process
//! keeps locked past the busy timeout each get their own error, which the command layer
//! turns into one line and exit 2.

mod admin;
mod detail;
mod escalations;
mod journal;
mod migrations;
mod runs;

pub use detail::{
    AllToolsFailedFacts, ApprovalFacts, BreakerFacts, CallFacts, CallId, EscalationDetail, Facts,
    Handover, QuestionFacts, StuckFacts, ToolFailures,
};
pub use escalations::{EscalationId, EscalationKind, EscalationRow, NewEscalation, Resolution};
pub use journal::{CallRecord, CallStatus, JournalEntry, StepCommit, StoredEvent, StoredMessage};
pub use runs::{Lease, NewRun, RunRow, RunStatus};

use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// A run's id: 12 lowercase hex digits. Commands accept any unique prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(pub String);

impl RunId {
    pub fn generate() -> RunId {
        RunId(format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error("database {path} is not an agentrun database ({message}); it was left untouched")]
    NotADatabase { path: PathBuf, message: String },
    #[error(
        "database {path} is damaged ({message}); it was left untouched: restore it from a backup"
    )]
    Damaged { path: PathBuf, message: String },
    #[error(
        "database {path} is read-only; agentrun needs to write to it (check its permissions and attributes)"
    )]
    ReadOnly { path: PathBuf },
    #[error(
        "database {path} is locked by another process (waited {waited_ms} ms); try again when it is done"
    )]
    Locked { path: PathBuf, waited_ms: u128 },
    #[error(
        "database {path} was written by a newer agentrun (schema {found}, this build knows {known})"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("no run `{0}` in this database (see `agentrun runs list`)")]
    RunNotFound(String),
    #[error("run id prefix `{prefix}` is ambiguous: it matches {matches}")]
    AmbiguousRun { prefix: String, matches: String },
    #[error(
        "run {run} is held by pid {pid} (lease taken {since}); wait for it to finish, or stop that process first"
    )]
    LeaseHeld { run: RunId, pid: i64, since: String },
    /// Another process took the run over; this process must stop writing.
    #[error("run {0} was taken over by another process; this process stopped writing to it")]
    LeaseLost(RunId),
    #[error("no escalation `{0}` (see `agentrun escalations list --all`)")]
    EscalationNotFound(String),
    #[error("escalation {0} is already resolved; a decision is recorded once")]
    AlreadyResolved(i64),
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("stored data for run {run} is damaged: {message}")]
    Corrupt { run: String, message: String },
}

impl StoreError {
    /// Errors caused by what the user pointed us at (exit 2), as opposed to failures.
    pub fn is_bad_input(&self) -> bool {
        match self {
            // Damage found by a query after open is still a problem with the file.
            StoreError::Sqlite(e) => is_damage(e),
            StoreError::LeaseLost(_) => false,
            _ => true,
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

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

pub struct Store {
    path: PathBuf,
    conn: Mutex<Connection>,
    /// The connection's current `synchronous` level (true: FULL). Read and changed
    /// only while `conn` is locked; it saves a pragma when two writes in a row want
    /// the same level.
    sync_full: AtomicBool,
    busy_timeout: Duration,
    /// See [`runs::LEASE_TTL_MS`]; injectable so expiry is tested without waiting.
    lease_ttl_ms: i64,
}

impl Store {
    /// Opens (creating when `create` is set) the database at `path` and migrates it.
    /// A file that is not SQLite is reported and never written to.
    pub fn open(path: &Path, create: bool) -> Result<Store> {
        Store::open_in(path, create, None)
    }

    /// [`Store::open`] through a registered SQLite VFS instead of the default one:
    /// how tests put a counter under the file layer to count the fsyncs a step costs
    /// (`tests/it/syncs.rs`). Production code uses [`Store::open`].
    pub fn open_with_vfs(path: &Path, create: bool, vfs: &str) -> Result<Store> {
        Store::open_in(path, create, Some(vfs))
    }

    fn open_in(path: &Path, create: bool, vfs: Option<&str>) -> Result<Store> {
        let open_err = |message: String| StoreError::Open {
            path: path.to_path_buf(),
            message,
        };
        if !create && !path.exists() {
            return Err(open_err(
                "no such file; `agentrun start` creates it, or pass --db / AGENTRUN_DB".into(),
            ));
        }
        // A symlink (even a dangling one) could point the database anywhere: refused
        // (issue 12 item 9).
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(open_err(
                "is a symbolic link; agentrun does not follow it (point --db at the real file)"
                    .into(),
            ));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            use std::os::unix::fs::DirBuilderExt;
            // Folders it creates are private: runs hold tool output and transcripts.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| open_err(format!("cannot create folder {}: {e}", dir.display())))?;
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = match vfs {
            None => Connection::open_with_flags(path, flags),
            Some(vfs) => Connection::open_with_flags_and_vfs(path, flags, vfs),
        }
        .map_err(|e| open_err(e.to_string()))?;
        // An existing file loses group/other access too (one left 0666 by an older
        // version or a copy); its owner bits are kept, so read-only stays read-only.
        restrict_permissions(path);
        let store = Store {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
            sync_full: AtomicBool::new(true),
            busy_timeout: BUSY_TIMEOUT,
            lease_ttl_ms: runs::LEASE_TTL_MS,
        };
        store.configure()?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the busy timeout ([`BUSY_TIMEOUT`]): how long a write waits for
    /// another process's lock before failing with [`StoreError::Locked`].
    pub fn with_busy_timeout(mut self, timeout: Duration) -> Result<Store> {
        self.lock()
            .busy_timeout(timeout)
            .map_err(|e| self.classify(e))?;
        self.busy_timeout = timeout;
        Ok(self)
    }

    /// Replaces the lease TTL: a holder silent for longer loses the run to `acquire`.
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Store {
        self.lease_ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self
    }

    fn configure(&self) -> Result<()> {
        let conn = self.lock();
        let classify = |e: rusqlite::Error| match self.classify(e) {
            StoreError::Sqlite(e) => StoreError::Open {
                path: self.path.clone(),
                message: e.to_string(),
            },
            e => e,
        };
        // Before the first read: several processes opening a fresh file at once race
        // for the WAL switch, and a reader without a busy handler fails at once.
        conn.busy_timeout(self.busy_timeout).map_err(classify)?;
        // The first read of the header is where a non-SQLite (or truncated) file is
        // detected, before anything (even the WAL switch) writes to it.
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(classify)?;
        // SQLite silently falls back to read-only when the file cannot be written;
        // say so now rather than fail on the first write with a vaguer message.
        if conn.is_readonly("main").map_err(classify)? {
            return Err(StoreError::ReadOnly {
                path: self.path.clone(),
            });
        }
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(classify)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(classify)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(classify)?;
        drop(conn);
        migrations::migrate(self, version)
    }

    /// Names what is wrong with the file, when an SQLite error is about the file.
    fn classify(&self, e: rusqlite::Error) -> StoreError {
        use rusqlite::ErrorCode as C;
        let path = self.path.clone();
        let message = e.to_string();
        match e.sqlite_error_code() {
            Some(C::NotADatabase) => StoreError::NotADatabase { path, message },
            Some(C::DatabaseCorrupt) => StoreError::Damaged { path, message },
            Some(C::ReadOnly) => StoreError::ReadOnly { path },
            Some(C::DatabaseBusy | C::DatabaseLocked) => StoreError::Locked {
                path,
                waited_ms: self.busy_timeout.as_millis(),
            },
            _ => StoreError::Sqlite(e),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // Poisoning means a panic elsewhere while holding the lock; SQLite rolled back
        // whatever transaction was open, so the connection itself is still usable.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` inside `BEGIN IMMEDIATE … COMMIT`, durable against a power cut.
    fn write<T>(&self, f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>) -> Result<T> {
        self.write_as(Durability::PowerCut, f)
    }

    /// Runs `f` inside `BEGIN IMMEDIATE … COMMIT` at the given durability.
    fn write_as<T>(
        &self,
        durability: Durability,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut conn = self.lock();
        // SQLite refuses to change the level inside a transaction, so it is set here,
        // before BEGIN, and only when it differs from the last write's.
        let full = durability == Durability::PowerCut;
        if self.sync_full.load(Ordering::Relaxed) != full {
            let pragma = if full {
                "PRAGMA synchronous = FULL"
            } else {
                "PRAGMA synchronous = NORMAL"
            };
            conn.prepare_cached(pragma)
                .and_then(|mut s| s.execute([]))
                .map_err(|e| self.classify(e))?;
            self.sync_full.store(full, Ordering::Relaxed);
        }
        // BEGIN IMMEDIATE takes the write lock up front, so it is the one place a
        // write waits for another process (and times out as `Locked`).
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.classify(e))?;
        let value = f(&tx)?;
        tx.commit().map_err(|e| self.classify(e))?;
        Ok(value)
    }
}

fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

fn restrict_permissions(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    // Transcripts can hold customer data: owner-only, like an ssh key. Best effort:
    // a filesystem without Unix permissions is not a reason to refuse to run.
    let mode = std::fs::metadata(path).map_or(0o600, |m| m.permissions().mode() & 0o700);
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}

pub(crate) fn now_ms() -> i64 {
    crate::clock::Clock::now_ms(&crate::clock::SystemClock)
}

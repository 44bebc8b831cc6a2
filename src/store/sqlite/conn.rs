//! The SQLite connection: opening a file (and everything done on open), classifying
//! its errors, and the write transaction every write goes through.

use super::group::{self, Writer};
use super::migrations::MIGRATIONS;
use super::sql::classify;
use crate::store::durability::{BUSY_TIMEOUT, Durability};
use crate::store::error::{Result, StoreError};
use crate::store::lease::LEASE_TTL_MS;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Prepared statements kept per connection: every statement of the step path fits,
/// with room for the readers (`runs show`, resume) beside them.
const STATEMENT_CACHE: usize = 64;

pub struct SqliteStore {
    pub(super) path: PathBuf,
    /// This store's own connection, which checks and migrates the file on open;
    /// reads and writes then go through [`SqliteStore::writer`].
    pub(super) conn: Mutex<Connection>,
    pub(super) busy_timeout: Duration,
    /// See [`LEASE_TTL_MS`]; injectable so expiry is tested without waiting.
    pub(super) lease_ttl_ms: i64,
    vfs: Option<String>,
    /// The process's writer to this file, shared by every store open on it (see
    /// `group.rs`); opened at the first write.
    writer: OnceLock<Arc<Writer>>,
}

impl SqliteStore {
    /// Opens (creating when `create` is set) the database at `path` and migrates it.
    /// A file that is not SQLite is reported and never written to.
    pub fn open(path: &Path, create: bool) -> Result<SqliteStore> {
        SqliteStore::open_in(path, create, None)
    }

    /// [`SqliteStore::open`] through a registered SQLite VFS instead of the default one:
    /// how tests put a counter under the file layer to count the fsyncs a step costs
    /// (`tests/it/syncs.rs`). Production code uses [`SqliteStore::open`].
    pub fn open_with_vfs(path: &Path, create: bool, vfs: &str) -> Result<SqliteStore> {
        SqliteStore::open_in(path, create, Some(vfs))
    }

    fn open_in(path: &Path, create: bool, vfs: Option<&str>) -> Result<SqliteStore> {
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
        let store = SqliteStore {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
            busy_timeout: BUSY_TIMEOUT,
            lease_ttl_ms: LEASE_TTL_MS,
            vfs: vfs.map(str::to_owned),
            writer: OnceLock::new(),
        };
        store.configure()?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the busy timeout ([`BUSY_TIMEOUT`]): how long a write waits for
    /// another process's lock before failing with [`StoreError::Locked`].
    pub fn with_busy_timeout(mut self, timeout: Duration) -> Result<SqliteStore> {
        self.own()
            .busy_timeout(timeout)
            .map_err(|e| self.classify(e))?;
        self.busy_timeout = timeout;
        Ok(self)
    }

    /// Replaces the lease TTL: a holder silent for longer loses the run to `acquire`.
    pub fn with_lease_ttl(mut self, ttl: Duration) -> SqliteStore {
        self.lease_ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self
    }

    fn configure(&self) -> Result<()> {
        let conn = self.own();
        let classify = |e: rusqlite::Error| match self.classify(e) {
            StoreError::Sqlite(e) => StoreError::Open {
                path: self.path.clone(),
                message: e.to_string(),
            },
            e => e,
        };
        // A step uses ~16 distinct statements (a non-idempotent one 17): rusqlite's
        // default cache of 16 would evict and re-prepare some of them on every step.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
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
        switch_to_wal(&conn, self.busy_timeout).map_err(classify)?;
        set_options(&conn).map_err(classify)?;
        drop(conn);
        migrate(self, version)
    }

    /// Names what is wrong with the file, when an SQLite error is about the file.
    pub(super) fn classify(&self, e: rusqlite::Error) -> StoreError {
        classify(&self.path, self.busy_timeout, e)
    }

    /// This store's own connection: where the file is checked and migrated on open.
    fn own(&self) -> MutexGuard<'_, Connection> {
        // Poisoning means a panic elsewhere while holding the lock; SQLite rolled back
        // whatever transaction was open, so the connection itself is still usable.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection reads go through: the process's writer's. A connection drops
    /// its page cache whenever another has written, which in a busy worker is before
    /// nearly every read (issue 23: ~30 page reads a step, and the allocator churn of
    /// refilling the cache); the writer's stays warm. Reads wait while a write
    /// commits, as they would for the file's lock anyway.
    pub(super) fn lock(&self) -> Result<Reader<'_>> {
        Ok(Reader(self.writer()?.lock_conn()))
    }

    /// Runs `f` inside `BEGIN IMMEDIATE … COMMIT`, durable against a power cut.
    pub(super) fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.write_as(Durability::PowerCut, f)
    }

    /// Runs `f` inside `BEGIN IMMEDIATE … COMMIT` at the given durability, on this
    /// thread, with whatever writes other threads queued meanwhile (`group.rs`).
    ///
    /// `BEGIN IMMEDIATE`, `COMMIT` and `ROLLBACK` are cached statements, not
    /// `Connection::transaction`'s `execute_batch`, which parses each of them again on
    /// every write (issue 14: ~14k instructions a step). What is kept of
    /// `rusqlite::Transaction`: an error from `f` or from `COMMIT` (and a panic in
    /// `f`) rolls `f`'s writes back before the writer is unlocked.
    pub(super) fn write_as<T>(
        &self,
        durability: Durability,
        f: impl FnOnce(&Connection) -> Result<T>,
    ) -> Result<T> {
        let classify = |e| self.classify(e);
        self.writer()?
            .write(durability, self.busy_timeout, &classify, f)
    }

    /// [`SqliteStore::write_as`] for a write that owns what it writes, so that another
    /// thread committing at the time can take it into its transaction: the step path's
    /// writes, where a worker's threads would otherwise queue for one fsync each.
    pub(super) fn write_grouped<T, F>(&self, durability: Durability, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let classify = |e| self.classify(e);
        self.writer()?
            .write_grouped(durability, self.busy_timeout, &classify, f)
    }

    /// [`SqliteStore::write_grouped`] from async code: the write is queued for the
    /// file's committer thread and awaited, so this thread goes on with other work
    /// meanwhile (`group.rs`) — unless the writer is idle, when it commits here at
    /// once. Returns once the write is committed (or failed).
    pub(super) async fn write_queued<T, F>(&self, durability: Durability, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.queued(Some(durability), f).await
    }

    /// A read from async code, queued for the committer thread like
    /// [`SqliteStore::write_queued`]: this thread does not wait out a commit.
    pub(super) async fn read_queued<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.queued(None, f).await
    }

    /// A write (with a durability) or a read: at once when the writer is idle, else
    /// queued for the committer thread.
    async fn queued<T, F>(&self, durability: Option<Durability>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let writer = self.writer()?;
        let classify = |e| self.classify(e);
        let f = match writer.run_if_idle(durability, self.busy_timeout, &classify, f) {
            Ok(done) => return done,
            Err(f) => f,
        };
        let asker = group::Asker {
            busy: self.busy_timeout,
            path: self.path.clone(),
        };
        let done = writer.enqueue(durability, asker, f);
        done.await.unwrap_or_else(|_| Err(group::lost()))
    }

    /// The process's writer to this file, opened (or joined) on first use.
    pub(super) fn writer(&self) -> Result<&Arc<Writer>> {
        if let Some(writer) = self.writer.get() {
            return Ok(writer);
        }
        let writer = group::writer_for(&self.path, self.vfs.as_deref(), || self.open_writer())
            .map_err(|e| self.classify(e))?;
        Ok(self.writer.get_or_init(|| writer))
    }

    /// A second connection to the file, set up for writing (the file is already
    /// checked and migrated by this store's own).
    fn open_writer(&self) -> rusqlite::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = match &self.vfs {
            None => Connection::open_with_flags(&self.path, flags),
            Some(vfs) => Connection::open_with_flags_and_vfs(&self.path, flags, vfs.as_str()),
        }?;
        // Every write of the process (and the per-step reads) share it.
        conn.set_prepared_statement_cache_capacity(2 * STATEMENT_CACHE);
        conn.busy_timeout(self.busy_timeout)?;
        set_options(&conn)?;
        Ok(conn)
    }
}

/// What every connection of the store runs with, whichever opened it.
fn set_options(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Deleted rows are overwritten with zeros, not left in free space where
    // `strings` finds a removed run's text (issue 22; see `scrub`).
    conn.pragma_update(None, "secure_delete", "ON")?;
    // Without it SQLite may plan a statement for the values bound to it; such a
    // statement is expired whenever its cached copy's bindings are cleared, so
    // rusqlite's cache re-parsed it on every use (the step's read of people's
    // messages, every step). Every plan here is chosen for the schema, not the data.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

/// A locked connection for reads ([`SqliteStore::lock`]).
pub(super) struct Reader<'a>(MutexGuard<'a, group::WriterConn>);

impl std::ops::Deref for Reader<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.0.conn
    }
}

/// Switches the file to WAL (a no-op once it is). On a fresh file the switch needs
/// SQLite's exclusive lock while holding a shared one, and when another process holds
/// the write lock (creating or switching the same file) SQLite fails it at once as a
/// deadlock instead of calling the busy handler: `submit`s started together on a
/// new database failed with "locked". It is tried again until the busy timeout.
fn switch_to_wal(conn: &Connection, busy: Duration) -> rusqlite::Result<()> {
    let deadline = std::time::Instant::now() + busy;
    let mut pause = Duration::from_millis(1);
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            done => return done,
        }
    }
}

fn restrict_permissions(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    // Transcripts can hold customer data: owner-only, like an ssh key. Best effort:
    // a filesystem without Unix permissions is not a reason to refuse to run.
    let mode = std::fs::metadata(path).map_or(0o600, |m| m.permissions().mode() & 0o700);
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}

/// Applies the migrations after `from` (the file's `user_version`), one transaction each.
fn migrate(store: &SqliteStore, from: i64) -> Result<()> {
    let known = MIGRATIONS.len() as i64;
    if from > known {
        return Err(StoreError::TooNew {
            path: store.path.clone(),
            found: from,
            known,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        store.write(|tx| {
            // Another process may have migrated between our read and this lock.
            let now: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            if now > i as i64 {
                return Ok(());
            }
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", i as i64 + 1)?;
            Ok(())
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::SqliteStore;
    use crate::records::RunId;
    use crate::store::Store;
    use rusqlite::config::DbConfig;
    use rusqlite::{Connection, ffi};
    use std::collections::HashMap;
    use std::ffi::CStr;
    use std::time::Duration;

    /// Another process holds the write lock of a fresh (not yet WAL) file: SQLite
    /// refuses the WAL switch at once rather than wait, so the open tries again, and
    /// succeeds once the lock is given up (it used to fail with "locked" at once).
    #[test]
    fn opening_a_fresh_file_another_process_is_writing_waits_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        // The hold is the other process's own duration, not a wait for a condition:
        // the open starts while it is held, whatever the machine's speed.
        let holder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            other.execute_batch("COMMIT").unwrap();
        });
        let store = SqliteStore::open(&path, true);
        holder.join().unwrap();
        let store = store.expect("the open waits out another process's write lock");
        let mode: String = store
            .own()
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    /// Within the busy timeout only: a lock held for longer is still `Locked`.
    #[test]
    fn a_write_lock_held_past_the_busy_timeout_still_fails_the_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let conn = Connection::open(&path).unwrap();
        let started = std::time::Instant::now();
        let err = super::switch_to_wal(&conn, Duration::from_millis(60)).unwrap_err();
        assert_eq!(
            err.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy)
        );
        assert!(started.elapsed() >= Duration::from_millis(60));
    }

    /// A cached statement is parsed once, whatever values are bound to it: SQLite
    /// otherwise plans some statements for their values and expires them each time
    /// rusqlite's cache clears their bindings, and the step's read of people's
    /// messages was parsed again on every step. After a first round (the schema read
    /// in), more rounds with other runs parse nothing again.
    #[test]
    fn cached_statements_are_not_parsed_again_for_new_values() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("runs.db"), true).unwrap();
        let Store::Sqlite(sqlite) = &store else {
            unreachable!()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let round = |n: usize| {
            let runs: Vec<RunId> = (0..3).map(|i| RunId(format!("run-{n}-{i}"))).collect();
            for run in &runs {
                super::super::queue::tests::submit(&store, &run.0);
            }
            for sent in 1..=3 {
                for run in &runs {
                    sqlite.send_message(run, "a note", "ann").unwrap();
                    let to_deliver = rt.block_on(sqlite.messages_to_deliver(run)).unwrap();
                    assert_eq!(to_deliver.len(), sent);
                    assert_eq!(sqlite.undelivered_messages(run).unwrap().len(), sent);
                }
            }
            reprepares(&sqlite.lock().unwrap())
        };
        let warm = round(0);
        let after = round(1);
        let parsed_again: Vec<_> = after
            .iter()
            .filter(|(sql, n)| warm.get(*sql) != Some(n))
            .collect();
        assert!(parsed_again.is_empty(), "parsed again: {parsed_again:?}");
        for conn in [&*sqlite.lock().unwrap(), &*sqlite.own()] {
            let qpsg = conn.db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG);
            assert!(qpsg.unwrap(), "every connection plans for the schema");
        }
    }

    /// How many times SQLite prepared each statement of `conn` again; a PRAGMA is
    /// prepared for every run by design and left out.
    fn reprepares(conn: &Connection) -> HashMap<String, i32> {
        let mut found = HashMap::new();
        // SAFETY: the connection is locked by the caller and outlives the walk; each
        // statement pointer comes from SQLite's own list and is only read.
        unsafe {
            let db = conn.handle();
            let mut stmt = ffi::sqlite3_next_stmt(db, std::ptr::null_mut());
            while !stmt.is_null() {
                let sql = CStr::from_ptr(ffi::sqlite3_sql(stmt)).to_string_lossy();
                if !sql.trim_start().to_uppercase().starts_with("PRAGMA") {
                    let n = ffi::sqlite3_stmt_status(stmt, ffi::SQLITE_STMTSTATUS_REPREPARE, 0);
                    found.insert(sql.into_owned(), n);
                }
                stmt = ffi::sqlite3_next_stmt(db, stmt);
            }
        }
        found
    }
}

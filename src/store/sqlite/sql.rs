//! SQLite's primitives that the connection and the group committer share: naming what
//! an error says about the file, running a cached statement, and a write transaction
//! that rolls back when dropped. Below both, so neither imports the other for them.

use crate::store::error::StoreError;
use rusqlite::Connection;
use std::path::Path;
use std::time::Duration;

/// Names what is wrong with the file at `path`, when an SQLite error is about the
/// file (`busy`: how long a write waited for the lock).
pub(super) fn classify(path: &Path, busy: Duration, e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode as C;
    let path = path.to_path_buf();
    let message = e.to_string();
    match e.sqlite_error_code() {
        Some(C::NotADatabase) => StoreError::NotADatabase { path, message },
        Some(C::DatabaseCorrupt) => StoreError::Damaged { path, message },
        Some(C::ReadOnly) => StoreError::ReadOnly { path },
        Some(C::DatabaseBusy | C::DatabaseLocked) => StoreError::Locked {
            path,
            waited_ms: busy.as_millis(),
        },
        _ => StoreError::Sqlite(e),
    }
}

/// Runs one statement that returns no rows through the connection's statement cache.
pub(super) fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.raw_execute().map(drop)
}

/// An open write transaction: rolled back when dropped unless it was committed (an
/// error or a panic between `BEGIN` and a successful `COMMIT`), as
/// `rusqlite::Transaction`'s default drop behaviour does.
pub(super) struct OpenTransaction<'c>(pub(super) &'c Connection);

impl Drop for OpenTransaction<'_> {
    fn drop(&mut self) {
        // After a failed COMMIT SQLite may have rolled back already (autocommit again).
        if !self.0.is_autocommit() {
            let _ = run_cached(self.0, "ROLLBACK");
        }
    }
}

//! Removing runs (`runs rm`, `runs prune`, issue 13): every row a run owns goes in one
//! transaction, so a removal is all or nothing.
//!
//! The tables are found from the schema (every table with a `run_id` column, then
//! `runs` itself), so a table added by a later migration is covered without editing
//! this file.
//!
//! Removed means gone from the file (issue 22): every SQLite connection runs with
//! `secure_delete` (freed content is zeroed), and [`SqliteStore::scrub`] then truncates
//! the WAL, whose old frames still held the rows as they were written. `--vacuum`
//! rebuilds the file as well, which also drops what older versions of the remaining
//! rows left in free space before `secure_delete` was on.

use super::conn::SqliteStore;
use super::write::{check_lease, insert_scripts};
use crate::records::RunId;
use crate::store::error::Result;
use crate::store::lease::Lease;
use std::collections::BTreeMap;

impl SqliteStore {
    /// Deletes one run and everything it owns. Returns false when no such run exists.
    pub fn delete_run(&self, id: &RunId) -> Result<bool> {
        self.write(|tx| {
            let tables: Vec<String> = {
                let mut stmt = tx.prepare(
                    "SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) c
                     WHERE m.type = 'table' AND c.name = 'run_id' AND m.name != 'runs'",
                )?;
                let rows = stmt.query_map([], |r| r.get(0))?;
                rows.collect::<std::result::Result<_, _>>()?
            };
            for table in tables {
                // Names come from the schema itself, never from input.
                tx.execute(
                    &format!("DELETE FROM \"{table}\" WHERE run_id = ?1"),
                    [id.as_str()],
                )?;
            }
            Ok(tx.execute("DELETE FROM runs WHERE id = ?1", [id.as_str()])? == 1)
        })
    }

    /// After removals: checkpoints the WAL into the file and truncates it to zero bytes
    /// (a reader still open elsewhere can keep it from being truncated; the next
    /// removal or checkpoint finishes the job). With `vacuum`, rebuilds the file first.
    pub fn scrub(&self, vacuum: bool) -> Result<()> {
        // On the writer: nothing of this process's writes between, and its lock held.
        let writer = self.writer()?.lock_conn();
        let conn = &writer.conn;
        if vacuum {
            conn.execute_batch("VACUUM").map_err(|e| self.classify(e))?;
        }
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(|e| self.classify(e))?;
        Ok(())
    }
}

impl SqliteStore {
    /// Replaces a held run's config snapshot (`resume --model` switches the model for
    /// the rest of the run).
    pub fn replace_snapshot(
        &self,
        lease: &Lease,
        snapshot: &str,
        scripts: &BTreeMap<String, String>,
    ) -> Result<()> {
        self.write(|tx| {
            check_lease(tx, lease)?;
            tx.execute(
                "UPDATE run_snapshots SET snapshot = ?2 WHERE run_id = ?1",
                rusqlite::params![lease.run.0, snapshot],
            )?;
            tx.execute(
                "DELETE FROM run_scripts WHERE run_id = ?1",
                [lease.run.as_str()],
            )?;
            insert_scripts(tx, &lease.run, scripts)?;
            Ok(())
        })
    }
}

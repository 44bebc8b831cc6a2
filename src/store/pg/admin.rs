//! Removing runs and replacing a held run's snapshot, on PostgreSQL (as SQLite's
//! `admin`: the tables a run owns are found from the catalogue).

use super::conn::PgStore;
use super::write::{check_lease, insert_scripts};
use crate::records::RunId;
use crate::store::error::Result;
use crate::store::lease::Lease;
use std::collections::BTreeMap;

impl PgStore {
    pub fn delete_run(&self, id: &RunId) -> Result<bool> {
        let id = id.clone();
        self.write(move |tx| {
            // Every table with a run_id column, from the catalogue (as on SQLite).
            let tables: Vec<String> = tx
                .query(
                    "SELECT table_name::text FROM information_schema.columns
                     WHERE table_schema = current_schema() AND column_name = 'run_id'
                       AND table_name <> 'runs'",
                    &[],
                )?
                .iter()
                .map(|r| r.get(0))
                .collect();
            for table in tables {
                // Names come from the catalogue itself, never from input.
                tx.exec_unprepared(
                    &format!("DELETE FROM \"{table}\" WHERE run_id = $1"),
                    &[&id.0],
                )?;
            }
            Ok(tx.exec("DELETE FROM runs WHERE id = $1", &[&id.0])? == 1)
        })
    }

    /// PostgreSQL keeps dead rows until a vacuum reclaims them; `vacuum` runs a plain
    /// `VACUUM` of the database (the server's own files are its administrator's domain:
    /// `VACUUM FULL` locks every table, which a shared database cannot afford).
    pub fn scrub(&self, vacuum: bool) -> Result<()> {
        if !vacuum {
            return Ok(());
        }
        self.read(|r| r.batch("VACUUM"))
    }

    pub fn replace_snapshot(
        &self,
        lease: &Lease,
        snapshot: &str,
        scripts: &BTreeMap<String, String>,
    ) -> Result<()> {
        let lease = lease.clone();
        let snapshot = snapshot.to_string();
        let scripts = scripts.clone();
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            tx.exec(
                "UPDATE run_snapshots SET snapshot = $2 WHERE run_id = $1",
                &[&lease.run.0, &snapshot],
            )?;
            tx.exec("DELETE FROM run_scripts WHERE run_id = $1", &[&lease.run.0])?;
            insert_scripts(tx, &lease.run, &scripts)
        })
    }
}

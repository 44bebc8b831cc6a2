//! Run rows: creation, lookup, listing, status, and the lease that lets exactly one
//! process drive a run at a time.

use super::conn::SqliteStore;
use super::rows::{RUN_COLUMNS, run_row};
use super::write::check_lease;
use crate::records::{RunId, RunRow, RunStatus};
use crate::store::durability::{Durability, now_ms};
use crate::store::error::{Result, StoreError};
use crate::store::lease::{Lease, process_alive};
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::BTreeMap;

impl SqliteStore {
    /// Takes the lease of a run for this process. Refused while another live process
    /// holds it; a holder that died (no such pid) or went silent is replaced at once.
    pub fn acquire(&self, id: &RunId) -> Result<Lease> {
        let now = now_ms();
        let me = std::process::id() as i64;
        self.write(|tx| {
            let (pid, token, heartbeat, since): (Option<i64>, i64, Option<i64>, Option<i64>) = tx
                .query_row(
                    "SELECT lease_pid, lease_token, lease_heartbeat, lease_since FROM runs WHERE id = ?1",
                    [&id.0],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()?
                .ok_or_else(|| StoreError::RunNotFound(id.0.clone()))?;
            if let Some(pid) = pid {
                let fresh = heartbeat.is_some_and(|h| now - h < self.lease_ttl_ms);
                if pid != me && fresh && process_alive(pid) {
                    return Err(StoreError::LeaseHeld {
                        run: id.clone(),
                        pid,
                        since: format_time(since.unwrap_or(now)),
                    });
                }
            }
            tx.execute(
                "UPDATE runs SET lease_pid = ?2, lease_token = ?3, lease_heartbeat = ?4,
                    lease_since = ?4, lease_worker = NULL WHERE id = ?1",
                params![id.0, me, token + 1, now],
            )?;
            Ok(Lease {
                run: id.clone(),
                token: token + 1,
            })
        })
    }

    /// Gives the run up (the process is about to exit).
    pub fn release(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.write_grouped(Durability::PowerCut, move |tx| release(tx, &lease))
    }

    /// [`SqliteStore::release`] from async code: queued for the committer thread.
    pub(crate) async fn release_queued(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.write_queued(Durability::PowerCut, move |tx| release(tx, &lease))
            .await
    }

    /// Refreshes the lease's heartbeat; fails when another process took the run.
    /// Not fsynced: a heartbeat only says the holder is alive now, which a power cut
    /// makes false anyway.
    pub fn heartbeat(&self, lease: &Lease) -> Result<()> {
        self.write_as(Durability::Process, |tx| check_lease(tx, lease))
    }

    /// Every lease's heartbeat in one transaction, not fsynced (as [`Self::heartbeat`]).
    pub fn heartbeat_all(&self, leases: &[Lease]) -> Result<usize> {
        if leases.is_empty() {
            return Ok(0);
        }
        self.write_as(Durability::Process, |tx| {
            let now = now_ms();
            let mut update = tx.prepare_cached(
                "UPDATE runs SET lease_heartbeat = ?3 WHERE id = ?1 AND lease_token = ?2",
            )?;
            let mut n = 0;
            for lease in leases {
                n += update.execute(params![lease.run.0, lease.token, now])?;
            }
            Ok(n)
        })
    }

    /// Sets a run's status outside a step commit (interrupted, failed, escalated).
    pub fn set_status(&self, lease: &Lease, status: RunStatus, error: Option<&str>) -> Result<()> {
        self.write(|tx| {
            check_lease(tx, lease)?;
            tx.execute(
                "UPDATE runs SET status = ?2, error = ?3, updated_at = ?4 WHERE id = ?1",
                params![lease.run.0, status.as_str(), error, now_ms()],
            )?;
            if status == RunStatus::Cancelled {
                super::cancel::close_escalations(tx, &lease.run, now_ms())?;
            }
            super::outbox::record_if_ended(tx, &lease.run, status, error)?;
            Ok(())
        })
    }

    /// Raises (or lowers) a run's budgets, e.g. from `resume --max-steps`.
    pub fn set_budgets(&self, lease: &Lease, max_steps: u32, max_tokens: u64) -> Result<()> {
        self.write(|tx| {
            check_lease(tx, lease)?;
            tx.execute(
                "UPDATE runs SET max_steps = ?2, max_tokens = ?3 WHERE id = ?1",
                params![lease.run.0, max_steps, max_tokens as i64],
            )?;
            Ok(())
        })
    }

    pub fn run(&self, id: &RunId) -> Result<RunRow> {
        let conn = self.lock()?;
        conn.query_row(
            &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"),
            [&id.0],
            run_row,
        )
        .optional()?
        .ok_or_else(|| StoreError::RunNotFound(id.0.clone()))?
    }

    /// The run's config snapshot JSON, as stored at start.
    pub fn snapshot(&self, id: &RunId) -> Result<String> {
        let conn = self.lock()?;
        conn.query_row(
            "SELECT snapshot FROM run_snapshots WHERE run_id = ?1",
            [&id.0],
            |r| r.get(0),
        )
        .optional()?
        .ok_or_else(|| StoreError::RunNotFound(id.0.clone()))
    }

    /// The run's scripts by model spec.
    pub fn scripts(&self, id: &RunId) -> Result<BTreeMap<String, String>> {
        let conn = self.lock()?;
        let mut stmt =
            conn.prepare_cached("SELECT spec, text FROM run_scripts WHERE run_id = ?1")?;
        let rows = stmt.query_map([&id.0], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// The `models` of the run's config snapshot (a JSON array), picked out by
    /// SQLite's JSON functions: `runs show` needs only this from it (issue 14).
    pub fn snapshot_models(&self, id: &RunId) -> Result<Option<String>> {
        let conn = self.lock()?;
        let models: Option<Option<String>> = conn
            .prepare_cached(
                "SELECT json_extract(snapshot, '$.models') FROM run_snapshots WHERE run_id = ?1",
            )?
            .query_row([&id.0], |r| r.get(0))
            .optional()?;
        Ok(models.flatten())
    }

    /// Resolves a full id or a unique prefix of one.
    pub fn find_run(&self, prefix: &str) -> Result<RunId> {
        let conn = self.lock()?;
        let Some(pattern) = RunId::prefix_pattern(prefix) else {
            return Err(StoreError::RunNotFound(prefix.to_string()));
        };
        let mut stmt =
            conn.prepare("SELECT id FROM runs WHERE id LIKE ?1 ESCAPE '\\' ORDER BY id LIMIT 6")?;
        let ids: Vec<String> = stmt
            .query_map([pattern], |r| r.get(0))?
            .collect::<std::result::Result<_, _>>()?;
        if ids.iter().any(|i| i == prefix) {
            return Ok(RunId(prefix.to_string()));
        }
        match ids.len() {
            0 => Err(StoreError::RunNotFound(prefix.to_string())),
            1 => Ok(RunId(ids[0].clone())),
            _ => Err(StoreError::AmbiguousRun {
                prefix: prefix.to_string(),
                matches: ids.join(", "),
            }),
        }
    }

    /// The child run started by the call with idempotency key `key`, if any.
    pub fn child_by_key(&self, key: &str) -> Result<Option<RunRow>> {
        let conn = self.lock()?;
        let row = conn
            .query_row(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE child_key = ?1"),
                [key],
                run_row,
            )
            .optional()?;
        row.transpose()
    }

    /// A run's child runs, oldest first.
    pub fn children(&self, parent: &RunId) -> Result<Vec<RunRow>> {
        let conn = self.lock()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE parent_run = ?1 ORDER BY created_at, rowid"
        ))?;
        let rows = stmt.query_map([&parent.0], run_row)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row??);
        }
        Ok(out)
    }

    /// Runs, newest first, optionally only those with `status`.
    pub fn list_runs(&self, status: Option<RunStatus>) -> Result<Vec<RunRow>> {
        self.recent_runs(status, None)
    }

    /// The `limit` newest runs (all with `None`), optionally only those with `status`.
    ///
    /// Walks `runs_by_created` backwards (its entries are `(created_at, rowid)`, so
    /// the order needs no sort) and stops after `limit` matches: the cost is that of
    /// the rows returned, not of the table — `runs list --limit 20` on 100,000 runs
    /// reads 20 rows (issue 14; `tests/it/scale.rs` pins the plan).
    pub fn recent_runs(
        &self,
        status: Option<RunStatus>,
        limit: Option<u32>,
    ) -> Result<Vec<RunRow>> {
        let conn = self.lock()?;
        let mut stmt = conn.prepare_cached(RECENT_RUNS)?;
        let limit = limit.map_or(-1, i64::from);
        let rows = stmt.query_map(params![status.map(RunStatus::as_str), limit], run_row)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row??);
        }
        Ok(out)
    }

    /// SQLite's plan for [`SqliteStore::recent_runs`], one line per step: for tests that
    /// pin that it reads the index in order rather than sorting the table.
    pub fn recent_runs_plan(&self) -> Result<Vec<String>> {
        let conn = self.lock()?;
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {RECENT_RUNS}"))?;
        let rows = stmt.query_map(params![Option::<&str>::None, 20], |r| r.get::<_, String>(3))?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }
}

/// A negative LIMIT is no limit in SQLite.
const RECENT_RUNS: &str = "SELECT id, task, task_path, status, max_steps, max_tokens, steps, \
     input_tokens, output_tokens, answer, error, lease_pid, created_at, updated_at, \
     lease_worker, lease_heartbeat, parent_run, parent_call, forked_from, forked_at, cost_usd FROM runs INDEXED BY runs_by_created WHERE (?1 IS NULL OR status = ?1) \
     ORDER BY created_at DESC, rowid DESC LIMIT ?2";
fn format_time(ms: i64) -> String {
    crate::timefmt::rfc3339(ms)
}

fn release(tx: &Connection, lease: &Lease) -> Result<()> {
    tx.prepare_cached(
        "UPDATE runs SET lease_pid = NULL, lease_worker = NULL WHERE id = ?1 AND lease_token = ?2",
    )?
    .execute(params![lease.run.0, lease.token])?;
    Ok(())
}

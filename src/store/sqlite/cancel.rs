//! Cancelling a run on SQLite: the decisions of `store/cancel.rs` ([`decide`]) in
//! SQLite's SQL, in one `BEGIN IMMEDIATE` transaction.

use super::SqliteStore;
use crate::records::{RunId, RunStatus};
use crate::store::cancel::{CancelOutcome, CancelRequest, cancel_text, decide};
use crate::store::durability::now_ms;
use crate::store::lease::process_alive;
use crate::store::{Result, StoreError};
use rusqlite::{OptionalExtension, params};

impl SqliteStore {
    /// Cancels a run, or asks its live holder to (see the module doc).
    pub fn cancel_run(&self, id: &RunId, by: &str, reason: Option<&str>) -> Result<CancelOutcome> {
        let now = now_ms();
        let ttl = self.lease_ttl_ms;
        self.write(|tx| {
            let row: Option<(String, Option<i64>, Option<i64>)> = tx
                .query_row(
                    "SELECT status, lease_pid, lease_heartbeat FROM runs WHERE id = ?1",
                    [&id.0],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            let (status, pid, heartbeat) =
                row.ok_or_else(|| StoreError::RunNotFound(id.0.clone()))?;
            let status = RunStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
                run: id.0.clone(),
                message: format!("unknown status `{status}`"),
            })?;
            // Every holder of an SQLite file is on this machine: a dead pid is dead.
            let live = pid.is_some_and(process_alive) && heartbeat.is_some_and(|h| now - h < ttl);
            let outcome = decide(status, live);
            match outcome {
                CancelOutcome::Requested => {
                    tx.execute(
                        "UPDATE runs SET cancel_requested_at = COALESCE(cancel_requested_at, ?2),
                            cancel_by = COALESCE(cancel_by, ?3),
                            cancel_reason = COALESCE(cancel_reason, ?4) WHERE id = ?1",
                        params![id.0, now, by, reason],
                    )?;
                }
                CancelOutcome::Cancelled => {
                    crate::fault::point("inside_cancel");
                    tx.execute(
                        "UPDATE runs SET cancel_requested_at = COALESCE(cancel_requested_at, ?2),
                            cancel_by = COALESCE(cancel_by, ?3),
                            cancel_reason = COALESCE(cancel_reason, ?4)
                         WHERE id = ?1",
                        params![id.0, now, by, reason],
                    )?;
                    let text = cancel_text_of(tx, id)?;
                    tx.execute(
                        "UPDATE runs SET status = 'cancelled', error = ?2, updated_at = ?3,
                            lease_pid = NULL, lease_worker = NULL, lease_token = lease_token + 1
                         WHERE id = ?1",
                        params![id.0, text, now],
                    )?;
                    close_escalations(tx, id, now)?;
                    super::outbox::record_if_ended(tx, id, RunStatus::Cancelled, Some(&text))?;
                }
                CancelOutcome::AlreadyCancelled | CancelOutcome::Finished(_) => {}
            }
            Ok(outcome)
        })
    }

    /// The cancel asked for a run that is not finished, if any (the holder's pulse).
    pub fn cancel_request(&self, run: &RunId) -> Result<Option<CancelRequest>> {
        let conn = self.lock()?;
        let mut stmt = conn.prepare_cached(
            "SELECT cancel_by, cancel_reason, cancel_requested_at FROM runs
             WHERE id = ?1 AND cancel_requested_at IS NOT NULL
               AND status NOT IN ('cancelled', 'completed')",
        )?;
        Ok(stmt
            .query_row([&run.0], |r| {
                Ok(CancelRequest {
                    by: r.get(0)?,
                    reason: r.get(1)?,
                    at: r.get(2)?,
                })
            })
            .optional()?)
    }

    /// The runs among `runs` with a cancel asked (one query; the ids as a JSON array).
    pub fn cancel_requests(&self, runs: &[RunId]) -> Result<Vec<(RunId, CancelRequest)>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let ids = serde_json::Value::from(runs.iter().map(|r| r.0.as_str()).collect::<Vec<_>>())
            .to_string();
        let conn = self.lock()?;
        let mut stmt = conn.prepare_cached(
            "SELECT id, cancel_by, cancel_reason, cancel_requested_at FROM runs
             WHERE id IN (SELECT value FROM json_each(?1)) AND cancel_requested_at IS NOT NULL
               AND status NOT IN ('cancelled', 'completed')",
        )?;
        let rows = stmt.query_map([ids], |r| {
            Ok((
                RunId(r.get(0)?),
                CancelRequest {
                    by: r.get(1)?,
                    reason: r.get(2)?,
                    at: r.get(3)?,
                },
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Who cancelled a run, when and why (`runs show`); `None` if nobody asked.
    pub fn cancel_info(&self, run: &RunId) -> Result<Option<CancelRequest>> {
        let conn = self.lock()?;
        let mut stmt = conn.prepare_cached(
            "SELECT cancel_by, cancel_reason, cancel_requested_at FROM runs
             WHERE id = ?1 AND cancel_requested_at IS NOT NULL",
        )?;
        Ok(stmt
            .query_row([&run.0], |r| {
                Ok(CancelRequest {
                    by: r.get(0)?,
                    reason: r.get(1)?,
                    at: r.get(2)?,
                })
            })
            .optional()?)
    }
}

/// The run's cancel text from the request stored in its row (the first asker's).
fn cancel_text_of(tx: &rusqlite::Connection, id: &RunId) -> Result<String> {
    let (by, reason): (String, Option<String>) = tx.query_row(
        "SELECT cancel_by, cancel_reason FROM runs WHERE id = ?1",
        [&id.0],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(cancel_text(&by, reason.as_deref()))
}

/// Closes a cancelled run's open escalations: nobody is to decide them any more.
pub(super) fn close_escalations(tx: &rusqlite::Connection, id: &RunId, now: i64) -> Result<()> {
    tx.execute(
        "UPDATE escalations SET status = 'cancelled', resolved_at = ?2,
            resolved_by = (SELECT COALESCE(cancel_by, 'agentrun') FROM runs WHERE id = ?1)
         WHERE run_id = ?1 AND status = 'open'",
        params![id.0, now],
    )?;
    Ok(())
}

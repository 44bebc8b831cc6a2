//! The outbox on SQLite: the event row written inside the caller's transaction, and
//! reading and marking pending events (see `store/outbox.rs`).

use super::conn::SqliteStore;
use crate::config::types::NotifyEvent;
use crate::records::{RunId, RunStatus};
use crate::store::durability::Durability;
use crate::store::durability::now_ms;
use crate::store::error::Result;
use crate::store::lease::process_alive;
use crate::store::outbox::{CLAIM_MS, Delivery, Notice, ends_run, new_id};
use rusqlite::{Connection, OptionalExtension, params};

/// Writes an event row inside the caller's transaction.
pub(super) fn record(
    tx: &Connection,
    event: NotifyEvent,
    run: &RunId,
    escalation: Option<i64>,
    kind: &str,
    summary: &str,
) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO outbox (id, event, run_id, escalation_id, kind, summary, created_at, state, attempts)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', 0)",
    )?
    .execute(params![new_id(), event.as_str(), run.0, escalation, kind, summary, now_ms()])?;
    crate::fault::point("notify_before_commit");
    Ok(())
}

/// [`record`] of `run_ended` when `status` ends the run.
pub(super) fn record_if_ended(
    tx: &Connection,
    run: &RunId,
    status: RunStatus,
    summary: Option<&str>,
) -> Result<()> {
    if ends_run(status) {
        let text = summary.unwrap_or_default();
        record(tx, NotifyEvent::RunEnded, run, None, status.as_str(), text)?;
    }
    Ok(())
}

const COLUMNS: &str =
    "id, event, run_id, escalation_id, kind, summary, created_at, state, attempts, last_error";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Notice> {
    let event: String = r.get(1)?;
    Ok(Notice {
        id: r.get(0)?,
        event: NotifyEvent::parse(&event).unwrap_or(NotifyEvent::RunEnded),
        run_id: RunId(r.get(2)?),
        escalation_id: r.get(3)?,
        kind: r.get(4)?,
        summary: r.get(5)?,
        created_at: r.get(6)?,
        state: r.get(7)?,
        attempts: r.get(8)?,
        last_error: r.get(9)?,
    })
}

impl SqliteStore {
    /// Pending events, oldest first.
    pub fn pending_notices(&self, limit: u32) -> Result<Vec<Notice>> {
        self.pending(None, limit)
    }

    /// One run's pending events, oldest first.
    pub fn pending_notices_of(&self, run: &RunId, limit: u32) -> Result<Vec<Notice>> {
        self.pending(Some(run), limit)
    }

    fn pending(&self, run: Option<&RunId>, limit: u32) -> Result<Vec<Notice>> {
        let conn = self.lock()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM outbox WHERE state = 'pending' AND (?1 IS NULL OR run_id = ?1)
             ORDER BY seq LIMIT ?2"
        ))?;
        let rows = stmt.query_map(params![run.map(|r| r.as_str()), limit], row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Events that failed at least once (`all`: every event), newest first.
    pub fn list_notices(&self, all: bool) -> Result<Vec<Notice>> {
        let conn = self.lock()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM outbox WHERE ?1 OR state = 'failed' OR last_error IS NOT NULL
             ORDER BY seq DESC"
        ))?;
        let rows = stmt.query_map([all], row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Claims event `id` for this process (see [`CLAIM_MS`]): two processes passing
    /// over the outbox at once never both send it.
    pub fn claim_notice(&self, id: &str) -> Result<bool> {
        let now = now_ms();
        let me = i64::from(std::process::id());
        self.write(|tx| {
            let row: Option<(Option<i64>, Option<i64>)> = tx
                .query_row(
                    "SELECT claim_pid, claim_until FROM outbox WHERE id = ?1 AND state = 'pending'",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let Some((pid, until)) = row else {
                return Ok(false);
            };
            // Every process on an SQLite file is on this machine: a dead pid is dead.
            let held = until.is_some_and(|u| u > now) && pid.is_some_and(process_alive);
            if held {
                return Ok(false);
            }
            tx.execute(
                "UPDATE outbox SET claim_pid = ?2, claim_until = ?3 WHERE id = ?1",
                params![id, me, now + CLAIM_MS],
            )?;
            Ok(true)
        })
    }

    /// Marks every pending event of `run` skipped — a run without `[notify]` has
    /// nothing to send — in one write queued for the committer thread (`group.rs`).
    pub(crate) async fn skip_notices_of(&self, run: &RunId) -> Result<()> {
        let run = run.clone();
        self.write_queued(Durability::Process, move |tx| {
            tx.prepare_cached(
                "UPDATE outbox SET state = 'skipped', claim_until = NULL
                 WHERE run_id = ?1 AND state = 'pending'",
            )?
            .execute([&run.0])?;
            Ok(())
        })
        .await
    }

    /// Records how a delivery of event `id` went (and gives its claim up).
    pub fn mark_notice(&self, id: &str, how: &Delivery) -> Result<()> {
        self.write(|tx| {
            match how {
                Delivery::Delivered => tx.execute(
                    "UPDATE outbox SET state = 'delivered', claim_until = NULL, attempts = attempts + 1, delivered_at = ?2
                     WHERE id = ?1",
                    params![id, now_ms()],
                )?,
                Delivery::Skipped => {
                    tx.execute(
                    "UPDATE outbox SET state = 'skipped', claim_until = NULL WHERE id = ?1 AND state = 'pending'",
                    [id],
                )?
                }
                Delivery::Failed { error, give_up } => tx.execute(
                    "UPDATE outbox SET attempts = attempts + 1, last_error = ?2, claim_until = NULL,
                        state = CASE WHEN ?3 THEN 'failed' ELSE state END WHERE id = ?1",
                    params![id, error, give_up],
                )?,
            };
            Ok(())
        })
    }
}

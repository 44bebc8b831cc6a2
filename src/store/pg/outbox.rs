//! The outbox on PostgreSQL: the event row written inside the caller's transaction,
//! and reading and marking pending events (see `store/outbox.rs`).

use super::conn::host_id;
use super::conn::{PgStore, Tx};
use crate::config::types::NotifyEvent;
use crate::records::{RunId, RunStatus};
use crate::store::durability::{Durability, now_ms};
use crate::store::error::Result;
use crate::store::lease::process_alive;
use crate::store::outbox::{CLAIM_MS, Delivery, Notice, ends_run, new_id};
use tokio_postgres::Row;

/// Writes an event row inside the caller's transaction.
pub(super) fn record(
    tx: &mut Tx<'_>,
    event: NotifyEvent,
    run: &RunId,
    escalation: Option<i64>,
    kind: &str,
    summary: &str,
) -> Result<()> {
    tx.exec(
        "INSERT INTO outbox (id, event, run_id, escalation_id, kind, summary, created_at, state, attempts)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', 0)",
        &[&new_id(), &event.as_str(), &run.0, &escalation, &kind, &summary, &now_ms()],
    )?;
    crate::fault::point("notify_before_commit");
    Ok(())
}

/// [`record`] of `run_ended` when `status` ends the run.
pub(super) fn record_if_ended(
    tx: &mut Tx<'_>,
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

fn notice(r: &Row) -> Notice {
    let event: String = r.get(1);
    let attempts: i32 = r.get(8);
    Notice {
        id: r.get(0),
        event: NotifyEvent::parse(&event).unwrap_or(NotifyEvent::RunEnded),
        run_id: RunId(r.get(2)),
        escalation_id: r.get(3),
        kind: r.get(4),
        summary: r.get(5),
        created_at: r.get(6),
        state: r.get(7),
        attempts: attempts.max(0) as u32,
        last_error: r.get(9),
    }
}

impl PgStore {
    pub fn pending_notices(&self, limit: u32) -> Result<Vec<Notice>> {
        self.pending(None, limit)
    }

    pub fn pending_notices_of(&self, run: &RunId, limit: u32) -> Result<Vec<Notice>> {
        self.pending(Some(run), limit)
    }

    fn pending(&self, run: Option<&RunId>, limit: u32) -> Result<Vec<Notice>> {
        let (run, limit) = (run.map(|r| r.0.clone()), i64::from(limit));
        let rows = self.read(move |r| {
            r.query(
                "SELECT id, event, run_id, escalation_id, kind, summary, created_at, state, attempts,
                    last_error FROM outbox WHERE state = 'pending' AND ($1::text IS NULL OR run_id = $1)
                    ORDER BY seq LIMIT $2",
                &[&run, &limit],
            )
        })?;
        Ok(rows.iter().map(notice).collect())
    }

    pub fn list_notices(&self, all: bool) -> Result<Vec<Notice>> {
        let rows = self.read(move |r| {
            r.query(
                "SELECT id, event, run_id, escalation_id, kind, summary, created_at, state, attempts,
                    last_error FROM outbox WHERE $1 OR state = 'failed' OR last_error IS NOT NULL
                 ORDER BY seq DESC",
                &[&all],
            )
        })?;
        Ok(rows.iter().map(notice).collect())
    }

    /// Claims event `id` for this process (see `SqliteStore::claim_notice`); a claim
    /// from another machine stands until it expires.
    pub fn claim_notice(&self, id: &str) -> Result<bool> {
        let id = id.to_string();
        let (now, me, host) = (now_ms(), i64::from(std::process::id()), host_id());
        self.write(move |tx| {
            let Some(row) = tx.opt(
                "SELECT claim_pid, claim_host, claim_until FROM outbox
                 WHERE id = $1 AND state = 'pending' FOR UPDATE",
                &[&id],
            )?
            else {
                return Ok(false);
            };
            let (pid, at, until): (Option<i64>, Option<String>, Option<i64>) =
                (row.get(0), row.get(1), row.get(2));
            let dead_here = at.as_deref() == Some(host.as_str()) && !pid.is_some_and(process_alive);
            if until.is_some_and(|u| u > now) && !dead_here {
                return Ok(false);
            }
            tx.exec(
                "UPDATE outbox SET claim_pid = $2, claim_host = $3, claim_until = $4 WHERE id = $1",
                &[&id, &me, &host, &(now + CLAIM_MS)],
            )?;
            Ok(true)
        })
    }

    /// See `SqliteStore::skip_notices_of`.
    /// Marks every pending notice of `run` skipped (a run without `[notify]` ended);
    /// from the task driving it, which goes on meanwhile (see `PgStore::call_async`).
    pub async fn skip_notices_of(&self, run: &RunId) -> Result<()> {
        let run = run.clone();
        self.write_as_async(Durability::PowerCut, move |tx| {
            tx.exec(
                "UPDATE outbox SET state = 'skipped', claim_until = NULL
                 WHERE run_id = $1 AND state = 'pending'",
                &[&run.0],
            )?;
            Ok(())
        })
        .await
    }

    pub fn mark_notice(&self, id: &str, how: &Delivery) -> Result<()> {
        let (id, how) = (id.to_string(), how.clone());
        self.write(move |tx| {
            match &how {
                Delivery::Delivered => tx.exec(
                    "UPDATE outbox SET state = 'delivered', claim_until = NULL, attempts = attempts + 1,
                        delivered_at = $2 WHERE id = $1",
                    &[&id, &now_ms()],
                )?,
                Delivery::Skipped => {
                    tx.exec(
                    "UPDATE outbox SET state = 'skipped', claim_until = NULL WHERE id = $1 AND state = 'pending'",
                    &[&id],
                )?
                }
                Delivery::Failed { error, give_up } => tx.exec(
                    "UPDATE outbox SET attempts = attempts + 1, last_error = $2, claim_until = NULL,
                        state = CASE WHEN $3 THEN 'failed' ELSE state END WHERE id = $1",
                    &[&id, error, give_up],
                )?,
            };
            Ok(())
        })
    }
}

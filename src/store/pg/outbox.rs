//! The outbox on PostgreSQL: the event row written inside the caller's transaction,
//! and reading and marking pending events (see `store/outbox.rs`).

use super::conn::{PgStore, Tx};
use crate::config::types::NotifyEvent;
use crate::records::{RunId, RunStatus};
use crate::store::durability::now_ms;
use crate::store::error::Result;
use crate::store::outbox::{Delivery, Notice, ends_run, new_id};
use postgres::Row;

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
        let limit = i64::from(limit);
        let rows = self.read(move |r| {
            r.query(
                "SELECT id, event, run_id, escalation_id, kind, summary, created_at, state, attempts,
                    last_error FROM outbox WHERE state = 'pending' ORDER BY seq LIMIT $1",
                &[&limit],
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

    pub fn mark_notice(&self, id: &str, how: &Delivery) -> Result<()> {
        let (id, how) = (id.to_string(), how.clone());
        self.write(move |tx| {
            match &how {
                Delivery::Delivered => tx.exec(
                    "UPDATE outbox SET state = 'delivered', attempts = attempts + 1,
                        delivered_at = $2 WHERE id = $1",
                    &[&id, &now_ms()],
                )?,
                Delivery::Skipped => {
                    tx.exec("UPDATE outbox SET state = 'skipped' WHERE id = $1", &[&id])?
                }
                Delivery::Failed { error, give_up } => tx.exec(
                    "UPDATE outbox SET attempts = attempts + 1, last_error = $2,
                        state = CASE WHEN $3 THEN 'failed' ELSE state END WHERE id = $1",
                    &[&id, error, give_up],
                )?,
            };
            Ok(())
        })
    }
}

//! `runs send` in the store (issue 21): a person's message for a run, stored at once
//! and delivered exactly once at a step boundary.
//!
//! Sending only inserts a row; any process may do it, whoever holds the run. The
//! holder reads the undelivered rows when it begins a step (before the model is asked,
//! after the previous step's tool results were committed) and delivers them in one
//! transaction: each row is marked with the transcript message it became, and the
//! message is appended, so a crash either before or after that commit leaves the
//! message delivered exactly once — later, or already.

use super::conn::SqliteStore;
use super::write::{check_lease, insert_messages};
use crate::model::Message;
use crate::records::{Delivery, RunId, SentMessage};
use crate::store::durability::now_ms;
use crate::store::error::{Result, StoreError};
use crate::store::fork::check_accepts;
use crate::store::lease::Lease;
use crate::store::plan::encode_messages;
use rusqlite::{Connection, OptionalExtension, params};

const SENT_COLUMNS: &str =
    "id, run_id, text, sent_by, sent_at, delivered_step, delivered_seq FROM sent_messages";

impl SqliteStore {
    /// Stores a person's message for `run`; refused (exit 2) for a finished run.
    pub fn send_message(&self, run: &RunId, text: &str, by: &str) -> Result<SentMessage> {
        let at = now_ms();
        let id = self.write(|tx| {
            let status: String = tx
                .query_row("SELECT status FROM runs WHERE id = ?1", [&run.0], |r| {
                    r.get(0)
                })
                .optional()?
                .ok_or_else(|| StoreError::RunNotFound(run.0.clone()))?;
            check_accepts(run, &status)?;
            tx.execute(
                "INSERT INTO sent_messages (run_id, text, sent_by, sent_at) VALUES (?1, ?2, ?3, ?4)",
                params![run.0, text, by, at],
            )?;
            let id = tx.last_insert_rowid();
            crate::fault::point("inside_send");
            Ok(id)
        })?;
        Ok(SentMessage {
            id,
            run: run.clone(),
            text: text.to_string(),
            by: by.to_string(),
            at,
            delivered: None,
        })
    }

    /// Every message sent to `run`, oldest first.
    pub fn sent_messages(&self, run: &RunId) -> Result<Vec<SentMessage>> {
        self.sent_where(run, "")
    }

    /// The messages sent to `run` and not yet delivered, oldest first: what the holder
    /// reads as it begins a step.
    pub fn undelivered_messages(&self, run: &RunId) -> Result<Vec<SentMessage>> {
        self.sent_where(run, UNDELIVERED)
    }

    /// [`SqliteStore::undelivered_messages`] from async code: the driver's read at
    /// each step boundary, queued for the committer thread (`group.rs`).
    pub(crate) async fn messages_to_deliver(&self, run: &RunId) -> Result<Vec<SentMessage>> {
        let run = run.clone();
        self.read_queued(move |conn| sent_where(conn, &run, UNDELIVERED))
            .await
    }

    fn sent_where(&self, run: &RunId, filter: &str) -> Result<Vec<SentMessage>> {
        let conn = self.lock()?;
        sent_where(&conn, run, filter)
    }

    /// Delivers sent messages after `step` (the last committed one): each becomes the
    /// transcript message given with it, and is marked delivered, in one transaction.
    /// A message already delivered is skipped.
    pub fn deliver_messages(
        &self,
        lease: &Lease,
        step: u32,
        messages: &[(i64, Message)],
    ) -> Result<()> {
        self.write(|tx| {
            check_lease(tx, lease)?;
            let mut last: i64 = tx
                .prepare_cached("SELECT last_seq FROM checkpoints WHERE run_id = ?1")?
                .query_row([&lease.run.0], |r| r.get(0))?;
            for (id, message) in messages {
                let marked = tx.execute(
                    "UPDATE sent_messages SET delivered_step = ?3, delivered_seq = ?4
                     WHERE id = ?1 AND run_id = ?2 AND delivered_seq IS NULL",
                    params![id, lease.run.0, step, last + 1],
                )?;
                if marked == 1 {
                    let encoded = encode_messages(&lease.run, std::slice::from_ref(message))?;
                    insert_messages(tx, &lease.run, last + 1, i64::from(step), &encoded)?;
                    last += 1;
                }
            }
            tx.execute(
                "UPDATE checkpoints SET last_seq = ?2 WHERE run_id = ?1",
                params![lease.run.0, last],
            )?;
            tx.execute(
                "UPDATE step_states SET last_seq = ?3 WHERE run_id = ?1 AND step = ?2",
                params![lease.run.0, step, last],
            )?;
            crate::fault::point("inside_delivery");
            Ok(())
        })
    }
}

const UNDELIVERED: &str = " AND delivered_seq IS NULL";

fn sent_where(conn: &Connection, run: &RunId, filter: &str) -> Result<Vec<SentMessage>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {SENT_COLUMNS} WHERE run_id = ?1{filter} ORDER BY id"
    ))?;
    let rows = stmt.query_map([&run.0], |r| {
        let step: Option<u32> = r.get(5)?;
        let seq: Option<i64> = r.get(6)?;
        Ok(SentMessage {
            id: r.get(0)?,
            run: RunId(r.get(1)?),
            text: r.get(2)?,
            by: r.get(3)?,
            at: r.get(4)?,
            delivered: step.zip(seq).map(|(step, seq)| Delivery { step, seq }),
        })
    })?;
    Ok(rows.collect::<std::result::Result<_, _>>()?)
}

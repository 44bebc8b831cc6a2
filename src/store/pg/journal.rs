//! The transcript, the tool-call journal and the trace on PostgreSQL: the readers,
//! which page through a run so memory stays flat (the writes are plans,
//! `store/writes.rs`).

use super::conn::{PAGE, PgStore};
use super::rows::{corrupt, event_row, journal_row, message_row};
use crate::model::ModelResponse;
use crate::records::{JournalEntry, RunId, StoredEvent, StoredMessage};
use crate::store::error::{Result, StoreError};
use crate::store::rows::{event_columns, journal_columns, message_columns};

impl PgStore {
    pub fn model_turn(&self, run: &RunId, step: u32) -> Result<Option<ModelResponse>> {
        let id = run.clone();
        let text: Option<String> = self.read(move |r| {
            Ok(r.opt(
                "SELECT response FROM model_turns WHERE run_id = $1 AND step = $2",
                &[&id.0, &i64::from(step)],
            )?
            .map(|row| row.get(0)))
        })?;
        text.map(|t| serde_json::from_str(&t).map_err(|e| corrupt(run, e)))
            .transpose()
    }

    pub fn checkpoint(&self, run: &RunId) -> Result<(u32, String)> {
        let id = run.clone();
        self.read(move |r| {
            let row = r
                .opt(
                    "SELECT step, state FROM checkpoints WHERE run_id = $1",
                    &[&id.0],
                )?
                .ok_or_else(|| StoreError::RunNotFound(id.0.clone()))?;
            Ok((row.get::<_, i64>(0) as u32, row.get(1)))
        })
    }

    pub fn messages(&self, run: &RunId) -> Result<Vec<StoredMessage>> {
        let id = run.clone();
        let rows = self.read(move |r| {
            r.query(
                concat!(
                    "SELECT ",
                    message_columns!(),
                    " FROM messages WHERE run_id = $1 ORDER BY seq"
                ),
                &[&id.0],
            )
        })?;
        rows.iter().map(|row| message_row(run, row)).collect()
    }

    /// Hands the messages to `f` in order. Unlike SQLite's, this reads them all first
    /// (the rows come from the connection thread); `f` runs on the caller's thread.
    pub fn each_message<E: From<StoreError>>(
        &self,
        run: &RunId,
        mut f: impl FnMut(StoredMessage) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        // A page at a time, so `runs show` of a long run stays flat in memory.
        let mut after = i64::MIN;
        loop {
            let page = self.messages_after(run, after, PAGE)?;
            let Some(last) = page.last() else {
                return Ok(());
            };
            after = last.seq;
            for m in page {
                f(m)?;
            }
        }
    }

    pub fn messages_after(
        &self,
        run: &RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredMessage>> {
        let id = run.clone();
        let rows = self.read(move |r| {
            r.query(
                concat!(
                    "SELECT ",
                    message_columns!(),
                    " FROM messages
                 WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
                ),
                &[&id.0, &after, &i64::from(limit)],
            )
        })?;
        rows.iter().map(|row| message_row(run, row)).collect()
    }

    pub fn events_after(
        &self,
        run: &RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, StoredEvent)>> {
        let id = run.clone();
        let rows = self.read(move |r| {
            r.query(
                concat!(
                    "SELECT ",
                    event_columns!(),
                    ", id FROM events
                 WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3"
                ),
                &[&id.0, &after, &i64::from(limit)],
            )
        })?;
        rows.iter()
            .map(|row| Ok((row.get(3), event_row(run, row)?)))
            .collect()
    }

    pub fn opening_and_since(&self, run: &RunId, from: u32) -> Result<Vec<StoredMessage>> {
        let id = run.clone();
        let from = i64::from(from);
        let rows = self.read(move |r| {
            r.query(
                concat!(
                    "SELECT ",
                    message_columns!(),
                    " FROM messages
                 WHERE run_id = $1 AND (step = 0 OR step >= $2) ORDER BY seq"
                ),
                &[&id.0, &from],
            )
        })?;
        rows.iter().map(|row| message_row(run, row)).collect()
    }

    pub fn journal_between(&self, run: &RunId, first: u32, last: u32) -> Result<Vec<JournalEntry>> {
        self.journal_rows(run, i64::from(first), i64::from(last))
    }

    pub fn journal(&self, run: &RunId) -> Result<Vec<JournalEntry>> {
        self.journal_rows(run, 0, i64::MAX)
    }

    pub fn journal_for_step(&self, run: &RunId, step: u32) -> Result<Vec<JournalEntry>> {
        self.journal_rows(run, i64::from(step), i64::from(step))
    }

    fn journal_rows(&self, run: &RunId, from: i64, to: i64) -> Result<Vec<JournalEntry>> {
        let id = run.clone();
        let rows = self.read(move |r| {
            r.query(
                concat!("SELECT ", journal_columns!(), " FROM tool_calls WHERE run_id = $1 AND step BETWEEN $2 AND $3 ORDER BY step, idx"),
                &[&id.0, &from, &to],
            )
        })?;
        rows.iter().map(|row| journal_row(run, row)).collect()
    }

    pub fn each_journal_entry<E: From<StoreError>>(
        &self,
        run: &RunId,
        mut f: impl FnMut(JournalEntry) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        // Step ranges (the key is by step; a step holds at most a turn's calls).
        let id = run.clone();
        let last: Option<i64> = self
            .read(move |r| {
                r.opt(
                    "SELECT max(step) FROM tool_calls WHERE run_id = $1",
                    &[&id.0],
                )
            })?
            .and_then(|row| row.get(0));
        let mut first = 0;
        while first <= last.unwrap_or(-1) {
            let to = first.saturating_add(i64::from(PAGE) - 1);
            for e in self.journal_rows(run, first, to)? {
                f(e)?;
            }
            first = to.saturating_add(1);
        }
        Ok(())
    }

    pub fn events_of_step(&self, run: &RunId, step: u32) -> Result<Vec<StoredEvent>> {
        let id = run.clone();
        let step = i64::from(step);
        let rows = self.read(move |r| {
            r.query(
                concat!(
                    "SELECT ",
                    event_columns!(),
                    " FROM events WHERE run_id = $1 AND step = $2 ORDER BY id"
                ),
                &[&id.0, &step],
            )
        })?;
        rows.iter().map(|row| event_row(run, row)).collect()
    }

    pub fn events(&self, run: &RunId) -> Result<Vec<StoredEvent>> {
        let id = run.clone();
        let rows = self.read(move |r| {
            r.query(
                concat!(
                    "SELECT ",
                    event_columns!(),
                    " FROM events WHERE run_id = $1 ORDER BY id"
                ),
                &[&id.0],
            )
        })?;
        rows.iter().map(|row| event_row(run, row)).collect()
    }

    pub fn each_event<E: From<StoreError>>(
        &self,
        run: &RunId,
        mut f: impl FnMut(StoredEvent) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let mut after = i64::MIN;
        loop {
            let page = self.events_after(run, after, PAGE)?;
            let Some((last, _)) = page.last() else {
                return Ok(());
            };
            after = *last;
            for (_, e) in page {
                f(e)?;
            }
        }
    }
}

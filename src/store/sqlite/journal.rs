//! The transcript, the tool-call journal and the trace on SQLite: the readers (the
//! writes inside a step are plans, `store/writes.rs`, which says what each costs and
//! what a crash can cost).

use super::conn::SqliteStore;
use super::rows::{corrupt, db, event_row, journal_row, message_row};
use crate::model::ModelResponse;
use crate::records::{JournalEntry, RunId, StoredEvent, StoredMessage};
use crate::store::error::{Result, StoreError};
use crate::store::rows::{event_columns, journal_columns, message_columns};
use rusqlite::{OptionalExtension, params};

impl SqliteStore {
    /// The journaled model response for `step`, if the step was begun but not committed.
    pub fn model_turn(&self, run: &RunId, step: u32) -> Result<Option<ModelResponse>> {
        let conn = self.lock()?;
        // Asked before every step (a fresh step finds nothing): a cached statement.
        let text: Option<String> = conn
            .prepare_cached("SELECT response FROM model_turns WHERE run_id = ?1 AND step = ?2")?
            .query_row(params![run.0, step], |r| r.get(0))
            .optional()?;
        text.map(|t| serde_json::from_str(&t).map_err(|e| corrupt(run, e)))
            .transpose()
    }

    /// The last committed step and loop state JSON.
    pub fn checkpoint(&self, run: &RunId) -> Result<(u32, String)> {
        let conn = self.lock()?;
        conn.query_row(
            "SELECT step, state FROM checkpoints WHERE run_id = ?1",
            [&run.0],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
        .ok_or_else(|| StoreError::RunNotFound(run.0.clone()))
    }

    pub fn messages(&self, run: &RunId) -> Result<Vec<StoredMessage>> {
        let mut out = Vec::new();
        self.each_message(run, |m| {
            out.push(m);
            Ok::<_, StoreError>(())
        })?;
        Ok(out)
    }

    /// Hands the run's messages to `f` one at a time, in order, as they are read:
    /// memory stays that of one message however long the run, and the first one
    /// arrives after one index lookup (for streaming `runs show`, issue 14). The
    /// connection is held until the last, so `f` must not use this store.
    pub fn each_message<E: From<StoreError>>(
        &self,
        run: &RunId,
        mut f: impl FnMut(StoredMessage) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let conn = self.lock()?;
        let mut stmt = db(conn.prepare_cached(concat!(
            "SELECT ",
            message_columns!(),
            " FROM messages WHERE run_id = ?1 ORDER BY seq"
        )))?;
        let mut rows = db(stmt.query([&run.0]))?;
        while let Some(r) = db(rows.next())? {
            f(message_row(run, r)?)?;
        }
        Ok(())
    }

    /// The run's opening (step 0: the system prompt and the task) and its messages of
    /// steps `from` on, in order, without reading the steps between: two walks of the
    /// primary key, one from each end, so a resume that keeps only its last steps reads
    /// the same few rows however long the run (issue 14).
    pub fn opening_and_since(&self, run: &RunId, from: u32) -> Result<Vec<StoredMessage>> {
        let conn = self.lock()?;
        let mut out = Vec::new();
        let mut head = conn.prepare_cached(concat!(
            "SELECT ",
            message_columns!(),
            " FROM messages WHERE run_id = ?1 ORDER BY seq"
        ))?;
        let mut rows = head.query([&run.0])?;
        while let Some(r) = rows.next()? {
            let m = message_row(run, r)?;
            if m.step != 0 {
                break;
            }
            out.push(m);
        }
        drop(rows);
        let opening = out.last().map_or(i64::MIN, |m| m.seq);
        let mut tail = conn.prepare_cached(concat!(
            "SELECT ",
            message_columns!(),
            " FROM messages
             WHERE run_id = ?1 AND seq > ?2 ORDER BY seq DESC"
        ))?;
        let mut rows = tail.query(params![run.0, opening])?;
        let mut since = Vec::new();
        while let Some(r) = rows.next()? {
            let m = message_row(run, r)?;
            if m.step < from {
                break;
            }
            since.push(m);
        }
        out.extend(since.into_iter().rev());
        Ok(out)
    }

    /// A page of the transcript: up to `limit` messages after seq `after`, in order
    /// (streaming human `runs show`, issue 14: one primary-key range per page).
    pub fn messages_after(
        &self,
        run: &RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredMessage>> {
        let conn = self.lock()?;
        let mut stmt = conn.prepare_cached(concat!(
            "SELECT ",
            message_columns!(),
            " FROM messages
             WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"
        ))?;
        let mut rows = stmt.query(params![run.0, after, limit])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(message_row(run, r)?);
        }
        Ok(out)
    }

    /// A page of the trace: up to `limit` events after event id `after`, in order,
    /// each with its id (the next page's `after`).
    pub fn events_after(
        &self,
        run: &RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, StoredEvent)>> {
        let conn = self.lock()?;
        let mut stmt = conn.prepare_cached(concat!(
            "SELECT ",
            event_columns!(),
            ", id FROM events
             WHERE run_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3"
        ))?;
        let mut rows = stmt.query(params![run.0, after, limit])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push((r.get(3)?, event_row(run, r)?));
        }
        Ok(out)
    }

    /// The journal rows of steps `first..=last`, in call order.
    pub fn journal_between(&self, run: &RunId, first: u32, last: u32) -> Result<Vec<JournalEntry>> {
        self.journal_rows(run, first..=last)
    }

    /// The tool-call journal of a run, in call order.
    pub fn journal(&self, run: &RunId) -> Result<Vec<JournalEntry>> {
        self.journal_rows(run, 0..=u32::MAX)
    }

    /// The journal rows of one step, which is all the loop needs on each step.
    ///
    /// Reading the whole journal there made step N read, sort and parse N rows: over a
    /// 3,000-step run a step went from 2.0 to 5.8 ms (issue 8, docs/bench.md). The
    /// primary key (run_id, step, call_id) makes this a range lookup.
    pub fn journal_for_step(&self, run: &RunId, step: u32) -> Result<Vec<JournalEntry>> {
        self.journal_rows(run, step..=step)
    }

    fn journal_rows(
        &self,
        run: &RunId,
        steps: std::ops::RangeInclusive<u32>,
    ) -> Result<Vec<JournalEntry>> {
        let mut out = Vec::new();
        self.each_journal_row(run, steps, |e| {
            out.push(e);
            Ok::<_, StoreError>(())
        })?;
        Ok(out)
    }

    /// Hands the run's journal to `f` one call at a time, in call order, as it is read
    /// (streaming `runs show`; see [`SqliteStore::each_message`]).
    pub fn each_journal_entry<E: From<StoreError>>(
        &self,
        run: &RunId,
        f: impl FnMut(JournalEntry) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        self.each_journal_row(run, 0..=u32::MAX, f)
    }

    fn each_journal_row<E: From<StoreError>>(
        &self,
        run: &RunId,
        steps: std::ops::RangeInclusive<u32>,
        mut f: impl FnMut(JournalEntry) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let conn = self.lock()?;
        let mut stmt = db(conn.prepare_cached(concat!(
            "SELECT ",
            journal_columns!(),
            " FROM tool_calls WHERE run_id = ?1 AND step BETWEEN ?2 AND ?3 ORDER BY step, idx"
        )))?;
        let mut rows = db(stmt.query(params![run.0, steps.start(), steps.end()]))?;
        while let Some(r) = db(rows.next())? {
            f(journal_row(run, r)?)?;
        }
        Ok(())
    }

    pub fn events(&self, run: &RunId) -> Result<Vec<StoredEvent>> {
        let mut out = Vec::new();
        self.each_event(run, |e| {
            out.push(e);
            Ok::<_, StoreError>(())
        })?;
        Ok(out)
    }

    /// Hands the run's trace to `f` one event at a time, in order, as it is read
    /// (streaming `runs show`; see [`SqliteStore::each_message`]).
    pub fn each_event<E: From<StoreError>>(
        &self,
        run: &RunId,
        mut f: impl FnMut(StoredEvent) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let conn = self.lock()?;
        let mut stmt = db(conn.prepare_cached(concat!(
            "SELECT ",
            event_columns!(),
            " FROM events WHERE run_id = ?1 ORDER BY id"
        )))?;
        let mut rows = db(stmt.query([&run.0]))?;
        while let Some(r) = db(rows.next())? {
            f(event_row(run, r)?)?;
        }
        Ok(())
    }
}

impl SqliteStore {
    /// The trace events stored under one step, in order: where a resumed run finds the
    /// hooks' decisions for the step's calls (issue 26).
    pub fn events_of_step(&self, run: &RunId, step: u32) -> Result<Vec<StoredEvent>> {
        let conn = self.lock()?;
        let mut stmt = conn.prepare_cached(concat!(
            "SELECT ",
            event_columns!(),
            " FROM events WHERE run_id = ?1 AND step = ?2 ORDER BY id"
        ))?;
        let mut rows = stmt.query(params![run.0, step])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(event_row(run, r)?);
        }
        Ok(out)
    }
}

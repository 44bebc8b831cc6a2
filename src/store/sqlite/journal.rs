//! The transcript and the journal inside a step.
//!
//! A step is written in at most a few transactions:
//! 1. the model's response, as soon as it arrives, with one journal row per tool call
//!    (`pending`) — a finished model call is never paid for twice;
//! 2. before a non-idempotent call runs, its row is marked started (after a crash, a
//!    started call without an outcome may have had its effect, so it is never re-run;
//!    an idempotent call needs no mark: it may simply run again);
//! 3. each call's outcome as it finishes — except an idempotent last call's, which
//!    rides in (a lost commit just runs that call again)
//! 4. the step commit: the step's messages, the loop state and the run's counters.
//!
//! **What each write costs, and what a power cut can cost (issue 14).** Only (2) and
//! (4) are fsynced ([`Durability::PowerCut`]); (1) and (3) are
//! [`Durability::Process`]: they survive a killed process at once, and a power cut
//! as soon as the next fsynced commit returns (see the module doc of `store`). So a
//! step with idempotent calls costs one fsync (the step commit), a step with
//! non-idempotent calls one more per such call (its started mark, which also makes
//! the response journaled before it durable), and a final-answer step one.
//!
//! A killed process loses nothing that was committed. A power cut (or an OS crash)
//! rolls the database back to its last fsynced commit, which can cost, for the one
//! step that was in flight:
//! - its model turn, asked again (and paid again) on resume — at most one turn;
//! - its idempotent calls' outcomes: they run again, with the same
//!   `AGENTRUN_CALL_ID` (what `idempotent = true` allows);
//! - the outcome of a non-idempotent call that finished after its started mark: the
//!   mark is durable (fsynced before the call ran), so the call is *not* run again;
//!   it is handled as `outcome_unknown` (escalated, or told to the model), exactly as
//!   after a crash while it ran;
//! - its trace events.
//!
//! It never costs a committed step, and never repeats a non-idempotent call.

use crate::store::rows::{event_columns, journal_columns, message_columns};
use super::conn::SqliteStore;
use super::rows::{corrupt, db, event_row, journal_row, message_row};
use super::write::{
    check_lease, holds_lease, insert_escalation, insert_events, insert_messages, keep_step_state,
    update_call,
};
use crate::model::{Message, ModelResponse};
use crate::records::{
    CallRecord, EscalationId, JournalEntry, RunId, RunStatus, StoredEvent, StoredMessage,
};
use crate::store::durability::{Durability, now_ms};
use crate::store::error::{Result, StoreError};
use crate::store::input::StepCommit;
use crate::store::lease::Lease;
use crate::trace::TraceEvent;
use rusqlite::{OptionalExtension, params};

impl SqliteStore {
    /// Journals a model response for `step` with its tool calls as pending rows.
    /// Not fsynced ([`Durability::Process`]): the step commit, or an earlier started
    /// mark, makes it durable against a power cut.
    pub fn record_model_turn(
        &self,
        lease: &Lease,
        step: u32,
        response: &ModelResponse,
        events: &[TraceEvent],
    ) -> Result<()> {
        let json = serde_json::to_string(response).map_err(|e| corrupt(&lease.run, e))?;
        self.write_as(Durability::Process, |tx| {
            // Fenced like every write, but the heartbeat is left to the step commit
            // that follows (and the heartbeat task): not rewriting the run's row here
            // saves a page in this transaction (issue 14).
            holds_lease(tx, lease)?;
            tx.prepare_cached(
                "INSERT OR REPLACE INTO model_turns (run_id, step, response) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![lease.run.0, step, json])?;
            let mut insert = tx.prepare_cached(
                "INSERT OR IGNORE INTO tool_calls (run_id, call_id, step, idx, tool, args, status)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending')",
            )?;
            for (i, call) in response.message.tool_calls().iter().enumerate() {
                insert.execute(params![
                    lease.run.0,
                    call.id,
                    step,
                    i as i64,
                    call.name,
                    call.args.to_string(),
                ])?;
            }
            insert_events(tx, &lease.run, step, events)
        })
    }

    /// The journaled model response for `step`, if the step was begun but not committed.
    pub fn model_turn(&self, run: &RunId, step: u32) -> Result<Option<ModelResponse>> {
        let conn = self.lock();
        // Asked before every step (a fresh step finds nothing): a cached statement.
        let text: Option<String> = conn
            .prepare_cached("SELECT response FROM model_turns WHERE run_id = ?1 AND step = ?2")?
            .query_row(params![run.0, step], |r| r.get(0))
            .optional()?;
        text.map(|t| serde_json::from_str(&t).map_err(|e| corrupt(run, e)))
            .transpose()
    }

    /// Marks a call as begun, durably ([`Durability::PowerCut`]): it returns only once
    /// the mark (and everything journaled before it) survives a power cut, so a call
    /// that may have had its effect is never taken for one that did not run.
    pub fn mark_started(&self, lease: &Lease, step: u32, call_id: &str) -> Result<()> {
        self.write(|tx| {
            check_lease(tx, lease)?;
            tx.prepare_cached(
                "UPDATE tool_calls SET started = 1 WHERE run_id = ?1 AND step = ?2 AND call_id = ?3",
            )?
            .execute(params![lease.run.0, step, call_id])?;
            Ok(())
        })
    }

    pub fn record_outcome(
        &self,
        lease: &Lease,
        step: u32,
        record: &CallRecord,
        events: &[TraceEvent],
    ) -> Result<()> {
        // Not fsynced: lost only to a power cut, after which an idempotent call runs
        // again and a non-idempotent one (its started mark durable) is outcome_unknown.
        self.write_as(Durability::Process, |tx| {
            check_lease(tx, lease)?;
            update_call(tx, &lease.run, step, record)?;
            insert_events(tx, &lease.run, step, events)
        })
    }

    /// Commits a finished step: its messages, the loop state and the run's counters,
    /// and the escalation it raised (whose id is returned).
    pub fn commit_step(&self, lease: &Lease, c: &StepCommit<'_>) -> Result<Option<EscalationId>> {
        self.write(|tx| {
            // The run's counters, with the lease check and heartbeat of `check_lease`
            // in the same statement (issue 14: one statement fewer a step). First, so a
            // lost lease is what a fenced-off writer hears.
            let now = now_ms();
            let n = tx
                .prepare_cached(
                    "UPDATE runs SET steps = ?2, input_tokens = ?3, output_tokens = ?4, status = ?5,
                        answer = ?6, error = ?7, updated_at = ?8, lease_heartbeat = ?8,
                        cost_usd = ?10
                     WHERE id = ?1 AND lease_token = ?9",
                )?
                .execute(params![
                    lease.run.0,
                    c.step,
                    c.input_tokens as i64,
                    c.output_tokens as i64,
                    c.status.as_str(),
                    c.answer,
                    c.error,
                    now,
                    lease.token,
                    c.cost_usd
                ])?;
            if n == 0 {
                return Err(StoreError::LeaseLost(lease.run.clone()));
            }
            super::outbox::record_if_ended(tx, &lease.run, c.status, c.answer.or(c.error))?;
            if let Some(record) = c.outcome {
                update_call(tx, &lease.run, c.step, record)?;
            }
            // (`UPDATE … RETURNING last_seq` instead of the SELECT costs more: SQLite
            // buffers RETURNING rows in a temporary table.)
            let last: i64 = tx
                .prepare_cached("SELECT last_seq FROM checkpoints WHERE run_id = ?1")?
                .query_row([&lease.run.0], |r| r.get(0))?;
            insert_messages(tx, &lease.run, last + 1, c.step, c.messages)?;
            tx.prepare_cached(
                "UPDATE checkpoints SET step = ?2, last_seq = ?3, state = ?4 WHERE run_id = ?1",
            )?
            .execute(params![
                lease.run.0,
                c.step,
                last + c.messages.len() as i64,
                c.state
            ])?;
            let now_last = last + c.messages.len() as i64;
            keep_step_state(tx, &lease.run, c.step, now_last, c.state)?;
            // The response is now part of the transcript; its journal copy is spent.
            tx.prepare_cached("DELETE FROM model_turns WHERE run_id = ?1 AND step = ?2")?
                .execute(params![lease.run.0, c.step])?;
            insert_events(tx, &lease.run, c.step, c.events)?;
            let escalation = match c.escalation {
                Some(e) => Some(insert_escalation(tx, &lease.run, e)?),
                None => None,
            };
            crate::fault::point("inside_commit");
            Ok(escalation)
        })
    }

    /// Appends messages between steps (a person's reply carried into the transcript)
    /// with the new loop state, and marks the escalation that caused it as applied.
    pub fn apply_resolution(
        &self,
        lease: &Lease,
        escalation: i64,
        step: u32,
        messages: &[Message],
        state: &str,
        status: Option<(RunStatus, &str)>,
    ) -> Result<()> {
        self.write(|tx| {
            check_lease(tx, lease)?;
            let last: i64 = tx
                .prepare_cached("SELECT last_seq FROM checkpoints WHERE run_id = ?1")?
                .query_row([&lease.run.0], |r| r.get(0))?;
            insert_messages(tx, &lease.run, last + 1, step, messages)?;
            tx.prepare_cached(
                "UPDATE checkpoints SET last_seq = ?2, state = ?3 WHERE run_id = ?1",
            )?
            .execute(params![lease.run.0, last + messages.len() as i64, state])?;
            keep_step_state(tx, &lease.run, step, last + messages.len() as i64, state)?;
            if let Some((status, reason)) = status {
                tx.prepare_cached(
                    "UPDATE runs SET status = ?2, error = ?3, updated_at = ?4 WHERE id = ?1",
                )?
                .execute(params![
                    lease.run.0,
                    status.as_str(),
                    reason,
                    now_ms()
                ])?;
                super::outbox::record_if_ended(tx, &lease.run, status, Some(reason))?;
            }
            tx.prepare_cached("UPDATE escalations SET applied = 1 WHERE id = ?1")?
                .execute([escalation])?;
            Ok(())
        })
    }

    /// Appends trace events outside a step commit (e.g. while pausing).
    pub fn record_events(&self, lease: &Lease, step: u32, events: &[TraceEvent]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        self.write(|tx| {
            check_lease(tx, lease)?;
            insert_events(tx, &lease.run, step, events)
        })
    }

    /// The last committed step and loop state JSON.
    pub fn checkpoint(&self, run: &RunId) -> Result<(u32, String)> {
        let conn = self.lock();
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
        let conn = self.lock();
        let mut stmt = db(conn.prepare_cached(
            concat!("SELECT ", message_columns!(), " FROM messages WHERE run_id = ?1 ORDER BY seq"),
        ))?;
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
        let conn = self.lock();
        let mut out = Vec::new();
        let mut head = conn.prepare_cached(
            concat!("SELECT ", message_columns!(), " FROM messages WHERE run_id = ?1 ORDER BY seq"),
        )?;
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
        let mut tail = conn.prepare_cached(
            concat!("SELECT ", message_columns!(), " FROM messages
             WHERE run_id = ?1 AND seq > ?2 ORDER BY seq DESC"),
        )?;
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
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            concat!("SELECT ", message_columns!(), " FROM messages
             WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"),
        )?;
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
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            concat!("SELECT ", event_columns!(), ", id FROM events
             WHERE run_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3"),
        )?;
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
        let conn = self.lock();
        let mut stmt = db(conn.prepare_cached(
            concat!("SELECT ", journal_columns!(), " FROM tool_calls WHERE run_id = ?1 AND step BETWEEN ?2 AND ?3 ORDER BY step, idx"),
        ))?;
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
        let conn = self.lock();
        let mut stmt = db(
            conn.prepare_cached(concat!("SELECT ", event_columns!(), " FROM events WHERE run_id = ?1 ORDER BY id"))
        )?;
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
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            concat!("SELECT ", event_columns!(), " FROM events WHERE run_id = ?1 AND step = ?2 ORDER BY id"),
        )?;
        let mut rows = stmt.query(params![run.0, step])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(event_row(run, r)?);
        }
        Ok(out)
    }
}

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

use super::runs::check_lease;
use super::{Durability, Lease, Result, RunId, RunStatus, SqliteStore, StoreError, now_ms};
use crate::model::{Message, ModelResponse, Role};
use crate::trace::TraceEvent;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

/// The journal's view of a call (DESIGN §1 `tool_calls[].status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    Ok,
    Error,
    Pending,
    Unknown,
}

impl CallStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Ok => "ok",
            CallStatus::Error => "error",
            CallStatus::Pending => "pending",
            CallStatus::Unknown => "unknown",
        }
    }

    pub(super) fn parse(s: &str) -> Option<CallStatus> {
        [
            CallStatus::Ok,
            CallStatus::Error,
            CallStatus::Pending,
            CallStatus::Unknown,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct JournalEntry {
    pub step: u32,
    pub idx: u32,
    pub call_id: String,
    pub tool: String,
    pub args: Value,
    pub status: CallStatus,
    /// The call may have begun (its side effect may have happened).
    pub started: bool,
    pub attempts: u32,
    /// What the model saw, once finished.
    pub result: Option<Value>,
    pub is_error: bool,
    pub via: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessage {
    pub seq: i64,
    pub step: u32,
    pub message: Message,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub step: u32,
    pub at: i64,
    pub event: TraceEvent,
}

/// A finished call, to be journaled.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    pub call_id: String,
    pub status: CallStatus,
    pub attempts: u32,
    pub result: Value,
    pub is_error: bool,
    pub via: Option<String>,
}

/// Everything a step commit writes, atomically.
pub struct StepCommit<'a> {
    pub step: u32,
    pub messages: &'a [Message],
    /// Loop state JSON after the step.
    pub state: &'a str,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub status: RunStatus,
    pub answer: Option<&'a str>,
    pub error: Option<&'a str>,
    /// The step's last call outcome, when it was not journaled on its own.
    pub outcome: Option<&'a CallRecord>,
    pub events: &'a [TraceEvent],
    /// An escalation raised by this step, queued in the same commit.
    pub escalation: Option<&'a super::NewEscalation<'a>>,
}

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
            check_lease(tx, lease)?;
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
    pub fn commit_step(
        &self,
        lease: &Lease,
        c: &StepCommit<'_>,
    ) -> Result<Option<super::EscalationId>> {
        self.write(|tx| {
            check_lease(tx, lease)?;
            if let Some(record) = c.outcome {
                update_call(tx, &lease.run, c.step, record)?;
            }
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
            tx.prepare_cached(
                "UPDATE runs SET steps = ?2, input_tokens = ?3, output_tokens = ?4, status = ?5,
                    answer = ?6, error = ?7, updated_at = ?8 WHERE id = ?1",
            )?
            .execute(params![
                lease.run.0,
                c.step,
                c.input_tokens as i64,
                c.output_tokens as i64,
                c.status.as_str(),
                c.answer,
                c.error,
                now_ms()
            ])?;
            // The response is now part of the transcript; its journal copy is spent.
            tx.prepare_cached("DELETE FROM model_turns WHERE run_id = ?1 AND step = ?2")?
                .execute(params![lease.run.0, c.step])?;
            insert_events(tx, &lease.run, c.step, c.events)?;
            let escalation = match c.escalation {
                Some(e) => Some(super::escalations::insert(tx, &lease.run, e)?),
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
            "SELECT seq, step, role, content FROM messages WHERE run_id = ?1 ORDER BY seq",
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
            "SELECT seq, step, role, content FROM messages WHERE run_id = ?1 ORDER BY seq",
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
            "SELECT seq, step, role, content FROM messages
             WHERE run_id = ?1 AND seq > ?2 ORDER BY seq DESC",
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
            "SELECT seq, step, role, content FROM messages
             WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
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
            "SELECT step, at, data, id FROM events
             WHERE run_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
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
            "SELECT step, idx, call_id, tool, args, status, started, attempts, result, is_error, via
             FROM tool_calls WHERE run_id = ?1 AND step BETWEEN ?2 AND ?3 ORDER BY step, idx",
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
            conn.prepare_cached("SELECT step, at, data FROM events WHERE run_id = ?1 ORDER BY id")
        )?;
        let mut rows = db(stmt.query([&run.0]))?;
        while let Some(r) = db(rows.next())? {
            f(event_row(run, r)?)?;
        }
        Ok(())
    }
}

pub(super) fn insert_messages(
    tx: &Connection,
    run: &RunId,
    first_seq: i64,
    step: u32,
    messages: &[Message],
) -> Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO messages (run_id, seq, step, role, content) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (i, m) in messages.iter().enumerate() {
        let content = serde_json::to_string(&m.content).map_err(|e| corrupt(run, e))?;
        stmt.execute(params![
            run.0,
            first_seq + i as i64,
            step,
            m.role.as_str(),
            content
        ])?;
    }
    Ok(())
}

fn update_call(tx: &Connection, run: &RunId, step: u32, r: &CallRecord) -> Result<()> {
    tx.prepare_cached(
        "UPDATE tool_calls SET status = ?3, started = 1, attempts = ?4, result = ?5, is_error = ?6, via = ?7
         WHERE run_id = ?1 AND call_id = ?2 AND step = ?8",
    )?
    .execute(params![
            run.0,
            r.call_id,
            r.status.as_str(),
            r.attempts,
            r.result.to_string(),
            r.is_error,
            r.via,
            step
        ])?;
    Ok(())
}

pub(super) fn insert_events(
    tx: &Connection,
    run: &RunId,
    step: u32,
    events: &[TraceEvent],
) -> Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO events (run_id, step, kind, data, at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let now = now_ms();
    for e in events {
        let data = serde_json::to_string(e).map_err(|err| corrupt(run, err))?;
        // An event that carries its own time was written later than it happened.
        stmt.execute(params![
            run.0,
            step,
            e.kind(),
            data,
            e.at_ms().unwrap_or(now)
        ])?;
    }
    Ok(())
}

/// An SQLite error as a store error, for the generic `each_*` readers.
fn db<T>(r: rusqlite::Result<T>) -> Result<T> {
    Ok(r?)
}

fn text<'r>(r: &'r rusqlite::Row<'_>, i: usize) -> Result<&'r str> {
    Ok(r.get_ref(i)?.as_str().map_err(rusqlite::Error::from)?)
}

fn message_row(run: &RunId, r: &rusqlite::Row<'_>) -> Result<StoredMessage> {
    let role: Role =
        serde_json::from_value(Value::String(text(r, 2)?.into())).map_err(|e| corrupt(run, e))?;
    let content = serde_json::from_str(text(r, 3)?).map_err(|e| corrupt(run, e))?;
    Ok(StoredMessage {
        seq: r.get(0)?,
        step: r.get(1)?,
        message: Message { role, content },
    })
}

fn journal_row(run: &RunId, r: &rusqlite::Row<'_>) -> Result<JournalEntry> {
    let status = text(r, 5)?;
    let result: Option<&str> = r
        .get_ref(8)?
        .as_str_or_null()
        .map_err(rusqlite::Error::from)?;
    Ok(JournalEntry {
        step: r.get(0)?,
        idx: r.get(1)?,
        call_id: r.get(2)?,
        tool: r.get(3)?,
        args: serde_json::from_str(text(r, 4)?).map_err(|e| corrupt(run, e))?,
        status: CallStatus::parse(status)
            .ok_or_else(|| corrupt(run, format!("unknown call status `{status}`")))?,
        started: r.get(6)?,
        attempts: r.get(7)?,
        result: result
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| corrupt(run, e))?,
        is_error: r.get(9)?,
        via: r.get(10)?,
    })
}

fn event_row(run: &RunId, r: &rusqlite::Row<'_>) -> Result<StoredEvent> {
    Ok(StoredEvent {
        step: r.get(0)?,
        at: r.get(1)?,
        event: serde_json::from_str(text(r, 2)?).map_err(|e| corrupt(run, e))?,
    })
}

fn corrupt(run: &RunId, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        run: run.0.clone(),
        message: e.to_string(),
    }
}

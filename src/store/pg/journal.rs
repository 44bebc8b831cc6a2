//! The transcript and the journal inside a step, on PostgreSQL: the same writes as
//! SQLite's (see its `journal` module doc for what each costs and what a crash can
//! cost), and readers that page through a run so memory stays flat.

use crate::store::rows::{event_columns, journal_columns, message_columns};
use super::conn::{PAGE, PgStore};
use super::rows::{corrupt, event_row, journal_row, message_row};
use super::write::{
    check_lease, encode_escalation, encode_events, encode_messages, insert_escalation,
    insert_events, insert_messages, keep_step_state, update_call,
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

impl PgStore {
    pub fn record_model_turn(
        &self,
        lease: &Lease,
        step: u32,
        response: &ModelResponse,
        events: &[TraceEvent],
    ) -> Result<()> {
        let json = serde_json::to_string(response).map_err(|e| corrupt(&lease.run, e))?;
        let calls: Vec<(String, String, String)> = response
            .message
            .tool_calls()
            .iter()
            .map(|c| (c.id.clone(), c.name.clone(), c.args.to_string()))
            .collect();
        let events = encode_events(&lease.run, events)?;
        let lease = lease.clone();
        let step = i64::from(step);
        self.write_as(Durability::Process, move |tx| {
            check_lease(tx, &lease)?;
            tx.exec(
                "INSERT INTO model_turns (run_id, step, response) VALUES ($1, $2, $3)
                 ON CONFLICT (run_id, step) DO UPDATE SET response = EXCLUDED.response",
                &[&lease.run.0, &step, &json],
            )?;
            for (i, (call_id, tool, args)) in calls.iter().enumerate() {
                tx.exec(
                    "INSERT INTO tool_calls (run_id, call_id, step, idx, tool, args, status)
                     VALUES ($1, $2, $3, $4, $5, $6, 'pending') ON CONFLICT DO NOTHING",
                    &[&lease.run.0, call_id, &step, &(i as i64), tool, args],
                )?;
            }
            insert_events(tx, &lease.run, step, &events)
        })
    }

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

    pub fn mark_started(&self, lease: &Lease, step: u32, call_id: &str) -> Result<()> {
        let lease = lease.clone();
        let call_id = call_id.to_string();
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            tx.exec(
                "UPDATE tool_calls SET started = true WHERE run_id = $1 AND step = $2 AND call_id = $3",
                &[&lease.run.0, &i64::from(step), &call_id],
            )?;
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
        let events = encode_events(&lease.run, events)?;
        let record = record.clone();
        let lease = lease.clone();
        self.write_as(Durability::Process, move |tx| {
            check_lease(tx, &lease)?;
            update_call(tx, &lease.run, i64::from(step), &record)?;
            insert_events(tx, &lease.run, i64::from(step), &events)
        })
    }

    pub fn commit_step(&self, lease: &Lease, c: &StepCommit<'_>) -> Result<Option<EscalationId>> {
        let lease = lease.clone();
        let step = i64::from(c.step);
        let messages = encode_messages(&lease.run, c.messages)?;
        let state = c.state.to_string();
        let (input, output) = (c.input_tokens as i64, c.output_tokens as i64);
        let run_status = c.status;
        let cost = c.cost_usd;
        let status = c.status.as_str();
        let answer = c.answer.map(str::to_string);
        let error = c.error.map(str::to_string);
        let outcome = c.outcome.cloned();
        let events = encode_events(&lease.run, c.events)?;
        let escalation = c.escalation.map(encode_escalation);
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            if let Some(record) = &outcome {
                update_call(tx, &lease.run, step, record)?;
            }
            let last: i64 = tx
                .one(
                    "SELECT last_seq FROM checkpoints WHERE run_id = $1",
                    &[&lease.run.0],
                )?
                .get(0);
            insert_messages(tx, &lease.run, last + 1, step, &messages)?;
            tx.exec(
                "UPDATE checkpoints SET step = $2, last_seq = $3, state = $4 WHERE run_id = $1",
                &[&lease.run.0, &step, &(last + messages.len() as i64), &state],
            )?;
            keep_step_state(tx, &lease.run, step, last + messages.len() as i64, &state)?;
            tx.exec(
                "UPDATE runs SET steps = $2, input_tokens = $3, output_tokens = $4, status = $5,
                    answer = $6, error = $7, updated_at = $8, cost_usd = $9 WHERE id = $1",
                &[
                    &lease.run.0,
                    &step,
                    &input,
                    &output,
                    &status,
                    &answer,
                    &error,
                    &now_ms(),
                    &cost,
                ],
            )?;
            let ended = answer.as_deref().or(error.as_deref());
            super::outbox::record_if_ended(tx, &lease.run, run_status, ended)?;
            tx.exec(
                "DELETE FROM model_turns WHERE run_id = $1 AND step = $2",
                &[&lease.run.0, &step],
            )?;
            insert_events(tx, &lease.run, step, &events)?;
            let escalation = match &escalation {
                Some(e) => Some(insert_escalation(tx, &lease.run, e)?),
                None => None,
            };
            crate::fault::point("inside_commit");
            Ok(escalation)
        })
    }

    pub fn apply_resolution(
        &self,
        lease: &Lease,
        escalation: i64,
        step: u32,
        messages: &[Message],
        state: &str,
        status: Option<(RunStatus, &str)>,
    ) -> Result<()> {
        let lease = lease.clone();
        let messages = encode_messages(&lease.run, messages)?;
        let state = state.to_string();
        let ended = status.map(|(s, r)| (s, r.to_string()));
        let status = status.map(|(s, r)| (s.as_str(), r.to_string()));
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            let last: i64 = tx
                .one(
                    "SELECT last_seq FROM checkpoints WHERE run_id = $1",
                    &[&lease.run.0],
                )?
                .get(0);
            insert_messages(tx, &lease.run, last + 1, i64::from(step), &messages)?;
            tx.exec(
                "UPDATE checkpoints SET last_seq = $2, state = $3 WHERE run_id = $1",
                &[&lease.run.0, &(last + messages.len() as i64), &state],
            )?;
            let now_last = last + messages.len() as i64;
            keep_step_state(tx, &lease.run, i64::from(step), now_last, &state)?;
            if let Some((status, reason)) = &status {
                tx.exec(
                    "UPDATE runs SET status = $2, error = $3, updated_at = $4 WHERE id = $1",
                    &[&lease.run.0, status, reason, &now_ms()],
                )?;
            }
            if let Some((st, reason)) = &ended {
                super::outbox::record_if_ended(tx, &lease.run, *st, Some(reason))?;
            }
            tx.exec(
                "UPDATE escalations SET applied = true WHERE id = $1",
                &[&escalation],
            )?;
            Ok(())
        })
    }

    pub fn record_events(&self, lease: &Lease, step: u32, events: &[TraceEvent]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let events = encode_events(&lease.run, events)?;
        let lease = lease.clone();
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            insert_events(tx, &lease.run, i64::from(step), &events)
        })
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
                concat!("SELECT ", message_columns!(), " FROM messages WHERE run_id = $1 ORDER BY seq"),
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
                concat!("SELECT ", message_columns!(), " FROM messages
                 WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"),
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
                concat!("SELECT ", event_columns!(), ", id FROM events
                 WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3"),
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
                concat!("SELECT ", message_columns!(), " FROM messages
                 WHERE run_id = $1 AND (step = 0 OR step >= $2) ORDER BY seq"),
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
                concat!("SELECT ", event_columns!(), " FROM events WHERE run_id = $1 AND step = $2 ORDER BY id"),
                &[&id.0, &step],
            )
        })?;
        rows.iter().map(|row| event_row(run, row)).collect()
    }

    pub fn events(&self, run: &RunId) -> Result<Vec<StoredEvent>> {
        let id = run.clone();
        let rows = self.read(move |r| {
            r.query(
                concat!("SELECT ", event_columns!(), " FROM events WHERE run_id = $1 ORDER BY id"),
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

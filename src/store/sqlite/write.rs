//! The writes every SQLite table shares, inside a caller's transaction: the lease
//! check (fencing), and the inserts of messages, scripts, trace events, call outcomes
//! and escalations. Below runs, queue, journal and escalations, which all use them.

use super::rows::corrupt;
use crate::model::Message;
use crate::records::{CallRecord, EscalationId, RunId};
use crate::store::durability::now_ms;
use crate::store::error::{Result, StoreError};
use crate::store::input::NewEscalation;
use crate::store::lease::Lease;
use crate::trace::TraceEvent;
use rusqlite::{Connection, params};
use std::collections::BTreeMap;

/// Fails with `LeaseLost` unless `lease` is still the run's current lease; refreshes
/// the heartbeat as a side effect (every write proves the holder is alive).
pub(super) fn check_lease(tx: &Connection, lease: &Lease) -> Result<()> {
    let n = tx
        .prepare_cached("UPDATE runs SET lease_heartbeat = ?3 WHERE id = ?1 AND lease_token = ?2")?
        .execute(params![lease.run.0, lease.token, now_ms()])?;
    if n == 0 {
        return Err(StoreError::LeaseLost(lease.run.clone()));
    }
    Ok(())
}
/// Fails with `LeaseLost` unless `lease` is still the run's current lease, without
/// refreshing the heartbeat (for a write a heartbeat-refreshing commit soon follows).
pub(super) fn holds_lease(tx: &Connection, lease: &Lease) -> Result<()> {
    let held = tx
        .prepare_cached("SELECT 1 FROM runs WHERE id = ?1 AND lease_token = ?2")?
        .exists(params![lease.run.0, lease.token])?;
    if !held {
        return Err(StoreError::LeaseLost(lease.run.clone()));
    }
    Ok(())
}
/// Stores a run's scripts beside its snapshot (migration 5).
pub(super) fn insert_scripts(
    tx: &Connection,
    run: &RunId,
    scripts: &BTreeMap<String, String>,
) -> Result<()> {
    for (spec, text) in scripts {
        tx.execute(
            "INSERT INTO run_scripts (run_id, spec, text) VALUES (?1, ?2, ?3)",
            params![run.0, spec, text],
        )?;
    }
    Ok(())
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
pub(super) fn update_call(tx: &Connection, run: &RunId, step: u32, r: &CallRecord) -> Result<()> {
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
pub(super) fn insert_escalation(
    tx: &Connection,
    run: &RunId,
    new: &NewEscalation<'_>,
) -> Result<EscalationId> {
    tx.execute(
        "INSERT INTO escalations (run_id, step, kind, status, summary, detail, created_at)
         VALUES (?1, ?2, ?3, 'open', ?4, ?5, ?6)",
        params![
            run.0,
            new.step,
            new.kind().as_str(),
            new.summary,
            new.detail.to_json().to_string(),
            now_ms()
        ],
    )?;
    let id = tx.last_insert_rowid();
    super::outbox::record(
        tx,
        crate::config::types::NotifyEvent::EscalationFiled,
        run,
        Some(id),
        new.kind().as_str(),
        new.summary,
    )?;
    Ok(EscalationId(id))
}

/// Keeps the loop state as of the end of `step` (and the transcript's length then),
/// beside the checkpoint, which holds only the last: what `runs fork --at-step`
/// copies (issue 21). Rewritten when notes are added between steps.
pub(super) fn keep_step_state(
    tx: &Connection,
    run: &RunId,
    step: u32,
    last_seq: i64,
    state: &str,
) -> Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO step_states (run_id, step, last_seq, state) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![run.0, step, last_seq, state])?;
    Ok(())
}

//! The writes every SQLite table shares, inside a caller's transaction: the lease
//! check (fencing), and the inserts of messages, scripts, trace events, call outcomes
//! and escalations. Below runs, queue, journal and escalations, which all use them.

use crate::records::{CallRecord, EscalationId, RunId};
use crate::store::durability::now_ms;
use crate::store::error::{Result, StoreError};
use crate::store::lease::Lease;
use crate::store::plan::{Encoded, EncodedEscalation, EncodedEvent};
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
    step: i64,
    messages: &[Encoded],
) -> Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO messages (run_id, seq, step, role, content) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (i, (role, content)) in messages.iter().enumerate() {
        stmt.execute(params![run.0, first_seq + i as i64, step, role, content])?;
    }
    Ok(())
}
pub(super) fn update_call(tx: &Connection, run: &RunId, step: i64, r: &CallRecord) -> Result<()> {
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
    step: i64,
    events: &[EncodedEvent],
) -> Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO events (run_id, step, kind, data, at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (kind, data, at) in events {
        stmt.execute(params![run.0, step, kind, data, at])?;
    }
    Ok(())
}
pub(super) fn insert_escalation(
    tx: &Connection,
    run: &RunId,
    e: &EncodedEscalation,
) -> Result<EscalationId> {
    tx.execute(
        "INSERT INTO escalations (run_id, step, kind, status, summary, detail, created_at)
         VALUES (?1, ?2, ?3, 'open', ?4, ?5, ?6)",
        params![run.0, e.step, e.kind, e.summary, e.detail, now_ms()],
    )?;
    let id = tx.last_insert_rowid();
    super::outbox::record(
        tx,
        crate::config::types::NotifyEvent::EscalationFiled,
        run,
        Some(id),
        e.kind,
        &e.summary,
    )?;
    Ok(EscalationId(id))
}

/// Keeps the loop state as of the end of `step` (and the transcript's length then),
/// beside the checkpoint, which holds only the last: what `runs fork --at-step`
/// copies (issue 21). Rewritten when notes are added between steps.
pub(super) fn keep_step_state(
    tx: &Connection,
    run: &RunId,
    step: i64,
    last_seq: i64,
    state: &str,
) -> Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO step_states (run_id, step, last_seq, state) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![run.0, step, last_seq, state])?;
    Ok(())
}

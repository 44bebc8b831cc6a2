//! The writes every PostgreSQL table shares, inside a caller's transaction on the
//! connection thread: the lease check (fencing), and the inserts of messages, scripts,
//! trace events, call outcomes and escalations, from the encodings of `store/plan.rs`.

use super::conn::Tx;
use crate::records::{CallRecord, EscalationId, RunId};
use crate::store::durability::now_ms;
use crate::store::error::{Result, StoreError};
use crate::store::lease::Lease;
use crate::store::plan::{Encoded, EncodedEscalation, EncodedEvent};
use std::collections::BTreeMap;

/// Fails with `LeaseLost` unless `lease` is still the run's current lease; refreshes
/// the heartbeat, and locks the run's row until the transaction ends.
pub(super) fn check_lease(tx: &mut Tx<'_>, lease: &Lease) -> Result<()> {
    let n = tx.exec(
        "UPDATE runs SET lease_heartbeat = $3 WHERE id = $1 AND lease_token = $2",
        &[&lease.run.0, &lease.token, &now_ms()],
    )?;
    if n == 0 {
        return Err(StoreError::LeaseLost(lease.run.clone()));
    }
    Ok(())
}
pub(super) fn insert_scripts(
    tx: &mut Tx<'_>,
    run: &RunId,
    scripts: &BTreeMap<String, String>,
) -> Result<()> {
    for (spec, text) in scripts {
        tx.exec(
            "INSERT INTO run_scripts (run_id, spec, text) VALUES ($1, $2, $3)",
            &[&run.0, spec, text],
        )?;
    }
    Ok(())
}
pub(super) fn insert_messages(
    tx: &mut Tx<'_>,
    run: &RunId,
    first_seq: i64,
    step: i64,
    messages: &[Encoded],
) -> Result<()> {
    for (i, (role, content)) in messages.iter().enumerate() {
        tx.exec(
            "INSERT INTO messages (run_id, seq, step, role, content) VALUES ($1, $2, $3, $4, $5)",
            &[&run.0, &(first_seq + i as i64), &step, role, content],
        )?;
    }
    Ok(())
}
pub(super) fn insert_events(
    tx: &mut Tx<'_>,
    run: &RunId,
    step: i64,
    events: &[EncodedEvent],
) -> Result<()> {
    for (kind, data, at) in events {
        tx.exec(
            "INSERT INTO events (run_id, step, kind, data, at) VALUES ($1, $2, $3, $4, $5)",
            &[&run.0, &step, kind, data, at],
        )?;
    }
    Ok(())
}
pub(super) fn update_call(tx: &mut Tx<'_>, run: &RunId, step: i64, r: &CallRecord) -> Result<()> {
    tx.exec(
        "UPDATE tool_calls SET status = $3, started = true, attempts = $4, result = $5,
            is_error = $6, via = $7 WHERE run_id = $1 AND call_id = $2 AND step = $8",
        &[
            &run.0,
            &r.call_id,
            &r.status.as_str(),
            &i64::from(r.attempts),
            &r.result.to_string(),
            &r.is_error,
            &r.via,
            &step,
        ],
    )?;
    Ok(())
}
pub(super) fn insert_escalation(
    tx: &mut Tx<'_>,
    run: &RunId,
    e: &EncodedEscalation,
) -> Result<EscalationId> {
    let row = tx.one(
        "INSERT INTO escalations (run_id, step, kind, status, summary, detail, created_at)
         VALUES ($1, $2, $3, 'open', $4, $5, $6) RETURNING id",
        &[&run.0, &e.step, &e.kind, &e.summary, &e.detail, &now_ms()],
    )?;
    let id: i64 = row.get(0);
    let event = crate::config::types::NotifyEvent::EscalationFiled;
    super::outbox::record(tx, event, run, Some(id), e.kind, &e.summary)?;
    Ok(EscalationId(id))
}

/// Keeps the loop state as of the end of `step` beside the checkpoint (as SQLite's
/// `keep_step_state`: what `runs fork --at-step` copies, issue 21).
pub(super) fn keep_step_state(
    tx: &mut Tx<'_>,
    run: &RunId,
    step: i64,
    last_seq: i64,
    state: &str,
) -> Result<()> {
    tx.exec(
        "INSERT INTO step_states (run_id, step, last_seq, state) VALUES ($1, $2, $3, $4)
         ON CONFLICT (run_id, step) DO UPDATE SET last_seq = EXCLUDED.last_seq, state = EXCLUDED.state",
        &[&run.0, &step, &last_seq, &state],
    )?;
    Ok(())
}

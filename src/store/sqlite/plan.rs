//! Runs a [`Plan`] on SQLite: each [`Write`] as SQLite's SQL, in the plan's order,
//! inside one `BEGIN IMMEDIATE` transaction.

use super::conn::SqliteStore;
use super::write::{
    check_lease, holds_lease, insert_escalation, insert_events, insert_messages, insert_scripts,
    keep_step_state, update_call,
};
use crate::records::{EscalationId, RunId};
use crate::store::durability::Durability;
use crate::store::error::{Result, StoreError};
use crate::store::lease::Lease;
use crate::store::plan::{Counters, NewRunRow, Plan, Write};
use rusqlite::{Connection, params};

impl SqliteStore {
    /// Runs `plan` in a transaction at `durability` — its own, or one shared with
    /// other threads' writes (group commit, `group.rs`); returns the escalation it
    /// queued.
    pub(crate) fn run_plan(
        &self,
        durability: Durability,
        plan: Plan,
    ) -> Result<Option<EscalationId>> {
        self.write_grouped(durability, move |tx| apply(tx, &plan))
    }

    /// [`SqliteStore::run_plan`] from async code: queued for the committer thread.
    pub(crate) async fn run_plan_queued(
        &self,
        durability: Durability,
        plan: Plan,
    ) -> Result<Option<EscalationId>> {
        self.write_queued(durability, move |tx| apply(tx, &plan))
            .await
    }
}

fn apply(tx: &Connection, plan: &Plan) -> Result<Option<EscalationId>> {
    let run = &plan.run;
    let mut escalation = None;
    for write in &plan.writes {
        match write {
            Write::NewRun(row) => new_run(tx, run, row)?,
            Write::Parent { link, key } => {
                tx.execute(
                    "UPDATE runs SET parent_run = ?2, parent_call = ?3, child_key = ?4 WHERE id = ?1",
                    params![run.0, link.run.0, link.call, key],
                )?;
            }
            Write::Snapshot { snapshot, scripts } => {
                tx.execute(
                    "INSERT INTO run_snapshots (run_id, snapshot) VALUES (?1, ?2)",
                    params![run.0, snapshot],
                )?;
                insert_scripts(tx, run, scripts)?;
            }
            Write::Opening { messages, state } => {
                insert_messages(tx, run, 0, 0, messages)?;
                let last = messages.len() as i64 - 1;
                tx.execute(
                    "INSERT INTO checkpoints (run_id, step, last_seq, state) VALUES (?1, 0, ?2, ?3)",
                    params![run.0, last, state],
                )?;
                keep_step_state(tx, run, 0, last, state)?;
            }
            Write::Fence(lease) => check_lease(tx, lease)?,
            Write::Holds(lease) => holds_lease(tx, lease)?,
            Write::Counters { lease, counters } => step_counters(tx, lease, counters)?,
            Write::Status { status, reason } => {
                tx.prepare_cached(
                    "UPDATE runs SET status = ?2, error = ?3, updated_at = ?4 WHERE id = ?1",
                )?
                .execute(params![
                    run.0,
                    status.as_str(),
                    reason,
                    crate::store::durability::now_ms()
                ])?;
            }
            Write::Pause { status } => {
                tx.execute(
                    "UPDATE runs SET status = ?2, updated_at = ?3 WHERE id = ?1",
                    params![run.0, status.as_str(), crate::store::durability::now_ms()],
                )?;
            }
            Write::Ended { status, text } => {
                super::outbox::record_if_ended(tx, run, *status, text.as_deref())?;
            }
            Write::ModelTurn {
                step,
                response,
                calls,
            } => {
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO model_turns (run_id, step, response) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![run.0, step, response])?;
                let mut insert = tx.prepare_cached(
                    "INSERT OR IGNORE INTO tool_calls (run_id, call_id, step, idx, tool, args, status)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending')",
                )?;
                for (i, (call_id, tool, args)) in calls.iter().enumerate() {
                    insert.execute(params![run.0, call_id, step, i as i64, tool, args])?;
                }
            }
            Write::Started { step, call_id } => {
                tx.prepare_cached(
                    "UPDATE tool_calls SET started = 1 WHERE run_id = ?1 AND step = ?2 AND call_id = ?3",
                )?
                .execute(params![run.0, step, call_id])?;
            }
            Write::Unstarted { step, call_id } => {
                tx.execute(
                    "UPDATE tool_calls SET started = 0 WHERE run_id = ?1 AND step = ?2 AND call_id = ?3",
                    params![run.0, step, call_id],
                )?;
            }
            Write::Outcome { step, record } => update_call(tx, run, *step, record)?,
            Write::Append {
                step,
                messages,
                state,
                advance,
            } => append(tx, run, *step, messages, state, *advance)?,
            Write::SpendTurn { step } => {
                tx.prepare_cached("DELETE FROM model_turns WHERE run_id = ?1 AND step = ?2")?
                    .execute(params![run.0, step])?;
            }
            Write::Events { step, events } => insert_events(tx, run, *step, events)?,
            Write::Escalation(e) => escalation = Some(insert_escalation(tx, run, e)?),
            Write::Applied(id) => {
                tx.prepare_cached("UPDATE escalations SET applied = 1 WHERE id = ?1")?
                    .execute([id])?;
            }
        }
    }
    if let Some(point) = plan.fault {
        crate::fault::point(point);
    }
    Ok(escalation)
}

fn new_run(tx: &Connection, run: &RunId, r: &NewRunRow) -> Result<()> {
    if r.queued {
        tx.execute(
            "INSERT INTO runs (id, task, task_path, status, max_steps, max_tokens,
                lease_token, queue, created_at, updated_at)
             VALUES (?1, ?2, ?3, 'queued', ?4, ?5, 0, 1, ?6, ?6)",
            params![run.0, r.task, r.task_path, r.max_steps, r.max_tokens, r.now],
        )?;
    } else {
        tx.execute(
            "INSERT INTO runs (id, task, task_path, status, max_steps, max_tokens,
                lease_pid, lease_token, lease_heartbeat, lease_since, created_at, updated_at)
             VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, 1, ?7, ?7, ?7, ?7)",
            params![
                run.0,
                r.task,
                r.task_path,
                r.max_steps,
                r.max_tokens,
                std::process::id() as i64,
                r.now
            ],
        )?;
    }
    Ok(())
}

/// The run's counters, with the lease check and heartbeat of `check_lease` in the
/// same statement (issue 14: one statement fewer a step).
fn step_counters(tx: &Connection, lease: &Lease, c: &Counters) -> Result<()> {
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
            c.input_tokens,
            c.output_tokens,
            c.status.as_str(),
            c.answer,
            c.error,
            c.now,
            lease.token,
            c.cost_usd
        ])?;
    if n == 0 {
        return Err(StoreError::LeaseLost(lease.run.clone()));
    }
    Ok(())
}

/// Messages after the transcript's last, the checkpoint (moved to `step` when
/// `advance`) and the step's kept state.
fn append(
    tx: &Connection,
    run: &RunId,
    step: i64,
    messages: &[crate::store::plan::Encoded],
    state: &str,
    advance: bool,
) -> Result<()> {
    // (`UPDATE … RETURNING last_seq` instead of the SELECT costs more: SQLite
    // buffers RETURNING rows in a temporary table.)
    let last: i64 = tx
        .prepare_cached("SELECT last_seq FROM checkpoints WHERE run_id = ?1")?
        .query_row([&run.0], |r| r.get(0))?;
    insert_messages(tx, run, last + 1, step, messages)?;
    let now_last = last + messages.len() as i64;
    if advance {
        tx.prepare_cached(
            "UPDATE checkpoints SET step = ?2, last_seq = ?3, state = ?4 WHERE run_id = ?1",
        )?
        .execute(params![run.0, step, now_last, state])?;
    } else {
        tx.prepare_cached("UPDATE checkpoints SET last_seq = ?2, state = ?3 WHERE run_id = ?1")?
            .execute(params![run.0, now_last, state])?;
    }
    keep_step_state(tx, run, step, now_last, state)
}

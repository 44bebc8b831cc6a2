//! Runs a [`Plan`] on PostgreSQL: each [`Write`] as PostgreSQL's SQL, in the plan's
//! order, inside one transaction on a pooled connection.

use super::conn::{PgStore, Tx};
use super::write::{
    check_lease, insert_escalation, insert_events, insert_messages, insert_scripts,
    keep_step_state, update_call,
};
use crate::records::{EscalationId, RunId};
use crate::store::durability::{Durability, now_ms};
use crate::store::error::{Result, StoreError};
use crate::store::lease::Lease;
use crate::store::plan::{Counters, Encoded, NewRunRow, Plan, Write};

impl PgStore {
    /// Runs `plan` in one transaction at `durability`; returns the escalation it queued.
    pub(crate) fn run_plan(
        &self,
        durability: Durability,
        plan: Plan,
    ) -> Result<Option<EscalationId>> {
        let host = self.host.clone();
        self.write_as(durability, move |tx| apply(tx, &plan, &host))
    }

    /// [`PgStore::run_plan`] for a driven run's own writes: the thread driving it goes
    /// on with its other runs while the transaction is on the server (see
    /// `PgStore::call_async`).
    pub(crate) async fn run_plan_async(
        &self,
        durability: Durability,
        plan: Plan,
    ) -> Result<Option<EscalationId>> {
        let host = self.host.clone();
        self.write_as_async(durability, move |tx| apply(tx, &plan, &host))
            .await
    }
}

fn apply(tx: &mut Tx<'_>, plan: &Plan, host: &str) -> Result<Option<EscalationId>> {
    let run = &plan.run;
    let mut escalation = None;
    for write in &plan.writes {
        match write {
            Write::NewRun(row) => new_run(tx, run, row, host)?,
            Write::Parent { link, key } => {
                tx.exec(
                    "UPDATE runs SET parent_run = $2, parent_call = $3, child_key = $4 WHERE id = $1",
                    &[&run.0, &link.run.0, &link.call, key],
                )?;
            }
            Write::Snapshot { snapshot, scripts } => {
                tx.exec(
                    "INSERT INTO run_snapshots (run_id, snapshot) VALUES ($1, $2)",
                    &[&run.0, snapshot],
                )?;
                insert_scripts(tx, run, scripts)?;
            }
            Write::Opening { messages, state } => {
                insert_messages(tx, run, 0, 0, messages)?;
                let last = messages.len() as i64 - 1;
                tx.exec(
                    "INSERT INTO checkpoints (run_id, step, last_seq, state) VALUES ($1, 0, $2, $3)",
                    &[&run.0, &last, state],
                )?;
                keep_step_state(tx, run, 0, last, state)?;
            }
            // Also locks the run's row until the transaction ends: PostgreSQL has no
            // lighter fence worth the difference.
            Write::Fence(lease) | Write::Holds(lease) => check_lease(tx, lease)?,
            Write::Counters { lease, counters } => step_counters(tx, lease, counters)?,
            Write::Status { status, reason } => {
                tx.exec(
                    "UPDATE runs SET status = $2, error = $3, updated_at = $4 WHERE id = $1",
                    &[&run.0, &status.as_str(), reason, &now_ms()],
                )?;
            }
            Write::Pause { status } => {
                tx.exec(
                    "UPDATE runs SET status = $2, updated_at = $3 WHERE id = $1",
                    &[&run.0, &status.as_str(), &now_ms()],
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
                tx.exec(
                    "INSERT INTO model_turns (run_id, step, response) VALUES ($1, $2, $3)
                     ON CONFLICT (run_id, step) DO UPDATE SET response = EXCLUDED.response",
                    &[&run.0, step, response],
                )?;
                for (i, (call_id, tool, args)) in calls.iter().enumerate() {
                    tx.exec(
                        "INSERT INTO tool_calls (run_id, call_id, step, idx, tool, args, status)
                         VALUES ($1, $2, $3, $4, $5, $6, 'pending') ON CONFLICT DO NOTHING",
                        &[&run.0, call_id, step, &(i as i64), tool, args],
                    )?;
                }
            }
            Write::Started { step, call_id } => {
                tx.exec(
                    "UPDATE tool_calls SET started = true WHERE run_id = $1 AND step = $2 AND call_id = $3",
                    &[&run.0, step, call_id],
                )?;
            }
            Write::Unstarted { step, call_id } => {
                tx.exec(
                    "UPDATE tool_calls SET started = false WHERE run_id = $1 AND step = $2 AND call_id = $3",
                    &[&run.0, step, call_id],
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
                tx.exec(
                    "DELETE FROM model_turns WHERE run_id = $1 AND step = $2",
                    &[&run.0, step],
                )?;
            }
            Write::Events { step, events } => insert_events(tx, run, *step, events)?,
            Write::Escalation(e) => escalation = Some(insert_escalation(tx, run, e)?),
            Write::Applied(id) => {
                tx.exec("UPDATE escalations SET applied = true WHERE id = $1", &[id])?;
            }
        }
    }
    if let Some(point) = plan.fault {
        crate::fault::point(point);
    }
    Ok(escalation)
}

fn new_run(tx: &mut Tx<'_>, run: &RunId, r: &NewRunRow, host: &str) -> Result<()> {
    if r.queued {
        tx.exec(
            "INSERT INTO runs (id, task, task_path, status, max_steps, max_tokens,
                lease_token, queue, created_at, updated_at)
             VALUES ($1, $2, $3, 'queued', $4, $5, 0, true, $6, $6)",
            &[
                &run.0,
                &r.task,
                &r.task_path,
                &r.max_steps,
                &r.max_tokens,
                &r.now,
            ],
        )?;
    } else {
        tx.exec(
            "INSERT INTO runs (id, task, task_path, status, max_steps, max_tokens,
                lease_pid, lease_host, lease_token, lease_heartbeat, lease_since, created_at, updated_at)
             VALUES ($1, $2, $3, 'running', $4, $5, $6, $7, 1, $8, $8, $8, $8)",
            &[
                &run.0,
                &r.task,
                &r.task_path,
                &r.max_steps,
                &r.max_tokens,
                &(std::process::id() as i64),
                &host,
                &r.now,
            ],
        )?;
    }
    Ok(())
}

/// The run's counters, fenced in the same statement (which also locks the row).
fn step_counters(tx: &mut Tx<'_>, lease: &Lease, c: &Counters) -> Result<()> {
    let n = tx.exec(
        "UPDATE runs SET steps = $2, input_tokens = $3, output_tokens = $4, status = $5,
            answer = $6, error = $7, updated_at = $8, lease_heartbeat = $8, cost_usd = $9
         WHERE id = $1 AND lease_token = $10",
        &[
            &lease.run.0,
            &c.step,
            &c.input_tokens,
            &c.output_tokens,
            &c.status.as_str(),
            &c.answer,
            &c.error,
            &c.now,
            &c.cost_usd,
            &lease.token,
        ],
    )?;
    if n == 0 {
        return Err(StoreError::LeaseLost(lease.run.clone()));
    }
    Ok(())
}

/// Messages after the transcript's last, the checkpoint (moved to `step` when
/// `advance`) and the step's kept state.
fn append(
    tx: &mut Tx<'_>,
    run: &RunId,
    step: i64,
    messages: &[Encoded],
    state: &str,
    advance: bool,
) -> Result<()> {
    let last: i64 = tx
        .one(
            "SELECT last_seq FROM checkpoints WHERE run_id = $1",
            &[&run.0],
        )?
        .get(0);
    insert_messages(tx, run, last + 1, step, messages)?;
    let now_last = last + messages.len() as i64;
    if advance {
        tx.exec(
            "UPDATE checkpoints SET step = $2, last_seq = $3, state = $4 WHERE run_id = $1",
            &[&run.0, &step, &now_last, &state],
        )?;
    } else {
        tx.exec(
            "UPDATE checkpoints SET last_seq = $2, state = $3 WHERE run_id = $1",
            &[&run.0, &now_last, &state],
        )?;
    }
    keep_step_state(tx, run, step, now_last, state)
}

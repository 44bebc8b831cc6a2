//! Cancelling a run on PostgreSQL: the same decisions as SQLite's (`store/cancel.rs`,
//! [`decide`]), in PostgreSQL's SQL. The run's row is locked (`FOR UPDATE`) for the
//! decision, so a claim or a holder's write waits for it.

use super::PgStore;
use super::conn::{Reader, Tx};
use crate::records::{RunId, RunStatus};
use crate::store::cancel::{CancelOutcome, CancelRequest, cancel_text, decide};
use crate::store::durability::now_ms;
use crate::store::lease::process_alive;
use crate::store::{Result, StoreError};

impl PgStore {
    pub fn cancel_run(&self, id: &RunId, by: &str, reason: Option<&str>) -> Result<CancelOutcome> {
        let (id, by, reason) = (id.clone(), by.to_string(), reason.map(str::to_string));
        let (now, ttl, host) = (now_ms(), self.lease_ttl_ms, self.host.clone());
        self.write(move |tx| {
            let row = tx
                .opt(
                    "SELECT status, lease_pid, lease_heartbeat, lease_host FROM runs
                     WHERE id = $1 FOR UPDATE",
                    &[&id.0],
                )?
                .ok_or_else(|| StoreError::RunNotFound(id.0.clone()))?;
            let status: String = row.get(0);
            let status = RunStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
                run: id.0.clone(),
                message: format!("unknown status `{status}`"),
            })?;
            let pid: Option<i64> = row.get(1);
            let heartbeat: Option<i64> = row.get(2);
            let holder_host: Option<String> = row.get(3);
            // Liveness is the heartbeat; a holder on this host whose pid is gone is dead.
            let local = holder_host.as_deref() == Some(host.as_str());
            let live = pid.is_some_and(|p| !local || process_alive(p))
                && heartbeat.is_some_and(|h| now - h < ttl);
            let outcome = decide(status, live);
            if matches!(outcome, CancelOutcome::Requested | CancelOutcome::Cancelled) {
                tx.exec(
                    "UPDATE runs SET cancel_requested_at = COALESCE(cancel_requested_at, $2),
                        cancel_by = COALESCE(cancel_by, $3),
                        cancel_reason = COALESCE(cancel_reason, $4) WHERE id = $1",
                    &[&id.0, &now, &by, &reason],
                )?;
            }
            if outcome == CancelOutcome::Cancelled {
                crate::fault::point("inside_cancel");
                let row = tx.one(
                    "SELECT cancel_by, cancel_reason FROM runs WHERE id = $1",
                    &[&id.0],
                )?;
                let text = cancel_text(row.get(0), row.get::<_, Option<&str>>(1));
                tx.exec(
                    "UPDATE runs SET status = 'cancelled', error = $2, updated_at = $3,
                        lease_pid = NULL, lease_worker = NULL, lease_token = lease_token + 1
                     WHERE id = $1",
                    &[&id.0, &text, &now],
                )?;
                close_escalations(tx, &id, now)?;
                super::outbox::record_if_ended(tx, &id, RunStatus::Cancelled, Some(&text))?;
            }
            Ok(outcome)
        })
    }

    pub fn cancel_request(&self, run: &RunId) -> Result<Option<CancelRequest>> {
        let run = run.clone();
        self.read(move |r| {
            request_row(
                r,
                "SELECT cancel_by, cancel_reason, cancel_requested_at FROM runs
                 WHERE id = $1 AND cancel_requested_at IS NOT NULL
                   AND status NOT IN ('cancelled', 'completed')",
                &run,
            )
        })
    }

    pub fn cancel_requests(&self, runs: &[RunId]) -> Result<Vec<(RunId, CancelRequest)>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = runs.iter().map(|r| r.0.clone()).collect();
        self.read(move |r| {
            let rows = r.query(
                "SELECT id, cancel_by, cancel_reason, cancel_requested_at FROM runs
                 WHERE id = ANY($1) AND cancel_requested_at IS NOT NULL
                   AND status NOT IN ('cancelled', 'completed')",
                &[&ids],
            )?;
            Ok(rows
                .into_iter()
                .map(|row| {
                    let request = CancelRequest {
                        by: row.get(1),
                        reason: row.get(2),
                        at: row.get(3),
                    };
                    (RunId(row.get(0)), request)
                })
                .collect())
        })
    }

    pub fn cancel_info(&self, run: &RunId) -> Result<Option<CancelRequest>> {
        let run = run.clone();
        self.read(move |r| {
            request_row(
                r,
                "SELECT cancel_by, cancel_reason, cancel_requested_at FROM runs
                 WHERE id = $1 AND cancel_requested_at IS NOT NULL",
                &run,
            )
        })
    }
}

fn request_row(
    r: &mut Reader<'_>,
    sql: &'static str,
    run: &RunId,
) -> Result<Option<CancelRequest>> {
    Ok(r.opt(sql, &[&run.0])?.map(|row| CancelRequest {
        by: row.get(0),
        reason: row.get(1),
        at: row.get(2),
    }))
}

/// See `store/cancel.rs`.
pub(super) fn close_escalations(tx: &mut Tx<'_>, id: &RunId, now: i64) -> Result<()> {
    tx.exec(
        "UPDATE escalations SET status = 'cancelled', resolved_at = $2,
            resolved_by = (SELECT COALESCE(cancel_by, 'agentrun') FROM runs WHERE id = $1)
         WHERE run_id = $1 AND status = 'open'",
        &[&id.0, &now],
    )?;
    Ok(())
}

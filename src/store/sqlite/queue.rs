//! The run queue on SQLite (issue 17): runs submitted for workers, claimed one at a
//! time under `BEGIN IMMEDIATE`, handed back when a worker stops or a person decides.

use super::conn::SqliteStore;
use crate::records::RunId;
use crate::store::durability::{Durability, now_ms};
use crate::store::error::Result;
use crate::store::lease::Lease;
use rusqlite::{OptionalExtension, params};

impl SqliteStore {
    /// Takes the oldest queue run that is `queued`, or `running` under a lease whose
    /// heartbeat is older than `ttl` (its worker died or hangs), for `worker`: the
    /// token goes up (fencing the old holder) and the run becomes `running`. Liveness
    /// is the heartbeat alone, never a pid or a host. `BEGIN IMMEDIATE` makes the
    /// claim atomic among processes (PostgreSQL uses `FOR UPDATE SKIP LOCKED`).
    pub fn claim(&self, worker: &str, ttl: std::time::Duration) -> Result<Option<Lease>> {
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let me = std::process::id() as i64;
        let worker = worker.to_owned();
        self.write_grouped(Durability::PowerCut, move |tx| {
            // Read once the write lock is held: a time taken before waiting for it
            // would judge leases by a stale clock and stamp the claim already old.
            let now = now_ms();
            let row: Option<(String, i64)> = tx
                .query_row(
                    "SELECT id, lease_token FROM runs
                     WHERE queue = 1 AND status IN ('queued', 'running')
                       AND (lease_pid IS NULL OR lease_heartbeat IS NULL OR lease_heartbeat < ?1)
                     ORDER BY created_at, rowid LIMIT 1",
                    [now - ttl],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let Some((id, token)) = row else {
                return Ok(None);
            };
            tx.execute(
                "UPDATE runs SET status = 'running', lease_pid = ?2, lease_worker = ?3,
                    lease_token = ?4, lease_heartbeat = ?5, lease_since = ?5, updated_at = ?5
                 WHERE id = ?1",
                params![id, me, worker, token + 1, now],
            )?;
            Ok(Some(Lease {
                run: RunId(id),
                token: token + 1,
            }))
        })
    }

    /// Hands a queue run that waited for a person back to the queue once no decision
    /// is pending (resolving its escalation re-queues it). False when the run is not
    /// the queue's, not waiting, or still waits for another decision.
    pub fn requeue(&self, id: &RunId) -> Result<bool> {
        self.write(|tx| {
            let n = tx.execute(
                "UPDATE runs SET status = 'queued', updated_at = ?2
                 WHERE id = ?1 AND queue = 1 AND status IN ('awaiting_approval', 'escalated')
                   AND NOT EXISTS (SELECT 1 FROM escalations e WHERE e.run_id = ?1
                       AND e.status = 'open' AND e.kind NOT IN ('tool_bug', 'all_tools_failed'))",
                params![id.0, now_ms()],
            )?;
            Ok(n == 1)
        })
    }

    /// Gives a held queue run back to the queue (a worker stopping): `queued`, held by
    /// nobody, resumed by the next worker from its last committed step.
    pub fn release_to_queue(&self, lease: &Lease) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "UPDATE runs SET status = CASE WHEN status = 'running' THEN 'queued' ELSE status END,
                    lease_pid = NULL, lease_worker = NULL, updated_at = ?3
                 WHERE id = ?1 AND lease_token = ?2",
                params![lease.run.0, lease.token, now_ms()],
            )?;
            Ok(())
        })
    }

    /// How many queue runs are `queued` and `running` (held, or waiting for a takeover).
    pub fn queue_counts(&self) -> Result<(u64, u64)> {
        let conn = self.lock()?;
        Ok(conn
            .prepare_cached(
                "SELECT COALESCE(SUM(status = 'queued'), 0), COALESCE(SUM(status = 'running'), 0)
                 FROM runs WHERE queue = 1 AND status IN ('queued', 'running')",
            )?
            .query_row([], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
            })?)
    }
}

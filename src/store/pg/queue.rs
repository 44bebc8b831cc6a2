//! The run queue on PostgreSQL (issue 17): `FOR UPDATE SKIP LOCKED` lets many workers
//! on many machines claim at once, each skipping rows another is claiming.

use super::conn::{PgStore, Tx};
use crate::records::RunId;
use crate::store::durability::{Durability, now_ms};
use crate::store::error::Result;
use crate::store::lease::Lease;
use std::time::Duration;

impl PgStore {
    /// See `SqliteStore::claim`; here `FOR UPDATE SKIP LOCKED` lets many workers on
    /// many machines claim at once, each skipping rows another is claiming.
    pub fn claim(&self, worker: &str, ttl: Duration) -> Result<Option<Lease>> {
        self.write(self.claim_tx(worker, ttl))
    }

    /// [`PgStore::claim`] from a worker's slot, which goes on driving its other runs
    /// while it waits (see `PgStore::call_async`).
    pub async fn claim_async(&self, worker: &str, ttl: Duration) -> Result<Option<Lease>> {
        self.write_as_async(Durability::PowerCut, self.claim_tx(worker, ttl))
            .await
    }

    fn claim_tx(
        &self,
        worker: &str,
        ttl: Duration,
    ) -> impl FnOnce(&mut Tx<'_>) -> Result<Option<Lease>> + Send + 'static {
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let me = std::process::id() as i64;
        let host = self.host.clone();
        let worker = worker.to_string();
        move |tx| {
            // Read when the transaction runs, not before it waited for the connection.
            let now = now_ms();
            let Some(row) = tx.opt(
                "SELECT id, lease_token FROM runs
                 WHERE queue AND status IN ('queued', 'running')
                   AND (lease_pid IS NULL OR lease_heartbeat IS NULL OR lease_heartbeat < $1)
                 ORDER BY created_at, seq LIMIT 1 FOR UPDATE SKIP LOCKED",
                &[&(now - ttl)],
            )?
            else {
                return Ok(None);
            };
            let id: String = row.get(0);
            let token: i64 = row.get(1);
            tx.exec(
                "UPDATE runs SET status = 'running', lease_pid = $2, lease_host = $3,
                    lease_worker = $4, lease_token = $5, lease_heartbeat = $6, lease_since = $6,
                    updated_at = $6 WHERE id = $1",
                &[&id, &me, &host, &worker, &(token + 1), &now],
            )?;
            Ok(Some(Lease {
                run: RunId(id),
                token: token + 1,
            }))
        }
    }

    pub fn requeue(&self, id: &RunId) -> Result<bool> {
        let id = id.clone();
        self.write(move |tx| {
            let n = tx.exec(
                "UPDATE runs SET status = 'queued', updated_at = $2
                 WHERE id = $1 AND queue AND status IN ('awaiting_approval', 'escalated')
                   AND NOT EXISTS (SELECT 1 FROM escalations e WHERE e.run_id = $1
                       AND e.status = 'open' AND e.kind NOT IN ('tool_bug', 'all_tools_failed'))",
                &[&id.0, &now_ms()],
            )?;
            Ok(n == 1)
        })
    }

    pub fn release_to_queue(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.write(move |tx| {
            tx.exec(
                "UPDATE runs SET status = CASE WHEN status = 'running' THEN 'queued' ELSE status END,
                    lease_pid = NULL, lease_worker = NULL, updated_at = $3
                 WHERE id = $1 AND lease_token = $2",
                &[&lease.run.0, &lease.token, &now_ms()],
            )?;
            Ok(())
        })
    }

    pub fn queue_counts(&self) -> Result<(u64, u64)> {
        self.read(|r| {
            let row = r
                .opt(
                    "SELECT COUNT(*) FILTER (WHERE status = 'queued'),
                        COUNT(*) FILTER (WHERE status = 'running')
                     FROM runs WHERE queue AND status IN ('queued', 'running')",
                    &[],
                )?
                .expect("an aggregate returns one row");
            Ok((row.get::<_, i64>(0) as u64, row.get::<_, i64>(1) as u64))
        })
    }
}

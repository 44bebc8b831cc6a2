//! The run queue on SQLite (issue 17): runs submitted for workers, claimed one at a
//! time under `BEGIN IMMEDIATE`, handed back when a worker stops or a person decides.

use super::conn::SqliteStore;
use crate::records::RunId;
use crate::store::durability::{Durability, now_ms};
use crate::store::error::Result;
use crate::store::lease::Lease;
use rusqlite::{Connection, OptionalExtension, params};

impl SqliteStore {
    /// Takes the oldest queue run that is `queued`, or `running` under a lease whose
    /// heartbeat is older than `ttl` (its worker died or hangs), for `worker`: the
    /// token goes up (fencing the old holder) and the run becomes `running`. Liveness
    /// is the heartbeat alone, never a pid or a host. `BEGIN IMMEDIATE` makes the
    /// claim atomic among processes (PostgreSQL uses `FOR UPDATE SKIP LOCKED`).
    pub fn claim(&self, worker: &str, ttl: std::time::Duration) -> Result<Option<Lease>> {
        let claim = Claim::new(worker, ttl);
        self.write_grouped(Durability::PowerCut, move |tx| claim.run(tx))
    }

    /// [`SqliteStore::claim`] from a worker's slot: queued for the file's committer
    /// thread (`group.rs`), so a worker's slots claiming at once share transactions
    /// and their thread goes on meanwhile.
    pub(crate) async fn claim_queued(
        &self,
        worker: &str,
        ttl: std::time::Duration,
    ) -> Result<Option<Lease>> {
        let claim = Claim::new(worker, ttl);
        self.write_queued(Durability::PowerCut, move |tx| claim.run(tx))
            .await
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

/// One claim, as [`SqliteStore::claim`] describes it.
struct Claim {
    worker: String,
    ttl_ms: i64,
}

impl Claim {
    fn new(worker: &str, ttl: std::time::Duration) -> Claim {
        Claim {
            worker: worker.to_owned(),
            ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
        }
    }

    fn run(&self, tx: &Connection) -> Result<Option<Lease>> {
        // Read once the write lock is held: a time taken before waiting for it
        // would judge leases by a stale clock and stamp the claim already old.
        let now = now_ms();
        // The oldest of two probes, each by its index (migration 11): the oldest
        // queued run, and the oldest running one whose lease went stale.
        let row: Option<(String, i64)> = tx
            .prepare_cached(
                "SELECT id, lease_token FROM (
                   SELECT * FROM (SELECT id, lease_token, created_at, rowid AS r FROM runs
                     WHERE queue = 1 AND status = 'queued'
                       AND (lease_pid IS NULL OR lease_heartbeat IS NULL OR lease_heartbeat < ?1)
                     ORDER BY created_at, rowid LIMIT 1)
                   UNION ALL
                   SELECT * FROM (SELECT id, lease_token, created_at, rowid AS r FROM runs
                     WHERE queue = 1 AND status = 'running'
                       AND (CASE WHEN lease_pid IS NULL THEN 0
                            ELSE coalesce(lease_heartbeat, 0) END) < ?1
                     ORDER BY created_at, rowid LIMIT 1))
                 ORDER BY created_at, r LIMIT 1",
            )?
            .query_row([now.saturating_sub(self.ttl_ms)], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        let Some((id, token)) = row else {
            return Ok(None);
        };
        tx.prepare_cached(
            "UPDATE runs SET status = 'running', lease_pid = ?2, lease_worker = ?3,
                lease_token = ?4, lease_heartbeat = ?5, lease_since = ?5, updated_at = ?5
             WHERE id = ?1",
        )?
        .execute(params![
            id,
            std::process::id() as i64,
            self.worker,
            token + 1,
            now
        ])?;
        Ok(Some(Lease {
            run: RunId(id),
            token: token + 1,
        }))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use crate::model::{Message, Role};
    use crate::records::RunId;
    use crate::store::{NewRun, Store};
    use std::time::Duration;

    const TTL: Duration = Duration::from_secs(60);

    /// Queues a run `id` with placeholder contents (shared with the other store tests).
    pub(in crate::store::sqlite) fn submit(store: &Store, id: &str) {
        store
            .submit_run(&NewRun {
                id: RunId(id.into()),
                task: "task",
                task_path: "task.md",
                snapshot: "{}",
                scripts: &Default::default(),
                max_steps: 9,
                max_tokens: 99,
                messages: &[Message::text(Role::User, "task")],
                state: "{}",
            })
            .unwrap();
    }

    fn claimed(store: &Store) -> Option<String> {
        store.claim("w", TTL).unwrap().map(|l| l.run.0)
    }

    fn set(store: &Store, sql: &str) {
        let Store::Sqlite(s) = store else {
            unreachable!()
        };
        s.write(|tx| Ok(tx.execute_batch(sql)?)).unwrap();
    }

    /// Oldest first, whether the run is queued or its lease went stale (a holder
    /// silent past the TTL, or one that let go); a live lease is never taken.
    #[test]
    fn a_claim_takes_the_oldest_queued_run_or_stale_lease_and_skips_live_ones() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("q.db"), true).unwrap();
        for id in ["a", "b", "c", "d"] {
            submit(&store, id);
        }
        set(
            &store,
            "UPDATE runs SET created_at = CASE id WHEN 'a' THEN 1 WHEN 'b' THEN 2 \
             WHEN 'c' THEN 3 ELSE 4 END",
        );
        assert_eq!(claimed(&store).as_deref(), Some("a"));
        assert_eq!(claimed(&store).as_deref(), Some("b"));
        // `a`'s holder went silent past the TTL: `a` is older than `c`.
        set(&store, "UPDATE runs SET lease_heartbeat = 5 WHERE id = 'a'");
        assert_eq!(claimed(&store).as_deref(), Some("a"));
        // `b`'s holder let go while it ran (an error handed nothing back).
        set(&store, "UPDATE runs SET lease_pid = NULL WHERE id = 'b'");
        assert_eq!(claimed(&store).as_deref(), Some("b"));
        assert_eq!(claimed(&store).as_deref(), Some("c"));
        assert_eq!(claimed(&store).as_deref(), Some("d"));
        // Every lease is live now.
        assert_eq!(claimed(&store), None);
    }
}

//! Rate limits on PostgreSQL (see `store/limits.rs`): the key's row is locked
//! (`FOR UPDATE`) for the transaction, so the processes of every machine take their
//! turns on it, and limit time is the server's clock, one clock for all of them.

use super::conn::{PgStore, Reader, Tx};
use crate::records::RunId;
use crate::store::durability::Durability;
use crate::store::error::Result;
use crate::store::limits::{HoldWrite, LimitHold, LimitRow, LimitView, LimitWrite};
use tokio_postgres::Row;

fn hold(r: &Row, at: usize) -> LimitHold {
    LimitHold {
        id: r.get(at),
        run: RunId(r.get(at + 1)),
        lease_token: r.get(at + 2),
        priority: r.get(at + 3),
        tokens: r.get(at + 4),
        cost: r.get(at + 5),
        start_at: r.get(at + 6),
        created_at: r.get(at + 7),
        waiting_for: r.get(at + 8),
    }
}

fn step(tx: &mut Tx<'_>, key: &str, ttl: i64) -> Result<LimitView> {
    tx.exec(
        "INSERT INTO limit_keys (key, label, config, state, updated_at)
         VALUES ($1, '', '', '', 0) ON CONFLICT (key) DO NOTHING",
        &[&key],
    )?;
    let row = tx.one(
        "SELECT state, (extract(epoch from clock_timestamp()) * 1000)::bigint
         FROM limit_keys WHERE key = $1 FOR UPDATE",
        &[&key],
    )?;
    let (state, now): (String, i64) = (row.get(0), row.get(1));
    tx.exec(
        "DELETE FROM limit_holds WHERE key = $1 AND id NOT IN (
            SELECT h.id FROM limit_holds h JOIN runs r ON r.id = h.run_id
            WHERE h.key = $1 AND r.lease_token = h.lease_token AND r.status = 'running'
              AND r.lease_pid IS NOT NULL AND r.lease_heartbeat >= $2)",
        &[&key, &(now - ttl)],
    )?;
    let holds = tx
        .query(
            "SELECT h.id, h.run_id, h.lease_token, h.priority, h.tokens, h.cost, h.start_at,
                    h.created_at, h.waiting_for
             FROM limit_holds h WHERE h.key = $1",
            &[&key],
        )?
        .iter()
        .map(|r| hold(r, 0))
        .collect();
    Ok(LimitView {
        now_ms: now,
        state: Some(state).filter(|s| !s.is_empty()),
        holds,
    })
}

fn apply(tx: &mut Tx<'_>, key: &str, now: i64, w: &LimitWrite) -> Result<()> {
    tx.exec(
        "UPDATE limit_keys SET label = $2, config = $3, state = $4, updated_at = $5 WHERE key = $1",
        &[&key, &w.label, &w.config, &w.state, &now],
    )?;
    for h in &w.holds {
        match h {
            HoldWrite::Put(h) => {
                tx.exec(
                    "INSERT INTO limit_holds (id, key, run_id, lease_token, priority, tokens,
                         cost, start_at, created_at, waiting_for)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                     ON CONFLICT (id) DO UPDATE SET start_at = excluded.start_at,
                         cost = excluded.cost, tokens = excluded.tokens,
                         waiting_for = excluded.waiting_for",
                    &[
                        &h.id,
                        &key,
                        &h.run.0,
                        &h.lease_token,
                        &h.priority,
                        &h.tokens,
                        &h.cost,
                        &h.start_at,
                        &h.created_at,
                        &h.waiting_for,
                    ],
                )?;
            }
            HoldWrite::Delete(id) => {
                tx.exec("DELETE FROM limit_holds WHERE id = $1", &[id])?;
            }
        }
    }
    Ok(())
}

fn live_holds(r: &mut Reader<'_>, key: &str, ttl: i64) -> Result<Vec<LimitHold>> {
    let rows = r.query(
        "SELECT h.id, h.run_id, h.lease_token, h.priority, h.tokens, h.cost, h.start_at,
                h.created_at, h.waiting_for
         FROM limit_holds h JOIN runs r ON r.id = h.run_id
         WHERE h.key = $1 AND r.lease_token = h.lease_token AND r.status = 'running'
           AND r.lease_pid IS NOT NULL
           AND r.lease_heartbeat >= (extract(epoch from clock_timestamp()) * 1000)::bigint - $2",
        &[&key, &ttl],
    )?;
    Ok(rows.iter().map(|r| hold(r, 0)).collect())
}

impl PgStore {
    /// One step on limit key `key` (see `SqliteStore::limit_step`).
    pub(crate) async fn limit_step<T, F>(&self, key: &str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(LimitView) -> (LimitWrite, T) + Send + 'static,
    {
        let (key, ttl) = (key.to_string(), self.lease_ttl_ms);
        self.write_as_async(Durability::Process, move |tx| {
            let view = step(tx, &key, ttl)?;
            let now = view.now_ms;
            let (write, answer) = f(view);
            apply(tx, &key, now, &write)?;
            Ok(answer)
        })
        .await
    }

    /// When hold `id` may go, if it still exists, with the server's clock.
    pub(crate) async fn limit_hold_start(&self, id: &str) -> Result<(Option<Option<i64>>, i64)> {
        let id = id.to_string();
        self.read_async(move |r| {
            let now: i64 = r
                .query(
                    "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint",
                    &[],
                )?
                .first()
                .map_or(0, |row| row.get(0));
            let start = r
                .opt("SELECT start_at FROM limit_holds WHERE id = $1", &[&id])?
                .map(|row| row.get::<_, Option<i64>>(0));
            Ok((start, now))
        })
        .await
    }

    /// Every limit key with its live holds (`agentrun limits`), and the server's clock.
    pub fn limit_rows(&self) -> Result<(Vec<LimitRow>, i64)> {
        let ttl = self.lease_ttl_ms;
        self.read(move |r| {
            let now: i64 = r
                .query(
                    "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint",
                    &[],
                )?
                .first()
                .map_or(0, |row| row.get(0));
            let mut rows: Vec<LimitRow> = r
                .query(
                    "SELECT key, label, config, state FROM limit_keys ORDER BY label, key",
                    &[],
                )?
                .iter()
                .map(|row| LimitRow {
                    key: row.get(0),
                    label: row.get(1),
                    config: row.get(2),
                    state: row.get(3),
                    holds: Vec::new(),
                })
                .collect();
            for row in &mut rows {
                row.holds = live_holds(r, &row.key, ttl)?;
            }
            Ok((rows, now))
        })
    }

    /// What `run` waits for under rate limits now (see `SqliteStore::limit_waits_of`).
    pub fn limit_waits_of(&self, run: &RunId) -> Result<Vec<(String, LimitHold)>> {
        let run = run.0.clone();
        self.read(move |r| {
            let rows = r.query(
                "SELECT k.label, h.id, h.run_id, h.lease_token, h.priority, h.tokens, h.cost,
                        h.start_at, h.created_at, h.waiting_for
                 FROM limit_holds h JOIN limit_keys k ON k.key = h.key
                 WHERE h.run_id = $1 AND h.start_at IS NULL ORDER BY h.created_at",
                &[&run],
            )?;
            Ok(rows.iter().map(|row| (row.get(0), hold(row, 1))).collect())
        })
    }
}

//! Rate limits in SQLite (see `store/limits.rs`): one `BEGIN IMMEDIATE` transaction per
//! step on a key, which serialises every process on the file.

use super::conn::SqliteStore;
use crate::records::RunId;
use crate::store::durability::{Durability, now_ms};
use crate::store::error::Result;
use crate::store::limits::{HoldWrite, LimitHold, LimitRow, LimitView, LimitWrite};
use rusqlite::{Connection, OptionalExtension, params};

const HOLD_COLUMNS: &str = "h.id, h.run_id, h.lease_token, h.priority, h.tokens, h.cost, \
     h.start_at, h.created_at, h.waiting_for";

/// The holds of key `?1` whose lease is gone: the run's token moved on, it stopped,
/// or its holder's heartbeat is older than `?2`.
const DEAD: &str = "DELETE FROM limit_holds WHERE key = ?1 AND id NOT IN (
    SELECT h.id FROM limit_holds h JOIN runs r ON r.id = h.run_id
    WHERE h.key = ?1 AND r.lease_token = h.lease_token AND r.status = 'running'
      AND r.lease_pid IS NOT NULL AND r.lease_heartbeat >= ?2)";

/// A hold read from a row whose hold columns start at column `at`.
fn hold_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<LimitHold> {
    Ok(LimitHold {
        id: r.get(at)?,
        run: RunId(r.get(at + 1)?),
        lease_token: r.get(at + 2)?,
        priority: r.get(at + 3)?,
        tokens: r.get(at + 4)?,
        cost: r.get(at + 5)?,
        start_at: r.get(at + 6)?,
        created_at: r.get(at + 7)?,
        waiting_for: r.get(at + 8)?,
    })
}

fn hold(r: &rusqlite::Row<'_>) -> rusqlite::Result<LimitHold> {
    hold_at(r, 0)
}

fn holds_of(conn: &Connection, key: &str) -> Result<Vec<LimitHold>> {
    let sql = format!("SELECT {HOLD_COLUMNS} FROM limit_holds h WHERE h.key = ?1");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([key], hold)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn apply(conn: &Connection, key: &str, now: i64, w: &LimitWrite) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO limit_keys (key, label, config, state, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (key) DO UPDATE SET label = excluded.label, config = excluded.config,
             state = excluded.state, updated_at = excluded.updated_at",
    )?
    .execute(params![key, w.label, w.config, w.state, now])?;
    for h in &w.holds {
        match h {
            HoldWrite::Put(h) => {
                conn.prepare_cached(
                    "INSERT OR REPLACE INTO limit_holds (id, key, run_id, lease_token, priority,
                         tokens, cost, start_at, created_at, waiting_for)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                )?
                .execute(params![
                    h.id,
                    key,
                    h.run.0,
                    h.lease_token,
                    h.priority,
                    h.tokens,
                    h.cost,
                    h.start_at,
                    h.created_at,
                    h.waiting_for
                ])?;
            }
            HoldWrite::Delete(id) => {
                conn.prepare_cached("DELETE FROM limit_holds WHERE id = ?1")?
                    .execute([id])?;
            }
        }
    }
    Ok(())
}

impl SqliteStore {
    /// One step on limit key `key`: its dead holds go, `f` sees the rest and the
    /// state, and what it answers is written, all in one transaction.
    pub(crate) async fn limit_step<T, F>(&self, key: &str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(LimitView) -> (LimitWrite, T) + Send + 'static,
    {
        let (key, ttl) = (key.to_string(), self.lease_ttl_ms);
        // Losing the last steps to a power cut costs a schedule that ages out within
        // a window; no fsync of its own.
        self.write_queued(Durability::Process, move |tx| {
            let now = now_ms();
            tx.prepare_cached(DEAD)?.execute(params![key, now - ttl])?;
            let state: Option<String> = tx
                .prepare_cached("SELECT state FROM limit_keys WHERE key = ?1")?
                .query_row([&key], |r| r.get(0))
                .optional()?;
            let view = LimitView {
                now_ms: now,
                state,
                holds: holds_of(tx, &key)?,
            };
            let (write, answer) = f(view);
            apply(tx, &key, now, &write)?;
            Ok(answer)
        })
        .await
    }

    /// When hold `id` may go, if it still exists, with the store's clock.
    pub(crate) async fn limit_hold_start(&self, id: &str) -> Result<(Option<Option<i64>>, i64)> {
        let id = id.to_string();
        self.read_queued(move |conn| {
            let start = conn
                .prepare_cached("SELECT start_at FROM limit_holds WHERE id = ?1")?
                .query_row([&id], |r| r.get(0))
                .optional()?;
            Ok((start, now_ms()))
        })
        .await
    }

    /// Every limit key with its live holds (`agentrun limits`), and the store's clock.
    pub fn limit_rows(&self) -> Result<(Vec<LimitRow>, i64)> {
        let conn = self.lock()?;
        let now = now_ms();
        let mut rows: Vec<LimitRow> = conn
            .prepare_cached("SELECT key, label, config, state FROM limit_keys ORDER BY label, key")?
            .query_map([], |r| {
                Ok(LimitRow {
                    key: r.get(0)?,
                    label: r.get(1)?,
                    config: r.get(2)?,
                    state: r.get(3)?,
                    holds: Vec::new(),
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        let live = format!(
            "SELECT {HOLD_COLUMNS} FROM limit_holds h JOIN runs r ON r.id = h.run_id
             WHERE h.key = ?1 AND r.lease_token = h.lease_token AND r.status = 'running'
               AND r.lease_pid IS NOT NULL AND r.lease_heartbeat >= ?2"
        );
        for row in &mut rows {
            row.holds = conn
                .prepare_cached(&live)?
                .query_map(params![row.key, now - self.lease_ttl_ms], hold)?
                .collect::<rusqlite::Result<_>>()?;
        }
        Ok((rows, now))
    }

    /// What `run` waits for under rate limits now (`runs show`): each key's label and
    /// the hold, waiting ones only.
    pub fn limit_waits_of(&self, run: &RunId) -> Result<Vec<(String, LimitHold)>> {
        let conn = self.lock()?;
        let sql = format!(
            "SELECT k.label, {HOLD_COLUMNS} FROM limit_holds h JOIN limit_keys k ON k.key = h.key
             WHERE h.run_id = ?1 AND h.start_at IS NULL ORDER BY h.created_at"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([&run.0], |r| {
            let label: String = r.get(0)?;
            Ok((label, hold_at(r, 1)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

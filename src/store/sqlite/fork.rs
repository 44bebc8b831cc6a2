//! `runs fork` on SQLite (issue 21): the copy in one transaction; `store/fork.rs`
//! says what is copied and why.

use super::conn::SqliteStore;
use super::write::insert_scripts;
use crate::store::durability::now_ms;
use crate::store::error::{Result, StoreError};
use crate::store::fork::{ForkPoint, ForkRun, Forked, carry_keys, not_started_reason};
use rusqlite::{OptionalExtension, params};

impl SqliteStore {
    /// Creates the fork `f` describes, in one transaction (see the module doc).
    pub fn fork_run(&self, f: &ForkRun<'_>) -> Result<Forked> {
        let now = now_ms();
        let (src, id) = (&f.source.0, &f.id.0);
        let point = self.write(|tx| {
            let last: u32 = tx
                .query_row(
                    "SELECT step FROM checkpoints WHERE run_id = ?1",
                    [src],
                    |r| r.get(0),
                )
                .optional()?
                .ok_or_else(|| StoreError::RunNotFound(src.clone()))?;
            let point = ForkPoint::check(&f.source, f.at_step, last, f.spent, |step| {
                Ok(tx
                    .query_row(
                        "SELECT last_seq, state FROM step_states WHERE run_id = ?1 AND step = ?2",
                        params![src, step],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()?)
            })?;
            // Held by nobody: whoever drives it takes the lease as for a resume.
            tx.execute(
                "INSERT INTO runs (id, task, task_path, status, max_steps, max_tokens, steps,
                    input_tokens, output_tokens, error, lease_token, created_at, updated_at,
                    forked_from, forked_at, cost_usd)
                 SELECT ?1, task, task_path, 'interrupted', COALESCE(?3, max_steps),
                    COALESCE(?4, max_tokens), ?5, ?6, ?7, ?8, 0, ?9, ?9, id, ?5, ?10
                 FROM runs WHERE id = ?2",
                params![
                    id,
                    src,
                    f.max_steps,
                    f.max_tokens.map(|t| t as i64),
                    point.step,
                    point.tokens.0 as i64,
                    point.tokens.1 as i64,
                    not_started_reason(&f.source, point.step),
                    now,
                    point.cost_usd
                ],
            )?;
            match f.config {
                Some((snapshot, scripts)) => {
                    tx.execute(
                        "INSERT INTO run_snapshots (run_id, snapshot) VALUES (?1, ?2)",
                        params![id, snapshot],
                    )?;
                    insert_scripts(tx, &f.id, scripts)?;
                }
                None => {
                    tx.execute(
                        "INSERT INTO run_snapshots (run_id, snapshot)
                         SELECT ?1, snapshot FROM run_snapshots WHERE run_id = ?2",
                        params![id, src],
                    )?;
                    tx.execute(
                        "INSERT INTO run_scripts (run_id, spec, text)
                         SELECT ?1, spec, text FROM run_scripts WHERE run_id = ?2",
                        params![id, src],
                    )?;
                }
            }
            copy_history(tx, f, &point)?;
            let in_doubt = point.at_last && carry_in_doubt(tx, f, point.step + 1)?;
            crate::fault::point("inside_fork");
            Ok((point, in_doubt))
        })?;
        let (point, in_doubt) = point;
        Ok(Forked {
            id: f.id.clone(),
            at_step: point.step,
            in_doubt,
        })
    }
}

/// Carries the source's step `next` into the fork when one of its calls started and has
/// no outcome (`store/fork.rs`, An in-doubt turn is carried); whether it did.
fn carry_in_doubt(tx: &rusqlite::Connection, f: &ForkRun<'_>, next: u32) -> Result<bool> {
    let (src, id) = (&f.source.0, &f.id.0);
    let carried = tx.execute(
        "INSERT INTO model_turns (run_id, step, response)
         SELECT ?1, step, response FROM model_turns WHERE run_id = ?2 AND step = ?3
            AND EXISTS (SELECT 1 FROM tool_calls WHERE run_id = ?2 AND step = ?3
                AND started AND result IS NULL)",
        params![id, src, next],
    )? > 0;
    if !carried {
        return Ok(false);
    }
    tx.execute(
        "INSERT INTO tool_calls (run_id, call_id, step, idx, tool, args, status, started,
            attempts, result, is_error, via)
         SELECT ?1, call_id, step, idx, tool, args, status, started, attempts, result,
            is_error, via
         FROM tool_calls WHERE run_id = ?2 AND step = ?3",
        params![id, src, next],
    )?;
    tx.execute(
        "INSERT INTO events (run_id, step, kind, data, at)
         SELECT ?1, step, kind, data, at FROM events WHERE run_id = ?2 AND step = ?3 ORDER BY id",
        params![id, src, next],
    )?;
    let snapshot = |run: &str| -> Result<String> {
        Ok(tx.query_row(
            "SELECT snapshot FROM run_snapshots WHERE run_id = ?1",
            [run],
            |r| r.get(0),
        )?)
    };
    let patched = carry_keys(&snapshot(id)?, &f.source, &snapshot(src)?, next)?;
    tx.execute(
        "UPDATE run_snapshots SET snapshot = ?2 WHERE run_id = ?1",
        params![id, patched],
    )?;
    Ok(true)
}

/// Copies the source's history up to the fork point into the fork (module doc).
fn copy_history(tx: &rusqlite::Connection, f: &ForkRun<'_>, p: &ForkPoint) -> Result<()> {
    let (src, id) = (&f.source.0, &f.id.0);
    tx.execute(
        "INSERT INTO messages (run_id, seq, step, role, content)
         SELECT ?1, seq, step, role, content FROM messages WHERE run_id = ?2 AND seq <= ?3",
        params![id, src, p.last_seq],
    )?;
    tx.execute(
        "INSERT INTO checkpoints (run_id, step, last_seq, state) VALUES (?1, ?2, ?3, ?4)",
        params![id, p.step, p.last_seq, p.state],
    )?;
    tx.execute(
        "INSERT INTO step_states (run_id, step, last_seq, state)
         SELECT ?1, step, last_seq, state FROM step_states WHERE run_id = ?2 AND step <= ?3",
        params![id, src, p.step],
    )?;
    tx.execute(
        "INSERT INTO tool_calls (run_id, call_id, step, idx, tool, args, status, started,
            attempts, result, is_error, via)
         SELECT ?1, call_id, step, idx, tool, args, status, started, attempts, result,
            is_error, via
         FROM tool_calls WHERE run_id = ?2 AND step <= ?3",
        params![id, src, p.step],
    )?;
    tx.execute(
        "INSERT INTO events (run_id, step, kind, data, at)
         SELECT ?1, step, kind, data, at FROM events WHERE run_id = ?2 AND step <= ?3 ORDER BY id",
        params![id, src, p.step],
    )?;
    // People's messages already in the copied transcript keep their sender.
    tx.execute(
        "INSERT INTO sent_messages (run_id, text, sent_by, sent_at, delivered_step, delivered_seq)
         SELECT ?1, text, sent_by, sent_at, delivered_step, delivered_seq FROM sent_messages
         WHERE run_id = ?2 AND delivered_seq <= ?3 ORDER BY id",
        params![id, src, p.last_seq],
    )?;
    Ok(())
}

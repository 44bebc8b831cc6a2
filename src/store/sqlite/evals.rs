//! Eval rows on SQLite (see `store/evals.rs`).

use super::SqliteStore;
use crate::store::error::Result;
use crate::store::evals::{EvalRow, EvalSlotRow, SlotKey};
use rusqlite::{OptionalExtension, params};

impl SqliteStore {
    /// Records a new eval; false when one of that name exists (it is left as it is).
    pub fn create_eval(&self, e: &EvalRow) -> Result<bool> {
        self.write(|tx| {
            let n = tx.execute(
                "INSERT INTO evals (name, suite, plan, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name) DO NOTHING",
                params![e.name, e.suite, e.plan, e.created_at],
            )?;
            Ok(n == 1)
        })
    }

    pub fn eval(&self, name: &str) -> Result<Option<EvalRow>> {
        let conn = self.lock()?;
        let mut stmt = conn.prepare_cached(
            "SELECT name, suite, plan, created_at, finished_at FROM evals WHERE name = ?1",
        )?;
        Ok(stmt.query_row([name], eval_row).optional()?)
    }

    /// Every eval, newest first.
    pub fn evals(&self) -> Result<Vec<EvalRow>> {
        let conn = self.lock()?;
        let mut stmt = conn.prepare_cached(
            "SELECT name, suite, plan, created_at, finished_at FROM evals
             ORDER BY created_at DESC, name",
        )?;
        let rows = stmt.query_map([], eval_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn finish_eval(&self, name: &str, at: i64) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "UPDATE evals SET finished_at = ?2 WHERE name = ?1",
                params![name, at],
            )?;
            Ok(())
        })
    }

    /// Names the run of a slot (creating the slot).
    pub fn set_eval_run(&self, k: SlotKey<'_>, run_id: &str) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO eval_runs (eval, task, model, rep, run_id) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (eval, task, model, rep) DO UPDATE SET run_id = excluded.run_id,
                     result = NULL",
                params![k.eval, k.task, k.model, k.repeat, run_id],
            )?;
            Ok(())
        })
    }

    /// Stores a slot's scored result.
    pub fn set_eval_result(&self, k: SlotKey<'_>, result: &str) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "UPDATE eval_runs SET result = ?5
                 WHERE eval = ?1 AND task = ?2 AND model = ?3 AND rep = ?4",
                params![k.eval, k.task, k.model, k.repeat, result],
            )?;
            Ok(())
        })
    }

    /// An eval's slots, by task, model and repeat.
    pub fn eval_slots(&self, eval: &str) -> Result<Vec<EvalSlotRow>> {
        let conn = self.lock()?;
        let mut stmt = conn.prepare_cached(
            "SELECT task, model, rep, run_id, result FROM eval_runs WHERE eval = ?1
             ORDER BY task, model, rep",
        )?;
        let rows = stmt.query_map([eval], |r| {
            Ok(EvalSlotRow {
                task: r.get(0)?,
                model: r.get(1)?,
                repeat: r.get(2)?,
                run_id: r.get(3)?,
                result: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

fn eval_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<EvalRow> {
    Ok(EvalRow {
        name: r.get(0)?,
        suite: r.get(1)?,
        plan: r.get(2)?,
        created_at: r.get(3)?,
        finished_at: r.get(4)?,
    })
}

//! Eval rows on PostgreSQL: the same statements as SQLite's `sqlite/evals.rs`.

use super::conn::PgStore;
use crate::store::error::Result;
use crate::store::evals::{EvalRow, EvalSlotRow, SlotKey};
use tokio_postgres::Row;

impl PgStore {
    pub fn create_eval(&self, e: &EvalRow) -> Result<bool> {
        let e = e.clone();
        self.write(move |tx| {
            let n = tx.exec(
                "INSERT INTO evals (name, suite, plan, created_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (name) DO NOTHING",
                &[&e.name, &e.suite, &e.plan, &e.created_at],
            )?;
            Ok(n == 1)
        })
    }

    pub fn eval(&self, name: &str) -> Result<Option<EvalRow>> {
        let name = name.to_string();
        self.read(move |r| {
            Ok(r.opt(
                "SELECT name, suite, plan, created_at, finished_at FROM evals WHERE name = $1",
                &[&name],
            )?
            .map(|row| eval_row(&row)))
        })
    }

    pub fn evals(&self) -> Result<Vec<EvalRow>> {
        self.read(move |r| {
            let rows = r.query(
                "SELECT name, suite, plan, created_at, finished_at FROM evals
                 ORDER BY created_at DESC, name",
                &[],
            )?;
            Ok(rows.iter().map(eval_row).collect())
        })
    }

    pub fn finish_eval(&self, name: &str, at: i64) -> Result<()> {
        let name = name.to_string();
        self.write(move |tx| {
            tx.exec(
                "UPDATE evals SET finished_at = $2 WHERE name = $1",
                &[&name, &at],
            )?;
            Ok(())
        })
    }

    pub fn set_eval_run(&self, k: SlotKey<'_>, run_id: &str) -> Result<()> {
        let (e, t, m, rep, id) = owned(k, run_id);
        self.write(move |tx| {
            tx.exec(
                "INSERT INTO eval_runs (eval, task, model, rep, run_id) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (eval, task, model, rep) DO UPDATE SET run_id = excluded.run_id,
                     result = NULL",
                &[&e, &t, &m, &rep, &id],
            )?;
            Ok(())
        })
    }

    pub fn set_eval_result(&self, k: SlotKey<'_>, result: &str) -> Result<()> {
        let (e, t, m, rep, result) = owned(k, result);
        self.write(move |tx| {
            tx.exec(
                "UPDATE eval_runs SET result = $5
                 WHERE eval = $1 AND task = $2 AND model = $3 AND rep = $4",
                &[&e, &t, &m, &rep, &result],
            )?;
            Ok(())
        })
    }

    pub fn eval_slots(&self, eval: &str) -> Result<Vec<EvalSlotRow>> {
        let eval = eval.to_string();
        self.read(move |r| {
            let rows = r.query(
                "SELECT task, model, rep, run_id, result FROM eval_runs WHERE eval = $1
                 ORDER BY task, model, rep",
                &[&eval],
            )?;
            Ok(rows
                .iter()
                .map(|row| EvalSlotRow {
                    task: row.get(0),
                    model: row.get(1),
                    repeat: row.get::<_, i64>(2) as u32,
                    run_id: row.get(3),
                    result: row.get(4),
                })
                .collect())
        })
    }
}

fn owned(k: SlotKey<'_>, text: &str) -> (String, String, String, i64, String) {
    (
        k.eval.to_string(),
        k.task.to_string(),
        k.model.to_string(),
        i64::from(k.repeat),
        text.to_string(),
    )
}

fn eval_row(row: &Row) -> EvalRow {
    EvalRow {
        name: row.get(0),
        suite: row.get(1),
        plan: row.get(2),
        created_at: row.get(3),
        finished_at: row.get(4),
    }
}

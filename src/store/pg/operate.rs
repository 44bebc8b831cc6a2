//! `runs fork` and `runs send` on PostgreSQL (issue 21): the same transactions as
//! SQLite's `store/fork.rs` and `store/sent.rs`, whose module docs give the rules.

use super::conn::{PgStore, Reader, Tx};
use super::write::{check_lease, insert_messages, insert_scripts};
use crate::model::Message;
use crate::records::{Delivery, RunId, SentMessage};
use crate::store::durability::now_ms;
use crate::store::error::{Result, StoreError};
use crate::store::fork::{
    ForkPoint, ForkRun, Forked, carry_keys, check_accepts, not_started_reason,
};
use crate::store::lease::Lease;
use crate::store::plan::encode_messages;
use tokio_postgres::Row;

impl PgStore {
    pub fn fork_run(&self, f: &ForkRun<'_>) -> Result<Forked> {
        let now = now_ms();
        let (source, id) = (f.source.clone(), f.id.clone());
        let (at_step, spent) = (f.at_step, f.spent);
        let (max_steps, max_tokens) = (f.max_steps.map(i64::from), f.max_tokens.map(|t| t as i64));
        let config = f
            .config
            .map(|(s, scripts)| (s.to_string(), scripts.clone()));
        let step = self.write(move |tx| {
            let last: i64 = tx
                .opt(
                    "SELECT step FROM checkpoints WHERE run_id = $1",
                    &[&source.0],
                )?
                .ok_or_else(|| StoreError::RunNotFound(source.0.clone()))?
                .get(0);
            let point = ForkPoint::check(&source, at_step, last as u32, spent, |step| {
                let row = tx.opt(
                    "SELECT last_seq, state FROM step_states WHERE run_id = $1 AND step = $2",
                    &[&source.0, &i64::from(step)],
                )?;
                Ok(row.map(|r| (r.get(0), r.get(1))))
            })?;
            let step = i64::from(point.step);
            let (input, output) = (point.tokens.0 as i64, point.tokens.1 as i64);
            let reason = not_started_reason(&source, point.step);
            tx.exec(
                "INSERT INTO runs (id, task, task_path, status, max_steps, max_tokens, steps,
                    input_tokens, output_tokens, error, lease_token, created_at, updated_at,
                    forked_from, forked_at, cost_usd)
                 SELECT $1, task, task_path, 'interrupted', COALESCE($3, max_steps),
                    COALESCE($4, max_tokens), $5, $6, $7, $8, 0, $9, $9, id, $5, $10
                 FROM runs WHERE id = $2",
                &[
                    &id.0,
                    &source.0,
                    &max_steps,
                    &max_tokens,
                    &step,
                    &input,
                    &output,
                    &reason,
                    &now,
                    &point.cost_usd,
                ],
            )?;
            match &config {
                Some((snapshot, scripts)) => {
                    tx.exec(
                        "INSERT INTO run_snapshots (run_id, snapshot) VALUES ($1, $2)",
                        &[&id.0, snapshot],
                    )?;
                    insert_scripts(tx, &id, scripts)?;
                }
                None => {
                    tx.exec(
                        "INSERT INTO run_snapshots (run_id, snapshot)
                         SELECT $1, snapshot FROM run_snapshots WHERE run_id = $2",
                        &[&id.0, &source.0],
                    )?;
                    tx.exec(
                        "INSERT INTO run_scripts (run_id, spec, text)
                         SELECT $1, spec, text FROM run_scripts WHERE run_id = $2",
                        &[&id.0, &source.0],
                    )?;
                }
            }
            copy_history(tx, &source, &id, &point)?;
            let in_doubt = point.at_last && carry_in_doubt(tx, &source, &id, point.step + 1)?;
            crate::fault::point("inside_fork");
            Ok((point.step, in_doubt))
        })?;
        let (step, in_doubt) = step;
        Ok(Forked {
            id: f.id.clone(),
            at_step: step,
            in_doubt,
        })
    }

    pub fn send_message(&self, run: &RunId, text: &str, by: &str) -> Result<SentMessage> {
        let at = now_ms();
        let (r, t, b) = (run.clone(), text.to_string(), by.to_string());
        let id = self.write(move |tx| {
            let status: String = tx
                .opt("SELECT status FROM runs WHERE id = $1 FOR UPDATE", &[&r.0])?
                .ok_or_else(|| StoreError::RunNotFound(r.0.clone()))?
                .get(0);
            check_accepts(&r, &status)?;
            let id: i64 = tx
                .one(
                    "INSERT INTO sent_messages (run_id, text, sent_by, sent_at)
                     VALUES ($1, $2, $3, $4) RETURNING id",
                    &[&r.0, &t, &b, &at],
                )?
                .get(0);
            crate::fault::point("inside_send");
            Ok(id)
        })?;
        Ok(SentMessage {
            id,
            run: run.clone(),
            text: text.to_string(),
            by: by.to_string(),
            at,
            delivered: None,
        })
    }

    pub fn sent_messages(&self, run: &RunId) -> Result<Vec<SentMessage>> {
        let run = run.clone();
        self.read(move |r| {
            let rows = r.query(
                "SELECT id, run_id, text, sent_by, sent_at, delivered_step, delivered_seq
                 FROM sent_messages WHERE run_id = $1 ORDER BY id",
                &[&run.0],
            )?;
            Ok(rows.iter().map(sent_row).collect())
        })
    }

    pub fn undelivered_messages(&self, run: &RunId) -> Result<Vec<SentMessage>> {
        self.read(undelivered(run))
    }

    /// [`PgStore::undelivered_messages`] as a driven run's step begins (see
    /// `PgStore::call_async`).
    pub async fn messages_to_deliver(&self, run: &RunId) -> Result<Vec<SentMessage>> {
        self.read_async(undelivered(run)).await
    }

    pub fn deliver_messages(
        &self,
        lease: &Lease,
        step: u32,
        messages: &[(i64, Message)],
    ) -> Result<()> {
        let lease = lease.clone();
        let ids: Vec<i64> = messages.iter().map(|(id, _)| *id).collect();
        let bodies: Vec<Message> = messages.iter().map(|(_, m)| m.clone()).collect();
        let encoded = encode_messages(&lease.run, &bodies)?;
        let step = i64::from(step);
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            let mut last: i64 = tx
                .one(
                    "SELECT last_seq FROM checkpoints WHERE run_id = $1",
                    &[&lease.run.0],
                )?
                .get(0);
            for (id, message) in ids.iter().zip(&encoded) {
                let next = last + 1;
                let marked = tx.exec(
                    "UPDATE sent_messages SET delivered_step = $3, delivered_seq = $4
                     WHERE id = $1 AND run_id = $2 AND delivered_seq IS NULL",
                    &[id, &lease.run.0, &step, &next],
                )?;
                if marked == 1 {
                    insert_messages(tx, &lease.run, next, step, std::slice::from_ref(message))?;
                    last = next;
                }
            }
            tx.exec(
                "UPDATE checkpoints SET last_seq = $2 WHERE run_id = $1",
                &[&lease.run.0, &last],
            )?;
            tx.exec(
                "UPDATE step_states SET last_seq = $3 WHERE run_id = $1 AND step = $2",
                &[&lease.run.0, &step, &last],
            )?;
            crate::fault::point("inside_delivery");
            Ok(())
        })
    }
}

/// Carries the source's step `next` into the fork when one of its calls started and has
/// no outcome (`store/fork.rs`, An in-doubt turn is carried); whether it did.
fn carry_in_doubt(tx: &mut Tx<'_>, source: &RunId, id: &RunId, next: u32) -> Result<bool> {
    let next = i64::from(next);
    let carried = tx.exec(
        "INSERT INTO model_turns (run_id, step, response)
         SELECT $1, step, response FROM model_turns WHERE run_id = $2 AND step = $3
            AND EXISTS (SELECT 1 FROM tool_calls WHERE run_id = $2 AND step = $3
                AND started AND result IS NULL)",
        &[&id.0, &source.0, &next],
    )? > 0;
    if !carried {
        return Ok(false);
    }
    tx.exec(
        "INSERT INTO tool_calls (run_id, call_id, step, idx, tool, args, status, started,
            attempts, result, is_error, via)
         SELECT $1, call_id, step, idx, tool, args, status, started, attempts, result,
            is_error, via
         FROM tool_calls WHERE run_id = $2 AND step = $3",
        &[&id.0, &source.0, &next],
    )?;
    tx.exec(
        "INSERT INTO events (run_id, step, kind, data, at)
         SELECT $1, step, kind, data, at FROM events WHERE run_id = $2 AND step = $3 ORDER BY id",
        &[&id.0, &source.0, &next],
    )?;
    let mut snapshot = |run: &RunId| -> Result<String> {
        tx.opt(
            "SELECT snapshot FROM run_snapshots WHERE run_id = $1",
            &[&run.0],
        )?
        .map(|r| r.get(0))
        .ok_or_else(|| StoreError::RunNotFound(run.0.clone()))
    };
    let (fork, src) = (snapshot(id)?, snapshot(source)?);
    let patched = carry_keys(&fork, source, &src, next as u32)?;
    tx.exec(
        "UPDATE run_snapshots SET snapshot = $2 WHERE run_id = $1",
        &[&id.0, &patched],
    )?;
    Ok(true)
}

/// Copies the source's history up to the fork point into the fork.
fn copy_history(tx: &mut Tx<'_>, source: &RunId, id: &RunId, p: &ForkPoint) -> Result<()> {
    let step = i64::from(p.step);
    tx.exec(
        "INSERT INTO messages (run_id, seq, step, role, content)
         SELECT $1, seq, step, role, content FROM messages WHERE run_id = $2 AND seq <= $3",
        &[&id.0, &source.0, &p.last_seq],
    )?;
    tx.exec(
        "INSERT INTO checkpoints (run_id, step, last_seq, state) VALUES ($1, $2, $3, $4)",
        &[&id.0, &step, &p.last_seq, &p.state],
    )?;
    tx.exec(
        "INSERT INTO step_states (run_id, step, last_seq, state)
         SELECT $1, step, last_seq, state FROM step_states WHERE run_id = $2 AND step <= $3",
        &[&id.0, &source.0, &step],
    )?;
    tx.exec(
        "INSERT INTO tool_calls (run_id, call_id, step, idx, tool, args, status, started,
            attempts, result, is_error, via)
         SELECT $1, call_id, step, idx, tool, args, status, started, attempts, result,
            is_error, via
         FROM tool_calls WHERE run_id = $2 AND step <= $3",
        &[&id.0, &source.0, &step],
    )?;
    tx.exec(
        "INSERT INTO events (run_id, step, kind, data, at)
         SELECT $1, step, kind, data, at FROM events WHERE run_id = $2 AND step <= $3 ORDER BY id",
        &[&id.0, &source.0, &step],
    )?;
    tx.exec(
        "INSERT INTO sent_messages (run_id, text, sent_by, sent_at, delivered_step, delivered_seq)
         SELECT $1, text, sent_by, sent_at, delivered_step, delivered_seq FROM sent_messages
         WHERE run_id = $2 AND delivered_seq <= $3 ORDER BY id",
        &[&id.0, &source.0, &p.last_seq],
    )?;
    Ok(())
}

fn sent_row(r: &Row) -> SentMessage {
    let step: Option<i64> = r.get(5);
    let seq: Option<i64> = r.get(6);
    SentMessage {
        id: r.get(0),
        run: RunId(r.get(1)),
        text: r.get(2),
        by: r.get(3),
        at: r.get(4),
        delivered: step.zip(seq).map(|(step, seq)| Delivery {
            step: step as u32,
            seq,
        }),
    }
}

fn undelivered(
    run: &RunId,
) -> impl FnOnce(&mut Reader<'_>) -> Result<Vec<SentMessage>> + Send + 'static {
    let run = run.clone();
    move |r| {
        let rows = r.query(
            "SELECT id, run_id, text, sent_by, sent_at, delivered_step, delivered_seq
             FROM sent_messages WHERE run_id = $1 AND delivered_seq IS NULL ORDER BY id",
            &[&run.0],
        )?;
        Ok(rows.iter().map(sent_row).collect())
    }
}

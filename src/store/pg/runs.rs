//! Run rows on PostgreSQL: creation, lookup, listing, status and the lease.

use super::conn::{PgStore, Tx};
use super::rows::{run_columns, run_row};
use super::write::check_lease;
use crate::records::{RunId, RunRow, RunStatus};
use crate::store::durability::{Durability, now_ms};
use crate::store::error::{Result, StoreError};
use crate::store::lease::{Lease, process_alive};
use std::collections::BTreeMap;

impl PgStore {
    pub fn acquire(&self, id: &RunId) -> Result<Lease> {
        let now = now_ms();
        let me = std::process::id() as i64;
        let host = self.host.clone();
        let ttl = self.lease_ttl_ms;
        let id = id.clone();
        self.write(move |tx| {
            let row = tx
                .opt(
                    "SELECT lease_pid, lease_host, lease_token, lease_heartbeat, lease_since
                     FROM runs WHERE id = $1 FOR UPDATE",
                    &[&id.0],
                )?
                .ok_or_else(|| StoreError::RunNotFound(id.0.clone()))?;
            let pid: Option<i64> = row.get(0);
            let holder_host: Option<String> = row.get(1);
            let token: i64 = row.get(2);
            let heartbeat: Option<i64> = row.get(3);
            let since: Option<i64> = row.get(4);
            if let Some(pid) = pid {
                let fresh = heartbeat.is_some_and(|h| now - h < ttl);
                let local = holder_host.as_deref() == Some(host.as_str());
                let mine = local && pid == me;
                let dead_here = local && !process_alive(pid);
                if fresh && !mine && !dead_here {
                    return Err(StoreError::LeaseHeld {
                        run: id.clone(),
                        pid,
                        since: crate::timefmt::rfc3339(since.unwrap_or(now)),
                    });
                }
            }
            tx.exec(
                "UPDATE runs SET lease_pid = $2, lease_host = $3, lease_token = $4,
                    lease_heartbeat = $5, lease_since = $5, lease_worker = NULL WHERE id = $1",
                &[&id.0, &me, &host, &(token + 1), &now],
            )?;
            Ok(Lease {
                run: id.clone(),
                token: token + 1,
            })
        })
    }

    pub fn release(&self, lease: &Lease) -> Result<()> {
        self.write(release_tx(lease))
    }

    /// [`PgStore::release`] as a driven run ends (see `PgStore::call_async`).
    pub async fn release_async(&self, lease: &Lease) -> Result<()> {
        self.write_as_async(Durability::PowerCut, release_tx(lease))
            .await
    }

    pub fn heartbeat(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.write_as(Durability::Process, move |tx| check_lease(tx, &lease))
    }

    /// Every lease's heartbeat in one statement and transaction, not synced (as
    /// [`Self::heartbeat`]).
    pub fn heartbeat_all(&self, leases: &[Lease]) -> Result<usize> {
        if leases.is_empty() {
            return Ok(0);
        }
        let ids: Vec<String> = leases.iter().map(|l| l.run.0.clone()).collect();
        let tokens: Vec<i64> = leases.iter().map(|l| l.token).collect();
        self.write_as(Durability::Process, move |tx| {
            let n = tx.exec(
                "UPDATE runs SET lease_heartbeat = $3
                 FROM unnest($1::text[], $2::bigint[]) AS held(id, token)
                 WHERE runs.id = held.id AND runs.lease_token = held.token",
                // The time as the transaction runs, not before it waited.
                &[&ids, &tokens, &now_ms()],
            )?;
            Ok(n as usize)
        })
    }

    pub fn set_status(&self, lease: &Lease, status: RunStatus, error: Option<&str>) -> Result<()> {
        let lease = lease.clone();
        let error = error.map(str::to_string);
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            tx.exec(
                "UPDATE runs SET status = $2, error = $3, updated_at = $4 WHERE id = $1",
                &[&lease.run.0, &status.as_str(), &error, &now_ms()],
            )?;
            if status == RunStatus::Cancelled {
                super::cancel::close_escalations(tx, &lease.run, now_ms())?;
            }
            super::outbox::record_if_ended(tx, &lease.run, status, error.as_deref())?;
            Ok(())
        })
    }

    pub fn set_budgets(&self, lease: &Lease, max_steps: u32, max_tokens: u64) -> Result<()> {
        let lease = lease.clone();
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            tx.exec(
                "UPDATE runs SET max_steps = $2, max_tokens = $3 WHERE id = $1",
                &[&lease.run.0, &i64::from(max_steps), &(max_tokens as i64)],
            )?;
            Ok(())
        })
    }

    pub fn run(&self, id: &RunId) -> Result<RunRow> {
        let id = id.clone();
        self.read(move |r| {
            let row = r
                .opt(
                    concat!("SELECT ", run_columns!(), " FROM runs WHERE id = $1"),
                    &[&id.0],
                )?
                .ok_or_else(|| StoreError::RunNotFound(id.0.clone()))?;
            run_row(&row)
        })
    }

    pub fn snapshot(&self, id: &RunId) -> Result<String> {
        let id = id.clone();
        self.read(move |r| {
            Ok(r.opt(
                "SELECT snapshot FROM run_snapshots WHERE run_id = $1",
                &[&id.0],
            )?
            .ok_or_else(|| StoreError::RunNotFound(id.0.clone()))?
            .get(0))
        })
    }

    pub fn scripts(&self, id: &RunId) -> Result<BTreeMap<String, String>> {
        let id = id.clone();
        let rows = self.read(move |r| {
            r.query(
                "SELECT spec, text FROM run_scripts WHERE run_id = $1",
                &[&id.0],
            )
        })?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    pub fn snapshot_models(&self, id: &RunId) -> Result<Option<String>> {
        let id = id.clone();
        let row = self.read(move |r| {
            r.opt(
                "SELECT (snapshot::jsonb -> 'models')::text FROM run_snapshots WHERE run_id = $1",
                &[&id.0],
            )
        })?;
        Ok(row.and_then(|r| r.get(0)))
    }

    pub fn find_run(&self, prefix: &str) -> Result<RunId> {
        let prefix = prefix.to_string();
        let Some(pattern) = RunId::prefix_pattern(&prefix) else {
            return Err(StoreError::RunNotFound(prefix));
        };
        let ids: Vec<String> = self.read(move |r| {
            Ok(r.query(
                "SELECT id FROM runs WHERE id LIKE $1 ESCAPE '\\' ORDER BY id LIMIT 6",
                &[&pattern],
            )?
            .iter()
            .map(|row| row.get(0))
            .collect())
        })?;
        if ids.contains(&prefix) {
            return Ok(RunId(prefix));
        }
        match ids.len() {
            0 => Err(StoreError::RunNotFound(prefix)),
            1 => Ok(RunId(ids[0].clone())),
            _ => Err(StoreError::AmbiguousRun {
                prefix,
                matches: ids.join(", "),
            }),
        }
    }

    /// The child run started by the call with idempotency key `key`, if any.
    pub fn child_by_key(&self, key: &str) -> Result<Option<RunRow>> {
        let key = key.to_string();
        self.read(move |r| {
            let sql = concat!("SELECT ", run_columns!(), " FROM runs WHERE child_key = $1");
            r.opt(sql, &[&key])?.map(|row| run_row(&row)).transpose()
        })
    }

    /// A run's child runs, oldest first.
    pub fn children(&self, parent: &RunId) -> Result<Vec<RunRow>> {
        let parent = parent.0.clone();
        self.read(move |r| {
            let sql = concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs WHERE parent_run = $1 ORDER BY created_at, seq"
            );
            r.query(sql, &[&parent])?.iter().map(run_row).collect()
        })
    }

    pub fn list_runs(&self, status: Option<RunStatus>) -> Result<Vec<RunRow>> {
        self.recent_runs(status, None)
    }

    pub fn recent_runs(
        &self,
        status: Option<RunStatus>,
        limit: Option<u32>,
    ) -> Result<Vec<RunRow>> {
        let status = status.map(|s| s.as_str().to_string());
        // LIMIT NULL is no limit in PostgreSQL.
        let limit = limit.map(i64::from);
        self.read(move |r| {
            r.query(RECENT_RUNS, &[&status, &limit])?
                .iter()
                .map(run_row)
                .collect()
        })
    }

    pub fn recent_runs_plan(&self) -> Result<Vec<String>> {
        self.read(|r| {
            let none: Option<String> = None;
            let limit: Option<i64> = Some(20);
            Ok(r.query(RECENT_RUNS_PLAN, &[&none, &limit])?
                .iter()
                .map(|row| row.get(0))
                .collect())
        })
    }
}

const RECENT_RUNS: &str = "SELECT id, task, task_path, status, max_steps, max_tokens, steps, \
     input_tokens, output_tokens, answer, error, lease_pid, created_at, updated_at, \
     lease_worker, lease_heartbeat, parent_run, parent_call, forked_from, forked_at, cost_usd FROM runs WHERE ($1::text IS NULL OR status = $1) \
     ORDER BY created_at DESC, seq DESC LIMIT $2";
const RECENT_RUNS_PLAN: &str = "EXPLAIN SELECT id, task, task_path, status, max_steps, \
     max_tokens, steps, input_tokens, output_tokens, answer, error, lease_pid, created_at, \
     updated_at FROM runs WHERE ($1::text IS NULL OR status = $1) \
     ORDER BY created_at DESC, seq DESC LIMIT $2";

fn release_tx(lease: &Lease) -> impl FnOnce(&mut Tx<'_>) -> Result<()> + Send + 'static {
    let lease = lease.clone();
    move |tx| {
        tx.exec(
            "UPDATE runs SET lease_pid = NULL, lease_worker = NULL
             WHERE id = $1 AND lease_token = $2",
            &[&lease.run.0, &lease.token],
        )?;
        Ok(())
    }
}

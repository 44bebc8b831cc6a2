//! Run rows: creation, lookup, listing, status, and the lease that lets exactly one
//! process drive a run at a time.

use super::{Result, RunId, SqliteStore, StoreError, now_ms};
use crate::model::Message;
use rusqlite::{OptionalExtension, Row, params};
use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Submitted (`agentrun submit`), or handed back to the queue: a worker takes it.
    Queued,
    Running,
    Completed,
    AwaitingApproval,
    Escalated,
    BudgetExhausted,
    Interrupted,
    Failed,
}

impl RunStatus {
    pub const ALL: [RunStatus; 8] = [
        RunStatus::Running,
        RunStatus::Completed,
        RunStatus::AwaitingApproval,
        RunStatus::Escalated,
        RunStatus::BudgetExhausted,
        RunStatus::Interrupted,
        RunStatus::Failed,
        RunStatus::Queued,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::AwaitingApproval => "awaiting_approval",
            RunStatus::Escalated => "escalated",
            RunStatus::BudgetExhausted => "budget_exhausted",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything needed to create a run.
pub struct NewRun<'a> {
    pub id: RunId,
    pub task: &'a str,
    pub task_path: &'a str,
    /// JSON config snapshot (tools.toml, prompts, model specs) as at start.
    pub snapshot: &'a str,
    /// Scripted-model texts by model spec, kept beside the snapshot.
    pub scripts: &'a BTreeMap<String, String>,
    pub max_steps: u32,
    pub max_tokens: u64,
    /// The opening transcript (system prompt, task), step 0.
    pub messages: &'a [Message],
    /// Initial loop state JSON.
    pub state: &'a str,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: RunId,
    pub task: String,
    pub task_path: String,
    pub status: RunStatus,
    pub max_steps: u32,
    pub max_tokens: u64,
    pub steps: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub answer: Option<String>,
    pub error: Option<String>,
    pub lease_pid: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// The worker holding the run (`agentrun worker --name`), if a worker holds it.
    pub worker: Option<String>,
    /// The lease's last heartbeat (ms since the epoch).
    pub heartbeat: Option<i64>,
}

/// Proof that this process holds a run. Writes carry `token`; a higher token taken by
/// another process makes them fail with [`StoreError::LeaseLost`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub run: RunId,
    pub token: i64,
}

const RUN_COLUMNS: &str = "id, task, task_path, status, max_steps, max_tokens, steps, \
     input_tokens, output_tokens, answer, error, lease_pid, created_at, updated_at, \
     lease_worker, lease_heartbeat";

/// A lease whose holder has not written for this long is considered abandoned even if
/// a process with its pid exists (the pid may have been reused, or the holder hangs).
/// The driver heartbeats far more often than this; see [`SqliteStore::with_lease_ttl`].
pub const LEASE_TTL_MS: i64 = 60_000;

impl SqliteStore {
    /// Creates a run, already leased to this process, with its opening messages.
    pub fn create_run(&self, new: &NewRun<'_>) -> Result<Lease> {
        let now = now_ms();
        let pid = std::process::id() as i64;
        self.write(|tx| {
            tx.execute(
                "INSERT INTO runs (id, task, task_path, status, max_steps, max_tokens,
                    lease_pid, lease_token, lease_heartbeat, lease_since, created_at, updated_at)
                 VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, 1, ?7, ?7, ?7, ?7)",
                params![
                    new.id.0,
                    new.task,
                    new.task_path,
                    new.max_steps,
                    new.max_tokens as i64,
                    pid,
                    now
                ],
            )?;
            tx.execute(
                "INSERT INTO run_snapshots (run_id, snapshot) VALUES (?1, ?2)",
                params![new.id.0, new.snapshot],
            )?;
            insert_scripts(tx, &new.id, new.scripts)?;
            super::journal::insert_messages(tx, &new.id, 0, 0, new.messages)?;
            tx.execute(
                "INSERT INTO checkpoints (run_id, step, last_seq, state) VALUES (?1, 0, ?2, ?3)",
                params![new.id.0, new.messages.len() as i64 - 1, new.state],
            )?;
            Ok(())
        })?;
        Ok(Lease {
            run: new.id.clone(),
            token: 1,
        })
    }

    /// Takes the lease of a run for this process. Refused while another live process
    /// holds it; a holder that died (no such pid) or went silent is replaced at once.
    pub fn acquire(&self, id: &RunId) -> Result<Lease> {
        let now = now_ms();
        let me = std::process::id() as i64;
        self.write(|tx| {
            let (pid, token, heartbeat, since): (Option<i64>, i64, Option<i64>, Option<i64>) = tx
                .query_row(
                    "SELECT lease_pid, lease_token, lease_heartbeat, lease_since FROM runs WHERE id = ?1",
                    [&id.0],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()?
                .ok_or_else(|| StoreError::RunNotFound(id.0.clone()))?;
            if let Some(pid) = pid {
                let fresh = heartbeat.is_some_and(|h| now - h < self.lease_ttl_ms);
                if pid != me && fresh && process_alive(pid) {
                    return Err(StoreError::LeaseHeld {
                        run: id.clone(),
                        pid,
                        since: format_time(since.unwrap_or(now)),
                    });
                }
            }
            tx.execute(
                "UPDATE runs SET lease_pid = ?2, lease_token = ?3, lease_heartbeat = ?4,
                    lease_since = ?4, lease_worker = NULL WHERE id = ?1",
                params![id.0, me, token + 1, now],
            )?;
            Ok(Lease {
                run: id.clone(),
                token: token + 1,
            })
        })
    }

    /// Queues a run for the workers (`agentrun submit`): like [`SqliteStore::create_run`]
    /// but `queued`, held by nobody, and marked as the queue's (see [`SqliteStore::claim`]).
    pub fn submit_run(&self, new: &NewRun<'_>) -> Result<()> {
        let now = now_ms();
        self.write(|tx| {
            tx.execute(
                "INSERT INTO runs (id, task, task_path, status, max_steps, max_tokens,
                    lease_token, queue, created_at, updated_at)
                 VALUES (?1, ?2, ?3, 'queued', ?4, ?5, 0, 1, ?6, ?6)",
                params![
                    new.id.0,
                    new.task,
                    new.task_path,
                    new.max_steps,
                    new.max_tokens as i64,
                    now
                ],
            )?;
            tx.execute(
                "INSERT INTO run_snapshots (run_id, snapshot) VALUES (?1, ?2)",
                params![new.id.0, new.snapshot],
            )?;
            insert_scripts(tx, &new.id, new.scripts)?;
            super::journal::insert_messages(tx, &new.id, 0, 0, new.messages)?;
            tx.execute(
                "INSERT INTO checkpoints (run_id, step, last_seq, state) VALUES (?1, 0, ?2, ?3)",
                params![new.id.0, new.messages.len() as i64 - 1, new.state],
            )?;
            Ok(())
        })
    }

    /// Takes the oldest queue run that is `queued`, or `running` under a lease whose
    /// heartbeat is older than `ttl` (its worker died or hangs), for `worker`: the
    /// token goes up (fencing the old holder) and the run becomes `running`. Liveness
    /// is the heartbeat alone, never a pid or a host. `BEGIN IMMEDIATE` makes the
    /// claim atomic among processes (PostgreSQL uses `FOR UPDATE SKIP LOCKED`).
    pub fn claim(&self, worker: &str, ttl: std::time::Duration) -> Result<Option<Lease>> {
        let now = now_ms();
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let me = std::process::id() as i64;
        self.write(|tx| {
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
        let conn = self.lock();
        Ok(conn.query_row(
            "SELECT COALESCE(SUM(status = 'queued'), 0), COALESCE(SUM(status = 'running'), 0)
             FROM runs WHERE queue = 1 AND status IN ('queued', 'running')",
            [],
            |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
        )?)
    }

    /// Gives the run up (the process is about to exit).
    pub fn release(&self, lease: &Lease) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "UPDATE runs SET lease_pid = NULL, lease_worker = NULL WHERE id = ?1 AND lease_token = ?2",
                params![lease.run.0, lease.token],
            )?;
            Ok(())
        })
    }

    /// Refreshes the lease's heartbeat; fails when another process took the run.
    /// Not fsynced: a heartbeat only says the holder is alive now, which a power cut
    /// makes false anyway.
    pub fn heartbeat(&self, lease: &Lease) -> Result<()> {
        self.write_as(super::Durability::Process, |tx| check_lease(tx, lease))
    }

    /// Sets a run's status outside a step commit (interrupted, failed, escalated).
    pub fn set_status(&self, lease: &Lease, status: RunStatus, error: Option<&str>) -> Result<()> {
        self.write(|tx| {
            check_lease(tx, lease)?;
            tx.execute(
                "UPDATE runs SET status = ?2, error = ?3, updated_at = ?4 WHERE id = ?1",
                params![lease.run.0, status.as_str(), error, now_ms()],
            )?;
            Ok(())
        })
    }

    /// Raises (or lowers) a run's budgets, e.g. from `resume --max-steps`.
    pub fn set_budgets(&self, lease: &Lease, max_steps: u32, max_tokens: u64) -> Result<()> {
        self.write(|tx| {
            check_lease(tx, lease)?;
            tx.execute(
                "UPDATE runs SET max_steps = ?2, max_tokens = ?3 WHERE id = ?1",
                params![lease.run.0, max_steps, max_tokens as i64],
            )?;
            Ok(())
        })
    }

    pub fn run(&self, id: &RunId) -> Result<RunRow> {
        let conn = self.lock();
        conn.query_row(
            &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"),
            [&id.0],
            run_row,
        )
        .optional()?
        .ok_or_else(|| StoreError::RunNotFound(id.0.clone()))?
    }

    /// The run's config snapshot JSON, as stored at start.
    pub fn snapshot(&self, id: &RunId) -> Result<String> {
        let conn = self.lock();
        conn.query_row(
            "SELECT snapshot FROM run_snapshots WHERE run_id = ?1",
            [&id.0],
            |r| r.get(0),
        )
        .optional()?
        .ok_or_else(|| StoreError::RunNotFound(id.0.clone()))
    }

    /// The run's scripts by model spec.
    pub fn scripts(&self, id: &RunId) -> Result<BTreeMap<String, String>> {
        let conn = self.lock();
        let mut stmt =
            conn.prepare_cached("SELECT spec, text FROM run_scripts WHERE run_id = ?1")?;
        let rows = stmt.query_map([&id.0], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// The `models` of the run's config snapshot (a JSON array), picked out by
    /// SQLite's JSON functions: `runs show` needs only this from it (issue 14).
    pub fn snapshot_models(&self, id: &RunId) -> Result<Option<String>> {
        let conn = self.lock();
        let models: Option<Option<String>> = conn
            .prepare_cached(
                "SELECT json_extract(snapshot, '$.models') FROM run_snapshots WHERE run_id = ?1",
            )?
            .query_row([&id.0], |r| r.get(0))
            .optional()?;
        Ok(models.flatten())
    }

    /// Resolves a full id or a unique prefix of one.
    pub fn find_run(&self, prefix: &str) -> Result<RunId> {
        let conn = self.lock();
        let Some(pattern) = RunId::prefix_pattern(prefix) else {
            return Err(StoreError::RunNotFound(prefix.to_string()));
        };
        let mut stmt =
            conn.prepare("SELECT id FROM runs WHERE id LIKE ?1 ESCAPE '\\' ORDER BY id LIMIT 6")?;
        let ids: Vec<String> = stmt
            .query_map([pattern], |r| r.get(0))?
            .collect::<std::result::Result<_, _>>()?;
        if ids.iter().any(|i| i == prefix) {
            return Ok(RunId(prefix.to_string()));
        }
        match ids.len() {
            0 => Err(StoreError::RunNotFound(prefix.to_string())),
            1 => Ok(RunId(ids[0].clone())),
            _ => Err(StoreError::AmbiguousRun {
                prefix: prefix.to_string(),
                matches: ids.join(", "),
            }),
        }
    }

    /// Runs, newest first, optionally only those with `status`.
    pub fn list_runs(&self, status: Option<RunStatus>) -> Result<Vec<RunRow>> {
        self.recent_runs(status, None)
    }

    /// The `limit` newest runs (all with `None`), optionally only those with `status`.
    ///
    /// Walks `runs_by_created` backwards (its entries are `(created_at, rowid)`, so
    /// the order needs no sort) and stops after `limit` matches: the cost is that of
    /// the rows returned, not of the table — `runs list --limit 20` on 100,000 runs
    /// reads 20 rows (issue 14; `tests/it/scale.rs` pins the plan).
    pub fn recent_runs(
        &self,
        status: Option<RunStatus>,
        limit: Option<u32>,
    ) -> Result<Vec<RunRow>> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(RECENT_RUNS)?;
        let limit = limit.map_or(-1, i64::from);
        let rows = stmt.query_map(params![status.map(RunStatus::as_str), limit], run_row)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row??);
        }
        Ok(out)
    }

    /// SQLite's plan for [`SqliteStore::recent_runs`], one line per step: for tests that
    /// pin that it reads the index in order rather than sorting the table.
    pub fn recent_runs_plan(&self) -> Result<Vec<String>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {RECENT_RUNS}"))?;
        let rows = stmt.query_map(params![Option::<&str>::None, 20], |r| r.get::<_, String>(3))?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }
}

/// A negative LIMIT is no limit in SQLite.
const RECENT_RUNS: &str = "SELECT id, task, task_path, status, max_steps, max_tokens, steps, \
     input_tokens, output_tokens, answer, error, lease_pid, created_at, updated_at, \
     lease_worker, lease_heartbeat FROM runs INDEXED BY runs_by_created WHERE (?1 IS NULL OR status = ?1) \
     ORDER BY created_at DESC, rowid DESC LIMIT ?2";

/// Fails with `LeaseLost` unless `lease` is still the run's current lease; refreshes
/// the heartbeat as a side effect (every write proves the holder is alive).
pub(super) fn check_lease(tx: &rusqlite::Connection, lease: &Lease) -> Result<()> {
    let n = tx
        .prepare_cached("UPDATE runs SET lease_heartbeat = ?3 WHERE id = ?1 AND lease_token = ?2")?
        .execute(params![lease.run.0, lease.token, now_ms()])?;
    if n == 0 {
        return Err(StoreError::LeaseLost(lease.run.clone()));
    }
    Ok(())
}

/// Fails with `LeaseLost` unless `lease` is still the run's current lease, without
/// refreshing the heartbeat (for a write a heartbeat-refreshing commit soon follows).
pub(super) fn holds_lease(tx: &rusqlite::Connection, lease: &Lease) -> Result<()> {
    let held = tx
        .prepare_cached("SELECT 1 FROM runs WHERE id = ?1 AND lease_token = ?2")?
        .exists(params![lease.run.0, lease.token])?;
    if !held {
        return Err(StoreError::LeaseLost(lease.run.clone()));
    }
    Ok(())
}

fn run_row(r: &Row<'_>) -> rusqlite::Result<Result<RunRow>> {
    let id: String = r.get(0)?;
    let status: String = r.get(3)?;
    let Some(status) = RunStatus::parse(&status) else {
        return Ok(Err(StoreError::Corrupt {
            run: id,
            message: format!("unknown status `{status}`"),
        }));
    };
    Ok(Ok(RunRow {
        id: RunId(id),
        task: r.get(1)?,
        task_path: r.get(2)?,
        status,
        max_steps: r.get(4)?,
        max_tokens: r.get::<_, i64>(5)? as u64,
        steps: r.get(6)?,
        input_tokens: r.get::<_, i64>(7)? as u64,
        output_tokens: r.get::<_, i64>(8)? as u64,
        answer: r.get(9)?,
        error: r.get(10)?,
        lease_pid: r.get(11)?,
        created_at: r.get(12)?,
        updated_at: r.get(13)?,
        worker: r.get(14)?,
        heartbeat: r.get(15)?,
    }))
}

/// Whether a process with this pid exists (on this machine).
pub(super) fn process_alive(pid: i64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 performs no action; it only checks that the pid exists
    // and we may signal it.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn format_time(ms: i64) -> String {
    crate::timefmt::rfc3339(ms)
}

/// Stores a run's scripts beside its snapshot (migration 5).
pub(super) fn insert_scripts(
    tx: &rusqlite::Connection,
    run: &RunId,
    scripts: &BTreeMap<String, String>,
) -> Result<()> {
    for (spec, text) in scripts {
        tx.execute(
            "INSERT INTO run_scripts (run_id, spec, text) VALUES (?1, ?2, ?3)",
            params![run.0, spec, text],
        )?;
    }
    Ok(())
}

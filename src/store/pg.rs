//! The PostgreSQL backend (issue 17): the same contract as the SQLite store (DESIGN
//! §5), on a server several machines share, so runs can be queued and taken by workers
//! anywhere (`agentrun submit` / `agentrun worker`).
//!
//! **Shape.** [`PgStore`] has the SQLite store's synchronous methods, so every call
//! site (the driver, the commands) is the same for both. Underneath is `tokio-postgres`
//! through its blocking facade, the `postgres` crate, which runs a tokio runtime of its
//! own and `block_on`s each query. That is not allowed on a thread that is already
//! inside a runtime (the driver's), so the connection lives on a dedicated thread and
//! each store call sends it a job and blocks until the answer comes back: exactly how
//! the driver already blocks on an SQLite call. One store is one connection; a worker
//! runs each of its `--concurrency N` slots with a store of its own, so N runs commit
//! on N connections at once and no pool is needed.
//!
//! **Transactions and fencing.** Every write is one transaction (READ COMMITTED) whose
//! first statement is the lease check, an `UPDATE` of the run's row: it takes that
//! row's lock, so two writers of one run are serialised on it for the whole
//! transaction, and a writer whose token is stale updates nothing and fails with
//! [`StoreError::LeaseLost`] before it writes anything (the fencing SQLite gets from
//! `BEGIN IMMEDIATE` plus the same check). `acquire` and the queue's claims lock the
//! row with `FOR UPDATE` (`SKIP LOCKED` when claiming) before they raise the token.
//!
//! **Durability.** [`Durability::PowerCut`] commits are ordinary commits
//! (`synchronous_commit = on`: the WAL is flushed before COMMIT returns).
//! [`Durability::Process`] commits set `synchronous_commit = off` for that transaction:
//! like SQLite's NORMAL they survive this process being killed at once (the server has
//! them), and a server crash loses at most a suffix of them — PostgreSQL's WAL is
//! written in order, so the next flushed commit makes every earlier one durable.
//!
//! **Lease liveness** is the heartbeat alone: a lease whose heartbeat is older than the
//! TTL is free, whoever and wherever the holder was. As a shortcut for `resume` right
//! after a crash on the same machine, a holder on this host (same `lease_host`) whose
//! pid no longer exists is replaced at once, as on SQLite; a pid on another host is
//! never looked at.
//!
//! Connection strings can carry a password: it is never stored, and [`PgStore::path`]
//! (what messages show) drops it.

use super::detail::EscalationDetail;
use super::{
    CallRecord, CallStatus, Durability, EscalationId, EscalationKind, EscalationRow, JournalEntry,
    Lease, NewEscalation, NewRun, Resolution, Result, RunId, RunRow, RunStatus, StepCommit,
    StoreError, StoredEvent, StoredMessage, now_ms,
};
use crate::model::{Message, ModelResponse, Role};
use crate::trace::TraceEvent;
use postgres::types::ToSql;
use postgres::{Client, NoTls, Row, Statement};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// Schema migrations, applied in order and recorded in `schema_version`. Append-only.
const MIGRATIONS: &[&str] = &[
    // 1: the SQLite schema as of its version 3, in PostgreSQL types, plus the lease's
    // host (see the module doc) and an insertion sequence for a stable list order.
    r#"
    CREATE TABLE runs (
        id              TEXT PRIMARY KEY,
        seq             BIGSERIAL NOT NULL,
        task            TEXT NOT NULL,
        task_path       TEXT NOT NULL,
        status          TEXT NOT NULL,
        max_steps       BIGINT NOT NULL,
        max_tokens      BIGINT NOT NULL,
        steps           BIGINT NOT NULL DEFAULT 0,
        input_tokens    BIGINT NOT NULL DEFAULT 0,
        output_tokens   BIGINT NOT NULL DEFAULT 0,
        answer          TEXT,
        error           TEXT,
        lease_pid       BIGINT,
        lease_host      TEXT,
        lease_token     BIGINT NOT NULL DEFAULT 0,
        lease_heartbeat BIGINT,
        lease_since     BIGINT,
        created_at      BIGINT NOT NULL,
        updated_at      BIGINT NOT NULL
    );
    CREATE INDEX runs_by_created ON runs (created_at DESC, seq DESC);
    CREATE TABLE run_snapshots (
        run_id   TEXT PRIMARY KEY REFERENCES runs(id),
        snapshot TEXT NOT NULL
    );
    CREATE TABLE messages (
        run_id  TEXT NOT NULL REFERENCES runs(id),
        seq     BIGINT NOT NULL,
        step    BIGINT NOT NULL,
        role    TEXT NOT NULL,
        content TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE checkpoints (
        run_id   TEXT PRIMARY KEY REFERENCES runs(id),
        step     BIGINT NOT NULL,
        last_seq BIGINT NOT NULL,
        state    TEXT NOT NULL
    );
    CREATE TABLE model_turns (
        run_id   TEXT NOT NULL REFERENCES runs(id),
        step     BIGINT NOT NULL,
        response TEXT NOT NULL,
        PRIMARY KEY (run_id, step)
    );
    CREATE TABLE tool_calls (
        run_id     TEXT NOT NULL REFERENCES runs(id),
        call_id    TEXT NOT NULL,
        step       BIGINT NOT NULL,
        idx        BIGINT NOT NULL,
        tool       TEXT NOT NULL,
        args       TEXT NOT NULL,
        status     TEXT NOT NULL,
        started    BOOLEAN NOT NULL DEFAULT false,
        attempts   BIGINT NOT NULL DEFAULT 0,
        result     TEXT,
        is_error   BOOLEAN NOT NULL DEFAULT false,
        via        TEXT,
        PRIMARY KEY (run_id, step, call_id)
    );
    CREATE TABLE events (
        id     BIGSERIAL PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id),
        step   BIGINT NOT NULL,
        kind   TEXT NOT NULL,
        data   TEXT NOT NULL,
        at     BIGINT NOT NULL
    );
    CREATE INDEX events_by_run ON events (run_id, id);
    CREATE TABLE escalations (
        id          BIGSERIAL PRIMARY KEY,
        run_id      TEXT NOT NULL REFERENCES runs(id),
        step        BIGINT NOT NULL,
        kind        TEXT NOT NULL,
        status      TEXT NOT NULL,
        summary     TEXT NOT NULL,
        detail      TEXT NOT NULL,
        created_at  BIGINT NOT NULL,
        resolved_at BIGINT,
        resolved_by TEXT,
        resolution  TEXT,
        applied     BOOLEAN NOT NULL DEFAULT false
    );
    CREATE INDEX escalations_by_run ON escalations (run_id, status);
    "#,
    // 2: the run queue (as SQLite's migration 4).
    r#"
    ALTER TABLE runs ADD COLUMN queue BOOLEAN NOT NULL DEFAULT false;
    ALTER TABLE runs ADD COLUMN lease_worker TEXT;
    CREATE INDEX runs_claimable ON runs (created_at, seq) WHERE queue AND status IN ('queued', 'running');
    "#,
    // 3: scripts beside the snapshot, not in it (as SQLite's migration 5).
    r#"
    CREATE TABLE run_scripts (
        run_id TEXT NOT NULL REFERENCES runs(id),
        spec   TEXT NOT NULL,
        text   TEXT NOT NULL,
        PRIMARY KEY (run_id, spec)
    );
    INSERT INTO run_scripts (run_id, spec, text)
        SELECT s.run_id, j.key, j.value
        FROM run_snapshots s, jsonb_each_text(s.snapshot::jsonb -> 'scripts') j;
    UPDATE run_snapshots SET snapshot = (snapshot::jsonb - 'scripts')::text
        WHERE snapshot::jsonb -> 'scripts' IS NOT NULL;
    "#,
];

/// Rows per read when walking a whole run (`runs show`, export): memory stays flat
/// however long the run.
const PAGE: u32 = 512;

/// A job for the connection thread.
type Job = Box<dyn FnOnce(&mut Conn) + Send>;

/// The connection thread's state: the client (reconnected when the server dropped
/// it) and the statements prepared on it.
struct Conn {
    url: String,
    client: Option<Client>,
    statements: HashMap<&'static str, Statement>,
}

impl Conn {
    fn client(&mut self) -> Result<&mut Client> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            self.statements.clear();
            self.client = Some(connect(&self.url)?);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }
}

fn connect(url: &str) -> Result<Client> {
    Client::connect(url, NoTls).map_err(pg)
}

/// A transaction with the connection's statement cache.
struct Tx<'c> {
    tx: postgres::Transaction<'c>,
    statements: &'c mut HashMap<&'static str, Statement>,
}

impl Tx<'_> {
    fn stmt(&mut self, sql: &'static str) -> Result<Statement> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.tx.prepare(sql).map_err(pg)?;
        self.statements.insert(sql, s.clone());
        Ok(s)
    }
    fn exec(&mut self, sql: &'static str, p: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        let s = self.stmt(sql)?;
        self.tx.execute(&s, p).map_err(pg)
    }
    fn opt(&mut self, sql: &'static str, p: &[&(dyn ToSql + Sync)]) -> Result<Option<Row>> {
        let s = self.stmt(sql)?;
        self.tx.query_opt(&s, p).map_err(pg)
    }
    fn one(&mut self, sql: &'static str, p: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        let s = self.stmt(sql)?;
        self.tx.query_one(&s, p).map_err(pg)
    }
}

/// Reads on the connection thread: the statement cache outside a transaction.
struct Reader<'c> {
    client: &'c mut Client,
    statements: &'c mut HashMap<&'static str, Statement>,
}

impl Reader<'_> {
    fn query(&mut self, sql: &'static str, p: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        let s = match self.statements.get(sql) {
            Some(s) => s.clone(),
            None => {
                let s = self.client.prepare(sql).map_err(pg)?;
                self.statements.insert(sql, s.clone());
                s
            }
        };
        self.client.query(&s, p).map_err(pg)
    }
    fn opt(&mut self, sql: &'static str, p: &[&(dyn ToSql + Sync)]) -> Result<Option<Row>> {
        Ok(self.query(sql, p)?.into_iter().next())
    }
}

pub struct PgStore {
    /// The URL without its password, for messages.
    display: PathBuf,
    jobs: mpsc::Sender<Job>,
    lease_ttl_ms: i64,
    host: String,
}

fn pg(e: postgres::Error) -> StoreError {
    // `{:#}`-style detail: the server's message (e.g. a constraint) when there is one.
    let text = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    };
    StoreError::Postgres(text)
}

fn gone() -> StoreError {
    StoreError::Postgres("the database connection thread stopped".into())
}

/// The URL with any password replaced, so messages never show it.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let tail = match tail.find("password=") {
        Some(i) => {
            let end = tail[i..].find('&').map_or(tail.len(), |j| i + j);
            format!("{}password=[redacted]{}", &tail[..i], &tail[end..])
        }
        None => tail.to_string(),
    };
    match auth.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            let pass = if userinfo.contains(':') {
                ":[redacted]"
            } else {
                ""
            };
            format!("{scheme}://{user}{pass}@{host}{tail}")
        }
        None => format!("{scheme}://{auth}{tail}"),
    }
}

/// This machine's name for `lease_host` (see the module doc: only ever compared with
/// itself, to skip the TTL for a dead local holder).
fn host_id() -> String {
    std::fs::read_to_string("/etc/machine-id")
        .or_else(|_| std::fs::read_to_string("/proc/sys/kernel/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://…`), and creates or migrates its
    /// schema. The connection is made before this returns, so a wrong URL, a refused
    /// connection or bad credentials are reported here, as an SQLite file's problems
    /// are at open.
    pub fn open(url: &str) -> Result<PgStore> {
        let display = PathBuf::from(redact_url(url));
        let open_err = |e: StoreError| StoreError::Open {
            path: display.clone(),
            message: match e {
                StoreError::Postgres(m) => m,
                other => other.to_string(),
            },
        };
        let client = connect(url).map_err(open_err)?;
        let (tx, rx) = mpsc::channel::<Job>();
        let mut conn = Conn {
            url: url.to_string(),
            client: Some(client),
            statements: HashMap::new(),
        };
        std::thread::Builder::new()
            .name("agentrun-postgres".into())
            .spawn(move || {
                // Ends when the store (the only sender) is dropped.
                while let Ok(job) = rx.recv() {
                    job(&mut conn);
                }
            })
            .map_err(|e| StoreError::Open {
                path: display.clone(),
                message: format!("cannot start the connection thread: {e}"),
            })?;
        let store = PgStore {
            display: display.clone(),
            jobs: tx,
            lease_ttl_ms: super::runs::LEASE_TTL_MS,
            host: host_id(),
        };
        store.migrate().map_err(|e| match e {
            e @ StoreError::TooNew { .. } => e,
            e => open_err(e),
        })?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.display
    }

    /// The busy timeout is SQLite's; a PostgreSQL writer waits on row locks, which
    /// the lease makes short.
    pub fn with_busy_timeout(self, _timeout: Duration) -> Result<PgStore> {
        Ok(self)
    }

    pub fn with_lease_ttl(mut self, ttl: Duration) -> PgStore {
        self.lease_ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self
    }

    /// Runs `f` on the connection thread and waits for its answer.
    fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (reply, answer) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |conn: &mut Conn| {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(conn)))
                .unwrap_or_else(|_| Err(gone()));
            let _ = reply.send(r);
        });
        self.jobs.send(job).map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }

    /// Runs `f` inside one transaction at the given durability.
    fn write_as<T: Send + 'static>(
        &self,
        durability: Durability,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.call(move |conn| {
            conn.client()?;
            let Conn {
                client, statements, ..
            } = conn;
            let client = client.as_mut().expect("connected above");
            let tx = client.transaction().map_err(pg)?;
            let mut tx = Tx { tx, statements };
            if durability == Durability::Process {
                tx.tx
                    .batch_execute("SET LOCAL synchronous_commit = off")
                    .map_err(pg)?;
            }
            let value = f(&mut tx)?;
            tx.tx.commit().map_err(pg)?;
            Ok(value)
        })
    }

    fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.write_as(Durability::PowerCut, f)
    }

    /// Runs read-only `f` on the connection thread (one statement: its own snapshot).
    fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Reader<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.call(move |conn| {
            conn.client()?;
            let Conn {
                client, statements, ..
            } = conn;
            let client = client.as_mut().expect("connected above");
            f(&mut Reader { client, statements })
        })
    }

    fn migrate(&self) -> Result<()> {
        let display = self.display.clone();
        self.call(move |conn| {
            let client = conn.client()?;
            let mut tx = client.transaction().map_err(pg)?;
            // One migrator at a time, across every process and machine.
            tx.batch_execute(
                "SELECT pg_advisory_xact_lock(1701); \
                 CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL); \
                 INSERT INTO schema_version SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM schema_version);",
            )
            .map_err(pg)?;
            let from: i64 = tx
                .query_one("SELECT version FROM schema_version", &[])
                .map_err(pg)?
                .get(0);
            let known = MIGRATIONS.len() as i64;
            if from > known {
                return Err(StoreError::TooNew {
                    path: display,
                    found: from,
                    known,
                });
            }
            for (i, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
                tx.batch_execute(sql).map_err(pg)?;
                tx.execute("UPDATE schema_version SET version = $1", &[&(i as i64 + 1)])
                    .map_err(pg)?;
            }
            tx.commit().map_err(pg)?;
            conn.statements.clear();
            Ok(())
        })
    }

    // ---- runs -------------------------------------------------------------------

    pub fn create_run(&self, new: &NewRun<'_>) -> Result<Lease> {
        let now = now_ms();
        let pid = std::process::id() as i64;
        let host = self.host.clone();
        let id = new.id.clone();
        let task = new.task.to_string();
        let task_path = new.task_path.to_string();
        let snapshot = new.snapshot.to_string();
        let scripts = new.scripts.clone();
        let (max_steps, max_tokens) = (i64::from(new.max_steps), new.max_tokens as i64);
        let messages = encode_messages(&id, new.messages)?;
        let state = new.state.to_string();
        self.write(move |tx| {
            tx.exec(
                "INSERT INTO runs (id, task, task_path, status, max_steps, max_tokens,
                    lease_pid, lease_host, lease_token, lease_heartbeat, lease_since, created_at, updated_at)
                 VALUES ($1, $2, $3, 'running', $4, $5, $6, $7, 1, $8, $8, $8, $8)",
                &[&id.0, &task, &task_path, &max_steps, &max_tokens, &pid, &host, &now],
            )?;
            tx.exec(
                "INSERT INTO run_snapshots (run_id, snapshot) VALUES ($1, $2)",
                &[&id.0, &snapshot],
            )?;
            insert_scripts(tx, &id, &scripts)?;
            insert_messages(tx, &id, 0, 0, &messages)?;
            let last = messages.len() as i64 - 1;
            tx.exec(
                "INSERT INTO checkpoints (run_id, step, last_seq, state) VALUES ($1, 0, $2, $3)",
                &[&id.0, &last, &state],
            )?;
            Ok(())
        })?;
        Ok(Lease {
            run: new.id.clone(),
            token: 1,
        })
    }

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
                let dead_here = local && !super::runs::process_alive(pid);
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

    pub fn submit_run(&self, new: &NewRun<'_>) -> Result<()> {
        let now = now_ms();
        let id = new.id.clone();
        let task = new.task.to_string();
        let task_path = new.task_path.to_string();
        let snapshot = new.snapshot.to_string();
        let scripts = new.scripts.clone();
        let (max_steps, max_tokens) = (i64::from(new.max_steps), new.max_tokens as i64);
        let messages = encode_messages(&id, new.messages)?;
        let state = new.state.to_string();
        self.write(move |tx| {
            tx.exec(
                "INSERT INTO runs (id, task, task_path, status, max_steps, max_tokens,
                    lease_token, queue, created_at, updated_at)
                 VALUES ($1, $2, $3, 'queued', $4, $5, 0, true, $6, $6)",
                &[&id.0, &task, &task_path, &max_steps, &max_tokens, &now],
            )?;
            tx.exec(
                "INSERT INTO run_snapshots (run_id, snapshot) VALUES ($1, $2)",
                &[&id.0, &snapshot],
            )?;
            insert_scripts(tx, &id, &scripts)?;
            insert_messages(tx, &id, 0, 0, &messages)?;
            let last = messages.len() as i64 - 1;
            tx.exec(
                "INSERT INTO checkpoints (run_id, step, last_seq, state) VALUES ($1, 0, $2, $3)",
                &[&id.0, &last, &state],
            )?;
            Ok(())
        })
    }

    /// See `SqliteStore::claim`; here `FOR UPDATE SKIP LOCKED` lets many workers on
    /// many machines claim at once, each skipping rows another is claiming.
    pub fn claim(&self, worker: &str, ttl: Duration) -> Result<Option<Lease>> {
        let now = now_ms();
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let me = std::process::id() as i64;
        let host = self.host.clone();
        let worker = worker.to_string();
        self.write(move |tx| {
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
        })
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

    pub fn release(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.write(move |tx| {
            tx.exec(
                "UPDATE runs SET lease_pid = NULL, lease_worker = NULL
                 WHERE id = $1 AND lease_token = $2",
                &[&lease.run.0, &lease.token],
            )?;
            Ok(())
        })
    }

    pub fn heartbeat(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.write_as(Durability::Process, move |tx| check_lease(tx, &lease))
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
                    "SELECT id, task, task_path, status, max_steps, max_tokens, steps, input_tokens,
                        output_tokens, answer, error, lease_pid, created_at, updated_at,
                        lease_worker, lease_heartbeat
                     FROM runs WHERE id = $1",
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

    // ---- journal ----------------------------------------------------------------

    pub fn record_model_turn(
        &self,
        lease: &Lease,
        step: u32,
        response: &ModelResponse,
        events: &[TraceEvent],
    ) -> Result<()> {
        let json = serde_json::to_string(response).map_err(|e| corrupt(&lease.run, e))?;
        let calls: Vec<(String, String, String)> = response
            .message
            .tool_calls()
            .iter()
            .map(|c| (c.id.clone(), c.name.clone(), c.args.to_string()))
            .collect();
        let events = encode_events(&lease.run, events)?;
        let lease = lease.clone();
        let step = i64::from(step);
        self.write_as(Durability::Process, move |tx| {
            check_lease(tx, &lease)?;
            tx.exec(
                "INSERT INTO model_turns (run_id, step, response) VALUES ($1, $2, $3)
                 ON CONFLICT (run_id, step) DO UPDATE SET response = EXCLUDED.response",
                &[&lease.run.0, &step, &json],
            )?;
            for (i, (call_id, tool, args)) in calls.iter().enumerate() {
                tx.exec(
                    "INSERT INTO tool_calls (run_id, call_id, step, idx, tool, args, status)
                     VALUES ($1, $2, $3, $4, $5, $6, 'pending') ON CONFLICT DO NOTHING",
                    &[&lease.run.0, call_id, &step, &(i as i64), tool, args],
                )?;
            }
            insert_events(tx, &lease.run, step, &events)
        })
    }

    pub fn model_turn(&self, run: &RunId, step: u32) -> Result<Option<ModelResponse>> {
        let id = run.clone();
        let text: Option<String> = self.read(move |r| {
            Ok(r.opt(
                "SELECT response FROM model_turns WHERE run_id = $1 AND step = $2",
                &[&id.0, &i64::from(step)],
            )?
            .map(|row| row.get(0)))
        })?;
        text.map(|t| serde_json::from_str(&t).map_err(|e| corrupt(run, e)))
            .transpose()
    }

    pub fn mark_started(&self, lease: &Lease, step: u32, call_id: &str) -> Result<()> {
        let lease = lease.clone();
        let call_id = call_id.to_string();
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            tx.exec(
                "UPDATE tool_calls SET started = true WHERE run_id = $1 AND step = $2 AND call_id = $3",
                &[&lease.run.0, &i64::from(step), &call_id],
            )?;
            Ok(())
        })
    }

    pub fn record_outcome(
        &self,
        lease: &Lease,
        step: u32,
        record: &CallRecord,
        events: &[TraceEvent],
    ) -> Result<()> {
        let events = encode_events(&lease.run, events)?;
        let record = record.clone();
        let lease = lease.clone();
        self.write_as(Durability::Process, move |tx| {
            check_lease(tx, &lease)?;
            update_call(tx, &lease.run, i64::from(step), &record)?;
            insert_events(tx, &lease.run, i64::from(step), &events)
        })
    }

    pub fn commit_step(&self, lease: &Lease, c: &StepCommit<'_>) -> Result<Option<EscalationId>> {
        let lease = lease.clone();
        let step = i64::from(c.step);
        let messages = encode_messages(&lease.run, c.messages)?;
        let state = c.state.to_string();
        let (input, output) = (c.input_tokens as i64, c.output_tokens as i64);
        let status = c.status.as_str();
        let answer = c.answer.map(str::to_string);
        let error = c.error.map(str::to_string);
        let outcome = c.outcome.cloned();
        let events = encode_events(&lease.run, c.events)?;
        let escalation = c.escalation.map(encode_escalation);
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            if let Some(record) = &outcome {
                update_call(tx, &lease.run, step, record)?;
            }
            let last: i64 = tx
                .one(
                    "SELECT last_seq FROM checkpoints WHERE run_id = $1",
                    &[&lease.run.0],
                )?
                .get(0);
            insert_messages(tx, &lease.run, last + 1, step, &messages)?;
            tx.exec(
                "UPDATE checkpoints SET step = $2, last_seq = $3, state = $4 WHERE run_id = $1",
                &[&lease.run.0, &step, &(last + messages.len() as i64), &state],
            )?;
            tx.exec(
                "UPDATE runs SET steps = $2, input_tokens = $3, output_tokens = $4, status = $5,
                    answer = $6, error = $7, updated_at = $8 WHERE id = $1",
                &[
                    &lease.run.0,
                    &step,
                    &input,
                    &output,
                    &status,
                    &answer,
                    &error,
                    &now_ms(),
                ],
            )?;
            tx.exec(
                "DELETE FROM model_turns WHERE run_id = $1 AND step = $2",
                &[&lease.run.0, &step],
            )?;
            insert_events(tx, &lease.run, step, &events)?;
            let escalation = match &escalation {
                Some(e) => Some(insert_escalation(tx, &lease.run, e)?),
                None => None,
            };
            crate::fault::point("inside_commit");
            Ok(escalation)
        })
    }

    pub fn apply_resolution(
        &self,
        lease: &Lease,
        escalation: i64,
        step: u32,
        messages: &[Message],
        state: &str,
        status: Option<(RunStatus, &str)>,
    ) -> Result<()> {
        let lease = lease.clone();
        let messages = encode_messages(&lease.run, messages)?;
        let state = state.to_string();
        let status = status.map(|(s, r)| (s.as_str(), r.to_string()));
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            let last: i64 = tx
                .one(
                    "SELECT last_seq FROM checkpoints WHERE run_id = $1",
                    &[&lease.run.0],
                )?
                .get(0);
            insert_messages(tx, &lease.run, last + 1, i64::from(step), &messages)?;
            tx.exec(
                "UPDATE checkpoints SET last_seq = $2, state = $3 WHERE run_id = $1",
                &[&lease.run.0, &(last + messages.len() as i64), &state],
            )?;
            if let Some((status, reason)) = &status {
                tx.exec(
                    "UPDATE runs SET status = $2, error = $3, updated_at = $4 WHERE id = $1",
                    &[&lease.run.0, status, reason, &now_ms()],
                )?;
            }
            tx.exec(
                "UPDATE escalations SET applied = true WHERE id = $1",
                &[&escalation],
            )?;
            Ok(())
        })
    }

    pub fn record_events(&self, lease: &Lease, step: u32, events: &[TraceEvent]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let events = encode_events(&lease.run, events)?;
        let lease = lease.clone();
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            insert_events(tx, &lease.run, i64::from(step), &events)
        })
    }

    pub fn checkpoint(&self, run: &RunId) -> Result<(u32, String)> {
        let id = run.clone();
        self.read(move |r| {
            let row = r
                .opt(
                    "SELECT step, state FROM checkpoints WHERE run_id = $1",
                    &[&id.0],
                )?
                .ok_or_else(|| StoreError::RunNotFound(id.0.clone()))?;
            Ok((row.get::<_, i64>(0) as u32, row.get(1)))
        })
    }

    pub fn messages(&self, run: &RunId) -> Result<Vec<StoredMessage>> {
        let id = run.clone();
        let rows = self.read(move |r| {
            r.query(
                "SELECT seq, step, role, content FROM messages WHERE run_id = $1 ORDER BY seq",
                &[&id.0],
            )
        })?;
        rows.iter().map(|row| message_row(run, row)).collect()
    }

    /// Hands the messages to `f` in order. Unlike SQLite's, this reads them all first
    /// (the rows come from the connection thread); `f` runs on the caller's thread.
    pub fn each_message<E: From<StoreError>>(
        &self,
        run: &RunId,
        mut f: impl FnMut(StoredMessage) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        // A page at a time, so `runs show` of a long run stays flat in memory.
        let mut after = i64::MIN;
        loop {
            let page = self.messages_after(run, after, PAGE)?;
            let Some(last) = page.last() else {
                return Ok(());
            };
            after = last.seq;
            for m in page {
                f(m)?;
            }
        }
    }

    pub fn messages_after(
        &self,
        run: &RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredMessage>> {
        let id = run.clone();
        let rows = self.read(move |r| {
            r.query(
                "SELECT seq, step, role, content FROM messages
                 WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                &[&id.0, &after, &i64::from(limit)],
            )
        })?;
        rows.iter().map(|row| message_row(run, row)).collect()
    }

    pub fn events_after(
        &self,
        run: &RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, StoredEvent)>> {
        let id = run.clone();
        let rows = self.read(move |r| {
            r.query(
                "SELECT step, at, data, id FROM events
                 WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3",
                &[&id.0, &after, &i64::from(limit)],
            )
        })?;
        rows.iter()
            .map(|row| Ok((row.get(3), event_row(run, row)?)))
            .collect()
    }

    pub fn opening_and_since(&self, run: &RunId, from: u32) -> Result<Vec<StoredMessage>> {
        let id = run.clone();
        let from = i64::from(from);
        let rows = self.read(move |r| {
            r.query(
                "SELECT seq, step, role, content FROM messages
                 WHERE run_id = $1 AND (step = 0 OR step >= $2) ORDER BY seq",
                &[&id.0, &from],
            )
        })?;
        rows.iter().map(|row| message_row(run, row)).collect()
    }

    pub fn journal_between(&self, run: &RunId, first: u32, last: u32) -> Result<Vec<JournalEntry>> {
        self.journal_rows(run, i64::from(first), i64::from(last))
    }

    pub fn journal(&self, run: &RunId) -> Result<Vec<JournalEntry>> {
        self.journal_rows(run, 0, i64::MAX)
    }

    pub fn journal_for_step(&self, run: &RunId, step: u32) -> Result<Vec<JournalEntry>> {
        self.journal_rows(run, i64::from(step), i64::from(step))
    }

    fn journal_rows(&self, run: &RunId, from: i64, to: i64) -> Result<Vec<JournalEntry>> {
        let id = run.clone();
        let rows = self.read(move |r| {
            r.query(
                "SELECT step, idx, call_id, tool, args, status, started, attempts, result, is_error, via
                 FROM tool_calls WHERE run_id = $1 AND step BETWEEN $2 AND $3 ORDER BY step, idx",
                &[&id.0, &from, &to],
            )
        })?;
        rows.iter().map(|row| journal_row(run, row)).collect()
    }

    pub fn each_journal_entry<E: From<StoreError>>(
        &self,
        run: &RunId,
        mut f: impl FnMut(JournalEntry) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        // Step ranges (the key is by step; a step holds at most a turn's calls).
        let id = run.clone();
        let last: Option<i64> = self
            .read(move |r| {
                r.opt(
                    "SELECT max(step) FROM tool_calls WHERE run_id = $1",
                    &[&id.0],
                )
            })?
            .and_then(|row| row.get(0));
        let mut first = 0;
        while first <= last.unwrap_or(-1) {
            let to = first.saturating_add(i64::from(PAGE) - 1);
            for e in self.journal_rows(run, first, to)? {
                f(e)?;
            }
            first = to.saturating_add(1);
        }
        Ok(())
    }

    pub fn events(&self, run: &RunId) -> Result<Vec<StoredEvent>> {
        let id = run.clone();
        let rows = self.read(move |r| {
            r.query(
                "SELECT step, at, data FROM events WHERE run_id = $1 ORDER BY id",
                &[&id.0],
            )
        })?;
        rows.iter().map(|row| event_row(run, row)).collect()
    }

    pub fn each_event<E: From<StoreError>>(
        &self,
        run: &RunId,
        mut f: impl FnMut(StoredEvent) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let mut after = i64::MIN;
        loop {
            let page = self.events_after(run, after, PAGE)?;
            let Some((last, _)) = page.last() else {
                return Ok(());
            };
            after = *last;
            for (_, e) in page {
                f(e)?;
            }
        }
    }

    // ---- escalations ------------------------------------------------------------

    pub fn create_escalation(
        &self,
        lease: &Lease,
        new: &NewEscalation<'_>,
        pause_as: Option<RunStatus>,
        events: &[TraceEvent],
    ) -> Result<EscalationId> {
        let lease = lease.clone();
        let esc = encode_escalation(new);
        let blocked = match (new.kind().blocks_a_call(), new.detail.facts.call_id()) {
            (true, Some(call)) => Some(call.as_str().to_string()),
            _ => None,
        };
        let events = encode_events(&lease.run, events)?;
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            let id = insert_escalation(tx, &lease.run, &esc)?;
            if let Some(status) = pause_as {
                tx.exec(
                    "UPDATE runs SET status = $2, updated_at = $3 WHERE id = $1",
                    &[&lease.run.0, &status.as_str(), &now_ms()],
                )?;
            }
            if let Some(call) = &blocked {
                tx.exec(
                    "UPDATE tool_calls SET started = false WHERE run_id = $1 AND step = $2 AND call_id = $3",
                    &[&lease.run.0, &esc.step, call],
                )?;
            }
            insert_events(tx, &lease.run, esc.step, &events)?;
            Ok(id)
        })
    }

    pub fn escalation(&self, id: EscalationId) -> Result<EscalationRow> {
        let rows = self.read(move |r| {
            r.query(
                "SELECT id, run_id, step, kind, status, summary, detail, created_at, resolved_at,
                    resolved_by, resolution, applied FROM escalations WHERE id = $1",
                &[&id.0],
            )
        })?;
        let row = rows
            .first()
            .ok_or_else(|| StoreError::EscalationNotFound(id.to_string()))?;
        escalation_row(row)
    }

    pub fn list_escalations(&self, all: bool) -> Result<Vec<EscalationRow>> {
        let rows = self.read(move |r| {
            r.query(
                "SELECT id, run_id, step, kind, status, summary, detail, created_at, resolved_at,
                    resolved_by, resolution, applied FROM escalations
                 WHERE ($1 OR status = 'open') ORDER BY id DESC",
                &[&all],
            )
        })?;
        rows.iter().map(escalation_row).collect()
    }

    pub fn escalations_for_run(&self, run: &RunId) -> Result<Vec<EscalationRow>> {
        let id = run.clone();
        let rows = self.read(move |r| {
            r.query(
                "SELECT id, run_id, step, kind, status, summary, detail, created_at, resolved_at,
                    resolved_by, resolution, applied FROM escalations
                 WHERE run_id = $1 ORDER BY id",
                &[&id.0],
            )
        })?;
        rows.iter().map(escalation_row).collect()
    }

    pub fn resolve_escalation(
        &self,
        id: EscalationId,
        resolution: &Resolution,
        by: &str,
    ) -> Result<()> {
        let json = serde_json::to_string(resolution).map_err(|e| StoreError::Corrupt {
            run: String::new(),
            message: e.to_string(),
        })?;
        let by = by.to_string();
        self.write(move |tx| {
            let status: Option<String> = tx
                .opt(
                    "SELECT status FROM escalations WHERE id = $1 FOR UPDATE",
                    &[&id.0],
                )?
                .map(|r| r.get(0));
            match status.as_deref() {
                None => return Err(StoreError::EscalationNotFound(id.to_string())),
                Some("open") => {}
                Some(_) => return Err(StoreError::AlreadyResolved(id.0)),
            }
            tx.exec(
                "UPDATE escalations SET status = 'resolved', resolved_at = $2, resolved_by = $3,
                    resolution = $4 WHERE id = $1",
                &[&id.0, &now_ms(), &by, &json],
            )?;
            Ok(())
        })
    }

    pub fn mark_applied(&self, lease: &Lease, id: EscalationId) -> Result<()> {
        let lease = lease.clone();
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            tx.exec(
                "UPDATE escalations SET applied = true WHERE id = $1",
                &[&id.0],
            )?;
            Ok(())
        })
    }

    // ---- admin ------------------------------------------------------------------

    pub fn delete_run(&self, id: &RunId) -> Result<bool> {
        let id = id.clone();
        self.write(move |tx| {
            // Every table with a run_id column, from the catalogue (as on SQLite).
            let tables: Vec<String> = tx
                .tx
                .query(
                    "SELECT table_name::text FROM information_schema.columns
                     WHERE table_schema = current_schema() AND column_name = 'run_id'
                       AND table_name <> 'runs'",
                    &[],
                )
                .map_err(pg)?
                .iter()
                .map(|r| r.get(0))
                .collect();
            for table in tables {
                // Names come from the catalogue itself, never from input.
                tx.tx
                    .execute(
                        &format!("DELETE FROM \"{table}\" WHERE run_id = $1"),
                        &[&id.0],
                    )
                    .map_err(pg)?;
            }
            Ok(tx.exec("DELETE FROM runs WHERE id = $1", &[&id.0])? == 1)
        })
    }

    /// PostgreSQL keeps dead rows until a vacuum reclaims them; `vacuum` runs a plain
    /// `VACUUM` of the database (the server's own files are its administrator's domain:
    /// `VACUUM FULL` locks every table, which a shared database cannot afford).
    pub fn scrub(&self, vacuum: bool) -> Result<()> {
        if !vacuum {
            return Ok(());
        }
        self.read(|r| r.client.batch_execute("VACUUM").map_err(pg))
    }

    pub fn replace_snapshot(
        &self,
        lease: &Lease,
        snapshot: &str,
        scripts: &BTreeMap<String, String>,
    ) -> Result<()> {
        let lease = lease.clone();
        let snapshot = snapshot.to_string();
        let scripts = scripts.clone();
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            tx.exec(
                "UPDATE run_snapshots SET snapshot = $2 WHERE run_id = $1",
                &[&lease.run.0, &snapshot],
            )?;
            tx.exec("DELETE FROM run_scripts WHERE run_id = $1", &[&lease.run.0])?;
            insert_scripts(tx, &lease.run, &scripts)
        })
    }
}

const RECENT_RUNS: &str = "SELECT id, task, task_path, status, max_steps, max_tokens, steps, \
     input_tokens, output_tokens, answer, error, lease_pid, created_at, updated_at, \
     lease_worker, lease_heartbeat FROM runs WHERE ($1::text IS NULL OR status = $1) \
     ORDER BY created_at DESC, seq DESC LIMIT $2";

const RECENT_RUNS_PLAN: &str = "EXPLAIN SELECT id, task, task_path, status, max_steps, \
     max_tokens, steps, input_tokens, output_tokens, answer, error, lease_pid, created_at, \
     updated_at FROM runs WHERE ($1::text IS NULL OR status = $1) \
     ORDER BY created_at DESC, seq DESC LIMIT $2";

/// Fails with `LeaseLost` unless `lease` is still the run's current lease; refreshes
/// the heartbeat, and locks the run's row until the transaction ends.
fn check_lease(tx: &mut Tx<'_>, lease: &Lease) -> Result<()> {
    let n = tx.exec(
        "UPDATE runs SET lease_heartbeat = $3 WHERE id = $1 AND lease_token = $2",
        &[&lease.run.0, &lease.token, &now_ms()],
    )?;
    if n == 0 {
        return Err(StoreError::LeaseLost(lease.run.clone()));
    }
    Ok(())
}

/// A message as stored: role and content JSON.
type Encoded = (&'static str, String);

fn encode_messages(run: &RunId, messages: &[Message]) -> Result<Vec<Encoded>> {
    messages
        .iter()
        .map(|m| {
            let content = serde_json::to_string(&m.content).map_err(|e| corrupt(run, e))?;
            Ok((m.role.as_str(), content))
        })
        .collect()
}

fn insert_scripts(tx: &mut Tx<'_>, run: &RunId, scripts: &BTreeMap<String, String>) -> Result<()> {
    for (spec, text) in scripts {
        tx.exec(
            "INSERT INTO run_scripts (run_id, spec, text) VALUES ($1, $2, $3)",
            &[&run.0, spec, text],
        )?;
    }
    Ok(())
}

fn insert_messages(
    tx: &mut Tx<'_>,
    run: &RunId,
    first_seq: i64,
    step: i64,
    messages: &[Encoded],
) -> Result<()> {
    for (i, (role, content)) in messages.iter().enumerate() {
        tx.exec(
            "INSERT INTO messages (run_id, seq, step, role, content) VALUES ($1, $2, $3, $4, $5)",
            &[&run.0, &(first_seq + i as i64), &step, role, content],
        )?;
    }
    Ok(())
}

/// An event as stored: kind, data JSON, time.
type EncodedEvent = (&'static str, String, i64);

fn encode_events(run: &RunId, events: &[TraceEvent]) -> Result<Vec<EncodedEvent>> {
    let now = now_ms();
    events
        .iter()
        .map(|e| {
            let data = serde_json::to_string(e).map_err(|err| corrupt(run, err))?;
            Ok((e.kind(), data, e.at_ms().unwrap_or(now)))
        })
        .collect()
}

fn insert_events(tx: &mut Tx<'_>, run: &RunId, step: i64, events: &[EncodedEvent]) -> Result<()> {
    for (kind, data, at) in events {
        tx.exec(
            "INSERT INTO events (run_id, step, kind, data, at) VALUES ($1, $2, $3, $4, $5)",
            &[&run.0, &step, kind, data, at],
        )?;
    }
    Ok(())
}

fn update_call(tx: &mut Tx<'_>, run: &RunId, step: i64, r: &CallRecord) -> Result<()> {
    tx.exec(
        "UPDATE tool_calls SET status = $3, started = true, attempts = $4, result = $5,
            is_error = $6, via = $7 WHERE run_id = $1 AND call_id = $2 AND step = $8",
        &[
            &run.0,
            &r.call_id,
            &r.status.as_str(),
            &i64::from(r.attempts),
            &r.result.to_string(),
            &r.is_error,
            &r.via,
            &step,
        ],
    )?;
    Ok(())
}

/// An escalation to insert, owned (it crosses to the connection thread).
struct EncodedEscalation {
    step: i64,
    kind: &'static str,
    summary: String,
    detail: String,
}

fn encode_escalation(new: &NewEscalation<'_>) -> EncodedEscalation {
    EncodedEscalation {
        step: i64::from(new.step),
        kind: new.kind().as_str(),
        summary: new.summary.to_string(),
        detail: new.detail.to_json().to_string(),
    }
}

fn insert_escalation(tx: &mut Tx<'_>, run: &RunId, e: &EncodedEscalation) -> Result<EscalationId> {
    let row = tx.one(
        "INSERT INTO escalations (run_id, step, kind, status, summary, detail, created_at)
         VALUES ($1, $2, $3, 'open', $4, $5, $6) RETURNING id",
        &[&run.0, &e.step, &e.kind, &e.summary, &e.detail, &now_ms()],
    )?;
    Ok(EscalationId(row.get(0)))
}

fn run_row(r: &Row) -> Result<RunRow> {
    let id: String = r.get(0);
    let status: String = r.get(3);
    let Some(status) = RunStatus::parse(&status) else {
        return Err(StoreError::Corrupt {
            run: id,
            message: format!("unknown status `{status}`"),
        });
    };
    Ok(RunRow {
        id: RunId(id),
        task: r.get(1),
        task_path: r.get(2),
        status,
        max_steps: r.get::<_, i64>(4) as u32,
        max_tokens: r.get::<_, i64>(5) as u64,
        steps: r.get::<_, i64>(6) as u32,
        input_tokens: r.get::<_, i64>(7) as u64,
        output_tokens: r.get::<_, i64>(8) as u64,
        answer: r.get(9),
        error: r.get(10),
        lease_pid: r.get(11),
        created_at: r.get(12),
        updated_at: r.get(13),
        worker: r.get(14),
        heartbeat: r.get(15),
    })
}

fn message_row(run: &RunId, r: &Row) -> Result<StoredMessage> {
    let role: Role = serde_json::from_value(Value::String(r.get::<_, String>(2)))
        .map_err(|e| corrupt(run, e))?;
    let content = serde_json::from_str(r.get(3)).map_err(|e| corrupt(run, e))?;
    Ok(StoredMessage {
        seq: r.get(0),
        step: r.get::<_, i64>(1) as u32,
        message: Message { role, content },
    })
}

fn journal_row(run: &RunId, r: &Row) -> Result<JournalEntry> {
    let status: &str = r.get(5);
    let result: Option<&str> = r.get(8);
    Ok(JournalEntry {
        step: r.get::<_, i64>(0) as u32,
        idx: r.get::<_, i64>(1) as u32,
        call_id: r.get(2),
        tool: r.get(3),
        args: serde_json::from_str(r.get(4)).map_err(|e| corrupt(run, e))?,
        status: CallStatus::parse(status)
            .ok_or_else(|| corrupt(run, format!("unknown call status `{status}`")))?,
        started: r.get(6),
        attempts: r.get::<_, i64>(7) as u32,
        result: result
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| corrupt(run, e))?,
        is_error: r.get(9),
        via: r.get(10),
    })
}

fn escalation_row(r: &Row) -> Result<EscalationRow> {
    let id: i64 = r.get(0);
    let bad = |message: String| StoreError::Corrupt {
        run: format!("escalation {id}"),
        message,
    };
    let kind: String = r.get(3);
    let kind = EscalationKind::parse(&kind)
        .ok_or_else(|| bad(format!("unknown escalation kind `{kind}`")))?;
    let detail: String = r.get(6);
    let detail = serde_json::from_str(&detail)
        .and_then(|v| EscalationDetail::from_json(kind, v))
        .map_err(|e| bad(e.to_string()))?;
    let resolution: Option<String> = r.get(10);
    let resolution = resolution
        .map(|t| serde_json::from_str(&t))
        .transpose()
        .map_err(|e| bad(e.to_string()))?;
    Ok(EscalationRow {
        id: EscalationId(id),
        run_id: RunId(r.get(1)),
        step: r.get::<_, i64>(2) as u32,
        kind,
        open: r.get::<_, String>(4) == "open",
        summary: r.get(5),
        detail,
        created_at: r.get(7),
        resolved_at: r.get(8),
        resolved_by: r.get(9),
        resolution,
        applied: r.get(11),
    })
}

fn event_row(run: &RunId, row: &Row) -> Result<StoredEvent> {
    Ok(StoredEvent {
        step: row.get::<_, i64>(0) as u32,
        at: row.get(1),
        event: serde_json::from_str(row.get(2)).map_err(|e| corrupt(run, e))?,
    })
}

fn corrupt(run: &RunId, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        run: run.0.clone(),
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn urls_lose_their_password_in_messages() {
        assert_eq!(
            redact_url("postgres://bob:s3cret@db.example:5432/runs"),
            "postgres://bob:[redacted]@db.example:5432/runs"
        );
        assert_eq!(
            redact_url("postgresql://bob@localhost/runs"),
            "postgresql://bob@localhost/runs"
        );
        assert_eq!(
            redact_url("postgres://localhost/runs"),
            "postgres://localhost/runs"
        );
        assert_eq!(
            redact_url("postgres://localhost/runs?user=a&password=x&port=1"),
            "postgres://localhost/runs?user=a&password=[redacted]&port=1"
        );
    }
}

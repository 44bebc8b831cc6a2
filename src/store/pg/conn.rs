//! The PostgreSQL connections: each a dedicated thread owning one client (see the
//! backend's module doc for why), shared by every store of the process through the
//! bounded [`Pool`]; the jobs sent to them, the transaction and reader wrappers with
//! their statement cache, and migrating on open.
//!
//! The client is tokio-postgres driven by a current-thread runtime of the connection's
//! own (what the `postgres` facade does), so the whole connection attempt — TCP, TLS,
//! startup and authentication — runs under one connect timeout: tokio-postgres's own
//! `connect_timeout` covers only the TCP connect, and a server that accepts and then
//! says nothing would hold the caller forever.

use super::conninfo::{self, ConnInfo};
use super::migrations::MIGRATIONS;
use super::pool::{POOL_WAIT, Pool, PoolStatus, pool_size};
use super::tls;
use crate::store::durability::Durability;
use crate::store::error::{Result, StoreError};
use crate::store::lease::LEASE_TTL_MS;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak, mpsc};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

/// Rows per read when walking a whole run (`runs show`, export): memory stays flat
/// however long the run.
pub(super) const PAGE: u32 = 512;
/// A job for a connection thread.
pub(super) type Job = Box<dyn FnOnce(&mut Conn) + Send>;
/// A pooled connection: the queue of its thread.
type Slot = mpsc::Sender<Job>;

/// One connection thread's state: its runtime, the client (reconnected when the server
/// dropped it) and the statements prepared on it.
pub(super) struct Conn {
    info: ConnInfo,
    tls: MakeRustlsConnect,
    pub(super) rt: Runtime,
    client: Option<Client>,
    statements: HashMap<&'static str, Statement>,
}
impl Conn {
    pub(super) fn new(info: ConnInfo, tls: MakeRustlsConnect) -> std::io::Result<Conn> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Conn {
            info,
            tls,
            rt,
            client: None,
            statements: HashMap::new(),
        })
    }

    /// The client, connecting first when there is none or the server dropped it.
    pub(super) fn client(&mut self) -> Result<&mut Client> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            self.statements.clear();
            self.client = None;
            let client = connect(&self.rt, &self.info, &self.tls)
                .map_err(|e| StoreError::Postgres(e.explain(&self.info)))?;
            self.client = Some(client);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    /// Reads outside a transaction, connecting first when needed.
    pub(super) fn reader(&mut self) -> Result<Reader<'_>> {
        self.client()?;
        let Conn {
            client,
            statements,
            rt,
            ..
        } = self;
        Ok(Reader {
            client: client.as_mut().expect("connected above"),
            rt,
            statements,
        })
    }
}

/// Why a connection attempt failed.
pub(super) enum ConnectFail {
    Pg(tokio_postgres::Error),
    /// No connection within the connect timeout (any stage of it).
    TimedOut,
}
impl ConnectFail {
    /// One line naming host:port, the cause and what to change.
    pub(super) fn explain(&self, info: &ConnInfo) -> String {
        match self {
            ConnectFail::Pg(e) => tls::explain(e, info),
            ConnectFail::TimedOut => tls::timed_out(info),
        }
    }
}

/// Connects on `rt`, the whole attempt bounded by the connect timeout; the connection's
/// I/O task is spawned on `rt` (it runs whenever the thread blocks on a query).
pub(super) fn connect(
    rt: &Runtime,
    info: &ConnInfo,
    tls: &MakeRustlsConnect,
) -> std::result::Result<Client, ConnectFail> {
    let limit = conninfo::connect_timeout(&info.config);
    let attempt = info.config.connect(tls.clone());
    let (client, connection) = rt
        .block_on(async { tokio::time::timeout(limit, attempt).await })
        .map_err(|_| ConnectFail::TimedOut)?
        .map_err(ConnectFail::Pg)?;
    rt.spawn(connection);
    Ok(client)
}

/// A transaction with the connection's statement cache.
pub(super) struct Tx<'c> {
    pub(super) tx: tokio_postgres::Transaction<'c>,
    pub(super) rt: &'c Runtime,
    statements: &'c mut HashMap<&'static str, Statement>,
}
impl Tx<'_> {
    pub(super) fn stmt(&mut self, sql: &'static str) -> Result<Statement> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.rt.block_on(self.tx.prepare(sql)).map_err(pg)?;
        self.statements.insert(sql, s.clone());
        Ok(s)
    }
    pub(super) fn exec(&mut self, sql: &'static str, p: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        let s = self.stmt(sql)?;
        self.rt.block_on(self.tx.execute(&s, p)).map_err(pg)
    }
    pub(super) fn opt(
        &mut self,
        sql: &'static str,
        p: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        let s = self.stmt(sql)?;
        self.rt.block_on(self.tx.query_opt(&s, p)).map_err(pg)
    }
    pub(super) fn one(&mut self, sql: &'static str, p: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        let s = self.stmt(sql)?;
        self.rt.block_on(self.tx.query_one(&s, p)).map_err(pg)
    }
    pub(super) fn query(
        &mut self,
        sql: &'static str,
        p: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let s = self.stmt(sql)?;
        self.rt.block_on(self.tx.query(&s, p)).map_err(pg)
    }
    /// A statement built at run time (not cached: its text varies).
    pub(super) fn exec_unprepared(&mut self, sql: &str, p: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        self.rt.block_on(self.tx.execute(sql, p)).map_err(pg)
    }
    /// Statements without parameters or results (`SET LOCAL …`).
    pub(super) fn batch(&mut self, sql: &str) -> Result<()> {
        self.rt.block_on(self.tx.batch_execute(sql)).map_err(pg)
    }
}
/// Reads on a connection thread: the statement cache outside a transaction.
pub(super) struct Reader<'c> {
    client: &'c mut Client,
    rt: &'c Runtime,
    statements: &'c mut HashMap<&'static str, Statement>,
}
impl Reader<'_> {
    pub(super) fn query(
        &mut self,
        sql: &'static str,
        p: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let s = match self.statements.get(sql) {
            Some(s) => s.clone(),
            None => {
                let s = self.rt.block_on(self.client.prepare(sql)).map_err(pg)?;
                self.statements.insert(sql, s.clone());
                s
            }
        };
        self.rt.block_on(self.client.query(&s, p)).map_err(pg)
    }
    pub(super) fn opt(
        &mut self,
        sql: &'static str,
        p: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        Ok(self.query(sql, p)?.into_iter().next())
    }
    /// Statements without parameters or results (`VACUUM`).
    pub(super) fn batch(&mut self, sql: &str) -> Result<()> {
        self.rt.block_on(self.client.batch_execute(sql)).map_err(pg)
    }
}

/// The pool a store uses, shared by every store of the process on the same URL.
pub(super) struct PgPool {
    url: String,
    pool: Pool<Slot>,
    /// Migrated (or found current) by the first store opened on it.
    migrated: OnceLock<()>,
}

/// The process's pools, by URL; a pool ends (its connections close) with its last store.
fn pool_for(url: &str, info: &ConnInfo, tls: &MakeRustlsConnect) -> Arc<PgPool> {
    static POOLS: Mutex<Vec<Weak<PgPool>>> = Mutex::new(Vec::new());
    let mut pools = POOLS.lock().unwrap_or_else(|p| p.into_inner());
    pools.retain(|w| w.strong_count() > 0);
    if let Some(p) = pools
        .iter()
        .filter_map(Weak::upgrade)
        .find(|p| p.url == url)
    {
        return p;
    }
    let display = PathBuf::from(&info.display);
    let (info, tls) = (info.clone(), tls.clone());
    let make = Box::new(move || spawn_connection(info.clone(), tls.clone()));
    let pool = Arc::new(PgPool {
        url: url.to_string(),
        pool: Pool::new(pool_size(), POOL_WAIT, display, make),
        migrated: OnceLock::new(),
    });
    pools.push(Arc::downgrade(&pool));
    pool
}

/// A connection thread, connecting on its first job; it ends when its slot is dropped.
fn spawn_connection(info: ConnInfo, tls: MakeRustlsConnect) -> Result<Slot> {
    let (tx, rx) = mpsc::channel::<Job>();
    let display = PathBuf::from(&info.display);
    let cannot = |e: std::io::Error| StoreError::Open {
        path: display.clone(),
        message: format!("cannot start a connection thread: {e}"),
    };
    let mut conn = Conn::new(info, tls).map_err(cannot)?;
    std::thread::Builder::new()
        .name("agentrun-postgres".into())
        .spawn(move || {
            while let Ok(job) = rx.recv() {
                job(&mut conn);
            }
        })
        .map_err(cannot)?;
    Ok(tx)
}

pub struct PgStore {
    /// The URL without its password, for messages.
    pub(super) display: PathBuf,
    pool: Arc<PgPool>,
    pub(super) lease_ttl_ms: i64,
    pub(super) host: String,
}
pub(super) fn pg(e: tokio_postgres::Error) -> StoreError {
    // `{:#}`-style detail: the server's message (e.g. a constraint) when there is one.
    let text = match e.as_db_error() {
        Some(db) if db.code().code() == "57014" => format!(
            "57014: {} (a statement ran longer than statement_timeout, 120 s unless \
             options=-c statement_timeout=… in the URL says; look for a lock held in \
             pg_stat_activity)",
            db.message()
        ),
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    };
    StoreError::Postgres(text)
}
fn gone() -> StoreError {
    StoreError::Postgres("the database connection thread stopped".into())
}

/// `f` as a connection thread's job, its result (an error if it panicked) handed to
/// `reply`.
fn job<T>(
    f: impl FnOnce(&mut Conn) -> Result<T> + Send + 'static,
    reply: impl FnOnce(Result<T>) + Send + 'static,
) -> Job {
    Box::new(move |conn: &mut Conn| {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(conn)))
            .unwrap_or_else(|_| Err(gone()));
        reply(r);
    })
}

/// `f` run inside one transaction at `durability` on a connection, ended there either
/// way.
fn in_transaction<T>(
    durability: Durability,
    f: impl FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
) -> impl FnOnce(&mut Conn) -> Result<T> + Send + 'static {
    move |conn| {
        conn.client()?;
        let Conn {
            client,
            statements,
            rt,
            ..
        } = conn;
        let client = client.as_mut().expect("connected above");
        let tx = rt.block_on(client.transaction()).map_err(pg)?;
        let mut tx = Tx { tx, rt, statements };
        if durability == Durability::Process {
            tx.batch("SET LOCAL synchronous_commit = off")?;
        }
        let value = f(&mut tx);
        let Tx { tx, rt, .. } = tx;
        // Ended here either way: a dropped transaction only queues its ROLLBACK,
        // which would wait, holding the run's row lock, for the next job.
        match value {
            Ok(value) => {
                rt.block_on(tx.commit()).map_err(pg)?;
                Ok(value)
            }
            Err(e) => {
                let _ = rt.block_on(tx.rollback());
                Err(e)
            }
        }
    }
}
/// This machine's name for `lease_host` (see the module doc: only ever compared with
/// itself, to skip the TTL for a dead local holder).
pub(super) fn host_id() -> String {
    std::fs::read_to_string("/etc/machine-id")
        .or_else(|_| std::fs::read_to_string("/proc/sys/kernel/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
impl PgStore {
    /// Opens a store on the database at `url` (`postgres://…`), sharing the process's
    /// pool for that URL, and creates or migrates its schema (once per pool). The first
    /// connection is made before this returns, so a wrong URL, a refused connection or
    /// bad credentials are reported here, as an SQLite file's problems are at open.
    pub fn open(url: &str) -> Result<PgStore> {
        let info = conninfo::resolve(url, &|k| std::env::var(k).ok()).map_err(|message| {
            StoreError::Open {
                path: PathBuf::from(super::url::redact_url(url)),
                message,
            }
        })?;
        let display = PathBuf::from(&info.display);
        let open_err = |e: StoreError| match e {
            StoreError::Postgres(message) => StoreError::Open {
                path: display.clone(),
                message,
            },
            e => e,
        };
        let tls = tls::connector(&info).map_err(|message| StoreError::Open {
            path: display.clone(),
            message,
        })?;
        let store = PgStore {
            display: display.clone(),
            pool: pool_for(url, &info, &tls),
            lease_ttl_ms: LEASE_TTL_MS,
            host: host_id(),
        };
        if store.pool.migrated.get().is_none() {
            store.migrate().map_err(open_err)?;
            let _ = store.pool.migrated.set(());
        }
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.display
    }

    /// How many connections this process's pool for this database has, and uses.
    pub fn pool_status(&self) -> PoolStatus {
        self.pool.pool.status()
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

    /// Runs `f` on a pooled connection's thread and waits for its answer.
    pub(super) fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let slot = self.pool.pool.get()?.detach();
        let (reply, answer) = mpsc::sync_channel(1);
        self.dispatch(slot, f, move |r| drop(reply.send(r)))?;
        answer.recv().unwrap_or_else(|_| self.connection_gone())
    }

    /// [`PgStore::call`] for a task (issue 23): it awaits the connection and the answer
    /// instead of blocking, so the thread driving a worker's runs goes on with the
    /// others while one run's write is on the server. A task dropped meanwhile leaves
    /// the job to finish on its connection, which goes back as ever (see
    /// [`PgStore::dispatch`]).
    pub(super) async fn call_async<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let slot = self.pool.pool.get_async().await?.detach();
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.dispatch(slot, f, move |r| drop(reply.send(r)))?;
        answer.await.unwrap_or_else(|_| self.connection_gone())
    }

    /// Sends `f` to the connection `slot` (taken from the pool), its answer to `reply`.
    /// The connection goes back to the pool from its own thread as soon as the job is
    /// done, not when the caller next runs: a task holding a connection while its
    /// thread blocks elsewhere (a blocking call to the same pool) would otherwise keep
    /// it from everyone, that thread included.
    fn dispatch<T: Send + 'static>(
        &self,
        slot: Slot,
        f: impl FnOnce(&mut Conn) -> Result<T> + Send + 'static,
        reply: impl FnOnce(Result<T>) + Send + 'static,
    ) -> Result<()> {
        let (pool, back) = (self.pool.clone(), slot.clone());
        let job = job(f, move |r| {
            pool.pool.put(back);
            reply(r);
        });
        slot.send(job).map_err(|_| {
            self.pool.pool.lost();
            gone()
        })
    }

    /// The answer never came: the job was dropped unrun, so its connection thread is
    /// gone, and the pool may open another in its place.
    fn connection_gone<T>(&self) -> Result<T> {
        self.pool.pool.lost();
        Err(gone())
    }

    /// Runs `f` inside one transaction at the given durability.
    pub(super) fn write_as<T: Send + 'static>(
        &self,
        durability: Durability,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.call(in_transaction(durability, f))
    }

    /// [`PgStore::write_as`] for a task: see [`PgStore::call_async`].
    pub(super) async fn write_as_async<T: Send + 'static>(
        &self,
        durability: Durability,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.call_async(in_transaction(durability, f)).await
    }

    pub(super) fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.write_as(Durability::PowerCut, f)
    }

    /// Runs read-only `f` on a connection (one statement: its own snapshot).
    pub(super) fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Reader<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.call(move |conn| f(&mut conn.reader()?))
    }

    /// [`PgStore::read`] for a task: see [`PgStore::call_async`].
    pub(super) async fn read_async<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Reader<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.call_async(move |conn| f(&mut conn.reader()?)).await
    }

    fn migrate(&self) -> Result<()> {
        let display = self.display.clone();
        self.write(move |tx| {
            // One migrator at a time, across every process and machine.
            tx.batch(
                "SELECT pg_advisory_xact_lock(1701); \
                 CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL); \
                 INSERT INTO schema_version SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM schema_version);",
            )?;
            let from: i64 = tx
                .rt
                .block_on(tx.tx.query_one("SELECT version FROM schema_version", &[]))
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
                tx.batch(sql)?;
                tx.exec(
                    "UPDATE schema_version SET version = $1",
                    &[&(i as i64 + 1)],
                )?;
            }
            Ok(())
        })?;
        // Statements prepared before the migration may name changed tables.
        self.call(|conn| {
            conn.statements.clear();
            Ok(())
        })
    }
}

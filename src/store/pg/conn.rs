//! The PostgreSQL connection: a dedicated thread owning the client (see the backend's
//! module doc for why), the jobs sent to it, the transaction and reader wrappers with
//! their statement cache, and migrating on open.

use super::conninfo::{self, ConnInfo};
use super::migrations::MIGRATIONS;
use super::tls;
use crate::store::durability::Durability;
use crate::store::error::{Result, StoreError};
use crate::store::lease::LEASE_TTL_MS;
use postgres::types::ToSql;
use postgres::{Client, Row, Statement};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;
use tokio_postgres_rustls::MakeRustlsConnect;

/// Rows per read when walking a whole run (`runs show`, export): memory stays flat
/// however long the run.
pub(super) const PAGE: u32 = 512;
/// A job for the connection thread.
pub(super) type Job = Box<dyn FnOnce(&mut Conn) + Send>;
/// The connection thread's state: the client (reconnected when the server dropped
/// it) and the statements prepared on it.
pub(super) struct Conn {
    info: ConnInfo,
    tls: MakeRustlsConnect,
    client: Option<Client>,
    statements: HashMap<&'static str, Statement>,
}
impl Conn {
    fn client(&mut self) -> Result<&mut Client> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            self.statements.clear();
            self.client = Some(connect(&self.info, &self.tls).map_err(pg)?);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }
}
fn connect(
    info: &ConnInfo,
    tls: &MakeRustlsConnect,
) -> std::result::Result<Client, postgres::Error> {
    info.config.connect(tls.clone())
}
/// A transaction with the connection's statement cache.
pub(super) struct Tx<'c> {
    pub(super) tx: postgres::Transaction<'c>,
    statements: &'c mut HashMap<&'static str, Statement>,
}
impl Tx<'_> {
    pub(super) fn stmt(&mut self, sql: &'static str) -> Result<Statement> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.tx.prepare(sql).map_err(pg)?;
        self.statements.insert(sql, s.clone());
        Ok(s)
    }
    pub(super) fn exec(&mut self, sql: &'static str, p: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        let s = self.stmt(sql)?;
        self.tx.execute(&s, p).map_err(pg)
    }
    pub(super) fn opt(
        &mut self,
        sql: &'static str,
        p: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        let s = self.stmt(sql)?;
        self.tx.query_opt(&s, p).map_err(pg)
    }
    pub(super) fn one(&mut self, sql: &'static str, p: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        let s = self.stmt(sql)?;
        self.tx.query_one(&s, p).map_err(pg)
    }
}
/// Reads on the connection thread: the statement cache outside a transaction.
pub(super) struct Reader<'c> {
    pub(super) client: &'c mut Client,
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
                let s = self.client.prepare(sql).map_err(pg)?;
                self.statements.insert(sql, s.clone());
                s
            }
        };
        self.client.query(&s, p).map_err(pg)
    }
    pub(super) fn opt(
        &mut self,
        sql: &'static str,
        p: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        Ok(self.query(sql, p)?.into_iter().next())
    }
}
pub struct PgStore {
    /// The URL without its password, for messages.
    pub(super) display: PathBuf,
    pub(super) jobs: mpsc::Sender<Job>,
    pub(super) lease_ttl_ms: i64,
    pub(super) host: String,
}
pub(super) fn pg(e: postgres::Error) -> StoreError {
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
/// This machine's name for `lease_host` (see the module doc: only ever compared with
/// itself, to skip the TTL for a dead local holder).
pub(super) fn host_id() -> String {
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
        let info = conninfo::resolve(url, &|k| std::env::var(k).ok()).map_err(|message| {
            StoreError::Open {
                path: PathBuf::from(super::url::redact_url(url)),
                message,
            }
        })?;
        let display = PathBuf::from(&info.display);
        let open_err = |e: StoreError| StoreError::Open {
            path: display.clone(),
            message: match e {
                StoreError::Postgres(m) => m,
                other => other.to_string(),
            },
        };
        let bad = |message: String| StoreError::Open {
            path: display.clone(),
            message,
        };
        let tls = tls::connector(&info).map_err(bad)?;
        let client = connect(&info, &tls).map_err(|e| bad(tls::explain(&e, &info)))?;
        let (tx, rx) = mpsc::channel::<Job>();
        let mut conn = Conn {
            info,
            tls,
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
            lease_ttl_ms: LEASE_TTL_MS,
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
    pub(super) fn call<T: Send + 'static>(
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
    pub(super) fn write_as<T: Send + 'static>(
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

    pub(super) fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.write_as(Durability::PowerCut, f)
    }

    /// Runs read-only `f` on the connection thread (one statement: its own snapshot).
    pub(super) fn read<T: Send + 'static>(
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
}

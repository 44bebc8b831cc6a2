//! Group commit (issue 23): one writer connection per database file per process, and
//! writes that arrive while it commits ride in its next transaction.
//!
//! SQLite has one writer at a time, and a step's commit costs an fsync. A worker's
//! slot threads used to take turns, one transaction and one fsync each, and each
//! thread's own connection dropped its page cache whenever another had written (it
//! read back ~90 pages a step). Now a thread that finds the writer busy queues its
//! write and waits; whoever takes the writer next runs every queued write in one
//! transaction — each inside its own savepoint, so a failing write is rolled back
//! alone and fails alone — and commits once, at the strongest durability any of them
//! asked for. Every caller still returns only after its own write is committed (or
//! failed), so what a returned write survives is what it was before.
//!
//! A write from async code ([`Writer::enqueue`]: the runner's step writes) does not
//! take the writer at all: it queues and awaits its result, and the file's committer
//! thread commits whatever is queued. A worker's slot thread then never blocks on a
//! commit — its other runs go on meanwhile — and the writes of every run in flight
//! share one transaction instead of at most one per thread (issue 23: ~1.4
//! transactions a step at 500 runs in flight, each rewriting the same index pages).
//!
//! Other processes still meet SQLite's own lock and busy timeout.

use super::sql::{OpenTransaction, run_cached};
use crate::store::durability::Durability;
use crate::store::error::{Result, StoreError};
use rusqlite::Connection;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak, mpsc};
use std::time::Duration;
use tokio::sync::oneshot;

/// The process's writer to one database file.
pub(super) struct Writer {
    conn: Mutex<WriterConn>,
    /// Writes waiting for the writer, each with the slot its caller waits on.
    queue: Mutex<Vec<Box<dyn Job + Send>>>,
    /// Reads queued from async code ([`Writer::enqueue`]), run by the committer
    /// before its next transaction, outside it.
    reads: Mutex<Vec<QueuedRead>>,
    /// Wakes the committer thread, started by the first [`Writer::enqueue`]; it ends
    /// when the writer is gone.
    committer: Mutex<Option<mpsc::Sender<Asker>>>,
}

/// A read queued from async code; it sends its own result.
type QueuedRead = Box<dyn FnOnce(&Connection) + Send>;

/// What the committer needs to commit a queued write as its store would: the busy
/// timeout, and the file its errors name.
#[derive(Clone)]
pub(super) struct Asker {
    pub busy: Duration,
    pub path: PathBuf,
}

impl Asker {
    fn classify(&self, e: rusqlite::Error) -> StoreError {
        super::sql::classify(&self.path, self.busy, e)
    }
}

pub(super) struct WriterConn {
    pub conn: Connection,
    /// The connection's `synchronous` level (true: FULL); SQLite refuses to change it
    /// inside a transaction, so it is set before `BEGIN`, and only when it differs.
    sync_full: bool,
    busy: Duration,
}

impl WriterConn {
    /// Sets the level and busy timeout a transaction needs (when they differ).
    fn prepare(&mut self, full: bool, busy: Duration) -> rusqlite::Result<()> {
        if self.sync_full != full {
            let pragma = if full {
                "PRAGMA synchronous = FULL"
            } else {
                "PRAGMA synchronous = NORMAL"
            };
            run_cached(&self.conn, pragma)?;
            self.sync_full = full;
        }
        if self.busy != busy {
            self.conn.busy_timeout(busy)?;
            self.busy = busy;
        }
        Ok(())
    }
}

/// One write of a transaction.
trait Job {
    fn durability(&self) -> Durability;
    /// Runs the write on the open transaction; false when it failed.
    fn run(&mut self, tx: &Connection) -> bool;
    /// Hands the outcome to the caller: its own, or `failed` when the transaction as a
    /// whole did not commit.
    fn finish(&mut self, failed: Option<&StoreError>);
}

/// A write and, once it ran, its result.
struct Pending<T, F> {
    durability: Durability,
    f: Option<F>,
    result: Option<Result<T>>,
}

impl<T, F: FnOnce(&Connection) -> Result<T>> Pending<T, F> {
    fn new(durability: Durability, f: F) -> Self {
        Pending {
            durability,
            f: Some(f),
            result: None,
        }
    }
}

impl<T, F: FnOnce(&Connection) -> Result<T>> Job for Pending<T, F> {
    fn durability(&self) -> Durability {
        self.durability
    }

    fn run(&mut self, tx: &Connection) -> bool {
        let f = self.f.take().expect("a write runs once");
        let result = f(tx);
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn finish(&mut self, failed: Option<&StoreError>) {
        if let Some(e) = failed {
            self.result = Some(Err(replicate(e)));
        }
    }
}

/// Where a queued write's result goes: the slot a blocked caller waits on, or the
/// channel an async caller awaits.
trait Answer<T> {
    fn answer(&mut self, result: Result<T>);
}

impl<T> Answer<T> for Arc<Mutex<Option<Result<T>>>> {
    fn answer(&mut self, result: Result<T>) {
        *lock(self) = Some(result);
    }
}

impl<T> Answer<T> for Option<oneshot::Sender<Result<T>>> {
    fn answer(&mut self, result: Result<T>) {
        if let Some(tx) = self.take() {
            // A caller that stopped waiting (its run was given up) needs no answer.
            let _ = tx.send(result);
        }
    }
}

/// A queued write and where its result goes.
struct Queued<T, F, A> {
    pending: Pending<T, F>,
    to: A,
}

impl<T, F: FnOnce(&Connection) -> Result<T>, A: Answer<T>> Job for Queued<T, F, A> {
    fn durability(&self) -> Durability {
        self.pending.durability
    }

    fn run(&mut self, tx: &Connection) -> bool {
        self.pending.run(tx)
    }

    fn finish(&mut self, failed: Option<&StoreError>) {
        self.pending.finish(failed);
        if let Some(result) = self.pending.result.take() {
            self.to.answer(result);
        }
    }
}

impl Writer {
    /// Queues `f` for the committer thread and returns where its result will come:
    /// the caller's thread never waits for the writer (see the module doc). With a
    /// durability `f` is a write, run in the committer's next transaction; without,
    /// a read, run before it and outside it (reads go through this connection, which a
    /// commit holds, so a thread that read at once would wait the commit out). A
    /// dropped sender (the committing thread panicked) means the work was lost.
    pub(super) fn enqueue<T, F>(
        self: &Arc<Self>,
        durability: Option<Durability>,
        asker: Asker,
        f: F,
    ) -> oneshot::Receiver<Result<T>>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        match durability {
            Some(durability) => lock(&self.queue).push(Box::new(Queued {
                pending: Pending::new(durability, f),
                to: Some(tx),
            })),
            None => lock(&self.reads).push(Box::new(move |conn: &Connection| {
                let _ = tx.send(f(conn));
            })),
        }
        self.wake_committer(asker);
        rx
    }

    /// Runs `f` at once, on this thread, when the writer is idle — nobody committing,
    /// nothing queued — and hands `f` back otherwise: a lone run (`start`, `resume`)
    /// then commits as it did before the committer thread, without the hop to it and
    /// back, and only a busy process queues.
    pub(super) fn run_if_idle<T, F>(
        &self,
        durability: Option<Durability>,
        busy: Duration,
        classify: &dyn Fn(rusqlite::Error) -> StoreError,
        f: F,
    ) -> std::result::Result<Result<T>, F>
    where
        F: FnOnce(&Connection) -> Result<T>,
    {
        let mut conn = match self.conn.try_lock() {
            Ok(conn) => conn,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Err(f),
        };
        if !lock(&self.queue).is_empty() || !lock(&self.reads).is_empty() {
            return Err(f);
        }
        let Some(durability) = durability else {
            return Ok(f(&conn.conn));
        };
        let mut own = Pending::new(durability, f);
        self.lead(&mut conn, busy, classify, Some(&mut own));
        Ok(own.result.expect("the writer ran its own write"))
    }

    /// Runs the queued reads, then commits the queued writes.
    fn serve(&self, conn: &mut WriterConn, asker: &Asker) {
        let reads = std::mem::take(&mut *lock(&self.reads));
        for read in reads {
            read(&conn.conn);
        }
        self.lead(conn, asker.busy, &|e| asker.classify(e), None);
    }

    /// Tells the committer there is work, starting it first when there is none (or
    /// it died with a panic). Should no thread start, this one commits.
    fn wake_committer(self: &Arc<Self>, mut asker: Asker) {
        let mut committer = lock(&self.committer);
        if let Some(tx) = committer.as_ref() {
            match tx.send(asker) {
                Ok(()) => return,
                Err(mpsc::SendError(back)) => asker = back,
            }
        }
        let (tx, rx) = mpsc::channel();
        let writer = Arc::downgrade(self);
        let started = std::thread::Builder::new()
            .name("sqlite-commit".into())
            .spawn(move || commit_loop(&writer, &rx));
        if started.is_ok() && tx.send(asker.clone()).is_ok() {
            *committer = Some(tx);
            return;
        }
        drop(committer);
        self.serve(&mut lock(&self.conn), &asker);
    }

    /// Runs `f` in a transaction of its own or with writes queued before it, on this
    /// thread (so `f` may borrow).
    pub(super) fn write<T>(
        &self,
        durability: Durability,
        busy: Duration,
        classify: &dyn Fn(rusqlite::Error) -> StoreError,
        f: impl FnOnce(&Connection) -> Result<T>,
    ) -> Result<T> {
        let mut conn = lock(&self.conn);
        let mut own = Pending::new(durability, f);
        self.lead(&mut conn, busy, classify, Some(&mut own));
        own.result.expect("the writer ran its own write")
    }

    /// Runs `f` with whatever other threads queue meanwhile: it waits for the writer
    /// and is done either by the thread before it or by this one.
    pub(super) fn write_grouped<T, F>(
        &self,
        durability: Durability,
        busy: Duration,
        classify: &dyn Fn(rusqlite::Error) -> StoreError,
        f: F,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let slot = Arc::new(Mutex::new(None));
        lock(&self.queue).push(Box::new(Queued {
            pending: Pending::new(durability, f),
            to: slot.clone(),
        }));
        let mut conn = lock(&self.conn);
        if let Some(done) = lock(&slot).take() {
            return done;
        }
        self.lead(&mut conn, busy, classify, None);
        let done = lock(&slot).take();
        // Only a panic in the thread that had taken it leaves a queued write undone.
        done.unwrap_or_else(|| Err(lost()))
    }

    /// Takes every queued write (and `own`) and commits them together.
    fn lead(
        &self,
        conn: &mut WriterConn,
        busy: Duration,
        classify: &dyn Fn(rusqlite::Error) -> StoreError,
        own: Option<&mut dyn Job>,
    ) {
        let mut queued = std::mem::take(&mut *lock(&self.queue));
        let mut jobs: Vec<&mut dyn Job> = Vec::with_capacity(queued.len() + 1);
        for job in queued.iter_mut() {
            jobs.push(job.as_mut());
        }
        if let Some(own) = own {
            jobs.push(own);
        }
        if jobs.is_empty() {
            return;
        }
        let outcome = commit(conn, busy, &mut jobs).map_err(classify);
        for job in jobs {
            job.finish(outcome.as_ref().err());
        }
    }

    pub(super) fn lock_conn(&self) -> MutexGuard<'_, WriterConn> {
        lock(&self.conn)
    }
}

/// The committer thread: each wake-up runs the reads queued by then and commits the
/// writes, in one transaction; what is queued meanwhile goes in the next.
fn commit_loop(writer: &Weak<Writer>, wake: &mpsc::Receiver<Asker>) {
    while let Ok(mut asker) = wake.recv() {
        while let Ok(later) = wake.try_recv() {
            asker = later;
        }
        let Some(writer) = writer.upgrade() else {
            return;
        };
        writer.serve(&mut lock(&writer.conn), &asker);
    }
}

/// One transaction for `jobs`: each in a savepoint when there are several; committed
/// when at least one succeeded, rolled back (no fsync) when none did.
fn commit(c: &mut WriterConn, busy: Duration, jobs: &mut [&mut dyn Job]) -> rusqlite::Result<()> {
    let full = jobs.iter().any(|j| j.durability() == Durability::PowerCut);
    c.prepare(full, busy)?;
    let conn = &c.conn;
    // BEGIN IMMEDIATE takes the write lock up front, so it is the one place a write
    // waits for another process (and times out as `Locked`).
    run_cached(conn, "BEGIN IMMEDIATE")?;
    let open = OpenTransaction(conn);
    let mut any_ok = false;
    if let [job] = jobs {
        any_ok = job.run(conn);
    } else {
        for job in jobs.iter_mut() {
            run_cached(conn, "SAVEPOINT grouped")?;
            let ok = job.run(conn);
            if !ok {
                run_cached(conn, "ROLLBACK TO grouped")?;
            }
            run_cached(conn, "RELEASE grouped")?;
            any_ok |= ok;
        }
    }
    if any_ok {
        run_cached(conn, "COMMIT")?;
    }
    drop(open);
    Ok(())
}

/// The same error for each write of a transaction that failed as a whole.
fn replicate(e: &StoreError) -> StoreError {
    match e {
        StoreError::Locked { path, waited_ms } => StoreError::Locked {
            path: path.clone(),
            waited_ms: *waited_ms,
        },
        StoreError::ReadOnly { path } => StoreError::ReadOnly { path: path.clone() },
        StoreError::Damaged { path, message } => StoreError::Damaged {
            path: path.clone(),
            message: message.clone(),
        },
        StoreError::NotADatabase { path, message } => StoreError::NotADatabase {
            path: path.clone(),
            message: message.clone(),
        },
        StoreError::Sqlite(rusqlite::Error::SqliteFailure(code, message)) => {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(*code, message.clone()))
        }
        other => sqlite_error(other.to_string()),
    }
}

pub(super) fn lost() -> StoreError {
    sqlite_error("the write was lost: the thread committing it panicked".into())
}

fn sqlite_error(message: String) -> StoreError {
    let code = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR);
    StoreError::Sqlite(rusqlite::Error::SqliteFailure(code, Some(message)))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Poisoning means a panic while holding it; an open transaction was rolled back
    // by `OpenTransaction`, so what it guards is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which file a writer writes: a file replaced at the same path (deleted and
/// created again) gets a writer of its own.
#[derive(Clone, PartialEq, Eq, Hash)]
struct FileKey {
    path: PathBuf,
    dev: u64,
    ino: u64,
    vfs: Option<String>,
}

/// The process's writer to the database at `path` (opened through `vfs`), opening it
/// with `open` when there is none. It closes when the last store holding it is gone.
pub(super) fn writer_for(
    path: &Path,
    vfs: Option<&str>,
    open: impl FnOnce() -> rusqlite::Result<Connection>,
) -> rusqlite::Result<Arc<Writer>> {
    static WRITERS: OnceLock<Mutex<HashMap<FileKey, Weak<Writer>>>> = OnceLock::new();
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let (dev, ino) = std::fs::metadata(&canonical).map_or((0, 0), |m| (m.dev(), m.ino()));
    let key = FileKey {
        path: canonical,
        dev,
        ino,
        vfs: vfs.map(str::to_owned),
    };
    let mut writers = lock(WRITERS.get_or_init(Default::default));
    if let Some(writer) = writers.get(&key).and_then(Weak::upgrade) {
        return Ok(writer);
    }
    writers.retain(|_, w| w.strong_count() > 0);
    let conn = open()?;
    let writer = Arc::new(Writer {
        conn: Mutex::new(WriterConn {
            conn,
            sync_full: true,
            busy: Duration::ZERO,
        }),
        queue: Mutex::new(Vec::new()),
        reads: Mutex::new(Vec::new()),
        committer: Mutex::new(None),
    });
    writers.insert(key, Arc::downgrade(&writer));
    Ok(writer)
}

#[cfg(test)]
mod tests {
    use super::super::conn::SqliteStore;
    use crate::store::durability::Durability;
    use crate::store::error::StoreError;
    use rusqlite::Connection;
    use std::sync::{Arc, Barrier, Mutex};
    use std::time::{Duration, Instant};

    fn store(dir: &tempfile::TempDir) -> SqliteStore {
        let store = SqliteStore::open(&dir.path().join("runs.db"), true).unwrap();
        store
            .write_as(Durability::PowerCut, |tx| {
                Ok(tx.execute_batch("CREATE TABLE t (v TEXT NOT NULL)")?)
            })
            .unwrap();
        store
    }

    fn rows(store: &SqliteStore) -> Vec<String> {
        let conn = store.lock().unwrap();
        let mut q = conn.prepare("SELECT v FROM t ORDER BY v").unwrap();
        q.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// Waits (bounded) until `n` writes are queued behind the writer.
    fn until_queued(store: &SqliteStore, n: usize) {
        let writer = store.writer().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while super::lock(&writer.queue).len() < n {
            assert!(Instant::now() < deadline, "writes never queued");
            std::thread::yield_now();
        }
    }

    /// A queued write inserting `v` (failing after the insert when `fail`), recording
    /// which thread ran it.
    fn insert(
        store: &SqliteStore,
        v: &'static str,
        fail: bool,
        ran_on: Arc<Mutex<Vec<std::thread::ThreadId>>>,
    ) -> crate::store::error::Result<()> {
        store.write_grouped(Durability::PowerCut, move |tx: &Connection| {
            tx.execute("INSERT INTO t (v) VALUES (?1)", [v])?;
            ran_on.lock().unwrap().push(std::thread::current().id());
            if fail {
                return Err(StoreError::RunNotFound(v.into()));
            }
            Ok(())
        })
    }

    #[test]
    fn writes_queued_behind_a_commit_share_the_next_and_a_failing_one_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let first = store(&dir);
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        let hold = Arc::new(Barrier::new(2));
        std::thread::scope(|s| {
            let holder = s.spawn(|| {
                first.write_as(Durability::PowerCut, |tx| {
                    hold.wait();
                    until_queued(&first, 3);
                    Ok(tx.execute("INSERT INTO t (v) VALUES ('held')", [])?)
                })
            });
            hold.wait();
            let queued: Vec<_> = [("a", false), ("b", true), ("c", false)]
                .into_iter()
                .map(|(v, fail)| {
                    let ran_on = ran_on.clone();
                    let path = path.clone();
                    s.spawn(move || {
                        // Each thread its own store, as a worker's slot threads have.
                        let store = SqliteStore::open(&path, false).unwrap();
                        insert(&store, v, fail, ran_on)
                    })
                })
                .collect();
            assert_eq!(holder.join().unwrap().unwrap(), 1);
            let results: Vec<_> = queued.into_iter().map(|t| t.join().unwrap()).collect();
            assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
            assert!(
                matches!(&results[1], Err(StoreError::RunNotFound(v)) if v == "b"),
                "{results:?}"
            );
        });
        // The failing write's insert was rolled back; the others' committed.
        assert_eq!(rows(&first), ["a", "c", "held"]);
        // All three ran in one transaction, on the thread that took the writer next.
        let ran_on = ran_on.lock().unwrap();
        assert_eq!(ran_on.len(), 3);
        assert!(ran_on.iter().all(|t| *t == ran_on[0]), "{ran_on:?}");
    }

    #[test]
    fn a_transaction_that_cannot_begin_fails_every_write_queued_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let first = store(&dir)
            .with_busy_timeout(Duration::from_millis(50))
            .unwrap();
        // Another process's writer, as far as SQLite can tell: its own connection.
        let other = Mutex::new(Connection::open(&path).unwrap());
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        // This process's writer is busy (not in a transaction) while another takes
        // SQLite's write lock, so the next transaction cannot begin.
        let busy = first.writer().unwrap().lock_conn();
        other
            .lock()
            .unwrap()
            .execute_batch("BEGIN IMMEDIATE")
            .unwrap();
        std::thread::scope(|s| {
            let queued: Vec<_> = ["a", "b"]
                .into_iter()
                .map(|v| {
                    let (first, ran_on) = (&first, ran_on.clone());
                    s.spawn(move || insert(first, v, false, ran_on))
                })
                .collect();
            until_queued(&first, 2);
            drop(busy);
            for t in queued {
                let result = t.join().unwrap();
                assert!(
                    matches!(result, Err(StoreError::Locked { waited_ms: 50, .. })),
                    "{result:?}"
                );
            }
        });
        other.lock().unwrap().execute_batch("ROLLBACK").unwrap();
        assert!(ran_on.lock().unwrap().is_empty());
        assert_eq!(rows(&first), Vec::<String>::new());
    }

    /// Async writes that find the writer busy are queued for the committer thread:
    /// they run there, in one transaction, and a failing one fails alone. A write
    /// that finds it idle runs at once on its own thread.
    #[test]
    fn async_writes_queued_behind_a_commit_share_the_committer_s_next_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(store(&dir));
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        let queued = |v: &'static str, fail: bool| {
            let (store, ran_on) = (store.clone(), ran_on.clone());
            async move {
                store
                    .write_queued(Durability::PowerCut, move |tx: &Connection| {
                        tx.execute("INSERT INTO t (v) VALUES (?1)", [v])?;
                        ran_on.lock().unwrap().push(std::thread::current().id());
                        if fail {
                            return Err(StoreError::RunNotFound(v.into()));
                        }
                        Ok(())
                    })
                    .await
            }
        };
        let busy = store.writer().unwrap().lock_conn();
        let driver = std::thread::spawn({
            let writes = [queued("a", false), queued("b", true), queued("c", false)];
            move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                let results = rt.block_on(futures_util::future::join_all(writes));
                (results, std::thread::current().id())
            }
        });
        until_queued(&store, 3);
        drop(busy);
        let (results, driver) = driver.join().unwrap();
        assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
        assert!(
            matches!(&results[1], Err(StoreError::RunNotFound(v)) if v == "b"),
            "{results:?}"
        );
        assert_eq!(rows(&store), ["a", "c"]);
        {
            let ran_on = ran_on.lock().unwrap();
            assert_eq!(ran_on.len(), 3);
            assert!(ran_on.iter().all(|t| *t == ran_on[0]), "{ran_on:?}");
            // Neither the awaiting thread nor this one: the committer.
            assert_ne!(ran_on[0], driver);
            assert_ne!(ran_on[0], std::thread::current().id());
        }
        // Idle now: the next write runs on the thread that awaits it.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(queued("d", false)).unwrap();
        assert_eq!(ran_on.lock().unwrap()[3], std::thread::current().id());
        assert_eq!(rows(&store), ["a", "c", "d"]);
    }

    #[test]
    fn a_file_replaced_at_the_same_path_gets_a_writer_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let old = store(&dir);
        old.write_as(Durability::PowerCut, |tx| {
            Ok(tx.execute("INSERT INTO t (v) VALUES ('old')", [])?)
        })
        .unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        // `old` (and its writer, open on the removed file) is still alive.
        let new = store(&dir);
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        insert(&new, "new", false, ran_on).unwrap();
        drop(old);
        let reopened = SqliteStore::open(&path, false).unwrap();
        assert_eq!(rows(&reopened), ["new"]);
    }
}

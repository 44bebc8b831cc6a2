//! The bounded connection pool (issue 25): every [`super::PgStore`] a process opens on
//! one URL shares one pool of at most `size` connections, so a worker's `--concurrency
//! N` runs, the console and the commands of one process never hold more than `size`
//! server connections, however many runs are in flight.
//!
//! A store call takes a connection for the length of one job (a transaction, or one
//! read) and gives it back; no session state outside a job is used, so any connection
//! serves any store. Connections are opened lazily, the first one by `PgStore::open`;
//! a call that finds all `size` busy waits up to `wait` and then fails with
//! [`StoreError::PoolExhausted`] naming the size and how to raise it.
//!
//! The pool is generic over what a slot is (a connection thread's job queue in
//! production, a number in the unit tests), so its waiting and counting are tested
//! without a server.

use crate::store::error::{Result, StoreError};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Connections per process unless `--db-pool`, `AGENTRUN_DB_POOL` or `db_pool` in the
/// config file says otherwise: calls are short (one step's commit, a heartbeat), so a
/// few connections serve many runs in flight; ten is what most PostgreSQL pools use.
pub const DEFAULT_POOL_SIZE: usize = 10;
/// How long a call waits for a free connection before it fails: longer than any
/// ordinary commit, shorter than the lease TTL (a heartbeat that waits longer has
/// already lost its run).
pub const POOL_WAIT: Duration = Duration::from_secs(20);

static SIZE: AtomicUsize = AtomicUsize::new(DEFAULT_POOL_SIZE);

/// Sets the size of the pools this process opens from now on (0 is taken as 1).
pub fn set_pool_size(size: usize) {
    SIZE.store(size.max(1), Ordering::Relaxed);
}

/// The size the next pool gets.
pub fn pool_size() -> usize {
    SIZE.load(Ordering::Relaxed)
}

/// What a pool holds right now (for `db check` and for measuring).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PoolStatus {
    /// The most connections it opens.
    pub size: usize,
    /// Connections open (busy or idle).
    pub open: usize,
    /// Connections open and free.
    pub idle: usize,
    /// Calls waiting for one.
    pub waiting: usize,
}

type Make<S> = Box<dyn Fn() -> Result<S> + Send + Sync>;

/// At most `size` slots, made by `make` when none is free and fewer are open.
pub struct Pool<S> {
    size: usize,
    wait: Duration,
    /// The database, for the error message.
    display: PathBuf,
    make: Make<S>,
    state: Mutex<State<S>>,
    /// Wakes a thread waiting in [`Pool::get`] when a slot comes back…
    freed: Condvar,
    /// …and a task waiting in [`Pool::get_async`].
    freed_async: tokio::sync::Notify,
}

struct State<S> {
    idle: Vec<S>,
    open: usize,
    waiting: usize,
}

impl<S> Pool<S> {
    pub fn new(size: usize, wait: Duration, display: PathBuf, make: Make<S>) -> Pool<S> {
        Pool {
            size: size.max(1),
            wait,
            display,
            make,
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
                waiting: 0,
            }),
            freed: Condvar::new(),
            freed_async: tokio::sync::Notify::new(),
        }
    }

    /// A free slot, a new one when fewer than `size` are open, or — after waiting up to
    /// `wait` for one to come back — [`StoreError::PoolExhausted`].
    pub fn get(&self) -> Result<Pooled<'_, S>> {
        let deadline = Instant::now() + self.wait;
        let mut st = self.lock();
        loop {
            st = match self.take(st) {
                Ok(taken) => return taken,
                Err(st) => st,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.exhausted());
            }
            st.waiting += 1;
            st = self
                .freed
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            st.waiting -= 1;
        }
    }

    /// [`Pool::get`] for a task (issue 23): while every slot is busy it waits without
    /// blocking its thread, so a worker's thread goes on driving its other runs.
    pub async fn get_async(&self) -> Result<Pooled<'_, S>> {
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            // Registered before looking, so a slot given back in between still wakes it.
            let freed = self.freed_async.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Ok(taken) = self.take(self.lock()) {
                return taken;
            }
            let _counted = Waiting::new(self);
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(self.exhausted());
            }
        }
    }

    /// A free slot, or a new one when fewer than `size` are open; else the lock back,
    /// still held, so a waiter cannot miss a slot given back before it waits.
    fn take<'p>(
        &'p self,
        mut st: MutexGuard<'p, State<S>>,
    ) -> std::result::Result<Result<Pooled<'p, S>>, MutexGuard<'p, State<S>>> {
        if let Some(slot) = st.idle.pop() {
            return Ok(Ok(self.pooled(slot)));
        }
        if st.open < self.size {
            st.open += 1;
            drop(st);
            return Ok(self.make_reserved());
        }
        Err(st)
    }

    /// Opens the slot the caller already counted in `open`; uncounts it on failure.
    fn make_reserved(&self) -> Result<Pooled<'_, S>> {
        match (self.make)() {
            Ok(slot) => Ok(self.pooled(slot)),
            Err(e) => {
                self.lost();
                Err(e)
            }
        }
    }

    fn exhausted(&self) -> StoreError {
        StoreError::PoolExhausted {
            path: self.display.clone(),
            size: self.size,
            waited_ms: self.wait.as_millis(),
        }
    }

    /// Gives back a slot taken with [`Pooled::detach`].
    pub fn put(&self, slot: S) {
        self.lock().idle.push(slot);
        self.notify_freed();
    }

    /// Forgets a detached slot that broke: another may be opened in its place.
    pub fn lost(&self) {
        self.lock().open -= 1;
        self.notify_freed();
    }

    fn notify_freed(&self) {
        self.freed.notify_one();
        self.freed_async.notify_one();
    }

    pub fn status(&self) -> PoolStatus {
        let st = self.lock();
        PoolStatus {
            size: self.size,
            open: st.open,
            idle: st.idle.len(),
            waiting: st.waiting,
        }
    }

    fn pooled(&self, slot: S) -> Pooled<'_, S> {
        Pooled {
            pool: self,
            slot: Some(slot),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<S>> {
        // A panic while holding the lock leaves the counts consistent (no await
        // points, no partial updates), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A slot taken from the pool; it goes back when dropped, unless [`Pooled::detach`]
/// handed it to whoever ends the work on it.
pub struct Pooled<'p, S> {
    pool: &'p Pool<S>,
    slot: Option<S>,
}

impl<S> Pooled<'_, S> {
    /// The slot, still the guard's (the tests read it in place).
    #[cfg(test)]
    pub fn slot(&self) -> &S {
        self.slot.as_ref().expect("present until dropped")
    }

    /// The slot itself, no longer given back by this guard: the work that ends on it
    /// returns it with [`Pool::put`], or [`Pool::lost`] when it broke.
    pub fn detach(mut self) -> S {
        self.slot.take().expect("present until dropped")
    }
}

impl<S> Drop for Pooled<'_, S> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.pool.put(slot);
        }
    }
}

/// A task counted in [`PoolStatus::waiting`] while it waits, however its wait ends
/// (its future may be dropped).
struct Waiting<'p, S>(&'p Pool<S>);

impl<'p, S> Waiting<'p, S> {
    fn new(pool: &'p Pool<S>) -> Self {
        pool.lock().waiting += 1;
        Waiting(pool)
    }
}

impl<S> Drop for Waiting<'_, S> {
    fn drop(&mut self) {
        self.0.lock().waiting -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    fn counting(size: usize, wait: Duration) -> (Arc<Pool<u32>>, Arc<AtomicU32>) {
        let made = Arc::new(AtomicU32::new(0));
        let m = made.clone();
        let pool = Pool::new(
            size,
            wait,
            PathBuf::from("postgres://u@h:1/d"),
            Box::new(move || Ok(m.fetch_add(1, Ordering::SeqCst))),
        );
        (Arc::new(pool), made)
    }

    #[test]
    fn slots_are_reused_and_never_more_than_size_are_made() {
        let (pool, made) = counting(2, Duration::from_secs(5));
        let a = pool.get().unwrap();
        let b = pool.get().unwrap();
        assert_ne!(a.slot(), b.slot());
        drop(a);
        let c = pool.get().unwrap();
        assert_eq!(*c.slot(), 0, "the returned slot is reused");
        assert_eq!(made.load(Ordering::SeqCst), 2);
        let s = pool.status();
        assert_eq!((s.size, s.open, s.idle), (2, 2, 0));
    }

    #[test]
    fn a_call_finding_every_slot_busy_fails_after_the_wait_naming_the_size() {
        let (pool, _) = counting(1, Duration::from_millis(50));
        let _held = pool.get().unwrap();
        let began = Instant::now();
        let err = pool.get().err().expect("exhausted");
        assert!(began.elapsed() >= Duration::from_millis(50));
        let text = err.to_string();
        assert!(text.contains("all 1 connections"), "{text}");
        assert!(text.contains("--db-pool"), "{text}");
        assert!(text.contains("postgres://u@h:1/d"), "{text}");
        assert!(!err.is_bad_input());
    }

    #[test]
    fn a_waiting_call_gets_the_slot_another_gives_back() {
        let (pool, made) = counting(1, Duration::from_secs(30));
        let held = pool.get().unwrap();
        let p = pool.clone();
        let waiter = std::thread::spawn(move || *p.get().unwrap().slot());
        // A real condition, not a sleep: the waiter is counted before it is released.
        let until = Instant::now() + Duration::from_secs(10);
        while pool.status().waiting == 0 {
            assert!(Instant::now() < until, "the waiter never waited");
            std::thread::yield_now();
        }
        drop(held);
        assert_eq!(waiter.join().unwrap(), 0);
        assert_eq!(made.load(Ordering::SeqCst), 1);
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// A task waiting for a slot is counted while it waits, does not hold up its
    /// thread (another task on it gives the slot back), and gets that slot.
    #[test]
    fn a_waiting_task_gets_the_slot_another_task_gives_back() {
        let (pool, made) = counting(1, Duration::from_secs(30));
        let got = block_on(async {
            let held = pool.get_async().await.unwrap();
            let waiter = pool.get_async();
            let giver = async {
                while pool.status().waiting == 0 {
                    tokio::task::yield_now().await;
                }
                drop(held);
            };
            let (got, ()) = tokio::join!(waiter, giver);
            *got.unwrap().slot()
        });
        assert_eq!(got, 0);
        assert_eq!(made.load(Ordering::SeqCst), 1);
        assert_eq!(pool.status().waiting, 0);
    }

    /// Every slot busy: the task fails after the wait like a thread does, and a task
    /// dropped while it waits is no longer counted.
    #[test]
    fn a_waiting_task_fails_after_the_wait_and_a_dropped_one_is_uncounted() {
        let (pool, _) = counting(1, Duration::from_millis(50));
        let _held = pool.get().unwrap();
        let began = Instant::now();
        let err = block_on(pool.get_async()).err().expect("exhausted");
        assert!(began.elapsed() >= Duration::from_millis(50));
        assert!(err.to_string().contains("all 1 connections"), "{err}");
        block_on(async {
            let mut waiter = Box::pin(pool.get_async());
            assert!(futures_util::poll!(waiter.as_mut()).is_pending());
            assert_eq!(pool.status().waiting, 1);
        });
        assert_eq!(pool.status().waiting, 0);
    }

    /// A slot given back wakes a thread in `get` as well as a task in `get_async`.
    #[test]
    fn a_slot_given_back_by_a_thread_reaches_a_waiting_task() {
        let (pool, _) = counting(1, Duration::from_secs(30));
        let held = pool.get().unwrap();
        let p = pool.clone();
        let giver = std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(10);
            while p.status().waiting == 0 {
                assert!(Instant::now() < until, "the task never waited");
                std::thread::yield_now();
            }
        });
        let got = block_on(async {
            let waiter = pool.get_async();
            tokio::pin!(waiter);
            assert!(futures_util::poll!(waiter.as_mut()).is_pending());
            giver.join().unwrap();
            drop(held);
            *waiter.await.unwrap().slot()
        });
        assert_eq!(got, 0);
    }

    /// A detached slot is the holder's to give back (from any thread): its guard
    /// neither returns nor forgets it; `put` returns it, `lost` frees its place.
    #[test]
    fn a_detached_slot_comes_back_by_put_or_frees_its_place_by_lost() {
        let (pool, made) = counting(1, Duration::from_millis(10));
        let slot = pool.get().unwrap().detach();
        assert_eq!((pool.status().open, pool.status().idle), (1, 0));
        assert!(pool.get().is_err(), "still taken after its guard is gone");
        pool.put(slot);
        assert_eq!(*pool.get().unwrap().slot(), 0, "given back, and reused");
        let _ = pool.get().unwrap().detach();
        pool.lost();
        assert_eq!(pool.status().open, 0);
        assert_eq!(*pool.get().unwrap().slot(), 1, "a new one in its place");
        assert_eq!(made.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_lost_slot_frees_its_place_and_a_failed_make_takes_none() {
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let f = fail.clone();
        let pool = Pool::new(
            1,
            Duration::from_millis(10),
            PathBuf::from("db"),
            Box::new(move || {
                if f.load(Ordering::SeqCst) {
                    Err(StoreError::Postgres("refused".into()))
                } else {
                    Ok(7)
                }
            }),
        );
        assert!(pool.get().is_err());
        assert_eq!(pool.status().open, 0);
        fail.store(false, Ordering::SeqCst);
        let _ = pool.get().unwrap().detach();
        pool.lost();
        assert_eq!(pool.status().open, 0);
        assert_eq!(*pool.get().unwrap().slot(), 7);
    }
}

//! A worker slot (issue 17): claim the oldest claimable queue run, drive it through
//! the one lifecycle ([`super::lifecycle::drive`]), repeat — until the worker shuts
//! down (or, with `--until-idle`, the queue is empty). The command layer
//! (`cli/queue.rs`) parses the flags, starts the worker's threads ([`threads`] of
//! them, each running its share of the slots) and prints what they report.
//!
//! Why not a thread per slot (issue 23): a slot spends its run waiting on the model,
//! so a thread, a runtime and a database connection per slot bought nothing but
//! memory — about 700 KiB per run in flight, and a PostgreSQL connection per run.
//! Slots on one thread share its store: on SQLite the process's one connection to the
//! file (group commit, `store/sqlite/group.rs`), on PostgreSQL the process's bounded
//! pool (`--db-pool`), which every thread and the pulse borrow from one call at a
//! time — a worker never holds more connections than the pool, however many slots.
//! On SQLite a slot's claim, its run's step writes, its step-boundary read and its
//! release are queued for the file's committer thread and awaited, so the thread's
//! other slots go on meanwhile; the rest (set-up reads, PostgreSQL's calls) block the
//! thread for their duration.

use super::lifecycle::{self, Lifecycle, StopOn};
use super::pulse::Pulses;
use super::{RunError, RunOutcome, Runner};
use crate::clock::SystemClock;
use crate::setup::{self, SetupError, Snapshot};
use crate::store::{Lease, RunId, RunStatus, Store, StoreError};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// A slot's settings, shared by every slot of a worker.
pub struct SlotConfig {
    pub db: PathBuf,
    pub name: String,
    pub ttl: Duration,
    pub poll: Duration,
    pub grace: Duration,
    pub until_idle: bool,
    /// The worker's one pulse for all its runs (heartbeats and cancels).
    pub pulses: Arc<Pulses>,
    /// Held by the one idle slot asking the store for work (see [`run_slot`]).
    pub idle: tokio::sync::Mutex<()>,
    /// Told when a slot's run ends: with `until_idle`, the idle slot asks again then
    /// instead of at its next poll.
    pub run_ended: tokio::sync::Notify,
    /// With `until_idle`: a slot found the queue empty, so every slot stops.
    pub drained: std::sync::atomic::AtomicBool,
}

/// Threads (each with one store: an SQLite connection, or a handle on the PostgreSQL
/// pool) a worker of `concurrency` slots runs them on: enough that one thread blocked
/// on a store call leaves the others going.
pub fn threads(concurrency: usize) -> usize {
    concurrency.clamp(1, 8)
}

/// What became of a run a slot drove, for the worker's log.
#[derive(Debug)]
pub enum Report {
    /// The run stopped (completed, paused, cancelled, handed back…).
    Stopped(RunOutcome),
    /// Another worker took the run over; this one stopped writing to it.
    TakenOver,
    /// The snapshot could not be set up here; the run failed with this reason.
    SetupFailed(String),
    /// The store failed while driving it: handed back to the queue.
    Error(RunError),
    /// A claim failed (the store is unreachable); the slot tries again.
    ClaimFailed(StoreError),
}

/// Why a run cannot be set up from its stored snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("run {run}: stored config snapshot is damaged: {source}")]
    Damaged {
        run: RunId,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Setup(#[from] SetupError),
}

/// A run's config snapshot as stored, with its scripts.
pub fn stored_snapshot(store: &Store, id: &RunId) -> Result<Snapshot, SnapshotError> {
    let mut snapshot: Snapshot =
        serde_json::from_str(&store.snapshot(id)?).map_err(|source| SnapshotError::Damaged {
            run: id.clone(),
            source,
        })?;
    snapshot.scripts.extend(store.scripts(id)?);
    Ok(snapshot)
}

/// One slot: claim, drive, repeat, until `shutdown` turns true (or, with
/// `until_idle`, the queue is empty). Each run's end goes to `report`.
pub async fn run_slot(
    cfg: &SlotConfig,
    store: Arc<Store>,
    mut shutdown: watch::Receiver<bool>,
    report: &(dyn Fn(&RunId, Report) + Sync),
) -> Result<(), StoreError> {
    let mut idle = false;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        // A slot that found nothing last time asks again only in its turn among the
        // worker's idle slots, and holds the turn while it waits out the poll interval:
        // the worker asks the store once per interval, not once per idle slot (issue
        // 23: hundreds of idle slots polling took writes from the runs still going).
        if idle && cfg.drained.load(std::sync::atomic::Ordering::Relaxed) {
            // Another slot saw the queue empty: no claim to make (each was a
            // transaction the worker's end waited for).
            return Ok(());
        }
        let turn = if idle {
            tokio::select! {
                turn = cfg.idle.lock() => Some(turn),
                _ = shutdown.changed() => continue,
            }
        } else {
            None
        };
        let wait = match store.claim_queued(&cfg.name, cfg.ttl).await {
            Ok(Some(lease)) => {
                drop(turn);
                idle = false;
                let id = lease.run.clone();
                let (report_of, notify) = drive_claimed(cfg, &store, lease, shutdown.clone()).await;
                // The run's events (escalations, its end) go out now, not when the
                // worker exits (issue 24); events other processes left are the
                // command's passes at start and exit.
                crate::notify::deliver_run(&store, &id, notify).await;
                report(&id, report_of);
                cfg.run_ended.notify_waiters();
                continue;
            }
            Ok(None) => {
                if cfg.until_idle && drained(cfg, &store)? {
                    return Ok(());
                }
                idle = true;
                cfg.poll
            }
            Err(e) => {
                report(&RunId(String::new()), Report::ClaimFailed(e));
                idle = true;
                cfg.poll.max(Duration::from_secs(1))
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => {}
            _ = cfg.run_ended.notified(), if cfg.until_idle => {}
        }
        drop(turn);
    }
}

/// Whether the queue is empty (nothing queued, nothing running): once one slot has
/// seen it, the others stop without asking again.
fn drained(cfg: &SlotConfig, store: &Store) -> Result<bool, StoreError> {
    use std::sync::atomic::Ordering;
    if cfg.drained.load(Ordering::Relaxed) || store.queue_counts()? == (0, 0) {
        cfg.drained.store(true, Ordering::Relaxed);
        return Ok(true);
    }
    Ok(false)
}

/// Drives one claimed run through the lifecycle; the worker's shutdown stops it at
/// its step boundary (after `grace`, the work in flight is given up).
async fn drive_claimed(
    cfg: &SlotConfig,
    store: &Arc<Store>,
    lease: Lease,
    shutdown: watch::Receiver<bool>,
) -> (Report, crate::notify::RunTargets) {
    let runner = match runner_for(store, &lease) {
        Ok(r) => r,
        Err(e) => {
            // The snapshot cannot be set up here (e.g. a tool missing on this machine):
            // the run fails with the reason rather than bouncing between workers.
            let reason = format!("worker {} cannot set the run up: {e}", cfg.name);
            let _ = store.set_status(&lease, RunStatus::Failed, Some(&reason));
            let _ = store.release(&lease);
            return (
                Report::SetupFailed(reason),
                crate::notify::RunTargets::Unknown,
            );
        }
    };
    let notify = crate::notify::RunTargets::Known(runner.resolved.notify());
    let how = Lifecycle {
        heartbeat_every: (cfg.ttl / 4).max(Duration::from_millis(10)),
        stop_on: StopOn::Worker {
            name: cfg.name.clone(),
            shutdown,
            grace: cfg.grace,
            pulses: cfg.pulses.clone(),
        },
    };
    let report = match lifecycle::drive(&runner, how).await {
        Ok(o) => Report::Stopped(o),
        Err(RunError::Store(StoreError::LeaseLost(_))) => Report::TakenOver,
        Err(e) => Report::Error(e),
    };
    (report, notify)
}

fn runner_for(store: &Arc<Store>, lease: &Lease) -> Result<Runner, SnapshotError> {
    let row = store.run(&lease.run)?;
    let resolved = setup::resolve(stored_snapshot(store, &lease.run)?)?;
    Ok(Runner {
        store: store.clone(),
        lease: lease.clone(),
        resolved,
        max_steps: row.max_steps,
        max_tokens: row.max_tokens,
        clock: Arc::new(SystemClock),
        observer: Arc::new(super::observe::Unobserved),
    })
}

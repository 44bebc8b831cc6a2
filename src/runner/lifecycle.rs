//! One lifecycle for every way a run is driven (issue 21): `start`, `resume`,
//! `escalations resolve --resume` and each slot of `agentrun worker` hand a held run
//! to [`drive`], which owns, in this order:
//! 1. the pulse: the lease's heartbeat, and the check for a cancel asked through the
//!    store by any process on any machine ([`CANCEL_POLL`]: a cancel reaches the holder
//!    within that, well under a second) — a task of the run's own, or, for a worker's
//!    runs, the worker's one batched pulse ([`super::pulse`]);
//! 2. what else may stop the run: SIGTERM / Ctrl-C to this process, or its worker
//!    shutting down — each a [`StopOrder`] for the driver, which the machine honours
//!    ([`crate::machine::stop`]);
//! 3. driving the run ([`Runner::run_with`]) until the machine stops;
//! 4. the release: the lease given up, or — a worker stopping — the run handed back
//!    to the queue.
//!
//! The command layer only builds the [`Runner`] and prints what this returns.

use super::pulse::Pulses;
use super::stops::{StopOrder, StopSender};
use super::{RunError, RunOutcome, Runner};
use crate::machine::{StopCause, StopRequest};
use crate::store::{Lease, RunStatus, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub use super::pulse::CANCEL_POLL;

/// The heartbeat of a run driven by `start`/`resume` (the lease TTL is a minute).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(10);

/// How a run is held while it is driven.
pub struct Lifecycle {
    /// How often the lease's heartbeat is renewed.
    pub heartbeat_every: Duration,
    pub stop_on: StopOn,
}

/// What, besides a cancel, stops the run.
pub enum StopOn {
    /// Nothing else (a run the console drives inside its server process).
    CancelOnly,
    /// SIGTERM or Ctrl-C to this process: the run is `interrupted` (resumable).
    Signals,
    /// The worker `name` shutting down (`shutdown` turns true): the work in flight
    /// may finish within `grace`, then the run goes back to the queue. The worker's
    /// `pulses` heartbeat the run and look for its cancel (not a task of its own).
    Worker {
        name: String,
        shutdown: watch::Receiver<bool>,
        grace: Duration,
        pulses: Arc<Pulses>,
    },
}

impl Lifecycle {
    /// `start`, `resume`: signals stop the run; the heartbeat is every 10 s.
    pub fn process() -> Lifecycle {
        Lifecycle {
            heartbeat_every: HEARTBEAT_EVERY,
            stop_on: StopOn::Signals,
        }
    }
}

/// Drives a held run from its last checkpoint until it stops, then releases it (see
/// the module doc). A lost lease is not released: another process holds it now.
pub async fn drive(runner: &Runner, how: Lifecycle) -> Result<RunOutcome, RunError> {
    // Its `[notify]` is this process's to send in full (docs/security.md).
    crate::notify::driving(runner.run_id());
    let (tx, inbox) = tokio::sync::mpsc::unbounded_channel();
    let store = runner.store.clone();
    let lease = runner.lease.clone();
    let (own, shared) = match &how.stop_on {
        StopOn::Worker { pulses, .. } => (None, Some(pulses.hold(&lease, tx.clone()))),
        _ => {
            let own = pulse(
                store.clone(),
                lease.clone(),
                how.heartbeat_every,
                tx.clone(),
            );
            (Some(tokio::spawn(own)), None)
        }
    };
    let to_queue = matches!(how.stop_on, StopOn::Worker { .. });
    let watcher = tokio::spawn(watch_stops(how.stop_on, tx));
    // Aborted however this ends: a sub-agent's drive is dropped when its parent stops
    // mid-call (issue 26), and its pulse must not outlive it (a worker's run leaves
    // the worker's pulse when `shared` is dropped, the same way).
    let _tasks = AbortOnDrop(own.into_iter().chain([watcher]).collect());
    let result = runner.run_with(inbox).await;
    drop(shared);
    release(&store, &lease, &result, to_queue).await?;
    result
}

/// Background tasks of one drive, aborted when it ends or is dropped.
struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Gives the run up as its outcome says: back to the queue when the worker stopped
/// (or failed to drive it), else released; not at all when the lease was lost.
async fn release(
    store: &Store,
    lease: &Lease,
    result: &Result<RunOutcome, RunError>,
    to_queue: bool,
) -> Result<(), StoreError> {
    match result {
        Ok(o) if o.status == RunStatus::Queued => store.release_to_queue(lease),
        Ok(_) => store.release_queued(lease).await,
        Err(RunError::Store(StoreError::LeaseLost(_))) => Ok(()),
        // A store or state error: a worker hands the run back (another one, or this
        // one, retries it); a command exits with the error.
        Err(_) if to_queue => store.release_to_queue(lease),
        Err(_) => store.release(lease),
    }
}

/// The lease's heartbeat every `every`, and a look for a cancel every
/// [`CANCEL_POLL`]: the one place a run driven alone meets the store on a clock (a
/// worker's runs have [`Pulses`] instead).
async fn pulse(store: Arc<Store>, lease: Lease, every: Duration, stops: StopSender) {
    let mut tick = tokio::time::interval(CANCEL_POLL.min(every));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The ticks' own instants (see `Pulses::run`): a beat is never a tick late.
    let mut next_beat = tick.tick().await + every;
    loop {
        let now = tick.tick().await;
        if now >= next_beat {
            next_beat = now + every;
            if store.heartbeat(&lease).is_err() {
                // The next write of the run reports the lost lease properly.
                return;
            }
        }
        // A failed read is tried again on the next tick.
        if let Ok(Some(cancel)) = store.cancel_request(&lease.run) {
            crate::fault::point("cancel_seen");
            let _ = stops.send(StopOrder {
                request: StopRequest {
                    cause: StopCause::Cancel,
                    by: cancel.by,
                    reason: cancel.reason,
                },
                grace: Duration::ZERO,
            });
            return;
        }
    }
}

/// Turns a signal, or the worker's shutdown, into a stop order.
async fn watch_stops(stop_on: StopOn, stops: StopSender) {
    let order = match stop_on {
        StopOn::CancelOnly => return,
        StopOn::Signals => {
            shutdown_signal().await;
            StopOrder {
                request: StopRequest::new(StopCause::Signal, "signal"),
                grace: Duration::ZERO,
            }
        }
        StopOn::Worker {
            name,
            mut shutdown,
            grace,
            ..
        } => {
            if shutdown.wait_for(|stop| *stop).await.is_err() {
                // The worker is gone without saying stop: nothing to watch.
                return;
            }
            StopOrder {
                request: StopRequest::new(StopCause::WorkerShutdown, name),
                grace,
            }
        }
    };
    let _ = stops.send(order);
}

/// SIGTERM or Ctrl-C, whichever comes first.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

//! A worker's one pulse for every run it holds (issue 23). A run driven alone has a
//! pulse task of its own ([`super::lifecycle`]): a heartbeat write every TTL/4 and a
//! look for a cancel every [`CANCEL_POLL`]. A worker holding hundreds of runs would
//! pay that per run — at 500 runs, 2,000 cancel queries a second and a heartbeat
//! transaction per run — so its runs register here instead, and one loop does both
//! for all of them: one heartbeat write (every lease in one transaction) per TTL/4
//! and one cancel query per [`CANCEL_POLL`], whatever the number of runs.

use super::stops::{StopOrder, StopSender};
use crate::machine::{StopCause, StopRequest};
use crate::store::{Lease, RunId, Store};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How often the holder asks the store whether someone cancelled the run (here, not
/// in `lifecycle`, which drives a run alone with it and imports this module).
pub const CANCEL_POLL: Duration = Duration::from_millis(250);

/// The runs a worker holds, and where each one's stop orders go.
#[derive(Default)]
pub struct Pulses {
    held: Mutex<HashMap<RunId, Held>>,
    heartbeat_writes: AtomicU64,
}

struct Held {
    lease: Lease,
    stops: StopSender,
}

/// A run's place in the worker's pulse, given up when dropped (the run released).
pub struct Holding {
    pulses: Arc<Pulses>,
    run: RunId,
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.pulses.held().remove(&self.run);
    }
}

impl Pulses {
    /// The pulse keeps `lease` alive and sends a cancel to `stops` until the
    /// returned [`Holding`] is dropped.
    pub fn hold(self: &Arc<Self>, lease: &Lease, stops: StopSender) -> Holding {
        let held = Held {
            lease: lease.clone(),
            stops,
        };
        self.held().insert(lease.run.clone(), held);
        Holding {
            pulses: self.clone(),
            run: lease.run.clone(),
        }
    }

    /// How many heartbeat transactions the pulse has written (the worker reports it).
    pub fn heartbeat_writes(&self) -> u64 {
        self.heartbeat_writes.load(Ordering::Relaxed)
    }

    /// How many runs are held now.
    pub fn len(&self) -> usize {
        self.held().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heartbeats every held lease every `every` and looks for cancels every
    /// [`CANCEL_POLL`], for as long as it is polled.
    pub async fn run(&self, store: &Store, every: Duration) {
        let mut tick = tokio::time::interval(CANCEL_POLL.min(every));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Compared with the ticks' own instants: against `Instant::now()` a beat due
        // exactly at a tick looked a hair early and waited a whole tick more.
        let mut next_beat = tick.tick().await + every;
        loop {
            let now = tick.tick().await;
            if now >= next_beat {
                next_beat = now + every;
                self.beat(store);
            }
            self.look_for_cancels(store);
        }
    }

    /// One heartbeat write for every lease held. A failed write is tried again at the
    /// next beat, well within the TTL; a run whose lease was taken learns it from its
    /// own next write.
    fn beat(&self, store: &Store) {
        let leases: Vec<Lease> = self.held().values().map(|h| h.lease.clone()).collect();
        if !leases.is_empty() && store.heartbeat_all(&leases).is_ok() {
            self.heartbeat_writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One query for a cancel asked for any run held; each one found gets its stop
    /// order and leaves the pulse, as a run's own pulse stops once it has sent it.
    fn look_for_cancels(&self, store: &Store) {
        let runs: Vec<RunId> = self.held().keys().cloned().collect();
        // A failed read is tried again on the next tick.
        let Ok(found) = store.cancel_requests(&runs) else {
            return;
        };
        for (run, cancel) in found {
            let Some(held) = self.held().remove(&run) else {
                continue;
            };
            crate::fault::point("cancel_seen");
            let _ = held.stops.send(StopOrder {
                request: StopRequest {
                    cause: StopCause::Cancel,
                    by: cancel.by,
                    reason: cancel.reason,
                },
                grace: Duration::ZERO,
            });
        }
    }

    fn held(&self) -> MutexGuard<'_, HashMap<RunId, Held>> {
        // Nothing panics while holding it; a poisoned map is still consistent.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

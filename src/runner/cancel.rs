//! Cancelling a run, for every front end (the CLI's `runs cancel`, the console): one
//! function that records the cancel ([`crate::store::Store::cancel_run`]) and, for a
//! run a live process holds, waits until the holder has stopped it.
//!
//! The holder reads the request with its pulse (`lifecycle::CANCEL_POLL`), aborts the
//! model request or tool in flight, and writes `cancelled`. Should the holder die
//! first, the wait finds its lease dead and cancels the run itself, so a cancel asked
//! once always ends as `cancelled` (docs/ARCHITECTURE.md §7).

use crate::store::{CancelOutcome, RunId, RunStatus, Store, StoreError};
use std::time::{Duration, Instant};

/// How often the wait looks at the run.
const WAIT_POLL: Duration = Duration::from_millis(50);

/// How often the wait asks again (a write), which cancels the run once its holder
/// is found dead.
const ASK_AGAIN: Duration = Duration::from_secs(1);

/// Who asks, and why.
#[derive(Debug, Clone)]
pub struct CancelBy<'a> {
    pub by: &'a str,
    pub reason: Option<&'a str>,
}

/// Where a cancel stands when [`cancel`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// The run is `cancelled` now (`was_held`: a holder stopped it).
    Done { was_held: bool },
    /// It was cancelled before.
    Already,
    /// A live holder was asked and had not stopped the run within the wait; it will
    /// at its next pulse (the request is stored).
    Pending,
    /// It completed: nothing to cancel.
    Finished(RunStatus),
}

/// Cancels `id`; for a held run, waits up to `wait` for its holder to stop it (zero:
/// only ask). Blocking: an async caller runs it off its runtime's threads.
pub fn cancel(
    store: &Store,
    id: &RunId,
    who: &CancelBy<'_>,
    wait: Duration,
) -> Result<Cancelled, StoreError> {
    // A name or reason is stored and shown like a person's message: a secret the
    // run's config knows is `[redacted]` in it (docs/security.md, Operators' text).
    let secrets = super::worker::stored_snapshot(store, id)
        .map(|s| super::secrets::known(&s))
        .unwrap_or_default();
    let (by, reason) = (secrets.text(who.by), who.reason.map(|r| secrets.text(r)));
    let who = &CancelBy {
        by: &by,
        reason: reason.as_deref(),
    };
    let first = store.cancel_run(id, who.by, who.reason)?;
    // Its sub-agents' runs stop with it (issue 26), after it: a holder that drops a
    // child mid-call finds the parent's request and cancels the child itself.
    super::children::cancel_descendants(store, id, who.by)?;
    match first {
        CancelOutcome::Cancelled => return Ok(Cancelled::Done { was_held: false }),
        CancelOutcome::AlreadyCancelled => return Ok(Cancelled::Already),
        CancelOutcome::Finished(status) => return Ok(Cancelled::Finished(status)),
        CancelOutcome::Requested => {}
    }
    crate::fault::point("after_cancel_requested");
    let deadline = Instant::now() + wait;
    let mut asked = Instant::now();
    loop {
        if store.run(id)?.status == RunStatus::Cancelled {
            return Ok(Cancelled::Done { was_held: true });
        }
        if Instant::now() >= deadline {
            return Ok(Cancelled::Pending);
        }
        std::thread::sleep(WAIT_POLL);
        if asked.elapsed() < ASK_AGAIN {
            continue;
        }
        asked = Instant::now();
        // Asking again is harmless while the holder lives (the first request stands)
        // and finishes the cancel once it is dead.
        match store.cancel_run(id, who.by, who.reason)? {
            CancelOutcome::Cancelled | CancelOutcome::AlreadyCancelled => {
                return Ok(Cancelled::Done { was_held: true });
            }
            CancelOutcome::Finished(status) => return Ok(Cancelled::Finished(status)),
            CancelOutcome::Requested => {}
        }
    }
}

//! Cancelling a run from any process sharing the database (issue 21).
//!
//! Each backend's `cancel_run` (`sqlite/cancel.rs`, `pg/cancel.rs`: only the SQL
//! differs) decides in one transaction, by the run's status and lease ([`decide`]):
//! - a run held by a live process gets a cancel *request* (who, when, why in the
//!   run's row); the holder reads it with its pulse (`runner::lifecycle`), stops, and
//!   writes `cancelled` itself — so a step is never cut by another process's write;
//! - any other run that is not finished (queued, waiting for a person, interrupted,
//!   budget-stopped, failed, or `running` under a dead holder) is `cancelled` at once:
//!   the lease token is raised (a holder that comes back late is fenced), and its
//!   open escalations are closed as cancelled;
//! - a completed run is left alone; a cancelled one again is nothing to do.
//!
//! `cancelled` is final: the claim takes only `queued`/`running` runs, and `resume`
//! refuses it.

use crate::records::RunStatus;

/// A cancel someone asked for: who, when, and their words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelRequest {
    pub by: String,
    pub reason: Option<String>,
    pub at: i64,
}

/// What a backend's `cancel_run` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The run is cancelled now.
    Cancelled,
    /// A live process holds the run: it was asked to stop, and will write
    /// `cancelled` itself (within its pulse, `runner::lifecycle::CANCEL_POLL`).
    Requested,
    /// It was cancelled before; nothing changed.
    AlreadyCancelled,
    /// It completed: there is nothing to cancel.
    Finished(RunStatus),
}

/// What to do with a run, from its status and whether a live process holds it.
pub(super) fn decide(status: RunStatus, held_live: bool) -> CancelOutcome {
    match status {
        RunStatus::Cancelled => CancelOutcome::AlreadyCancelled,
        RunStatus::Completed => CancelOutcome::Finished(status),
        RunStatus::Running if held_live => CancelOutcome::Requested,
        _ => CancelOutcome::Cancelled,
    }
}

/// The text a cancelled run's `error` holds (`runs list`, `runs show`, the outcome).
pub fn cancel_text(by: &str, reason: Option<&str>) -> String {
    match reason {
        Some(r) => format!("cancelled by {by}: {r}"),
        None => format!("cancelled by {by}"),
    }
}

//! The notification outbox (issue 24): an event row written in the same transaction
//! as the change it announces (an escalation filed or resolved, a run ended), delivered
//! after commit by whichever agentrun process finds it pending, then marked.
//!
//! A crash before the commit loses the change and its event together; a crash after
//! the commit leaves the row pending, and the next agentrun process on the database
//! (run, worker, serve) delivers it; a crash after delivery but before the mark
//! delivers it again with the same event id, which receivers use to drop repeats
//! (`Idempotency-Key`). So: at least once, never lost, never two ids for one event.
//!
//! Two processes passing over the outbox at once (a worker's slots, `runs cancel` and
//! the run's holder) never both send an event: each claims it first (`claim_notice`),
//! and a claim stands while its process lives (or, from another machine, for
//! [`CLAIM_MS`]).

use crate::config::types::NotifyEvent;
use crate::records::{RunId, RunStatus};

/// What an outbox row announces.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// Stable across every delivery attempt: the receiver's idempotency key.
    pub id: String,
    pub event: NotifyEvent,
    pub run_id: RunId,
    pub escalation_id: Option<i64>,
    /// The escalation's kind, or the run's final status.
    pub kind: String,
    pub summary: String,
    pub created_at: i64,
    /// `pending`, `delivered`, `failed` (gave up) or `skipped` (nothing configured).
    pub state: String,
    pub attempts: u32,
    pub last_error: Option<String>,
}

/// How a delivery went.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    Delivered,
    /// Nobody is to be told (no `[notify]`, or the event not selected).
    Skipped,
    /// Failed this time; `give_up` marks it failed for good.
    Failed {
        error: String,
        give_up: bool,
    },
}

/// How long a claim on an event stands when its process cannot be checked (a process
/// on another machine): longer than a delivery with all its retries takes. A claim by
/// a dead process on this machine is void at once.
pub const CLAIM_MS: i64 = 5 * 60_000;

/// A new event's id: 128 random bits, prefixed so it reads as what it is.
pub fn new_id() -> String {
    format!(
        "evt_{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    )
}

/// Whether a run in `status` has ended (the `run_ended` event).
pub fn ends_run(status: RunStatus) -> bool {
    matches!(
        status,
        RunStatus::Completed
            | RunStatus::Failed
            | RunStatus::BudgetExhausted
            | RunStatus::Cancelled
    )
}

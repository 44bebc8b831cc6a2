//! The store: where runs live between processes — the transcript, the tool-call
//! journal, loop checkpoints, the trace, the human queue, the run queue and the
//! notification outbox — behind one [`Store`] over two backends, SQLite (one file, the
//! default) and PostgreSQL (a server many machines share, issues 17 and 25).
//!
//! What it stores are the neutral records of `crate::records`, which the pure machine
//! also speaks (`machine/` imports nothing of this module); what it adds is the contract
//! of docs/ARCHITECTURE.md §5: one transaction per step, the journal within the step at a stated
//! [`Durability`], leases with fencing tokens, secrets never stored, damaged storage
//! reported and never repaired.
//!
//! **Who calls what.** The runner (`crate::runner`) opens a [`Store`] from `--db`,
//! creates or acquires runs, and calls the step writes (`record_model_turn`,
//! `mark_started`, `record_outcome`, `commit_step`, `create_escalation`,
//! `apply_resolution`) as the machine's effects come; the commands (`crate::cli`) and
//! the console (`crate::serve`) read runs, journals and escalations and record
//! people's decisions, cancels and messages; workers claim queued runs.
//!
//! **One shape over both backends (issue 25).** Each write that changes several rows
//! is planned once (`plan.rs`: the row writes, in order, JSON encoded) and run by the
//! backend in one transaction in its own SQL (`sqlite/plan.rs`, `pg/plan.rs`); those
//! writes are [`Store`] methods written once (`writes.rs`). Each table's rows are read
//! once (`rows.rs`: one column order per table, the readers over each driver's row
//! type). What stays per backend is SQL that differs in more than its dialect: opening
//! and migrating, the lease and the queue's claims (`BEGIN IMMEDIATE` against
//! `FOR UPDATE SKIP LOCKED`), how readers stream (SQLite walks a cursor, PostgreSQL
//! pages), forks and deliveries that branch on what a statement changed, and admin.
//!
//! Module map (each folder's files import downwards only):
//! - `error`, `durability`, `lease`, `input`: the vocabulary both backends share
//!   (errors, how far a write survives, the lease, what callers hand in to write);
//! - `rows`: each table's row reader and column order, over either driver's rows;
//! - `plan`: the row writes of each multi-row write, computed from the caller's input;
//! - `writes`: those writes as [`Store`] methods (create, submit, the step's journal
//!   and commit, escalations, decisions carried in);
//! - `fork`, `cancel`, `outbox`, `check`: what a fork copies, how a cancel is decided,
//!   the notification events, `db check`'s report — shared by both backends;
//! - `sqlite/`: the embedded backend (connection and pragmas, migrations, its row type
//!   and plan runner, then runs, queue, journal readers, escalations, admin…);
//! - `pg/`: the PostgreSQL backend, split the same way, plus its URL, TLS and pool;
//! - this file: the [`Store`] enum and the table of the methods both backends implement.

mod cancel;
mod check;
mod durability;
mod error;
pub mod evals;
mod fork;
mod input;
mod lease;
mod limits;
mod outbox;
mod pg;
mod plan;
mod rows;
mod sqlite;
mod writes;

pub use crate::records::{
    AllToolsFailedFacts, ApprovalFacts, BreakerFacts, CallFacts, CallId, CallRecord, CallStatus,
    EscalationDetail, EscalationId, EscalationKind, EscalationRow, Facts, Handover, JournalEntry,
    ParentLink, QuestionFacts, Resolution, RunId, RunRow, RunStatus, SentMessage, Spent,
    StoredEvent, StoredMessage, StuckFacts, ToolFailures,
};
pub use cancel::{CancelOutcome, CancelRequest, cancel_text};
pub use check::DbCheck;
pub use durability::{BUSY_TIMEOUT, Durability};
pub use error::{Result, StoreError};
pub use fork::{ForkRun, Forked, ReadSpent, not_started_reason};
pub use input::{NewEscalation, NewRun, StepCommit};
pub use lease::{LEASE_TTL_MS, Lease};
pub use limits::{HoldWrite, LimitHold, LimitRow, LimitView, LimitWrite};
pub use outbox::{Delivery, Notice, ends_run};
pub use pg::{DEFAULT_POOL_SIZE, PoolStatus, pool_size, set_pool_size};

pub use pg::PgStore;
pub use sqlite::SqliteStore;

use crate::model::{Message, ModelResponse};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The store: SQLite (the embedded default) or PostgreSQL (issue 17), chosen by the
/// `--db` value. Both backends keep the same contract (docs/ARCHITECTURE.md §5): one transaction
/// per step, the journal within the step, leases with fencing tokens, approvals bound
/// to the call digest (checked above the store), secrets never stored.
///
/// **Why an enum, not a trait object.** The readers that stream (`each_message` and
/// friends) are generic over the caller's error type and closure, which a `dyn` trait
/// cannot carry; an enum keeps every call site exactly as it was (`store.commit_step(…)`
/// on a `Store`), costs one match per call, and makes the set of backends closed and
/// visible here. Each backend is a plain synchronous type with the same methods; the
/// [`delegate!`] table below is the interface, and the compiler checks that both
/// backends implement every entry with the same signature.
pub enum Store {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// What messages may show of a `--db` value: an SQLite path as it is, a PostgreSQL URL
/// without its password (issue 25: `runs list` printed it).
pub fn shown(db: &Path) -> String {
    match db.to_str().filter(|s| is_postgres_url(s)) {
        Some(url) => pg::redact_url(url),
        None => db.display().to_string(),
    }
}

/// Looks at the database `db` names without changing it (`agentrun db check`).
pub fn check(db: &Path) -> Result<DbCheck> {
    match db.to_str().filter(|s| is_postgres_url(s)) {
        Some(url) => pg::check(url),
        None => sqlite::check(db),
    }
}

/// Whether a PostgreSQL URL carries a password (which the process list shows when it
/// is a command-line argument).
pub fn url_has_password(db: &str) -> bool {
    is_postgres_url(db) && pg::redact_url(db) != db
}

/// Whether a `--db` value names a PostgreSQL database rather than an SQLite file.
pub fn is_postgres_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

impl Store {
    /// One transaction on rate-limit key `key` (`store/limits.rs`): its dead holds
    /// go, `f` sees its state and live holds with the store's clock, and what `f`
    /// answers is written.
    pub async fn limit_step<T, F>(&self, key: &str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(LimitView) -> (LimitWrite, T) + Send + 'static,
    {
        match self {
            Store::Sqlite(s) => s.limit_step(key, f).await,
            Store::Postgres(s) => s.limit_step(key, f).await,
        }
    }

    /// When a rate-limit hold may go (`None`: it is gone; `Some(None)`: still
    /// waiting its turn), with the store's clock.
    pub async fn limit_hold_start(&self, id: &str) -> Result<(Option<Option<i64>>, i64)> {
        match self {
            Store::Sqlite(s) => s.limit_hold_start(id).await,
            Store::Postgres(s) => s.limit_hold_start(id).await,
        }
    }

    /// The root of `id`'s tree of runs (`id` itself when it has no parent): whose
    /// budget and trace a sub-agent's child run shares.
    pub fn top_of(&self, id: &RunId) -> RunId {
        let mut at = id.clone();
        // Bounded: a damaged database with a cycle of parents cannot loop forever.
        for _ in 0..64 {
            match self.run(&at).map(|r| r.parent) {
                Ok(Some(parent)) => at = parent.run,
                _ => break,
            }
        }
        at
    }

    /// Opens (creating when `create` is set) the database `db` names and migrates it:
    /// a `postgres://` or `postgresql://` URL selects PostgreSQL, anything else is an
    /// SQLite file path. A file that is not SQLite is reported and never written to.
    pub fn open(db: &Path, create: bool) -> Result<Store> {
        match db.to_str().filter(|s| is_postgres_url(s)) {
            Some(url) => Ok(Store::Postgres(PgStore::open(url)?)),
            None => Ok(Store::Sqlite(SqliteStore::open(db, create)?)),
        }
    }

    /// [`Store::open`] through a registered SQLite VFS instead of the default one:
    /// how tests put a counter under the file layer to count the fsyncs a step costs
    /// (`tests/it/syncs.rs`). Production code uses [`Store::open`].
    pub fn open_with_vfs(path: &Path, create: bool, vfs: &str) -> Result<Store> {
        Ok(Store::Sqlite(SqliteStore::open_with_vfs(
            path, create, vfs,
        )?))
    }

    /// What to call the database in messages: the SQLite file, or the PostgreSQL URL
    /// without its password.
    pub fn path(&self) -> &Path {
        match self {
            Store::Sqlite(s) => s.path(),
            Store::Postgres(s) => s.path(),
        }
    }

    /// PostgreSQL: this process's connection pool for the database (shared by every
    /// store opened on the same URL); `None` on SQLite (one connection per store).
    pub fn pool_status(&self) -> Option<PoolStatus> {
        match self {
            Store::Sqlite(_) => None,
            Store::Postgres(s) => Some(s.pool_status()),
        }
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, Store::Postgres(_))
    }

    /// Replaces the busy timeout ([`BUSY_TIMEOUT`]): how long a write waits for
    /// another process's lock before failing with [`StoreError::Locked`].
    pub fn with_busy_timeout(self, timeout: Duration) -> Result<Store> {
        Ok(match self {
            Store::Sqlite(s) => Store::Sqlite(s.with_busy_timeout(timeout)?),
            Store::Postgres(s) => Store::Postgres(s.with_busy_timeout(timeout)?),
        })
    }

    /// Replaces the lease TTL: a holder silent for longer loses the run to `acquire`.
    pub fn with_lease_ttl(self, ttl: Duration) -> Store {
        match self {
            Store::Sqlite(s) => Store::Sqlite(s.with_lease_ttl(ttl)),
            Store::Postgres(s) => Store::Postgres(s.with_lease_ttl(ttl)),
        }
    }
}

/// The store's interface: each entry becomes a `Store` method that calls the
/// backend's method of the same name and signature.
macro_rules! delegate {
    ($( $(#[$meta:meta])* fn $name:ident $(<$g:ident: $bound:path>)? (&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty; )*) => {
        impl Store {
            $(
                $(#[$meta])*
                pub fn $name $(<$g: $bound>)? (&self $(, $arg: $ty)*) -> $ret {
                    match self {
                        Store::Sqlite(s) => s.$name($($arg),*),
                        Store::Postgres(s) => s.$name($($arg),*),
                    }
                }
            )*
        }
    };
}

delegate! {
    /// Records a new eval; false when one of that name exists.
    fn create_eval(&self, e: &evals::EvalRow) -> Result<bool>;
    fn eval(&self, name: &str) -> Result<Option<evals::EvalRow>>;
    /// Every eval, newest first.
    fn evals(&self) -> Result<Vec<evals::EvalRow>>;
    fn finish_eval(&self, name: &str, at: i64) -> Result<()>;
    /// Names the run of an eval's slot (creating the slot; its result is cleared).
    fn set_eval_run(&self, k: evals::SlotKey<'_>, run_id: &str) -> Result<()>;
    /// Stores the scored result of an eval's slot.
    fn set_eval_result(&self, k: evals::SlotKey<'_>, result: &str) -> Result<()>;
    /// An eval's slots, by task, model and repeat.
    fn eval_slots(&self, eval: &str) -> Result<Vec<evals::EvalSlotRow>>;
    /// The child run the call with idempotency key `key` started, if any.
    fn child_by_key(&self, key: &str) -> Result<Option<RunRow>>;
    /// A run's child runs, oldest first.
    fn children(&self, parent: &RunId) -> Result<Vec<RunRow>>;
    /// Takes the lease of a run for this process. Refused while another live holder
    /// has it; a holder that died or went silent is replaced.
    fn acquire(&self, id: &RunId) -> Result<Lease>;
    /// Takes the oldest claimable queue run for `worker` (queued, or running under a
    /// lease silent for longer than `ttl`), raising its fencing token.
    fn claim(&self, worker: &str, ttl: Duration) -> Result<Option<Lease>>;
    /// Hands a queue run that waited for a person back to the queue, once nothing is pending.
    fn requeue(&self, id: &RunId) -> Result<bool>;
    /// Gives a held queue run back to the queue (a worker stopping).
    fn release_to_queue(&self, lease: &Lease) -> Result<()>;
    /// How many queue runs are `queued` and `running`.
    fn queue_counts(&self) -> Result<(u64, u64)>;
    /// Gives the run up (the process is about to exit).
    fn release(&self, lease: &Lease) -> Result<()>;
    /// Refreshes the lease's heartbeat; fails when another process took the run.
    fn heartbeat(&self, lease: &Lease) -> Result<()>;
    /// Refreshes the heartbeat of every lease still held, in one write (a worker's
    /// batched pulse, issue 23); returns how many were refreshed. A lease another
    /// process took is skipped: that run's next write reports it.
    fn heartbeat_all(&self, leases: &[Lease]) -> Result<usize>;
    /// Sets a run's status outside a step commit (interrupted, failed, escalated).
    fn set_status(&self, lease: &Lease, status: RunStatus, error: Option<&str>) -> Result<()>;
    /// Raises (or lowers) a run's budgets, e.g. from `resume --max-steps`.
    fn set_budgets(&self, lease: &Lease, max_steps: u32, max_tokens: u64) -> Result<()>;
    fn run(&self, id: &RunId) -> Result<RunRow>;
    /// The run's config snapshot JSON, as stored at start.
    fn snapshot(&self, id: &RunId) -> Result<String>;
    /// The `models` of the run's config snapshot (a JSON array), without the rest.
    fn snapshot_models(&self, id: &RunId) -> Result<Option<String>>;
    /// The run's scripted-model texts by model spec (stored beside the snapshot, not
    /// in it: a script can be megabytes, and only driving the run needs it).
    fn scripts(&self, id: &RunId) -> Result<BTreeMap<String, String>>;
    /// Resolves a full id or a unique prefix of one.
    fn find_run(&self, prefix: &str) -> Result<RunId>;
    /// Runs, newest first, optionally only those with `status`.
    fn list_runs(&self, status: Option<RunStatus>) -> Result<Vec<RunRow>>;
    /// The `limit` newest runs (all with `None`), optionally only those with `status`.
    fn recent_runs(&self, status: Option<RunStatus>, limit: Option<u32>) -> Result<Vec<RunRow>>;
    /// The database's plan for [`Store::recent_runs`], one line per step.
    fn recent_runs_plan(&self) -> Result<Vec<String>>;
    /// The journaled model response for `step`, if the step was begun but not committed.
    fn model_turn(&self, run: &RunId, step: u32) -> Result<Option<ModelResponse>>;
    /// The last committed step and loop state JSON.
    fn checkpoint(&self, run: &RunId) -> Result<(u32, String)>;
    fn messages(&self, run: &RunId) -> Result<Vec<StoredMessage>>;
    /// Hands the run's messages to `f` one at a time, in order.
    fn each_message<E: From<StoreError>>(&self, run: &RunId, f: impl FnMut(StoredMessage) -> std::result::Result<(), E>) -> std::result::Result<(), E>;
    /// A page of the transcript: up to `limit` messages after seq `after`, in order.
    fn messages_after(&self, run: &RunId, after: i64, limit: u32) -> Result<Vec<StoredMessage>>;
    /// The opening (step 0) and the messages of steps `from` on, in order, without
    /// reading the steps between (a resume that keeps only its last steps).
    fn opening_and_since(&self, run: &RunId, from: u32) -> Result<Vec<StoredMessage>>;
    /// A page of the trace: up to `limit` events after event id `after`, with their ids.
    fn events_after(&self, run: &RunId, after: i64, limit: u32) -> Result<Vec<(i64, StoredEvent)>>;
    /// The journal rows of steps `first..=last`, in call order.
    fn journal_between(&self, run: &RunId, first: u32, last: u32) -> Result<Vec<JournalEntry>>;
    /// The tool-call journal of a run, in call order.
    fn journal(&self, run: &RunId) -> Result<Vec<JournalEntry>>;
    /// The journal rows of one step, which is all the loop needs on each step.
    fn journal_for_step(&self, run: &RunId, step: u32) -> Result<Vec<JournalEntry>>;
    /// Hands the run's journal to `f` one call at a time, in call order.
    fn each_journal_entry<E: From<StoreError>>(&self, run: &RunId, f: impl FnMut(JournalEntry) -> std::result::Result<(), E>) -> std::result::Result<(), E>;
    fn events(&self, run: &RunId) -> Result<Vec<StoredEvent>>;
    /// The trace events stored under one step (the hooks' decisions, issue 26).
    fn events_of_step(&self, run: &RunId, step: u32) -> Result<Vec<StoredEvent>>;
    /// Hands the run's trace to `f` one event at a time, in order.
    fn each_event<E: From<StoreError>>(&self, run: &RunId, f: impl FnMut(StoredEvent) -> std::result::Result<(), E>) -> std::result::Result<(), E>;
    fn escalation(&self, id: EscalationId) -> Result<EscalationRow>;
    /// Open escalations (or all, newest first).
    fn list_escalations(&self, all: bool) -> Result<Vec<EscalationRow>>;
    fn escalations_for_run(&self, run: &RunId) -> Result<Vec<EscalationRow>>;
    /// Records a person's decision. Refused when already resolved.
    fn resolve_escalation(&self, id: EscalationId, resolution: &Resolution, by: &str) -> Result<()>;
    /// Marks a between-step escalation's decision as carried into the run.
    fn mark_applied(&self, lease: &Lease, id: EscalationId) -> Result<()>;
    /// Pending notification events, oldest first (issue 24).
    fn pending_notices(&self, limit: u32) -> Result<Vec<Notice>>;
    /// One run's pending notification events, oldest first.
    fn pending_notices_of(&self, run: &RunId, limit: u32) -> Result<Vec<Notice>>;
    /// Notification events that failed at least once (all with `all`), newest first.
    fn list_notices(&self, all: bool) -> Result<Vec<Notice>>;
    /// Takes a pending event for this process to send (false: it is not pending, or
    /// a live process is sending it); [`mark_notice`] gives the claim up.
    fn claim_notice(&self, id: &str) -> Result<bool>;
    /// Records how a delivery of a notification event went.
    fn mark_notice(&self, id: &str, how: &Delivery) -> Result<()>;
    /// Deletes one run and everything it owns. Returns false when no such run exists.
    fn delete_run(&self, id: &RunId) -> Result<bool>;
    /// Makes removed runs unrecoverable from the database's files (after `delete_run`);
    /// `vacuum` also rebuilds them.
    fn scrub(&self, vacuum: bool) -> Result<()>;
    /// Cancels a run, or asks the live process holding it to (issue 21).
    fn cancel_run(&self, id: &RunId, by: &str, reason: Option<&str>) -> Result<CancelOutcome>;
    /// The cancel asked for an unfinished run, if any (read by the holder's pulse).
    fn cancel_request(&self, run: &RunId) -> Result<Option<CancelRequest>>;
    /// [`Store::cancel_request`] for many runs in one query (a worker's pulse): the
    /// runs among `runs` someone asked to cancel.
    fn cancel_requests(&self, runs: &[RunId]) -> Result<Vec<(RunId, CancelRequest)>>;
    /// Who asked to cancel a run, when and why, if anyone did.
    fn cancel_info(&self, run: &RunId) -> Result<Option<CancelRequest>>;
    /// Creates a fork of a run: its history up to a committed step, in one
    /// transaction (`runs fork`, issue 21; see `store/fork.rs`).
    fn fork_run(&self, f: &ForkRun<'_>) -> Result<Forked>;
    /// Stores a person's message for a run, to be delivered at its next step
    /// boundary (`runs send`); refused for a finished run.
    fn send_message(&self, run: &RunId, text: &str, by: &str) -> Result<SentMessage>;
    /// Every message sent to a run, oldest first.
    fn sent_messages(&self, run: &RunId) -> Result<Vec<SentMessage>>;
    /// The messages sent to a run and not yet delivered, oldest first.
    fn undelivered_messages(&self, run: &RunId) -> Result<Vec<SentMessage>>;
    /// Appends sent messages to the transcript after `step` and marks them delivered.
    fn deliver_messages(&self, lease: &Lease, step: u32, messages: &[(i64, Message)]) -> Result<()>;
    /// Every rate-limit key with its live holds, and the store's clock (`agentrun limits`).
    fn limit_rows(&self) -> Result<(Vec<LimitRow>, i64)>;
    /// What a run waits for under rate limits now: each key's label and waiting hold.
    fn limit_waits_of(&self, run: &RunId) -> Result<Vec<(String, LimitHold)>>;
    /// Replaces a held run's config snapshot and scripts (`resume --model`).
    fn replace_snapshot(
        &self,
        lease: &Lease,
        snapshot: &str,
        scripts: &BTreeMap<String, String>,
    ) -> Result<()>;
}

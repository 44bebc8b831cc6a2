//! The store's errors: each names the database and what is wrong with it, never a
//! password; `is_bad_input` sorts them into exit 2 (what the user pointed us at) and
//! failures.

use crate::records::{RunId, RunStatus};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error("database {path} is not an agentrun database ({message}); it was left untouched")]
    NotADatabase { path: PathBuf, message: String },
    #[error(
        "database {path} is damaged ({message}); it was left untouched: restore it from a backup"
    )]
    Damaged { path: PathBuf, message: String },
    #[error(
        "database {path} is read-only; agentrun needs to write to it (check its permissions and attributes)"
    )]
    ReadOnly { path: PathBuf },
    #[error(
        "database {path} is locked by another process (waited {waited_ms} ms); try again when it is done"
    )]
    Locked { path: PathBuf, waited_ms: u128 },
    #[error(
        "database {path} was written by a newer agentrun (schema {found}, this build knows {known})"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("no run `{0}` in this database (see `agentrun runs list`)")]
    RunNotFound(String),
    #[error("run id prefix `{prefix}` is ambiguous: it matches {matches}")]
    AmbiguousRun { prefix: String, matches: String },
    #[error(
        "run {run} is held by pid {pid} (lease taken {since}); wait for it to finish, or stop that process first"
    )]
    LeaseHeld { run: RunId, pid: i64, since: String },
    /// Another process took the run over; this process must stop writing.
    #[error("run {0} was taken over by another process; this process stopped writing to it")]
    LeaseLost(RunId),
    #[error(
        "run {run} has {last} committed step{}; it cannot be forked at step {step}",
        if *.last == 1 { "" } else { "s" }
    )]
    ForkPastEnd { run: RunId, step: u32, last: u32 },
    #[error(
        "run {run} was recorded before step states were kept, so only its last step ({last}) can be forked, not step {step}"
    )]
    ForkStepUnknown { run: RunId, step: u32, last: u32 },
    #[error(
        "run {run} is {status}: it will read no more messages (fork it to continue: `agentrun runs fork {run}`)"
    )]
    NotListening { run: RunId, status: RunStatus },
    #[error("no escalation `{0}` (see `agentrun escalations list --all`)")]
    EscalationNotFound(String),
    #[error("escalation {0} is already resolved; a decision is recorded once")]
    AlreadyResolved(i64),
    #[error("escalation {0} was closed when its run was cancelled; nothing is left to decide")]
    EscalationCancelled(i64),
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// Every connection of this process's pool stayed busy for the whole wait.
    #[error(
        "database {path}: all {size} connections of this process stayed busy for {waited_ms} ms; raise --db-pool (AGENTRUN_DB_POOL, or db_pool in the config file), or look for a stuck statement in pg_stat_activity"
    )]
    PoolExhausted {
        path: PathBuf,
        size: usize,
        waited_ms: u128,
    },
    /// A PostgreSQL error (the server's message; never the connection string).
    #[error("database error: {0}")]
    Postgres(String),
    #[error("stored data for run {run} is damaged: {message}")]
    Corrupt { run: String, message: String },
}

impl StoreError {
    /// Errors caused by what the user pointed us at (exit 2), as opposed to failures.
    pub fn is_bad_input(&self) -> bool {
        match self {
            // Damage found by a query after open is still a problem with the file.
            StoreError::Sqlite(e) => is_damage(e),
            StoreError::Postgres(_) => false,
            StoreError::LeaseLost(_) | StoreError::PoolExhausted { .. } => false,
            _ => true,
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Whether an SQLite error says the file is damaged (bad input, not a failure).
pub(crate) fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_past_the_end_counts_its_steps_in_words() {
        let past = |last| StoreError::ForkPastEnd {
            run: RunId("r".into()),
            step: 9,
            last,
        };
        assert_eq!(
            past(1).to_string(),
            "run r has 1 committed step; it cannot be forked at step 9"
        );
        assert!(past(2).to_string().contains("has 2 committed steps;"));
    }
}

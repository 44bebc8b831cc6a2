//! What the store keeps of rate limits (docs/rate-limits.md): one row per limit key
//! (its configuration and schedule as the governor wrote them, JSON the store never
//! reads) and one row per request or tool call waiting for, or holding, a place under
//! a key. The rules live in `crate::govern`; the store gives each key's state and live
//! holds to a closure inside one transaction and writes back what it answers, so the
//! two backends share every decision and differ only in SQL.
//!
//! A hold is live while the lease it names is: the run's row still carries that lease
//! token, is running, and its holder's heartbeat is younger than the lease TTL. Every
//! transaction on a key first deletes the key's dead holds, so a killed holder's
//! places come free within one lease period and never leak.

use crate::records::RunId;

/// A request or call waiting for (`start_at` unset) or holding (`start_at` set) a
/// place under a limit key.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitHold {
    pub id: String,
    pub run: RunId,
    pub lease_token: i64,
    /// Higher goes first; first come, first served within a priority.
    pub priority: i64,
    /// Tokens reserved (a model request's estimate plus its output cap).
    pub tokens: i64,
    /// What the hold added to the key's schedule, in milliseconds of the key's time.
    pub cost: f64,
    /// When it may go (store clock, ms); unset while it waits its turn.
    pub start_at: Option<i64>,
    pub created_at: i64,
    /// What it waits for, as people read it ("the openai:gpt-4o token limit").
    pub waiting_for: Option<String>,
}

/// A key as one transaction sees it: the store's clock (PostgreSQL: the server's),
/// the governor's state (`None` for a key never used) and the key's live holds.
#[derive(Debug, Clone)]
pub struct LimitView {
    pub now_ms: i64,
    pub state: Option<String>,
    pub holds: Vec<LimitHold>,
}

/// What a transaction on a key writes back.
#[derive(Debug, Clone, Default)]
pub struct LimitWrite {
    pub label: String,
    pub config: String,
    pub state: String,
    pub holds: Vec<HoldWrite>,
}

#[derive(Debug, Clone)]
pub enum HoldWrite {
    /// Inserts the hold, or replaces the one with its id.
    Put(LimitHold),
    Delete(String),
}

/// One key as `agentrun limits` shows it.
#[derive(Debug, Clone)]
pub struct LimitRow {
    pub key: String,
    pub label: String,
    pub config: String,
    pub state: String,
    pub holds: Vec<LimitHold>,
}

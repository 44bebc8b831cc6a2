//! Rate governance (docs/rate-limits.md; docs/ARCHITECTURE.md, "Rate limits"): one
//! shared budget of requests, tokens and concurrency per model endpoint and per tool,
//! across every run and process on the database.
//!
//! - `schedule`: the rules, without IO — who goes next and when, settling, the
//!   provider's pause and the rate's climb back;
//! - `gate`: a run's way in — it waits its turn under a key through the store
//!   (`Store::limit_step`), sleeps until its start, and settles after;
//! - `model`: the one call site around a model attempt, which also takes the
//!   provider's word (429, `Retry-After`) to the key instead of to the run's retries;
//! - `show`: what `agentrun limits` prints.
//!
//! Limits come from tools.toml (`[models."SPEC"]`, `rate` / `max_concurrent` of a tool
//! or MCP server); a key without limits is not governed and costs nothing.

mod gate;
pub mod model;
pub mod schedule;
pub mod show;

pub use gate::{Gate, Key, Ticket};
pub use schedule::{KeyState, Limit, Reason};

use std::collections::BTreeMap;

/// The limits of one model spec (`[models."SPEC"]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelLimit {
    pub limit: Limit,
    /// Models naming the same key share one budget; without it, the key is the spec,
    /// its endpoint and a digest of its API key.
    pub limit_key: Option<String>,
}

/// Every limit a tools.toml sets.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Limits {
    /// By model spec as tasks name it (`openai:gpt-4o`).
    pub models: BTreeMap<String, ModelLimit>,
    /// By tool name (`[tools.NAME]`).
    pub tools: BTreeMap<String, Limit>,
    /// By MCP server (`[mcp.NAME]`): every tool of the server shares them.
    pub mcp: BTreeMap<String, Limit>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        self.models.is_empty() && self.tools.is_empty() && self.mcp.is_empty()
    }
}

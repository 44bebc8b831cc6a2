//! What `agentrun limits` shows of each key: its limits, its use in the last window,
//! what is reserved and in flight, who waits, and whether the provider paused or
//! lowered it.

use super::schedule::{KeyState, Limit};
use crate::store::LimitRow;
use serde::Serialize;

/// One key, ready to print or to serialise (`--json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeyView {
    pub key: String,
    pub label: String,
    pub limit: Option<Limit>,
    /// Requests and tokens begun in the last whole window.
    pub requests_last_window: u64,
    pub tokens_last_window: u64,
    /// Requests and tokens begun in the window now running.
    pub requests_this_window: u64,
    pub tokens_this_window: u64,
    /// Requests or calls started and not yet settled, and the tokens they reserve.
    pub in_flight: usize,
    pub reserved_tokens: i64,
    /// Requests or calls waiting their turn.
    pub waiting: usize,
    /// The share of the configured rate in force (below 1 after a refusal).
    pub rate_factor: f64,
    /// Milliseconds until the provider's pause ends (0: not paused).
    pub paused_ms: i64,
    pub refusals: u64,
}

pub fn view(row: &LimitRow, now: i64) -> KeyView {
    let limit: Option<Limit> = serde_json::from_str(&row.config).ok();
    let state: KeyState = serde_json::from_str(&row.state).unwrap_or_default();
    let window = limit.map_or(60_000, |l| l.window_ms as i64).max(1);
    let current = now < state.window_start + window;
    let last_current = now < state.window_start + 2 * window;
    let started: Vec<_> = row.holds.iter().filter(|h| h.start_at.is_some()).collect();
    KeyView {
        key: row.key.clone(),
        label: row.label.clone(),
        limit,
        requests_last_window: match (current, last_current) {
            (true, _) => state.last_requests,
            (false, true) => state.requests,
            _ => 0,
        },
        tokens_last_window: match (current, last_current) {
            (true, _) => state.last_tokens,
            (false, true) => state.tokens,
            _ => 0,
        },
        requests_this_window: if current { state.requests } else { 0 },
        tokens_this_window: if current { state.tokens } else { 0 },
        in_flight: started.len(),
        reserved_tokens: started.iter().map(|h| h.tokens).sum(),
        waiting: row.holds.len() - started.len(),
        rate_factor: limit.map_or(1.0, |l| state.factor(now, &l)),
        paused_ms: (state.paused_until - now).max(0),
        refusals: state.refusals,
    }
}

/// The table `agentrun limits` prints.
pub fn table(keys: &[KeyView]) -> String {
    if keys.is_empty() {
        return "no rate limits used yet (set them in tools.toml: docs/rate-limits.md)\n".into();
    }
    let mut out = String::new();
    for k in keys {
        out.push_str(&format!("{}\n", k.label));
        out.push_str(&format!("  limit      {}\n", limit_text(k.limit.as_ref())));
        out.push_str(&format!(
            "  use        {} requests, {} tokens in the last window ({} and {} so far in this one)\n",
            k.requests_last_window, k.tokens_last_window, k.requests_this_window, k.tokens_this_window
        ));
        out.push_str(&format!(
            "  now        {} in flight ({} tokens reserved), {} waiting\n",
            k.in_flight, k.reserved_tokens, k.waiting
        ));
        if k.rate_factor < 1.0 || k.paused_ms > 0 || k.refusals > 0 {
            out.push_str(&format!(
                "  provider   {} refusals; rate at {:.0}%{}\n",
                k.refusals,
                k.rate_factor * 100.0,
                if k.paused_ms > 0 {
                    format!(", paused for {:.1} s", k.paused_ms as f64 / 1000.0)
                } else {
                    String::new()
                }
            ));
        }
    }
    out
}

fn limit_text(limit: Option<&Limit>) -> String {
    let Some(l) = limit else {
        return "unknown".into();
    };
    let per = match l.window_ms {
        60_000 => "min".to_string(),
        1_000 => "s".to_string(),
        ms => humantime::format_duration(std::time::Duration::from_millis(ms)).to_string(),
    };
    let mut parts = Vec::new();
    if let Some(r) = l.requests {
        parts.push(format!("{r} requests/{per}"));
    }
    if let Some(t) = l.tokens {
        parts.push(format!("{t} tokens/{per}"));
    }
    if let Some(c) = l.max_concurrent {
        parts.push(format!("{c} at once"));
    }
    parts.join(", ")
}

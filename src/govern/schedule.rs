//! The rules of a limit key, without IO: who goes next and when, what a settled
//! request gives back, and what the provider's word does to the rate. The gate
//! (`gate.rs`) runs these inside one store transaction per step, so every process on
//! the database applies them to the same state.
//!
//! **A schedule, not a counter.** A key keeps one "theoretical arrival time" (`tat`,
//! the generic cell rate algorithm): the time by which everything scheduled so far has
//! been paid for at the key's rate. A request costs the larger of one request's share
//! of the window (`window / rpm`) and its tokens' share (`window × tokens / tpm`), so
//! both limits hold; it may start at `max(now, tat)` and moves `tat` on by its cost
//! (`tat` lags `now` by at most [`burst`]: time a quiet key banks).
//! Requests are given start times only up to [`horizon`] ahead; the rest wait in line,
//! highest priority first and first come within a priority, and a later one never
//! passes an earlier one (a waiter that cannot go blocks those behind it). Nobody is
//! thus starved, and nobody asks the provider only to be refused.
//!
//! **Settling.** A model request reserves its estimate plus its output cap; when the
//! answer says what it used, the difference goes back to the schedule at once.
//!
//! **The provider's word wins.** A refusal (429) pauses the key until its
//! `Retry-After` and halves the rate; the rate then climbs back by a quarter of the
//! configured rate per window (additive increase). Pending start times move with the
//! pause, keeping their order.

use crate::store::LimitHold;
use serde::{Deserialize, Serialize};

/// A key's limits, resolved: what its configuration says, in one shape for model
/// endpoints and tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    /// Requests (calls) per window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    /// Tokens (input + output) per window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Requests in flight at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    /// The window `requests` and `tokens` are counted over (a minute unless set).
    pub window_ms: u64,
}

/// How far ahead start times are given out: a thirtieth of the window (2 s of a
/// minute). Shorter means more turns at the store; longer means more places to move
/// when the provider pauses the key.
pub fn horizon(limit: &Limit) -> f64 {
    (limit.window_ms as f64 / 30.0).max(1.0)
}

/// How much unused time a key may bank: a tenth of the window. A start missed by a
/// waiter that looked late is not lost, and a burst after a quiet spell stays a
/// tenth of what the provider's own bucket (a whole window) allows.
pub fn burst(limit: &Limit) -> f64 {
    limit.window_ms as f64 / 10.0
}

/// How much of the configured rate a refusal takes away, and how much comes back per
/// window after it.
const CUT: f64 = 0.5;
const RAMP_PER_WINDOW: f64 = 0.25;
/// The rate never goes below this share of the configured one.
const FLOOR: f64 = 0.1;

/// A key's shared state, kept by the store as JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct KeyState {
    /// When everything scheduled so far is paid for (store clock, ms).
    pub tat: f64,
    /// No request starts before this (the provider asked to wait).
    pub paused_until: i64,
    /// How far below the configured rate the key was set at `lowered_at` (0: not).
    pub lowered: f64,
    pub lowered_at: i64,
    /// Use in fixed windows: the current one (from `window_start`) and the last.
    pub window_start: i64,
    pub requests: u64,
    pub tokens: u64,
    pub last_requests: u64,
    pub last_tokens: u64,
    /// Refusals the provider sent under this key, ever.
    pub refusals: u64,
}

/// What holds a waiter back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Requests,
    Tokens,
    Concurrency,
    /// The provider asked to wait.
    Provider,
}

impl Reason {
    /// "request limit", "token limit", …: what a waiting run says it waits for.
    pub fn noun(self) -> &'static str {
        match self {
            Reason::Requests => "request limit",
            Reason::Tokens => "token limit",
            Reason::Concurrency => "concurrency limit",
            Reason::Provider => "provider's pause",
        }
    }
}

/// A waiter's place after a pass: when it is expected to start (store clock; `None`
/// when a concurrency slot must come free first) and what holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Wait {
    pub expected: Option<i64>,
    pub reason: Reason,
}

impl KeyState {
    /// The share of the configured rate in force at `now`.
    pub fn factor(&self, now: i64, limit: &Limit) -> f64 {
        let windows = (now - self.lowered_at).max(0) as f64 / limit.window_ms.max(1) as f64;
        let lowered = (self.lowered - RAMP_PER_WINDOW * windows).max(0.0);
        (1.0 - lowered).max(FLOOR)
    }

    /// Moves the use counters on to the window `now` is in.
    fn roll(&mut self, now: i64, window: i64) {
        let window = window.max(1);
        if now < self.window_start + window {
            return;
        }
        let (last_r, last_t) = if now < self.window_start + 2 * window {
            (self.requests, self.tokens)
        } else {
            (0, 0)
        };
        self.last_requests = last_r;
        self.last_tokens = last_t;
        self.requests = 0;
        self.tokens = 0;
        self.window_start = now - (now - self.window_start) % window;
    }
}

/// What a request of `tokens` costs the schedule (ms) at `factor` of the rate.
pub fn cost(limit: &Limit, tokens: i64, factor: f64) -> f64 {
    let window = limit.window_ms as f64;
    let per_request = limit
        .requests
        .map_or(0.0, |r| window / (r.max(1) as f64 * factor));
    let per_tokens = limit.tokens.map_or(0.0, |t| {
        // A request larger than a whole window's tokens costs the whole window: the
        // provider would refuse it anyway, and it must not block the key for longer.
        let tokens = (tokens.max(0) as u64).min(t) as f64;
        window * tokens / (t.max(1) as f64 * factor)
    });
    per_request.max(per_tokens)
}

fn which(limit: &Limit, tokens: i64, factor: f64) -> Reason {
    let window = limit.window_ms as f64;
    let per_request = limit
        .requests
        .map_or(0.0, |r| window / (r.max(1) as f64 * factor));
    if cost(limit, tokens, factor) > per_request {
        Reason::Tokens
    } else {
        Reason::Requests
    }
}

/// The waiters of `holds` in the order they are served.
fn line(holds: &[LimitHold]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..holds.len())
        .filter(|&i| holds[i].start_at.is_none())
        .collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&holds[a], &holds[b]);
        b.priority
            .cmp(&a.priority)
            .then(a.created_at.cmp(&b.created_at))
            .then(a.id.cmp(&b.id))
    });
    order
}

/// Gives start times to the waiters at the head of the line, as far as the limits and
/// [`horizon`] allow. Returns, for each hold that still waits, its expected start and
/// what holds it; the holds given a start have `start_at` and `cost` set.
pub fn pass(
    limit: &Limit,
    state: &mut KeyState,
    holds: &mut [LimitHold],
    now: i64,
) -> Vec<(usize, Wait)> {
    state.roll(now, limit.window_ms as i64);
    let factor = state.factor(now, limit);
    let mut active = holds.iter().filter(|h| h.start_at.is_some()).count() as u64;
    state.tat = state.tat.max(now as f64 - burst(limit));
    let mut tat = state.tat;
    let mut blocked: Option<Reason> = None;
    let mut waits = Vec::new();
    for i in line(holds) {
        let h = &mut holds[i];
        let cost = cost(limit, h.tokens, factor);
        let start = (now as f64).max(tat).max(state.paused_until as f64);
        let full = limit.max_concurrent.is_some_and(|m| active >= u64::from(m));
        if blocked.is_none() && !full && start <= now as f64 + horizon(limit) {
            h.start_at = Some(start.ceil() as i64);
            h.cost = cost;
            h.waiting_for = None;
            // Banked time is spent before the clock's: `tat` may stay behind `now`.
            tat = tat.max(state.paused_until as f64) + cost;
            state.tat = tat;
            state.requests += 1;
            state.tokens += h.tokens.max(0) as u64;
            active += 1;
            continue;
        }
        let reason = match blocked {
            Some(r) => r,
            None if full => Reason::Concurrency,
            None if state.paused_until as f64 >= start => Reason::Provider,
            None => which(limit, h.tokens, factor),
        };
        blocked = Some(reason);
        let expected = (reason != Reason::Concurrency).then_some(start.ceil() as i64);
        tat = tat.max(state.paused_until as f64) + cost;
        waits.push((i, Wait { expected, reason }));
    }
    waits
}

/// A request done: its reservation becomes what it used (`used`: tokens the provider
/// reported; `None` keeps the reservation).
pub fn settle(limit: &Limit, state: &mut KeyState, hold: &LimitHold, used: Option<i64>, now: i64) {
    state.roll(now, limit.window_ms as i64);
    let Some(used) = used else { return };
    let factor = state.factor(now, limit);
    let actual = cost(limit, used, factor);
    state.tat += actual - hold.cost;
    state.tokens = (state.tokens as i64 + used - hold.tokens).max(0) as u64;
}

/// The provider refused a request (`lower`: a 429, which also lowers the rate) or said
/// its budget is spent: nothing starts under the key before `until`.
pub fn pause(
    limit: &Limit,
    state: &mut KeyState,
    holds: &mut [LimitHold],
    now: i64,
    until: i64,
    lower: bool,
) {
    if lower {
        state.refusals += 1;
        // One cut per pause: the refusals of requests already in flight when the first
        // came say the same thing again.
        if now >= state.paused_until {
            let factor = state.factor(now, limit) * CUT;
            state.lowered = 1.0 - factor.max(FLOOR);
            state.lowered_at = now;
        }
    }
    let shift = until - now.max(state.paused_until);
    if shift <= 0 {
        return;
    }
    state.paused_until = until;
    state.tat = state.tat.max(now as f64) + shift as f64;
    for h in holds.iter_mut() {
        if let Some(start) = h.start_at.filter(|&s| s > now) {
            h.start_at = Some(start + shift);
        }
    }
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;

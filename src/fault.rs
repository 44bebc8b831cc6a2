//! Fault injection and observation hooks for the durability tests (issue 6).
//!
//! In debug builds, `AGENTRUN_CRASH_AT=NAME` (or `NAME:N` for the N-th time the point
//! is reached, from 1) makes the process abort at that point — no destructors, no
//! flushing, like `kill -9`. `AGENTRUN_OBSERVE_LOG=PATH` makes [`observe`] append
//! lines to PATH, so a test can see from outside what the process asked for (the
//! scripted model logs every request). Release builds compile both to nothing, so
//! production behaviour cannot be changed through the environment.

/// The points a test can crash at, in the order a step reaches them. Calls with
/// hooks (issue 26) also pass `after_hook_started`, `after_hook_ran` and
/// `after_hook_decided` (not listed here: only runs with hooks reach them;
/// `tests/it/hooks.rs` crashes at each).
///
/// `after_tool_intent` and `after_tool_effect` are reached by every tool call;
/// `after_tool_outcome` by every call except a step's idempotent last one (whose
/// outcome rides in the step commit) — unless that one finished while a call before it
/// still ran, when it is journaled as it arrives; `inside_commit` and `after_commit`
/// by every step commit.
pub const POINTS: &[&str] = &[
    "after_model_stored",
    "after_tool_intent",
    "after_tool_effect",
    "after_tool_outcome",
    "inside_commit",
    "after_commit",
];

/// The points of a cancel (issue 21): inside the transaction that cancels a run nobody
/// holds (rolled back), in `runs cancel` after it asked a live holder to stop, and in
/// the holder after it read the request but before it stopped the run.
pub const CANCEL_POINTS: &[&str] = &["inside_cancel", "after_cancel_requested", "cancel_seen"];

/// The points of the notification outbox (issue 24), in the order an event reaches
/// them: inside the transaction that writes the event (before its commit), after the
/// commit before the event is sent, and after it was sent before it is marked.
/// `tests/it/notify.rs` kills the process at each and checks every event still reaches
/// the receiver, once by its id.
pub const NOTIFY_POINTS: &[&str] = &[
    "notify_before_commit",
    "notify_after_commit",
    "notify_after_delivery",
];

/// The points of the operators' commands (issue 21), outside the step's order: inside
/// and after the transaction of `runs fork` and of `runs send`, and inside and after
/// the holder's delivery of a sent message at a step boundary.
/// `tests/it/fork_send_crash.rs` crashes at each.
pub const OPERATOR_POINTS: &[&str] = &[
    "inside_fork",
    "after_fork",
    "inside_send",
    "after_send",
    "inside_delivery",
    "after_delivery",
];

#[cfg(debug_assertions)]
pub fn point(name: &str) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static HITS: AtomicU32 = AtomicU32::new(0);
    let Ok(spec) = std::env::var("AGENTRUN_CRASH_AT") else {
        return;
    };
    let (want, nth) = match spec.split_once(':') {
        Some((n, k)) => (n, k.parse::<u32>().unwrap_or(1)),
        None => (spec.as_str(), 1),
    };
    if want == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 == nth {
        crate::errln!("agentrun: crash point {name} reached (AGENTRUN_CRASH_AT)");
        std::process::abort();
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn point(_name: &str) {}

/// Appends `line()` to `AGENTRUN_OBSERVE_LOG` (debug builds only). One `write` of a
/// whole line to a file opened for appending, so lines from several processes (and
/// the tools they run) interleave but never tear.
#[cfg(debug_assertions)]
pub fn observe(line: impl FnOnce() -> String) {
    use std::io::Write;
    let Some(path) = std::env::var_os("AGENTRUN_OBSERVE_LOG") else {
        return;
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path);
    // A test hook: failing to log must not change what the run does.
    if let Ok(mut f) = file {
        let _ = f.write_all(format!("{}\n", line()).as_bytes());
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn observe(_line: impl FnOnce() -> String) {}

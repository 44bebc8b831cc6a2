//! Named crash points for fault-injection tests.
//!
//! In debug builds, `AGENTRUN_CRASH_AT=NAME` (or `NAME:N` for the N-th time the point
//! is reached, from 1) makes the process abort at that point — no destructors, no
//! flushing, like `kill -9`. Release builds compile this to nothing, so production
//! behaviour cannot be changed through the environment.

/// The points a test can crash at, in the order a step reaches them.
pub const POINTS: &[&str] = &[
    "after_model_stored",
    "after_tool_intent",
    "after_tool_effect",
    "after_tool_outcome",
    "inside_commit",
    "after_commit",
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
        eprintln!("agentrun: crash point {name} reached (AGENTRUN_CRASH_AT)");
        std::process::abort();
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn point(_name: &str) {}

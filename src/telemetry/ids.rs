//! Trace and span ids a run can compute again in any process (docs/observability.md,
//! "One trace per run"): the trace id comes from the id of the run at the top of the
//! tree, the run's own span and each tool call's span from the run id and call id. So a
//! run resumed by another process, and a sub-agent's child run, join the same trace
//! without anything stored.

use opentelemetry::trace::{SpanId, TraceId};
use sha2::{Digest, Sha256};

fn digest(parts: &[&str]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        // A separator no id contains, so ("ab","c") and ("a","bc") differ.
        h.update([0u8]);
    }
    h.finalize().into()
}

/// The trace of the run tree whose top run is `top_run`.
pub fn trace_id(top_run: &str) -> TraceId {
    let d = digest(&["agentrun trace", top_run]);
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    // An all-zero id is invalid in W3C Trace Context; a digest is never all zero in
    // practice, but make sure.
    b[15] |= (b == [0u8; 16]) as u8;
    TraceId::from_bytes(b)
}

fn span_of(parts: &[&str]) -> SpanId {
    let d = digest(parts);
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    b[7] |= (b == [0u8; 8]) as u8;
    SpanId::from_bytes(b)
}

/// The `invoke_agent` span of a run (one per run, whichever process ends it).
pub fn run_span(run: &str) -> SpanId {
    span_of(&["agentrun run", run])
}

/// The `execute_tool` span of one call (the call id is kept across resumes).
pub fn tool_span(run: &str, call_id: &str) -> SpanId {
    span_of(&["agentrun tool", run, call_id])
}

/// A span nothing refers to by id: a model request, a process's segment of a run.
pub fn random_span() -> SpanId {
    loop {
        let id = SpanId::from_bytes(rand::random::<u64>().to_be_bytes());
        if id != SpanId::INVALID {
            return id;
        }
    }
}

/// The W3C `traceparent` header value for a span of a sampled trace.
pub fn traceparent(trace: TraceId, span: SpanId) -> String {
    format!("00-{trace}-{span}-01")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinct() {
        assert_eq!(trace_id("r1"), trace_id("r1"));
        assert_ne!(trace_id("r1"), trace_id("r2"));
        assert_ne!(tool_span("r1", "c1"), tool_span("r1", "c2"));
        assert_ne!(tool_span("r1", "c1"), run_span("r1"));
        let tp = traceparent(trace_id("r1"), run_span("r1"));
        assert_eq!(tp.len(), 55);
        assert!(tp.starts_with("00-") && tp.ends_with("-01"), "{tp}");
    }
}

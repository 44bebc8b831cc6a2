//! "Peer available, or skip" for the tests that need a real program nobody here wrote
//! (DESIGN §7): MCP servers, PostgreSQL, a browser, llama-server. A missing peer skips
//! the test with one line saying how to install it — whatever else the machine has
//! (Node.js without the MCP package installed is still "missing", issue 27) — and never
//! fails it. `.ci/run` installs every peer and sets `AGENTRUN_TEST_REQUIRE_PEERS=1`,
//! under which a missing peer fails instead, so CI cannot pass by skipping.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

/// Set by `.ci/run`: every peer must be there.
const REQUIRE: &str = "AGENTRUN_TEST_REQUIRE_PEERS";

/// `find()`'s answer; when it is `None`, says once per test binary (past the test
/// harness's capture, so `cargo test` shows it) that the `peer` tests are skipped and
/// how to install it, then returns `None` for the caller to return early.
///
/// ```ignore
/// let Some(server) = peer::available("MCP server-everything", "run .ci/run", find) else {
///     return;
/// };
/// ```
pub fn available<T>(peer: &str, install: &str, find: impl FnOnce() -> Option<T>) -> Option<T> {
    if let Some(found) = find() {
        return Some(found);
    }
    if std::env::var(REQUIRE).is_ok_and(|v| v == "1") {
        panic!("{peer} is not installed, and {REQUIRE}=1 requires it: {install}");
    }
    static SAID: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let first = SAID
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert(peer.to_string());
    if first {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: the tests that need {peer} (not installed here; {install})"
        );
    }
    None
}

/// `program` as found on `PATH`.
pub fn on_path(program: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_peer_is_passed_through() {
        assert_eq!(available("something", "", || Some(7)), Some(7));
        assert!(on_path("sh").is_some());
        assert!(on_path("agentrun-no-such-program").is_none());
    }
}

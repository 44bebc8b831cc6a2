//! "Peer available, or skip" for the tests that need a real program nobody here wrote
//! (docs/ARCHITECTURE.md §7): MCP servers, PostgreSQL, a browser, llama-server. A missing peer
//! skips the test with one line saying how to install it — whatever else the machine has
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
    let first = {
        let mut skipped = SKIPPED.lock().unwrap_or_else(|p| p.into_inner());
        let first = !skipped.iter().any(|s| s.peer == peer);
        skipped.push(Skip {
            peer: peer.to_string(),
            install: install.to_string(),
            test: std::thread::current().name().unwrap_or("?").to_string(),
        });
        first
    };
    if first {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: the tests that need {peer} (not installed here; {install})"
        );
        summary_at_exit();
    }
    None
}

/// One test that returned early for a missing peer.
struct Skip {
    peer: String,
    install: String,
    /// The test harness names each test's thread after the test.
    test: String,
}

static SKIPPED: Mutex<Vec<Skip>> = Mutex::new(Vec::new());

/// A skipped test shows as `ok` in the harness's list, so the binary says at its very
/// end — after the harness's `test result:` line — which tests skipped, per peer, and
/// how to install each peer. Registered once, on the first skip.
fn summary_at_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn print_summary() {
        let skipped = SKIPPED.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(std::io::stderr(), "{}", summary(&skipped));
    }
    // SAFETY: `print_summary` is a plain `extern "C"` function with no arguments that
    // only locks a static and writes to stderr; atexit keeps the pointer.
    ONCE.call_once(|| unsafe {
        libc::atexit(print_summary);
    });
}

/// "N tests passed without running: they need …", then one line per peer.
fn summary(skipped: &[Skip]) -> String {
    let mut peers: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    for s in skipped {
        match peers.iter_mut().find(|(p, _, _)| *p == s.peer) {
            Some((_, _, tests)) => tests.push(&s.test),
            None => peers.push((&s.peer, &s.install, vec![&s.test])),
        }
    }
    let tests: BTreeSet<&str> = skipped.iter().map(|s| s.test.as_str()).collect();
    let mut out = format!(
        "\nSKIPPED: {} test{} above show as `ok` but did not run, for want of a peer:",
        tests.len(),
        if tests.len() == 1 { "" } else { "s" }
    );
    for (peer, install, mut names) in peers {
        names.sort_unstable();
        names.dedup();
        out.push_str(&format!(
            "\n  {peer} ({} test{}; {install}): {}",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            names.join(", ")
        ));
    }
    out
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

    #[test]
    fn the_summary_names_every_skipped_test_under_its_peer() {
        let skip = |peer: &str, test: &str| Skip {
            peer: peer.into(),
            install: format!("install {peer}"),
            test: test.into(),
        };
        let text = summary(&[
            skip("PostgreSQL", "pg::a"),
            skip("fish", "help::fish"),
            skip("PostgreSQL", "pg::b"),
        ]);
        assert_eq!(
            text,
            "\nSKIPPED: 3 tests above show as `ok` but did not run, for want of a peer:\n  \
             PostgreSQL (2 tests; install PostgreSQL): pg::a, pg::b\n  \
             fish (1 test; install fish): help::fish"
        );
    }
}

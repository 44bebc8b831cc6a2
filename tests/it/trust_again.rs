//! Issue 22 — trust, second round: the surfaces added since issue 12 (streaming, MCP,
//! export/rm, budgets) bounded and redacted. Each test pins one finding and fails on
//! the code before its fix.

use crate::common::{Project, Run};
use serde_json::json;

/// A project with one completed run whose answer is `answer`; returns its id.
fn finished_run(answer: &str) -> (Project, String) {
    let p = Project::new();
    p.model_script(json!([{ "text": answer }]));
    p.task("tools = []", "Say it.");
    let (run, _) = p.start(&[]);
    run.expect_code(0);
    let id = p.only_run();
    (p, id)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

// ---- deletion that deletes ---------------------------------------------------------

#[test]
fn a_removed_runs_text_is_gone_from_the_database_file_and_its_wal() {
    let (p, id) = finished_run("MARKER-rm-7d1c9e MARKER-rm-7d1c9e");
    assert!(contains(&p.db_bytes(), "MARKER-rm-7d1c9e"));
    p.run(&["runs", "rm", &id]).expect_code(0);
    assert!(
        !contains(&p.db_bytes(), "MARKER-rm-7d1c9e"),
        "strings still finds it"
    );
}

#[test]
fn prune_vacuum_leaves_no_text_and_shrinks_the_file() {
    let (p, _) = finished_run(&"MARKER-prune-4a2b ".repeat(2000));
    let run = p.run(&["runs", "prune", "--older-than", "0s", "--vacuum"]);
    run.expect_code(0);
    assert!(run.stdout.contains("removed 1 run"), "{run}");
    assert!(!contains(&p.db_bytes(), "MARKER-prune-4a2b"));
}

// ---- ids -----------------------------------------------------------------------------

#[test]
fn like_wildcards_and_an_empty_prefix_select_no_run() {
    let (p, id) = finished_run("kept");
    for prefix in ["%", "_", "", "%%", "_%"] {
        let run: Run = p.run(&["runs", "show", prefix]);
        run.expect_code(2);
        assert!(run.stderr.contains("no run"), "{prefix:?}: {run}");
        p.run(&["runs", "rm", prefix]).expect_code(2);
    }
    // The run is still there, and a real prefix still finds it.
    p.run(&["runs", "show", &id[..4]]).expect_code(0);
}

// ---- man --dir -----------------------------------------------------------------------

#[test]
fn man_dir_does_not_write_through_a_planted_symlink() {
    let p = Project::new();
    let victim = p.write("victim.txt", "precious\n");
    std::fs::create_dir(p.path().join("man1")).unwrap();
    std::os::unix::fs::symlink(&victim, p.path().join("man1/agentrun.1")).unwrap();
    let run = p.run(&["man", "--dir", "man1"]);
    run.expect_code(2);
    assert!(run.stderr.contains("symbolic link"), "{run}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}

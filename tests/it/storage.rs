//! Damaged storage (issue 6 §5): a missing, truncated, non-SQLite, read-only or locked
//! database gives one clear line and exit 2 — never a panic, never a hang, and never a
//! changed byte in the file.

use crate::common::{Project, Run};
use agentrun::store::{NewRun, RunId, Store, StoreError};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// A project with one finished run, its database fully checkpointed into the main file
/// (so the file alone is the database, and damage to it is damage to the data).
fn with_history() -> (Project, String) {
    let p = Project::new();
    p.model_script(json!([{"text": "done"}]));
    p.write("tools.toml", "");
    p.task("", "Say done.");
    p.run(&["start", "task.md"]).expect_code(0);
    let id = p.only_run();
    let conn = rusqlite::Connection::open(p.db()).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    (p, id)
}

fn assert_refused(r: &Run, want: &str, what: &str) {
    assert_eq!(r.code, 2, "{what}\n{r}");
    assert_eq!(r.stderr.lines().count(), 1, "{what}: one line\n{r}");
    assert!(r.stderr.contains(want), "{what}: `{want}` missing\n{r}");
    assert!(!r.stderr.contains("panicked"), "{what}\n{r}");
}

/// Every command that opens an existing database.
fn commands(id: &str) -> Vec<Vec<String>> {
    [
        &["start", "task.md"][..],
        &["resume", id],
        &["runs", "list"],
        &["runs", "show", id],
    ]
    .iter()
    .map(|a| a.iter().map(|s| s.to_string()).collect())
    .collect()
}

fn each_command_is_refused(p: &Project, id: &str, want: &str) {
    let before = std::fs::read(p.db()).unwrap();
    for args in commands(id) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_refused(&p.run(&args), want, &args.join(" "));
        assert!(
            std::fs::read(p.db()).unwrap() == before,
            "{args:?} changed the database"
        );
    }
}

#[test]
fn a_missing_database_is_not_created_by_commands_that_only_read_it() {
    let p = Project::new();
    for args in [
        &["runs", "list"][..],
        &["runs", "show", "abc"],
        &["resume", "abc"],
    ] {
        assert_refused(
            &p.run(args),
            "no such file; `agentrun start` creates it",
            &args.join(" "),
        );
        assert!(!p.db().exists(), "{args:?} created the database");
    }
}

#[test]
fn a_truncated_database_is_reported_as_damaged_and_left_untouched() {
    let (p, id) = with_history();
    let bytes = std::fs::read(p.db()).unwrap();
    p.write_db(&bytes[..bytes.len() / 2]);
    each_command_is_refused(&p, &id, "is damaged");
}

#[test]
fn a_file_that_is_not_sqlite_is_reported_and_left_untouched() {
    let (p, id) = with_history();
    p.write_db("name,qty\napples,3\n".repeat(300));
    each_command_is_refused(&p, &id, "is not an agentrun database");
}

/// Undoes `chattr +i` so the temporary folder can be removed.
struct Immutable<'a>(&'a Path);

impl Drop for Immutable<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(self.0)
            .status();
    }
}

fn writable(path: &Path) -> bool {
    std::fs::OpenOptions::new().append(true).open(path).is_ok()
}

#[test]
fn a_read_only_database_is_reported_and_left_untouched() {
    use std::os::unix::fs::PermissionsExt;
    let (p, id) = with_history();
    let db = p.db();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    // As root (CI containers often are) permission bits do not stop writes; the
    // immutable attribute does, where the filesystem and capabilities allow it.
    let _undo = Immutable(&db);
    if writable(&db) {
        let _ = std::process::Command::new("chattr")
            .arg("+i")
            .arg(&db)
            .status();
    }
    if writable(&db) {
        eprintln!(
            "skipped: cannot make {} read-only here (root without chattr +i)",
            db.display()
        );
        return;
    }
    each_command_is_refused(&p, &id, "is read-only");
}

/// Holds the write lock of `db` (as another agentrun, or any SQLite client, might).
fn lock(db: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
    conn
}

#[test]
fn a_locked_database_fails_a_write_after_the_busy_timeout_and_still_serves_reads() {
    let (p, _) = with_history();
    let _holder = lock(&p.db());
    let store = Store::open(&p.db(), false)
        .unwrap()
        .with_busy_timeout(Duration::from_millis(300))
        .unwrap();
    assert_eq!(
        store.list_runs(None).unwrap().len(),
        1,
        "WAL readers are not blocked"
    );
    let began = Instant::now();
    let messages = [];
    let err = store
        .create_run(&NewRun {
            id: RunId::generate(),
            task: "t",
            task_path: "t.md",
            snapshot: "{}",
            scripts: &Default::default(),
            max_steps: 1,
            max_tokens: 1,
            messages: &messages,
            state: "{}",
        })
        .unwrap_err();
    let waited = began.elapsed();
    assert!(
        matches!(err, StoreError::Locked { waited_ms: 300, .. }),
        "{err:?}"
    );
    assert!(err.is_bad_input(), "exit 2");
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "database {} is locked by another process (waited 300 ms); try again when it is done",
            p.db().display()
        )
    );
}

/// End to end with the default busy timeout (10 s): slow, but it is the real promise.
#[test]
fn a_locked_database_stops_start_with_exit_2_instead_of_hanging() {
    let (p, _) = with_history();
    let before = std::fs::read(p.db()).unwrap();
    let holder = lock(&p.db());
    p.run(&["runs", "list"]).expect_code(0);
    let began = Instant::now();
    let r = p.run(&["start", "task.md"]);
    assert_refused(
        &r,
        "is locked by another process (waited 10000 ms)",
        "start",
    );
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );
    drop(holder);
    assert!(std::fs::read(p.db()).unwrap() == before, "database changed");
}

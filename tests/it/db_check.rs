//! `agentrun db check` (issue 25) on SQLite; the PostgreSQL side is in `pg_tls`.

use crate::common::Project;

#[test]
fn db_check_on_a_missing_sqlite_file_says_so_and_creates_nothing() {
    let p = Project::new();
    let run = p.run(&["db", "check"]);
    run.expect_code(2);
    assert!(run.stderr.contains("no such file"), "{run}");
    assert!(!p.db().exists());
}

#[test]
fn db_check_on_sqlite_reports_the_version_and_an_up_to_date_schema() {
    let p = Project::new();
    p.model_script(serde_json::json!([{"text": "done"}]));
    p.task("", "Say done.");
    p.fast_tools("");
    p.run(&["start", "task.md"]).expect_code(0);
    let json = p.run(&["db", "check", "--json"]);
    json.expect_code(0);
    let v = json.json();
    assert_eq!(v["backend"], "sqlite");
    assert!(
        v["server_version"]
            .as_str()
            .unwrap()
            .starts_with("SQLite 3."),
        "{v}"
    );
    assert_eq!(v["tls"], serde_json::Value::Null);
    assert_eq!(v["pending_migrations"], 0);
    assert_eq!(v["schema_version"], v["known_version"]);
    assert_eq!(v["missing_privileges"], serde_json::json!([]));
    let human = p.run(&["db", "check"]);
    human.expect_code(0);
    assert!(human.stdout.contains("up to date"), "{human}");
    assert!(human.stdout.contains("privileges   ok"), "{human}");
}

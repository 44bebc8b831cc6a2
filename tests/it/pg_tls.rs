//! PostgreSQL as people run it (issue 25): TLS against the `ssl = on` server `.ci/pg`
//! starts (a certificate for `localhost` from a throwaway CA), the libpq credential
//! sources, and passwords never shown. Each test names the class of failure it pins
//! and the one-line message a user gets for it.
//!
//! Needs `AGENTRUN_TEST_PG` and `.ci/pg`'s TLS exports (`AGENTRUN_TEST_PG_CA`,
//! `AGENTRUN_TEST_PG_PASSWORD`); without them the tests skip with one line.

use crate::common::{Project, fresh_pg_schema, peer, test_pg};
use std::process::Command;

/// The test server: its base URL, port, CA file and `pwuser`'s password.
struct Server {
    url: String,
    port: String,
    ca: String,
    password: String,
}

fn server() -> Option<Server> {
    peer::available(
        "PostgreSQL with TLS",
        "`eval \"$(.ci/pg start)\"` starts one with a throwaway CA",
        || {
            let url = test_pg()?;
            let ca = std::env::var("AGENTRUN_TEST_PG_CA").ok()?;
            let password = std::env::var("AGENTRUN_TEST_PG_PASSWORD").ok()?;
            let port = url.rsplit_once(':')?.1.split('/').next()?.to_string();
            Some(Server {
                url,
                port,
                ca,
                password,
            })
        },
    )
}

impl Server {
    /// A URL for `user` at `host` in a fresh schema, with extra query parameters.
    fn url_for(&self, user: &str, host: &str, params: &str) -> String {
        let schema = fresh_pg_schema(&self.url);
        let options = schema.split_once('?').map_or("", |(_, q)| q);
        let name = options.rsplit("%3D").next().expect("a search_path");
        let mut c = postgres::Client::connect(&self.url, postgres::NoTls).expect("connect");
        c.batch_execute(&format!("GRANT ALL ON SCHEMA {name} TO tlsonly, pwuser"))
            .expect("grant");
        format!(
            "postgres://{user}@{host}:{}/agentrun?{options}{params}",
            self.port
        )
    }
}

/// `runs list` on `db` with extra environment (and no PG* variables of the caller's).
fn list(db: &str, env: &[(&str, &str)]) -> crate::common::Run {
    let p = Project::new();
    let mut c = p.command(&["runs", "list"]);
    c.env("AGENTRUN_DB", db);
    for k in ["PGPASSWORD", "PGSSLMODE", "PGSSLROOTCERT", "PGPASSFILE"] {
        c.env_remove(k);
    }
    c.env("HOME", p.path());
    for (k, v) in env {
        c.env(k, v);
    }
    crate::common::Run::from_output(c.output().expect("spawn agentrun"))
}

#[test]
fn verify_full_with_the_ca_connects_by_the_certificates_host_name() {
    let Some(s) = server() else { return };
    let db = s.url_for(
        "agentrun",
        "localhost",
        &format!("&sslmode=verify-full&sslrootcert={}", s.ca),
    );
    let run = list(&db, &[]);
    run.expect_code(0);
    assert!(
        run.stderr
            .contains("no runs yet in postgres://agentrun@localhost:"),
        "{run}"
    );
}

#[test]
fn require_encrypts_for_a_role_the_server_allows_only_over_tls() {
    let Some(s) = server() else { return };
    list(&s.url_for("tlsonly", "127.0.0.1", "&sslmode=require"), &[]).expect_code(0);
    // The environment says it as well as the URL, and the default (prefer) uses TLS.
    list(
        &s.url_for("tlsonly", "127.0.0.1", ""),
        &[("PGSSLMODE", "require")],
    )
    .expect_code(0);
    list(&s.url_for("tlsonly", "127.0.0.1", ""), &[]).expect_code(0);
}

#[test]
fn a_certificate_from_another_ca_is_not_trusted() {
    let Some(s) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other-ca.crt");
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=another CA", "-keyout"])
        .arg(dir.path().join("k"))
        .arg("-out")
        .arg(&other)
        .output()
        .expect("openssl");
    assert!(made.status.success());
    let db = s.url_for(
        "agentrun",
        "localhost",
        &format!("&sslmode=verify-full&sslrootcert={}", other.display()),
    );
    let run = list(&db, &[]);
    run.expect_code(2);
    assert!(run.stderr.contains("certificate is not trusted"), "{run}");
    assert!(run.stderr.contains("set sslrootcert"), "{run}");
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
}

#[test]
fn verify_full_refuses_a_host_name_the_certificate_does_not_name() {
    let Some(s) = server() else { return };
    let roots = format!("&sslrootcert={}", s.ca);
    let run = list(
        &s.url_for(
            "agentrun",
            "127.0.0.1",
            &format!("&sslmode=verify-full{roots}"),
        ),
        &[],
    );
    run.expect_code(2);
    assert!(run.stderr.contains("host name mismatch"), "{run}");
    assert!(run.stderr.contains("verify-ca"), "{run}");
    // verify-ca checks the CA only, so the same address is accepted.
    list(
        &s.url_for(
            "agentrun",
            "127.0.0.1",
            &format!("&sslmode=verify-ca{roots}"),
        ),
        &[],
    )
    .expect_code(0);
}

#[test]
fn sslmode_disable_against_a_tls_only_entry_says_to_use_tls() {
    let Some(s) = server() else { return };
    let run = list(&s.url_for("tlsonly", "127.0.0.1", "&sslmode=disable"), &[]);
    run.expect_code(2);
    assert!(run.stderr.contains("accepts only TLS connections"), "{run}");
    assert!(run.stderr.contains("sslmode=require"), "{run}");
}

#[test]
fn a_wrong_port_is_refused_naming_host_and_port() {
    let Some(_) = server() else { return };
    let run = list("postgres://agentrun@127.0.0.1:1/agentrun", &[]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("connection refused at 127.0.0.1:1"),
        "{run}"
    );
}

#[test]
fn pgpassword_and_pgpass_give_the_password_and_it_is_never_shown() {
    let Some(s) = server() else { return };
    let db = s.url_for("pwuser", "127.0.0.1", "");
    // No password anywhere: the message says where to put one.
    let run = list(&db, &[]);
    run.expect_code(2);
    assert!(run.stderr.contains("PGPASSWORD"), "{run}");
    // A wrong one: authentication failed, naming the user and host:port.
    let run = list(&db, &[("PGPASSWORD", "wrong")]);
    run.expect_code(2);
    assert!(
        run.stderr
            .contains("authentication failed for user `pwuser`"),
        "{run}"
    );
    // PGPASSWORD works.
    let run = list(&db, &[("PGPASSWORD", &s.password)]);
    run.expect_code(0);
    assert!(!run.stderr.contains(&s.password) && !run.stdout.contains(&s.password));
    // ~/.pgpass works only when private (0600).
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let pgpass = home.path().join(".pgpass");
    std::fs::write(
        &pgpass,
        format!("127.0.0.1:{}:*:pwuser:{}\n", s.port, s.password),
    )
    .unwrap();
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).unwrap();
    let home_s = home.path().to_str().unwrap();
    list(&db, &[("HOME", home_s)]).expect_code(2);
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    list(&db, &[("HOME", home_s)]).expect_code(0);
}

#[test]
fn a_password_in_db_works_warns_once_and_is_never_printed() {
    let Some(s) = server() else { return };
    let db = s.url_for("pwuser", "127.0.0.1", "");
    let with_pw = db.replacen("pwuser@", &format!("pwuser:{}@", s.password), 1);
    let p = Project::new();
    let mut c = p.command(&["runs", "list", "--db", &with_pw]);
    c.env_remove("AGENTRUN_DB").env_remove("PGPASSWORD");
    let run = crate::common::Run::from_output(c.output().expect("spawn"));
    run.expect_code(0);
    assert_eq!(
        run.stderr.matches("visible to every user").count(),
        1,
        "{run}"
    );
    assert!(!run.stderr.contains(&s.password), "{run}");
    assert!(!run.stdout.contains(&s.password), "{run}");
    assert!(
        run.stderr
            .contains("no runs yet in postgres://pwuser:[redacted]@127.0.0.1:"),
        "{run}"
    );
}

#[test]
fn a_run_started_with_pgpassword_stores_no_password() {
    let Some(s) = server() else { return };
    let db = s.url_for("pwuser", "127.0.0.1", "");
    let p = Project::new();
    p.model_script(serde_json::json!([{"text": "done"}]));
    p.task("", "Say done.");
    p.fast_tools("");
    let mut c = p.command(&["start", "task.md"]);
    c.env("AGENTRUN_DB", &db).env("PGPASSWORD", &s.password);
    let run = crate::common::Run::from_output(c.output().expect("spawn"));
    run.expect_code(0);
    assert!(!run.stderr.contains(&s.password) && !run.stdout.contains(&s.password));
    // Every row of every table in the run's schema, as text: no password.
    let schema_url = db.replacen("pwuser@", &format!("pwuser:{}@", s.password), 1);
    let mut client = postgres::Client::connect(&schema_url, postgres::NoTls).unwrap();
    let tables: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema()",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(tables.len() > 5, "{tables:?}");
    for t in tables {
        let dump: Option<String> = client
            .query_one(
                &format!("SELECT string_agg(x::text, ' ') FROM \"{t}\" x"),
                &[],
            )
            .unwrap()
            .get(0);
        assert!(
            !dump.unwrap_or_default().contains(&s.password),
            "{t} holds the password"
        );
    }
}

/// `db check` with `db` and the environment of [`list`].
fn db_check(db: &str, env: &[(&str, &str)]) -> crate::common::Run {
    let p = Project::new();
    let mut c = p.command(&["db", "check", "--json"]);
    c.env("AGENTRUN_DB", db).env("HOME", p.path());
    for k in ["PGPASSWORD", "PGSSLMODE", "PGSSLROOTCERT", "PGPASSFILE"] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    crate::common::Run::from_output(c.output().expect("spawn agentrun"))
}

#[test]
fn db_check_reports_tls_and_pending_migrations_and_changes_nothing() {
    let Some(s) = server() else { return };
    let db = s.url_for("tlsonly", "127.0.0.1", "&sslmode=require");
    let run = db_check(&db, &[]);
    run.expect_code(0);
    let v = run.json();
    assert_eq!(v["backend"], "postgres");
    assert!(
        v["server_version"]
            .as_str()
            .unwrap()
            .starts_with("PostgreSQL "),
        "{v}"
    );
    assert!(v["tls"].as_str().unwrap().starts_with("TLSv1."), "{v}");
    assert_eq!(v["schema_version"], 0);
    assert!(v["pending_migrations"].as_i64().unwrap() > 0, "{v}");
    assert_eq!(v["missing_privileges"], serde_json::json!([]));
    // Still nothing there: a second look finds the same; opening migrates.
    assert_eq!(db_check(&db, &[]).json()["schema_version"], 0);
    list(&db, &[]).expect_code(0);
    let after = db_check(&db, &[]).json();
    assert_eq!(after["pending_migrations"], 0);
    assert_eq!(after["schema_version"], after["known_version"]);
    // Without TLS the report says so.
    let plain = db_check(&s.url_for("agentrun", "127.0.0.1", "&sslmode=disable"), &[]);
    assert_eq!(plain.json()["tls"], serde_json::Value::Null);
}

#[test]
fn db_check_names_the_right_a_role_lacks() {
    let Some(s) = server() else { return };
    // A schema tlsonly was given no rights on.
    let schema = fresh_pg_schema(&s.url);
    let options = schema.split_once('?').map_or("", |(_, q)| q);
    let db = format!(
        "postgres://tlsonly@127.0.0.1:{}/agentrun?{options}&sslmode=require",
        s.port
    );
    let run = db_check(&db, &[]);
    run.expect_code(2);
    let missing = run.json()["missing_privileges"].to_string();
    assert!(missing.contains("CREATE on"), "{run}");
}

/// A Unix-socket host with `PGSSLMODE=require` connects, as with libpq, which ignores
/// sslmode on a socket (the server offers no TLS there).
#[test]
fn a_unix_socket_host_ignores_sslmode_require() {
    let Some(s) = server() else { return };
    let socket_folder = || {
        std::env::var("AGENTRUN_PG_DIR").ok().filter(|d| {
            std::path::Path::new(d)
                .join(format!(".s.PGSQL.{}", s.port))
                .exists()
        })
    };
    let Some(dir) = peer::available(
        "PostgreSQL's socket folder",
        "start the server with `eval \"$(.ci/pg start)\"`, which sets AGENTRUN_PG_DIR",
        socket_folder,
    ) else {
        return;
    };
    let tcp = s.url_for("agentrun", "127.0.0.1", "");
    let socket = tcp.replace("@127.0.0.1:", &format!("@{}:", dir.replace('/', "%2F")));
    let run = list(&socket, &[("PGSSLMODE", "require")]);
    run.expect_code(0);
    assert!(run.stderr.contains("no runs yet"), "{run}");
}

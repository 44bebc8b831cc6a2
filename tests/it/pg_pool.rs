//! Connections that behave (issue 25): one bounded pool per process (`--db-pool`,
//! `AGENTRUN_DB_POOL`, `db_pool` in the config file, shown by `db check`), a connect
//! timeout that bounds the whole attempt, a statement timeout, and the "server offers
//! no TLS" message.
//!
//! The pool and statement tests need `AGENTRUN_TEST_PG` (they skip with one line
//! without it); the connect-timeout and no-TLS tests use a small server the test
//! starts, so they always run.

use crate::common::{Project, Run, fresh_pg_schema, leased_run, test_pg};
use agentrun::store::{RunStatus, Store};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A project whose runs answer at once, on `db`.
fn quick_project(db: &str) -> Project {
    let mut p = Project::new();
    p.pg = Some(db.to_string());
    p.model_script(serde_json::json!([{"text": "done"}]));
    p.task("", "Say done.");
    p.fast_tools("");
    p
}

/// A role that may hold at most `limit` connections, owning a fresh schema: its URL
/// (the password goes in `PGPASSWORD`, never the URL) and the password.
fn limited_role(server: &str, limit: u32) -> (String, String) {
    let schema_url = fresh_pg_schema(server);
    let schema = schema_url.rsplit("%3D").next().expect("a search_path");
    let role = format!("limited_{schema}");
    let password = format!("pw-{}", std::process::id());
    let mut c = postgres::Client::connect(server, postgres::NoTls).expect("connect");
    c.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN PASSWORD '{password}' CONNECTION LIMIT {limit};
         GRANT ALL ON SCHEMA {schema} TO {role};"
    ))
    .expect("create the role");
    let (base, query) = schema_url.split_once('?').expect("options");
    let (_, host_and_db) = base.split_once('@').expect("user@host");
    (format!("postgres://{role}@{host_and_db}?{query}"), password)
}

/// Waits for `child` at most `limit`; kills it and fails past that.
fn wait_bounded(mut child: Child, limit: Duration) -> (Run, Duration) {
    let began = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            let out = child.wait_with_output().expect("output");
            return (Run::from_output(out), began.elapsed());
        }
        if began.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "agentrun still waiting after {limit:?}\n{}",
                Run::from_output(out)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_worker_with_more_runs_in_flight_than_its_role_may_connect_stays_within_its_pool() {
    let Some(server) = crate::pg::pg_or_say().and(test_pg()) else {
        return;
    };
    // Two connections for the role: one process per connection before issue 25 (a
    // store per run in flight) needed five for a worker with four slots.
    let (url, password) = limited_role(&server, 2);
    let p = quick_project(&url);
    let env = [("PGPASSWORD", password.as_str())];
    let ids: Vec<String> = (0..6)
        .map(|_| {
            let r = p.run_env(&["submit", "task.md"], &env);
            r.expect_code(0);
            r.stdout.trim().to_string()
        })
        .collect();
    let worker = p.run_env(
        &[
            "worker",
            "--concurrency",
            "4",
            "--db-pool",
            "2",
            "--until-idle",
        ],
        &env,
    );
    worker.expect_code(0);
    for id in &ids {
        let v = p.run_env(&["runs", "show", id, "--json"], &env).json();
        assert_eq!(v["status"], "completed", "{id}: {v}");
    }
    let check = p.run_env(&["db", "check", "--json", "--db-pool", "2"], &env);
    check.expect_code(0);
    assert_eq!(check.json()["pool_size"], 2, "{check}");
}

#[test]
fn the_pool_size_comes_from_the_flag_the_environment_or_the_config_file() {
    let Some(server) = crate::pg::pg_or_say().and(test_pg()) else {
        return;
    };
    let p = quick_project(&fresh_pg_schema(&server));
    let size = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["db", "check", "--json"];
        all.extend_from_slice(args);
        let r = p.run_env(&all, env);
        r.expect_code(0);
        r.json()["pool_size"].clone()
    };
    assert_eq!(size(&[], &[]), 10, "the default");
    let config = p.write("pool.toml", "db_pool = 5\n");
    let config = config.to_str().unwrap();
    assert_eq!(size(&[], &[("AGENTRUN_CONFIG", config)]), 5);
    let env = [("AGENTRUN_CONFIG", config), ("AGENTRUN_DB_POOL", "4")];
    assert_eq!(size(&[], &env), 4, "the environment over the file");
    assert_eq!(size(&["--db-pool", "3"], &env), 3, "the flag over both");
    let human = p.run_env(&["db", "check", "--db-pool", "3"], &[]);
    assert!(
        human.stdout.contains("up to 3 per agentrun process"),
        "{human}"
    );

    let zero = p.run(&["db", "check", "--db-pool", "0"]);
    zero.expect_code(2);
    assert!(zero.stderr.contains("not a whole number from 1"), "{zero}");
    let bad = p.run_env(&["db", "check"], &[("AGENTRUN_DB_POOL", "many")]);
    bad.expect_code(2);
    assert!(bad.stderr.contains("AGENTRUN_DB_POOL=many"), "{bad}");
    let file = p.write("bad.toml", "db_pool = 0\n");
    let bad = p.run_env(
        &["db", "check"],
        &[("AGENTRUN_CONFIG", file.to_str().unwrap())],
    );
    bad.expect_code(2);
    assert!(bad.stderr.contains("bad.toml: db_pool = 0"), "{bad}");
}

#[test]
fn a_statement_past_statement_timeout_fails_saying_so() {
    let Some(server) = crate::pg::pg_or_say().and(test_pg()) else {
        return;
    };
    let url = fresh_pg_schema(&server);
    let p = quick_project(&url);
    p.run(&["runs", "list"]).expect_code(0); // creates the tables
    let schema = url.rsplit("%3D").next().expect("a search_path");
    // Another session holds the runs table, so listing it waits on the lock.
    let mut holder = postgres::Client::connect(&server, postgres::NoTls).expect("connect");
    let mut tx = holder.transaction().expect("begin");
    tx.batch_execute(&format!(
        "LOCK TABLE {schema}.runs IN ACCESS EXCLUSIVE MODE"
    ))
    .expect("lock");
    let short = format!("{url}%20-c%20statement_timeout%3D300");
    let mut c = p.command(&["runs", "list"]);
    c.env("AGENTRUN_DB", &short)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (run, took) = wait_bounded(c.spawn().expect("spawn"), Duration::from_secs(20));
    tx.rollback().expect("rollback");
    run.expect_code(1);
    assert!(run.stderr.contains("statement_timeout"), "{run}");
    assert!(run.stderr.contains("57014"), "{run}");
    assert!(took < Duration::from_secs(15), "{took:?}");
}

#[test]
fn a_server_that_accepts_and_never_answers_times_out_naming_host_and_port() {
    // Listening, so the TCP connect succeeds at once; nothing ever answers the
    // startup. The connect timeout has to cover the whole attempt, not the TCP part.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let p = Project::new();
    let mut c = p.command(&["runs", "list"]);
    c.env("AGENTRUN_DB", format!("postgres://u@127.0.0.1:{port}/d"))
        .env("PGCONNECT_TIMEOUT", "1")
        .env_remove("PGSSLMODE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (run, took) = wait_bounded(c.spawn().expect("spawn"), Duration::from_secs(20));
    run.expect_code(2);
    assert!(
        run.stderr
            .contains(&format!("no answer from 127.0.0.1:{port} within 1 s")),
        "{run}"
    );
    assert!(run.stderr.contains("PGCONNECT_TIMEOUT"), "{run}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    drop(silent);
}

#[test]
fn sslmode_require_against_a_server_without_tls_says_the_server_offers_none() {
    // What a PostgreSQL server with `ssl = off` does: it answers the client's
    // SSLRequest (8 bytes) with a single `N`.
    let plain = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = plain.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        let (mut s, _) = plain.accept().expect("accept");
        let mut request = [0u8; 8];
        s.read_exact(&mut request).expect("SSLRequest");
        s.write_all(b"N").expect("answer");
        request
    });
    let p = Project::new();
    let mut c = p.command(&["runs", "list"]);
    c.env(
        "AGENTRUN_DB",
        format!("postgres://u@127.0.0.1:{port}/d?sslmode=require"),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let (run, _) = wait_bounded(c.spawn().expect("spawn"), Duration::from_secs(20));
    let request = server.join().expect("server");
    assert_eq!(request, [0, 0, 0, 8, 4, 210, 22, 47], "an SSLRequest");
    run.expect_code(2);
    assert!(
        run.stderr.contains(&format!(
            "127.0.0.1:{port} does not offer TLS and sslmode=require demands it"
        )),
        "{run}"
    );
}

/// A run's write waiting on the server (its row locked by another session) holds up
/// neither its thread nor the other runs a worker drives on it (issue 23): another
/// run's step read and write complete meanwhile on the same thread, and the waiting
/// write finishes once the lock goes. (It used to block the thread until the lock
/// went: here `lock_timeout` turns that into a failure naming it, not a hang.)
#[test]
fn a_write_waiting_on_the_server_does_not_hold_up_the_other_runs_on_its_thread() {
    let Some(server) = crate::pg::pg_or_say().and(test_pg()) else {
        return;
    };
    let url =
        fresh_pg_schema(&server).replacen("options=", "options=-c%20lock_timeout%3D5000%20", 1);
    let store = Store::open(Path::new(&url), true).expect("open the store");
    let (a, b) = (leased_run(&store), leased_run(&store));
    // The lock is held by a session on a thread of its own: the postgres client
    // cannot be driven from inside the test's runtime.
    let (locked, unlock) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let (url2, id) = (url.clone(), a.run.0.clone());
    let holder = std::thread::spawn(move || {
        let mut locker = postgres::Client::connect(&url2, postgres::NoTls).expect("connect");
        let mut lock = locker.transaction().expect("begin");
        lock.execute("SELECT 1 FROM runs WHERE id = $1 FOR UPDATE", &[&id])
            .expect("lock run a's row");
        locked.0.send(()).unwrap();
        let _ = unlock.1.recv();
        lock.rollback().expect("let go of the lock");
    });
    locked.1.recv().expect("the row is locked");
    crate::common::wait(async {
        let waiting = store.release_queued(&a);
        tokio::pin!(waiting);
        tokio::select! {
            biased;
            r = &mut waiting => panic!("run a's write did not wait for its locked row: {r:?}"),
            r = async {
                store.messages_to_deliver(&b.run).await?;
                store.release_queued(&b).await
            } => r.expect("run b's read and write, while a's waits"),
        }
        unlock.0.send(()).unwrap();
        waiting.await.expect("run a's write, once the lock went");
    });
    holder.join().unwrap();
    assert_eq!(store.run(&a.run).unwrap().status, RunStatus::Running);
}

/// Connections used by tasks go back to the pool when the server has answered, not
/// when each task next runs (issue 23): a thread whose tasks took every connection
/// and then blocks on the pool itself (a blocking store call) would otherwise wait
/// for connections only it could give back, until the pool's 20 s timeout.
#[test]
fn connections_used_by_tasks_go_back_before_the_tasks_run_again() {
    let Some(server) = crate::pg::pg_or_say().and(test_pg()) else {
        return;
    };
    let url = fresh_pg_schema(&server);
    let store = Store::open(Path::new(&url), true).expect("open the store");
    let run = leased_run(&store).run;
    let size = store.pool_status().expect("a pool").size;
    crate::common::wait(async {
        // Each read polled once takes a connection and sends its job; a job the server
        // answers before the poll returns is done, the rest wait for their task.
        let mut reads = Vec::new();
        for _ in 0..size {
            let mut read = Box::pin(store.messages_to_deliver(&run));
            match futures_util::poll!(read.as_mut()) {
                std::task::Poll::Pending => reads.push(read),
                std::task::Poll::Ready(r) => assert!(r.unwrap().is_empty()),
            }
        }
        assert!(!reads.is_empty(), "some task waits for its answer");
        // Not one of the tasks runs again until the blocking call below returned.
        let until = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let status = store.pool_status().unwrap();
            if status.idle == status.open {
                break;
            }
            assert!(
                std::time::Instant::now() < until,
                "connections still held by tasks that have not run: {status:?}"
            );
            std::thread::yield_now();
        }
        assert!(store.undelivered_messages(&run).unwrap().is_empty());
        for read in reads {
            assert!(read.await.unwrap().is_empty());
        }
    });
}

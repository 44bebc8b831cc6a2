//! The PostgreSQL page (docs/postgresql.md), followed as a new user would (issue 25): from a
//! server with no agentrun role or database to two workers draining a queue, running
//! the section's own commands — read out of docs/postgresql.md at test time, so the page
//! cannot drift from what works.
//!
//! What the test changes in them, and only that: the host and port (`db.internal:5432`
//! becomes the test server), the role and database name (`agentrun`, which the test
//! server's superuser already is, becomes a fresh name), the password placeholder
//! (`PGPASSWORD=...`), `submit` repeated for a batch of four, and `--until-idle` on
//! the workers so they end when the queue is empty. The setup commands run as the
//! server's superuser (`PGUSER`), as the README says; `createuser --pwprompt` reads
//! the password from its standard input (no terminal, as in a script).
//!
//! Needs `AGENTRUN_TEST_PG` and the PostgreSQL client programs (`createuser`,
//! `createdb`, `psql`); skips with one line without them.

use crate::common::{Project, path_with_bin, peer, test_pg};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The `sh` code blocks of docs/postgresql.md, in order.
fn section_blocks() -> Vec<String> {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/postgresql.md"))
        .expect("docs/postgresql.md");
    let section = page.as_str();
    let mut blocks = Vec::new();
    let mut rest = section;
    while let Some(i) = rest.find("```sh\n") {
        let body = &rest[i + 6..];
        let end = body.find("```").expect("a closed code block");
        blocks.push(body[..end].to_string());
        rest = &body[end..][3..];
    }
    blocks
}

/// The one block that contains `needle`.
fn block_with(blocks: &[String], needle: &str) -> String {
    let found: Vec<&String> = blocks.iter().filter(|b| b.contains(needle)).collect();
    assert_eq!(
        found.len(),
        1,
        "one block of docs/postgresql.md with `{needle}`: {blocks:#?}"
    );
    found[0].clone()
}

/// The folder holding PostgreSQL's client programs (Debian keeps them per version).
fn pg_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join("createuser").is_file() && d.join("psql").is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// Runs `script` with `sh -e`, its standard input `stdin`, in a new session (no
/// controlling terminal, so `--pwprompt` reads standard input as in a pipeline).
fn sh(p: &Project, script: &str, env: &[(&str, String)], stdin: &str) -> crate::common::Run {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new("sh");
    c.arg("-ec")
        .arg(script)
        .current_dir(p.path())
        .env_remove("AGENTRUN_DB")
        .env_remove("PGPASSWORD")
        .env("HOME", p.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    // SAFETY: setsid is async-signal-safe and touches no memory of this process.
    unsafe {
        c.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = c.spawn().expect("spawn sh");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    crate::common::Run::from_output(child.wait_with_output().expect("wait sh"))
}

#[test]
fn the_readme_takes_an_empty_server_to_two_workers() {
    let Some(server) = crate::pg::pg_or_say().and(test_pg()) else {
        return;
    };
    let Some(bin) = peer::available(
        "the PostgreSQL client programs",
        "apt-get install postgresql-client",
        pg_bin,
    ) else {
        return;
    };
    let (hostport, superuser) = {
        let rest = server.split_once("://").expect("a URL").1;
        let (user, rest) = rest.split_once('@').expect("user@host");
        (
            rest.split('/').next().expect("host:port").to_string(),
            user.to_string(),
        )
    };
    let (host, port) = hostport.split_once(':').expect("host:port");
    let name = format!("readme_{}", std::process::id());
    let password = format!("pw-{name}");
    let path = format!("{}:{}", bin.display(), path_with_bin());

    let p = Project::new();
    p.model_script(serde_json::json!([{"text": "done"}]));
    p.task("", "Say done.");
    p.fast_tools("");
    let blocks = section_blocks();

    // 1. As the superuser: the role and the database, with the least rights.
    let setup = block_with(&blocks, "createuser").replace("agentrun", &name);
    let admin = [
        ("PATH", path.clone()),
        ("PGHOST", host.to_string()),
        ("PGPORT", port.to_string()),
        ("PGUSER", superuser.clone()),
        ("PGDATABASE", "postgres".to_string()),
    ];
    let r = sh(&p, &setup, &admin, &format!("{password}\n{password}\n"));
    r.expect_code(0);

    // 2. As the new role, what the README says next; the workers drain the queue.
    let url = |block: String| {
        block
            .replace("db.internal:5432", &hostport)
            .replace("agentrun@", &format!("{name}@"))
            .replace(
                &format!("{hostport}/agentrun"),
                &format!("{hostport}/{name}"),
            )
            .replace("PGPASSWORD=...", &format!("PGPASSWORD={password}"))
    };
    let check = url(block_with(&blocks, "agentrun db check"));
    let workers = url(block_with(&blocks, "agentrun worker"))
        .lines()
        .map(|line| {
            let cmd = line.split(" #").next().unwrap_or(line).trim_end();
            if cmd.starts_with("agentrun submit") {
                format!("for i in 1 2 3 4; do {cmd}; done")
            } else if cmd.starts_with("agentrun worker") {
                format!("{cmd} --until-idle & a=$!; {cmd} --until-idle & b=$!; wait $a; wait $b")
            } else {
                cmd.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let user = [("PATH", path.clone())];
    let checked = sh(&p, &check, &user, "");
    checked.expect_code(0);
    assert!(checked.stdout.contains("privileges   ok"), "{checked}");
    assert!(checked.stdout.contains("TLS          yes"), "{checked}");
    let ran = sh(&p, &format!("{check}\n{workers}"), &user, "");
    ran.expect_code(0);
    assert!(!ran.stderr.contains(&password), "{ran}");
    assert!(!ran.stdout.contains(&password), "{ran}");

    // Four runs submitted, each completed once, none left queued.
    let db = format!("postgres://{name}@{hostport}/{name}");
    let list = p.run_env(
        &["runs", "list", "--json"],
        &[("AGENTRUN_DB", &db), ("PGPASSWORD", &password)],
    );
    list.expect_code(0);
    let runs = list.json();
    let statuses: Vec<&str> = runs
        .as_array()
        .expect("a list")
        .iter()
        .map(|r| r["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["completed"; 4], "{runs}");

    // The README's role is no superuser and holds only its own database.
    let mut admin_client = postgres::Client::connect(&server, postgres::NoTls).expect("connect");
    let row = admin_client
        .query_one(
            "SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = $1",
            &[&name],
        )
        .expect("the role");
    assert_eq!(
        (
            row.get::<_, bool>(0),
            row.get::<_, bool>(1),
            row.get::<_, bool>(2)
        ),
        (false, false, false)
    );
    let _ = admin_client.batch_execute(&format!("DROP DATABASE {name}; DROP ROLE {name};"));
}

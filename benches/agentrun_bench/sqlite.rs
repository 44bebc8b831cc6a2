//! The SQLite floor (the cheapest durable write there is) and the storage figures of a
//! finished agentrun database.

use rusqlite::{Connection, TransactionBehavior};
use std::path::Path;
use std::time::{Duration, Instant};

/// Mean time of one 400-byte insert + commit (WAL, `synchronous=FULL`, `BEGIN
/// IMMEDIATE` like agentrun's writes) over `ops` commits on a fresh database.
pub fn floor(dir: &Path, ops: usize) -> Duration {
    let path = dir.join("floor.db");
    remove_db(&path);
    let mut conn = Connection::open(&path).expect("open the floor database");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("WAL");
    conn.pragma_update(None, "synchronous", "FULL")
        .expect("synchronous=FULL");
    conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
        .expect("create table");
    let payload = [b'x'; 400];
    let mut insert = || {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .expect("begin");
        tx.prepare_cached("INSERT INTO t (data) VALUES (?1)")
            .expect("prepare")
            .execute([&payload[..]])
            .expect("insert");
        tx.commit().expect("commit");
    };
    // The first commits create the WAL file; they are not the steady state.
    for _ in 0..10 {
        insert();
    }
    let start = Instant::now();
    for _ in 0..ops {
        insert();
    }
    let per_op = start.elapsed() / ops as u32;
    drop(conn);
    remove_db(&path);
    per_op
}

fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

/// What a finished run left in its database.
pub struct Storage {
    /// File size after `wal_checkpoint(TRUNCATE)`.
    pub file_bytes: u64,
    /// Bytes of JSON text per table (payload only, no b-tree overhead).
    pub messages_bytes: u64,
    pub tool_calls_bytes: u64,
    pub events_bytes: u64,
    pub events: u64,
}

/// Checkpoints the WAL into the main file (so the file holds everything and the WAL
/// nothing) and measures it.
pub fn storage(db: &Path) -> Storage {
    let conn = Connection::open(db).expect("open the run's database");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
    let sum = |sql: &str| -> u64 {
        conn.query_row(sql, [], |r| r.get::<_, Option<i64>>(0))
            .expect(sql)
            .unwrap_or(0)
            .max(0) as u64
    };
    let storage = Storage {
        messages_bytes: sum("SELECT sum(length(content)) FROM messages"),
        tool_calls_bytes: sum(
            "SELECT sum(length(args) + coalesce(length(result), 0)) FROM tool_calls",
        ),
        events_bytes: sum("SELECT sum(length(data)) FROM events"),
        events: sum("SELECT count(*) FROM events"),
        file_bytes: 0,
    };
    drop(conn);
    Storage {
        file_bytes: std::fs::metadata(db).expect("db size").len(),
        ..storage
    }
}

/// Copies a checkpointed database (its WAL is empty, so the main file is all of it).
pub fn copy_db(from: &Path, to: &Path) {
    remove_db(to);
    std::fs::copy(from, to).expect("copy database");
    // Flushed before the timed command: otherwise the first fsync of the file in it
    // (SQLite's checkpoint at close) writes back the whole copy — 40+ ms for a
    // 100,000-step database — and the bench would charge its own copy to agentrun.
    std::fs::File::open(to)
        .and_then(|f| f.sync_all())
        .expect("flush the copy");
}

/// Grows a database holding one finished run to `total` runs, by copying that run's
/// rows (run, snapshot, checkpoint, messages) under new ids with later `created_at`s,
/// in one transaction: `runs list` on 100,000 runs without 100,000 `agentrun start`s
/// (which would take the better part of an hour on this machine).
pub fn clone_runs(db: &Path, total: u32) {
    let mut conn = Connection::open(db).expect("open the runs database");
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .expect("begin");
    let src: String = tx
        .query_row("SELECT id FROM runs", [], |r| r.get(0))
        .expect("exactly one run to copy");
    // Ids keep the 12-hex-digit shape; `n` keeps them unique and ordered.
    let sql = "
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
        INSERT INTO {table} ({into}) SELECT {cols} FROM n, {table} WHERE {key} = ?1";
    let copies: [(&str, &str, &str, &str); 4] = [
        (
            "runs",
            "id",
            "id, task, task_path, status, max_steps, max_tokens, steps, input_tokens, \
             output_tokens, answer, error, created_at, updated_at",
            "printf('%012x', i), task, task_path, status, max_steps, max_tokens, steps, \
             input_tokens, output_tokens, answer, error, created_at + i, updated_at + i",
        ),
        (
            "run_snapshots",
            "run_id",
            "run_id, snapshot",
            "printf('%012x', i), snapshot",
        ),
        (
            "checkpoints",
            "run_id",
            "run_id, step, last_seq, state",
            "printf('%012x', i), step, last_seq, state",
        ),
        (
            "messages",
            "run_id",
            "run_id, seq, step, role, content",
            "printf('%012x', i), seq, step, role, content",
        ),
    ];
    for (table, key, into, cols) in copies {
        let q = sql
            .replace("{table}", table)
            .replace("{key}", key)
            .replace("{into}", into)
            .replace("{cols}", cols);
        tx.execute(&q, rusqlite::params![src, total - 1])
            .unwrap_or_else(|e| panic!("copy {table}: {e}"));
    }
    tx.commit().expect("commit the copies");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
}

//! Schema migrations, applied in order and recorded in `PRAGMA user_version`.
//! Append-only: never edit a shipped migration; add a new one.

pub(super) const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    r#"
    CREATE TABLE runs (
        id              TEXT PRIMARY KEY,
        task            TEXT NOT NULL,
        task_path       TEXT NOT NULL,
        snapshot        TEXT NOT NULL,
        status          TEXT NOT NULL,
        max_steps       INTEGER NOT NULL,
        max_tokens      INTEGER NOT NULL,
        steps           INTEGER NOT NULL DEFAULT 0,
        input_tokens    INTEGER NOT NULL DEFAULT 0,
        output_tokens   INTEGER NOT NULL DEFAULT 0,
        answer          TEXT,
        error           TEXT,
        lease_pid       INTEGER,
        lease_token     INTEGER NOT NULL DEFAULT 0,
        lease_heartbeat INTEGER,
        lease_since     INTEGER,
        created_at      INTEGER NOT NULL,
        updated_at      INTEGER NOT NULL
    );
    CREATE INDEX runs_by_created ON runs (created_at);
    CREATE TABLE messages (
        run_id  TEXT NOT NULL REFERENCES runs(id),
        seq     INTEGER NOT NULL,
        step    INTEGER NOT NULL,
        role    TEXT NOT NULL,
        content TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE checkpoints (
        run_id   TEXT PRIMARY KEY REFERENCES runs(id),
        step     INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        state    TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE model_turns (
        run_id   TEXT NOT NULL REFERENCES runs(id),
        step     INTEGER NOT NULL,
        response TEXT NOT NULL,
        PRIMARY KEY (run_id, step)
    ) WITHOUT ROWID;
    CREATE TABLE tool_calls (
        run_id     TEXT NOT NULL REFERENCES runs(id),
        call_id    TEXT NOT NULL,
        step       INTEGER NOT NULL,
        idx        INTEGER NOT NULL,
        tool       TEXT NOT NULL,
        args       TEXT NOT NULL,
        status     TEXT NOT NULL,
        started    INTEGER NOT NULL DEFAULT 0,
        attempts   INTEGER NOT NULL DEFAULT 0,
        result     TEXT,
        is_error   INTEGER NOT NULL DEFAULT 0,
        via        TEXT,
        PRIMARY KEY (run_id, step, call_id)
    ) WITHOUT ROWID;
    CREATE TABLE events (
        id     INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id),
        step   INTEGER NOT NULL,
        kind   TEXT NOT NULL,
        data   TEXT NOT NULL,
        at     INTEGER NOT NULL
    );
    CREATE INDEX events_by_run ON events (run_id, id);
    CREATE TABLE escalations (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id      TEXT NOT NULL REFERENCES runs(id),
        step        INTEGER NOT NULL,
        kind        TEXT NOT NULL,
        status      TEXT NOT NULL,
        summary     TEXT NOT NULL,
        detail      TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        resolved_at INTEGER,
        resolved_by TEXT,
        resolution  TEXT
    );
    CREATE INDEX escalations_by_run ON escalations (run_id, status);
    "#,
    // 2: between-step escalations (breaker, stuck) are applied once on resume.
    r#"
    ALTER TABLE escalations ADD COLUMN applied INTEGER NOT NULL DEFAULT 0;
    "#,
    // 3: the config snapshot (tools.toml, prompts, scripts: often tens of KB) moves out
    // of `runs`, whose row every step rewrites; keeping it there made each write copy
    // its overflow pages (issue 8, docs/bench.md).
    r#"
    CREATE TABLE run_snapshots (
        run_id   TEXT PRIMARY KEY REFERENCES runs(id),
        snapshot TEXT NOT NULL
    ) WITHOUT ROWID;
    INSERT INTO run_snapshots (run_id, snapshot) SELECT id, snapshot FROM runs;
    ALTER TABLE runs DROP COLUMN snapshot;
    "#,
    // 4: the run queue (issue 17): which runs are the queue's (submitted; workers take
    // them), the worker holding a run, and an index for the workers' claims.
    r#"
    ALTER TABLE runs ADD COLUMN queue INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE runs ADD COLUMN lease_worker TEXT;
    CREATE INDEX runs_claimable ON runs (created_at) WHERE queue = 1 AND status IN ('queued', 'running');
    "#,
    // 5: scripted-model texts move out of the snapshot into rows of their own: a
    // 100,000-turn script is megabytes that `runs show` read (and resume parsed as an
    // escaped string) for nothing (issue 14).
    r#"
    CREATE TABLE run_scripts (
        run_id TEXT NOT NULL REFERENCES runs(id),
        spec   TEXT NOT NULL,
        text   TEXT NOT NULL,
        PRIMARY KEY (run_id, spec)
    );
    INSERT INTO run_scripts (run_id, spec, text)
        SELECT s.run_id, j.key, j.value FROM run_snapshots s, json_each(s.snapshot, '$.scripts') j;
    UPDATE run_snapshots SET snapshot = json_remove(snapshot, '$.scripts')
        WHERE json_type(snapshot, '$.scripts') IS NOT NULL;
    "#,
    // 6: cancelling a run from any process (issue 21): who asked, when, and why. A
    // request stands until the holder stops the run (or a later cancel finds it dead).
    r#"
    ALTER TABLE runs ADD COLUMN cancel_requested_at INTEGER;
    ALTER TABLE runs ADD COLUMN cancel_by TEXT;
    ALTER TABLE runs ADD COLUMN cancel_reason TEXT;
    "#,
    // 7: the notification outbox (issue 24): one row per event, written with the change
    // it announces, delivered after commit, then marked.
    r#"
    CREATE TABLE outbox (
        seq           INTEGER PRIMARY KEY AUTOINCREMENT,
        id            TEXT NOT NULL UNIQUE,
        event         TEXT NOT NULL,
        run_id        TEXT NOT NULL,
        escalation_id INTEGER,
        kind          TEXT NOT NULL,
        summary       TEXT NOT NULL,
        created_at    INTEGER NOT NULL,
        state         TEXT NOT NULL,
        attempts      INTEGER NOT NULL DEFAULT 0,
        last_error    TEXT,
        delivered_at  INTEGER,
        claim_pid     INTEGER,
        claim_until   INTEGER
    );
    CREATE INDEX outbox_pending ON outbox (seq) WHERE state = 'pending';
    "#,
    // 8: sub-agents (issue 26): a child run names its parent run and call, and holds
    // the parent call's idempotency key, unique, so one call never has two children.
    r#"
    ALTER TABLE runs ADD COLUMN parent_run TEXT;
    ALTER TABLE runs ADD COLUMN parent_call TEXT;
    ALTER TABLE runs ADD COLUMN child_key TEXT;
    CREATE UNIQUE INDEX runs_child_key ON runs (child_key);
    CREATE INDEX runs_by_parent ON runs (parent_run);
    "#,
    // 9: operators (issue 21). A fork names the run and step it was copied from; the
    // loop state is kept for every committed step (not only the last), so a run can be
    // forked at any of them; a person's messages wait in `sent_messages` until the run
    // delivers them at a step boundary (`delivered_seq`: the transcript message).
    r#"
    ALTER TABLE runs ADD COLUMN forked_from TEXT;
    ALTER TABLE runs ADD COLUMN forked_at INTEGER;
    CREATE TABLE step_states (
        run_id   TEXT NOT NULL REFERENCES runs(id),
        step     INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        state    TEXT NOT NULL,
        PRIMARY KEY (run_id, step)
    ) WITHOUT ROWID;
    INSERT INTO step_states (run_id, step, last_seq, state)
        SELECT run_id, step, last_seq, state FROM checkpoints;
    CREATE TABLE sent_messages (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id         TEXT NOT NULL REFERENCES runs(id),
        text           TEXT NOT NULL,
        sent_by        TEXT NOT NULL,
        sent_at        INTEGER NOT NULL,
        delivered_step INTEGER,
        delivered_seq  INTEGER
    );
    CREATE INDEX sent_messages_by_run ON sent_messages (run_id, id);
    "#,
    // 10: the money a run has spent, on its row (issue 27), so `runs list` shows it
    // without reading every run's loop state; older runs take it from their checkpoint.
    r#"
    ALTER TABLE runs ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0;
    UPDATE runs SET cost_usd = COALESCE(
        (SELECT json_extract(c.state, '$.cost_usd') FROM checkpoints c WHERE c.run_id = runs.id),
        0);
    "#,
    // 11: a claim finds the oldest queued run and the oldest stale lease by index
    // (issue 23): `runs_claimable` held the runs in flight too, so each claim walked
    // past every running run — 500 claims at a worker's start, 125k rows. A stale
    // lease is one whose holder let go (no pid) or whose heartbeat is older than the
    // TTL; the index keeps runs by that "held until" value.
    r#"
    CREATE INDEX runs_queued ON runs (created_at) WHERE queue = 1 AND status = 'queued';
    CREATE INDEX runs_held ON runs
        ((CASE WHEN lease_pid IS NULL THEN 0 ELSE coalesce(lease_heartbeat, 0) END))
        WHERE queue = 1 AND status = 'running';
    "#,
    // 12: rate limits shared by every run and process on the database (docs/rate-limits.md):
    // one row per limit key (its last configuration and its schedule, JSON), and one row
    // per request or call that waits for, or holds, a place under a key. A hold counts
    // only while the lease it names is live, so a killed holder's places come free with
    // its lease.
    r#"
    CREATE TABLE limit_keys (
        key        TEXT PRIMARY KEY,
        label      TEXT NOT NULL,
        config     TEXT NOT NULL,
        state      TEXT NOT NULL,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE limit_holds (
        id          TEXT PRIMARY KEY,
        key         TEXT NOT NULL,
        run_id      TEXT NOT NULL,
        lease_token INTEGER NOT NULL,
        priority    INTEGER NOT NULL,
        tokens      INTEGER NOT NULL,
        cost        REAL NOT NULL,
        start_at    INTEGER,
        created_at  INTEGER NOT NULL,
        waiting_for TEXT
    ) WITHOUT ROWID;
    CREATE INDEX limit_holds_by_key ON limit_holds (key);
    CREATE INDEX limit_holds_by_run ON limit_holds (run_id);
    "#,
    // 13: eval results (`agentrun eval`): an eval, and one row per task × model ×
    // repeat naming its run and, once scored, its result (JSON), so a killed eval
    // resumes from what it has.
    r#"
    CREATE TABLE evals (
        name        TEXT PRIMARY KEY,
        suite       TEXT NOT NULL,
        plan        TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        finished_at INTEGER
    );
    CREATE TABLE eval_runs (
        eval   TEXT NOT NULL REFERENCES evals(name),
        task   TEXT NOT NULL,
        model  TEXT NOT NULL,
        rep    INTEGER NOT NULL,
        run_id TEXT,
        result TEXT,
        PRIMARY KEY (eval, task, model, rep)
    );
    "#,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{RunId, Store};

    #[test]
    fn a_version_2_database_keeps_its_snapshots_after_migrating() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.execute_batch(MIGRATIONS[1]).unwrap();
            conn.pragma_update(None, "user_version", 2).unwrap();
            conn.execute(
                "INSERT INTO runs (id, task, task_path, snapshot, status, max_steps, max_tokens,
                    created_at, updated_at) VALUES ('r1', 't', 't.md', '{\"x\":1}', 'completed', 5, 50, 0, 0)",
                [],
            )
            .unwrap();
        }
        let store = Store::open(&path, false).unwrap();
        assert_eq!(store.snapshot(&RunId("r1".into())).unwrap(), "{\"x\":1}");
        assert_eq!(store.run(&RunId("r1".into())).unwrap().max_tokens, 50);
    }

    #[test]
    fn a_version_4_database_moves_its_scripts_out_of_the_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let snapshot =
            r#"{"models":["script:s.json"],"scripts":{"script:s.json":"{\"turns\": []}"}}"#;
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..4] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 4).unwrap();
            conn.execute(
                "INSERT INTO runs (id, task, task_path, status, max_steps, max_tokens,
                    created_at, updated_at) VALUES ('r1', 't', 't.md', 'completed', 5, 50, 0, 0)",
                [],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO run_snapshots (run_id, snapshot) VALUES ('r1', ?1)",
                [snapshot],
            )
            .unwrap();
        }
        let store = Store::open(&path, false).unwrap();
        let id = RunId("r1".into());
        assert_eq!(
            store.snapshot(&id).unwrap(),
            r#"{"models":["script:s.json"]}"#
        );
        let scripts = store.scripts(&id).unwrap();
        assert_eq!(scripts.len(), 1);
        assert_eq!(scripts["script:s.json"], r#"{"turns": []}"#);
    }

    /// Issue 27: runs from before the cost column get it from their checkpoint.
    #[test]
    fn a_version_9_database_takes_each_runs_cost_from_its_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..9] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 9).unwrap();
            for (id, state) in [("r1", r#"{"cost_usd":0.07}"#), ("r2", "{}")] {
                conn.execute(
                    "INSERT INTO runs (id, task, task_path, status, max_steps, max_tokens,
                        created_at, updated_at) VALUES (?1, 't', 't.md', 'completed', 5, 50, 0, 0)",
                    [id],
                )
                .unwrap();
                conn.execute(
                    "INSERT INTO checkpoints (run_id, step, last_seq, state) VALUES (?1, 1, 0, ?2)",
                    [id, state],
                )
                .unwrap();
            }
        }
        let store = Store::open(&path, false).unwrap();
        let cost = |id: &str| store.run(&RunId(id.into())).unwrap().cost_usd;
        assert_eq!((cost("r1"), cost("r2")), (0.07, 0.0));
    }
}

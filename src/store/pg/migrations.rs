//! The PostgreSQL schema, as migrations applied in order on open (see `conn`).
//! Append-only: never edit a shipped migration; add a new one.

/// Schema migrations, applied in order and recorded in `schema_version`. Append-only.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: the SQLite schema as of its version 3, in PostgreSQL types, plus the lease's
    // host (see the module doc) and an insertion sequence for a stable list order.
    r#"
    CREATE TABLE runs (
        id              TEXT PRIMARY KEY,
        seq             BIGSERIAL NOT NULL,
        task            TEXT NOT NULL,
        task_path       TEXT NOT NULL,
        status          TEXT NOT NULL,
        max_steps       BIGINT NOT NULL,
        max_tokens      BIGINT NOT NULL,
        steps           BIGINT NOT NULL DEFAULT 0,
        input_tokens    BIGINT NOT NULL DEFAULT 0,
        output_tokens   BIGINT NOT NULL DEFAULT 0,
        answer          TEXT,
        error           TEXT,
        lease_pid       BIGINT,
        lease_host      TEXT,
        lease_token     BIGINT NOT NULL DEFAULT 0,
        lease_heartbeat BIGINT,
        lease_since     BIGINT,
        created_at      BIGINT NOT NULL,
        updated_at      BIGINT NOT NULL
    );
    CREATE INDEX runs_by_created ON runs (created_at DESC, seq DESC);
    CREATE TABLE run_snapshots (
        run_id   TEXT PRIMARY KEY REFERENCES runs(id),
        snapshot TEXT NOT NULL
    );
    CREATE TABLE messages (
        run_id  TEXT NOT NULL REFERENCES runs(id),
        seq     BIGINT NOT NULL,
        step    BIGINT NOT NULL,
        role    TEXT NOT NULL,
        content TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE checkpoints (
        run_id   TEXT PRIMARY KEY REFERENCES runs(id),
        step     BIGINT NOT NULL,
        last_seq BIGINT NOT NULL,
        state    TEXT NOT NULL
    );
    CREATE TABLE model_turns (
        run_id   TEXT NOT NULL REFERENCES runs(id),
        step     BIGINT NOT NULL,
        response TEXT NOT NULL,
        PRIMARY KEY (run_id, step)
    );
    CREATE TABLE tool_calls (
        run_id     TEXT NOT NULL REFERENCES runs(id),
        call_id    TEXT NOT NULL,
        step       BIGINT NOT NULL,
        idx        BIGINT NOT NULL,
        tool       TEXT NOT NULL,
        args       TEXT NOT NULL,
        status     TEXT NOT NULL,
        started    BOOLEAN NOT NULL DEFAULT false,
        attempts   BIGINT NOT NULL DEFAULT 0,
        result     TEXT,
        is_error   BOOLEAN NOT NULL DEFAULT false,
        via        TEXT,
        PRIMARY KEY (run_id, step, call_id)
    );
    CREATE TABLE events (
        id     BIGSERIAL PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id),
        step   BIGINT NOT NULL,
        kind   TEXT NOT NULL,
        data   TEXT NOT NULL,
        at     BIGINT NOT NULL
    );
    CREATE INDEX events_by_run ON events (run_id, id);
    CREATE TABLE escalations (
        id          BIGSERIAL PRIMARY KEY,
        run_id      TEXT NOT NULL REFERENCES runs(id),
        step        BIGINT NOT NULL,
        kind        TEXT NOT NULL,
        status      TEXT NOT NULL,
        summary     TEXT NOT NULL,
        detail      TEXT NOT NULL,
        created_at  BIGINT NOT NULL,
        resolved_at BIGINT,
        resolved_by TEXT,
        resolution  TEXT,
        applied     BOOLEAN NOT NULL DEFAULT false
    );
    CREATE INDEX escalations_by_run ON escalations (run_id, status);
    "#,
    // 2: the run queue (as SQLite's migration 4).
    r#"
    ALTER TABLE runs ADD COLUMN queue BOOLEAN NOT NULL DEFAULT false;
    ALTER TABLE runs ADD COLUMN lease_worker TEXT;
    CREATE INDEX runs_claimable ON runs (created_at, seq) WHERE queue AND status IN ('queued', 'running');
    "#,
    // 3: scripts beside the snapshot, not in it (as SQLite's migration 5).
    r#"
    CREATE TABLE run_scripts (
        run_id TEXT NOT NULL REFERENCES runs(id),
        spec   TEXT NOT NULL,
        text   TEXT NOT NULL,
        PRIMARY KEY (run_id, spec)
    );
    INSERT INTO run_scripts (run_id, spec, text)
        SELECT s.run_id, j.key, j.value
        FROM run_snapshots s, jsonb_each_text(s.snapshot::jsonb -> 'scripts') j;
    UPDATE run_snapshots SET snapshot = (snapshot::jsonb - 'scripts')::text
        WHERE snapshot::jsonb -> 'scripts' IS NOT NULL;
    "#,
    // 4: cancelling a run from any process (as SQLite's migration 6).
    r#"
    ALTER TABLE runs ADD COLUMN cancel_requested_at BIGINT;
    ALTER TABLE runs ADD COLUMN cancel_by TEXT;
    ALTER TABLE runs ADD COLUMN cancel_reason TEXT;
    "#,
    // 5: the notification outbox (as SQLite's migration 7).
    r#"
    CREATE TABLE outbox (
        seq           BIGSERIAL PRIMARY KEY,
        id            TEXT NOT NULL UNIQUE,
        event         TEXT NOT NULL,
        run_id        TEXT NOT NULL,
        escalation_id BIGINT,
        kind          TEXT NOT NULL,
        summary       TEXT NOT NULL,
        created_at    BIGINT NOT NULL,
        state         TEXT NOT NULL,
        attempts      INTEGER NOT NULL DEFAULT 0,
        last_error    TEXT,
        delivered_at  BIGINT,
        claim_pid     BIGINT,
        claim_host    TEXT,
        claim_until   BIGINT
    );
    CREATE INDEX outbox_pending ON outbox (seq) WHERE state = 'pending';
    "#,
    // 6: sub-agents (as SQLite's migration 8).
    r#"
    ALTER TABLE runs ADD COLUMN parent_run TEXT;
    ALTER TABLE runs ADD COLUMN parent_call TEXT;
    ALTER TABLE runs ADD COLUMN child_key TEXT;
    CREATE UNIQUE INDEX runs_child_key ON runs (child_key);
    CREATE INDEX runs_by_parent ON runs (parent_run);
    "#,
    // 7: operators: forks, the loop state of every step, people's messages (as
    // SQLite's migration 9).
    r#"
    ALTER TABLE runs ADD COLUMN forked_from TEXT;
    ALTER TABLE runs ADD COLUMN forked_at BIGINT;
    CREATE TABLE step_states (
        run_id   TEXT NOT NULL REFERENCES runs(id),
        step     BIGINT NOT NULL,
        last_seq BIGINT NOT NULL,
        state    TEXT NOT NULL,
        PRIMARY KEY (run_id, step)
    );
    INSERT INTO step_states (run_id, step, last_seq, state)
        SELECT run_id, step, last_seq, state FROM checkpoints;
    CREATE TABLE sent_messages (
        id             BIGSERIAL PRIMARY KEY,
        run_id         TEXT NOT NULL REFERENCES runs(id),
        text           TEXT NOT NULL,
        sent_by        TEXT NOT NULL,
        sent_at        BIGINT NOT NULL,
        delivered_step BIGINT,
        delivered_seq  BIGINT
    );
    CREATE INDEX sent_messages_by_run ON sent_messages (run_id, id);
    "#,
    // 8: the money a run has spent, on its row (as SQLite's migration 10).
    r#"
    ALTER TABLE runs ADD COLUMN cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0;
    UPDATE runs r SET cost_usd = COALESCE((c.state::jsonb ->> 'cost_usd')::float8, 0)
        FROM checkpoints c WHERE c.run_id = r.id;
    "#,
    // 9: rate limits shared by every run and process (as SQLite's migration 12).
    r#"
    CREATE TABLE limit_keys (
        key        TEXT PRIMARY KEY,
        label      TEXT NOT NULL,
        config     TEXT NOT NULL,
        state      TEXT NOT NULL,
        updated_at BIGINT NOT NULL
    );
    CREATE TABLE limit_holds (
        id          TEXT PRIMARY KEY,
        key         TEXT NOT NULL,
        run_id      TEXT NOT NULL,
        lease_token BIGINT NOT NULL,
        priority    BIGINT NOT NULL,
        tokens      BIGINT NOT NULL,
        cost        DOUBLE PRECISION NOT NULL,
        start_at    BIGINT,
        created_at  BIGINT NOT NULL,
        waiting_for TEXT
    );
    CREATE INDEX limit_holds_by_key ON limit_holds (key);
    CREATE INDEX limit_holds_by_run ON limit_holds (run_id);
    "#,
    // 10: eval results (as SQLite's migration 13).
    r#"
    CREATE TABLE evals (
        name        TEXT PRIMARY KEY,
        suite       TEXT NOT NULL,
        plan        TEXT NOT NULL,
        created_at  BIGINT NOT NULL,
        finished_at BIGINT
    );
    CREATE TABLE eval_runs (
        eval   TEXT NOT NULL REFERENCES evals(name),
        task   TEXT NOT NULL,
        model  TEXT NOT NULL,
        rep    BIGINT NOT NULL,
        run_id TEXT,
        result TEXT,
        PRIMARY KEY (eval, task, model, rep)
    );
    "#,
];

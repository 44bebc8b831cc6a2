//! Leases and concurrency (issue 6 §4): one holder per run, fenced by a token that a
//! takeover raises; a heartbeat that expires; racing resumes; parallel runs on one file.
//!
//! The fencing and expiry tests use two `Store` handles on one file in this process;
//! a foreign holder is simulated by writing pid 1 (always alive) into the lease, and
//! an old heartbeat by writing its timestamp, so nothing waits on a clock.

use crate::common::{Db, Project, leased_run, wait};
use agentrun::model::{Message, ModelResponse, Role, StopReason, Usage};
use agentrun::store::{
    CallRecord, CallStatus, Lease, RunId, RunStatus, StepCommit, Store, StoreError,
};
use serde_json::json;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// Makes the run look held by another live process whose last sign of life was
/// `age_ms` ago.
fn held_by_pid_1(p: &Project, run: &RunId, age_ms: i64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    if let Some(url) = &p.pg {
        let mut c = postgres::Client::connect(url, postgres::NoTls).expect("connect");
        c.execute(
            "UPDATE runs SET lease_pid = 1, lease_heartbeat = $2 WHERE id = $1",
            &[&run.0, &(now - age_ms)],
        )
        .expect("update");
        return;
    }
    let db: &Path = &p.db();
    let conn = rusqlite::Connection::open(db).expect("open");
    conn.execute(
        "UPDATE runs SET lease_pid = 1, lease_heartbeat = ?2 WHERE id = ?1",
        rusqlite::params![run.0, now - age_ms],
    )
    .expect("update");
}

fn response() -> ModelResponse {
    ModelResponse {
        message: Message::text(Role::Assistant, "late"),
        usage: Usage {
            input: 1,
            output: 1,
            cached: 0,
            cache_write: 0,
            ..Default::default()
        },
        stop: StopReason::EndTurn,
        model: "script:x".into(),
    }
}

#[test]
fn a_stale_holders_late_writes_are_rejected_after_a_takeover() {
    stale_holder_fenced(&Db::Sqlite);
}

pub fn stale_holder_fenced(db: &Db) {
    let p = Project::on(db);
    let a = Store::open(&p.db(), true).unwrap();
    let stale = leased_run(&a);
    let b = Store::open(&p.db(), false).unwrap();
    // Same pid, so B may take over at once (as after a pid reuse or an expired lease).
    let current = b.acquire(&stale.run).unwrap();
    assert!(current.token > stale.token);

    let lost = |r: Result<(), StoreError>, what: &str| {
        assert!(matches!(r, Err(StoreError::LeaseLost(_))), "{what}: {r:?}");
    };
    let record = CallRecord {
        call_id: "c".into(),
        status: CallStatus::Ok,
        attempts: 1,
        result: json!("done"),
        is_error: false,
        via: None,
    };
    let msgs = [Message::text(Role::Assistant, "late answer")];
    lost(
        wait(a.record_model_turn(&stale, 1, &response(), &[])),
        "model turn",
    );
    lost(wait(a.mark_started(&stale, 1, "c")), "intent");
    lost(wait(a.record_outcome(&stale, 1, &record, &[])), "outcome");
    lost(a.heartbeat(&stale), "heartbeat");
    lost(
        a.set_status(&stale, RunStatus::Failed, Some("late")),
        "status",
    );
    lost(a.set_budgets(&stale, 1, 1), "budgets");
    let commit = StepCommit {
        step: 1,
        messages: &msgs,
        state: "{}",
        input_tokens: 1,
        output_tokens: 1,
        cost_usd: 0.0,
        status: RunStatus::Completed,
        answer: Some("late answer"),
        error: None,
        outcome: None,
        events: &[],
        escalation: None,
    };
    lost(
        wait(a.commit_step(&stale, &commit)).map(drop),
        "step commit",
    );

    // Nothing of the stale holder's reached the run; the new holder writes freely.
    assert_eq!(b.model_turn(&stale.run, 1).unwrap(), None);
    assert_eq!(b.messages(&stale.run).unwrap().len(), 2);
    let row = b.run(&stale.run).unwrap();
    assert_eq!(
        (row.status, row.steps, row.answer),
        (RunStatus::Running, 0, None)
    );
    wait(b.commit_step(&current, &commit)).unwrap();
    assert_eq!(b.run(&stale.run).unwrap().status, RunStatus::Completed);
}

#[test]
fn a_live_holder_with_a_fresh_heartbeat_keeps_the_run() {
    live_holder_keeps(&Db::Sqlite);
}

pub fn live_holder_keeps(db: &Db) {
    let p = Project::on(db);
    let store = Store::open(&p.db(), true).unwrap();
    let lease = leased_run(&store);
    held_by_pid_1(&p, &lease.run, 1_000);
    let err = store.acquire(&lease.run).unwrap_err();
    assert!(
        matches!(err, StoreError::LeaseHeld { pid: 1, .. }),
        "{err:?}"
    );
    assert!(err.is_bad_input(), "a refused resume exits 2");
    assert!(
        err.to_string()
            .starts_with(&format!("run {} is held by pid 1 (lease taken ", lease.run)),
        "{err}"
    );
}

#[test]
fn a_holder_silent_past_the_lease_ttl_loses_the_run_even_if_its_pid_lives() {
    silent_holder_loses(&Db::Sqlite);
}

pub fn silent_holder_loses(db: &Db) {
    let p = Project::on(db);
    let store = Store::open(&p.db(), true).unwrap();
    let lease = leased_run(&store);
    // Silent for 61 s: past the default 60 s TTL.
    held_by_pid_1(&p, &lease.run, 61_000);
    let patient = Store::open(&p.db(), false)
        .unwrap()
        .with_lease_ttl(Duration::from_secs(3600));
    assert!(matches!(
        patient.acquire(&lease.run),
        Err(StoreError::LeaseHeld { .. })
    ));
    let taken = store.acquire(&lease.run).unwrap();
    assert_eq!(taken.token, lease.token + 1);
    // The old token is fenced off.
    assert!(matches!(
        store.heartbeat(&lease),
        Err(StoreError::LeaseLost(_))
    ));
}

#[test]
fn a_heartbeat_keeps_a_lease_alive() {
    heartbeat_keeps(&Db::Sqlite);
}

pub fn heartbeat_keeps(db: &Db) {
    let p = Project::on(db);
    let store = Store::open(&p.db(), true).unwrap();
    let lease = leased_run(&store);
    let short = Store::open(&p.db(), false)
        .unwrap()
        .with_lease_ttl(Duration::from_secs(5));
    held_by_pid_1(&p, &lease.run, 10_000);
    // Expired for a 5 s TTL ... until the holder (still token `lease`) beats.
    store.heartbeat(&lease).unwrap();
    assert!(matches!(
        short.acquire(&lease.run),
        Err(StoreError::LeaseHeld { .. })
    ));
}

#[test]
fn one_batched_heartbeat_keeps_every_lease_and_skips_a_lost_one() {
    batched_heartbeat_keeps(&Db::Sqlite);
}

/// A worker's batched pulse (issue 23): one write refreshes every lease it holds and
/// skips one another process took over (that run learns it from its own next write);
/// one query finds the cancels asked among the runs held.
pub fn batched_heartbeat_keeps(db: &Db) {
    let p = Project::on(db);
    let store = Store::open(&p.db(), true).unwrap();
    let leases: Vec<Lease> = (0..3).map(|_| leased_run(&store)).collect();
    let short = Store::open(&p.db(), false)
        .unwrap()
        .with_lease_ttl(Duration::from_secs(5));
    for lease in &leases {
        held_by_pid_1(&p, &lease.run, 10_000);
    }
    short
        .acquire(&leases[2].run)
        .expect("the third run taken over");
    assert_eq!(store.heartbeat_all(&leases).unwrap(), 2);
    assert_eq!(store.heartbeat_all(&[]).unwrap(), 0);
    for lease in &leases[..2] {
        assert!(matches!(
            short.acquire(&lease.run),
            Err(StoreError::LeaseHeld { .. })
        ));
    }
    assert!(matches!(
        store.heartbeat(&leases[2]),
        Err(StoreError::LeaseLost(_))
    ));

    let runs: Vec<RunId> = leases.iter().map(|l| l.run.clone()).collect();
    assert!(store.cancel_requests(&runs).unwrap().is_empty());
    store
        .cancel_run(&runs[1], "ops", Some("wrong task"))
        .expect("cancel asked");
    let found = store.cancel_requests(&runs).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, runs[1]);
    assert_eq!(found[0].1.by, "ops");
    assert_eq!(found[0].1.reason.as_deref(), Some("wrong task"));
    assert!(store.cancel_requests(&runs[2..]).unwrap().is_empty());
}

/// The worker's pulse (issue 23) through its public loop: it heartbeats every run held
/// and sends a stop order to the one run someone cancelled, which then leaves it.
#[test]
fn the_worker_pulse_beats_for_every_run_and_stops_the_cancelled_one() {
    use agentrun::machine::StopCause;
    use agentrun::runner::pulse::Pulses;
    use std::sync::Arc;
    let p = Project::new();
    let store = Store::open(&p.db(), true).unwrap();
    let (a, b) = (leased_run(&store), leased_run(&store));
    let pulses = Arc::new(Pulses::default());
    let (tx_a, mut rx_a) = tokio::sync::mpsc::unbounded_channel();
    let (tx_b, mut rx_b) = tokio::sync::mpsc::unbounded_channel();
    let _hold_a = pulses.hold(&a, tx_a);
    let hold_b = pulses.hold(&b, tx_b);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let beats = async {
        while pulses.heartbeat_writes() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    rt.block_on(async {
        tokio::select! {
            _ = pulses.run(&store, Duration::from_millis(10)) => unreachable!(),
            r = tokio::time::timeout(Duration::from_secs(20), beats) => r.expect("beats"),
        }
    });
    assert!(rx_a.try_recv().is_err() && rx_b.try_recv().is_err());
    store.cancel_run(&b.run, "ops", None).unwrap();
    let order = rt.block_on(async {
        tokio::select! {
            _ = pulses.run(&store, Duration::from_millis(10)) => unreachable!(),
            r = tokio::time::timeout(Duration::from_secs(20), rx_b.recv()) => r.expect("stop"),
        }
    });
    let order = order.expect("a stop order");
    assert_eq!(order.request.cause, StopCause::Cancel);
    assert_eq!(order.request.by, "ops");
    assert!(
        rx_a.try_recv().is_err(),
        "only the cancelled run is stopped"
    );
    assert_eq!(pulses.len(), 1);
    drop(hold_b);
    assert_eq!(pulses.len(), 1, "the one still held");
}

#[test]
fn of_four_racing_resumes_exactly_one_proceeds() {
    four_racing_resumes(&crate::common::Db::Sqlite);
}

/// The racing-resumes test on a backend (`tests/it/pg.rs` runs it on PostgreSQL).
pub fn four_racing_resumes(db: &crate::common::Db) {
    let (p, id) = crate::common::blocked_run_on(db);
    p.write("hold", "");
    let children: Vec<_> = (0..4)
        .map(|_| {
            p.command(&["resume", &id, "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // The winner blocks in the tool while `hold` exists, so the three losers must all
    // exit on their own; poll until they have (bounded), then release the winner.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut children: Vec<_> = children.into_iter().map(Some).collect();
    let mut losers = Vec::new();
    while losers.len() < 3 && std::time::Instant::now() < deadline {
        for slot in children.iter_mut() {
            if slot
                .as_mut()
                .is_some_and(|c| c.try_wait().unwrap().is_some())
            {
                losers.push(slot.take().unwrap().wait_with_output().unwrap());
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::remove_file(p.path().join("hold")).unwrap();
    assert_eq!(losers.len(), 3, "three resumes should have been refused");
    for out in &losers {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("agentrun: run {id} is held by pid ")),
            "{err}"
        );
    }
    let winner = children
        .into_iter()
        .flatten()
        .next()
        .unwrap()
        .wait_with_output()
        .unwrap();
    assert_eq!(
        winner.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&winner.stderr)
    );
}

#[test]
fn four_runs_in_parallel_on_one_database_all_complete() {
    four_runs_in_parallel(&crate::common::Db::Sqlite);
}

/// Four processes sharing one database (`tests/it/pg.rs` runs it on PostgreSQL).
pub fn four_runs_in_parallel(db: &crate::common::Db) {
    let shared = Project::on(db);
    let db = shared.db();
    let projects: Vec<Project> = (0..4).map(|_| twenty_step_project()).collect();
    let began = std::time::Instant::now();
    let children: Vec<_> = projects
        .iter()
        .map(|p| {
            p.command(&["start", "task.md", "--json"])
                .env("AGENTRUN_DB", &db)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (v["status"].as_str(), v["steps"].as_u64()),
            (Some("completed"), Some(21))
        );
    }
    let list = shared
        .run(&["runs", "list", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(list.as_array().map(Vec::len), Some(4));
    eprintln!(
        "4 x 21 steps in parallel on one database: {:?}",
        began.elapsed()
    );
}

fn twenty_step_project() -> Project {
    let p = Project::new();
    p.script("step.sh", "#!/bin/sh\ncat > /dev/null\necho '\"ok\"'\n");
    p.write(
        "tools.toml",
        "[tools.step]\ndescription = \"step\"\ninput_schema = { type = \"object\" }\ncommand = [\"sh\", \"step.sh\"]\nidempotent = true\n",
    );
    let mut turns: Vec<_> = (0..20)
        .map(|i| json!({"tool_calls": [{"name": "step", "args": {"i": i}}]}))
        .collect();
    turns.push(json!({"text": "done"}));
    p.model_script(json!(turns));
    p.task("max_steps = 30", "Twenty steps.");
    p
}

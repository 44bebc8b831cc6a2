//! Random `kill -9` soak (issue 6 §3): real agentrun processes are killed with SIGKILL
//! at random moments — inside SQLite commits, while tools run, between steps — then
//! resumed, over and over; every finished run is held to the same checks as the
//! crash-point test (`tests/crash.rs`): transcript equal to the uninterrupted one up to
//! `outcome_unknown` results of `once` calls, no `once` effect twice, every `idem`
//! effect at least once, one result per call, and no stored model turn asked for again.
//!
//! Bounded by time: `AGENTRUN_SOAK_SECS` (default 3) seconds of runs, at least one.
//! The kill schedule comes from a seeded RNG; the seed is printed at the end and on
//! failure, and `AGENTRUN_SOAK_SEED` replays it (the timing, not the exact instants).

// Tests and benches print for people; only the binary goes through src/out.rs.
#![allow(clippy::disallowed_macros, clippy::disallowed_methods)]

#[path = "it/common/mod.rs"]
mod common;
#[path = "it/exactly_once/mod.rs"]
mod exactly_once;

use common::{Db, Project};
use exactly_once::{
    check_effects, check_no_stored_turn_requested_again, check_one_result_per_call,
    check_transcript, effect_counts, observed, project_on, run, turns_requested,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const TURNS: &[&[&str]] = &[
    &["idem"],
    &["once", "idem"],
    &["idem"],
    &["once"],
    &["idem", "once"],
    &["idem"],
];

#[derive(Debug, Default)]
struct Tally {
    runs: u32,
    kills: u32,
    /// Processes that finished before their kill moment.
    finished_first: u32,
    unknown: usize,
}

/// How one process of a run ended.
enum Ended {
    Killed,
    Exited(i32, String),
}

#[test]
fn random_kill_nine_never_repeats_an_effect_or_a_stored_model_turn() {
    soak(&Db::Sqlite);
}

/// The same soak on PostgreSQL (issue 17) when `AGENTRUN_TEST_PG` names a server
/// (`tests/it/pg.rs` says how to enable it; this one stays quiet without it).
#[test]
fn random_kill_nine_on_postgresql_never_repeats_an_effect_or_a_stored_model_turn() {
    if let Some(url) = common::test_pg() {
        soak(&Db::Pg(url));
    }
}

fn soak(db: &Db) {
    let seed = env_or("AGENTRUN_SOAK_SEED", rand::random::<u64>());
    let secs = env_or("AGENTRUN_SOAK_SECS", 3.0f64);
    let mut rng = StdRng::seed_from_u64(seed);
    let (want, full) = reference(db);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut tally = Tally::default();
    while tally.runs == 0 || Instant::now() < deadline {
        if let Err(e) = soak_one(db, &mut rng, &want, full, &mut tally) {
            panic!(
                "soak run {} failed: {e}\n(kill schedule: AGENTRUN_SOAK_SEED={seed})",
                tally.runs + 1
            );
        }
        tally.runs += 1;
    }
    eprintln!("soak ({db:?}): AGENTRUN_SOAK_SEED={seed}, uninterrupted run {full:?}: {tally:?}");
    assert!(tally.kills > 0, "no process was killed: {tally:?}");
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The uninterrupted run, and how long it took (the window kills are drawn from).
fn reference(db: &Db) -> (Value, Duration) {
    let p = project_on(TURNS, db);
    let began = Instant::now();
    let v = run(&p, &["start", "task.md", "--json"], &[])
        .expect_code(0)
        .json();
    let took = began.elapsed();
    (p.show(v["run_id"].as_str().expect("run_id")), took)
}

/// One run, killed at random moments until a process outlives its moment (at most
/// eight times), then finished and checked.
fn soak_one(
    db: &Db,
    rng: &mut StdRng,
    want: &Value,
    full: Duration,
    t: &mut Tally,
) -> Result<(), String> {
    let p = project_on(TURNS, db);
    for _ in 0..8 {
        // Within the first half of an uninterrupted run's time: a resumed process
        // starts from its checkpoint, so later moments are reached by later processes.
        let at = full.mul_f64(rng.random_range(0.0..0.5));
        match drive(&p, Some(at))? {
            Ended::Killed => t.kills += 1,
            Ended::Exited(0, _) => {
                t.finished_first += 1;
                break;
            }
            Ended::Exited(code, err) => return Err(format!("exit {code}: {err}")),
        }
    }
    match drive(&p, None)? {
        Ended::Exited(0, _) => {}
        Ended::Exited(code, err) => return Err(format!("final exit {code}: {err}")),
        Ended::Killed => return Err("final process died".into()),
    }
    let show = p.show(&p.only_run());
    if show["status"] != "completed" || show["steps"] != want["steps"] {
        return Err(format!(
            "run ended {} after {} steps",
            show["status"], show["steps"]
        ));
    }
    let seen = observed(&p);
    t.unknown += check_transcript(want, &show)?.len();
    check_one_result_per_call(&show)?;
    check_effects(&show, &effect_counts(&seen))?;
    check_no_stored_turn_requested_again(&seen)?;
    let mut asked = turns_requested(&seen);
    asked.dedup();
    if asked != (0..=TURNS.len()).collect::<Vec<_>>() {
        return Err(format!("turns asked for, in order: {asked:?}"));
    }
    Ok(())
}

/// Starts the run (or resumes it once it exists) and, with `kill_at`, sends SIGKILL at
/// that moment unless the process ended first.
fn drive(p: &Project, kill_at: Option<Duration>) -> Result<Ended, String> {
    let id = existing_run(p);
    let args = match &id {
        Some(id) => vec!["resume", id.as_str(), "--json"],
        None => vec!["start", "task.md", "--json"],
    };
    let log = p.path().join("observe.log");
    let mut child = p
        .command(&args)
        .env("AGENTRUN_OBSERVE_LOG", log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    if let Some(at) = kill_at {
        wait_until(&mut child, Instant::now() + at);
        if child.try_wait().map_err(|e| e.to_string())?.is_none() {
            let pid = libc::pid_t::try_from(child.id()).map_err(|e| e.to_string())?;
            // SAFETY: plain kill(2) on our own child, which has not been reaped yet, so
            // the pid cannot have been reused.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    use std::os::unix::process::ExitStatusExt;
    Ok(match (out.status.code(), out.status.signal()) {
        (_, Some(libc::SIGKILL)) => Ended::Killed,
        (Some(code), _) => Ended::Exited(code, String::from_utf8_lossy(&out.stderr).into()),
        (None, sig) => return Err(format!("died of signal {sig:?}")),
    })
}

/// Polls the child until it exits or `deadline` passes (this is the random moment
/// itself, not a wait for some state).
fn wait_until(child: &mut Child, deadline: Instant) {
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The run's id once a (killed) `start` got as far as creating it.
fn existing_run(p: &Project) -> Option<String> {
    if p.pg.is_none() && !p.db().exists() {
        return None;
    }
    let list = p.run(&["runs", "list", "--json"]).expect_code(0).json();
    list.as_array()?
        .first()
        .and_then(|r| r["id"].as_str())
        .map(str::to_string)
}

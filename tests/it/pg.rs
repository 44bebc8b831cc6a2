//! The durability suite on a real PostgreSQL (issue 17): the same test bodies as the
//! SQLite ones — every crash point resumed, racing resumes, a stale holder fenced
//! after a takeover, lease expiry and heartbeats, parallel runs on one database, and
//! the queue (workers draining it, a kill -9'd worker taken over, SIGTERM, re-queue),
//! cancel from another process (issue 21) —
//! run against the server `AGENTRUN_TEST_PG` names, each project in a fresh schema.
//!
//! Without `AGENTRUN_TEST_PG` the suite prints one line saying how to enable it (the
//! README gives the two commands) and passes; `.ci/run` starts a throwaway cluster and
//! sets it, so CI always runs it.

use crate::common::{Db, peer, test_pg};

/// The backend for this module's tests, or `None` after saying (once) how to enable
/// them.
pub fn pg_or_say() -> Option<Db> {
    peer::available(
        "PostgreSQL",
        "set AGENTRUN_TEST_PG to a server URL; `eval \"$(.ci/pg start)\"` starts a throwaway one",
        test_pg,
    )
    .map(Db::Pg)
}

type Suite = fn(&Db);

#[test]
fn the_durability_suite_passes_on_postgresql() {
    let Some(db) = pg_or_say() else {
        return;
    };
    std::thread::scope(|s| {
        let db = &db;
        let suites: [(&str, Suite); 18] = [
            ("crash points", crate::crash::every_crash_point),
            ("racing resumes", crate::lease::four_racing_resumes),
            ("parallel runs", crate::lease::four_runs_in_parallel),
            ("stale holder fenced", crate::lease::stale_holder_fenced),
            ("live holder keeps", crate::lease::live_holder_keeps),
            ("silent holder loses", crate::lease::silent_holder_loses),
            ("heartbeat keeps", crate::lease::heartbeat_keeps),
            ("batched heartbeat", crate::lease::batched_heartbeat_keeps),
            (
                "workers drain the queue",
                crate::queue::workers_drain_the_queue,
            ),
            (
                "kill -9 takeover",
                crate::queue::a_killed_worker_is_taken_over_without_repeating_effects,
            ),
            (
                "sigterm hands back",
                crate::queue::sigterm_hands_the_run_back_to_the_queue,
            ),
            (
                "resolve requeues",
                crate::queue::resolving_an_escalation_requeues_the_run,
            ),
            (
                "runs show across pages",
                crate::scale::runs_show_walks_every_page,
            ),
            (
                "cancel a busy run",
                crate::operating::cancel_stops_a_run_busy_in_a_slow_tool,
            ),
            (
                "cancel a worker's run",
                crate::operating::cancel_reaches_a_run_held_by_a_worker,
            ),
            (
                "cancelled queued run never claimed",
                crate::operating::a_cancelled_queued_run_is_never_claimed,
            ),
            (
                "cancel crash points",
                crate::operating::every_cancel_crash_point,
            ),
            (
                "cost in runs list",
                crate::newcomer::cost_in_the_final_line_and_runs_list,
            ),
        ];
        let handles: Vec<_> = suites
            .into_iter()
            .map(|(name, f)| (name, s.spawn(move || f(db))))
            .collect();
        let failed: Vec<&str> = handles
            .into_iter()
            .filter_map(|(name, h)| h.join().is_err().then_some(name))
            .collect();
        assert!(failed.is_empty(), "failed on PostgreSQL: {failed:?}");
    });
}

/// Fork and send (issue 21) on PostgreSQL: a fork repeats no effect, a cancelled run is
/// forked and its fork cancelled, a message sent while a model request is in flight is
/// delivered once, and kill -9 at each of their crash points. One after another, beside
/// the durability suite rather than in it: its cancel timings are measured under load.
/// A fork after a crash inside a charge carries the in-doubt call (docs/security.md).
#[test]
fn a_fork_repeats_no_in_doubt_effect_on_postgresql() {
    let Some(db) = pg_or_say() else {
        return;
    };
    crate::in_doubt::fork_runs_no_in_doubt_effect(&db);
}

#[test]
fn fork_and_send_pass_on_postgresql() {
    let Some(db) = pg_or_say() else {
        return;
    };
    crate::fork_send::fork_repeats_no_effect(&db);
    crate::fork_send::fork_keeps_cost(&db);
    crate::operating::a_cancelled_run_is_forked_and_its_fork_can_be_cancelled(&db);
    crate::fork_send::message_in_flight_delivered_once(&db);
    crate::fork_send_crash::every_operator_crash_point(&db);
}

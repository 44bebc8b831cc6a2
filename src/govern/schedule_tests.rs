use super::*;
use crate::records::RunId;

fn limit(requests: Option<u64>, tokens: Option<u64>, conc: Option<u32>) -> Limit {
    Limit {
        requests,
        tokens,
        max_concurrent: conc,
        window_ms: 60_000,
    }
}

fn waiter(id: &str, created_at: i64, tokens: i64) -> LimitHold {
    LimitHold {
        id: id.into(),
        run: RunId("r".into()),
        lease_token: 1,
        priority: 0,
        tokens,
        cost: 0.0,
        start_at: None,
        created_at,
        waiting_for: None,
    }
}

#[test]
fn requests_are_spaced_by_the_rate_and_given_starts_only_within_the_horizon() {
    let l = limit(Some(60), None, None);
    let mut state = KeyState {
        tat: 10_000.0,
        ..KeyState::default()
    };
    let mut holds: Vec<_> = (0..5).map(|i| waiter(&format!("w{i}"), i, 1)).collect();
    let waits = pass(&l, &mut state, &mut holds, 10_000);
    // 1 s apart; the horizon is 2 s: the first three go (at 10, 11, 12 s).
    let starts: Vec<_> = holds.iter().map(|h| h.start_at).collect();
    assert_eq!(
        starts,
        [Some(10_000), Some(11_000), Some(12_000), None, None]
    );
    assert_eq!(state.tat, 13_000.0);
    assert_eq!(
        waits,
        vec![
            (
                3,
                Wait {
                    expected: Some(13_000),
                    reason: Reason::Requests
                }
            ),
            (
                4,
                Wait {
                    expected: Some(14_000),
                    reason: Reason::Requests
                }
            ),
        ]
    );
}

#[test]
fn the_larger_of_the_request_and_token_shares_is_a_requests_cost() {
    let l = limit(Some(60), Some(40_000), None);
    // 4,000 tokens are a tenth of the window's: 6 s; one request is 1 s.
    assert_eq!(cost(&l, 4_000, 1.0), 6_000.0);
    assert_eq!(cost(&l, 10, 1.0), 1_000.0);
    // A request larger than the window's tokens costs the window, never more.
    assert_eq!(cost(&l, 1_000_000, 1.0), 60_000.0);
}

#[test]
fn higher_priority_goes_first_and_first_come_within_one() {
    let l = limit(Some(60), None, None);
    let mut state = KeyState {
        tat: 100_000.0,
        ..KeyState::default()
    };
    let mut holds = vec![waiter("late-low", 5, 1), waiter("early-low", 1, 1)];
    let mut urgent = waiter("late-high", 9, 1);
    urgent.priority = 5;
    holds.push(urgent);
    let waits = pass(&l, &mut state, &mut holds, 0);
    let order: Vec<_> = waits.iter().map(|(i, _)| holds[*i].id.as_str()).collect();
    assert_eq!(order, ["late-high", "early-low", "late-low"]);
}

#[test]
fn a_full_concurrency_limit_holds_the_whole_line() {
    let l = limit(None, None, Some(2));
    let mut state = KeyState::default();
    let mut holds: Vec<_> = (0..4).map(|i| waiter(&format!("w{i}"), i, 0)).collect();
    holds[0].start_at = Some(0);
    holds[1].start_at = Some(0);
    let waits = pass(&l, &mut state, &mut holds, 50);
    assert!(holds[2].start_at.is_none() && holds[3].start_at.is_none());
    assert_eq!(waits.len(), 2);
    assert!(
        waits
            .iter()
            .all(|(_, w)| w.reason == Reason::Concurrency && w.expected.is_none())
    );
    // One finishes (its hold is deleted): the next in line goes.
    holds.remove(0);
    pass(&l, &mut state, &mut holds, 60);
    assert_eq!(holds[1].start_at, Some(60));
    assert_eq!(holds[2].start_at, None);
}

#[test]
fn settling_gives_back_what_a_request_did_not_use() {
    let l = limit(None, Some(60_000), None);
    let mut state = KeyState::default();
    let mut holds = vec![waiter("a", 0, 6_000)];
    pass(&l, &mut state, &mut holds, 0);
    assert_eq!(state.tat, 6_000.0);
    settle(&l, &mut state, &holds[0], Some(1_500), 10);
    assert_eq!(state.tat, 1_500.0);
    assert_eq!(state.tokens, 1_500);
}

#[test]
fn a_refusal_pauses_the_key_moves_pending_starts_and_halves_the_rate_until_it_climbs_back() {
    let l = limit(Some(60), None, None);
    let mut state = KeyState::default();
    let mut holds: Vec<_> = (0..2).map(|i| waiter(&format!("w{i}"), i, 1)).collect();
    pass(&l, &mut state, &mut holds, 0);
    assert_eq!(holds[1].start_at, Some(1_000));
    pause(&l, &mut state, &mut holds, 500, 5_500, true);
    assert_eq!(state.paused_until, 5_500);
    assert_eq!(holds[0].start_at, Some(0), "already started");
    assert_eq!(
        holds[1].start_at,
        Some(6_000),
        "moved by the pause, order kept"
    );
    assert_eq!(state.factor(500, &l), 0.5);
    // A second refusal during the pause does not cut again.
    pause(&l, &mut state, &mut holds, 600, 5_500, true);
    assert_eq!((state.lowered, state.lowered_at), (0.5, 500));
    assert_eq!(state.refusals, 2);
    // A quarter of the rate comes back per window.
    assert_eq!(state.factor(500 + 60_000, &l), 0.75);
    assert_eq!(state.factor(500 + 120_000, &l), 1.0);
    // At half the rate, a request costs twice as long.
    assert_eq!(cost(&l, 1, state.factor(500, &l)), 2_000.0);
}

#[test]
fn nobody_passes_a_waiter_that_cannot_go() {
    // A big request at the head blocks the small ones behind it (no starvation).
    let l = limit(None, Some(60_000), None);
    let mut state = KeyState {
        tat: 0.0,
        ..KeyState::default()
    };
    let mut holds = vec![
        waiter("small", 0, 1_000),
        waiter("big", 1, 50_000),
        waiter("tiny", 2, 10),
    ];
    pass(&l, &mut state, &mut holds, 0);
    assert_eq!(holds[0].start_at, Some(0));
    assert_eq!(holds[1].start_at, Some(1_000));
    assert_eq!(
        holds[2].start_at, None,
        "50 s of tokens before it: beyond the horizon"
    );
    // Later small requests wait behind the big one, not before it.
    let mut later = vec![holds[2].clone(), waiter("late", 3, 10)];
    pass(&l, &mut state, &mut later, 1_500);
    assert!(later.iter().all(|h| h.start_at.is_none()));
}

#[test]
fn a_quiet_key_banks_a_tenth_of_its_window_and_no_more() {
    let l = limit(Some(60), None, None);
    let mut state = KeyState::default();
    let mut holds: Vec<_> = (0..8).map(|i| waiter(&format!("w{i}"), i, 1)).collect();
    pass(&l, &mut state, &mut holds, 100_000);
    // 6 s banked at 1 s a request: six go at once with the one due now, then the rate.
    let starts: Vec<_> = holds.iter().map(|h| h.start_at).collect();
    assert_eq!(
        starts,
        [
            Some(100_000),
            Some(100_000),
            Some(100_000),
            Some(100_000),
            Some(100_000),
            Some(100_000),
            Some(100_000),
            Some(101_000)
        ]
    );
}

//! The line that ends a run on stderr: how it ended, what it cost, and what to do next.

use super::Style;
use crate::records::RunStatus;
use crate::runner::RunOutcome;
use std::time::Duration;

/// `agentrun: run 3f9a… completed after 3 steps (1630 tokens in, 102 out, $0.0041) in
/// 2.1s` (the cost when the model has a price, as the progress lines showed it), plus a
/// second line saying how to continue when the run is not done.
pub fn final_line(o: &RunOutcome, elapsed: Option<Duration>, s: Style) -> String {
    let cost = if o.cost_usd > 0.0 {
        format!(", {}", crate::money::usd(o.cost_usd))
    } else {
        String::new()
    };
    let mut line = format!(
        "agentrun: run {} {} after {} step{} ({} tokens in, {} out{cost})",
        o.run_id,
        s.bold(&s.status(o.status)),
        o.steps,
        if o.steps == 1 { "" } else { "s" },
        o.input_tokens,
        o.output_tokens
    );
    if let Some(d) = elapsed {
        line.push_str(&format!(" in {}", seconds(d)));
    }
    if let Some(reason) = &o.reason {
        line.push_str(&format!(": {reason}"));
    }
    if o.status == RunStatus::Completed && !o.stale_via.is_empty() {
        line.push_str(&format!(
            "\nagentrun: degraded: the answer rests on results from {} (a fallback that may \
             be out of date); see `agentrun runs show {}`",
            o.stale_via.join(", "),
            o.run_id
        ));
    }
    if let Some(next) = next_step(o) {
        line.push_str(&format!("\nagentrun: {next}"));
    }
    line
}

/// What the person can do about a run that stopped short.
fn next_step(o: &RunOutcome) -> Option<String> {
    let id = &o.run_id;
    let see = match o.escalation_id {
        Some(esc) => format!("`agentrun escalations show {esc}`"),
        None => "`agentrun escalations list`".to_string(),
    };
    match o.status {
        RunStatus::Completed => None,
        RunStatus::BudgetExhausted => {
            // Name only the budget that ran out (issue 13); the reason is the guard's
            // own message (`step budget spent: …` / `token budget spent: …`).
            let reason = o.reason.as_deref().unwrap_or_default();
            let flags = if reason.starts_with("step budget") {
                "--max-steps N"
            } else if reason.starts_with("token budget") {
                "--max-tokens N"
            } else if reason.starts_with("cost budget") {
                "--max-cost USD"
            } else if reason.starts_with("time budget") {
                "--max-duration DURATION"
            } else {
                "--max-steps N --max-tokens N"
            };
            Some(format!(
                "raise the budget with `agentrun resume {id} {flags}` (N is the new total)"
            ))
        }
        RunStatus::AwaitingApproval | RunStatus::Escalated => Some(format!(
            "a person is needed: see {see}, resolve it, then `agentrun resume {id}`"
        )),
        RunStatus::Failed => Some(format!(
            "see what happened with `agentrun runs show {id}`; continue with `agentrun resume {id}`"
        )),
        RunStatus::Interrupted | RunStatus::Running => {
            Some(format!("continue with `agentrun resume {id}`"))
        }
        RunStatus::Cancelled => Some(format!(
            "it is cancelled for good; start anew from it with `agentrun runs fork {id}`"
        )),
        RunStatus::Queued => Some(format!(
            "a worker (`agentrun worker`) takes it; or run it here with `agentrun resume {id}`"
        )),
    }
}

fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

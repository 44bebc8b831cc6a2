//! `runs fork` in the store (issue 21): a new run whose history is another's up to the
//! end of a committed step, copied in one transaction.
//!
//! What is copied is exactly what the loop reads on resume, as of the end of that
//! step: the transcript (messages up to the step's last one, including notes and
//! people's messages added after it), the loop state kept for that step
//! (`step_states`: counters, breaker, stuck history, compaction), the journal and the
//! trace of steps up to it, and the config snapshot (or the one given instead). The
//! fork's checkpoint is that step, so it continues with the next one and never runs a
//! copied step again: their effects are the original's, recorded once. Nothing after
//! the step is copied — no escalation, no pending message — with one exception:
//!
//! **An in-doubt turn is carried** (docs/security.md, Forks). When the fork point is
//! the source's last committed step and the source's next step holds a call that
//! started and has no outcome (the process died in it, or it ended without proof it
//! did not act), asking the model again could repeat its effect under a new call id.
//! So that step's stored model turn, its journal and its trace are copied too: the
//! fork resumes into the same turn and meets the same started call, which `resume`
//! turns into the same `outcome_unknown` escalation. The fork's snapshot says whose
//! calls those are ([`carry_keys`]), so a call a person re-runs keeps its original
//! `AGENTRUN_CALL_ID`. The original is only read.

use super::error::{Result, StoreError};
use crate::records::{RunId, RunStatus, Spent};
use std::collections::BTreeMap;

/// What `runs fork` asks for.
#[derive(Debug, Clone)]
pub struct ForkRun<'a> {
    pub source: RunId,
    /// The new run's id.
    pub id: RunId,
    /// The last step copied; `None`: the source's last committed step.
    pub at_step: Option<u32>,
    /// A config snapshot (and its scripts) replacing the source's (`--model`,
    /// `--tools`); `None` keeps the source's.
    pub config: Option<(&'a str, &'a BTreeMap<String, String>)>,
    /// New budgets for the fork; `None` keeps the source's.
    pub max_steps: Option<u32>,
    pub max_tokens: Option<u64>,
    /// Reads what a step's loop state says was spent. The store keeps loop states as
    /// the machine wrote them and never reads them itself, so the caller (which knows
    /// the machine) passes the reader.
    pub spent: ReadSpent,
}

/// Reads what a run had spent by a step (its tokens and cost; copied to the fork with
/// its history so the fork's counters agree with what it inherits) from a stored loop
/// state (JSON); the error says what is wrong.
pub type ReadSpent = fn(&str) -> std::result::Result<Spent, String>;

/// A fork as created.
#[derive(Debug, Clone, PartialEq)]
pub struct Forked {
    pub id: RunId,
    /// The last step copied from the source.
    pub at_step: u32,
    /// The source's next step held a call that started without an outcome: its turn
    /// was carried, and the fork asks a person about that call before anything else.
    pub in_doubt: bool,
}

/// The fork's snapshot, saying that the calls of `step` were made by `source` and keep
/// its call ids (`AGENTRUN_CALL_ID`). A source that itself carries that step from its
/// own source passes the original on, so a fork of a fork still names the first run.
pub(crate) fn carry_keys(
    fork_snapshot: &str,
    source: &RunId,
    source_snapshot: &str,
    step: u32,
) -> Result<String> {
    let corrupt = |e: serde_json::Error| StoreError::Corrupt {
        run: source.to_string(),
        message: format!("config snapshot: {e}"),
    };
    let src: serde_json::Value = serde_json::from_str(source_snapshot).map_err(corrupt)?;
    let mut fork: serde_json::Value = serde_json::from_str(fork_snapshot).map_err(corrupt)?;
    let keys = match src.get("carried") {
        Some(c) if c.get("step").and_then(serde_json::Value::as_u64) == Some(u64::from(step)) => {
            c.clone()
        }
        _ => serde_json::json!({
            "run_id": source.0,
            "salt": src.get("call_salt").and_then(serde_json::Value::as_str).unwrap_or_default(),
            "step": step,
        }),
    };
    if let Some(obj) = fork.as_object_mut() {
        obj.insert("carried".into(), keys);
    }
    serde_json::to_string(&fork).map_err(corrupt)
}

/// What a fork says until it is first driven: it is `interrupted` (resumable, held by
/// nobody) with this reason; `runs fork` resumes it at once unless `--no-start`.
pub fn not_started_reason(source: &RunId, step: u32) -> String {
    format!("forked from {source} at step {step}; not started yet (resume it to start)")
}

/// The fork's point, checked: the step asked for (or the last), its transcript
/// length and loop state.
pub(crate) struct ForkPoint {
    pub step: u32,
    pub last_seq: i64,
    pub state: String,
    pub tokens: (u64, u64),
    /// What the source had spent at that step, copied with its tokens so the fork's
    /// `cost_usd` agrees with its token counts.
    pub cost_usd: f64,
    /// The point is the source's last committed step: its next step, if it holds an
    /// in-doubt call, is carried.
    pub at_last: bool,
}

impl ForkPoint {
    /// Checks `at_step` against the source's last committed step and the step states
    /// kept for it.
    pub(crate) fn check(
        source: &RunId,
        at_step: Option<u32>,
        last: u32,
        spent: ReadSpent,
        kept: impl FnOnce(u32) -> Result<Option<(i64, String)>>,
    ) -> Result<ForkPoint> {
        let step = at_step.unwrap_or(last);
        if step > last {
            return Err(StoreError::ForkPastEnd {
                run: source.clone(),
                step,
                last,
            });
        }
        let (last_seq, state) = kept(step)?.ok_or_else(|| StoreError::ForkStepUnknown {
            run: source.clone(),
            step,
            last,
        })?;
        let spent = spent(&state).map_err(|e| StoreError::Corrupt {
            run: source.to_string(),
            message: format!("loop state of step {step}: {e}"),
        })?;
        Ok(ForkPoint {
            step,
            last_seq,
            state,
            tokens: (spent.input_tokens, spent.output_tokens),
            cost_usd: spent.cost_usd,
            at_last: step == last,
        })
    }
}

/// Refuses a message for a run that will never read it.
pub(crate) fn check_accepts(run: &RunId, status: &str) -> Result<()> {
    match RunStatus::parse(status) {
        Some(s) if s.accepts_messages() => Ok(()),
        Some(s) => Err(StoreError::NotListening {
            run: run.clone(),
            status: s,
        }),
        None => Err(StoreError::Corrupt {
            run: run.0.clone(),
            message: format!("unknown status `{status}`"),
        }),
    }
}

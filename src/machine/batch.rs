//! Running a step's calls together (issue 14): which calls may run at the same time,
//! and how their results go back into the model's order.
//!
//! From the first call not yet applied, the calls that need nothing but the recovery
//! chain are handed to the driver together ([`Effect::RunCall`] each), at most
//! [`MAX_PARALLEL`] at once; the driver runs them concurrently, so a turn of k such
//! calls costs about its slowest call, not the sum. The rules the calls keep:
//!
//! - **Same tool, same arguments → one after the other.** A call waits while an
//!   identical one is running, so the breaker counts and opens exactly as when calls
//!   run one by one (the second sees the first's failure).
//! - **Approval, `ask_user`, people's decisions → alone.** A call that needs approval
//!   (itself or a fallback hop, by the rules that decide it), `ask_user`, a call a
//!   person decided on, and a non-idempotent call a crash interrupted may pause the
//!   run: it begins only once every call before it is applied and nothing runs, and
//!   no call after it begins until it is applied — as in a run without batches.
//! - **Non-idempotent calls** are marked started (durably) before they run, each, as
//!   before; their outcome is journaled as soon as it is known.
//! - **Breaker and withdrawal** gate each call with the loop state as of its launch:
//!   calls of one tool with different arguments may run together, so a tool withdrawn
//!   by a failure inside a batch is withdrawn from the next launch on.
//!
//! A result is journaled when it arrives if calls before it are still running (a crash
//! then keeps it: resume reuses it and re-runs only what had not finished), and
//! applied — transcript, policies, stuck detector — strictly in the model's order, so
//! the transcript and every policy decision read as in a sequential run. A result
//! that may pause the run (an unknown outcome, a fallback hop needing approval) is
//! applied only once no other call is running, and no call starts while it waits, so
//! a pause never leaves a finished call without its journaled outcome nor starts a call
//! a sequential run would not have reached.

use super::calls::{Kind, Slot};
use super::effects::{Effect, RunCall};
use super::{ASK_USER, Machine};
use crate::model::limits::MAX_CALLS_PER_TURN;
use crate::recovery::Execution;
use crate::taxonomy::ErrorKind;

/// At most this many calls of one step run at the same time, unless tools.toml's
/// `[policy] max_parallel_calls` says otherwise (1: one by one, as before issue 14).
pub const MAX_PARALLEL: usize = crate::config::types::DEFAULT_MAX_PARALLEL_CALLS as usize;

impl Machine<'_> {
    /// How the step's call `idx` may run.
    pub(super) fn kind(&self, idx: usize) -> Kind {
        let Some(step) = self.step.as_ref() else {
            return Kind::Alone;
        };
        let Some(call) = step.calls.get(idx) else {
            return Kind::Alone;
        };
        let entry = step.journal.get(&call.id);
        if super::calls::has_outcome(entry)
            || idx >= MAX_CALLS_PER_TURN
            || !step.offered.contains(&call.name)
        {
            return Kind::Answered;
        }
        let Some(def) = self.rules.tools.tools.get(&call.name) else {
            return Kind::Alone;
        };
        let interrupted = entry.is_some_and(|e| e.started);
        let policy = &self.rules.tools.policy;
        let gated = |name: &str| {
            self.rules
                .tools
                .tools
                .get(name)
                .is_some_and(|d| super::policy::needs_approval(d, &call.args, policy))
        };
        if call.name == ASK_USER
            || step.decisions.contains_key(&call.id)
            || (interrupted && !def.idempotent)
            || gated(&def.name)
            || def.fallback.iter().any(|hop| gated(&hop.tool))
        {
            return Kind::Alone;
        }
        Kind::Together
    }

    /// Launches the calls that may run now alongside the running ones, in order from
    /// the head, stopping at the first that must wait.
    pub(super) fn fill(&mut self, out: &mut Vec<Effect>) {
        loop {
            let Some(step) = self.step.as_ref() else {
                return;
            };
            // A result that may pause the run is waiting: nothing after it starts.
            if step.slots.iter().any(|s| matches!(s, Slot::Held { .. })) {
                return;
            }
            let idx = step.scan.max(step.at);
            let cap = self.rules.tools.policy.max_parallel_calls as usize;
            if idx >= step.calls.len() || step.running >= cap.max(1) {
                return;
            }
            let call = &step.calls[idx];
            let waiting_for_twin = step.calls[..idx].iter().zip(&step.slots).any(|(c, s)| {
                matches!(s, Slot::Running { .. }) && c.name == call.name && c.args == call.args
            });
            let kind = self.kind(idx);
            if !matches!(step.slots[idx], Slot::Pending) {
                self.scanned(idx + 1);
                continue;
            }
            match kind {
                Kind::Answered => self.scanned(idx + 1),
                Kind::Alone => return,
                Kind::Together if waiting_for_twin => return,
                Kind::Together => {
                    self.launch(idx, out);
                    self.scanned(idx + 1);
                }
            }
        }
    }

    fn scanned(&mut self, to: usize) {
        if let Some(step) = self.step.as_mut() {
            step.scan = to;
        }
    }

    /// Hands call `idx` (one that needs only the chain) to the driver.
    fn launch(&mut self, idx: usize, out: &mut Vec<Effect>) {
        let must_not_repeat = {
            let Some(step) = self.step.as_ref() else {
                return;
            };
            self.must_not_repeat(&step.calls[idx].name)
        };
        let max_attempts = |name: &str| {
            self.rules
                .tools
                .tools
                .get(name)
                .map_or(1, |d| d.retry.attempts)
        };
        let Some(step) = self.step.as_ref() else {
            return;
        };
        let call = step.calls[idx].clone();
        let attempts = max_attempts(&call.name);
        let number = step.number;
        if must_not_repeat {
            out.push(Effect::MarkStarted {
                step: number,
                call_id: call.id.clone(),
            });
        }
        out.push(Effect::RunCall(Box::new(RunCall {
            step: number,
            call_id: call.id,
            tool: call.name,
            args: call.args,
            approved_hop: None,
            decision: None,
            max_attempts: attempts,
        })));
        if let Some(step) = self.step.as_mut() {
            step.slots[idx] = Slot::Running { modified: None };
            step.running += 1;
        }
    }

    /// A running call's chain answered: journal a plain result at once when calls
    /// before it are still running, then apply what is ready in order.
    pub(super) fn call_ran(&mut self, call_id: &str, execution: Execution) -> Vec<Effect> {
        let Some(step) = self.step.as_mut() else {
            return Vec::new();
        };
        let Some(idx) = step.calls.iter().position(|c| c.id == call_id) else {
            return Vec::new();
        };
        let Slot::Running { modified } = std::mem::replace(&mut step.slots[idx], Slot::Done) else {
            // Not running (a stale or repeated answer): nothing to do.
            return Vec::new();
        };
        step.running -= 1;
        let mut out = Vec::new();
        let pauses = match &execution {
            Execution::Done(o) => o.error == Some(ErrorKind::OutcomeUnknown) && o.via.is_none(),
            Execution::Paused { .. } | Execution::ChildWaiting { .. } => true,
        };
        step.slots[idx] = match execution {
            Execution::Done(o) if !pauses => {
                let mut ended = super::calls::record_of(&step.calls[idx], o, modified);
                if idx != step.at {
                    out.push(Effect::RecordOutcome {
                        step: step.number,
                        record: ended.record.clone(),
                    });
                    ended.journaled = true;
                }
                Slot::Arrived(ended)
            }
            execution => Slot::Held {
                execution,
                modified,
            },
        };
        out.extend(self.advance());
        out
    }
}

//! Stopping as an event of the machine (issue 21): a cancel, a signal, a worker
//! shutting down or the time budget all arrive as [`Event::StopRequested`], and the
//! machine decides when and how the run ends.
//!
//! Where the machine stands is an explicit [`Phase`], so a stop is a match on
//! `(phase, event)`:
//! - before the run starts or at a step boundary (the step's load, nothing of it
//!   begun), it stops at once;
//! - while a model request or calls are in flight it remembers the request and waits:
//!   if the work finishes, the step commits and the run stops at the next boundary
//!   instead of beginning a step; if the driver gives up on the work
//!   ([`Event::Aborted`]: the model request dropped, the calls' process groups
//!   killed), it stops at once, and the step is left exactly as a crash leaves it —
//!   the model asked again on resume, an idempotent call re-run, a started
//!   non-idempotent one `outcome_unknown`;
//! - once stopped, every later event is ignored.

use super::effects::{Effect, Event, Notice, Stop, StopReason};
pub use super::effects::{StopCause, StopRequest};
use super::{Machine, calls::Slot, state::BudgetStop};

/// Where the machine stands, as the last effects it returned left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Made, not yet started.
    Idle,
    /// A step's load is asked for: the step boundary, nothing of it begun.
    Loading,
    /// A model request (a step's, a retry after a cut, or a compaction) is in flight.
    Asking,
    /// The step's calls are running or being settled.
    Calling,
    /// The run stopped; nothing more happens in this process.
    Stopped,
}

impl Phase {
    /// The phase a batch of effects leaves the machine in: its request (or stop)
    /// decides; a batch with neither (a call finished while others run) keeps it.
    pub(super) fn after(effects: &[Effect]) -> Option<Phase> {
        effects.iter().rev().find_map(|e| match e {
            Effect::Stop(_) => Some(Phase::Stopped),
            Effect::LoadStep { .. } => Some(Phase::Loading),
            Effect::AskModel(_) => Some(Phase::Asking),
            Effect::RunCall(_) => Some(Phase::Calling),
            _ => None,
        })
    }
}

impl Machine<'_> {
    /// A stop is asked for: honoured now at a boundary, else once the work in
    /// flight finishes (the step's commit) or is aborted.
    pub(super) fn stop_requested(&mut self, request: StopRequest) -> Vec<Effect> {
        match self.phase {
            Phase::Idle | Phase::Loading => self.stop_now(request, None),
            Phase::Asking | Phase::Calling => {
                // The first request decides; a later one (Ctrl-C after a cancel) only
                // makes the driver abort sooner.
                self.stopping.get_or_insert(request);
                Vec::new()
            }
            Phase::Stopped => Vec::new(),
        }
    }

    /// The driver gave up on the work in flight after a stop: end the run now, its
    /// step uncommitted (as after a crash).
    pub(super) fn aborted(&mut self) -> Vec<Effect> {
        let Some(request) = self.stopping.take() else {
            // An abort is only ever the answer to a stop; without one it is a bug in
            // the driver, and the run fails rather than going on half-stepped.
            let request = StopRequest {
                cause: StopCause::Signal,
                by: "driver".into(),
                reason: Some("work aborted without a stop request".into()),
            };
            return self.stop_now(request, None);
        };
        // A cancelled run is never resumed: no one will be asked about the call.
        let unsafe_call = self
            .unsafe_call_in_flight()
            .filter(|_| request.cause != StopCause::Cancel);
        self.step = None;
        self.compacting = None;
        self.cut = None;
        self.stop_now(request, unsafe_call)
    }

    /// At a step boundary: the stop asked for while the last step ran, if any.
    pub(super) fn stop_at_boundary(&mut self) -> Option<Vec<Effect>> {
        let request = self.stopping.take()?;
        Some(self.stop_now(request, None))
    }

    /// Time left of the run's time budget, for the driver's deadline (`None`: no
    /// time budget).
    pub fn time_left_ms(&self) -> Option<u64> {
        let max = self.rules.spend.max_duration_ms?;
        Some(max.saturating_sub(self.active_ms()))
    }

    /// A non-idempotent call handed to the driver and not answered: the stop leaves
    /// it started without an outcome, so resume will ask a person about it.
    fn unsafe_call_in_flight(&self) -> Option<String> {
        let step = self.step.as_ref()?;
        step.calls
            .iter()
            .zip(&step.slots)
            .find(|(c, s)| matches!(s, Slot::Running { .. }) && self.must_not_repeat(&c.name))
            .map(|(c, _)| c.name.clone())
    }

    fn stop_now(&mut self, request: StopRequest, unsafe_call: Option<String>) -> Vec<Effect> {
        let status = request.status();
        let mut reason = self.stop_reason(&request);
        if let Some(tool) = unsafe_call {
            reason += &format!(
                " while `{tool}` was running; it is not idempotent, so resume will ask a \
                 person whether it happened"
            );
        }
        vec![
            Effect::SetStatus {
                status,
                reason: reason.clone(),
            },
            Effect::Notice(Notice::Stopped {
                reason: reason.clone(),
            }),
            Effect::Stop(Stop {
                status,
                reason: StopReason::Text(reason),
            }),
        ]
    }

    fn stop_reason(&self, request: &StopRequest) -> String {
        let words = request
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        match request.cause {
            StopCause::Cancel => format!("cancelled by {}{words}", request.by),
            StopCause::Signal => format!("interrupted by a signal{words}"),
            StopCause::WorkerShutdown => {
                format!("handed back to the queue (worker {} stopping)", request.by)
            }
            StopCause::Deadline => match self.rules.spend.max_duration_ms {
                Some(max) => BudgetStop::Duration {
                    used: self.active_ms().max(max),
                    max,
                }
                .message(),
                None => format!("time budget spent{words}"),
            },
        }
    }
}

/// Dispatches an event by the machine's phase; see the module doc.
impl Machine<'_> {
    pub(super) fn dispatch(&mut self, event: Event) -> Vec<Effect> {
        let out = match (self.phase, event) {
            (Phase::Stopped, _) => Vec::new(),
            (_, Event::StopRequested(request)) => self.stop_requested(request),
            (_, Event::Aborted) => self.aborted(),
            (_, event) => self.on_event(event),
        };
        if let Some(phase) = Phase::after(&out) {
            self.phase = phase;
        }
        out
    }
}

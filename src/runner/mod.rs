//! The driver: performs the effects of the loop's state machine ([`crate::machine`])
//! and feeds it what happened, until it stops.
//!
//! Durability follows docs/ARCHITECTURE.md §5: the model's response is journaled as soon as it
//! arrives, each call's start and outcome as they happen, and the step's messages with
//! the loop state in one commit. The calls the machine hands out together run
//! concurrently in this one task (issue 14): each [`Effect::RunCall`] starts a future,
//! the effects between them are performed at once, and each call's answer goes back
//! to the machine as soon as it finishes. Resuming is replay: the machine starts from the last
//! checkpoint and asks for each step's stored response, journal and decisions before
//! it asks the model or runs a tool.

pub mod cancel;
pub mod children;
mod hooks;
pub mod lifecycle;
pub mod observe;
pub mod operate;
pub mod pulse;
pub mod secrets;
pub mod stops;
pub mod worker;

use crate::clock::Clock;
use crate::fault;
use crate::machine::context::{self, Context, Window};
use crate::machine::cut::OutputCap;
use crate::machine::effects::{Ask, Commit, Notice, RunCall};
use crate::machine::guards::RunGuards;
use crate::machine::state::LoopState;
use crate::machine::{Effect, Event, Machine, Rules, Spend, Stop, StopReason};
use crate::model::{self, ModelRequest, Purpose};
use crate::recovery::chain::{Chain, HookAnswer};
use crate::recovery::{self, Execution};
use crate::setup::Resolved;
use crate::store::{
    EscalationDetail, EscalationId, Lease, NewEscalation, RunId, RunStatus, SentMessage,
    StepCommit, Store, StoreError,
};
use crate::tools::CallContext;
use crate::trace::{EventBuffer, EventSink};
use observe::{Observer, StepStart};
use std::cell::Cell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
pub use stops::StopOrder;
use stops::{Stops, Woke};

/// How a run ended this time (it may be resumed later).
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub run_id: RunId,
    pub status: RunStatus,
    pub answer: Option<String>,
    pub steps: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Some step's provider reported no usage: the counts include an estimate.
    pub tokens_estimated: bool,
    pub escalation_id: Option<EscalationId>,
    /// Why the run stopped, when it is not completed.
    pub reason: Option<String>,
    /// Money spent on model calls (USD, from the price table; issue 15).
    pub cost_usd: f64,
    /// The task has an `output_schema`: `answer` is JSON text (issue 26).
    pub structured: bool,
    /// Fallback tools whose results were marked stale: the answer rests on old data,
    /// which the final line says (the model may not).
    pub stale_via: Vec<String>,
}

impl RunOutcome {
    /// How this drive ended, for its spans.
    fn ended(&self) -> crate::telemetry::Ended<'_> {
        crate::telemetry::Ended {
            status: self.status,
            reason: self.reason.as_deref(),
            steps: self.steps,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cost_usd: self.cost_usd,
        }
    }
}

pub struct Runner {
    pub store: Arc<Store>,
    pub lease: Lease,
    pub resolved: Resolved,
    pub max_steps: u32,
    pub max_tokens: u64,
    pub clock: Arc<dyn Clock>,
    pub observer: Arc<dyn Observer>,
}

/// Why a run could not go on: the store failed, or the loop state could not be
/// written (a bug, not a damaged database).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("run {run}: the loop state cannot be saved: {source}")]
    State {
        run: RunId,
        source: serde_json::Error,
    },
}

/// What one run of the driver carries between effects.
struct Drive<'r> {
    runner: &'r Runner,
    /// Trace events not yet stored; each write that carries events takes them.
    events: EventBuffer,
    /// The escalation queued last (the one a pause or an escalated commit names).
    escalation: Cell<Option<EscalationId>>,
    /// The step this drive committed last: the step after it was begun by no one (the
    /// lease fences every other writer), so its journal need not be read.
    committed: Cell<Option<u32>>,
    /// People's messages read alongside that commit, for the step after it.
    sent_ahead: Cell<Option<Vec<SentMessage>>>,
    /// This drive's spans, when telemetry is on (docs/observability.md).
    trace: Option<Arc<crate::telemetry::RunTrace>>,
}

/// A call running through the recovery chain; it answers with [`Event::CallRan`].
type Running<'a> = Pin<Box<dyn Future<Output = Event> + 'a>>;

/// Waits for the first running call to finish, and takes it out. The calls are polled
/// in turn on each wake-up: at most [`crate::machine::MAX_PARALLEL`] of them.
async fn next_finished(running: &mut Vec<Running<'_>>) -> Event {
    std::future::poll_fn(|cx| {
        for i in 0..running.len() {
            if let Poll::Ready(event) = running[i].as_mut().poll(cx) {
                drop(running.swap_remove(i));
                return Poll::Ready(event);
            }
        }
        Poll::Pending
    })
    .await
}

impl Runner {
    pub(crate) fn run_id(&self) -> &RunId {
        &self.lease.run
    }

    /// Drives the run from its last checkpoint until it stops, with no one to stop it
    /// (tests, benches); [`lifecycle::drive`] is the way commands drive a run.
    pub async fn run(&self) -> Result<RunOutcome, RunError> {
        let (_keep, inbox) = tokio::sync::mpsc::unbounded_channel();
        self.run_with(inbox).await
    }

    /// Drives the run from its last checkpoint until it stops, taking stop orders
    /// from `inbox` ([`stops`]).
    pub async fn run_with(
        &self,
        inbox: tokio::sync::mpsc::UnboundedReceiver<StopOrder>,
    ) -> Result<RunOutcome, RunError> {
        let window = self.window();
        let keep_steps = (window.is_none() && self.reads_turn_count_only())
            .then_some(crate::machine::TURN_COUNT_KEEP_STEPS);
        let (state, context, windowed_out) = self.load(keep_steps)?;
        let trace = crate::telemetry::RunTrace::begin(&self.store, self.run_id(), state.steps)
            .map(Arc::new);
        let out = self
            .drive(inbox, (state, context, windowed_out), trace.clone())
            .await;
        if let Some(t) = &trace {
            t.end(out.as_ref().ok().map(RunOutcome::ended).as_ref());
        }
        out
    }

    async fn drive(
        &self,
        inbox: tokio::sync::mpsc::UnboundedReceiver<StopOrder>,
        (state, context, windowed_out): (LoopState, Context, u32),
        trace: Option<Arc<crate::telemetry::RunTrace>>,
    ) -> Result<RunOutcome, RunError> {
        let window = self.window();
        let keep_steps = (window.is_none() && self.reads_turn_count_only())
            .then_some(crate::machine::TURN_COUNT_KEEP_STEPS);
        let rules = self.rules(window, keep_steps);
        let mut machine = Machine::new(rules, state, context).windowed_out(windowed_out);
        let observer = self.observer.clone();
        let traced = trace.clone();
        let d = Drive {
            runner: self,
            events: EventBuffer::observed(Arc::new(move |e| {
                observer.event(e);
                if let Some(t) = &traced {
                    t.event(e);
                }
            }))
            .stamped(self.clock.clone()),
            escalation: Cell::new(None),
            committed: Cell::new(None),
            sent_ahead: Cell::new(None),
            trace,
        };
        let escalations = self.store.escalations_for_run(self.run_id())?;
        let mut pending: VecDeque<Effect> =
            handle(&mut machine, self, Event::Start { escalations }).into();
        let mut stops = Stops::new(inbox);
        // The calls of a step running at once (issue 14): each is started as its
        // effect comes, and its answer fed back as soon as it finishes.
        let mut running: Vec<Running<'_>> = Vec::new();
        loop {
            // A stop that came while effects were performed is the machine's to place.
            stops.poll_inbox();
            for request in stops.take_undelivered() {
                pending.extend(handle(&mut machine, self, Event::StopRequested(request)));
            }
            let Some(effect) = pending.pop_front() else {
                if running.is_empty() {
                    break;
                }
                let woke = stops
                    .race(next_finished(&mut running), time_left(&machine))
                    .await;
                self.woke(&mut machine, &mut stops, &mut running, &mut pending, woke);
                continue;
            };
            match effect {
                // The machine stops only once no call runs; should one still run, let
                // it finish (and be journaled) rather than abandon it mid-effect.
                Effect::Stop(stop) if running.is_empty() => {
                    // A run that ends (not one pausing for a person) tells `run_end`.
                    if matches!(
                        stop.status,
                        RunStatus::Completed | RunStatus::Failed | RunStatus::BudgetExhausted
                    ) {
                        let reason = match &stop.reason {
                            StopReason::Text(t) => Some(t.as_str()),
                            _ => None,
                        };
                        d.run_end(machine.state().steps, stop.status.as_str(), reason)
                            .await;
                    }
                    return Ok(d.outcome(&machine, stop));
                }
                Effect::Stop(stop) => {
                    pending.push_front(Effect::Stop(stop));
                    let woke = stops
                        .race(next_finished(&mut running), time_left(&machine))
                        .await;
                    self.woke(&mut machine, &mut stops, &mut running, &mut pending, woke);
                }
                Effect::RunCall(call) => {
                    let guard = machine.pending_state().clone();
                    let left = time_left(&machine);
                    running.push(Box::pin(d.run_call(guard, left, *call)));
                }
                Effect::AskModel(ask) => {
                    // The request borrows the machine: stops that come meanwhile are
                    // noted, and told to it once the request is over.
                    let left = time_left(&machine);
                    let woke = {
                        let mut request = std::pin::pin!(d.ask(&machine, &ask));
                        loop {
                            match stops.race(request.as_mut(), left).await {
                                Woke::Stop(order) => stops.note(order),
                                other => break other,
                            }
                        }
                    };
                    self.woke(&mut machine, &mut stops, &mut running, &mut pending, woke);
                }
                effect => {
                    if let Some(event) = d.perform(effect).await? {
                        pending.extend(handle(&mut machine, self, event));
                    }
                }
            }
        }
        // The machine always ends with a stop; an empty queue would be a bug in it.
        let reason = StopReason::Text("the loop ended without a stop".into());
        Ok(d.outcome(
            &machine,
            Stop {
                status: RunStatus::Failed,
                reason,
            },
        ))
    }

    /// Feeds the machine what a wait ended with. Giving up drops the work in flight —
    /// the model request, and every running call, whose process group goes with its
    /// future — and tells the machine it is gone.
    fn woke(
        &self,
        machine: &mut Machine<'_>,
        stops: &mut Stops,
        running: &mut Vec<Running<'_>>,
        pending: &mut VecDeque<Effect>,
        woke: Woke<Event>,
    ) {
        match woke {
            Woke::Done(event) => {
                for request in stops.take_undelivered() {
                    pending.extend(handle(machine, self, Event::StopRequested(request)));
                }
                pending.extend(handle(machine, self, event));
            }
            Woke::Stop(order) => stops.note(order),
            Woke::GiveUp(deadline) => {
                running.clear();
                if let Some(request) = deadline {
                    stops.note(StopOrder {
                        request,
                        grace: std::time::Duration::ZERO,
                    });
                }
                for request in stops.take_undelivered() {
                    pending.extend(handle(machine, self, Event::StopRequested(request)));
                }
                pending.extend(handle(machine, self, Event::Aborted));
            }
        }
    }

    /// What the machine may do in this run: the offered tools, prompts and budgets,
    /// all read from the run's snapshot.
    fn rules(&self, window: Option<Window>, keep_steps: Option<u32>) -> Rules<'_> {
        Rules {
            tools: &self.resolved.tools,
            prompts: &self.resolved.snapshot.prompts,
            tool_subset: self.resolved.snapshot.tool_subset.as_deref(),
            max_steps: self.max_steps,
            max_tokens: self.max_tokens,
            window,
            keep_steps,
            output_cap: OutputCap {
                first: self.resolved.snapshot.max_output_tokens,
                retry: self.resolved.snapshot.settings.max_output_tokens_retry,
            },
            spend: Spend {
                max_cost: self.resolved.snapshot.settings.max_cost,
                max_duration_ms: self.resolved.snapshot.settings.max_duration_ms,
                pricing: self.resolved.snapshot.settings.pricing(),
            },
            output: self.resolved.snapshot.output.as_ref(),
        }
    }
}

/// What is left of the run's time budget, as of the machine's clock.
fn time_left(machine: &Machine<'_>) -> Option<std::time::Duration> {
    machine.time_left_ms().map(std::time::Duration::from_millis)
}

/// Feeds the machine an event at the clock's time (the time budget reads it).
fn handle(machine: &mut Machine<'_>, runner: &Runner, event: Event) -> Vec<Effect> {
    machine.set_now(runner.clock.now_ms());
    machine.handle(event)
}

impl Runner {
    /// The loop state and the context the next request needs: the opening and the
    /// steps from [`context::first_step_needed`] on (after a compaction, the steps it
    /// summarised are not kept in memory).
    ///
    /// With the `keep_steps` window (a model that reads only the turn count) and no
    /// compaction, only the opening and the window's steps are read, from the two ends
    /// of the transcript's key: a resume costs the same at step 10 or 100,000 (issue
    /// 14). The third value is the assistant turns left out of the context.
    fn load(&self, keep_steps: Option<u32>) -> Result<(LoopState, Context, u32), StoreError> {
        let (_, state_json) = self.store.checkpoint(self.run_id())?;
        let state: LoopState =
            serde_json::from_str(&state_json).map_err(|e| StoreError::Corrupt {
                run: self.run_id().to_string(),
                message: format!("loop state: {e}"),
            })?;
        if let (Some(keep), None) = (keep_steps, &state.compaction) {
            let first = crate::machine::first_kept_step(state.steps, keep);
            let stored = self.store.opening_and_since(self.run_id(), first)?;
            let context =
                Context::from_stored(stored.into_iter().map(|m| (m.step, m.message)), &state);
            return Ok((state, context, first - 1));
        }
        let first = context::first_step_needed(&state);
        let mut needed = Vec::new();
        self.store.each_message(self.run_id(), |m| {
            if m.step == 0 || m.step >= first {
                needed.push((m.step, m.message));
            }
            Ok::<_, StoreError>(())
        })?;
        let context = Context::from_stored(needed, &state);
        Ok((state, context, 0))
    }

    /// Whether every model of the run is the scripted one, which picks its turn by the
    /// number of turns taken and reads nothing else of the transcript (docs/ARCHITECTURE.md §7).
    fn reads_turn_count_only(&self) -> bool {
        let models = &self.resolved.snapshot.models;
        !models.is_empty() && models.iter().all(|m| m.starts_with("script:"))
    }

    /// The model's context window (the first model's, from the settings or the known
    /// defaults) and the output cap each request reserves.
    fn window(&self) -> Option<Window> {
        let settings = &self.resolved.snapshot.settings;
        let model = self.resolved.snapshot.models.first()?;
        let name = model.split_once(':').map_or(model.as_str(), |(_, m)| m);
        settings.context_window_for(name).map(|tokens| Window {
            tokens,
            max_output_tokens: self.resolved.snapshot.max_output_tokens,
        })
    }

    fn state_json(&self, state: &LoopState) -> Result<String, RunError> {
        serde_json::to_string(state).map_err(|source| RunError::State {
            run: self.run_id().clone(),
            source,
        })
    }
}

impl Drive<'_> {
    /// Performs one effect; a load answers with the event it read.
    async fn perform(&self, effect: Effect) -> Result<Option<Event>, RunError> {
        let r = self.runner;
        let (store, lease) = (&r.store, &r.lease);
        match effect {
            Effect::LoadStep { step } => return Ok(Some(self.load_step(step).await?)),
            // Asked by `Runner::run_with`, which races the request against stops.
            Effect::AskModel(_) => {}
            // Started by `Runner::run`, which keeps it running alongside others.
            Effect::RunCall(_) => {}
            Effect::RecordModelTurn { step, response } => {
                self.events.emit(usage_event(r, &response));
                store
                    .record_model_turn(lease, step, &response, &self.events.take())
                    .await?;
                fault::point("after_model_stored");
            }
            Effect::RecordEvents { step } => {
                store
                    .record_events(lease, step, &self.events.take())
                    .await?
            }
            Effect::DeliverMessages { step, messages } => {
                store.deliver_messages(lease, step, &messages)?;
                fault::point("after_delivery");
            }
            Effect::MarkStarted { step, call_id } => {
                store.mark_started(lease, step, &call_id).await?
            }
            Effect::RecordOutcome { step, record } => {
                store
                    .record_outcome(lease, step, &record, &self.events.take())
                    .await?;
                fault::point("after_tool_outcome");
            }
            Effect::Trace(e) => self.events.emit(e),
            Effect::CallFinished(c) => r.observer.call_finished(&c),
            Effect::Notice(n) => self.notice(&n),
            Effect::Escalate {
                step,
                summary,
                detail,
                pause_as,
            } => self.escalate(step, &summary, &detail, pause_as).await?,
            Effect::Commit(c) => self.commit(&c).await?,
            Effect::SetStatus { status, reason } => {
                store.set_status(lease, status, Some(&reason))?
            }
            Effect::ApplyResolution {
                escalation,
                step,
                notes,
                state,
                stop,
            } => {
                let json = r.state_json(&state)?;
                if let Some(t) = &self.trace {
                    t.decision(escalation.0);
                }
                let status = stop.as_deref().map(|reason| (RunStatus::Failed, reason));
                store
                    .apply_resolution(lease, escalation.0, step, &notes, &json, status)
                    .await?;
            }
            // The loop in `Runner::run` ends on a stop before performing it.
            Effect::Stop(_) => {}
        }
        Ok(None)
    }

    /// A step begun by an earlier process may have journaled outcomes and people's
    /// decisions; a step whose model turn arrives now has neither, so its reads are
    /// skipped on the hot path — as is the look for its model turn when this drive
    /// committed the step before it.
    async fn load_step(&self, step: u32) -> Result<Event, RunError> {
        let r = self.runner;
        let fresh = self.committed.get().is_some_and(|c| c + 1 == step);
        let turn = if fresh {
            None
        } else {
            r.store.model_turn(r.run_id(), step)?
        };
        let (journal, escalations, sent) = match turn {
            Some(_) => {
                let mut journal = r.store.journal_for_step(r.run_id(), step)?;
                children::fill_spent(r, &mut journal);
                (
                    journal,
                    r.store.escalations_for_run(r.run_id())?,
                    Vec::new(),
                )
            }
            // A step not begun is where people's messages are delivered (issue 21):
            // whoever sent them, from whichever process, they are in the store.
            None => {
                let ahead = self.sent_ahead.take().filter(|_| fresh);
                let sent = match ahead {
                    Some(sent) => sent,
                    None => r.store.messages_to_deliver(r.run_id()).await?,
                };
                (Vec::new(), Vec::new(), sent)
            }
        };
        Ok(Event::StepLoaded {
            turn,
            journal,
            escalations,
            sent,
        })
    }

    async fn ask(&self, m: &Machine<'_>, ask: &Ask) -> Event {
        let r = self.runner;
        let gate = self.gate();
        let live = observe::LiveView(r.observer.as_ref());
        let context = m.messages().get(1..).unwrap_or(&[]);
        let with_note: Vec<model::Message>;
        let (messages, max_output_tokens, purpose) = match (&ask.summary, &ask.after_cut) {
            (Some(s), _) => (&s.messages[..], s.max_output_tokens, Purpose::Summary),
            (None, Some(cut)) => {
                with_note = context.iter().chain([&cut.note]).cloned().collect();
                (&with_note[..], cut.max_output_tokens, Purpose::Step)
            }
            (None, None) => (
                context,
                r.resolved.snapshot.max_output_tokens,
                Purpose::Step,
            ),
        };
        let req = ModelRequest {
            system: &ask.system,
            messages,
            note: &ask.note,
            cache_key: r.run_id().as_str(),
            tools: &ask.tools,
            max_output_tokens,
            live: Some(&live),
            purpose,
            turns_left_out: ask.turns_left_out,
            output: match purpose {
                Purpose::Step => r.resolved.snapshot.output.as_ref(),
                Purpose::Summary => None,
            },
            limits: gate.as_ref(),
        };
        let model = r
            .resolved
            .models
            .first()
            .map(|p| p.describe())
            .unwrap_or_default();
        // The retry after a cut is the same step, already announced.
        if ask.after_cut.is_none() {
            r.observer.step_started(&StepStart {
                step: ask.step,
                max_steps: r.max_steps,
                tokens: m.state().tokens_used(),
                max_tokens: r.max_tokens,
                model: &model,
                cost_usd: m.state().cost_usd,
                max_cost: r.resolved.snapshot.settings.max_cost,
            });
        }
        if purpose == Purpose::Step && ask.after_cut.is_none() {
            match self.before_model(ask.step).await {
                Ok(None) => {}
                Ok(Some(blocked)) => return Event::ModelFailed(blocked),
                Err(e) => {
                    return Event::ModelFailed(format!(
                        "a hook's decision could not be journaled: {e}"
                    ));
                }
            }
        }
        let Some(trace) = &self.trace else {
            return match self.call_models(&req).await {
                Ok(resp) => Event::ModelReplied(resp),
                Err(e) => Event::ModelFailed(e.to_string()),
            };
        };
        trace.chat_started(
            ask.step,
            r.resolved.snapshot.models.first().map_or("", |m| m),
        );
        match self.call_models(&req).await {
            Ok(resp) => {
                let cost_usd = r
                    .resolved
                    .snapshot
                    .settings
                    .pricing()
                    .cost(&resp.model, &resp.usage);
                trace.chat_finished(Ok(crate::telemetry::Answered {
                    response: &resp,
                    cost_usd,
                }));
                Event::ModelReplied(resp)
            }
            Err(e) => {
                let message = e.to_string();
                trace.chat_finished(Err(&message));
                Event::ModelFailed(message)
            }
        }
    }

    /// Tells the watcher, and the trace, what the loop decided.
    fn notice(&self, n: &Notice) {
        self.runner.observer.notice(n);
        if let Some(t) = &self.trace {
            t.notice(n);
        }
    }

    /// The run's way in under the rate limits of its configuration, if it has any.
    fn gate(&self) -> Option<crate::govern::Gate<'_>> {
        let r = self.runner;
        let limits = &r.resolved.tools.limits;
        (!limits.is_empty()).then(|| crate::govern::Gate {
            store: &r.store,
            lease: &r.lease,
            limits,
            priority: 0,
            clock: r.clock.as_ref(),
            events: &self.events,
        })
    }

    /// The model list under the run's retry policy and breaker, with a heartbeat.
    async fn call_models(
        &self,
        req: &ModelRequest<'_>,
    ) -> Result<model::ModelResponse, model::ModelError> {
        let r = self.runner;
        let policy = r.resolved.snapshot.settings.retry_policy();
        let call = model::retry::complete_guarded(
            &r.resolved.models,
            req,
            &policy,
            &r.resolved.breaker,
            r.clock.as_ref(),
            &self.events,
        );
        observe::with_heartbeat(r.observer.as_ref(), call).await
    }

    /// Runs a call through the recovery chain, gated by the step's pending state as of
    /// the call's start (`guard`).
    async fn run_call(
        &self,
        guard: LoopState,
        time_left: Option<std::time::Duration>,
        call: RunCall,
    ) -> Event {
        let Some(t) = &self.trace else {
            return self.call(guard, time_left, call).await;
        };
        t.tool_started(&call.call_id, &call.tool, &call.args);
        if let Some(decided) = &call.decision {
            t.tool_approved(&call.call_id, decided);
        }
        let call_id = call.call_id.clone();
        let event = self.call(guard, time_left, call).await;
        if let Event::CallRan { execution, .. } = &event {
            let outcome = match execution {
                Execution::Done(outcome) => Some(outcome),
                _ => None,
            };
            t.tool_finished(&call_id, outcome);
        }
        event
    }

    async fn call(
        &self,
        guard: LoopState,
        time_left: Option<std::time::Duration>,
        mut call: RunCall,
    ) -> Event {
        let r = self.runner;
        fault::point("after_tool_intent");
        r.observer.call_started(&call.tool, call.max_attempts);
        let limits = self.gate();
        let key = r
            .resolved
            .snapshot
            .call_key(r.run_id().as_str(), call.step, &call.call_id);
        let modified = matches!(
            call.decision.as_ref().and_then(|d| d.resolution.as_ref()),
            Some(crate::records::Resolution::Modify { .. })
        );
        let gate = hooks::CallHooks {
            drive: self,
            step: call.step,
            call_id: &call.call_id,
            tool: &call.tool,
            decision: call.decision.as_ref(),
            modified,
        };
        let ctx = CallContext {
            run_id: r.run_id().as_str(),
            call_id: &call.call_id,
            key: &key,
            clock: r.clock.as_ref(),
            events: &self.events,
            mcp: r.resolved.mcp.as_deref(),
            hooks: Some(&gate),
            limits: limits.as_ref(),
        };
        // The `before_tool` hooks decide first (issue 26) — on the arguments a person
        // gave, too; a fallback hop's are asked by the chain (docs/security.md, Hooks).
        if call.approved_hop.is_none() {
            let prompts = &r.resolved.snapshot.prompts;
            let execution = match gate.ask(&call.tool, call.args.clone(), &ctx).await {
                HookAnswer::Run(new) => {
                    call.args = new;
                    None
                }
                HookAnswer::Refused(err) => {
                    Some(Execution::Done(recovery::failed(&err, 0, prompts)))
                }
                HookAnswer::Paused { args, asked_by } => Some(Execution::Paused {
                    tool: call.tool.clone(),
                    args,
                    asked_by: Some(asked_by),
                }),
            };
            if let Some(execution) = execution {
                return Event::CallRan {
                    call_id: call.call_id.clone(),
                    execution,
                };
            }
        }
        let (tools, prompts) = (&r.resolved.tools, &r.resolved.snapshot.prompts);
        // A sub-agent's call is a child run (issue 26), checked against its schema
        // here as the chain checks a tool's.
        if let Some(crate::config::ToolKind::Agent(agent)) =
            tools.tools.get(&call.tool).map(|d| &d.kind)
            && call.approved_hop.is_none()
        {
            let execution = match tools
                .tools
                .get(&call.tool)
                .map(|def| recovery::check_args(def, &call.args))
            {
                Some(Err(err)) => Execution::Done(recovery::failed(&err, 0, prompts)),
                _ => {
                    let child = children::ChildCall {
                        name: &call.tool,
                        agent,
                        call_id: &call.call_id,
                        key: &key,
                        args: &call.args,
                        parent: &guard,
                        time_left,
                    };
                    children::run(r, &child, &self.events).await
                }
            };
            let execution = self.after_tool(&call, &ctx, execution).await;
            return Event::CallRan {
                call_id: call.call_id,
                execution,
            };
        }
        let execution = match &call.approved_hop {
            Some((hop, args)) => Execution::Done(
                recovery::execute_approved_hop(tools, prompts, hop, args, &ctx).await,
            ),
            None => {
                let guards = RunGuards {
                    state: &guard,
                    policy: &tools.policy,
                    decision: call.decision.as_ref(),
                };
                let chain = Chain::new(
                    tools,
                    prompts,
                    &guards,
                    &call.call_id,
                    &call.tool,
                    call.args.clone(),
                );
                recovery::drive(chain, &ctx).await
            }
        };
        let execution = self.after_tool(&call, &ctx, execution).await;
        fault::point("after_tool_effect");
        Event::CallRan {
            call_id: call.call_id,
            execution,
        }
    }

    async fn escalate(
        &self,
        step: u32,
        summary: &str,
        detail: &EscalationDetail,
        pause_as: Option<RunStatus>,
    ) -> Result<(), RunError> {
        let r = self.runner;
        let new = NewEscalation {
            step,
            summary,
            detail,
        };
        // A pause stores the trace so far with it; a report for a tool's owner does not.
        let events = if pause_as.is_some() {
            self.events.take()
        } else {
            Vec::new()
        };
        let id = r
            .store
            .create_escalation(&r.lease, &new, pause_as, &events)
            .await?;
        self.escalation.set(Some(id));
        self.notice(&match pause_as {
            Some(_) => Notice::Escalated {
                id,
                kind: detail.kind(),
                summary: summary.to_string(),
            },
            None => Notice::ToolBugQueued {
                id,
                kind: detail.kind(),
            },
        });
        Ok(())
    }

    async fn commit(&self, c: &Commit) -> Result<(), RunError> {
        let r = self.runner;
        let state = r.state_json(&c.state)?;
        let escalation = c
            .escalation
            .as_ref()
            .map(|(summary, detail)| NewEscalation {
                step: c.step,
                summary,
                detail,
            });
        let events = self.events.take();
        let commit = StepCommit {
            step: c.step,
            messages: &c.messages,
            state: &state,
            input_tokens: c.state.input_tokens,
            output_tokens: c.state.output_tokens,
            cost_usd: c.state.cost_usd,
            status: c.status,
            answer: c.answer.as_deref(),
            error: c.error.as_deref(),
            outcome: c.outcome.as_ref(),
            events: &events,
            escalation: escalation.as_ref(),
        };
        let committing = r.store.commit_step(&r.lease, &commit);
        // A run that goes on reads people's messages for its next step along with the
        // commit (one wait for the store, not two; the commit does not touch them).
        let id = if c.status == RunStatus::Running {
            let reading = r.store.messages_to_deliver(r.run_id());
            let (id, sent) = futures_util::future::join(committing, reading).await;
            let id = id?;
            self.sent_ahead.set(Some(sent?));
            id
        } else {
            committing.await?
        };
        self.committed.set(Some(c.step));
        fault::point("after_commit");
        if c.state
            .compaction
            .as_ref()
            .is_some_and(|k| k.step == c.step)
        {
            // Not in `fault::POINTS` (reached only by runs that compact).
            fault::point("after_compaction");
        }
        if let (Some(id), Some((summary, detail))) = (id, &c.escalation) {
            self.escalation.set(Some(id));
            self.notice(&Notice::Escalated {
                id,
                kind: detail.kind(),
                summary: summary.clone(),
            });
        }
        Ok(())
    }

    fn outcome(&self, m: &Machine<'_>, stop: Stop) -> RunOutcome {
        let (reason, escalation_id) = match stop.reason {
            StopReason::None => (None, None),
            StopReason::Text(t) => (Some(t), None),
            StopReason::WaitingForEscalation => (
                self.escalation
                    .get()
                    .map(|id| format!("waiting for escalation {id}")),
                self.escalation.get(),
            ),
            StopReason::Escalated(summary) => (Some(summary), self.escalation.get()),
        };
        let state = m.state();
        RunOutcome {
            run_id: self.runner.run_id().clone(),
            status: stop.status,
            answer: m.answer(),
            steps: state.steps,
            input_tokens: state.input_tokens,
            output_tokens: state.output_tokens,
            tokens_estimated: state.usage_estimated,
            escalation_id,
            reason,
            cost_usd: state.cost_usd,
            structured: self.runner.resolved.snapshot.output.is_some(),
            stale_via: crate::recovery::fallback::stale_sources(m.messages()),
        }
    }
}

/// A step's usage and cost for its trace (issue 23: `runs show` gives the cache hit
/// ratio per step from these), priced as the machine prices it.
fn usage_event(r: &Runner, response: &model::ModelResponse) -> crate::trace::TraceEvent {
    let u = &response.usage;
    let pricing = r.resolved.snapshot.settings.pricing();
    crate::trace::TraceEvent::ModelUsage {
        model: response.model.clone(),
        input: u.input,
        cached_input: u.cached,
        cache_write: u.cache_write,
        output: u.output,
        cost_usd: pricing.cost(&response.model, u),
        estimated: u.estimated,
    }
}

//! The loop as a pure, synchronous state machine (docs/ARCHITECTURE.md §6): events in
//! ([`Event`]: started, step loaded, model replied or failed, call ran), effects out
//! ([`Effect`]: load a step, ask the model, run a call, journal, commit, escalate,
//! stop). No IO, no clock, no async: `runner` performs the effects.
//!
//! One step, as the machine walks it:
//! 1. guard: steps and tokens within budget, else stop (`budget_exhausted`);
//! 2. load the step: a model response stored by an earlier process is reused (with its
//!    calls' journal and people's decisions — resume is replay), else ask the model;
//! 3. a response cut at the token limit fails the run honestly; no tool calls → answer;
//! 4. each call in order ([`calls`]): a journaled outcome is reused; a tool not offered
//!    is `unknown_tool`; `ask_user` pauses for a person; a call interrupted by a crash
//!    is handled by its `on_unknown`; else the recovery chain runs it
//!    ([`crate::recovery::chain`] owns that order);
//! 5. after each call, the policies ([`after`]): breaker, withdrawal, stuck detection,
//!    tool-bug reports;
//! 6. commit the step (with a degraded turn when no tool is left, and the escalation a
//!    policy raised).
//!
//! Calls carry their id in [`Effect::RunCall`] and [`Event::CallRan`]: the calls of a
//! step that may run together are handed out at once and answered in any order
//! ([`batch`] says which, and puts the results back in the model's order); a guard
//! or a compaction before asking the model belongs in [`Machine::begin_step`].

pub mod after;
mod approval;
mod batch;
mod calls;
mod compact;
pub mod context;
pub mod cut;
pub mod effects;
pub mod escalate;
pub mod guards;
mod note;
mod parrot;
pub mod policy;
mod reply;
#[cfg(test)]
mod sent_tests;
#[cfg(test)]
mod spend_tests;
pub mod state;
pub mod stop;
#[cfg(test)]
mod stop_tests;
mod structured;
#[cfg(test)]
mod tests;

pub use batch::MAX_PARALLEL;
pub use calls::{ASK_USER, ask_user_spec};
pub use effects::{Effect, Event, Stop, StopReason};
pub use state::Spend;
pub use stop::{Phase, StopCause, StopRequest};

use crate::config::{ToolDef, ToolsConfig};
use crate::model::{Message, ToolSpec};
use crate::prompts::Prompts;
use crate::records::{CallRecord, EscalationRow, JournalEntry};
use context::{Context, Window};
use state::{LoopState, check_budget};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What the machine decides by: the run's validated config and budgets.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    pub tools: &'a ToolsConfig,
    pub prompts: &'a Prompts,
    /// The task's tools; `None` = all in tools.toml.
    pub tool_subset: Option<&'a [String]>,
    pub max_steps: u32,
    pub max_tokens: u64,
    /// The model's context window; `None`: unknown, never compacted (issue 15).
    pub window: Option<Window>,
    /// The model reads only how many turns were taken (the scripted model), not the
    /// transcript: the context keeps the opening and this many last steps, and the
    /// older ones are counted as turns left out (issue 14: memory and resume flat at
    /// any run length). `None`: the context is what [`context`] says.
    pub keep_steps: Option<u32>,
    /// The output cap of a request, and of the one retry after a cut-off response.
    pub output_cap: cut::OutputCap,
    /// Budgets in money (USD) and time (ms the run is driven), and how calls are
    /// priced (issue 15).
    pub spend: Spend,
    /// What the final answer must be (issue 26); `None`: free text.
    pub output: Option<&'a crate::model::output::OutputSpec>,
}

#[cfg(test)]
impl<'a> Rules<'a> {
    /// Rules that limit nothing a test did not ask for: all tools, 100 steps,
    /// 1,000,000 tokens, no window, the default output cap and spend, free text.
    pub(crate) fn for_tests(tools: &'a ToolsConfig, prompts: &'a Prompts) -> Self {
        Rules {
            tools,
            prompts,
            tool_subset: None,
            max_steps: 100,
            max_tokens: 1_000_000,
            window: None,
            keep_steps: None,
            output_cap: Default::default(),
            spend: Default::default(),
            output: None,
        }
    }
}

/// [`Rules::keep_steps`] for the scripted model: enough recent steps for a handover
/// summary to name what was checked lately, a fixed amount of memory however long the
/// run.
pub const TURN_COUNT_KEEP_STEPS: u32 = 16;

pub struct Machine<'a> {
    rules: Rules<'a>,
    /// As of the last commit.
    state: LoopState,
    /// What the next request needs ([`context`]): the whole transcript, or after a
    /// compaction the opening, the summary and the turns since.
    context: Context,
    /// A compaction asked for and not yet committed ([`compact`]).
    compacting: Option<compact::Pending>,
    /// Assistant turns the [`Rules::keep_steps`] window left out of the context.
    windowed_out: u32,
    /// The usage of the step's first response, dropped because it was cut off
    /// ([`cut`]); added to the second's.
    cut: Option<crate::model::Usage>,
    /// The step in progress, between its model response and its commit.
    step: Option<Step>,
    /// The clock, as the driver last set it ([`Machine::set_now`]), and when this
    /// process began driving the run (with the time driven before it).
    now_ms: i64,
    began: Option<(i64, u64)>,
    /// The tools offered last (a `Mutex`, not a `RefCell`: the machine is shared
    /// with the driver's futures, which may need to be `Send`).
    offered: Mutex<Option<OfferedTools>>,
    /// A structured answer, as the JSON text it was checked as (issue 26).
    checked_answer: Option<String>,
    /// Where the machine stands ([`stop`]).
    phase: Phase,
    /// A stop asked for while work was in flight, honoured at the next boundary.
    stopping: Option<StopRequest>,
    /// The budget note sent with the step being asked ([`note`]).
    asked_note: Option<note::StepNote>,
    /// What the last note in the context told; `None`: no note in it yet.
    told: Option<note::Marks>,
}

/// [`Machine::offered_tools`]' last answer and what it was built from.
struct OfferedTools {
    degraded: bool,
    disabled: std::collections::BTreeSet<String>,
    specs: Arc<[ToolSpec]>,
}

/// A step between its model response and its commit.
struct Step {
    number: u32,
    /// The loop state the step will commit.
    next: LoopState,
    calls: Vec<crate::model::ToolCall>,
    /// The call in progress.
    at: usize,
    /// Names of the tools offered to the model in this step; only these may run.
    offered: Vec<String>,
    new_messages: Vec<Message>,
    /// System notes to the model (a withdrawn tool, a stuck nudge).
    notes: Vec<Message>,
    /// A pausing escalation a policy raised: problem and facts.
    escalation: Option<(String, crate::records::Facts)>,
    /// Stored by an earlier process, by call id.
    journal: HashMap<String, JournalEntry>,
    decisions: HashMap<String, EscalationRow>,
    /// The last fresh outcome, journaled with the commit.
    last_fresh: Option<CallRecord>,
    /// Where each call stands ([`batch`]), by index in `calls`.
    slots: Vec<calls::Slot>,
    /// Calls handed to the driver and not yet answered.
    running: usize,
    /// The first call [`Machine::fill`] has not looked at yet.
    scan: usize,
}

impl<'a> Machine<'a> {
    /// A machine at a checkpoint: its loop state and context (system prompt first;
    /// [`Context::from_stored`] builds it from the store).
    pub fn new(rules: Rules<'a>, state: LoopState, context: Context) -> Machine<'a> {
        Machine {
            rules,
            state,
            context,
            compacting: None,
            windowed_out: 0,
            cut: None,
            step: None,
            now_ms: 0,
            began: None,
            offered: Mutex::new(None),
            checked_answer: None,
            phase: Phase::Idle,
            stopping: None,
            asked_note: None,
            told: None,
        }
    }

    /// The time, for the time budget: the driver sets it before each event (tests set
    /// it by hand — no clock is read here).
    pub fn set_now(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }

    /// Time the run has been driven, across processes: what earlier ones committed
    /// plus this process's time so far.
    pub fn active_ms(&self) -> u64 {
        match self.began {
            Some((at, before)) => before + u64::try_from(self.now_ms - at).unwrap_or(0),
            None => self.state.active_ms,
        }
    }

    /// A machine whose context was loaded through the [`Rules::keep_steps`] window:
    /// `turns` assistant turns of the run are not in it (see [`first_kept_step`]).
    pub fn windowed_out(mut self, turns: u32) -> Machine<'a> {
        self.windowed_out = turns;
        self
    }

    /// Drops from the context the steps the [`Rules::keep_steps`] window no longer
    /// holds, counting the model's turns among them.
    fn window_context(&mut self) {
        let Some(keep) = self.rules.keep_steps else {
            return;
        };
        if self.state.compaction.is_some() {
            return;
        }
        let first = first_kept_step(self.state.steps, keep);
        self.windowed_out += self.context.drop_steps_before(first);
    }

    /// Feeds the machine an event; returns what to do ([`stop`] dispatches by phase).
    pub fn handle(&mut self, event: Event) -> Vec<Effect> {
        self.dispatch(event)
    }

    /// Where the machine stands.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// An event of a running loop (stops are handled in [`stop`]).
    fn on_event(&mut self, event: Event) -> Vec<Effect> {
        match event {
            Event::Start { escalations } => {
                self.began = Some((self.now_ms, self.state.active_ms));
                let mut out = self.apply_decisions(&escalations);
                if !matches!(out.last(), Some(Effect::Stop(_))) {
                    out.extend(self.begin_step());
                }
                out
            }
            Event::StepLoaded {
                turn: Some(response),
                ..
            } if self.compacting.is_some() => self.finish_compaction(response),
            Event::StepLoaded { turn: None, .. } if self.compacting.is_some() => {
                vec![Effect::AskModel(self.ask_summary())]
            }
            Event::StepLoaded {
                turn: Some(response),
                journal,
                escalations,
                ..
            } => self.reply(response, journal, &escalations),
            Event::StepLoaded {
                turn: None, sent, ..
            } => {
                let mut out = self.deliver(&sent);
                out.push(Effect::AskModel(self.ask()));
                out
            }
            Event::ModelReplied(response) if self.compacting.is_some() => {
                let mut out = vec![Effect::RecordModelTurn {
                    step: self.state.steps + 1,
                    response: response.clone(),
                }];
                out.extend(self.finish_compaction(response));
                out
            }
            Event::ModelReplied(response)
                if response.stop == crate::model::StopReason::MaxTokens && self.cut.is_none() =>
            {
                self.ask_after_cut(response)
            }
            Event::ModelReplied(mut response) => {
                if let Some(dropped) = self.cut.take() {
                    response.usage.add(dropped);
                }
                let mut out = vec![Effect::RecordModelTurn {
                    step: self.state.steps + 1,
                    response: response.clone(),
                }];
                out.extend(self.reply(response, Vec::new(), &[]));
                out
            }
            Event::ModelFailed(error) => {
                self.cut = None;
                self.fail_model(&error)
            }
            Event::CallRan { call_id, execution } => self.call_ran(&call_id, execution),
            // Dispatched before they get here.
            Event::StopRequested(_) | Event::Aborted => Vec::new(),
        }
    }

    /// The loop state as of the last commit.
    pub fn state(&self) -> &LoopState {
        &self.state
    }

    /// The loop state the step in progress will commit (the gates read it).
    pub fn pending_state(&self) -> &LoopState {
        self.step.as_ref().map_or(&self.state, |s| &s.next)
    }

    /// The context the next request needs, as of the last commit (system prompt
    /// first): the transcript, or after a compaction its compacted form.
    pub fn messages(&self) -> &[Message] {
        self.context.messages()
    }

    pub fn rules(&self) -> Rules<'a> {
        self.rules
    }

    /// The guard, then the step's load.
    fn begin_step(&mut self) -> Vec<Effect> {
        if let Some(stop) = self.stop_at_boundary() {
            return stop;
        }
        let r = self.rules;
        let spent = check_budget(&self.state, r.max_steps, r.max_tokens)
            .or_else(|| state::check_spend(&self.state, self.active_ms(), &r.spend));
        if let Some(stop) = spent {
            let reason = stop.message();
            return vec![
                Effect::SetStatus {
                    status: crate::records::RunStatus::BudgetExhausted,
                    reason: reason.clone(),
                },
                Effect::Notice(effects::Notice::Stopped {
                    reason: reason.clone(),
                }),
                Effect::Stop(Stop {
                    status: crate::records::RunStatus::BudgetExhausted,
                    reason: StopReason::Text(reason),
                }),
            ];
        }
        self.compact_if_needed();
        vec![Effect::LoadStep {
            step: self.state.steps + 1,
        }]
    }

    /// People's messages, delivered between the last committed step and the next
    /// request: after that step's tool results, so every call keeps its result next
    /// to it (issue 21). A step already begun delivers nothing (its model turn was
    /// asked without them); they wait for the next boundary.
    fn deliver(&mut self, sent: &[crate::records::SentMessage]) -> Vec<Effect> {
        if sent.is_empty() {
            return Vec::new();
        }
        let step = self.state.steps;
        let messages: Vec<(i64, Message)> = sent
            .iter()
            .map(|s| (s.id, crate::records::sent_note(s)))
            .collect();
        for (_, m) in &messages {
            self.context.push(step, m.clone());
        }
        let mut out = vec![Effect::DeliverMessages { step, messages }];
        out.extend(sent.iter().map(|s| {
            Effect::Notice(effects::Notice::MessageDelivered {
                step,
                by: s.by.clone(),
            })
        }));
        out
    }

    fn ask(&mut self) -> effects::Ask {
        // The output instruction is part of the system prompt: the same text on every
        // request (docs/ARCHITECTURE.md §7).
        let output = self
            .rules
            .output
            .map(|o| format!("\n\n{}", o.instruction()))
            .unwrap_or_default();
        let system = format!(
            "{}{output}",
            self.messages()
                .first()
                .map(Message::joined_text)
                .unwrap_or_default()
        );
        self.asked_note = self.step_note();
        effects::Ask {
            step: self.state.steps + 1,
            system,
            note: self
                .asked_note
                .as_ref()
                .map(|n| n.text.clone())
                .unwrap_or_default(),
            tools: self.offered_tools(&self.state),
            summary: None,
            turns_left_out: self.turns_left_out(),
            after_cut: None,
        }
    }

    /// The task's tools from tools.toml (its subset, or all).
    fn configured_tools(&self) -> Vec<&'a ToolDef> {
        let subset = self.rules.tool_subset;
        self.rules
            .tools
            .tools
            .values()
            .filter(|t| subset.is_none_or(|s| s.contains(&t.name)))
            .collect()
    }

    /// Tools offered to the model this step: the configured ones minus withdrawn ones,
    /// plus `ask_user` — none at all once the run is degraded.
    ///
    /// Built again only when what decides them changes (a tool withdrawn, the run
    /// degraded): issue 14, the schemas and `ask_user`'s spec were cloned every step.
    fn offered_tools(&self, state: &LoopState) -> Arc<[ToolSpec]> {
        let mut memo = self.offered.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = memo.as_ref()
            && m.degraded == state.degraded
            && m.disabled == state.disabled
        {
            return m.specs.clone();
        }
        let specs: Arc<[ToolSpec]> = self.build_offered_tools(state).into();
        *memo = Some(OfferedTools {
            degraded: state.degraded,
            disabled: state.disabled.clone(),
            specs: specs.clone(),
        });
        specs
    }

    fn build_offered_tools(&self, state: &LoopState) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self
            .offered_defs(state)
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.input_schema.clone(),
            })
            .collect();
        if !specs.is_empty() {
            specs.push(ask_user_spec());
        }
        specs
    }

    /// The configured tools [`Machine::offered_tools`] offers (without `ask_user`).
    fn offered_defs<'s>(&'s self, state: &'s LoopState) -> impl Iterator<Item = &'a ToolDef> + 's {
        let subset = self.rules.tool_subset;
        self.rules
            .tools
            .tools
            .values()
            .filter(move |t| !state.degraded && subset.is_none_or(|s| s.contains(&t.name)))
            .filter(move |t| !state.disabled.contains(&t.name))
    }

    /// The names of the tools [`Machine::offered_tools`] offers, without building
    /// their specs (a schema clone each) just to read the names.
    fn offered_names(&self, state: &LoopState) -> Vec<String> {
        let mut names: Vec<String> = self.offered_defs(state).map(|t| t.name.clone()).collect();
        if !names.is_empty() {
            names.push(calls::ASK_USER.to_string());
        }
        names
    }

    /// A call whose effect must not happen twice: marked started before it runs, and
    /// its outcome journaled as soon as it is known.
    fn must_not_repeat(&self, tool: &str) -> bool {
        let def = self.rules.tools.tools.get(tool);
        def.is_some_and(|d| !d.idempotent)
    }

    /// The last thing the model said, the run's answer so far.
    pub fn answer(&self) -> Option<String> {
        if let Some(checked) = &self.checked_answer {
            return Some(checked.clone());
        }
        self.messages()
            .iter()
            .rev()
            .find(|m| m.role == crate::model::Role::Assistant && !m.joined_text().is_empty())
            .map(Message::joined_text)
    }
}

/// The first step (after the opening, step 0) the [`Rules::keep_steps`] window keeps
/// after `steps` committed steps. A loader reads the opening and the steps from here
/// on; every committed step holds exactly one assistant turn (a step commits the
/// model's response; notes between steps are not turns), so the turns left out are
/// this minus one.
pub fn first_kept_step(steps: u32, keep: u32) -> u32 {
    (steps + 1).saturating_sub(keep).max(1)
}

#[cfg(test)]
impl Machine<'_> {
    /// Feeds a step with nothing stored for it (no model turn, journal or decision)
    /// and returns the model request that follows; panics on anything else.
    pub(super) fn load_empty_step(&mut self) -> effects::Ask {
        let out = self.handle(Event::StepLoaded {
            turn: None,
            journal: Vec::new(),
            escalations: Vec::new(),
            sent: Vec::new(),
        });
        match <[Effect; 1]>::try_from(out) {
            Ok([Effect::AskModel(ask)]) => ask,
            other => panic!("{other:?}"),
        }
    }
}

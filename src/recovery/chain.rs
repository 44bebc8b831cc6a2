//! The recovery chain: the one owner of the order every tool call goes through,
//! including each fallback hop. Pure: events in, effects out, no IO, no clock.
//!
//! For the tool the model asked for, in this order:
//! 1. **known tool** — no such tool → `unknown_tool` (no call);
//! 2. **schema** — arguments that do not fit → `schema_violation` (no call);
//! 3. **approval gate** — needs a person's approval and none recorded → pause; denied →
//!    `approval_denied` (no call);
//! 4. **breaker** — the circuit for (tool, args digest) is open, or the tool was
//!    withdrawn → a guard result (no call);
//! 5. **attempts with retry** — per [`retry::after_attempt`]: transient failures are
//!    retried with backoff; a non-idempotent tool only after a failure that proves it
//!    did not act, else `outcome_unknown`;
//! 6. **fallback** — after a failure another tool could fix, each declared hop in
//!    order, each through steps 1–5 with its mapped arguments ([`fallback`] has the
//!    rules), its `before_tool` hooks asked between steps 2 and 3 (gating hooks run on
//!    every way a tool is reached: the loop asks them for the tool the model named, the
//!    chain for each hop, an approved hop included);
//! 7. **wrap** — a hop's success is given to the model as
//!    `{"result": …, "via": HOP, "stale": …}`.
//!
//! The driver ([`super::drive`]) performs the effects: it runs an attempt through the
//! one executor ([`crate::tools::attempt`]) whatever the tool's kind, draws the jittered
//! delay of a wait, and sleeps.

use super::fallback::{self, Tried};
use super::retry::{self, AfterAttempt, Backoff};
use super::{CallOutcome, Gate, check_args, failed, succeeded};
use crate::config::types::{ToolDef, ToolsConfig};
use crate::prompts::Prompts;
pub use crate::tools::HookAnswer;
use crate::tools::outcome::{AttemptResult, ErrorKind, ToolError};
use crate::trace::{NoteKind, TraceEvent};
use serde_json::{Value, json};
use std::time::Duration;

/// The decisions the loop makes before a tool of the chain runs (steps 3 and 4).
pub trait Guards {
    /// Step 3: approval (run, refused, or wait for a person).
    fn approval(&self, def: &ToolDef, args: &Value) -> Gate;
    /// Step 4: the breaker and withdrawn tools; `Some` refuses the call.
    fn breaker(&self, def: &ToolDef, args: &Value) -> Option<ToolError>;
}

/// What happened, fed to [`Chain::handle`].
#[derive(Debug)]
pub enum ChainEvent {
    Start,
    AttemptFinished {
        result: AttemptResult,
        elapsed: Duration,
    },
    /// The driver drew the jittered delay asked for by [`ChainEffect::ChooseDelay`].
    DelayChosen(Duration),
    Slept,
    /// The `before_tool` hooks answered for the hop asked by [`ChainEffect::Hooks`].
    HooksDecided(HookAnswer),
}

/// What the driver must do next.
#[derive(Debug, PartialEq)]
pub enum ChainEffect<'a> {
    Trace(TraceEvent),
    /// Run attempt number `attempt` of `def` with `args`.
    Attempt {
        def: &'a ToolDef,
        args: Value,
        attempt: u32,
    },
    /// Draw the delay of this backoff (jitter), then report it.
    ChooseDelay(Backoff),
    Sleep(Duration),
    /// Ask the `before_tool` hooks about running `def` with `args` (a fallback hop),
    /// then report [`ChainEvent::HooksDecided`].
    Hooks {
        def: &'a ToolDef,
        args: Value,
    },
    /// The call's result.
    Done(CallOutcome),
    /// The approval gate (or a hook, `asked_by`) paused before `tool` ran with `args`.
    Paused {
        tool: String,
        args: Value,
        asked_by: Option<String>,
    },
}

/// Where the chain begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The tool the model asked for, then its fallbacks.
    Call,
    /// A fallback hop a person approved after the chain paused before it: the tools
    /// before it already failed in an earlier process and are not run again.
    ApprovedHop,
}

/// The tool being attempted.
struct Running<'a> {
    def: &'a ToolDef,
    args: Value,
    made: u32,
    /// The wait being prepared: whether it came from the server's Retry-After.
    server_delay: bool,
}

pub struct Chain<'a> {
    cfg: &'a ToolsConfig,
    prompts: &'a Prompts,
    guards: &'a dyn Guards,
    call_id: String,
    /// The tool the chain starts with, and its arguments.
    tool: String,
    args: Value,
    mode: Mode,
    /// `None` while on the first tool; the index of the fallback hop after.
    hop: Option<usize>,
    running: Option<Running<'a>>,
    /// The hop whose hooks are being asked.
    gating: Option<&'a ToolDef>,
    tried: Vec<Tried>,
}

impl<'a> Chain<'a> {
    /// The chain for a call of `tool` with `args`.
    pub fn new(
        cfg: &'a ToolsConfig,
        prompts: &'a Prompts,
        guards: &'a dyn Guards,
        call_id: &str,
        tool: &str,
        args: Value,
    ) -> Chain<'a> {
        Chain {
            cfg,
            prompts,
            guards,
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            args,
            mode: Mode::Call,
            hop: None,
            running: None,
            gating: None,
            tried: Vec::new(),
        }
    }

    /// The chain for a fallback hop a person approved: steps 1, 2, 5 and 7 of `hop`.
    pub fn approved_hop(
        cfg: &'a ToolsConfig,
        prompts: &'a Prompts,
        guards: &'a dyn Guards,
        call_id: &str,
        hop: &str,
        args: Value,
    ) -> Chain<'a> {
        Chain {
            mode: Mode::ApprovedHop,
            ..Chain::new(cfg, prompts, guards, call_id, hop, args)
        }
    }

    pub fn handle(&mut self, event: ChainEvent) -> Vec<ChainEffect<'a>> {
        match event {
            ChainEvent::Start => self.start(),
            ChainEvent::AttemptFinished { result, elapsed } => {
                self.attempt_finished(result, elapsed)
            }
            ChainEvent::DelayChosen(delay) => self.delay_chosen(delay),
            ChainEvent::Slept => self.next_attempt(),
            ChainEvent::HooksDecided(answer) => self.hooks_decided(answer),
        }
    }

    fn start(&mut self) -> Vec<ChainEffect<'a>> {
        let Some(def) = self.cfg.tools.get(&self.tool) else {
            let err = unknown(&self.tool);
            return vec![self.done(failed(&err, 0, self.prompts))];
        };
        if let Err(err) = check_args(def, &self.args) {
            return vec![self.done(failed(&err, 0, self.prompts))];
        }
        if self.mode == Mode::ApprovedHop {
            // A person approved the hop, not what its hooks say about it.
            self.gating = Some(def);
            return vec![ChainEffect::Hooks {
                def,
                args: self.args.clone(),
            }];
        }
        match self.guard(def, &self.args) {
            Guarded::Run => {}
            // A guard is a decision by policy or a person; no fallback works around it.
            Guarded::Refused(err) => return vec![self.done(failed(&err, 0, self.prompts))],
            Guarded::Paused => return vec![self.paused(def, self.args.clone(), None)],
        }
        self.begin(def, self.args.clone())
    }

    /// The hop's hooks answered: on to its guards (an approved hop has passed them).
    fn hooks_decided(&mut self, answer: HookAnswer) -> Vec<ChainEffect<'a>> {
        let Some(def) = self.gating.take() else {
            return Vec::new();
        };
        let approved = self.mode == Mode::ApprovedHop;
        match answer {
            HookAnswer::Run(args) if approved => self.begin(def, args),
            HookAnswer::Run(args) => match self.guard(def, &args) {
                Guarded::Run => self.begin(def, args),
                Guarded::Refused(err) => self.skipped(&def.name, &err),
                Guarded::Paused => vec![self.paused(def, args, None)],
            },
            HookAnswer::Refused(err) if approved => {
                vec![self.done(failed(&err, 0, self.prompts))]
            }
            HookAnswer::Refused(err) => self.skipped(&def.name, &err),
            HookAnswer::Paused { args, asked_by } => vec![self.paused(def, args, Some(asked_by))],
        }
    }

    /// Steps 3 and 4 for one tool.
    fn guard(&self, def: &ToolDef, args: &Value) -> Guarded {
        match self.guards.approval(def, args) {
            Gate::Run => {}
            Gate::Block(err) => return Guarded::Refused(err),
            Gate::Pause => return Guarded::Paused,
        }
        match self.guards.breaker(def, args) {
            Some(err) => Guarded::Refused(err),
            None => Guarded::Run,
        }
    }

    /// Step 5 begins for `def`.
    fn begin(&mut self, def: &'a ToolDef, args: Value) -> Vec<ChainEffect<'a>> {
        self.running = Some(Running {
            def,
            args,
            made: 0,
            server_delay: false,
        });
        self.next_attempt()
    }

    fn next_attempt(&mut self) -> Vec<ChainEffect<'a>> {
        let Some(r) = self.running.as_mut() else {
            return Vec::new();
        };
        r.made += 1;
        vec![ChainEffect::Attempt {
            def: r.def,
            args: r.args.clone(),
            attempt: r.made,
        }]
    }

    fn attempt_finished(
        &mut self,
        result: AttemptResult,
        elapsed: Duration,
    ) -> Vec<ChainEffect<'a>> {
        let Some(r) = self.running.as_mut() else {
            return Vec::new();
        };
        let trace = retry::attempt_event(&self.call_id, r.def, r.made, elapsed, &result);
        let mut out = vec![ChainEffect::Trace(trace)];
        match retry::after_attempt(r.def, r.made, result) {
            AfterAttempt::Retry(b) => {
                r.server_delay = b.server_delay.is_some();
                out.push(ChainEffect::ChooseDelay(b));
            }
            AfterAttempt::Final(result) => out.extend(self.settled(result)),
        }
        out
    }

    fn delay_chosen(&mut self, delay: Duration) -> Vec<ChainEffect<'a>> {
        let Some(r) = self.running.as_ref() else {
            return Vec::new();
        };
        let trace = retry::backoff_event(&self.call_id, r.def, r.made + 1, delay, r.server_delay);
        vec![ChainEffect::Trace(trace), ChainEffect::Sleep(delay)]
    }

    /// The current tool's attempts are over with `result`.
    fn settled(&mut self, result: AttemptResult) -> Vec<ChainEffect<'a>> {
        let Some(r) = self.running.take() else {
            return Vec::new();
        };
        let on_hop = self.hop.is_some() || self.mode == Mode::ApprovedHop;
        match result {
            Ok(value) if on_hop => {
                // Step 7: the model must know the answer came from elsewhere.
                let content = json!({"result": value, "via": r.def.name, "stale": r.def.stale});
                let mut outcome = succeeded(content, r.made, Some(r.def.name.clone()));
                outcome.attempts += self.tried.iter().map(|t| t.attempts).sum::<u32>();
                vec![self.done(outcome)]
            }
            Ok(value) => vec![self.done(succeeded(value, r.made, None))],
            Err(err) if self.mode == Mode::ApprovedHop => {
                vec![self.done(failed(&err, r.made, self.prompts))]
            }
            Err(err) if self.hop.is_none() => {
                if r.def.fallback.is_empty() || !fallback::triggers(err.kind) {
                    return vec![self.done(failed(&err, r.made, self.prompts))];
                }
                self.tried.push(Tried::new(&r.def.name, r.made, &err));
                self.next_hop(0)
            }
            Err(err) => self.hop_failed(Tried::new(&r.def.name, r.made, &err)),
        }
    }

    /// Step 6: hop number `i` of the first tool's chain.
    fn next_hop(&mut self, i: usize) -> Vec<ChainEffect<'a>> {
        self.hop = Some(i);
        let cfg = self.cfg;
        let Some(step) = cfg.tools.get(&self.tool).and_then(|d| d.fallback.get(i)) else {
            return vec![self.done(fallback::all_failed(&self.tried, self.prompts))];
        };
        let from = self
            .tried
            .last()
            .map(|t| t.tool.clone())
            .unwrap_or_default();
        let mut out = vec![ChainEffect::Trace(TraceEvent::Fallback {
            call_id: self.call_id.clone(),
            from,
            to: step.tool.clone(),
            at_ms: None,
        })];
        let Some(def) = cfg.tools.get(&step.tool) else {
            out.extend(self.skipped(&step.tool, &unknown(&step.tool)));
            return out;
        };
        let mapped = fallback::map_args(&self.args, &step.map);
        if let Err(err) = check_args(def, &mapped) {
            out.extend(self.skipped(&def.name, &err));
            return out;
        }
        self.gating = Some(def);
        out.push(ChainEffect::Hooks { def, args: mapped });
        out
    }

    /// A hop that was not called: traced with its reason, since a bad mapping or a
    /// missing tool is a config problem someone must see.
    fn skipped(&mut self, tool: &str, err: &ToolError) -> Vec<ChainEffect<'a>> {
        let note = TraceEvent::Note {
            kind: NoteKind::FallbackSkipped,
            message: format!("{tool}: {}: {}", err.kind.as_str(), err.message),
            at_ms: None,
        };
        let mut out = vec![ChainEffect::Trace(note)];
        out.extend(self.hop_failed(Tried::new(tool, 0, err)));
        out
    }

    fn hop_failed(&mut self, t: Tried) -> Vec<ChainEffect<'a>> {
        let stop = fallback::ends_chain(t.kind);
        self.tried.push(t);
        let next = self.hop.map_or(0, |i| i + 1);
        if stop {
            return vec![self.done(fallback::all_failed(&self.tried, self.prompts))];
        }
        self.next_hop(next)
    }

    fn done(&mut self, outcome: CallOutcome) -> ChainEffect<'a> {
        self.running = None;
        ChainEffect::Done(outcome)
    }

    fn paused(&self, def: &ToolDef, args: Value, asked_by: Option<String>) -> ChainEffect<'a> {
        ChainEffect::Paused {
            tool: def.name.clone(),
            args,
            asked_by,
        }
    }
}

enum Guarded {
    Run,
    Refused(ToolError),
    Paused,
}

fn unknown(tool: &str) -> ToolError {
    ToolError::new(ErrorKind::UnknownTool, format!("no tool named `{tool}`"))
}

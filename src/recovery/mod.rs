//! The recovery layer: every tool call goes through one chain ([`chain`], whose module
//! doc states the order: known tool → schema → approval gate → breaker → attempts with
//! retry → fallback → wrap), which always returns data. [`drive`] performs the chain's
//! effects; [`retry`] and [`fallback`] hold the rules it applies.

pub mod chain;
#[cfg(test)]
mod chain_tests;
pub mod fallback;
mod outcome;
pub mod retry;

pub use crate::tools::ToolHooks;
pub use outcome::{CallOutcome, Gate};
pub(crate) use outcome::{check_args, failed, succeeded};

use crate::config::types::{ToolDef, ToolsConfig};
use crate::prompts::Prompts;
use crate::tools::outcome::{ErrorKind, ToolError};
use crate::tools::{self, CallContext};
use chain::{Chain, ChainEffect, ChainEvent, Guards};
use serde_json::Value;
use std::collections::VecDeque;
use std::time::Instant;

#[derive(Debug, Clone, PartialEq)]
pub enum Execution {
    Done(CallOutcome),
    /// The gate paused before `tool` ran with `args`. On a fallback hop, `tool` is the
    /// fallback and `args` are the mapped arguments.
    Paused {
        tool: String,
        args: Value,
        /// Who asked for the approval and why, when a `before_tool` hook did (issue
        /// 26): the escalation's summary says so.
        asked_by: Option<String>,
    },
    /// A sub-agent's child run waits for a person (issue 26): the run pauses too, and
    /// runs the call again — resuming that child — when it is resumed.
    ChildWaiting {
        /// What the child waits for, for the run's reason.
        reason: String,
    },
}

/// Runs a tool call through the recovery chain ([`chain`] states the order), with one
/// gate deciding for every tool of the chain.
pub async fn execute(
    cfg: &ToolsConfig,
    prompts: &Prompts,
    tool: &str,
    args: &Value,
    ctx: &CallContext<'_>,
    gate: &dyn Fn(&ToolDef, &Value) -> Gate,
) -> Execution {
    let guards = OneGate(gate);
    let chain = Chain::new(cfg, prompts, &guards, ctx.call_id, tool, args.clone());
    drive(chain, ctx).await
}

/// Runs a fallback hop a person approved after the chain paused before it. The tools
/// before it already failed in the earlier process, so they are not tried again.
pub async fn execute_approved_hop(
    cfg: &ToolsConfig,
    prompts: &Prompts,
    hop: &str,
    args: &Value,
    ctx: &CallContext<'_>,
) -> CallOutcome {
    let guards = OneGate(&|_, _| Gate::Run);
    let chain = Chain::approved_hop(cfg, prompts, &guards, ctx.call_id, hop, args.clone());
    match drive(chain, ctx).await {
        Execution::Done(outcome) => outcome,
        // An approved hop passes no gate, so it cannot pause.
        Execution::Paused { tool, .. } => failed(
            &ToolError::new(ErrorKind::ApprovalDenied, format!("{tool} paused again")),
            0,
            prompts,
        ),
        // Only a sub-agent's call waits for its child, and a chain never runs one.
        Execution::ChildWaiting { reason } => {
            failed(&ToolError::new(ErrorKind::ToolBug, reason), 0, prompts)
        }
    }
}

/// Performs the chain's effects until it ends: attempts through the one executor
/// ([`tools::attempt`], whatever the tool's kind), jittered waits on the clock.
pub async fn drive(mut chain: Chain<'_>, ctx: &CallContext<'_>) -> Execution {
    let mut pending: VecDeque<ChainEffect<'_>> = chain.handle(ChainEvent::Start).into();
    while let Some(effect) = pending.pop_front() {
        let event = match effect {
            ChainEffect::Trace(e) => {
                ctx.events.emit(e);
                continue;
            }
            ChainEffect::Attempt { def, args, .. } => {
                // Elapsed time is real time on purpose: it measures the tool, not the
                // schedule.
                let started = Instant::now();
                let result = tools::attempt(def, &args, ctx).await;
                ChainEvent::AttemptFinished {
                    result,
                    elapsed: started.elapsed(),
                }
            }
            ChainEffect::ChooseDelay(b) => ChainEvent::DelayChosen(b.draw(ctx.clock)),
            ChainEffect::Sleep(d) => {
                ctx.clock.sleep(d).await;
                ChainEvent::Slept
            }
            ChainEffect::Hooks { def, args } => ChainEvent::HooksDecided(match ctx.hooks {
                Some(hooks) => hooks.before_tool(&def.name, args, ctx).await,
                None => chain::HookAnswer::Run(args),
            }),
            ChainEffect::Done(outcome) => return Execution::Done(outcome),
            ChainEffect::Paused {
                tool,
                args,
                asked_by,
            } => {
                return Execution::Paused {
                    tool,
                    args,
                    asked_by,
                };
            }
        };
        pending.extend(chain.handle(event));
    }
    // The chain always ends with Done or Paused; an empty queue would be a bug in it.
    Execution::Done(failed(
        &ToolError::new(
            ErrorKind::ToolBug,
            "the recovery chain ended without a result",
        ),
        0,
        &Prompts::builtin(),
    ))
}

/// One gate for approval and breaker alike (callers that decide both in one place).
struct OneGate<'g>(&'g dyn Fn(&ToolDef, &Value) -> Gate);

impl Guards for OneGate<'_> {
    fn approval(&self, def: &ToolDef, args: &Value) -> Gate {
        (self.0)(def, args)
    }

    fn breaker(&self, _: &ToolDef, _: &Value) -> Option<ToolError> {
        None
    }
}

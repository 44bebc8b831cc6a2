//! Running the run's hooks (issue 26) at their places in the loop: before and after
//! each tool call (in [`Drive::run_call`]), before each model request and at the
//! run's end. What a hook is told and how its answer is read is [`crate::hooks`].
//!
//! Every decision is journaled before it is acted on, with a `started` record before
//! the hook is spawned, under the call's step: on resume a stored decision is reused
//! and a hook that was running when the process died counts as failed (its
//! `on_error` decides) — a hook never runs twice for the same call.

use super::Drive;
use crate::config::hooks::{Hook, HookEvent};
use crate::fault;
use crate::hooks::{self, HookAt, Journaled, Verdict};
use crate::machine::effects::RunCall;
use crate::machine::policy::call_key;
use crate::records::EscalationRow;
use crate::recovery::chain::HookAnswer;
use crate::recovery::{CallOutcome, Execution, Gate, ToolHooks, failed};
use crate::store::StoreError;
use crate::taxonomy::ErrorKind;
use crate::tools::CallContext;
use crate::tools::outcome::ToolError;
use futures_util::future::LocalBoxFuture;
use serde_json::{Value, json};

/// The `before_tool` hooks of one call, for every tool it reaches: the tool the model
/// named (asked by the loop) and each fallback hop (asked by the chain, through
/// [`ToolHooks`]).
pub(super) struct CallHooks<'d, 'r> {
    pub drive: &'d Drive<'r>,
    pub step: u32,
    pub call_id: &'d str,
    /// The tool the model named.
    pub tool: &'d str,
    /// A person's decision on the call, which answers a hook's `ask`.
    pub decision: Option<&'d EscalationRow>,
    /// A person gave the arguments (approved with changes).
    pub modified: bool,
}

impl CallHooks<'_, '_> {
    /// What a hook's decision is journaled under: the call id for the tool and
    /// arguments the model asked for; the call id with the tool and its arguments'
    /// digest for anything else (a hop, arguments a person changed), so each is a
    /// question of its own and no earlier answer stands for it.
    fn journal_id(&self, tool: &str, args: &Value) -> String {
        if tool == self.tool && !self.modified {
            return self.call_id.to_string();
        }
        format!("{}>{}", self.call_id, call_key(tool, args))
    }

    /// The hooks' answer about running `tool` with `args` for this call.
    pub async fn ask(&self, tool: &str, args: Value, ctx: &CallContext<'_>) -> HookAnswer {
        let journal = self.journal_id(tool, &args);
        self.drive
            .before_tool(self, &journal, tool, args, ctx)
            .await
            .unwrap_or_else(|e| HookAnswer::Refused(store_failed(e)))
    }
}

impl ToolHooks for CallHooks<'_, '_> {
    fn before_tool<'a>(
        &'a self,
        tool: &'a str,
        args: Value,
        ctx: &'a CallContext<'a>,
    ) -> LocalBoxFuture<'a, HookAnswer> {
        Box::pin(self.ask(tool, args, ctx))
    }
}

impl Drive<'_> {
    /// The `before_tool` hooks about running `tool` with `args`, in order: the
    /// arguments to run it with, or why it does not run (blocked, failed, rewritten
    /// into arguments that fail the schema) or waits (a person's approval).
    async fn before_tool(
        &self,
        call: &CallHooks<'_, '_>,
        journal: &str,
        tool: &str,
        mut args: Value,
        ctx: &CallContext<'_>,
    ) -> Result<HookAnswer, StoreError> {
        let r = self.runner;
        let hooks: Vec<(usize, &Hook)> = r
            .resolved
            .tools
            .hooks
            .for_event(HookEvent::BeforeTool, Some(tool))
            .collect();
        if hooks.is_empty() {
            return Ok(HookAnswer::Run(args));
        }
        let stored = self.stored_hooks(call.step)?;
        for (index, hook) in hooks {
            let at = HookAt::new(HookEvent::BeforeTool, index, Some(journal), Some(tool));
            let fields =
                json!({"tool_name": tool, "tool_input": args, "tool_use_id": call.call_id});
            let verdict = self
                .decide(hook, &at, fields, call.step, &stored, ctx)
                .await?;
            match verdict.settled(hook.on_error) {
                Verdict::Allow { updated_input } => {
                    if let Some(new) = updated_input {
                        match self.checked_rewrite(tool, &at.hook, new) {
                            Ok(new) => args = new,
                            Err(err) => return Ok(HookAnswer::Refused(err)),
                        }
                    }
                }
                Verdict::Block { reason } | Verdict::Failed { message: reason } => {
                    return Ok(HookAnswer::Refused(ToolError::new(
                        ErrorKind::BlockedByHook,
                        format!("{tool} was blocked by hook {}: {reason}", at.hook),
                    )));
                }
                Verdict::Ask { reason } => {
                    match crate::machine::guards::approval_gate(call.decision, tool, &args) {
                        Gate::Run => {}
                        Gate::Block(err) => return Ok(HookAnswer::Refused(err)),
                        Gate::Pause => {
                            let asked_by = match reason.as_deref().map(str::trim) {
                                Some(r) if !r.is_empty() => format!("hook {} asks: {r}", at.hook),
                                _ => format!("hook {} asks for a person's approval", at.hook),
                            };
                            return Ok(HookAnswer::Paused { args, asked_by });
                        }
                    }
                }
            }
        }
        Ok(HookAnswer::Run(args))
    }

    /// The `after_tool` hooks of a finished call: a block withholds the result (the
    /// tool did run) and gives the model the hook's reason instead.
    pub(super) async fn after_tool(
        &self,
        call: &RunCall,
        ctx: &CallContext<'_>,
        execution: Execution,
    ) -> Execution {
        let r = self.runner;
        let Execution::Done(outcome) = execution else {
            return execution;
        };
        let hooks: Vec<(usize, &Hook)> = r
            .resolved
            .tools
            .hooks
            .for_event(HookEvent::AfterTool, Some(call.tool.as_str()))
            .collect();
        if hooks.is_empty() {
            return Execution::Done(outcome);
        }
        let stored = match self.stored_hooks(call.step) {
            Ok(s) => s,
            Err(e) => {
                return Execution::Done(failed(&store_failed(e), 0, &r.resolved.snapshot.prompts));
            }
        };
        for (index, hook) in hooks {
            let at = HookAt::new(
                HookEvent::AfterTool,
                index,
                Some(call.call_id.as_str()),
                Some(call.tool.as_str()),
            );
            let fields = json!({"tool_name": call.tool, "tool_input": call.args,
                                "tool_use_id": call.call_id, "tool_response": outcome.content,
                                "is_error": outcome.is_error});
            let verdict = match self
                .decide(hook, &at, fields, call.step, &stored, ctx)
                .await
            {
                Ok(v) => v,
                Err(e) => {
                    let prompts = &r.resolved.snapshot.prompts;
                    return Execution::Done(failed(&store_failed(e), 0, prompts));
                }
            };
            if let Verdict::Block { reason } = verdict.settled(hook.on_error) {
                let err = ToolError::new(
                    ErrorKind::BlockedByHook,
                    format!(
                        "{} ran, but hook {} withheld its result: {reason}",
                        call.tool, at.hook
                    ),
                );
                let prompts = &r.resolved.snapshot.prompts;
                // A sub-agent's spend counts even when its answer is withheld.
                return Execution::Done(CallOutcome {
                    via: outcome.via,
                    spent: outcome.spent,
                    ..failed(&err, outcome.attempts, prompts)
                });
            }
        }
        Execution::Done(outcome)
    }

    /// The `before_model` hooks of a step: `Some(reason)` when one blocks the request.
    pub(super) async fn before_model(&self, step: u32) -> Result<Option<String>, StoreError> {
        let r = self.runner;
        let hooks: Vec<(usize, &Hook)> = r
            .resolved
            .tools
            .hooks
            .for_event(HookEvent::BeforeModel, None)
            .collect();
        if hooks.is_empty() {
            return Ok(None);
        }
        let stored = self.stored_hooks(step)?;
        let key = format!("step-{step}");
        let ctx = self.hook_context(&key);
        for (index, hook) in hooks {
            let at = HookAt::new(HookEvent::BeforeModel, index, None, None);
            let fields = json!({"step": step});
            let verdict = self.decide(hook, &at, fields, step, &stored, &ctx).await?;
            if let Verdict::Block { reason } = verdict.settled(hook.on_error) {
                return Ok(Some(format!(
                    "hook {} blocked the model request: {reason}",
                    at.hook
                )));
            }
        }
        Ok(None)
    }

    /// The `run_end` hooks, when the run reaches a final status: told, never asked.
    pub(super) async fn run_end(&self, step: u32, status: &str, reason: Option<&str>) {
        let r = self.runner;
        let hooks: Vec<(usize, &Hook)> = r
            .resolved
            .tools
            .hooks
            .for_event(HookEvent::RunEnd, None)
            .collect();
        if hooks.is_empty() {
            return;
        }
        let stored = self.stored_hooks(step).unwrap_or_default();
        let ctx = self.hook_context("run-end");
        for (index, hook) in hooks {
            let at = HookAt::new(HookEvent::RunEnd, index, None, None);
            let fields = json!({"status": status, "reason": reason});
            // A failure here cannot change the run; it stays in the trace.
            let _ = self.decide(hook, &at, fields, step, &stored, &ctx).await;
        }
    }

    /// The stored decision for this hook and call, or the hook run now and its
    /// decision journaled (with a `started` record before it is spawned).
    async fn decide(
        &self,
        hook: &Hook,
        at: &HookAt<'_>,
        fields: Value,
        step: u32,
        stored: &std::collections::HashMap<(String, Option<String>), Journaled>,
        ctx: &CallContext<'_>,
    ) -> Result<Verdict, StoreError> {
        let key = (at.hook.clone(), at.call_id.map(str::to_string));
        match stored.get(&key) {
            Some(Journaled::Decided(v)) => return Ok(v.clone()),
            // A hook that only decides runs again: its decision is asked anew.
            Some(Journaled::Started) if hook.idempotent => {}
            Some(Journaled::Started) => {
                return Ok(Verdict::Failed {
                    message: format!(
                        "hook {} was running when agentrun stopped; it is not run twice, and \
                         its decision is unknown",
                        at.hook
                    ),
                });
            }
            None => {}
        }
        let r = self.runner;
        r.store
            .record_events(&r.lease, step, &[at.started()])
            .await?;
        fault::point("after_hook_started");
        let input = hooks::input(event_of(&at.hook), ctx.run_id, &hook.command.cwd, fields);
        let verdict = match crate::tools::command::run_hook(
            &hook.command,
            &at.hook,
            hook.timeout,
            &input,
            ctx,
        )
        .await
        {
            Ok(exit) => Verdict::from_exit(&at.hook, &exit, hooks::gates(event_of(&at.hook))),
            Err(e) => Verdict::from_error(&at.hook, &e),
        };
        fault::point("after_hook_ran");
        r.store
            .record_events(&r.lease, step, &[verdict.to_event(at)])
            .await?;
        fault::point("after_hook_decided");
        Ok(verdict)
    }

    /// What a hook outside a tool call runs with: the run's ids, `key` as its
    /// `AGENTRUN_CALL_ID`.
    fn hook_context<'k>(&'k self, key: &'k str) -> CallContext<'k> {
        let r = self.runner;
        CallContext {
            run_id: r.run_id().as_str(),
            call_id: key,
            key,
            clock: r.clock.as_ref(),
            events: &self.events,
            mcp: None,
            hooks: None,
            limits: None,
        }
    }

    fn stored_hooks(
        &self,
        step: u32,
    ) -> Result<std::collections::HashMap<(String, Option<String>), Journaled>, StoreError> {
        let r = self.runner;
        Ok(hooks::journaled(&r.store.events_of_step(r.run_id(), step)?))
    }

    /// `updatedInput`, checked against the tool's schema like the model's arguments.
    fn checked_rewrite(&self, tool: &str, hook: &str, new: Value) -> Result<Value, ToolError> {
        let r = self.runner;
        let Some(def) = r.resolved.tools.tools.get(tool) else {
            return Ok(new);
        };
        match crate::recovery::check_args(def, &new) {
            Ok(()) => Ok(new),
            Err(e) => Err(ToolError::new(
                ErrorKind::BlockedByHook,
                format!(
                    "hook {hook} rewrote the arguments of {tool} into ones its schema refuses: {}",
                    e.message
                ),
            )),
        }
    }
}

/// The event a journal key names (`before_tool[0]` → before_tool).
fn event_of(hook: &str) -> HookEvent {
    let key = hook.split('[').next().unwrap_or_default();
    HookEvent::ALL
        .into_iter()
        .find(|e| e.key() == key)
        .unwrap_or(HookEvent::BeforeTool)
}

/// The store failed while journaling a decision: the call does not run (nothing
/// that is not journaled is acted on).
fn store_failed(e: StoreError) -> ToolError {
    ToolError::new(
        ErrorKind::BlockedByHook,
        format!("a hook's decision could not be journaled ({e}); the call was not run"),
    )
}

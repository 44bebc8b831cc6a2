//! Where each of a run's trace events goes: attempts, waits, fallback hops and hook
//! decisions on their tool call's span; model retries and fallbacks on the request's
//! `chat` span; notes and the loop's notices on the process's segment.

use super::span::Open;
use crate::machine::effects::Notice;
use crate::trace::TraceEvent;
use opentelemetry::KeyValue;
use std::collections::HashMap;

pub struct Targets<'a> {
    pub chat: Option<&'a mut Open>,
    pub tools: &'a mut HashMap<String, Open>,
    pub segment: Option<&'a mut Open>,
}

fn kv(key: &'static str, v: impl Into<opentelemetry::Value>) -> KeyValue {
    KeyValue::new(key, v)
}

pub fn place(t: Targets<'_>, e: &TraceEvent) {
    let at = e.at_ms();
    match e {
        TraceEvent::ToolAttempt {
            call_id,
            attempt,
            elapsed_ms,
            error,
            class,
            tool,
            ..
        } => {
            let mut attrs = vec![
                kv("agentrun.tool", tool.clone()),
                kv("agentrun.attempt", *attempt as i64),
                kv("agentrun.elapsed_ms", *elapsed_ms as i64),
            ];
            if let Some(kind) = error {
                attrs.push(kv("agentrun.error.kind", kind.as_str()));
            }
            if let Some(class) = class {
                attrs.push(kv("error.type", class.as_str()));
            }
            on_tool(t, call_id, "agentrun.tool.attempt", at, attrs);
        }
        TraceEvent::Backoff {
            call_id,
            attempt,
            delay_ms,
            retry_after,
            ..
        } => {
            let attrs = vec![
                kv("agentrun.attempt", *attempt as i64),
                kv("agentrun.delay_ms", *delay_ms as i64),
                kv("agentrun.retry_after", *retry_after),
            ];
            on_tool(t, call_id, "agentrun.tool.retry_wait", at, attrs);
        }
        TraceEvent::Fallback {
            call_id, from, to, ..
        } => {
            let attrs = vec![
                kv("agentrun.from", from.clone()),
                kv("agentrun.to", to.clone()),
            ];
            on_tool(t, call_id, "agentrun.tool.fallback", at, attrs);
        }
        TraceEvent::Hook {
            hook,
            call_id,
            decision,
            reason,
            ..
        } => {
            let mut attrs = vec![
                kv("agentrun.hook", hook.clone()),
                kv("agentrun.hook.decision", decision.clone()),
            ];
            if let Some(r) = reason {
                attrs.push(kv("agentrun.hook.reason", r.clone()));
            }
            match call_id {
                Some(id) => on_tool(t, id, "agentrun.hook", at, attrs),
                None => on_chat_or_segment(t, "agentrun.hook", at, attrs),
            }
        }
        TraceEvent::ModelRetry {
            model,
            attempt,
            reason,
            delay_ms,
            ..
        } => {
            let attrs = vec![
                kv("agentrun.model", model.clone()),
                kv("agentrun.attempt", *attempt as i64),
                kv("agentrun.delay_ms", *delay_ms as i64),
                kv("agentrun.reason", reason.clone().unwrap_or_default()),
            ];
            on_chat_or_segment(t, "agentrun.model.retry", at, attrs);
        }
        TraceEvent::ModelFallback { from, to, .. } => {
            let attrs = vec![
                kv("agentrun.from", from.clone()),
                kv("agentrun.to", to.clone()),
            ];
            if let Some(chat) = t.chat {
                chat.attr(kv("agentrun.model.fallback", true));
                chat.event("agentrun.model.fallback", at, attrs);
            }
        }
        // On the `chat` span already, from the response itself.
        TraceEvent::ModelUsage { .. } => {}
        TraceEvent::Note { kind, .. } => {
            let attrs = vec![kv("agentrun.note", kind.as_str())];
            if let Some(seg) = t.segment {
                seg.event("agentrun.note", at, attrs);
            }
        }
    }
}

fn on_tool(
    t: Targets<'_>,
    call_id: &str,
    name: &'static str,
    at: Option<i64>,
    attrs: Vec<KeyValue>,
) {
    if let Some(span) = t.tools.get_mut(call_id) {
        span.event(name, at, attrs);
    } else if let Some(seg) = t.segment {
        seg.event(name, at, attrs);
    }
}

fn on_chat_or_segment(t: Targets<'_>, name: &'static str, at: Option<i64>, attrs: Vec<KeyValue>) {
    if let Some(span) = t.chat.or(t.segment) {
        span.event(name, at, attrs);
    }
}

/// A notice as an event: its name and attributes.
pub fn notice(n: &Notice) -> (&'static str, Vec<KeyValue>) {
    match n {
        Notice::Stopped { reason } => (
            "agentrun.stopped",
            vec![kv("agentrun.reason", reason.clone())],
        ),
        Notice::FinalAnswer { step, degraded } => (
            "agentrun.final_answer",
            vec![
                kv("agentrun.step", *step as i64),
                kv("agentrun.degraded", *degraded),
            ],
        ),
        Notice::Escalated { id, kind, .. } => (
            "agentrun.escalation",
            vec![
                kv("agentrun.escalation.id", id.to_string()),
                kv("agentrun.escalation.kind", kind.to_string()),
                kv("agentrun.pauses", true),
            ],
        ),
        Notice::ToolBugQueued { id, kind } => (
            "agentrun.escalation",
            vec![
                kv("agentrun.escalation.id", id.to_string()),
                kv("agentrun.escalation.kind", kind.to_string()),
                kv("agentrun.pauses", false),
            ],
        ),
        Notice::Nudged { step, .. } => ("agentrun.nudged", vec![kv("agentrun.step", *step as i64)]),
        Notice::Degraded => ("agentrun.degraded", Vec::new()),
        Notice::Failed { reason } => (
            "agentrun.failed",
            vec![kv("agentrun.reason", reason.clone())],
        ),
        Notice::Compacted {
            step,
            before,
            after,
        } => (
            "agentrun.compaction",
            vec![
                kv("agentrun.step", *step as i64),
                kv("agentrun.tokens_before", *before as i64),
                kv("agentrun.tokens_after", *after as i64),
            ],
        ),
        Notice::AnswerRejected { step, attempt, .. } => (
            "agentrun.answer_rejected",
            vec![
                kv("agentrun.step", *step as i64),
                kv("agentrun.attempt", *attempt as i64),
            ],
        ),
        Notice::MessageDelivered { step, by } => (
            "agentrun.message_delivered",
            vec![
                kv("agentrun.step", *step as i64),
                kv("agentrun.by", by.clone()),
            ],
        ),
    }
}

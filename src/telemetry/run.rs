//! One run's spans in the GenAI semantic conventions (docs/observability.md): the run is
//! an `invoke_agent` span, each model request a `chat {model}` span and each tool call
//! an `execute_tool {tool}` span, all children of the run's span; what this process
//! drove of the run is a `agentrun.segment` span beside them, carrying the run's events
//! (escalations, decisions, sends, compactions, stops).
//!
//! The run's span is sent by the process that ends the run, starting when the run was
//! created; its id and every tool call's id come from [`super::ids`], so a run killed
//! and resumed elsewhere keeps one trace and one parent for all its spans.

use super::ids;
use super::span::{Open, at_ms};
use super::{Telemetry, keys as k, metrics};
use crate::machine::effects::Notice;
use crate::records::{RunId, RunStatus};
use crate::store::Store;
use crate::trace::TraceEvent;
use opentelemetry::trace::{Link, SpanId, SpanKind, TraceId};
use opentelemetry::{KeyValue, Value};
use std::collections::HashMap;
use std::sync::Mutex;

/// The spans of one drive of one run.
pub struct RunTrace {
    /// `None`: spans are not exported, only metrics kept.
    t: Option<&'static Telemetry>,
    run: String,
    agent: String,
    trace: TraceId,
    root: SpanId,
    /// The parent run's `execute_tool` span, for a sub-agent's run.
    root_parent: SpanId,
    created_ms: i64,
    open: Mutex<Spans>,
}

struct Spans {
    segment: Option<Open>,
    chat: Option<Open>,
    tools: HashMap<String, Open>,
}

/// What a drive of the run ended with, for the spans that end with it.
pub struct Ended<'a> {
    pub status: RunStatus,
    pub reason: Option<&'a str>,
    pub steps: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

/// Model specs are `provider:model` (`openai:gpt-4o-mini`).
pub fn split_spec(spec: &str) -> (&str, &str) {
    spec.split_once(':').unwrap_or(("unknown", spec))
}

fn agent_name(task_path: &str) -> String {
    let p = std::path::Path::new(task_path);
    let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("agent");
    // `examples/refund/task.md` is the refund agent, not "task".
    match (
        stem,
        p.parent()
            .and_then(|d| d.file_name())
            .and_then(|s| s.to_str()),
    ) {
        ("task", Some(dir)) => dir.to_string(),
        _ => stem.to_string(),
    }
}

impl RunTrace {
    /// The spans of `run`, when telemetry is on; one read of the run (and its parents).
    pub fn begin(store: &Store, run: &RunId, first_step: u32) -> Option<RunTrace> {
        let t = super::get();
        if t.is_none() && !metrics::on() {
            return None;
        }
        if first_step == 0 {
            metrics::add("agentrun_runs_started_total", Vec::new(), 1.0);
        }
        let row = store.run(run).ok()?;
        let top = store.top_of(run);
        let trace = ids::trace_id(top.as_str());
        let root = ids::run_span(run.as_str());
        let root_parent = row
            .parent
            .as_ref()
            .map_or(SpanId::INVALID, |p| ids::tool_span(p.run.as_str(), &p.call));
        let agent = agent_name(&row.task_path);
        let mut segment = Open::new(
            ids::random_span(),
            root,
            "agentrun.segment".into(),
            SpanKind::Internal,
        );
        segment.attr(KeyValue::new(k::CONVERSATION, run.as_str().to_string()));
        segment.attr(KeyValue::new(
            "agentrun.segment.first_step",
            first_step as i64,
        ));
        segment.attr(KeyValue::new("agentrun.segment.resumed", first_step > 0));
        segment.attr(KeyValue::new("process.pid", std::process::id() as i64));
        segment.attr(KeyValue::new(k::OI_KIND, "CHAIN"));
        // A resumed segment points at the run's span, which every segment shares.
        if first_step > 0 {
            segment.links.push(Link::new(
                opentelemetry::trace::SpanContext::new(
                    trace,
                    root,
                    opentelemetry::trace::TraceFlags::SAMPLED,
                    false,
                    Default::default(),
                ),
                vec![KeyValue::new("agentrun.link", "resumed")],
                0,
            ));
        }
        super::register(run.as_str(), trace);
        Some(RunTrace {
            t,
            run: run.as_str().to_string(),
            agent,
            trace,
            root,
            root_parent,
            created_ms: row.created_at,
            open: Mutex::new(Spans {
                segment: Some(segment),
                chat: None,
                tools: HashMap::new(),
            }),
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut Spans) -> R) -> R {
        f(&mut self.open.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn content(&self) -> bool {
        self.t.is_some_and(|t| t.settings.content)
    }

    /// A model request of step `step` starts, to the first of the models `spec` names.
    pub fn chat_started(&self, step: u32, spec: &str) {
        let (provider, model) = split_spec(spec);
        let mut s = Open::new(
            ids::random_span(),
            self.root,
            format!("chat {model}"),
            SpanKind::Client,
        );
        s.attr(KeyValue::new(k::OPERATION, "chat"));
        s.attr(KeyValue::new(k::PROVIDER, provider.to_string()));
        s.attr(KeyValue::new(k::REQUEST_MODEL, model.to_string()));
        s.attr(KeyValue::new(k::CONVERSATION, self.run.clone()));
        s.attr(KeyValue::new("agentrun.step", step as i64));
        s.attr(KeyValue::new(k::OI_KIND, "LLM"));
        self.with(|o| o.chat = Some(s));
    }

    /// The request answered (`Ok`) or failed for good (`Err`, its message).
    pub fn chat_finished(&self, answer: Result<Answered<'_>, &str>) {
        let Some(mut s) = self.with(|o| o.chat.take()) else {
            return;
        };
        chat_metrics(&s, &answer);
        match answer {
            Ok(a) => a.describe(&mut s, self.content()),
            Err(message) => {
                s.attr(KeyValue::new(k::ERROR_TYPE, "model_failed"));
                s.error = Some(message.to_string());
            }
        }
        self.send(s);
    }

    /// A tool call starts (its hooks and approval gate are part of it).
    pub fn tool_started(&self, call_id: &str, tool: &str, args: &serde_json::Value) {
        let mut s = Open::new(
            ids::tool_span(&self.run, call_id),
            self.root,
            format!("execute_tool {tool}"),
            SpanKind::Internal,
        );
        s.attr(KeyValue::new(k::OPERATION, "execute_tool"));
        s.attr(KeyValue::new(k::TOOL_NAME, tool.to_string()));
        s.attr(KeyValue::new(k::TOOL_CALL_ID, call_id.to_string()));
        s.attr(KeyValue::new(k::TOOL_TYPE, "function"));
        s.attr(KeyValue::new(k::CONVERSATION, self.run.clone()));
        s.attr(KeyValue::new(k::OI_KIND, "TOOL"));
        s.attr(KeyValue::new("tool.name", tool.to_string()));
        if self.content() {
            s.attr(KeyValue::new(k::TOOL_ARGS, super::content::json(args)));
        }
        self.with(|o| o.tools.insert(call_id.to_string(), s));
    }

    /// A person decided the escalation this call waited on: how long it waited.
    pub fn tool_approved(&self, call_id: &str, decided: &crate::records::EscalationRow) {
        self.with(|o| {
            let Some(s) = o.tools.get_mut(call_id) else {
                return;
            };
            let waited = decided
                .resolved_at
                .map_or(0, |at| at.saturating_sub(decided.created_at));
            s.event(
                "agentrun.approval",
                decided.resolved_at,
                vec![
                    KeyValue::new("agentrun.escalation.id", decided.id.to_string()),
                    KeyValue::new("agentrun.approval.wait_ms", waited),
                    KeyValue::new(
                        "agentrun.approval.decided_by",
                        decided.resolved_by.clone().unwrap_or_default(),
                    ),
                ],
            );
        });
    }

    /// The call ended with `outcome` (`None`: it paused, or waits on a child run).
    pub fn tool_finished(&self, call_id: &str, outcome: Option<&crate::recovery::CallOutcome>) {
        let Some(mut s) = self.with(|o| o.tools.remove(call_id)) else {
            return;
        };
        match outcome {
            Some(out) => {
                s.attr(KeyValue::new("agentrun.tool.attempts", out.attempts as i64));
                if let Some(via) = &out.via {
                    s.attr(KeyValue::new("agentrun.tool.via", via.clone()));
                }
                if out.is_error {
                    let class = out.error.map_or("error", |e| e.class().as_str());
                    s.attr(KeyValue::new(k::ERROR_TYPE, class));
                    if let Some(kind) = out.error {
                        s.attr(KeyValue::new("agentrun.error.kind", kind.as_str()));
                    }
                    s.error = Some(class.to_string());
                }
                if self.content() {
                    s.attr(KeyValue::new(
                        k::TOOL_RESULT,
                        super::content::json(&out.content),
                    ));
                }
            }
            None => s.attr(KeyValue::new("agentrun.tool.paused", true)),
        }
        self.send(s);
    }

    /// A trace event as the run's recovery code emits it: on the span it belongs to.
    pub fn event(&self, e: &TraceEvent) {
        event_metrics(e);
        self.with(|o| super::events::place(o_ref(o), e));
    }

    /// Something the loop decided: an event on this process's segment.
    pub fn notice(&self, n: &Notice) {
        if let Notice::Escalated { kind, .. } | Notice::ToolBugQueued { kind, .. } = n {
            let labels = vec![("kind", kind.to_string())];
            metrics::add("agentrun_escalations_total", labels, 1.0);
        }
        let (name, attrs) = super::events::notice(n);
        self.with(|o| {
            if let Some(seg) = o.segment.as_mut() {
                seg.event(name, None, attrs);
            }
        });
    }

    /// A person's decision on an escalation was applied to the run.
    pub fn decision(&self, escalation: i64) {
        self.with(|o| {
            if let Some(seg) = o.segment.as_mut() {
                seg.event(
                    "agentrun.decision",
                    None,
                    vec![KeyValue::new("agentrun.escalation.id", escalation)],
                );
            }
        });
    }

    /// This drive of the run is over: its segment ends, and so does the run's span
    /// when the run ended for good.
    pub fn end(&self, ended: Option<&Ended<'_>>) {
        let (segment, tools, chat) = self.with(|o| {
            (
                o.segment.take(),
                std::mem::take(&mut o.tools),
                o.chat.take(),
            )
        });
        // Work cut off by the end (a stop, a lost lease) ends with it.
        for (_, mut s) in tools.into_iter().chain(chat.map(|c| (String::new(), c))) {
            s.attr(KeyValue::new("agentrun.interrupted", true));
            self.send(s);
        }
        let Some(mut segment) = segment else { return };
        if let Some(e) = ended {
            segment.attr(KeyValue::new("agentrun.run.status", e.status.as_str()));
        }
        self.send(segment);
        let Some(e) = ended.filter(|e| terminal(e.status)) else {
            return;
        };
        let labels = vec![("status", e.status.as_str().to_string())];
        metrics::add("agentrun_runs_ended_total", labels, 1.0);
        self.send(self.run_span(e));
    }

    fn run_span(&self, e: &Ended<'_>) -> Open {
        let mut s = Open::new(
            self.root,
            self.root_parent,
            format!("invoke_agent {}", self.agent),
            SpanKind::Internal,
        );
        s.start = at_ms(self.created_ms).min(s.start);
        s.attr(KeyValue::new(k::OPERATION, "invoke_agent"));
        s.attr(KeyValue::new(k::AGENT_NAME, self.agent.clone()));
        s.attr(KeyValue::new(k::CONVERSATION, self.run.clone()));
        // The run's totals under agentrun's names: viewers that add up `gen_ai.usage`
        // over a trace would count every `chat` span twice.
        s.attr(KeyValue::new(
            "agentrun.run.input_tokens",
            e.input_tokens as i64,
        ));
        s.attr(KeyValue::new(
            "agentrun.run.output_tokens",
            e.output_tokens as i64,
        ));
        s.attr(KeyValue::new("agentrun.run.status", e.status.as_str()));
        s.attr(KeyValue::new("agentrun.run.steps", e.steps as i64));
        s.attr(KeyValue::new("agentrun.cost_usd", e.cost_usd));
        s.attr(KeyValue::new(k::OI_KIND, "AGENT"));
        if e.status != RunStatus::Completed {
            s.attr(KeyValue::new(k::ERROR_TYPE, e.status.as_str()));
            s.error = Some(e.reason.unwrap_or(e.status.as_str()).to_string());
        }
        s
    }

    fn send(&self, s: Open) {
        if let Some(t) = self.t {
            t.export().send(s.finish(self.trace));
        }
    }
}

impl Drop for RunTrace {
    fn drop(&mut self) {
        super::unregister(&self.run);
    }
}

fn o_ref(o: &mut Spans) -> super::events::Targets<'_> {
    super::events::Targets {
        chat: o.chat.as_mut(),
        tools: &mut o.tools,
        segment: o.segment.as_mut(),
    }
}

/// A model's answer, for its `chat` span.
pub struct Answered<'a> {
    pub response: &'a crate::model::ModelResponse,
    pub cost_usd: f64,
}

impl Answered<'_> {
    fn describe(&self, s: &mut Open, content: bool) {
        let r = self.response;
        let (_, model) = split_spec(&r.model);
        let u = &r.usage;
        s.attr(KeyValue::new(k::RESPONSE_MODEL, model.to_string()));
        s.attr(KeyValue::new(
            k::FINISH_REASONS,
            Value::Array(vec![opentelemetry::StringValue::from(finish_reason(&r.stop))].into()),
        ));
        for (key, n) in [
            (k::INPUT_TOKENS, u.input),
            (k::OUTPUT_TOKENS, u.output),
            (k::CACHE_READ, u.cached),
            (k::CACHE_CREATION, u.cache_write),
            ("llm.token_count.prompt", u.input),
            ("llm.token_count.completion", u.output),
            ("llm.token_count.total", u.input + u.output),
        ] {
            s.attr(KeyValue::new(key, n as i64));
        }
        s.attr(KeyValue::new("llm.model_name", model.to_string()));
        s.attr(KeyValue::new("agentrun.cost_usd", self.cost_usd));
        if u.estimated {
            s.attr(KeyValue::new("agentrun.usage.estimated", true));
        }
        if content {
            s.attr(KeyValue::new(
                k::OUTPUT_MESSAGES,
                super::content::message(&r.message),
            ));
        }
    }
}

/// A model request's steps, tokens, cost and duration.
fn chat_metrics(s: &Open, answer: &Result<Answered<'_>, &str>) {
    if !metrics::on() {
        return;
    }
    let model = s
        .attrs
        .iter()
        .find(|kv| kv.key.as_str() == k::REQUEST_MODEL);
    let provider = s.attrs.iter().find(|kv| kv.key.as_str() == k::PROVIDER);
    let (model, provider) = (
        model
            .map(|kv| kv.value.as_str().into_owned())
            .unwrap_or_default(),
        provider
            .map(|kv| kv.value.as_str().into_owned())
            .unwrap_or_default(),
    );
    let seconds = s.start.elapsed().map_or(0.0, |d| d.as_secs_f64());
    match answer {
        Ok(a) => {
            let u = &a.response.usage;
            metrics::add("agentrun_steps_total", Vec::new(), 1.0);
            metrics::add("agentrun_cost_usd_total", Vec::new(), a.cost_usd);
            metrics::tokens(&provider, &model, "input", u.input);
            metrics::tokens(&provider, &model, "output", u.output);
            metrics::duration(&provider, &model, None, seconds);
        }
        Err(_) => metrics::duration(&provider, &model, Some("model_failed"), seconds),
    }
}

fn event_metrics(e: &TraceEvent) {
    if !metrics::on() {
        return;
    }
    match e {
        TraceEvent::ToolAttempt { tool, class, .. } => {
            let class = class.map_or("none", |c| c.as_str());
            let labels = vec![("tool", tool.clone()), ("error_class", class.to_string())];
            metrics::add("agentrun_tool_attempts_total", labels, 1.0);
        }
        TraceEvent::Backoff { tool, .. } => {
            let labels = vec![("kind", "tool".to_string()), ("name", tool.clone())];
            metrics::add("agentrun_retries_total", labels, 1.0);
        }
        TraceEvent::ModelRetry { model, .. } => {
            let labels = vec![("kind", "model".to_string()), ("name", model.clone())];
            metrics::add("agentrun_retries_total", labels, 1.0);
        }
        _ => {}
    }
}

/// A run that will not be driven again: its span can end.
fn terminal(status: RunStatus) -> bool {
    matches!(
        status,
        RunStatus::Completed
            | RunStatus::Failed
            | RunStatus::BudgetExhausted
            | RunStatus::Cancelled
    )
}

fn finish_reason(stop: &crate::model::StopReason) -> String {
    use crate::model::StopReason::*;
    match stop {
        EndTurn => "stop".into(),
        ToolUse => "tool_call".into(),
        MaxTokens => "length".into(),
        StopSequence => "stop".into(),
        Other(s) => s.clone(),
    }
}

//! `runs show` for people: a header, the task, then each step as it happened — what
//! the model said, each tool call with its arguments, how it went (attempts, waits,
//! fallback hops), what came back (long results folded), nudges and escalations.

use super::Style;
use crate::model::{Part, Role};
use crate::records::{
    EscalationRow, JournalEntry, Resolution, RunRow, RunStatus, StoredEvent, StoredMessage,
};
use crate::text::{fold, indent, one_line, plain};
use crate::timefmt::rfc3339;
use crate::trace::TraceEvent;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write;

/// Results longer than this many lines or bytes are folded.
const FOLD_LINES: usize = 5;
const FOLD_BYTES: usize = 400;
/// Where text under a call or a label starts.
const BODY: usize = 6;

/// Everything `runs show` knows about a run.
pub struct RunView<'a> {
    pub row: &'a RunRow,
    pub messages: &'a [StoredMessage],
    pub journal: &'a [JournalEntry],
    pub events: &'a [StoredEvent],
    pub escalations: &'a [EscalationRow],
    /// Model specs in fallback order, from the run's config snapshot.
    pub models: &'a [String],
    /// A `running` run whose process is gone (issue 13).
    pub stale: bool,
    /// Header fields for money and time (issue 15), shown after `tokens`.
    pub spend: &'a [(&'static str, String)],
}

pub fn render(v: &RunView<'_>, style: Style) -> String {
    let mut out = render_head(v, style);
    out.push_str(&render_steps(v, style));
    out.push_str(&render_escalations(v.escalations, style));
    out
}

/// What comes before the first step: the header and the task. `runs show` prints it,
/// then [`render_steps`] of one window of steps at a time, then
/// [`render_escalations`] — the same text as [`render`], streamed (issue 14).
pub fn render_head(v: &RunView<'_>, style: Style) -> String {
    let mut out = header(v, style);
    out.push_str(&format!("\n{}\n", style.bold("task")));
    out.push_str(&format!("  {}\n", indent(&plain(v.row.task.trim_end()), 2)));
    out
}

/// The steps `v` holds rows of: the whole run, or a window of whole steps.
pub fn render_steps(v: &RunView<'_>, style: Style) -> String {
    let mut out = String::new();
    for step in steps(v) {
        out.push_str(&render_step(v, step, style));
    }
    out
}

/// People's messages for the run (`runs send`, issue 21): who sent what, when, and
/// whether the model has read it (or, the run having ended first, never will).
pub fn render_sent(
    sent: &[crate::store::SentMessage],
    status: crate::store::RunStatus,
    s: Style,
) -> String {
    if sent.is_empty() {
        return String::new();
    }
    let mut out = format!("\n{}\n", s.bold("messages from people"));
    for m in sent {
        let state = match m.delivered {
            Some(d) => format!("delivered after step {}", d.step),
            None if !status.accepts_messages() => {
                format!("never delivered: the run was {status} before its next step")
            }
            None => "not delivered yet: the run reads it when it next begins a step".into(),
        };
        let _ = writeln!(
            out,
            "  ✉ {} ({}, {}): {}",
            m.by,
            rfc3339(m.at),
            state,
            indent(m.text.trim_end(), 6)
        );
    }
    out
}

/// The run's escalations and the decisions people made on them.
pub fn render_escalations(escalations: &[EscalationRow], s: Style) -> String {
    if escalations.is_empty() {
        return String::new();
    }
    let mut out = format!("\n{}\n", s.bold("escalations"));
    for e in escalations {
        let state = if e.open { "open" } else { "resolved" };
        let _ = writeln!(
            out,
            "  ⚑ {} {} (step {}, {state}): {}",
            e.id,
            e.kind,
            e.step,
            one_line(&e.summary)
        );
        match (&e.resolution, &e.resolved_by) {
            (Some(r), Some(by)) => {
                let decision = match r {
                    Resolution::Approve => "approved".to_string(),
                    Resolution::Deny { reason } => format!("denied: {}", one_line(reason)),
                    Resolution::Modify { args } => {
                        format!("approved with arguments {}", one_line(&args.to_string()))
                    }
                    Resolution::Reply { text } => format!("replied: {}", one_line(text)),
                };
                let by = one_line(by);
                let at = e.resolved_at.map(rfc3339).unwrap_or_default();
                let _ = writeln!(out, "      {} {decision} ({by}, {at})", s.dim("decision"));
            }
            _ => {
                let _ = writeln!(
                    out,
                    "      {} agentrun escalations show {}",
                    s.dim("next"),
                    e.id
                );
            }
        }
    }
    out
}

/// A structured answer (issue 26), formatted: the JSON the run ended with, indented.
pub fn render_structured_answer(answer: &str, s: Style) -> String {
    let pretty = serde_json::from_str::<Value>(answer)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| answer.to_string());
    format!("\n{}\n  {}\n", s.bold("answer"), indent(&plain(&pretty), 2))
}

fn header(v: &RunView<'_>, s: Style) -> String {
    let r = v.row;
    let status = if v.stale {
        format!(
            "{} — stale: its process is gone; `agentrun resume {}` continues it",
            s.status(r.status),
            r.id
        )
    } else {
        s.status(r.status)
    };
    let mut out = format!("{} {}  {status}\n", s.bold("run"), s.bold(r.id.as_str()));
    let mut field = |name: &str, value: String| {
        let _ = writeln!(out, "  {}  {value}", s.dim(&format!("{name:<9}")));
    };
    field("task file", r.task_path.clone());
    if let Some(f) = &r.fork {
        field("forked", format!("from {} at step {}", f.run, f.step));
    }
    if !v.models.is_empty() {
        field("model", v.models.join(", then "));
    }
    field("steps", format!("{} of {}", r.steps, r.max_steps));
    field(
        "tokens",
        format!(
            "{} of {} ({} in, {} out)",
            r.input_tokens + r.output_tokens,
            r.max_tokens,
            r.input_tokens,
            r.output_tokens
        ),
    );
    // `driven` goes beside `wall time`, below.
    for (name, value) in v.spend.iter().filter(|(n, _)| *n != "driven") {
        field(name, value.clone());
    }
    // Local times for people; `--json` keeps RFC 3339 in UTC.
    field("created", crate::timefmt::local(r.created_at));
    field("updated", crate::timefmt::local(r.updated_at));
    // From creation to the last write, waits for people and pauses included; the
    // spend lines above have `driven`, the part a process worked on it (issue 27).
    let so_far = if r.status == RunStatus::Running && !v.stale {
        " so far"
    } else {
        ""
    };
    field(
        "wall time",
        format!(
            "{}{so_far} (created to last update)",
            crate::timefmt::duration(r.updated_at - r.created_at)
        ),
    );
    for (name, value) in v.spend.iter().filter(|(n, _)| *n == "driven") {
        field(name, value.clone());
    }
    if let Some(e) = &r.error {
        field("reason", indent(&plain(e), 13));
    }
    out
}

/// Every step with something to show, in order. Step 0 holds the opening transcript,
/// which the header and task already show; its events (if any) still count.
fn steps(v: &RunView<'_>) -> BTreeSet<u32> {
    let mut steps: BTreeSet<u32> = v.messages.iter().map(|m| m.step).collect();
    steps.extend(v.journal.iter().map(|j| j.step));
    steps.extend(v.events.iter().map(|e| e.step));
    if !v.events.iter().any(|e| e.step == 0) {
        steps.remove(&0);
    }
    steps
}

fn render_step(v: &RunView<'_>, step: u32, s: Style) -> String {
    let title = if step == 0 {
        "before step 1".to_string()
    } else {
        format!("step {step}")
    };
    let mut out = format!("\n{}\n", s.bold(&format!("── {title} ──")));
    let messages: Vec<&StoredMessage> = v.messages.iter().filter(|m| m.step == step).collect();
    let events: Vec<&TraceEvent> = v
        .events
        .iter()
        .filter(|e| e.step == step)
        .map(|e| &e.event)
        .collect();
    for e in events
        .iter()
        .filter(|e| call_of(e).is_none() && !silent_usage(e))
    {
        out.push_str(&event_line(e, 2, s));
    }
    let results = results_by_call(&messages);
    let journal: HashMap<&str, &JournalEntry> = v
        .journal
        .iter()
        .filter(|j| j.step == step)
        .map(|j| (j.call_id.as_str(), j))
        .collect();
    let shown: HashSet<&str> = messages
        .iter()
        .flat_map(|m| &m.message.content)
        .filter_map(|p| match p {
            Part::ToolCall { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    let ctx = Ctx {
        events: &events,
        results: &results,
        calls: &shown,
        journal: &journal,
        style: s,
    };
    for m in messages.iter().filter(|m| m.step > 0) {
        for part in &m.message.content {
            out.push_str(&render_part(m.message.role, part, &ctx));
        }
    }
    // Calls journaled but not committed: the step was cut short (crash, pause).
    for j in v
        .journal
        .iter()
        .filter(|j| j.step == step && !shown.contains(j.call_id.as_str()))
    {
        out.push_str(&call_line(&j.tool, &j.args, &j.call_id, s));
        out.push_str(&call_events(&events, &j.call_id, s));
        out.push_str(&format!(
            "    {} {}\n",
            s.yellow("…"),
            s.yellow(&format!("{} (not committed)", j.status.as_str()))
        ));
    }
    out
}

struct Ctx<'a> {
    events: &'a [&'a TraceEvent],
    results: &'a HashMap<&'a str, (&'a Value, bool)>,
    /// Ids of the calls the model made in this step.
    calls: &'a HashSet<&'a str>,
    journal: &'a HashMap<&'a str, &'a JournalEntry>,
    style: Style,
}

fn results_by_call<'a>(messages: &[&'a StoredMessage]) -> HashMap<&'a str, (&'a Value, bool)> {
    messages
        .iter()
        .flat_map(|m| &m.message.content)
        .filter_map(|p| match p {
            Part::ToolResult {
                call_id,
                content,
                is_error,
            } => Some((call_id.as_str(), (content, *is_error))),
            _ => None,
        })
        .collect()
}

fn render_part(role: Role, part: &Part, c: &Ctx<'_>) -> String {
    let s = c.style;
    match part {
        Part::Text { text } => labelled(role_label(role), text, s),
        Part::ToolCall { id, name, args } => {
            let mut out = call_line(name, args, id, s);
            out.push_str(&call_events(c.events, id, s));
            match c.results.get(id.as_str()) {
                Some((content, is_error)) => out.push_str(&result_lines(
                    content,
                    *is_error,
                    c.journal.get(id.as_str()),
                    s,
                )),
                None => out.push_str(&format!("    {}\n", s.yellow("… no result recorded"))),
            }
            out
        }
        // Results are shown under their call; one without a call is shown alone.
        Part::ToolResult {
            call_id,
            content,
            is_error,
        } if !c.calls.contains(call_id.as_str()) => format!(
            "  {}\n{}",
            s.dim(&format!("result for [{call_id}]")),
            result_lines(content, *is_error, None, s)
        ),
        Part::ToolResult { .. } => String::new(),
    }
}

fn role_label(role: Role) -> &'static str {
    match role {
        Role::Assistant => "model",
        // System messages after the start are the runner speaking to the model.
        Role::System => "nudge",
        Role::User => "user",
        Role::Tool => "tool",
    }
}

fn labelled(label: &str, text: &str, s: Style) -> String {
    let painted = match label {
        "nudge" => s.yellow(&format!("{label:<5}")),
        _ => s.bold(&format!("{label:<5}")),
    };
    format!("  {painted} {}\n", indent(&plain(text.trim_end()), 2 + 6))
}

fn call_line(name: &str, args: &Value, id: &str, s: Style) -> String {
    format!(
        "  {} {}({})  {}\n",
        s.cyan("→"),
        s.bold(&one_line(name)),
        one_line(&fold(&args.to_string(), 1, FOLD_BYTES)),
        s.dim(&format!("[{}]", one_line(id)))
    )
}

/// The trace of one call. A lone successful attempt is left out: the result line
/// already says "1 attempt".
fn call_events(events: &[&TraceEvent], call_id: &str, s: Style) -> String {
    let mine: Vec<&&TraceEvent> = events
        .iter()
        .filter(|e| call_of(e) == Some(call_id))
        .collect();
    if let [TraceEvent::ToolAttempt { error: None, .. }] = mine.as_slice() {
        return String::new();
    }
    mine.iter().map(|e| event_line(e, 4, s)).collect()
}

fn event_line(e: &TraceEvent, at: usize, s: Style) -> String {
    let text = plain(&describe_event(e));
    let painted = match e {
        TraceEvent::Note { kind, .. } if kind.needs_a_person() => s.yellow(&format!("⚑ {text}")),
        _ => s.dim(&format!("· {text}")),
    };
    format!("{}{}\n", " ".repeat(at), indent(&painted, at + 2))
}

/// The call a trace event belongs to, if any.
fn call_of(e: &TraceEvent) -> Option<&str> {
    match e {
        TraceEvent::ToolAttempt { call_id, .. }
        | TraceEvent::Backoff { call_id, .. }
        | TraceEvent::Fallback { call_id, .. } => Some(call_id),
        _ => None,
    }
}

fn result_lines(
    content: &Value,
    is_error: bool,
    entry: Option<&&JournalEntry>,
    s: Style,
) -> String {
    let attempts = entry.map(|e| e.attempts).or_else(|| {
        content
            .get("attempts")
            .and_then(Value::as_u64)
            .map(|n| n as u32)
    });
    let mut facts = Vec::new();
    if let Some(n) = attempts {
        facts.push(format!("{n} attempt{}", if n == 1 { "" } else { "s" }));
    }
    let via = entry
        .and_then(|e| e.via.clone())
        .or_else(|| content.get("via").and_then(Value::as_str).map(String::from));
    if let Some(via) = &via {
        facts.push(format!("via {}", one_line(via)));
    }
    if content.get("stale").and_then(Value::as_bool) == Some(true) {
        facts.push("stale".into());
    }
    let facts = if facts.is_empty() {
        String::new()
    } else {
        s.dim(&format!(" · {}", facts.join(" · ")))
    };
    if is_error {
        error_lines(content, &facts, s)
    } else {
        // A fallback's result is wrapped ({"result", "via", "stale"}); show the inner.
        let shown = match (via.is_some(), content.get("result")) {
            (true, Some(inner)) => inner,
            _ => content,
        };
        format!(
            "    {}{facts}\n{}",
            s.green("✓ ok"),
            body(&value_text(shown))
        )
    }
}

fn error_lines(content: &Value, facts: &str, s: Style) -> String {
    let field = |k: &str| content.get(k).and_then(Value::as_str);
    let kind = one_line(field("error").unwrap_or("error"));
    let class = field("class")
        .map(|c| format!(" ({})", one_line(c)))
        .unwrap_or_default();
    let mut out = format!("    {}{facts}\n", s.red(&format!("✗ {kind}{class}")));
    if let Some(m) = field("message") {
        out.push_str(&body(m));
    }
    if let Some(h) = field("hint") {
        out.push_str(&body(&format!("hint: {h}")).replacen("hint:", &s.dim("hint:"), 1));
    }
    out
}

/// Untrusted text (a tool's output, an error message) as a block: every line indented
/// below agentrun's own, no escape sequence of its own (issue 22).
fn body(text: &str) -> String {
    let folded = fold(&plain(text.trim_end()), FOLD_LINES, FOLD_BYTES);
    format!("{}{}\n", " ".repeat(BODY), indent(&folded, BODY))
}

/// A JSON string shows as its text; anything else as compact JSON.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One trace event in a line: used by `runs show` and the live progress lines.
pub fn describe_event(e: &TraceEvent) -> String {
    match e {
        TraceEvent::ToolAttempt {
            tool,
            attempt,
            elapsed_ms,
            error,
            class,
            message,
            ..
        } => match error {
            Some(kind) => format!(
                "{tool} attempt {attempt}: {} ({}) after {elapsed_ms} ms: {}",
                kind.as_str(),
                class.map_or("?", |c| c.as_str()),
                message.as_deref().unwrap_or("")
            ),
            None => format!("{tool} attempt {attempt}: ok in {elapsed_ms} ms"),
        },
        TraceEvent::Backoff {
            tool,
            attempt,
            delay_ms,
            retry_after,
            ..
        } => format!(
            "{tool}: waiting {} before attempt {attempt}{}",
            millis(*delay_ms),
            if *retry_after {
                " (the server's Retry-After)"
            } else {
                ""
            }
        ),
        TraceEvent::Fallback { from, to, .. } => format!("fallback: {from} failed, trying {to}"),
        TraceEvent::ModelRetry {
            model,
            attempt,
            error,
            delay_ms,
            ..
        } => format!(
            "model {model} attempt {attempt} failed ({error}); retrying in {}",
            millis(*delay_ms)
        ),
        TraceEvent::ModelFallback {
            from, to, error, ..
        } => {
            format!("model fallback: {from} failed ({error}), trying {to}")
        }
        TraceEvent::Note { kind, message, .. } => format!("{}: {message}", kind.as_str()),
        TraceEvent::Hook {
            hook,
            tool,
            decision,
            reason,
            updated_input,
            ..
        } => {
            let on = tool
                .as_deref()
                .map(|t| format!(" on {t}"))
                .unwrap_or_default();
            let why = reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            let input = updated_input
                .as_ref()
                .map(|v| format!(" (input rewritten to {v})"))
                .unwrap_or_default();
            format!("hook {hook}{on}: {decision}{why}{input}")
        }
        TraceEvent::ModelUsage {
            model,
            input,
            cached_input,
            cache_write,
            output,
            cost_usd,
            estimated,
        } => {
            // A scripted model has no cache: a share of it would only be noise.
            let ratio = hit_ratio(*input, *cached_input)
                .filter(|_| !model.starts_with("script:"))
                .map(|r| format!(" ({r} from the cache)"))
                .unwrap_or_default();
            let written = if *cache_write > 0 {
                format!(", {cache_write} written to the cache")
            } else {
                String::new()
            };
            let cost = if *cost_usd > 0.0 {
                format!(", {}", crate::money::usd(*cost_usd))
            } else {
                String::new()
            };
            let estimated = if *estimated {
                " (estimated: the provider reported no usage)"
            } else {
                ""
            };
            format!("{model}: {input} tokens in{ratio}{written}, {output} out{cost}{estimated}")
        }
    }
}

/// A step's usage without any prompt-cache figure (a scripted model, a server that
/// reports none of them) says nothing the header does not: not a line of its own —
/// unless it is an estimate, which each step says it is.
fn silent_usage(e: &TraceEvent) -> bool {
    matches!(
        e,
        TraceEvent::ModelUsage {
            cached_input: 0,
            cache_write: 0,
            estimated: false,
            ..
        }
    )
}

/// The run's prompt-cache figures (issue 23), for the `runs show` header.
pub fn cache_line(input: u64, cached: u64, written: u64) -> String {
    let ratio = hit_ratio(input, cached).unwrap_or_else(|| "0%".into());
    let written = if written > 0 {
        format!(", {written} written to it")
    } else {
        String::new()
    };
    format!("{ratio} of {input} input tokens read from the prompt cache{written}")
}

/// The cache hit ratio as people read it, `87%`; `None` without input.
pub fn hit_ratio(input: u64, cached: u64) -> Option<String> {
    (input > 0).then(|| format!("{:.0}%", cached.min(input) as f64 * 100.0 / input as f64))
}

/// `850 ms`, `2.5 s`: waits as people read them.
pub fn millis(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod sent_tests {
    use super::*;
    use crate::records::{Delivery, RunId, RunStatus, SentMessage};

    fn sent(delivered: Option<Delivery>) -> SentMessage {
        SentMessage {
            id: 1,
            run: RunId("r1".into()),
            text: "Use the EU list.".into(),
            by: "ana".into(),
            at: 0,
            delivered,
        }
    }

    #[test]
    fn a_message_pending_when_the_run_ended_says_it_was_never_delivered() {
        let pending = [sent(None)];
        let text = |status| render_sent(&pending, status, Style::PLAIN);
        assert!(text(RunStatus::Running).contains("not delivered yet"));
        assert!(text(RunStatus::Escalated).contains("not delivered yet"));
        for ended in [RunStatus::Completed, RunStatus::Cancelled] {
            let t = text(ended);
            assert!(
                t.contains(&format!("never delivered: the run was {ended}")),
                "{t}"
            );
        }
        let done = [sent(Some(Delivery { step: 2, seq: 9 }))];
        let t = render_sent(&done, RunStatus::Completed, Style::PLAIN);
        assert!(t.contains("delivered after step 2"), "{t}");
    }
}

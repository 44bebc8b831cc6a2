//! JSON shapes of docs/ARCHITECTURE.md §1 and the one-line summaries printed to stderr.

use crate::runner::RunOutcome;
use crate::store::{JournalEntry, RunId, RunRow, Store, StoredEvent, StoredMessage};
use crate::timefmt::rfc3339;
use serde_json::{Value, json};
use std::io::Write;

pub fn print_json(v: &Value) -> anyhow::Result<()> {
    let mut out = crate::out::stdout();
    serde_json::to_writer(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}

/// `{"run_id","status","answer","steps","tokens":{"input","output"},"escalation_id"}`.
///
/// A failed run has no answer: text it produced before failing (a response cut at the
/// output-token limit) is `partial_answer`, so a script reading `answer` never takes
/// it for one (issue 13).
pub fn outcome_json(o: &RunOutcome) -> Value {
    // `answer` is null when absent (docs/ARCHITECTURE.md §1). A completed run has its answer; a
    // budget stop reports what was done so far, the last assistant text (README). A run
    // waiting for a person or interrupted has none yet: the text it wrote is a step on
    // the way (e.g. "I'll send it now" beside a call awaiting approval), the same
    // whether `start` drove it or `resume` read it back. A failed run's cut-off text
    // is kept as `partial_answer`.
    use crate::store::RunStatus;
    let failed = o.status == RunStatus::Failed;
    let has_answer = matches!(o.status, RunStatus::Completed | RunStatus::BudgetExhausted);
    let mut v = json!({
        "run_id": o.run_id.as_str(),
        "status": o.status.as_str(),
        "answer": if has_answer { answer_value(o.answer.as_deref(), o.structured) } else { Value::Null },
        "steps": o.steps,
        "tokens": tokens_json(o),
        "escalation_id": o.escalation_id.map(|id| id.to_string()),
        "reason": o.reason,
        "cost_usd": o.cost_usd,
    });
    if failed {
        v["partial_answer"] = json!(o.answer);
    }
    v
}

/// `tokens` of an outcome; `estimated` only when some step's provider reported none.
fn tokens_json(o: &RunOutcome) -> Value {
    let mut v = json!({"input": o.input_tokens, "output": o.output_tokens});
    if o.tokens_estimated {
        v["estimated"] = json!(true);
    }
    v
}

/// An answer as `--json` gives it: the JSON value itself for a task with an
/// `output_schema` (issue 26; it was checked against the schema), else the text.
pub fn answer_value(answer: Option<&str>, structured: bool) -> Value {
    match answer {
        None => Value::Null,
        Some(a) if structured => serde_json::from_str(a).unwrap_or_else(|_| json!(a)),
        Some(a) => json!(a),
    }
}

/// The run's final line(s) for stderr, without elapsed time (see
/// [`crate::render::summary::final_line`], which live progress uses with it).
pub fn outcome_line(o: &RunOutcome) -> String {
    crate::render::summary::final_line(o, None, crate::render::Style::PLAIN)
}

/// One element of `runs list --json`.
pub fn run_summary_json(r: &RunRow) -> Value {
    let mut v = json!({
        "id": r.id.as_str(),
        "status": r.status.as_str(),
        "steps": r.steps,
        "tokens": {"input": r.input_tokens, "output": r.output_tokens},
        "cost_usd": r.cost_usd,
        "task": r.task,
        "created_at": rfc3339(r.created_at),
        "updated_at": rfc3339(r.updated_at),
    });
    // The worker holding the run, only when a worker does (issue 17).
    if let Some(w) = &r.worker {
        v["worker"] = w.as_str().into();
    }
    // A sub-agent's run names the run and call that started it (issue 26).
    if let Some(p) = &r.parent {
        v["parent"] = json!({"run_id": p.run.as_str(), "call_id": p.call});
    }
    // Where a fork's history came from, only for a fork (issue 21).
    if let Some(f) = &r.fork {
        v["forked_from"] = json!({"run_id": f.run.as_str(), "step": f.step});
    }
    v
}

/// A person's message for a run (`runs send`), in `runs show --json`.
pub fn sent_json(m: &crate::store::SentMessage) -> Value {
    json!({
        "id": m.id,
        "by": m.by,
        "text": m.text,
        "sent_at": rfc3339(m.at),
        "delivered_after_step": m.delivered.map(|d| d.step),
        "seq": m.delivered.map(|d| d.seq),
    })
}

/// `runs show --json`: the run's fields plus `messages`, `tool_calls` and `events`.
pub fn run_detail_json(
    r: &RunRow,
    messages: &[StoredMessage],
    journal: &[JournalEntry],
    events: &[StoredEvent],
) -> Value {
    let mut v = run_summary_json(r);
    let Some(obj) = v.as_object_mut() else {
        return v;
    };
    obj.insert("task_path".into(), json!(r.task_path));
    obj.insert("answer".into(), json!(r.answer));
    obj.insert("error".into(), json!(r.error));
    obj.insert("max_steps".into(), json!(r.max_steps));
    obj.insert("max_tokens".into(), json!(r.max_tokens));
    obj.insert(
        "messages".into(),
        messages.iter().map(message_json).collect(),
    );
    obj.insert("tool_calls".into(), journal.iter().map(call_json).collect());
    obj.insert("usage".into(), usage_json(events.iter().map(|e| &e.event)));
    obj.insert("events".into(), events.iter().map(event_json).collect());
    v
}

/// The run's model usage summed over its steps' `model_usage` events (issue 23): input,
/// the part read from the prompt cache and the part written to it, output, and the
/// cache hit ratio (`null` before any input).
pub fn usage_json<'a>(events: impl Iterator<Item = &'a crate::trace::TraceEvent>) -> Value {
    let mut total = crate::model::Usage::default();
    for e in events {
        if let crate::trace::TraceEvent::ModelUsage {
            input,
            cached_input,
            cache_write,
            output,
            estimated,
            ..
        } = e
        {
            total.add(crate::model::Usage {
                input: *input,
                output: *output,
                cached: *cached_input,
                cache_write: *cache_write,
                estimated: *estimated,
            });
        }
    }
    let mut v = json!({"input": total.input, "cached_input": total.cached,
           "cache_write": total.cache_write, "output": total.output,
           "cache_hit_ratio": total.cache_hit_ratio()});
    if total.estimated {
        // A provider reported no usage for some step: its counts are estimates.
        v["estimated"] = json!(true);
    }
    v
}

fn message_json(m: &StoredMessage) -> Value {
    json!({"seq": m.seq, "step": m.step, "role": m.message.role.as_str(),
           "content": m.message.content})
}

fn call_json(c: &JournalEntry) -> Value {
    json!({"step": c.step, "call_id": c.call_id, "tool": c.tool, "args": c.args,
           "status": c.status.as_str(), "attempts": c.attempts,
           "result": c.result, "via": c.via})
}

fn event_json(e: &StoredEvent) -> Value {
    let mut ev = serde_json::to_value(&e.event).unwrap_or(Value::Null);
    if let crate::trace::TraceEvent::ModelUsage {
        input,
        cached_input,
        ..
    } = &e.event
    {
        let ratio = (*input > 0).then(|| *cached_input.min(input) as f64 / *input as f64);
        ev["cache_hit_ratio"] = json!(ratio);
    }
    if let Some(o) = ev.as_object_mut() {
        o.insert("step".into(), json!(e.step));
        o.insert("at".into(), json!(rfc3339(e.at)));
    }
    ev
}

/// A JSON array whose elements `each` hands over one at a time.
fn stream<W: Write>(
    out: &mut W,
    each: impl FnOnce(&mut dyn FnMut(Value) -> anyhow::Result<()>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    out.write_all(b"[")?;
    let mut first = true;
    each(&mut |v: Value| {
        if !std::mem::take(&mut first) {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut *out, &v)?;
        Ok(())
    })?;
    out.write_all(b"]")?;
    Ok(())
}

/// `runs show --json`, written as it is read from the store (issue 14): `head` is the
/// document with the run's `messages`, `tool_calls` and `events` left empty (as
/// [`run_detail_json`] builds it from empty slices), and the output is the same bytes
/// as [`print_json`] of the full document, but those three arrays go out one element
/// at a time, read as they are written: the first output comes after one index lookup
/// and memory stays flat however long the run.
pub fn write_run_detail_json(
    out: &mut impl Write,
    store: &Store,
    run: &RunId,
    head: Value,
) -> anyhow::Result<()> {
    let Value::Object(fields) = head else {
        anyhow::bail!("run {run}: the document is not a JSON object");
    };
    out.write_all(b"{")?;
    for (i, (key, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut *out, key)?;
        out.write_all(b":")?;
        match key.as_str() {
            "messages" => stream(out, |f| store.each_message(run, |m| f(message_json(&m))))?,
            "tool_calls" => stream(out, |f| store.each_journal_entry(run, |c| f(call_json(&c))))?,
            "events" => stream(out, |f| store.each_event(run, |e| f(event_json(&e))))?,
            "usage" => {
                let mut usage = Vec::new();
                store.each_event(run, |e| {
                    if matches!(e.event, crate::trace::TraceEvent::ModelUsage { .. }) {
                        usage.push(e.event);
                    }
                    Ok::<(), anyhow::Error>(())
                })?;
                serde_json::to_writer(&mut *out, &usage_json(usage.iter()))?
            }
            _ => serde_json::to_writer(&mut *out, value)?,
        }
    }
    out.write_all(b"}\n")?;
    out.flush()?;
    Ok(())
}

/// Writes a human view to stdout (a closed pipe, `runs list | head`, is not an error:
/// [`super::out`]).
/// The text is made terminal-safe first ([`crate::text::terminal_safe`]): what
/// a tool or a model wrote never reaches the terminal as escape sequences.
pub fn print_out(text: &str) -> anyhow::Result<()> {
    let text = crate::text::terminal_safe(text);
    let mut out = crate::out::stdout();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Columns for tables: `COLUMNS` when set, else the terminal's width, else
/// [`crate::render::table::LINE`] (a pipe or a file).
pub fn stdout_width() -> usize {
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        return n;
    }
    terminal_width(libc::STDOUT_FILENO).unwrap_or(crate::render::table::LINE)
}

/// Columns of the terminal on stderr, for the live status line (issue 27: wider than
/// the terminal, it wraps and is redrawn a line short, which flickers): the terminal's
/// own width first (read on every redraw, so a resize counts), then `COLUMNS`, else 80.
pub fn stderr_width() -> usize {
    terminal_width(libc::STDERR_FILENO)
        .or_else(|| {
            std::env::var("COLUMNS")
                .ok()
                .and_then(|c| c.trim().parse::<usize>().ok())
                .filter(|n| *n > 0)
        })
        .unwrap_or(80)
}

/// The width of the terminal on `fd`, if it is one.
fn terminal_width(fd: libc::c_int) -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills the winsize we pass; on failure it is left zeroed.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, ModelResponse, Part, Role, StopReason, Usage};
    use crate::store::{CallRecord, CallStatus, NewRun, RunId, RunStatus, StepCommit};
    use crate::trace::TraceEvent;

    /// The streamed `runs show --json` is byte for byte the one built in memory.
    #[test]
    fn streamed_run_detail_is_the_same_bytes_as_the_built_one() {
        fn wait<T>(f: impl std::future::Future<Output = T>) -> T {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(f)
        }
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("a.db"), true).unwrap();
        let opening = [Message::text(Role::User, "task")];
        let lease = store
            .create_run(&NewRun {
                id: RunId::generate(),
                task: "task",
                task_path: "task.md",
                snapshot: "{}",
                scripts: &Default::default(),
                max_steps: 9,
                max_tokens: 99,
                messages: &opening,
                state: "{}",
            })
            .unwrap();
        for step in 1..=3u32 {
            let id = format!("call_{step}");
            let response = ModelResponse {
                message: Message {
                    role: Role::Assistant,
                    content: vec![Part::ToolCall {
                        id: id.clone(),
                        name: "t".into(),
                        args: json!({"i": step, "s": "ü\"\n"}),
                    }],
                },
                usage: Usage {
                    input: 1,
                    output: 1,
                    cached: 0,
                    cache_write: 0,
                    ..Default::default()
                },
                stop: StopReason::ToolUse,
                model: "script:x".into(),
            };
            let event = TraceEvent::ToolAttempt {
                call_id: id.clone(),
                tool: "t".into(),
                attempt: 1,
                elapsed_ms: 3,
                error: None,
                class: None,
                message: None,
                at_ms: None,
            };
            wait(store.record_model_turn(&lease, step, &response, std::slice::from_ref(&event)))
                .unwrap();
            let record = CallRecord {
                call_id: id.clone(),
                status: CallStatus::Ok,
                attempts: 1,
                result: json!({"n": step}),
                is_error: false,
                via: None,
            };
            let messages = [
                response.message.clone(),
                Message::tool_result(&id, record.result.clone(), false),
            ];
            wait(store.commit_step(
                &lease,
                &StepCommit {
                    step,
                    messages: &messages,
                    state: "{}",
                    input_tokens: u64::from(step),
                    output_tokens: u64::from(step),
                    cost_usd: 0.0,
                    status: RunStatus::Running,
                    answer: None,
                    error: None,
                    outcome: Some(&record),
                    events: &[event],
                    escalation: None,
                },
            ))
            .unwrap();
        }
        let row = store.run(&lease.run).unwrap();
        let escalations = json!([{"id": "1"}]);
        let mut built = run_detail_json(
            &row,
            &store.messages(&lease.run).unwrap(),
            &store.journal(&lease.run).unwrap(),
            &store.events(&lease.run).unwrap(),
        );
        built["escalations"] = escalations.clone();
        let mut want = serde_json::to_vec(&built).unwrap();
        want.push(b'\n');
        let mut head = run_detail_json(&row, &[], &[], &[]);
        head["escalations"] = escalations;
        let mut got = Vec::new();
        write_run_detail_json(&mut got, &store, &row.id, head).unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(want).unwrap()
        );
    }
}

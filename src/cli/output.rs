//! JSON shapes of DESIGN §1 and the one-line summaries printed to stderr.

use crate::runner::RunOutcome;
use crate::store::{JournalEntry, RunRow, StoredEvent, StoredMessage};
use crate::timefmt::rfc3339;
use serde_json::{Value, json};
use std::io::Write;

pub fn print_json(v: &Value) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
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
    let failed = o.status == crate::store::RunStatus::Failed;
    let mut v = json!({
        "run_id": o.run_id.as_str(),
        "status": o.status.as_str(),
        "answer": if failed { None } else { o.answer.as_deref() },
        "steps": o.steps,
        "tokens": {"input": o.input_tokens, "output": o.output_tokens},
        "escalation_id": o.escalation_id.map(|id| id.to_string()),
        "reason": o.reason,
    });
    if failed {
        v["partial_answer"] = json!(o.answer);
    }
    v
}

/// The run's final line(s) for stderr, without elapsed time (see
/// [`crate::render::summary::final_line`], which live progress uses with it).
pub fn outcome_line(o: &RunOutcome) -> String {
    crate::render::summary::final_line(o, None, crate::render::Style::PLAIN)
}

/// One element of `runs list --json`.
pub fn run_summary_json(r: &RunRow) -> Value {
    json!({
        "id": r.id.as_str(),
        "status": r.status.as_str(),
        "steps": r.steps,
        "tokens": {"input": r.input_tokens, "output": r.output_tokens},
        "task": r.task,
        "created_at": rfc3339(r.created_at),
        "updated_at": rfc3339(r.updated_at),
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
        messages
            .iter()
            .map(|m| {
                json!({"seq": m.seq, "step": m.step, "role": m.message.role.as_str(),
                       "content": m.message.content})
            })
            .collect(),
    );
    obj.insert(
        "tool_calls".into(),
        journal
            .iter()
            .map(|c| {
                json!({"step": c.step, "call_id": c.call_id, "tool": c.tool, "args": c.args,
                       "status": c.status.as_str(), "attempts": c.attempts,
                       "result": c.result, "via": c.via})
            })
            .collect(),
    );
    obj.insert(
        "events".into(),
        events
            .iter()
            .map(|e| {
                let mut ev = serde_json::to_value(&e.event).unwrap_or(Value::Null);
                if let Some(o) = ev.as_object_mut() {
                    o.insert("step".into(), json!(e.step));
                    o.insert("at".into(), json!(rfc3339(e.at)));
                }
                ev
            })
            .collect(),
    );
    v
}

/// Writes a human view to stdout, returning the error (a closed pipe: `runs list |
/// head`) instead of panicking like `print!`; `main` ends quietly on a broken pipe.
/// The text is made terminal-safe first ([`crate::render::text::terminal_safe`]): what
/// a tool or a model wrote never reaches the terminal as escape sequences.
pub fn print_out(text: &str) -> anyhow::Result<()> {
    let text = crate::render::text::terminal_safe(text);
    let mut out = std::io::stdout().lock();
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
    // SAFETY: TIOCGWINSZ fills the winsize we pass; on failure it is left zeroed.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 {
        usize::from(ws.ws_col)
    } else {
        crate::render::table::LINE
    }
}

/// True when `err` is a write to a closed pipe (the reader, e.g. `head`, has gone).
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|e| e.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
    })
}

//! `agentrun runs list` and `agentrun runs show`.

use super::{BadInput, Cli, Exit, open_store, output};
use crate::model::Part;
use crate::store::{RunStatus, Store};
use crate::timefmt::{age, rfc3339};
use crate::trace::TraceEvent;
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum RunsCmd {
    /// List runs, newest first.
    ///
    /// Example:
    ///   agentrun runs list --status budget_exhausted
    #[command(verbatim_doc_comment)]
    List {
        /// Only runs with this status: running, completed, awaiting_approval, escalated,
        /// budget_exhausted, interrupted, failed.
        #[arg(long, value_name = "STATUS")]
        status: Option<String>,
    },
    /// Show a run: the task, every step, tool calls with their results, and the trace.
    ///
    /// Example:
    ///   agentrun runs show 3f9a
    #[command(verbatim_doc_comment)]
    Show {
        /// The run's id, or a unique prefix of it.
        run_id: String,
    },
}

pub fn run(cli: &Cli, cmd: &RunsCmd) -> anyhow::Result<Exit> {
    let store = open_store(&cli.db_path(), false)?;
    match cmd {
        RunsCmd::List { status } => list(cli, &store, status.as_deref()),
        RunsCmd::Show { run_id } => show(cli, &store, run_id),
    }
}

fn list(cli: &Cli, store: &Store, status: Option<&str>) -> anyhow::Result<Exit> {
    let status = status
        .map(|s| {
            RunStatus::parse(s).ok_or_else(|| {
                let all: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
                BadInput(format!(
                    "--status: unknown status `{s}` (one of: {})",
                    all.join(", ")
                ))
            })
        })
        .transpose()?;
    let runs = store.list_runs(status)?;
    if cli.json {
        output::print_json(&runs.iter().map(output::run_summary_json).collect())?;
        return Ok(Exit::Completed);
    }
    let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    println!(
        "{:<12}  {:<17}  {:>5}  {:>9}  {:>4}  TASK",
        "ID", "STATUS", "STEPS", "TOKENS", "AGE"
    );
    for r in &runs {
        let first_line = r.task.lines().next().unwrap_or("");
        println!(
            "{:<12}  {:<17}  {:>5}  {:>9}  {:>4}  {}",
            r.id.as_str(),
            r.status.as_str(),
            r.steps,
            r.input_tokens + r.output_tokens,
            age(now, r.created_at),
            truncate(first_line, 60)
        );
    }
    Ok(Exit::Completed)
}

fn show(cli: &Cli, store: &Store, prefix: &str) -> anyhow::Result<Exit> {
    let id = store.find_run(prefix)?;
    let row = store.run(&id)?;
    let messages = store.messages(&id)?;
    let journal = store.journal(&id)?;
    let events = store.events(&id)?;
    if cli.json {
        output::print_json(&output::run_detail_json(&row, &messages, &journal, &events))?;
        return Ok(Exit::Completed);
    }
    println!("run {}  {}", row.id, row.status);
    println!("task file  {}", row.task_path);
    println!(
        "steps      {} of {}   tokens {} in + {} out of {}",
        row.steps, row.max_steps, row.input_tokens, row.output_tokens, row.max_tokens
    );
    println!(
        "created    {}   updated {}",
        rfc3339(row.created_at),
        rfc3339(row.updated_at)
    );
    if let Some(e) = &row.error {
        println!("reason     {e}");
    }
    let mut step = u32::MAX;
    for m in messages
        .iter()
        .filter(|m| m.message.role != crate::model::Role::System || m.step > 0)
    {
        if m.step != step {
            step = m.step;
            println!();
            println!("── step {step} ──");
            for e in events.iter().filter(|e| e.step == step) {
                println!("  · {}", describe_event(&e.event));
            }
        }
        for part in &m.message.content {
            println!("{}", describe_part(m.message.role.as_str(), part));
        }
    }
    Ok(Exit::Completed)
}

fn describe_part(role: &str, part: &Part) -> String {
    match part {
        Part::Text { text } => format!("{role:>9}: {}", indent(text)),
        Part::ToolCall { id, name, args } => format!("{role:>9}: call {name}({args})  [{id}]"),
        Part::ToolResult {
            call_id,
            content,
            is_error,
        } => {
            let tag = if *is_error { "error" } else { "result" };
            format!(
                "{role:>9}: {tag} [{call_id}] {}",
                truncate(&content.to_string(), 300)
            )
        }
    }
}

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
                "{tool} attempt {attempt}: {kind} ({}) after {elapsed_ms} ms: {}",
                class.as_deref().unwrap_or("?"),
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
            "{tool}: waiting {delay_ms} ms before attempt {}{}",
            attempt,
            if *retry_after { " (Retry-After)" } else { "" }
        ),
        TraceEvent::Fallback { from, to, .. } => format!("fallback: {from} -> {to}"),
        TraceEvent::ModelRetry {
            model,
            attempt,
            error,
            delay_ms,
        } => {
            format!("model {model} attempt {attempt} failed ({error}); retrying in {delay_ms} ms")
        }
        TraceEvent::ModelFallback { from, to, error } => {
            format!("model fallback: {from} -> {to} ({error})")
        }
        TraceEvent::Note { kind, message } => format!("{kind}: {message}"),
    }
}

fn indent(text: &str) -> String {
    text.replace('\n', "\n           ")
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    format!("{cut}…")
}

//! `agentrun start` and `agentrun resume`: create or reopen a run, drive it, report.

use super::{BadInput, Cli, Exit, open_store, output};
use crate::cli::progress::{Mode, Progress};
use crate::clock::SystemClock;
use crate::machine::state::LoopState;
use crate::model::{Message, Role};
use crate::runner::{RunError, RunOutcome, Runner};
use crate::setup::{self, Snapshot, StartOptions};
use crate::store::{Lease, NewRun, RunId, RunStatus, Store};
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

/// Start a run: read the task file, validate everything, and drive the loop.
///
/// Exit codes: 0 completed, 1 failed, 2 bad input (nothing written), 3 waiting for a
/// human, 4 stopped by the step/token budget, 130 interrupted (resumable).
///
/// Example:
///   agentrun start examples/quickstart/task.md --max-steps 10
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct StartArgs {
    /// The task file: Markdown, with optional TOML front matter between `+++` lines.
    #[arg(value_name = "TASK.md")]
    pub task: PathBuf,
    /// Tool definitions [default: tools.toml beside the task, else ./tools.toml]
    #[arg(long, value_name = "PATH")]
    pub tools: Option<PathBuf>,
    /// Model spec, overriding the task's front matter: openai:MODEL, anthropic:MODEL or
    /// script:PATH.
    #[arg(long, value_name = "SPEC")]
    pub model: Option<String>,
    /// Step budget (model calls) [default: front matter, else 30]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_steps: Option<u32>,
    /// Token budget, input + output [default: front matter, else 200000]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_tokens: Option<u64>,
}

/// Continue a run from its last committed step.
///
/// Finished work is not repeated: committed steps, stored model responses and journaled
/// tool results are reused. Raise a spent budget with --max-steps / --max-tokens (new
/// totals for the run).
///
/// Example:
///   agentrun resume 3f9a1c2b7d4e --max-steps 40
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct ResumeArgs {
    /// The run's id, or a unique prefix of it.
    pub run_id: String,
    /// New step budget for the whole run.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_steps: Option<u32>,
    /// New token budget for the whole run.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_tokens: Option<u64>,
}

pub fn start(cli: &Cli, args: &StartArgs) -> anyhow::Result<Exit> {
    let mut prepared = setup::prepare_start(&StartOptions {
        task: args.task.clone(),
        tools: args.tools.clone(),
        model: args.model.clone(),
        max_steps: args.max_steps,
        max_tokens: args.max_tokens,
    })?;
    let max_steps = args.max_steps.unwrap_or(prepared.max_steps);
    let max_tokens = args.max_tokens.unwrap_or(prepared.max_tokens);
    prepared.max_steps = max_steps;
    prepared.max_tokens = max_tokens;
    let store = Arc::new(open_store(&cli.db_path(), true)?);
    let snapshot = serde_json::to_string(&prepared.resolved.snapshot)?;
    let messages = [
        Message::text(
            Role::System,
            prepared.resolved.snapshot.prompts.system.trim(),
        ),
        Message::text(Role::User, &prepared.task.prompt),
    ];
    let state = serde_json::to_string(&LoopState::default())?;
    let id = RunId::generate();
    let lease = store.create_run(&NewRun {
        id: id.clone(),
        task: &prepared.task.prompt,
        task_path: &prepared.task.path.display().to_string(),
        snapshot: &snapshot,
        max_steps,
        max_tokens,
        messages: &messages,
        state: &state,
    })?;
    let progress = progress_for(cli);
    progress.say(format!(
        "agentrun: run {id} started ({})",
        args.task.display()
    ));
    let runner = Runner {
        store: store.clone(),
        lease,
        resolved: prepared.resolved,
        max_steps,
        max_tokens,
        clock: Arc::new(SystemClock),
        observer: progress.clone(),
    };
    drive(cli, &store, runner, &progress)
}

pub fn resume(cli: &Cli, args: &ResumeArgs) -> anyhow::Result<Exit> {
    let store = Arc::new(open_store(&cli.db_path(), false)?);
    let id = store.find_run(&args.run_id)?;
    let row = store.run(&id)?;
    if row.status == RunStatus::Completed {
        let outcome = stored_outcome(&store, &id)?;
        return report(cli, &outcome, true);
    }
    if let Some(open) = waiting_on(&store, &id)? {
        let mut outcome = stored_outcome(&store, &id)?;
        outcome.escalation_id = Some(open.id);
        outcome.reason = Some(format!(
            "waiting for escalation {} ({})",
            open.id, open.kind
        ));
        if !cli.quiet {
            eprintln!(
                "agentrun: run {id} is waiting for escalation {} ({}): {}\nagentrun: see `agentrun escalations show {}`, then decide with `agentrun escalations resolve {} ...`",
                open.id, open.kind, open.summary, open.id, open.id
            );
        }
        return report(cli, &outcome, true).map(|_| Exit::NeedsHuman);
    }
    let snapshot: Snapshot = serde_json::from_str(&store.snapshot(&id)?)
        .with_context(|| format!("run {id}: stored config snapshot is damaged"))?;
    let resolved = setup::resolve(snapshot)?;
    let lease = store.acquire(&id)?;
    let max_steps = args.max_steps.unwrap_or(row.max_steps);
    let max_tokens = args.max_tokens.unwrap_or(row.max_tokens);
    if max_steps != row.max_steps || max_tokens != row.max_tokens {
        store.set_budgets(&lease, max_steps, max_tokens)?;
    }
    store.set_status(&lease, RunStatus::Running, None)?;
    let progress = progress_for(cli);
    progress.say(format!(
        "agentrun: resuming run {id} after step {}",
        row.steps
    ));
    let runner = Runner {
        store: store.clone(),
        lease,
        resolved,
        max_steps,
        max_tokens,
        clock: Arc::new(SystemClock),
        observer: progress.clone(),
    };
    drive(cli, &store, runner, &progress)
}

fn progress_for(cli: &Cli) -> Arc<Progress> {
    Arc::new(Progress::new(if cli.quiet || cli.json {
        Mode::Quiet
    } else {
        Mode::Lines
    }))
}

/// Runs the loop until it stops or a signal arrives; then releases the run.
fn drive(
    cli: &Cli,
    store: &Arc<Store>,
    runner: Runner,
    progress: &Progress,
) -> anyhow::Result<Exit> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let lease = runner.lease.clone();
    let result = rt.block_on(async {
        let heartbeat = spawn_heartbeat(store.clone(), lease.clone());
        let r = tokio::select! {
            r = runner.run() => Some(r),
            _ = shutdown_signal() => None,
        };
        heartbeat.abort();
        r
    });
    // Dropping the runtime ends any tool still running (kill-on-drop children).
    drop(rt);
    let outcome = match result {
        // A store error stays itself, so its exit code is chosen as for any command.
        Some(r) => r.map_err(|e| match e {
            RunError::Store(e) => anyhow::Error::from(e),
            other => anyhow::Error::from(other),
        })?,
        None => {
            store.set_status(
                &lease,
                RunStatus::Interrupted,
                Some("interrupted by a signal"),
            )?;
            let mut o = stored_outcome(store, &lease.run)?;
            o.status = RunStatus::Interrupted;
            o.reason = Some("interrupted by a signal".into());
            o
        }
    };
    store.release(&lease)?;
    // The live display prints the final line itself (with the elapsed time).
    progress.finished(&outcome);
    report(cli, &outcome, false)
}

/// Keeps the lease fresh during long model or tool calls.
fn spawn_heartbeat(store: Arc<Store>, lease: Lease) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(10));
        loop {
            tick.tick().await;
            if store.heartbeat(&lease).is_err() {
                // The next write of the run reports the lost lease properly.
                return;
            }
        }
    })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// The open escalation a run waits for, if any.
fn waiting_on(store: &Store, id: &RunId) -> anyhow::Result<Option<crate::store::EscalationRow>> {
    Ok(store
        .escalations_for_run(id)?
        .into_iter()
        .find(|e| e.open && e.kind.pauses()))
}

/// A run's outcome as stored (for runs that are not driven now).
fn stored_outcome(store: &Store, id: &RunId) -> anyhow::Result<RunOutcome> {
    let row = store.run(id)?;
    let answer = row.answer.clone().or_else(|| {
        store.messages(id).ok().and_then(|ms| {
            ms.into_iter()
                .rev()
                .map(|m| m.message)
                .find(|m| m.role == Role::Assistant && !m.joined_text().is_empty())
                .map(|m| m.joined_text())
        })
    });
    Ok(RunOutcome {
        run_id: row.id,
        status: row.status,
        answer,
        steps: row.steps,
        input_tokens: row.input_tokens,
        output_tokens: row.output_tokens,
        escalation_id: None,
        reason: row.error,
    })
}

/// Prints the outcome: the answer (or the JSON object) on stdout, and — unless a live
/// display already did — the final line on stderr.
fn report(cli: &Cli, o: &RunOutcome, final_line: bool) -> anyhow::Result<Exit> {
    if cli.json {
        output::print_json(&output::outcome_json(o))?;
    } else {
        if let Some(answer) = o
            .answer
            .as_deref()
            .filter(|_| o.status == RunStatus::Completed)
        {
            println!("{answer}");
        }
        if final_line && !cli.quiet {
            eprintln!("{}", output::outcome_line(o));
        }
    }
    if o.status == RunStatus::Running {
        return Err(BadInput(format!("run {} is still running", o.run_id)).into());
    }
    Ok(Exit::for_status(o.status))
}

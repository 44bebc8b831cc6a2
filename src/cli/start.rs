//! `agentrun start` and `agentrun resume`: create or reopen a run, drive it, report.

use super::model_args::ModelArgs;
use super::{BadInput, Cli, Exit, open_store, output, settings};
use crate::cli::progress::{Mode, Progress};
use crate::clock::SystemClock;
use crate::config::preflight;
use crate::machine::state::LoopState;
use crate::model::{Message, Role};
use crate::runner::lifecycle::{self, Lifecycle};
use crate::runner::{RunError, RunOutcome, Runner};
use crate::setup::{self, SetupError, Snapshot, StartOptions};
use crate::store::{NewRun, RunId, RunStatus, Store};
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Start a run: read the task file, validate everything, and drive the loop.
///
/// Exit codes: 0 completed, 1 failed, 2 bad input (nothing written), 3 waiting for a
/// human, 4 stopped by the step/token budget, 130 interrupted (resumable).
///
/// Examples:
///   agentrun start examples/quickstart/task.md --max-steps 10
///   agentrun start --prompt "Summarise ORD-1001" --model openai:gpt-4o-mini
///   generate-task | agentrun start -
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct StartArgs {
    /// The task file: Markdown, with optional TOML front matter between `+++` lines;
    /// `-` reads it from stdin.
    #[arg(value_name = "TASK.md", required_unless_present = "prompt")]
    pub task: Option<PathBuf>,
    /// The task as text, instead of a file (no front matter: give --model, or set a
    /// default model with AGENTRUN_MODEL or the config file).
    #[arg(long, value_name = "TEXT", conflicts_with = "task")]
    pub prompt: Option<String>,
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
    /// Money budget in USD for the whole run, counted from each response's tokens at the
    /// model's list price (built in for OpenAI and Claude models; `price` in the front
    /// matter sets it)
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    /// Time budget for the whole run, e.g. 30m: time it is driven, across resumes
    #[arg(long, value_name = "DURATION")]
    pub max_duration: Option<humantime::Duration>,
    /// Print the model's streamed answer as JSON lines on stdout as it arrives
    /// ({"type":"text",…}, {"type":"tool_call",…}, {"type":"restart",…}), before the
    /// final answer (or --json object).
    #[arg(long)]
    pub stream_json: bool,
    #[command(flatten)]
    pub model_settings: ModelArgs,
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
    /// Money budget in USD for the whole run, counted from each response's tokens at the
    /// model's list price (built in for OpenAI and Claude models; `price` in the front
    /// matter sets it)
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    /// Time budget for the whole run, e.g. 30m: time it is driven, across resumes
    #[arg(long, value_name = "DURATION")]
    pub max_duration: Option<humantime::Duration>,
    /// Print the model's streamed answer as JSON lines on stdout as it arrives.
    #[arg(long)]
    pub stream_json: bool,
    /// Continue with this model instead (e.g. after a bad key): openai:MODEL,
    /// anthropic:MODEL or script:PATH. It replaces the run's model list from now on.
    #[arg(long, value_name = "SPEC")]
    pub model: Option<String>,
}

/// Where the task came from: its path (a name for stdin and --prompt) and, when it was
/// not read from that path, its text.
fn task_source(args: &StartArgs) -> anyhow::Result<(PathBuf, Option<String>)> {
    if let Some(text) = &args.prompt {
        return Ok((PathBuf::from("(prompt)"), Some(text.clone())));
    }
    match &args.task {
        Some(p) if p.as_os_str() == "-" => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| BadInput(format!("cannot read the task from stdin: {e}")))?;
            Ok((PathBuf::from("(stdin)"), Some(text)))
        }
        Some(p) => Ok((p.clone(), None)),
        None => {
            Err(BadInput("give a task file (or `-` for stdin), or --prompt TEXT".into()).into())
        }
    }
}

/// Everything `start` (and `submit`) check and read before anything is written: the
/// task, tools.toml with its preflight, the model, the budgets, the config snapshot.
pub(super) fn prepare(cli: &Cli, args: &StartArgs) -> anyhow::Result<(PathBuf, setup::Prepared)> {
    let (task_path, task_text) = task_source(args)?;
    let task = match &task_text {
        Some(t) => crate::task::parse(t, &task_path),
        None => crate::task::load(&task_path),
    }
    .map_err(SetupError::from)?;
    let tools = choose_tools(cli, args.tools.as_deref(), &task)?;
    if let Some(path) = &tools {
        preflight(path, task.tools.as_deref())?;
    }
    // A model from AGENTRUN_MODEL or the config file is a default for tasks naming none.
    let model = args.model.clone().or_else(|| {
        task.models
            .is_empty()
            .then(|| cli.settings.model.clone())
            .flatten()
    });
    let mut prepared = setup::prepare_start(&StartOptions {
        task: task_path.clone(),
        task_text,
        tools,
        model,
        max_steps: args.max_steps,
        max_tokens: args.max_tokens,
        settings: budget_input(
            args.model_settings.input().map_err(BadInput)?,
            args.max_cost,
            args.max_duration,
        )?,
        notify: cli.settings.notify.as_ref().map(|n| setup::NotifySnapshot {
            file: n.file.display().to_string(),
            cwd: n.cwd.display().to_string(),
            toml: n.toml.clone(),
        }),
    })?;
    let max_steps = args.max_steps.unwrap_or(prepared.max_steps);
    let max_tokens = args.max_tokens.unwrap_or(prepared.max_tokens);
    prepared.max_steps = max_steps;
    prepared.max_tokens = max_tokens;
    Ok((task_path, prepared))
}

pub fn start(cli: &Cli, args: &StartArgs) -> anyhow::Result<Exit> {
    let (task_path, prepared) = prepare(cli, args)?;
    let (max_steps, max_tokens) = (prepared.max_steps, prepared.max_tokens);
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
        scripts: &prepared.resolved.snapshot.scripts,
        max_steps,
        max_tokens,
        messages: &messages,
        state: &state,
    })?;
    let progress = progress_for(cli, args.stream_json);
    progress.say(format!(
        "agentrun: run {id} started ({})",
        task_path.display()
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
    if let Some(spec) = &args.model {
        crate::model::ModelSpec::parse(spec)
            .map_err(|e| SetupError::Usage(format!("--model: {e}")))?;
    }
    let store = Arc::new(open_store(&cli.db_path(), false)?);
    let id = super::find_run(&store, &args.run_id)?;
    let row = store.run(&id)?;
    if row.status == RunStatus::Cancelled {
        let why = row.error.as_deref().unwrap_or("cancelled");
        return Err(BadInput(format!(
            "run {id} is cancelled ({why}); a cancelled run is never resumed: start anew \
             from it with `agentrun runs fork {id}`"
        ))
        .into());
    }
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
            crate::errln!(
                "agentrun: run {id} is waiting for escalation {} ({}): {}\nagentrun: see `agentrun escalations show {}`, then decide with `agentrun escalations resolve {} ...`",
                open.id,
                open.kind,
                open.summary,
                open.id,
                open.id
            );
        }
        return report(cli, &outcome, true).map(|_| Exit::NeedsHuman);
    }
    let mut snapshot = stored_snapshot(&store, &id)?;
    if let Some(spec) = &args.model {
        setup::switch_model(&mut snapshot, spec, &row.task_path)?;
    }
    let budgets = budget_input(Default::default(), args.max_cost, args.max_duration)?;
    budgets.apply(&mut snapshot.settings);
    setup::check_pricing(&snapshot.settings, &snapshot.models)?;
    let edited = crate::digest::changed(&snapshot.program_digests);
    let resolved = setup::resolve(snapshot)?;
    let lease = store.acquire(&id)?;
    if args.model.is_some() || args.max_cost.is_some() || args.max_duration.is_some() {
        let snapshot = &resolved.snapshot;
        store.replace_snapshot(&lease, &serde_json::to_string(snapshot)?, &snapshot.scripts)?;
    }
    let max_steps = args.max_steps.unwrap_or(row.max_steps);
    let max_tokens = args.max_tokens.unwrap_or(row.max_tokens);
    if max_steps != row.max_steps || max_tokens != row.max_tokens {
        store.set_budgets(&lease, max_steps, max_tokens)?;
    }
    store.set_status(&lease, RunStatus::Running, None)?;
    let progress = progress_for(cli, args.stream_json);
    // A program edited since start (e.g. after its call was approved): say so, go on.
    // A notice like the others, so `--quiet` (and `--json`) silence it.
    for line in edited {
        progress.say(line);
    }
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

/// A run's config snapshot as stored, with its scripts; a store or setup error stays
/// itself, so its exit code is chosen as for any command.
pub(super) fn stored_snapshot(store: &Store, id: &RunId) -> anyhow::Result<Snapshot> {
    use crate::runner::worker::SnapshotError;
    crate::runner::worker::stored_snapshot(store, id).map_err(|e| match e {
        SnapshotError::Store(e) => e.into(),
        SnapshotError::Setup(e) => e.into(),
        other => other.into(),
    })
}

/// `--max-cost` / `--max-duration` over what the model flags gave, checked.
fn budget_input(
    mut input: crate::model::settings::SettingsInput,
    max_cost: Option<f64>,
    max_duration: Option<humantime::Duration>,
) -> anyhow::Result<crate::model::settings::SettingsInput> {
    input.max_cost = max_cost.or(input.max_cost);
    input.max_duration = max_duration.map(Into::into).or(input.max_duration);
    input
        .validate()
        .map_err(|e| BadInput(e.replace('`', "").replace("max_", "--max-")))?;
    Ok(input)
}

fn progress_for(cli: &Cli, stream_json: bool) -> Arc<Progress> {
    Arc::new(
        Progress::new(if cli.quiet || cli.json {
            Mode::Quiet
        } else {
            Mode::Lines
        })
        .with_stream_json(stream_json),
    )
}

/// The tools.toml a run uses: `--tools`, `AGENTRUN_TOOLS` or the config file's `tools`,
/// else the nearest one from the task's folder up, else the current folder's. None is
/// found only for a task that asks for no tools (`tools = []`); otherwise a run with
/// no tools would answer from nothing and exit 0 (issue 13), so it stops here.
fn choose_tools(
    cli: &Cli,
    flag: Option<&Path>,
    task: &crate::task::Task,
) -> anyhow::Result<Option<PathBuf>> {
    let chosen = match (flag, &cli.settings.tools) {
        (Some(p), _) => Some((p.to_path_buf(), "--tools")),
        (None, Some(p)) => Some((p.clone(), "AGENTRUN_TOOLS or the config file")),
        (None, None) => None,
    };
    if let Some((path, from)) = chosen {
        if !path.is_file() {
            return Err(BadInput(format!("{}: no such file (from {from})", path.display())).into());
        }
        return Ok(Some(path));
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let task_dir = task.path.parent().unwrap_or(Path::new(""));
    let candidates = settings::tools_candidates(task_dir, &cwd);
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        // Shown in messages: relative to here when it is below here.
        let short = found.strip_prefix(&cwd).unwrap_or(found);
        return Ok(Some(short.to_path_buf()));
    }
    if task.tools.as_ref().is_some_and(|t| t.is_empty()) {
        return Ok(None);
    }
    let searched: Vec<String> = candidates
        .iter()
        .map(|p| format!("  {}", p.display()))
        .collect();
    Err(BadInput(format!(
        "{}: no tools.toml found; searched:\n{}\nwrite one with `agentrun init`, pass --tools PATH, \
         or put `tools = []` in the task's front matter to run without tools",
        task.path.display(),
        searched.join("\n")
    ))
    .into())
}

/// The machine checks of `tools check` (interpreters, run bits, files, `${VAR}`s) for
/// the tools this run may call: every problem on stderr, then exit 2 with nothing
/// written.
pub(super) fn preflight(path: &Path, only: Option<&[String]>) -> anyhow::Result<()> {
    // Parse errors are reported by setup with the rest; only check a file that parses.
    let Ok((cfg, text)) = crate::config::load(path) else {
        return Ok(());
    };
    // Said once per start, as `tools check` says them (issue 22).
    for w in preflight::literal_credentials(&cfg, path) {
        crate::errln!("{w}");
    }
    super::tools::say_unpassed(&cfg, only);
    let problems = preflight::check(&cfg, &text, path, only, &preflight::Env::process());
    if problems.is_empty() {
        return Ok(());
    }
    for p in &problems {
        crate::errln!("agentrun: {p}");
    }
    Err(BadInput(format!(
        "{} tool problem{} found, nothing was started (check again with `agentrun tools check --tools {}`)",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" },
        path.display()
    ))
    .into())
}

/// After a run, open `tool_bug` reports are the last thing said: the run may have
/// completed, but a tool's owner has something to fix.
fn tool_bug_line(store: &Store, id: &RunId) -> Option<String> {
    let open: Vec<_> = store
        .escalations_for_run(id)
        .ok()?
        .into_iter()
        .filter(|e| e.open && e.kind == crate::store::EscalationKind::ToolBug)
        .collect();
    let first = open.first()?;
    Some(format!(
        "agentrun: {} open tool_bug report{} for this run: {} (see `agentrun escalations show {}`)",
        open.len(),
        if open.len() == 1 { "" } else { "s" },
        // The tool's own words (issue 22: without their escape sequences).
        crate::text::plain(&first.summary),
        first.id
    ))
}

/// Drives the run through the one lifecycle (`runner::lifecycle`: lease, heartbeat,
/// signals, cancel, release), then reports.
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
    let result = rt.block_on(lifecycle::drive(&runner, Lifecycle::process()));
    // Dropping the runtime ends any tool still running (kill-on-drop children).
    drop(rt);
    // A store error stays itself, so its exit code is chosen as for any command.
    let outcome = result.map_err(|e| match e {
        RunError::Store(e) => anyhow::Error::from(e),
        other => anyhow::Error::from(other),
    })?;
    // The live display prints the final line itself (with the elapsed time).
    progress.finished(&outcome);
    if let Some(line) = (!cli.quiet && !cli.json)
        .then(|| tool_bug_line(store, &outcome.run_id))
        .flatten()
    {
        crate::errln!("{line}");
    }
    report(cli, &outcome, false)
}

/// The open escalation a run waits for, if any.
fn waiting_on(store: &Store, id: &RunId) -> anyhow::Result<Option<crate::store::EscalationRow>> {
    Ok(store
        .escalations_for_run(id)?
        .into_iter()
        .find(|e| e.open && e.kind.pauses()))
}

/// A run's loop state as of its last commit (the default when it cannot be read).
pub(super) fn stored_state(store: &Store, id: &RunId) -> LoopState {
    store
        .checkpoint(id)
        .ok()
        .and_then(|(_, json)| serde_json::from_str(&json).ok())
        .unwrap_or_default()
}

/// A run's outcome as stored (for runs that are not driven now). `answer` is the
/// stored answer of a completed run; for any other run, the last text the model wrote,
/// as the driver reports it live; `output::outcome_json` decides what of it is shown
/// (an answer only for completed and budget-stopped runs).
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
        cost_usd: stored_state(store, id).cost_usd,
        tokens_estimated: stored_state(store, id).usage_estimated,
        structured: is_structured(store, id),
        stale_via: store
            .messages(id)
            .map(|ms| {
                let ms: Vec<_> = ms.into_iter().map(|m| m.message).collect();
                crate::recovery::fallback::stale_sources(&ms)
            })
            .unwrap_or_default(),
    })
}

/// Whether the run's task has an `output_schema` (its answer is JSON text).
pub(super) fn is_structured(store: &Store, id: &RunId) -> bool {
    store
        .snapshot(id)
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .is_some_and(|v| v["output"].is_object())
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
            // The model's text, which a document it read may have filled with escape
            // sequences (issue 22); --json keeps it as it is.
            crate::outln!("{}", crate::text::plain(answer))?;
        }
        if final_line && !cli.quiet {
            crate::errln!("{}", crate::text::plain(&output::outcome_line(o)));
        }
    }
    if o.status == RunStatus::Running {
        return Err(BadInput(format!("run {} is still running", o.run_id)).into());
    }
    Ok(Exit::for_status(o.status))
}

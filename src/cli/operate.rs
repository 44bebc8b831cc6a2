//! `agentrun runs fork` and `agentrun runs send` (issue 21): an operator's controls
//! over a run from any process sharing the database. The work is the library's
//! ([`crate::runner::operate`], shared with the console); this module parses and
//! prints.

use super::start::ResumeArgs;
use super::{BadInput, Cli, Exit, find_run, open_store, output};
use crate::runner::operate::{self, ForkOrder, OperateError};
use crate::setup::SetupError;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;

/// Start a new run from another run's history, up to the end of a committed step.
///
/// The fork copies the transcript, the loop state (budgets spent, breaker and stuck
/// detector) and the tool-call journal of steps 1..N, then continues with step N+1.
/// Steps up to N are never run again: their tools' effects are the original's,
/// recorded once. Calls after N get the fork's own AGENTRUN_CALL_IDs. The original
/// run is not changed; any run can be forked, a finished or cancelled one too.
///
/// With --model or --tools the fork runs with that config instead of the original's
/// snapshot (the system prompt already in the transcript stays).
///
/// Examples:
///   agentrun runs fork 3f9a --at-step 6 --model openai:gpt-4o
///   agentrun runs fork 3f9a --tools fixed-tools.toml --no-start --json
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct ForkArgs {
    /// The run to fork: its id, or a unique prefix of it.
    #[arg(value_name = "RUN_ID")]
    pub run_id: String,
    /// The last step copied [default: the run's last committed step]; 0 keeps only
    /// the task.
    #[arg(long, value_name = "N")]
    pub at_step: Option<u32>,
    /// Run the fork with this model instead: openai:MODEL, anthropic:MODEL or
    /// script:PATH.
    #[arg(long, value_name = "SPEC")]
    pub model: Option<String>,
    /// Run the fork with this tools.toml (and the prompts/ beside it) instead.
    #[arg(long, value_name = "PATH")]
    pub tools: Option<PathBuf>,
    /// Step budget of the fork, counting the copied steps [default: the original's]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_steps: Option<u32>,
    /// Token budget of the fork, counting the copied steps' [default: the original's]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_tokens: Option<u64>,
    /// Money budget in USD for the fork, counting what the copied steps spent
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    /// Time budget for the fork, e.g. 30m, counting the copied steps' time
    #[arg(long, value_name = "DURATION")]
    pub max_duration: Option<humantime::Duration>,
    /// Create the fork and stop: `agentrun resume ID` starts it later.
    #[arg(long)]
    pub no_start: bool,
    /// Print the model's streamed answer as JSON lines on stdout as it arrives.
    #[arg(long, conflicts_with = "no_start")]
    pub stream_json: bool,
}

/// Send a person's message to a running or waiting run.
///
/// The message is stored at once and delivered exactly once, as a user message, when
/// the run next begins a step: after the tool results of the step it is in, before
/// the model is asked again. A run driven by another process (or machine sharing the
/// database) picks it up there. A waiting run (escalated, interrupted, stopped by a
/// budget) reads it when it is resumed: sending does not resume it. A completed or
/// cancelled run reads no more: it is refused (fork it instead).
///
/// Example:
///   agentrun runs send 3f9a "Use the EU price list, not the US one." --by alice
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct SendArgs {
    /// The run: its id, or a unique prefix of it.
    #[arg(value_name = "RUN_ID")]
    pub run_id: String,
    /// The message, as the model will read it.
    #[arg(value_name = "TEXT")]
    pub text: String,
    /// Who is sending it, shown to the model and in `runs show` [default: $USER]
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

pub fn fork(cli: &Cli, args: &ForkArgs) -> anyhow::Result<Exit> {
    if let Some(spec) = &args.model {
        crate::model::ModelSpec::parse(spec)
            .map_err(|e| SetupError::Usage(format!("--model: {e}")))?;
    }
    if let Some(path) = args.tools.as_ref().filter(|p| !p.is_file()) {
        return Err(BadInput(format!("{}: no such file (from --tools)", path.display())).into());
    }
    let store = open_store(&cli.db_path(), false)?;
    let source = find_run(&store, &args.run_id)?;
    if let Some(path) = &args.tools {
        // Every problem of the new tools (for the tools the task may call) on stderr
        // before anything is written.
        let subset = super::start::stored_snapshot(&store, &source)?.tool_subset;
        super::start::preflight(path, subset.as_deref())?;
    }
    let order = ForkOrder {
        at_step: args.at_step,
        model: args.model.as_deref(),
        tools: args.tools.as_deref(),
        max_steps: args.max_steps,
        max_tokens: args.max_tokens,
    };
    let forked = operate::fork(&store, &source, &order).map_err(cli_error)?;
    let id = forked.id;
    if !cli.quiet {
        crate::errln!(
            "agentrun: run {id} forked from {source} at step {} ({})",
            forked.at_step,
            config_change(args)
        );
        if forked.in_doubt {
            crate::errln!(
                "agentrun: step {} of {source} holds a call that started and has no outcome; \
                 the fork carries it and asks a person before running it again",
                forked.at_step + 1
            );
        }
    }
    if args.no_start {
        if cli.json {
            output::print_json(&json!({
                "run_id": id.as_str(),
                "status": "interrupted",
                "forked_from": {"run_id": source.as_str(), "step": forked.at_step},
                "config_replaced": order.replaces_config(),
            }))?;
        } else {
            output::print_out(&format!("{id}\n"))?;
            if !cli.quiet {
                crate::errln!("agentrun: not started; `agentrun resume {id}` starts it");
            }
        }
        return Ok(Exit::Completed);
    }
    drop(store);
    // Started as any resumed run is: through the one lifecycle.
    super::start::resume(
        cli,
        &ResumeArgs {
            run_id: id.to_string(),
            max_steps: None,
            max_tokens: None,
            max_cost: args.max_cost,
            max_duration: args.max_duration,
            stream_json: args.stream_json,
            model: None,
        },
    )
}

/// What the fork runs with, in words for the person.
fn config_change(args: &ForkArgs) -> String {
    match (&args.model, &args.tools) {
        (None, None) => "with the original config".into(),
        (Some(m), None) => format!("config replaced: model {m}"),
        (None, Some(t)) => format!("config replaced: tools {}", t.display()),
        (Some(m), Some(t)) => format!("config replaced: model {m}, tools {}", t.display()),
    }
}

/// The library's refusal as the error the exit code is chosen from.
fn cli_error(e: OperateError) -> anyhow::Error {
    match e {
        OperateError::Store(e) => e.into(),
        OperateError::Setup(e) => e.into(),
        e if e.is_bad_input() => BadInput(e.to_string()).into(),
        e => e.into(),
    }
}

pub fn send(cli: &Cli, args: &SendArgs) -> anyhow::Result<Exit> {
    let by = args.by.clone().unwrap_or_else(super::operator);
    let store = open_store(&cli.db_path(), false)?;
    let id = find_run(&store, &args.run_id)?;
    let sent = operate::send(&store, &id, &args.text, &by).map_err(cli_error)?;
    let status = store.run(&id)?.status;
    if cli.json {
        output::print_json(&json!({
            "run_id": id.as_str(),
            "message_id": sent.id,
            "by": sent.by,
            "sent_at": crate::timefmt::rfc3339(sent.at),
            "run_status": status.as_str(),
            "delivered": false,
        }))?;
    } else if !cli.quiet {
        let when = match status {
            crate::store::RunStatus::Running | crate::store::RunStatus::Queued => {
                "when it next begins a step".to_string()
            }
            s => format!("when it is resumed (it is {s}; `agentrun resume {id}`)"),
        };
        crate::errln!(
            "agentrun: message {} from {} stored for run {id}; the model reads it {when}",
            sent.id,
            sent.by
        );
    }
    Ok(Exit::Completed)
}

//! `agentrun runs cancel`: parses, calls [`crate::runner::cancel::cancel`] for each
//! run, prints what became of it (issue 21).

use super::{BadInput, Cli, Exit, find_run, open_store, output};
use crate::runner::cancel::{self, CancelBy, Cancelled};
use crate::store::RunId;
use clap::Args;
use serde_json::json;

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Run ids, or unique prefixes.
    #[arg(value_name = "RUN_ID", required = true)]
    pub run_ids: Vec<String>,
    /// Why, kept with the run and shown by `runs show` and `runs list`.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Who cancels [default: $USER]
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// How long to wait for a running run's holder to stop it.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub wait: String,
}

pub fn run(cli: &Cli, args: &CancelArgs) -> anyhow::Result<Exit> {
    let wait = crate::config::parse_duration(&args.wait)
        .map_err(|e| BadInput(format!("--wait: {e} (e.g. 10s, 500ms)")))?;
    let store = open_store(&cli.db_path(), false)?;
    // Every id is checked before anything is cancelled: a typo cancels nothing.
    let ids: Vec<RunId> = args
        .run_ids
        .iter()
        .map(|p| find_run(&store, p))
        .collect::<anyhow::Result<_>>()?;
    let by = args.by.clone().unwrap_or_else(super::operator);
    let who = CancelBy {
        by: &by,
        reason: args.reason.as_deref(),
    };
    let mut exit = Exit::Completed;
    let mut report = Vec::new();
    for id in &ids {
        let result = cancel::cancel(&store, id, &who, wait)?;
        let (status, line) = match &result {
            Cancelled::Done { was_held: true } => {
                ("cancelled", "cancelled (its holder stopped it)".to_string())
            }
            Cancelled::Done { was_held: false } => ("cancelled", "cancelled".to_string()),
            Cancelled::Already => ("cancelled", "was already cancelled".to_string()),
            Cancelled::Pending => {
                exit = worse(exit, Exit::Failed);
                (
                    "cancel_requested",
                    format!(
                        "cancel requested; its holder has not stopped it within {}",
                        args.wait
                    ),
                )
            }
            Cancelled::Finished(s) => {
                exit = worse(exit, Exit::BadInput);
                (s.as_str(), format!("is {s}: nothing to cancel"))
            }
        };
        report.push(
            json!({"run_id": id.as_str(), "status": status, "by": by, "reason": args.reason}),
        );
        if !cli.json && !cli.quiet {
            crate::errln!("agentrun: run {id} {line}");
        }
    }
    if cli.json {
        output::print_json(&serde_json::Value::Array(report))?;
    }
    Ok(exit)
}

/// The exit code that says more: bad input over a failure over success.
fn worse(a: Exit, b: Exit) -> Exit {
    let rank = |e: Exit| match e {
        Exit::BadInput => 2,
        Exit::Failed => 1,
        _ => 0,
    };
    if rank(b) > rank(a) { b } else { a }
}

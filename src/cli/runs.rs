//! `agentrun runs list` and `agentrun runs show`: the stored runs, for people (tables
//! and transcripts from [`crate::render`]) and for scripts (`--json`, DESIGN §1).

use super::{BadInput, Cli, Exit, open_store, output};
use crate::render::{Style, table, transcript};
use crate::store::{RunStatus, Store};
use clap::Subcommand;

pub use crate::render::transcript::describe_event;

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
    let db = cli.db_path();
    match cmd {
        RunsCmd::List { status } => {
            let status = parse_status(status.as_deref())?;
            // The default database not existing yet just means no runs yet; a missing
            // file named by --db / AGENTRUN_DB is more likely a typo, and says so.
            let runs = if !cli.settings.db_chosen && !db.exists() {
                Vec::new()
            } else {
                open_store(&db, false)?.list_runs(status)?
            };
            print_list(cli, &runs, status, &db)
        }
        RunsCmd::Show { run_id } => show(cli, &open_store(&db, false)?, run_id),
    }
}

fn parse_status(status: Option<&str>) -> anyhow::Result<Option<RunStatus>> {
    let Some(s) = status else { return Ok(None) };
    RunStatus::parse(s).map(Some).ok_or_else(|| {
        let all: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
        BadInput(format!(
            "--status: unknown status `{s}`; use one of: {}",
            all.join(", ")
        ))
        .into()
    })
}

fn print_list(
    cli: &Cli,
    runs: &[crate::store::RunRow],
    status: Option<RunStatus>,
    db: &std::path::Path,
) -> anyhow::Result<Exit> {
    if cli.json {
        output::print_json(&runs.iter().map(output::run_summary_json).collect())?;
        return Ok(Exit::Completed);
    }
    if runs.is_empty() {
        // A note for the person, on stderr, so `runs list | wc -l` still counts runs.
        match status {
            Some(s) => eprintln!(
                "no runs with status {s} in {} (all runs: `agentrun runs list`)",
                db.display()
            ),
            None => eprintln!(
                "no runs yet in {} — start one with `agentrun start TASK.md`",
                db.display()
            ),
        }
        return Ok(Exit::Completed);
    }
    let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    print!("{}", table::runs_table(runs, now, Style::for_stdout()));
    Ok(Exit::Completed)
}

fn show(cli: &Cli, store: &Store, prefix: &str) -> anyhow::Result<Exit> {
    let id = super::find_run(store, prefix)?;
    let row = store.run(&id)?;
    let escalations = store.escalations_for_run(&id)?;
    if cli.json {
        // Streamed: first output at once and flat memory on a 100,000-step run (issue 14).
        let escalations = escalations
            .iter()
            .map(super::escalations::summary_json)
            .collect();
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        output::write_run_detail_json(&mut out, store, &row, escalations)?;
        return Ok(Exit::Completed);
    }
    let messages = store.messages(&id)?;
    let journal = store.journal(&id)?;
    let events = store.events(&id)?;
    let view = transcript::RunView {
        row: &row,
        messages: &messages,
        journal: &journal,
        events: &events,
        escalations: &escalations,
    };
    print!("{}", transcript::render(&view, Style::for_stdout()));
    Ok(Exit::Completed)
}

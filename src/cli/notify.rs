//! `agentrun notify`: what the outbox could not deliver (issue 24).

use super::{Cli, Exit, open_store, output};
use crate::render::table::{Column, Row, aligned};
use crate::store::Notice;
use crate::timefmt::rfc3339;
use clap::Subcommand;
use serde_json::{Value, json};
use std::fmt::Write;
use std::path::Path;

#[derive(Debug, Subcommand)]
pub enum NotifyCmd {
    /// List notification events whose delivery failed (with --all, every event),
    /// newest first. Failed ones are retried by the next agentrun process on the
    /// database, up to 5 passes.
    ///
    /// Example:
    ///   agentrun notify list --all
    #[command(verbatim_doc_comment)]
    List {
        /// Every event, delivered or not.
        #[arg(long)]
        all: bool,
    },
    /// Deliver pending events now (they also go out with every run, resume, worker,
    /// resolve and serve).
    ///
    /// Example:
    ///   agentrun notify deliver
    #[command(verbatim_doc_comment)]
    Deliver,
}

pub fn run(cli: &Cli, cmd: &NotifyCmd) -> anyhow::Result<Exit> {
    let db = cli.db_path();
    // As `runs list` and `escalations list` (issue 27): the default database not
    // existing yet means nothing yet; a missing file named by --db is an error.
    if let NotifyCmd::List { all } = cmd
        && !cli.settings.db_chosen
        && !db.exists()
    {
        return list(cli, &[], *all, &db);
    }
    let store = open_store(&db, false)?;
    match cmd {
        NotifyCmd::List { all } => list(cli, &store.list_notices(*all)?, *all, &db),
        NotifyCmd::Deliver => {
            let pass = crate::notify::deliver_pending_blocking(&store);
            if cli.json {
                output::print_json(&json!({
                    "delivered": pass.delivered, "skipped": pass.skipped, "failed": pass.failed
                }))?;
            } else {
                output::print_out(&format!(
                    "{} delivered, {} failed, {} with nothing to notify\n",
                    pass.delivered, pass.failed, pass.skipped
                ))?;
            }
            Ok(Exit::Completed)
        }
    }
}

fn to_json(n: &Notice) -> Value {
    json!({
        "event_id": n.id, "event": n.event.as_str(), "run_id": n.run_id.as_str(),
        "escalation_id": n.escalation_id, "kind": n.kind, "state": n.state,
        "attempts": n.attempts, "last_error": n.last_error,
        "created_at": rfc3339(n.created_at),
    })
}

/// The table of `runs list` and `escalations list` (aligned, cut to COLUMNS; issue
/// 27); nothing to list is a note on stderr naming the database, so `| wc -l` counts
/// events.
fn list(cli: &Cli, rows: &[Notice], all: bool, db: &Path) -> anyhow::Result<Exit> {
    if cli.json {
        output::print_json(&rows.iter().map(to_json).collect())?;
        return Ok(Exit::Completed);
    }
    if rows.is_empty() {
        crate::errln!(
            "no {}notification events in {}",
            if all { "" } else { "failed " },
            crate::store::shown(db)
        );
        return Ok(Exit::Completed);
    }
    let table: Vec<Row<'_>> = rows
        .iter()
        .map(|n| Row {
            cells: vec![
                n.id.clone(),
                n.event.as_str().to_string(),
                n.run_id.to_string(),
                n.state.clone(),
                n.attempts.to_string(),
            ],
            text: n.last_error.as_deref().unwrap_or(""),
        })
        .collect();
    let columns = [
        Column::left("EVENT"),
        Column::left("KIND"),
        Column::left("RUN"),
        Column::left("STATE"),
        Column::right("TRY"),
    ];
    let style = crate::render::Style::for_stdout();
    let mut o = String::new();
    for (i, line) in aligned(&columns, "ERROR", &table, output::stdout_width())
        .into_iter()
        .enumerate()
    {
        let line = if i == 0 { style.bold(&line) } else { line };
        writeln!(o, "{line}")?;
    }
    output::print_out(&o)?;
    Ok(Exit::Completed)
}

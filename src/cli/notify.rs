//! `agentrun notify`: what the outbox could not deliver (issue 24).

use super::{Cli, Exit, open_store, output};
use crate::store::Notice;
use crate::timefmt::rfc3339;
use clap::Subcommand;
use serde_json::{Value, json};
use std::fmt::Write;

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
    let store = open_store(&cli.db_path(), false)?;
    match cmd {
        NotifyCmd::List { all } => list(cli, &store.list_notices(*all)?, *all),
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

fn list(cli: &Cli, rows: &[Notice], all: bool) -> anyhow::Result<Exit> {
    if cli.json {
        output::print_json(&rows.iter().map(to_json).collect())?;
        return Ok(Exit::Completed);
    }
    let mut o = String::new();
    if rows.is_empty() {
        writeln!(
            o,
            "no {}notification events",
            if all { "" } else { "failed " }
        )?;
    } else {
        writeln!(
            o,
            "{:<36}  {:<19}  {:<12}  {:<9}  {:>3}  ERROR",
            "EVENT", "KIND", "RUN", "STATE", "TRY"
        )?;
        for n in rows {
            writeln!(
                o,
                "{:<36}  {:<19}  {:<12}  {:<9}  {:>3}  {}",
                n.id,
                n.event.as_str(),
                n.run_id.as_str(),
                n.state,
                n.attempts,
                n.last_error.as_deref().unwrap_or("")
            )?;
        }
    }
    output::print_out(&o)?;
    Ok(Exit::Completed)
}

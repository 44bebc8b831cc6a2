//! `agentrun limits`: each rate-limit key on the database — its limits, its use, what
//! is reserved and in flight, who waits, and what the provider said
//! (docs/rate-limits.md).

use super::{Cli, Exit, open_store, output};
use crate::govern::show;

/// Show the shared rate limits: each model endpoint's and tool's limit, its use in
/// the last window, the requests in flight and the tokens they reserve, the runs
/// waiting, and any pause or lower rate the provider asked for.
///
/// Keys appear once a run has used them; limits are set in tools.toml
/// (`[models."SPEC"]` rpm / tpm / max_concurrent, a tool's rate / max_concurrent).
///
/// Example:
///   agentrun limits --json
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct LimitsArgs {}

pub fn run(cli: &Cli, _args: &LimitsArgs) -> anyhow::Result<Exit> {
    let store = open_store(&cli.db_path(), false)?;
    let (rows, now) = store.limit_rows()?;
    let keys: Vec<show::KeyView> = rows.iter().map(|r| show::view(r, now)).collect();
    if cli.json {
        output::print_json(&serde_json::to_value(&keys)?)?;
    } else {
        crate::outln!("{}", show::table(&keys).trim_end())?;
    }
    Ok(Exit::Completed)
}

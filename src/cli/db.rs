//! `agentrun db check`: what the database is and whether agentrun can use it, on
//! either backend, without changing it (issue 25).

use super::{BadInput, Cli, Exit, output};
use crate::store::DbCheck;
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum DbCmd {
    /// Connect and report: server version, TLS in use, schema version, pending
    /// migrations, and any right agentrun lacks. Creates and migrates nothing.
    ///
    /// Exit 0 when agentrun can use the database, 2 when it cannot (unreachable, a
    /// missing right, a schema from a newer agentrun).
    ///
    /// Example:
    ///   AGENTRUN_DB='postgres://agentrun@db.internal/agentrun?sslmode=verify-full' agentrun db check
    #[command(verbatim_doc_comment)]
    Check,
}

pub fn run(cli: &Cli, cmd: &DbCmd) -> anyhow::Result<Exit> {
    let DbCmd::Check = cmd;
    let db = cli.db_path();
    super::warn_password_in_argv(&db);
    let check = crate::store::check(&db)?;
    if cli.json {
        output::print_json(&serde_json::to_value(&check)?)?;
    } else {
        print(&check)?;
    }
    if check.usable() {
        Ok(Exit::Completed)
    } else if cli.json {
        Ok(Exit::BadInput)
    } else {
        Err(BadInput(problem(&check)).into())
    }
}

fn print(c: &DbCheck) -> anyhow::Result<()> {
    crate::outln!("database     {}", c.database)?;
    crate::outln!("server       {}", c.server_version)?;
    match (&c.tls, c.backend) {
        (_, "sqlite") => crate::outln!("TLS          not applicable (a local file)")?,
        (Some(t), _) => crate::outln!("TLS          yes, {t}")?,
        (None, _) => crate::outln!("TLS          no (the connection is not encrypted)")?,
    }
    let pending = match c.pending_migrations {
        0 if c.schema_version > c.known_version => "written by a newer agentrun".to_string(),
        0 => "up to date".to_string(),
        n => format!("{n} migration(s) pending, applied on the next open"),
    };
    crate::outln!(
        "schema       version {} of {} ({pending})",
        c.schema_version,
        c.known_version
    )?;
    if let Some(n) = c.pool_size {
        crate::outln!(
            "connections  up to {n} per agentrun process, shared by its runs (--db-pool)"
        )?;
    }
    if c.missing_privileges.is_empty() {
        crate::outln!("privileges   ok")?;
    } else {
        for m in &c.missing_privileges {
            crate::outln!("missing      {m}")?;
        }
    }
    Ok(())
}

fn problem(c: &DbCheck) -> String {
    if c.schema_version > c.known_version {
        return format!(
            "database {} was written by a newer agentrun (schema {}, this build knows {})",
            c.database, c.schema_version, c.known_version
        );
    }
    format!(
        "database {}: agentrun lacks {}",
        c.database,
        c.missing_privileges.join("; ")
    )
}

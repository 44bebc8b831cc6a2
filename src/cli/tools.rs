//! `agentrun tools check`: validate a tools.toml and report every problem.

use super::{BadInput, Cli, Exit};
use crate::config;
use crate::tools::mcp;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum ToolsCmd {
    /// Validate tools.toml: every problem is reported with the file and the tool.
    ///
    /// Example:
    ///   agentrun tools check --tools ./tools.toml
    #[command(verbatim_doc_comment)]
    Check {
        /// The file to check [default: ./tools.toml]
        #[arg(long, value_name = "PATH", default_value = "tools.toml")]
        tools: PathBuf,
    },
}

pub fn run(cli: &Cli, cmd: &ToolsCmd) -> anyhow::Result<Exit> {
    let ToolsCmd::Check { tools } = cmd;
    match config::load(tools).and_then(|(cfg, text)| with_mcp_tools(tools, cfg, text)) {
        Ok((cfg, _)) => {
            if cli.json {
                let names: Vec<&String> = cfg.tools.keys().collect();
                super::output::print_json(&serde_json::json!({"ok": true, "tools": names}))?;
            } else {
                println!("{}: ok, {} tool(s)", tools.display(), cfg.tools.len());
                for t in cfg.tools.values() {
                    println!("  {:<20} {}", t.name, t.description);
                }
            }
            Ok(Exit::Completed)
        }
        Err(errs) => {
            if cli.json {
                let list: Vec<String> = errs.0.iter().map(|e| e.to_string()).collect();
                super::output::print_json(&serde_json::json!({"ok": false, "errors": list}))?;
                return Ok(Exit::BadInput);
            }
            for e in &errs.0 {
                eprintln!("{e}");
            }
            Err(BadInput(format!(
                "{}: {} problem(s) found",
                tools.display(),
                errs.0.len()
            ))
            .into())
        }
    }
}

/// Starts each MCP server, lists its tools and checks them like any tool's (issue 16);
/// the servers stop again when the check ends.
fn with_mcp_tools(
    path: &std::path::Path,
    mut cfg: config::ToolsConfig,
    text: String,
) -> Result<(config::ToolsConfig, String), config::ConfigErrors> {
    if cfg.mcp.is_empty() {
        return Ok((cfg, text));
    }
    let (pool, found) = mcp::discover(&cfg.mcp);
    let installed = found.and_then(|found| mcp::install(&mut cfg, &found, &mcp::Link::new(pool)));
    match installed {
        Ok(()) => Ok((cfg, text)),
        Err(problems) => Err(config::ConfigErrors(
            problems
                .into_iter()
                .map(|p| config::ConfigError {
                    file: path.to_path_buf(),
                    tool: None,
                    message: p.to_string(),
                })
                .collect(),
        )),
    }
}

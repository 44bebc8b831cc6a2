//! `agentrun tools check`: validate a tools.toml and report every problem, including
//! the pre-flight checks `start` runs too (see [`crate::config::preflight`]).

use super::{BadInput, Cli, Exit};
use crate::config::{self, preflight};
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
        /// The file to check [default: AGENTRUN_TOOLS, the config file's `tools`, else
        /// ./tools.toml]
        #[arg(long, value_name = "PATH")]
        tools: Option<PathBuf>,
    },
}

pub fn run(cli: &Cli, cmd: &ToolsCmd) -> anyhow::Result<Exit> {
    let ToolsCmd::Check { tools } = cmd;
    let tools = &tools
        .clone()
        .or_else(|| cli.settings.tools.clone())
        .unwrap_or_else(|| PathBuf::from("tools.toml"));
    // The file must parse before the machine checks (interpreters, run bits, `${VAR}`s)
    // mean anything; both kinds are listed together.
    let checked = config::load(tools).and_then(|(cfg, text)| {
        // Warnings go to stderr and leave the exit code alone.
        for w in preflight::literal_credentials(&cfg, tools) {
            crate::errln!("{w}");
        }
        say_unpassed(&cfg, None);
        let problems = preflight::check(&cfg, &text, tools, None, &preflight::Env::process());
        if problems.is_empty() {
            with_mcp_tools(tools, cfg)
        } else {
            Err(config::ConfigErrors(problems))
        }
    });
    match checked {
        Ok(cfg) => {
            // Each tool's sandbox (issue 22): what its process may touch.
            // A tool that starts no process here says what it is instead.
            let sandbox = |t: &config::ToolDef| {
                cfg.sandbox_of(t).map_or_else(
                    || {
                        match t.kind {
                            config::ToolKind::Agent(_) => {
                                "a sub-agent: a child run, whose tools have their own sandboxes"
                            }
                            _ => "an HTTP call: no process runs on this machine",
                        }
                        .to_string()
                    },
                    config::Sandbox::describe,
                )
            };
            if cli.json {
                let names: Vec<&String> = cfg.tools.keys().collect();
                let sandboxes: serde_json::Map<String, serde_json::Value> = cfg
                    .tools
                    .values()
                    .map(|t| (t.name.clone(), sandbox(t).into()))
                    .collect();
                let hooks: Vec<serde_json::Value> = hooks(&cfg)
                    .map(|(event, h)| {
                        serde_json::json!({
                            "event": event.key(),
                            "command": h.command.argv,
                            "sandbox": h.command.sandbox.describe(),
                        })
                    })
                    .collect();
                super::output::print_json(&serde_json::json!({
                    "ok": true, "tools": names, "sandbox": sandboxes, "hooks": hooks,
                }))?;
            } else {
                let n = cfg.tools.len();
                let plural = if n == 1 { "" } else { "s" };
                crate::outln!("{}: ok, {n} tool{plural}", tools.display())?;
                for t in cfg.tools.values() {
                    let description = crate::text::plain(&t.description);
                    crate::outln!("  {:<20} {}", t.name, description)?;
                    crate::outln!("  {:<20} ({})", "", sandbox(t))?;
                }
                // Hooks start a process too, in the sandbox of `[defaults]`.
                for (i, (event, h)) in hooks(&cfg).enumerate() {
                    if i == 0 {
                        crate::outln!("hooks:")?;
                    }
                    let argv = crate::text::one_line(&h.command.argv.join(" "));
                    crate::outln!("  {:<20} {argv}", event.key())?;
                    crate::outln!("  {:<20} ({})", "", h.command.sandbox.describe())?;
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
            // One style for everything agentrun says on stderr, as `start` prints the
            // same problems: `agentrun: FILE: tool `T`: KEY: what is wrong; the fix`.
            for e in &errs.0 {
                crate::errln!("agentrun: {e}");
            }
            let n = errs.0.len();
            Err(BadInput(format!(
                "{}: {n} problem{} found",
                tools.display(),
                if n == 1 { "" } else { "s" }
            ))
            .into())
        }
    }
}

/// Every hook of `cfg` with its event, in event then file order.
fn hooks(cfg: &config::ToolsConfig) -> impl Iterator<Item = (config::HookEvent, &config::Hook)> {
    cfg.hooks
        .by_event
        .iter()
        .flat_map(|(event, hooks)| hooks.iter().map(|h| (*event, h)))
}

/// Starts each MCP server, lists its tools and checks them like any tool's (issue 16);
/// the servers stop again when the check ends.
fn with_mcp_tools(
    path: &std::path::Path,
    mut cfg: config::ToolsConfig,
) -> Result<config::ToolsConfig, config::ConfigErrors> {
    if cfg.mcp.is_empty() {
        return Ok(cfg);
    }
    let (pool, found) = mcp::discover(&cfg.mcp);
    // `pool` lives to the end of the check: dropping it stops the servers.
    let installed = found.and_then(|found| mcp::install(&mut cfg, &found));
    drop(pool);
    match installed {
        Ok(()) => Ok(cfg),
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

/// Once per tool: variables its script reads that are set here and dropped by its
/// environment's allow-list ([`crate::tools::unpassed`]). Warnings: the exit code stays.
pub(super) fn say_unpassed(cfg: &config::ToolsConfig, only: Option<&[String]>) {
    let var = |n: &str| std::env::var_os(n);
    for t in cfg.tools.values() {
        if only.is_some_and(|o| !o.contains(&t.name)) {
            continue;
        }
        if let config::ToolKind::Command(spec) = &t.kind
            && let Some(w) = crate::tools::unpassed::warning(&t.name, spec, &var)
        {
            crate::errln!("{w}");
        }
    }
}

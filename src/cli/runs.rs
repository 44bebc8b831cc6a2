//! `agentrun runs …`: the stored runs, for people (tables and transcripts from
//! [`crate::render`]) and for scripts (`--json`, docs/ARCHITECTURE.md §1), and their upkeep
//! (`export`, `rm`, `prune`).

use super::{BadInput, Cli, Exit, find_run, open_store, output};
use crate::clock::{Clock, SystemClock};
use crate::render::{Style, table, transcript};
use crate::store::{RunId, RunRow, RunStatus, Store};
use clap::{Subcommand, ValueEnum};
use std::path::Path;

pub use crate::render::transcript::describe_event;

#[derive(Debug, Subcommand)]
pub enum RunsCmd {
    /// List runs, newest first.
    ///
    /// A `running` run whose process is gone (killed with -9, a power cut) shows as
    /// `stale`; `agentrun resume ID` continues it. COST appears when a run has a
    /// price; a narrow terminal (COLUMNS) drops TOKENS, STEPS, then AGE before the task.
    ///
    /// Examples:
    ///   agentrun runs list --status failed --status budget_exhausted --since 2d
    ///   agentrun runs ls --limit 5
    #[command(visible_alias = "ls", verbatim_doc_comment)]
    List {
        /// Only runs with this status; repeat for several.
        #[arg(long, value_name = "STATUS", value_enum)]
        status: Vec<StatusArg>,
        /// At most N runs (the newest).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
        /// Only runs started within a duration (30m, 2h, 7d) or since a UTC time
        /// (2026-11-30, "2026-11-30 14:00:00").
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
    },
    /// Show a run: the task, every step, tool calls with their results, and the trace.
    ///
    /// Two times: `wall time` (--json wall_ms) from creation to the last update,
    /// waits for people included (duration_ms is the same); `driven` (driven_ms)
    /// the part a process worked on the run, which max_duration counts.
    ///
    /// Examples:
    ///   agentrun runs show 3f9a
    ///   agentrun runs show 3f9a --follow     # then new steps as they happen
    #[command(verbatim_doc_comment)]
    Show {
        /// The run's id, or a unique prefix of it.
        #[arg(value_name = "RUN_ID")]
        run_id: String,
        /// Keep printing the run's new steps and trace until it stops.
        #[arg(long, short)]
        follow: bool,
    },
    /// Print a whole run as one JSON document: `runs show --json` plus the config
    /// snapshot it runs with (tools.toml, prompts, models).
    ///
    /// With --as-test DIR, write the run as a regression test instead: the task, the
    /// model's turns as a script, the tool results it saw and what to expect (calls in
    /// order with arguments, final answer and status), secrets redacted; re-run it with
    /// `agentrun test DIR`.
    ///
    /// Examples:
    ///   agentrun runs export 3f9a > run-3f9a.json
    ///   agentrun runs export 3f9a --as-test tests/cases/refund
    #[command(verbatim_doc_comment)]
    Export {
        /// The run's id, or a unique prefix of it.
        #[arg(value_name = "RUN_ID")]
        run_id: String,
        /// Write a test case folder (case.json, script.json) instead of printing.
        #[arg(long, value_name = "DIR")]
        as_test: Option<std::path::PathBuf>,
    },
    /// Remove runs and everything stored for them (transcript, journal, trace,
    /// escalations). A run that is live in another process is refused. A run that
    /// started sub-agents is refused unless --with-children removes them with it
    /// (they hold the task text it handed them).
    ///
    /// Example:
    ///   agentrun runs rm 3f9a 71c0
    ///   agentrun runs rm 3f9a --with-children
    #[command(verbatim_doc_comment)]
    Rm {
        /// Run ids, or unique prefixes.
        #[arg(value_name = "RUN_ID", required = true)]
        run_ids: Vec<String>,
        /// Also remove the runs' sub-agent runs, and theirs.
        #[arg(long)]
        with_children: bool,
    },
    /// Cancel runs, from any process sharing the database.
    ///
    /// A running run stops within a second (its holder is told through the database:
    /// the model request in flight is dropped, a running tool's process group
    /// killed); a queued or waiting run (escalated, interrupted, budget-stopped,
    /// failed) is cancelled at once and never taken by a worker. Its open escalations
    /// are closed. `cancelled` is final: start anew from it with `agentrun runs fork`.
    ///
    /// Exit codes: 0 every run is cancelled, 1 a holder had not stopped its run within
    /// --wait (the cancel stands; it stops at its next check), 2 no such run or a
    /// completed one (nothing was cancelled for it).
    ///
    /// Example:
    ///   agentrun runs cancel 3f9a --reason "wrong customer"
    #[command(verbatim_doc_comment)]
    Cancel(super::cancel::CancelArgs),
    Fork(super::operate::ForkArgs),
    Send(super::operate::SendArgs),
    /// Remove runs last updated longer ago than AGE.
    ///
    /// Kept whatever their age: runs still running, and runs waiting for a person
    /// (awaiting_approval, escalated, or with an open escalation). Removed text is
    /// overwritten in the SQLite file and its WAL; --vacuum also rebuilds the file
    /// (it shrinks, and nothing of older row versions is left in free space).
    ///
    /// Example:
    ///   agentrun runs prune --older-than 30d --dry-run
    ///   agentrun runs prune --older-than 90d --vacuum
    #[command(verbatim_doc_comment)]
    Prune {
        /// A duration: 12h, 30d, 8w.
        #[arg(long, value_name = "AGE")]
        older_than: String,
        /// Say what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Rebuild the database after removing (VACUUM): slower, needs free disk
        /// space the size of the database.
        #[arg(long, conflicts_with = "dry_run")]
        vacuum: bool,
    },
}

/// Run statuses as `--status` values (so completion offers them, not file names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum StatusArg {
    Running,
    Completed,
    AwaitingApproval,
    Escalated,
    BudgetExhausted,
    Interrupted,
    Failed,
    // Submitted and waiting for a worker (issue 17).
    Queued,
    // Cancelled by a person (issue 21).
    Cancelled,
}

impl StatusArg {
    fn status(self) -> RunStatus {
        match self {
            StatusArg::Queued => RunStatus::Queued,
            StatusArg::Running => RunStatus::Running,
            StatusArg::Completed => RunStatus::Completed,
            StatusArg::AwaitingApproval => RunStatus::AwaitingApproval,
            StatusArg::Escalated => RunStatus::Escalated,
            StatusArg::BudgetExhausted => RunStatus::BudgetExhausted,
            StatusArg::Interrupted => RunStatus::Interrupted,
            StatusArg::Failed => RunStatus::Failed,
            StatusArg::Cancelled => RunStatus::Cancelled,
        }
    }
}

pub fn run(cli: &Cli, cmd: &RunsCmd) -> anyhow::Result<Exit> {
    let db = cli.db_path();
    match cmd {
        RunsCmd::List {
            status,
            limit,
            since,
        } => {
            let statuses: Vec<RunStatus> = status.iter().map(|s| s.status()).collect();
            let since = since.as_deref().map(parse_since).transpose()?;
            // The default database not existing yet just means no runs yet; a missing
            // file named by --db / AGENTRUN_DB is more likely a typo, and says so.
            let runs = if !cli.settings.db_chosen && !db.exists() {
                Vec::new()
            } else {
                list(&open_store(&db, false)?, &statuses, *limit, since)?
            };
            print_list(cli, &runs, &statuses, since.is_some(), &db)
        }
        RunsCmd::Cancel(args) => super::cancel::run(cli, args),
        RunsCmd::Show { run_id, follow } => {
            let store = open_store(&db, false)?;
            let id = find_run(&store, run_id)?;
            if *follow {
                if cli.json {
                    return Err(BadInput("--follow prints for people; drop --json".into()).into());
                }
                return self::follow(&store, &id);
            }
            show(cli, &store, &id)
        }
        RunsCmd::Export { run_id, as_test } => {
            let store = open_store(&db, false)?;
            let id = find_run(&store, run_id)?;
            if let Some(dir) = as_test {
                return export_case(cli, &store, &id, dir);
            }
            output::print_json(&export_json(&store, &id)?)?;
            Ok(Exit::Completed)
        }
        RunsCmd::Fork(args) => super::operate::fork(cli, args),
        RunsCmd::Send(args) => super::operate::send(cli, args),
        RunsCmd::Rm {
            run_ids,
            with_children,
        } => rm(cli, &open_store(&db, false)?, run_ids, *with_children),
        RunsCmd::Prune {
            older_than,
            dry_run,
            vacuum,
        } => {
            let age = crate::config::parse_duration(older_than)
                .map_err(|e| BadInput(format!("--older-than: {e} (e.g. 30d, 12h)")))?;
            let store = open_store(&db, false)?;
            let exit = prune(cli, &store, age, *dry_run)?;
            if !*dry_run {
                store.scrub(*vacuum)?;
            }
            Ok(exit)
        }
    }
}

/// Runs matching every filter, newest first. One status (or none) with a limit reads
/// only the rows it returns; other filters walk the newest runs until enough match.
fn list(
    store: &Store,
    statuses: &[RunStatus],
    limit: Option<u32>,
    since_ms: Option<i64>,
) -> anyhow::Result<Vec<RunRow>> {
    if statuses.len() <= 1 && since_ms.is_none() {
        return Ok(store.recent_runs(statuses.first().copied(), limit)?);
    }
    let single = (statuses.len() == 1).then(|| statuses[0]);
    let mut out = Vec::new();
    for r in store.recent_runs(single, None)? {
        if since_ms.is_some_and(|t| r.created_at < t) {
            break; // newest first: everything after is older still
        }
        if statuses.is_empty() || statuses.contains(&r.status) {
            out.push(r);
            if limit.is_some_and(|n| out.len() >= n as usize) {
                break;
            }
        }
    }
    Ok(out)
}

/// `--since`: a duration back from now, or a UTC date or date-time.
fn parse_since(s: &str) -> anyhow::Result<i64> {
    let now = SystemClock.now_ms();
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(now - d.as_millis() as i64);
    }
    let with_time = format!("{s} 00:00:00");
    humantime::parse_rfc3339_weak(s)
        .or_else(|_| humantime::parse_rfc3339_weak(&with_time))
        .map(|t| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64)
        })
        .map_err(|_| {
            BadInput(format!(
                "--since: `{s}` is neither a duration (30m, 2h, 7d) nor a UTC time (2026-11-30, \"2026-11-30 14:00:00\")"
            ))
            .into()
        })
}

/// A `running` run that no live process holds: killed with -9, or its machine went
/// down. (A reused pid can make a dead run look alive; the lease expiry still lets
/// `resume` take it.)
///
/// A run a worker holds may be on another machine, so its pid says nothing here: it is
/// stale when its heartbeat is older than the lease TTL (issue 17).
pub fn is_stale(r: &RunRow) -> bool {
    if r.status != RunStatus::Running {
        return false;
    }
    if r.worker.is_some() {
        let now = crate::clock::Clock::now_ms(&SystemClock);
        return r
            .heartbeat
            .is_none_or(|h| now - h > crate::store::LEASE_TTL_MS);
    }
    !r.lease_pid.is_some_and(pid_alive)
}

fn pid_alive(pid: i64) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn print_list(
    cli: &Cli,
    runs: &[RunRow],
    statuses: &[RunStatus],
    since: bool,
    db: &Path,
) -> anyhow::Result<Exit> {
    if cli.json {
        let list = runs
            .iter()
            .map(|r| {
                let mut v = output::run_summary_json(r);
                v["stale"] = is_stale(r).into();
                v
            })
            .collect();
        output::print_json(&list)?;
        return Ok(Exit::Completed);
    }
    if runs.is_empty() {
        // A note for the person, on stderr, so `runs list | wc -l` still counts runs.
        if statuses.is_empty() && !since {
            crate::errln!(
                "no runs yet in {} — start one with `agentrun start TASK.md`",
                crate::store::shown(db)
            );
        } else {
            let names: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
            let with = if names.is_empty() {
                String::new()
            } else {
                format!(" with status {}", names.join(" or "))
            };
            crate::errln!(
                "no matching runs{with} in {} (all runs: `agentrun runs list`)",
                crate::store::shown(db)
            );
        }
        return Ok(Exit::Completed);
    }
    let opts = table::TableOptions {
        now_ms: SystemClock.now_ms(),
        width: output::stdout_width(),
        style: Style::for_stdout(),
        stale: &is_stale,
    };
    output::print_out(&table::runs_table(runs, &opts))?;
    Ok(Exit::Completed)
}

/// Model specs from the run's config snapshot (empty when it cannot be read).
fn models(store: &Store, id: &RunId) -> Vec<String> {
    store
        .snapshot_models(id)
        .ok()
        .flatten()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

fn detail_json(store: &Store, id: &RunId) -> anyhow::Result<serde_json::Value> {
    let row = store.run(id)?;
    let v = output::run_detail_json(
        &row,
        &store.messages(id)?,
        &store.journal(id)?,
        &store.events(id)?,
    );
    with_escalations(store, id, &row, v)
}

/// `runs show --json` with its three long arrays left empty, for
/// [`output::write_run_detail_json`] to stream into place.
fn detail_head(store: &Store, id: &RunId) -> anyhow::Result<serde_json::Value> {
    let row = store.run(id)?;
    with_escalations(
        store,
        id,
        &row,
        output::run_detail_json(&row, &[], &[], &[]),
    )
}

fn with_escalations(
    store: &Store,
    id: &RunId,
    row: &RunRow,
    mut v: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    v["escalations"] = store
        .escalations_for_run(id)?
        .iter()
        .map(super::escalations::summary_json)
        .collect();
    v["models"] = models(store, id).into();
    v["sent_messages"] = store
        .sent_messages(id)?
        .iter()
        .map(output::sent_json)
        .collect();
    v["stale"] = is_stale(row).into();
    let spent = Spent::of(store, id);
    v["cost_usd"] = spent.cost_usd.into();
    v["max_cost"] = spent.max_cost.into();
    // Two times, named for what they are: `wall_ms` from creation to the last write,
    // `driven_ms` the part a process worked on the run (what `max_duration` counts).
    // `duration_ms` is the run's duration as a reader takes it, the wall time: it once
    // held the driven time, which is wrong by hours for a run that waited for a person
    // (docs/commands.md, "Changes to the JSON output").
    let wall_ms = (row.updated_at - row.created_at).max(0);
    v["wall_ms"] = wall_ms.into();
    v["driven_ms"] = spent.active_ms.into();
    v["duration_ms"] = wall_ms.into();
    v["max_duration_ms"] = spent.max_duration_ms.into();
    v["last_compaction_step"] = spent.compactions.into();
    if super::start::is_structured(store, id) {
        v["answer"] = output::answer_value(row.answer.as_deref(), true);
    }
    // Sub-agents' runs (issue 26), only for a run that has them.
    let children = store.children(id)?;
    if !children.is_empty() {
        v["children"] = children
            .iter()
            .map(|c| {
                serde_json::json!({
                    "run_id": c.id.as_str(),
                    "call_id": c.parent.as_ref().map(|p| p.call.as_str()),
                    "status": c.status.as_str(),
                })
            })
            .collect();
    }
    let state = super::start::stored_state(store, id);
    if !state.children.is_zero() {
        v["children_spent"] = serde_json::to_value(state.children)?;
    }
    // Only for a run someone cancelled (other runs' documents are unchanged).
    if let Some(c) = store.cancel_info(id)? {
        v["cancelled"] = serde_json::json!({
            "by": c.by,
            "reason": c.reason,
            "at": crate::timefmt::rfc3339(c.at),
            // From the request to the run's last write as cancelled: how long its
            // holder took to stop it (0 for a run nobody held).
            "stopped_after_ms": (row.status == RunStatus::Cancelled)
                .then(|| (row.updated_at - c.at).max(0)),
        });
    }
    Ok(v)
}

/// `runs show` header lines: the spend, then who cancelled the run, when and why.
fn header_fields(store: &Store, id: &RunId) -> Vec<(&'static str, String)> {
    let mut out = spend_fields(&Spent::of(store, id));
    if let Ok(Some(c)) = store.cancel_info(id) {
        let why = c.reason.map(|r| format!(": {r}")).unwrap_or_default();
        out.push((
            "cancelled",
            format!("by {} at {}{why}", c.by, crate::timefmt::rfc3339(c.at)),
        ));
    }
    // Sub-agents (issue 26): whose child this run is, and its own children.
    if let Ok(Some(p)) = store.run(id).map(|r| r.parent) {
        out.push(("parent", format!("run {} (call {})", p.run, p.call)));
    }
    for child in store.children(id).unwrap_or_default() {
        let call = child.parent.map(|p| p.call).unwrap_or_default();
        out.push((
            "child",
            format!("run {} ({}, call {call})", child.id, child.status),
        ));
    }
    let state = super::start::stored_state(store, id);
    if !state.children.is_zero() {
        let c = &state.children;
        out.push((
            "children",
            format!(
                "spent {} step(s), {} tokens ({} in, {} out)",
                c.steps,
                c.tokens(),
                c.input_tokens,
                c.output_tokens
            ),
        ));
    }
    out
}

/// Money and time a run has spent, and its budgets (issue 15).
struct Spent {
    cost_usd: f64,
    max_cost: Option<f64>,
    active_ms: u64,
    max_duration_ms: Option<u64>,
    /// Whether the context was compacted (the last compaction's step).
    compactions: Option<u32>,
    /// Input tokens: all, read from the prompt cache, written to it (issue 23).
    input: u64,
    cached: u64,
    cache_write: u64,
    /// The token counts include agentrun's estimate (a provider reported none).
    estimated: bool,
}

impl Spent {
    fn of(store: &Store, id: &RunId) -> Spent {
        let state = super::start::stored_state(store, id);
        let settings: crate::model::ModelSettings = store
            .snapshot(id)
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .and_then(|v| serde_json::from_value(v["settings"].clone()).ok())
            .unwrap_or_default();
        Spent {
            cost_usd: state.cost_usd,
            max_cost: settings.max_cost,
            active_ms: state.active_ms,
            max_duration_ms: settings.max_duration_ms,
            compactions: state.compaction.map(|c| c.step),
            input: state.input_tokens,
            cached: state.cached_input_tokens,
            cache_write: state.cache_write_tokens,
            estimated: state.usage_estimated,
        }
    }
}

/// `runs show` header lines for [`Spent`]: shown when there is something to say.
fn spend_fields(s: &Spent) -> Vec<(&'static str, String)> {
    use crate::money::usd;
    let mut out = Vec::new();
    match s.max_cost {
        Some(max) => out.push(("cost", format!("{} of {}", usd(s.cost_usd), usd(max)))),
        None if s.cost_usd > 0.0 => out.push(("cost", usd(s.cost_usd))),
        None => {}
    }
    if s.cached > 0 || s.cache_write > 0 {
        out.push((
            "cache",
            crate::render::transcript::cache_line(s.input, s.cached, s.cache_write),
        ));
    }
    if s.estimated {
        out.push((
            "usage",
            "estimated (the provider reported none; about 4 bytes a token)".to_string(),
        ));
    }
    // Always, beside the header's `wall time` (issue 27): what a budget counts.
    let time = |ms: u64| crate::timefmt::duration(i64::try_from(ms).unwrap_or(i64::MAX));
    let driven = match s.max_duration_ms {
        Some(max) => format!("{} of {}", time(s.active_ms), time(max)),
        None => time(s.active_ms),
    };
    out.push(("driven", format!("{driven} (time agentrun worked on it)")));
    if let Some(step) = s.compactions {
        out.push((
            "context",
            format!("compacted (last at step {step}); the full transcript is below"),
        ));
    }
    out
}

/// `runs export`: one document a person can attach to a bug report or archive.
fn export_json(store: &Store, id: &RunId) -> anyhow::Result<serde_json::Value> {
    let mut v = detail_json(store, id)?;
    let snapshot: serde_json::Value =
        serde_json::from_str(&store.snapshot(id)?).unwrap_or(serde_json::Value::Null);
    v["export_version"] = 1.into();
    v["config_snapshot"] = snapshot;
    // Scripts are stored beside the snapshot; the export keeps them in it, as before.
    let scripts = store.scripts(id)?;
    if !scripts.is_empty() && v["config_snapshot"].is_object() {
        v["config_snapshot"]["scripts"] = serde_json::to_value(scripts)?;
    }
    Ok(v)
}

/// `runs export --as-test DIR`: the run as a regression test case
/// (`crate::evals::case`), redacted with the secrets the run's own config knows.
fn export_case(cli: &Cli, store: &Store, id: &RunId, dir: &Path) -> anyhow::Result<Exit> {
    let run = detail_json(store, id)?;
    let snapshot = super::start::stored_snapshot(store, id)?;
    let secrets = crate::runner::secrets::known(&snapshot);
    // The task file as it is now, only when it still holds this run's task.
    let task_file = Path::new(run["task_path"].as_str().unwrap_or_default());
    let task_file = crate::task::load(task_file)
        .ok()
        .filter(|t| run["task"].as_str() == Some(t.prompt.as_str()))
        .map(|t| t.path);
    let tools_file = Some(std::path::PathBuf::from(&snapshot.tools_path))
        .filter(|p| !snapshot.tools_path.is_empty() && p.is_file());
    let source = crate::evals::case::Source {
        run: &run,
        task_file,
        tools_file,
        tool_subset: snapshot.tool_subset.clone(),
        secrets: &secrets,
    };
    let expect = crate::evals::case::export(&source, dir)?;
    if cli.json {
        output::print_json(&serde_json::json!({
            "case": dir.display().to_string(),
            "calls": expect.calls.len(),
            "status": expect.status,
        }))?;
    } else if !cli.quiet {
        crate::errln!(
            "agentrun: wrote {} ({} call{}, {}); re-run it with `agentrun test {}`",
            dir.display(),
            expect.calls.len(),
            if expect.calls.len() == 1 { "" } else { "s" },
            expect.status,
            dir.display()
        );
    }
    Ok(Exit::Completed)
}

/// What the run's children were confined to (issue 22), from its config snapshot:
/// its command tools, the stdio MCP servers its task could use, and its hooks, those
/// with the same sandbox grouped on one line; none when nothing of the run is confined.
fn sandbox_field(store: &Store, id: &RunId) -> Option<(&'static str, String)> {
    let snapshot: crate::setup::Snapshot = serde_json::from_str(&store.snapshot(id).ok()?).ok()?;
    let cfg = crate::config::parse(
        &snapshot.tools_toml,
        std::path::Path::new(&snapshot.tools_path),
    )
    .ok()?;
    let children = confined_children(&cfg, snapshot.tool_subset.as_deref());
    // Runs with no sandbox at all keep the header they had (no line).
    if !children.iter().any(|(sb, _)| sb.confines()) {
        return None;
    }
    let mut groups: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (sb, name) in children {
        let names = groups.entry(sb.describe()).or_default();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let text: Vec<String> = groups
        .into_iter()
        .map(|(sb, names)| format!("{sb} ({})", names.join(", ")))
        .collect();
    Some(("sandbox", text.join("; ")))
}

/// Every child process a run of `cfg` may start, with its sandbox: the command tools
/// in `subset` (all without one), the stdio MCP servers with a tool in it
/// (`MCP server NAME`), and the hooks (`EVENT hook`, in `[defaults]`'s sandbox).
fn confined_children<'c>(
    cfg: &'c crate::config::ToolsConfig,
    subset: Option<&[String]>,
) -> Vec<(&'c crate::config::Sandbox, String)> {
    let named = |name: &str| subset.is_none_or(|s| s.iter().any(|n| n == name));
    let mut out: Vec<(&crate::config::Sandbox, String)> = cfg
        .tools
        .values()
        .filter(|t| named(&t.name))
        .filter_map(|t| match &t.kind {
            crate::config::ToolKind::Command(spec) => Some((&spec.sandbox, t.name.clone())),
            _ => None,
        })
        .collect();
    for (name, server) in &cfg.mcp {
        let prefix = format!("{name}{}", crate::config::MCP_SEPARATOR);
        let used = subset.is_none_or(|s| s.iter().any(|n| n.starts_with(&prefix)));
        if let crate::config::McpTransport::Stdio(spec) = &server.transport
            && used
        {
            out.push((&spec.sandbox, format!("MCP server {name}")));
        }
    }
    for (event, hooks) in &cfg.hooks.by_event {
        for hook in hooks {
            out.push((&hook.command.sandbox, format!("{} hook", event.key())));
        }
    }
    out
}

fn show(cli: &Cli, store: &Store, id: &RunId) -> anyhow::Result<Exit> {
    if cli.json {
        // Streamed: first output at once, flat memory on a 100,000-step run (issue 14).
        let mut out = std::io::BufWriter::new(crate::out::stdout());
        output::write_run_detail_json(&mut out, store, id, detail_head(store, id)?)?;
        return Ok(Exit::Completed);
    }
    // Streamed: the header at once, then a window of steps at a time (issue 14).
    let row = store.run(id)?;
    let escalations = store.escalations_for_run(id)?;
    let models = models(store, id);
    let mut spend = header_fields(store, id);
    spend.extend(sandbox_field(store, id));
    let head = super::runs_show::Head {
        row: &row,
        escalations: &escalations,
        models: &models,
        stale: is_stale(&row),
        spend: &spend,
        structured: super::start::is_structured(store, id),
    };
    let mut out = std::io::BufWriter::new(crate::out::stdout());
    super::runs_show::write(&mut out, store, id, &head)?;
    Ok(Exit::Completed)
}

/// The whole of `runs show` as text (the console's run page uses it with
/// [`Style::PLAIN`]).
pub fn render_text(store: &Store, id: &RunId, style: Style) -> anyhow::Result<String> {
    let row = store.run(id)?;
    let messages = store.messages(id)?;
    let journal = store.journal(id)?;
    let events = store.events(id)?;
    let escalations = store.escalations_for_run(id)?;
    let models = models(store, id);
    // The same header as the streamed `runs show`, the sandbox line included.
    let mut spend = header_fields(store, id);
    spend.extend(sandbox_field(store, id));
    let view = transcript::RunView {
        row: &row,
        messages: &messages,
        journal: &journal,
        events: &events,
        escalations: &escalations,
        models: &models,
        stale: is_stale(&row),
        spend: &spend,
    };
    let sent = transcript::render_sent(&store.sent_messages(id)?, row.status, style);
    Ok(transcript::render(&view, style) + &sent)
}

/// `runs show --follow`: the run so far, then its trace and the model's words as they
/// are committed, until it stops (or its process is found gone).
fn follow(store: &Store, id: &RunId) -> anyhow::Result<Exit> {
    // Counted before the render: a line written in between may show twice, never not.
    let mut seen_events = store.events(id)?.len();
    let mut seen_seq = store.messages(id)?.last().map_or(0, |m| m.seq);
    output::print_out(&render_text(store, id, Style::for_stdout())?)?;
    let mut printed_header = false;
    loop {
        let row = store.run(id)?;
        let mut lines = String::new();
        for e in store.events(id)?.iter().skip(seen_events) {
            lines.push_str(&format!(
                "  step {}: {}\n",
                e.step,
                describe_event(&e.event)
            ));
            seen_events += 1;
        }
        let last_seen = seen_seq;
        for m in store
            .messages(id)?
            .into_iter()
            .filter(|m| m.seq > last_seen)
        {
            seen_seq = m.seq;
            let text = m.message.joined_text();
            if m.message.role == crate::model::Role::Assistant && !text.trim().is_empty() {
                lines.push_str(&format!("  step {}: model: {}\n", m.step, text.trim()));
            }
        }
        if !lines.is_empty() {
            if !printed_header {
                lines.insert_str(0, "\nfollowing\n");
                printed_header = true;
            }
            output::print_out(&lines)?;
        }
        if row.status != RunStatus::Running || is_stale(&row) {
            let state = if is_stale(&row) {
                "stale (its process is gone)".to_string()
            } else {
                row.status.to_string()
            };
            output::print_out(&format!(
                "run {id} {state} after {} step{}\n",
                row.steps,
                if row.steps == 1 { "" } else { "s" }
            ))?;
            return Ok(Exit::Completed);
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

/// How often `--follow` reads the database: often enough to feel live, rare enough
/// to cost nothing next to a step.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// Why a run may not be removed now, if it may not.
fn held(r: &RunRow) -> Option<String> {
    (r.status == RunStatus::Running && !is_stale(r)).then(|| {
        format!(
            "run {} is running (pid {}); stop it first, or wait for it to end",
            r.id,
            r.lease_pid.unwrap_or_default()
        )
    })
}

fn rm(cli: &Cli, store: &Store, prefixes: &[String], with_children: bool) -> anyhow::Result<Exit> {
    // Resolve every id first: a typo in the third removes nothing.
    let named = prefixes
        .iter()
        .map(|p| find_run(store, p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut ids = Vec::new();
    for id in &named {
        let below = descendants(store, id)?;
        if !below.is_empty() && !with_children {
            return Err(BadInput(format!(
                "run {id} started {} sub-agent run{} (with theirs), which hold the task it \
                 handed them; remove them with it: agentrun runs rm {id} --with-children",
                below.len(),
                if below.len() == 1 { "" } else { "s" }
            ))
            .into());
        }
        // Children first: no moment leaves a child whose parent is gone.
        for d in below.into_iter().chain([id.clone()]) {
            if !ids.contains(&d) {
                ids.push(d);
            }
        }
    }
    for id in &ids {
        if let Some(why) = held(&store.run(id)?) {
            return Err(BadInput(why).into());
        }
    }
    for id in &ids {
        store.delete_run(id)?;
    }
    store.scrub(false)?;
    for id in &ids {
        if !cli.json {
            output::print_out(&format!("removed run {id}\n"))?;
        }
    }
    if cli.json {
        let removed: Vec<&str> = ids.iter().map(RunId::as_str).collect();
        output::print_json(&serde_json::json!({ "removed": removed }))?;
    }
    Ok(Exit::Completed)
}

/// Every sub-agent run below `id`, deepest first.
fn descendants(store: &Store, id: &RunId) -> anyhow::Result<Vec<RunId>> {
    let mut out = Vec::new();
    for child in store.children(id)? {
        out.extend(descendants(store, &child.id)?);
        out.push(child.id);
    }
    Ok(out)
}

fn prune(
    cli: &Cli,
    store: &Store,
    age: std::time::Duration,
    dry_run: bool,
) -> anyhow::Result<Exit> {
    let cutoff = SystemClock.now_ms() - age.as_millis() as i64;
    let mut remove = Vec::new();
    let (mut kept_running, mut kept_waiting) = (0, 0);
    for r in store.recent_runs(None, None)? {
        if r.updated_at >= cutoff {
            continue;
        }
        let waiting = matches!(r.status, RunStatus::AwaitingApproval | RunStatus::Escalated)
            || store
                .escalations_for_run(&r.id)?
                .iter()
                .any(|e| e.open && e.kind.pauses());
        if waiting {
            kept_waiting += 1;
        } else if held(&r).is_some() {
            kept_running += 1;
        } else {
            // A parent goes with its sub-agent runs (they hold the task it handed
            // them), or stays while one of them is still in use.
            let below = descendants(store, &r.id)?;
            let busy = below.iter().try_fold(false, |busy, d| {
                anyhow::Ok(busy || held(&store.run(d)?).is_some())
            })?;
            if busy {
                kept_running += 1;
                continue;
            }
            for d in below {
                if !remove.contains(&d) {
                    remove.push(d);
                }
            }
            if !remove.contains(&r.id) {
                remove.push(r.id);
            }
        }
    }
    if !dry_run {
        for id in &remove {
            store.delete_run(id)?;
        }
    }
    let ago = humantime::format_duration(age);
    if cli.json {
        let ids: Vec<&str> = remove.iter().map(RunId::as_str).collect();
        output::print_json(&serde_json::json!({
            "removed": if dry_run { Vec::new() } else { ids.clone() },
            "would_remove": if dry_run { ids } else { Vec::new() },
            "kept_waiting_for_a_person": kept_waiting,
            "kept_running": kept_running,
        }))?;
        return Ok(Exit::Completed);
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    let mut text = format!(
        "{verb} {} run{} last updated more than {ago} ago",
        remove.len(),
        if remove.len() == 1 { "" } else { "s" }
    );
    if kept_waiting + kept_running > 0 {
        text.push_str(&format!(
            "; kept {kept_waiting} waiting for a person and {kept_running} still running"
        ));
    }
    text.push('\n');
    if dry_run {
        for id in &remove {
            text.push_str(&format!("  {id}\n"));
        }
    }
    output::print_out(&text)?;
    Ok(Exit::Completed)
}

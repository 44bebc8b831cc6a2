//! The command line: argument definitions (their doc comments are the `--help` text),
//! dispatch, and the one place that maps outcomes and errors to exit codes.

mod cancel;
mod completions;
mod db;
mod escalations;
mod eval_cmd;
mod init;
mod limits;
mod model_args;
mod notify;
mod operate;
mod output;
pub mod progress;
mod queue;
mod runs;
mod runs_show;
mod serve;
pub mod settings;

pub use runs::{describe_event, render_text};
mod start;
mod test_cmd;
mod tools;

use crate::setup::SetupError;
use crate::store::{RunStatus, Store, StoreError};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

/// Exit codes (docs/ARCHITECTURE.md §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Completed = 0,
    Failed = 1,
    BadInput = 2,
    NeedsHuman = 3,
    Guard = 4,
    /// The run was cancelled (`agentrun runs cancel`): final (issue 21).
    Cancelled = 5,
    Interrupted = 130,
}

impl Exit {
    pub fn for_status(status: RunStatus) -> Exit {
        match status {
            RunStatus::Completed => Exit::Completed,
            RunStatus::Failed | RunStatus::Running | RunStatus::Queued => Exit::Failed,
            RunStatus::AwaitingApproval | RunStatus::Escalated => Exit::NeedsHuman,
            RunStatus::BudgetExhausted => Exit::Guard,
            RunStatus::Interrupted => Exit::Interrupted,
            RunStatus::Cancelled => Exit::Cancelled,
        }
    }

    /// Bad input (exit 2) when the error is about what the user gave us; else 1.
    pub fn for_error(err: &anyhow::Error) -> Exit {
        for cause in err.chain() {
            if cause.is::<SetupError>() || cause.is::<BadInput>() {
                return Exit::BadInput;
            }
            if let Some(e) = cause.downcast_ref::<crate::decide::DecideError>() {
                return if e.is_bad_input() {
                    Exit::BadInput
                } else {
                    Exit::Failed
                };
            }
            if let Some(e) = cause.downcast_ref::<StoreError>() {
                return if e.is_bad_input() {
                    Exit::BadInput
                } else {
                    Exit::Failed
                };
            }
        }
        Exit::Failed
    }
}

/// A usage problem found by a command (not by clap).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// agentrun runs an LLM tool-use loop until the task is done — and keeps going when
/// tools time out, APIs rate-limit or the process is killed.
///
/// Every step is committed to SQLite, so `agentrun resume RUN_ID` continues a stopped
/// run from the next step. What code cannot fix goes to a human queue.
///
/// Quick start:
///   agentrun start examples/quickstart/task.md
///   agentrun runs list
///   agentrun runs show RUN_ID
#[derive(Debug, Parser)]
#[command(
    name = "agentrun",
    version,
    max_term_width = 100,
    verbatim_doc_comment,
    after_help = GLOBAL_HELP
)]
pub struct Cli {
    // The three global options are hidden from the generated lists, so they do not
    // repeat in every subcommand's help (issue 13); GLOBAL_HELP describes them once.
    /// SQLite database holding all runs, or a postgres:// URL.
    #[arg(
        long,
        global = true,
        env = "AGENTRUN_DB",
        value_name = "PATH",
        hide = true
    )]
    pub db: Option<PathBuf>,
    /// PostgreSQL: the most connections this process opens (env AGENTRUN_DB_POOL).
    #[arg(long, global = true, value_name = "N", hide = true, value_parser = parse_pool)]
    pub db_pool: Option<u32>,
    /// Print exactly one JSON object (or array) on stdout when the command ends.
    #[arg(long, global = true, hide = true)]
    pub json: bool,
    /// No progress lines on stderr.
    #[arg(long, short, global = true, hide = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
    /// Settings after the config file and environment are applied (filled by [`run`]).
    #[arg(skip)]
    pub settings: settings::Settings,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Start(start::StartArgs),
    Resume(start::ResumeArgs),
    /// Queue a run for the workers: check and snapshot everything as `start` does,
    /// record the run as `queued`, print its id.
    #[command(long_about = SUBMIT_HELP)]
    Submit(start::StartArgs),
    Worker(queue::WorkerArgs),
    Serve(serve::ServeArgs),
    /// List and inspect runs.
    #[command(subcommand)]
    Runs(runs::RunsCmd),
    /// The human queue: escalations that wait for a person's decision.
    #[command(subcommand)]
    Escalations(escalations::EscalationsCmd),
    /// Notifications: events the outbox could not deliver.
    #[command(subcommand)]
    Notify(notify::NotifyCmd),
    /// Check tool definitions.
    #[command(subcommand)]
    Tools(tools::ToolsCmd),
    /// Look at the database: server version, TLS, schema, missing rights.
    #[command(subcommand)]
    Db(db::DbCmd),
    Test(test_cmd::TestArgs),
    Eval(eval_cmd::EvalArgs),
    /// Answers a replayed tool's call from a recorded case (run by `agentrun test`).
    #[command(hide = true)]
    ReplayTool(test_cmd::ReplayToolArgs),
    Limits(limits::LimitsArgs),
    Init(init::InitArgs),
    Completions(completions::CompletionsArgs),
    Man(completions::ManArgs),
}

pub use settings::DEFAULT_DB;

/// `submit --help` (its arguments are `start`'s, whose doc comment would say "start").
const SUBMIT_HELP: &str = "\
Queue a run for the workers: check and snapshot everything as `start` does (a bad task
or tools.toml exits 2 and writes nothing), record the run as `queued`, and print its
id. `agentrun worker` drives it, on this machine or any other sharing the database.

Examples:
  agentrun submit examples/quickstart/task.md      # prints the run's id
  agentrun worker --until-idle                     # drive every queued run, then exit
  agentrun runs show RUN_ID";

/// The global options, described once (top-level help and man page).
const GLOBAL_HELP: &str = "\
Global options (any command, before or after it):
      --db <PATH>  SQLite database holding all runs (env AGENTRUN_DB) [default: the nearest
                   .agentrun/agentrun.db from here up, else ./.agentrun/agentrun.db];
                   a postgres:// or postgresql:// URL selects PostgreSQL instead
      --db-pool <N>  PostgreSQL: the most connections this process opens, shared by all
                   its runs (env AGENTRUN_DB_POOL, config db_pool) [default: 10]
      --json       Print exactly one JSON object (or array) on stdout when the command ends
  -q, --quiet      No progress lines on stderr

Settings, strongest first: the command line; AGENTRUN_DB, AGENTRUN_MODEL, AGENTRUN_TOOLS;
the config file (AGENTRUN_CONFIG, else .agentrun/config.toml beside the database, keys
model, database, tools, db_pool). Manual pages: `agentrun man [COMMAND]`.";

/// Pointed to from every subcommand's help instead of repeating the list.
const GLOBAL_HINT: &str = "Global options: --db PATH, --json, --quiet (see `agentrun --help`).";

/// `--db-pool`'s value: 1 to [`settings::MAX_POOL`].
fn parse_pool(text: &str) -> Result<u32, String> {
    settings::pool_size(text)
        .ok_or_else(|| format!("not a whole number from 1 to {}", settings::MAX_POOL))
}

/// The clap command with the global-options hint on every subcommand: what `main`
/// parses with, and what completions and man pages are generated from.
pub fn command() -> clap::Command {
    fn hint(cmd: clap::Command) -> clap::Command {
        cmd.after_help(GLOBAL_HINT).mut_subcommands(hint)
    }
    <Cli as clap::CommandFactory>::command().mut_subcommands(hint)
}

/// Parses the process arguments. Usage errors use agentrun's own style, `agentrun:
/// …` (clap's is `error: …`), and exit 2; help and version print as usual.
pub fn parse() -> Result<Cli, Exit> {
    use clap::FromArgMatches;
    use clap::error::ErrorKind;
    let err = match command().try_get_matches() {
        Ok(m) => match Cli::from_arg_matches(&m) {
            Ok(cli) => return Ok(cli),
            Err(e) => e,
        },
        Err(e) => e,
    };
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        err.exit();
    }
    let text = err.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text).trim_end();
    crate::errln!("agentrun: {text}");
    if wants_json(std::env::args_os()) {
        let first = text.lines().next().unwrap_or_default();
        let _ = output::print_json(&error_json(FailureKind::Usage, first));
    }
    Err(Exit::BadInput)
}

/// Whether `--json` is among the arguments (before a `--`), for errors clap reports
/// before there is a parsed command line to ask.
fn wants_json(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    args.skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// What kind of error ended a command before (or instead of) its output: the `kind` of
/// the `--json` error object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The command line itself (unknown option, missing argument): exit 2.
    Usage,
    /// A file, setting or value the user gave: exit 2.
    BadInput,
    /// Anything else (the database, the network, a bug): exit 1.
    Failed,
}

impl FailureKind {
    fn as_str(self) -> &'static str {
        match self {
            FailureKind::Usage => "usage",
            FailureKind::BadInput => "bad_input",
            FailureKind::Failed => "failed",
        }
    }
}

/// `{"error": {"kind", "message"}}`: what `--json` prints when a command fails before
/// its own object (issue 27: `--json` promises exactly one JSON object).
fn error_json(kind: FailureKind, message: &str) -> serde_json::Value {
    serde_json::json!({"error": {"kind": kind.as_str(), "message": message}})
}

/// Says why a command failed — one line on stderr, one cause after another ("file:
/// problem"), and with `--json` the error object on stdout — and returns its exit code.
pub fn report_error(err: &anyhow::Error, json: bool) -> Exit {
    // Provider and tool messages, an MCP server's stderr: untrusted text, shown
    // without its escape sequences (issue 22); --json keeps the data.
    crate::errln!("agentrun: {}", crate::text::plain(&format!("{err:#}")));
    let exit = Exit::for_error(err);
    if json && !crate::out::stdout_written() {
        let kind = match exit {
            Exit::BadInput => FailureKind::BadInput,
            _ => FailureKind::Failed,
        };
        let _ = output::print_json(&error_json(kind, &format!("{err:#}")));
    }
    exit
}

impl Cli {
    fn db_path(&self) -> PathBuf {
        self.settings.db.clone()
    }
}

/// Hides the database and the config file from every sandboxed child, as soon as
/// they are known: before any command can start a tool, hook or MCP server.
fn protect(settings: &settings::Settings) {
    let db = &settings.db;
    if !db.to_str().is_some_and(crate::store::is_postgres_url) {
        crate::tools::sandbox::protect_database(db);
    }
    if let Some(config) = &settings.config {
        crate::tools::sandbox::protect_file(config);
    }
    if let Some(mode) = settings.sandbox {
        crate::config::set_base_sandbox(mode);
    }
}

/// Opens the store; `create` only for commands that start runs.
fn open_store(path: &Path, create: bool) -> anyhow::Result<Store> {
    warn_password_in_argv(path);
    let store = Store::open(path, create)?;
    if let Store::Sqlite(_) = store {
        crate::tools::sandbox::protect_database(path);
    }
    Ok(store)
}

/// Warns once per process when the database URL carries a password and came from the
/// command line, where every user of the machine can read it in the process list
/// (issue 25). The same URL from AGENTRUN_DB or the config file is not shown there.
pub(crate) fn warn_password_in_argv(path: &Path) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let Some(url) = path.to_str().filter(|u| crate::store::url_has_password(u)) else {
        return;
    };
    if std::env::args_os().any(|a| a.to_str().is_some_and(|a| a.contains(url))) {
        ONCE.call_once(|| {
            crate::errln!(
                "agentrun: warning: the password in --db is visible to every user of this machine in the process list; use PGPASSWORD or ~/.pgpass instead"
            );
        });
    }
}

/// A run by id or unique prefix; "not found" names the database file, since the
/// usual cause is looking in another folder's database (issue 13).
/// Who acts when `--by` is not given: `$USER` or `$LOGNAME`, else the name of the OS
/// account this process runs as (a cron job or a container often has neither variable),
/// else its numeric uid — never a made-up "unknown".
pub(crate) fn operator() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.trim().is_empty())
        .or_else(account_name)
        .unwrap_or_else(|| format!("uid {}", uid()))
}

fn uid() -> libc::uid_t {
    // SAFETY: getuid cannot fail and touches no memory of ours.
    unsafe { libc::getuid() }
}

/// The login name of this process's real uid, from the password database.
fn account_name() -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: all-zero is a valid `passwd` (null pointers, zero ids); getpwuid_r fills
    // it only with pointers into `buf`, which outlives every read below.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the given length; `found` is set to `&pwd` on
    // success and to null otherwise.
    let rc = unsafe { libc::getpwuid_r(uid(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name points at a NUL-terminated string inside `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned()).filter(|n| !n.is_empty())
}

fn find_run(store: &Store, prefix: &str) -> anyhow::Result<crate::store::RunId> {
    store.find_run(prefix).map_err(|e| match e {
        StoreError::RunNotFound(p) => BadInput(format!(
            "no run `{p}` in {} (see `agentrun runs list`, or choose another database with --db)",
            store.path().display()
        ))
        .into(),
        other => other.into(),
    })
}

/// Runs the parsed command and returns the exit code.
pub fn run(mut cli: Cli) -> anyhow::Result<Exit> {
    // Whatever the command, a password in `--db` is in the process list (issue 22:
    // only the commands that opened the database said so).
    if let Some(db) = &cli.db {
        warn_password_in_argv(db);
    }
    if !matches!(
        cli.command,
        Command::Init(_) | Command::Completions(_) | Command::Man(_) | Command::ReplayTool(_)
    ) {
        cli.settings = settings::load(&cli)?;
        if let Some(n) = cli.settings.db_pool {
            crate::store::set_pool_size(n as usize);
        }
        protect(&cli.settings);
    }
    // Notification events a crashed process left pending go out while this command
    // works (issue 24); what this command caused goes out after it. Neither holds the
    // person up: after the outcome, the command waits at most [`NOTIFY_WAIT`] for
    // delivery and then exits; an event still being sent stays pending in the outbox,
    // claimed by a process that is gone, and the next process sends it (as after a
    // crash; receivers drop repeats by the event id).
    let notifies = matches!(
        cli.command,
        Command::Start(_)
            | Command::Resume(_)
            | Command::Worker(_)
            | Command::Escalations(_)
            | Command::Runs(runs::RunsCmd::Cancel(_) | runs::RunsCmd::Send(_))
    );
    // (`serve` delivers on a timer of its own, from its first second.)
    let pending = notifies.then(|| deliver_in_background(cli.db_path()));
    let result = dispatch(&cli);
    if notifies {
        let deadline = std::time::Instant::now() + NOTIFY_WAIT;
        let after = deliver_in_background(cli.db_path());
        for done in pending.into_iter().chain([after]) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let _ = done.recv_timeout(left);
        }
    }
    result
}

/// How long a command waits, after its outcome, for the notification events it
/// caused to be delivered (docs/ARCHITECTURE.md, Notifications).
pub const NOTIFY_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// One pass over the outbox on a thread of its own; the receiver hears when it ends.
/// The thread is not joined: the process may exit while it sends.
fn deliver_in_background(db: PathBuf) -> std::sync::mpsc::Receiver<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        crate::notify::deliver_for(&db);
        let _ = tx.send(());
    });
    rx
}

fn dispatch(cli: &Cli) -> anyhow::Result<Exit> {
    match &cli.command {
        Command::Start(args) => start::start(cli, args),
        Command::Resume(args) => start::resume(cli, args),
        Command::Submit(args) => queue::submit(cli, args),
        Command::Worker(args) => queue::worker(cli, args),
        Command::Serve(args) => serve::run(cli, args),
        Command::Runs(cmd) => runs::run(cli, cmd),
        Command::Escalations(cmd) => escalations::run(cli, cmd),
        Command::Notify(cmd) => notify::run(cli, cmd),
        Command::Tools(cmd) => tools::run(cli, cmd),
        Command::Db(cmd) => db::run(cli, cmd),
        Command::Test(args) => test_cmd::test(cli, args),
        Command::Eval(args) => eval_cmd::run(cli, args),
        Command::ReplayTool(args) => test_cmd::replay_tool(args),
        Command::Limits(args) => limits::run(cli, args),
        Command::Init(args) => init::run(cli, args),
        Command::Completions(args) => completions::completions(args),
        Command::Man(args) => completions::man(args),
    }
}

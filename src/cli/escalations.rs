//! `agentrun escalations`: the human queue — list, show a handover, record a decision.

use super::{BadInput, Cli, Exit, open_store, output};
use crate::decide::{self, allowed};
use crate::render::handover;
use crate::render::table::{Column, Row, aligned};
use crate::store::{EscalationId, EscalationRow, Facts, Resolution, Store};
use crate::timefmt::{age, rfc3339};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use std::fmt::Write;
use std::path::Path;

#[derive(Debug, Subcommand)]
pub enum EscalationsCmd {
    /// List open escalations (with --all, resolved ones too), newest first.
    ///
    /// Example:
    ///   agentrun escalations list --all
    #[command(verbatim_doc_comment)]
    List {
        /// Include resolved escalations.
        #[arg(long)]
        all: bool,
    },
    /// Show an escalation's handover: the request, what was checked, the problem, a
    /// suggested next step, and the run's recent trace.
    ///
    /// Example:
    ///   agentrun escalations show 3
    #[command(verbatim_doc_comment)]
    Show {
        /// The escalation's id.
        id: i64,
    },
    Resolve(ResolveArgs),
}

/// Record a person's decision; then `agentrun resume RUN_ID` continues the run with it.
///
/// Decisions by kind:
///   approval_required   --approve | --modify JSON | --deny REASON
///   question            --reply TEXT | --deny REASON
///   outcome_unknown     --reply TEXT (it happened) | --approve (run it again) | --deny REASON (it did not)
///   breaker_open        --approve (close the circuit) | --reply TEXT | --deny REASON
///   stuck               --approve (let it try again) | --reply TEXT | --deny REASON (stop the run)
///   tool_bug            --reply TEXT | --approve (acknowledge)
///
/// Example:
///   agentrun escalations resolve 3 --modify '{"to": "dana@example.com", "body": "…"}'
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
#[command(group(clap::ArgGroup::new("decision").required(true).multiple(false)))]
pub struct ResolveArgs {
    /// The escalation's id.
    pub id: i64,
    /// Approve the call exactly as shown (or acknowledge).
    #[arg(long, group = "decision")]
    pub approve: bool,
    /// Refuse, with a reason the model is told.
    #[arg(long, value_name = "REASON", group = "decision")]
    pub deny: Option<String>,
    /// Approve with these arguments instead (a JSON object, checked against the tool's schema).
    #[arg(long, value_name = "JSON", group = "decision")]
    pub modify: Option<String>,
    /// Answer in words (a question, or what happened).
    #[arg(long, value_name = "TEXT", group = "decision")]
    pub reply: Option<String>,
    /// Who decides [default: $USER]
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// Then continue the run at once (as `agentrun resume RUN_ID`).
    #[arg(long)]
    pub resume: bool,
}

pub fn run(cli: &Cli, cmd: &EscalationsCmd) -> anyhow::Result<Exit> {
    let db = cli.db_path();
    // As `runs list`: the default database not existing yet just means nothing yet
    // (issue 27); a missing file named by --db / AGENTRUN_DB is an error in both.
    if let EscalationsCmd::List { all } = cmd
        && !cli.settings.db_chosen
        && !db.exists()
    {
        return print_list(cli, &[], *all, &db);
    }
    let store = open_store(&db, false)?;
    match cmd {
        EscalationsCmd::List { all } => {
            let rows = store.list_escalations(*all)?;
            if cli.json {
                // A sub-agent's escalation names the run it works for (issue 26).
                let list: Vec<Value> = rows
                    .iter()
                    .map(|e| {
                        let mut v = summary_json(e);
                        if let Ok(Some(parent)) = store.run(&e.run_id).map(|r| r.parent) {
                            v["parent_run_id"] = json!(parent.run.as_str());
                        }
                        v
                    })
                    .collect();
                output::print_json(&Value::Array(list))?;
                return Ok(Exit::Completed);
            }
            // The table names a sub-agent's parent in the summary.
            let rows: Vec<EscalationRow> = rows
                .into_iter()
                .map(|mut e| {
                    if let Ok(Some(parent)) = store.run(&e.run_id).map(|r| r.parent) {
                        e.summary = format!("(sub-agent of {}) {}", parent.run, e.summary);
                    }
                    e
                })
                .collect();
            print_list(cli, &rows, *all, &db)
        }
        EscalationsCmd::Show { id } => show(cli, &store, *id),
        EscalationsCmd::Resolve(args) => resolve(cli, &store, args),
    }
}

pub fn summary_json(e: &EscalationRow) -> Value {
    json!({
        "id": e.id.to_string(),
        "run_id": e.run_id.as_str(),
        "kind": e.kind.as_str(),
        "status": e.status(),
        "summary": e.summary,
        "created_at": rfc3339(e.created_at),
    })
}

fn print_list(cli: &Cli, rows: &[EscalationRow], all: bool, db: &Path) -> anyhow::Result<Exit> {
    let mut o = String::new();
    if cli.json {
        output::print_json(&rows.iter().map(summary_json).collect())?;
        return Ok(Exit::Completed);
    }
    if rows.is_empty() {
        // A note for the person, on stderr, so `escalations list | wc -l` counts
        // escalations (as `runs list` does).
        crate::errln!(
            "no {}escalations in {}",
            if all { "" } else { "open " },
            crate::store::shown(db)
        );
        return Ok(Exit::Completed);
    }
    let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    let table: Vec<Row<'_>> = rows
        .iter()
        .map(|e| Row {
            cells: vec![
                e.id.to_string(),
                e.run_id.to_string(),
                e.kind.as_str().to_string(),
                e.status().to_string(),
                age(now, e.created_at),
            ],
            text: e.summary.lines().next().unwrap_or(""),
        })
        .collect();
    let columns = [
        Column::right("ID"),
        Column::left("RUN"),
        Column::left("KIND"),
        Column::left("STATUS"),
        Column::right("AGE"),
    ];
    let style = crate::render::Style::for_stdout();
    for (i, line) in aligned(&columns, "SUMMARY", &table, output::stdout_width())
        .into_iter()
        .enumerate()
    {
        let line = if i == 0 { style.bold(&line) } else { line };
        writeln!(o, "{line}")?;
    }
    output::print_out(&o)?;
    Ok(Exit::Completed)
}

fn show(cli: &Cli, store: &Store, id: i64) -> anyhow::Result<Exit> {
    let e = store.escalation(EscalationId(id))?;
    let mut o = String::new();
    let events = store.events(&e.run_id)?;
    let recent = &events[events.len().saturating_sub(10)..];
    if cli.json {
        let mut v = summary_json(&e);
        v["step"] = json!(e.step);
        v["detail"] = e.detail.to_json();
        v["resolution"] = serde_json::to_value(&e.resolution)?;
        v["resolved_at"] = json!(e.resolved_at.map(rfc3339));
        v["resolved_by"] = json!(e.resolved_by);
        v["trace"] = recent
            .iter()
            .map(|ev| serde_json::to_value(&ev.event).unwrap_or(Value::Null))
            .collect();
        output::print_json(&v)?;
        return Ok(Exit::Completed);
    }
    // What a tool, a model or a server wrote is shown on one line each, without escape
    // sequences: it cannot colour itself like agentrun nor start a line that reads as
    // agentrun's own (`Decision: …`; issue 22).
    use crate::text::one_line;
    writeln!(o, "escalation {}  {}  {}", e.id, e.kind, e.status())?;
    writeln!(
        o,
        "run {} (step {}), raised {}",
        e.run_id,
        e.step,
        rfc3339(e.created_at)
    )?;
    if let Facts::AllToolsFailed(f) = &e.detail.facts {
        let tools: Vec<String> = f
            .tools
            .iter()
            .map(|t| format!("{} ({} failures)", one_line(&t.tool), t.failures))
            .collect();
        writeln!(o, "tools {}", tools.join(", "))?;
    } else {
        writeln!(o, "tool {}", one_line(e.detail.facts.tool()))?;
    }
    if let Some(args) = e.detail.facts.args() {
        writeln!(o, "arguments {}", one_line(&args.to_string()))?;
    }
    if let Facts::Question(q) = &e.detail.facts {
        writeln!(o, "question {}", one_line(&q.question))?;
    }
    writeln!(o)?;
    write!(o, "{}", handover::render(&e.detail.handover))?;
    if let (Some(r), Some(by), Some(at)) = (&e.resolution, &e.resolved_by, e.resolved_at) {
        writeln!(
            o,
            "\nDecision: {} by {} at {}",
            one_line(&r.describe()),
            one_line(by),
            rfc3339(at)
        )?;
    } else {
        writeln!(
            o,
            "\nDecide with: agentrun escalations resolve {} {}",
            e.id,
            allowed(e.kind).join(" | ")
        )?;
    }
    if !recent.is_empty() {
        writeln!(o, "\nRecent trace:")?;
        for ev in recent {
            writeln!(
                o,
                "  step {}: {}",
                ev.step,
                one_line(&super::describe_event(&ev.event))
            )?;
        }
    }
    output::print_out(&o)?;
    Ok(Exit::Completed)
}

fn resolve(cli: &Cli, store: &Store, args: &ResolveArgs) -> anyhow::Result<Exit> {
    let resolution = decision(args)?;
    let by = args.by.clone().unwrap_or_else(super::operator);
    let e = decide::decide(store, EscalationId(args.id), &resolution, &by, None)?;
    // A queue run goes back to the queue once nothing else is pending (issue 17); a
    // worker continues it. (`--resume` continues it here instead: it takes the lease.)
    // A sub-agent's run is continued through the run at the top (issue 26).
    let top = crate::runner::children::top_of(store, &e.run_id);
    let requeued = !args.resume && store.requeue(&top)?;
    if requeued && !cli.quiet && !cli.json {
        crate::errln!(
            "agentrun: run {top} is queued again; a worker (`agentrun worker`) continues it"
        );
    }
    if args.resume {
        // stdout is the resumed run's (answer or JSON); the decision goes to stderr.
        if !cli.quiet && !cli.json {
            crate::errln!(
                "agentrun: escalation {} resolved: {}",
                e.id,
                resolution.describe()
            );
        }
        // A sub-agent's run is continued by resuming the run at the top, which resumes
        // its child where the call waits (issue 26).
        let resume = super::start::ResumeArgs {
            run_id: top.to_string(),
            max_steps: None,
            max_tokens: None,
            max_cost: None,
            max_duration: None,
            model: None,
            stream_json: false,
        };
        return super::start::resume(cli, &resume);
    }
    if cli.json {
        let mut v = summary_json(&store.escalation(e.id)?);
        v["resolution"] = serde_json::to_value(&resolution)?;
        output::print_json(&v)?;
    } else {
        crate::outln!("escalation {} resolved: {}", e.id, resolution.describe())?;
        // One next step, the true one: a queued run is a worker's to continue.
        if e.kind.pauses() && !requeued {
            crate::outln!(
                "continue the run with: agentrun resume {top} (or resolve with --resume next time)"
            )?;
        }
    }
    Ok(Exit::Completed)
}

fn decision(args: &ResolveArgs) -> anyhow::Result<Resolution> {
    Ok(if args.approve {
        Resolution::Approve
    } else if let Some(reason) = &args.deny {
        Resolution::Deny {
            reason: reason.clone(),
        }
    } else if let Some(text) = &args.reply {
        Resolution::Reply { text: text.clone() }
    } else if let Some(json) = &args.modify {
        Resolution::Modify {
            args: decide::parse_modified(json)?,
        }
    } else {
        return Err(BadInput("give one of --approve, --deny, --modify or --reply".into()).into());
    })
}

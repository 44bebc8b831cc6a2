//! `agentrun eval SUITE.toml`: score a suite of tasks against models (see
//! `crate::evals::eval`), report, and compare with a baseline eval.

use super::{BadInput, Cli, Exit, open_store, output};
use crate::evals::child::Agentrun;
use crate::evals::eval::{Eval, EvalError, Plan};
use crate::evals::report::{self, Report};
use crate::store::Store;
use crate::store::evals::EvalRow;
use clap::Args;
use std::path::PathBuf;

/// Score a suite of tasks against models: each task N times per model, as ordinary
/// durable runs, each scored with the task's checks.
///
/// Prints a table per task and model: pass rate with its 95% Wilson interval, median
/// steps, tokens, cost and time. Results are stored under the eval's name. An eval
/// that was interrupted (Ctrl-C, kill -9) resumes where it stopped when the same
/// command runs again: scored runs are kept and begun runs resumed.
///
/// --baseline NAME compares each task × model with that earlier eval (the same
/// model, or the baseline's only model for the task): a pass rate below the lower
/// bound of the baseline's 95% Wilson interval is a regression, and the command exits 1.
///
/// Exit codes: 0 done without regression, 1 a regression against the baseline (or a
/// run could not be driven), 2 bad input (suite, model, baseline), 130 interrupted.
///
/// Examples:
///   agentrun eval examples/evals/shop.toml
///   agentrun eval suite.toml --model openai:gpt-4o-mini --model script:m.json --repeat 5
///   agentrun eval suite.toml --name after --baseline before --markdown > report.md
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct EvalArgs {
    /// The suite: tasks with their checks, models and repeats (TOML).
    #[arg(value_name = "SUITE.toml")]
    pub suite: PathBuf,
    /// Model spec to run every task with; repeat for several [default: the suite's
    /// `models`, else each task's own]
    #[arg(long = "model", value_name = "SPEC")]
    pub models: Vec<String>,
    /// Runs per task and model [default: the suite's `repeat`, else 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: Option<u32>,
    /// Runs at the same time.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub concurrency: u32,
    /// The eval's name [default: the unfinished eval of the same plan, else SUITE-TIME]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// An earlier eval to compare with.
    #[arg(long, value_name = "NAME")]
    pub baseline: Option<String>,
    /// Print the report as Markdown (for a pull request).
    #[arg(long)]
    pub markdown: bool,
}

pub fn run(cli: &Cli, args: &EvalArgs) -> anyhow::Result<Exit> {
    let plan = plan(args)?;
    let store = open_store(&cli.db_path(), true)?;
    if let Some(b) = &args.baseline
        && store.eval(b)?.is_none()
    {
        return Err(BadInput(format!(
            "--baseline: no eval `{b}` in {} (names are in `agentrun eval` output and the console)",
            store.path().display()
        ))
        .into());
    }
    let name = choose_name(&store, args, &plan)?;
    let quiet = cli.quiet || cli.json;
    if !quiet {
        crate::errln!(
            "agentrun: eval {name}: {} task(s) × {} model(s) × {} repeat(s)",
            plan.suite.tasks.len(),
            plan.models.len(),
            plan.repeat
        );
    }
    let eval = Eval {
        store: &store,
        agentrun: Agentrun::this(&cli.db_path())?,
        name: name.clone(),
        plan: plan.clone(),
        concurrency: args.concurrency as usize,
    };
    let say = |line: String| {
        if !quiet {
            crate::errln!("{}", crate::text::plain(&line));
        }
    };
    match eval.run(&say) {
        Ok(()) => store.finish_eval(&name, now_ms())?,
        Err(EvalError::Interrupted) => {
            crate::errln!(
                "agentrun: eval {name} interrupted; run the same command (or --name {name}) to resume it"
            );
            return Ok(Exit::Interrupted);
        }
        Err(e) => return Err(e.into()),
    }
    let report = build_report(&store, &name, &plan, args.baseline.as_deref())?;
    print(cli, args, &report)?;
    Ok(if report.regressions > 0 {
        Exit::Failed
    } else {
        Exit::Completed
    })
}

/// The suite, models and repeats, checked before anything runs.
fn plan(args: &EvalArgs) -> anyhow::Result<Plan> {
    let suite = crate::evals::suite::load(&args.suite).map_err(|e| BadInput(e.to_string()))?;
    let mut models = if args.models.is_empty() {
        suite.models.clone()
    } else {
        args.models.clone()
    };
    for m in &models {
        crate::model::ModelSpec::parse(m).map_err(|e| BadInput(format!("--model {m}: {e}")))?;
    }
    if models.is_empty() {
        models.push(String::new());
    }
    let dir = args.suite.parent().unwrap_or(std::path::Path::new(""));
    Ok(Plan {
        repeat: args.repeat.unwrap_or(suite.repeat),
        suite,
        models,
        dir: std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()),
    })
}

/// `--name` (resumed when it exists with the same plan), else the newest unfinished
/// eval with this plan (resumed), else a new `SUITE-YYYYMMDD-HHMMSS`.
fn choose_name(store: &Store, args: &EvalArgs, plan: &Plan) -> anyhow::Result<String> {
    let plan_json = serde_json::to_string(plan)?;
    if let Some(name) = &args.name {
        match store.eval(name)? {
            Some(e) if e.plan != plan_json => {
                return Err(BadInput(format!(
                    "eval `{name}` exists with another suite, models or repeats; choose another --name"
                ))
                .into());
            }
            Some(_) => return Ok(name.clone()),
            None => {}
        }
    } else if let Some(e) = store
        .evals()?
        .into_iter()
        .find(|e| e.finished_at.is_none() && e.plan == plan_json)
    {
        return Ok(e.name);
    }
    let name = args.name.clone().unwrap_or_else(|| {
        let stamp = crate::timefmt::rfc3339(now_ms()).replace([':', '-'], "");
        format!("{}-{}", plan.suite.name, stamp.trim_end_matches('Z'))
    });
    store.create_eval(&EvalRow {
        name: name.clone(),
        suite: args.suite.display().to_string(),
        plan: plan_json,
        created_at: now_ms(),
        finished_at: None,
    })?;
    Ok(name)
}

fn build_report(
    store: &Store,
    name: &str,
    plan: &Plan,
    baseline: Option<&str>,
) -> anyhow::Result<Report> {
    let mut cells = report::cells(plan, &store.eval_slots(name)?);
    let mut regressions = 0;
    if let Some(b) = baseline
        && let Some(row) = store.eval(b)?
    {
        let base_plan: Plan = serde_json::from_str(&row.plan)
            .map_err(|e| anyhow::anyhow!("eval {b}: stored plan is damaged: {e}"))?;
        let base = report::cells(&base_plan, &store.eval_slots(b)?);
        regressions = report::compare(&mut cells, &base);
    }
    let row = store.eval(name)?;
    Ok(Report {
        eval: name.to_string(),
        suite: row.map(|r| r.suite).unwrap_or_default(),
        repeat: plan.repeat,
        finished: true,
        baseline: baseline.map(str::to_string),
        regressions,
        cells,
    })
}

fn print(cli: &Cli, args: &EvalArgs, report: &Report) -> anyhow::Result<()> {
    if cli.json {
        let mut v = serde_json::to_value(report)?;
        v["regression_rule"] =
            "pass rate below the lower bound of the baseline's 95% Wilson interval".into();
        output::print_json(&v)?;
    } else if args.markdown {
        crate::outln!("{}", report::markdown(report).trim_end())?;
    } else {
        crate::outln!("{}", report::text(report).trim_end())?;
        if let Some(b) = &report.baseline {
            crate::errln!(
                "agentrun: {} regression(s) against eval {b}",
                report.regressions
            );
        }
    }
    Ok(())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

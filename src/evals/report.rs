//! An eval's results per task × model — pass rate with its 95% Wilson interval, median
//! steps, tokens, cost and time, the runs — compared with a baseline eval, and shown
//! as a table (terminal), Markdown (a pull request) or JSON.

use super::eval::{Plan, Scored, shown_model};
use super::stats::{median, regressed, wilson};
use crate::store::evals::EvalSlotRow;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub task: String,
    pub model: String,
    pub runs: u32,
    pub passed: u32,
    pub pass_rate: f64,
    /// 95% Wilson interval of the pass rate.
    pub ci: (f64, f64),
    pub median_steps: f64,
    pub median_tokens: f64,
    pub median_cost_usd: f64,
    pub median_ms: f64,
    pub run_ids: Vec<String>,
    /// The baseline's cell it is compared with, when the baseline has one.
    pub baseline: Option<BaseCell>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BaseCell {
    pub model: String,
    pub runs: u32,
    pub passed: u32,
    pub regressed: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub eval: String,
    pub suite: String,
    pub repeat: u32,
    pub finished: bool,
    pub baseline: Option<String>,
    pub regressions: usize,
    pub cells: Vec<Cell>,
}

/// The cells of an eval from its plan and stored slots, in the plan's order.
pub fn cells(plan: &Plan, slots: &[EvalSlotRow]) -> Vec<Cell> {
    let mut out = Vec::new();
    for task in &plan.suite.tasks {
        for model in &plan.models {
            let scored: Vec<Scored> = slots
                .iter()
                .filter(|s| s.task == task.name && s.model == *model)
                .filter_map(|s| serde_json::from_str(s.result.as_deref()?).ok())
                .collect();
            out.push(cell(&task.name, model, &scored));
        }
    }
    out
}

fn cell(task: &str, model: &str, scored: &[Scored]) -> Cell {
    let runs = scored.len() as u32;
    let passed = scored.iter().filter(|s| s.passed).count() as u32;
    let m = |f: fn(&Scored) -> f64| median(&scored.iter().map(f).collect::<Vec<_>>());
    Cell {
        task: task.to_string(),
        model: model.to_string(),
        runs,
        passed,
        pass_rate: if runs == 0 {
            0.0
        } else {
            f64::from(passed) / f64::from(runs)
        },
        ci: wilson(passed, runs),
        median_steps: m(|s| s.steps as f64),
        median_tokens: m(|s| (s.input_tokens + s.output_tokens) as f64),
        median_cost_usd: m(|s| s.cost_usd),
        median_ms: m(|s| s.ms as f64),
        run_ids: scored.iter().map(|s| s.run_id.clone()).collect(),
        baseline: None,
    }
}

/// Compares each cell with the baseline's cell of the same task and model — or, when
/// the baseline ran that task with one model only, with that one (a model swap).
/// Returns how many cells regressed.
pub fn compare(cells: &mut [Cell], base: &[Cell]) -> usize {
    let mut regressions = 0;
    for c in cells.iter_mut() {
        let same_task: Vec<&Cell> = base.iter().filter(|b| b.task == c.task).collect();
        let found = same_task
            .iter()
            .find(|b| b.model == c.model)
            .or(if same_task.len() == 1 {
                same_task.first()
            } else {
                None
            });
        if let Some(b) = found {
            let r = regressed(c.passed, c.runs, b.passed, b.runs);
            regressions += usize::from(r);
            c.baseline = Some(BaseCell {
                model: b.model.clone(),
                runs: b.runs,
                passed: b.passed,
                regressed: r,
            });
        }
    }
    regressions
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// One row's cells as text, shared by the table and Markdown.
fn row(c: &Cell) -> Vec<String> {
    let base = match &c.baseline {
        None => "-".to_string(),
        Some(b) => format!(
            "{}/{}{}",
            b.passed,
            b.runs,
            if b.regressed { " REGRESSED" } else { "" }
        ),
    };
    vec![
        c.task.clone(),
        shown_model(&c.model).to_string(),
        format!("{}/{} {}", c.passed, c.runs, pct(c.pass_rate)),
        format!("{}–{}", pct(c.ci.0), pct(c.ci.1)),
        format!("{}", c.median_steps),
        format!("{}", c.median_tokens),
        format!("${:.4}", c.median_cost_usd),
        format!("{:.1}s", c.median_ms / 1000.0),
        base,
    ]
}

const HEADERS: [&str; 9] = [
    "TASK", "MODEL", "PASS", "95% CI", "STEPS", "TOKENS", "COST", "TIME", "BASELINE",
];

/// A plain table, columns aligned (medians for steps, tokens, cost and time).
pub fn text(r: &Report) -> String {
    let rows: Vec<Vec<String>> = r.cells.iter().map(row).collect();
    let width = |i: usize| {
        rows.iter()
            .map(|row| crate::text::plain(&row[i]).chars().count())
            .chain([HEADERS[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..HEADERS.len()).map(width).collect();
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{:<w$}", crate::text::plain(c), w = *w))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = vec![line(HEADERS.iter().map(|h| h.to_string()).collect())];
    out.extend(rows.into_iter().map(line));
    out.join("\n") + "\n"
}

/// A Markdown report for a pull request: a summary line and the table.
pub fn markdown(r: &Report) -> String {
    let esc = |s: &str| crate::text::plain(s).replace('|', "\\|");
    let mut out = format!("### Eval `{}` ({})\n\n", esc(&r.eval), esc(&r.suite));
    match &r.baseline {
        Some(b) if r.regressions > 0 => out.push_str(&format!(
            "**{} regression(s)** against `{}`.\n\n",
            r.regressions,
            esc(b)
        )),
        Some(b) => out.push_str(&format!("No regression against `{}`.\n\n", esc(b))),
        None => {}
    }
    out.push_str(&format!("| {} |\n", HEADERS.join(" | ")));
    out.push_str(&format!("|{}\n", " --- |".repeat(HEADERS.len())));
    for c in &r.cells {
        let cells: Vec<String> = row(c).iter().map(|s| esc(s)).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scored(passed: bool, steps: u64) -> Scored {
        Scored {
            run_id: format!("r{steps}"),
            passed,
            status: "completed".into(),
            steps,
            input_tokens: 10,
            output_tokens: 5,
            cost_usd: 0.0,
            ms: 1000,
            checks: vec![],
        }
    }

    #[test]
    fn a_cell_counts_passes_and_takes_medians() {
        let c = cell(
            "t",
            "m",
            &[scored(true, 3), scored(false, 5), scored(true, 4)],
        );
        assert_eq!(
            (c.passed, c.runs, c.median_steps, c.median_tokens),
            (2, 3, 4.0, 15.0)
        );
    }

    #[test]
    fn a_model_swap_compares_with_the_baselines_only_model() {
        let good = cell("t", "good", &vec![scored(true, 1); 5]);
        let mut new = vec![cell(
            "t",
            "flaky",
            &[
                scored(true, 1),
                scored(false, 1),
                scored(true, 1),
                scored(false, 1),
                scored(false, 1),
            ],
        )];
        assert_eq!(compare(&mut new, &[good]), 1);
        assert!(new[0].baseline.as_ref().unwrap().regressed);
    }
}

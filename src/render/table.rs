//! `runs list` as an aligned table: columns sized to their widest cell by display
//! width, the task's first line cut to what is left of an 100-column line.

use super::Style;
use super::text::{pad, pad_left, truncate, width};
use crate::records::RunRow;
use crate::timefmt::age;

/// The task column never gets less than this, even on a narrow terminal.
const MIN_TASK: usize = 20;
/// Line width the table aims for when the terminal's is unknown (long enough for a
/// useful task line, short enough for a split pane).
pub const LINE: usize = 100;

/// How to lay out `runs list`.
pub struct TableOptions<'a> {
    /// When "age" is measured.
    pub now_ms: i64,
    /// The terminal's width (or [`LINE`]); the task column takes what is left.
    pub width: usize,
    pub style: Style,
    /// A `running` run whose process is gone: shown as `stale` (issue 13).
    pub stale: &'a dyn Fn(&RunRow) -> bool,
}

/// The table, header first, one line per run.
pub fn runs_table(runs: &[RunRow], opts: &TableOptions<'_>) -> String {
    let (now_ms, style) = (opts.now_ms, opts.style);
    let rows: Vec<[String; 5]> = runs
        .iter()
        .map(|r| {
            [
                r.id.to_string(),
                match (&r.worker, r.status) {
                    _ if (opts.stale)(r) => "stale".to_string(),
                    // Which worker holds it (issue 17).
                    (Some(w), crate::records::RunStatus::Running) => format!("running ({w})"),
                    _ => r.status.to_string(),
                },
                r.steps.to_string(),
                (r.input_tokens + r.output_tokens).to_string(),
                age(now_ms, r.created_at),
            ]
        })
        .collect();
    let header = ["ID", "STATUS", "STEPS", "TOKENS", "AGE"];
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| width(&r[i]))
                .chain([width(header[i])])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let used: usize = widths.iter().sum::<usize>() + 2 * widths.len();
    let task_cols = opts.width.saturating_sub(used).max(MIN_TASK);
    let mut out = line(&header.map(String::from), &widths, "TASK", |s| {
        style.bold(s)
    });
    for (r, cells) in runs.iter().zip(&rows) {
        let stale = cells[1] == "stale";
        let first = r.task.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let mut text = line(cells, &widths, &truncate(first.trim(), task_cols), |s| {
            s.to_string()
        });
        if style.enabled && !stale {
            // Colour after padding, so escape codes never count as columns.
            text = text.replacen(r.status.as_str(), &style.status(r.status), 1);
        }
        out.push_str(&text);
    }
    out
}

fn line(
    cells: &[String; 5],
    widths: &[usize],
    task: &str,
    paint: impl Fn(&str) -> String,
) -> String {
    let mut s = String::new();
    for (i, cell) in cells.iter().enumerate() {
        // Numbers right-aligned, words left-aligned.
        let padded = if (2..=4).contains(&i) {
            pad_left(cell, widths[i])
        } else {
            pad(cell, widths[i])
        };
        s.push_str(&paint(&padded));
        s.push_str("  ");
    }
    s.push_str(&paint(task));
    format!("{}\n", s.trim_end())
}

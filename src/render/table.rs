//! `runs list` as an aligned table: columns sized to their widest cell by display
//! width, the task's first line cut to what is left of an 100-column line.

use super::Style;
use super::text::{pad, pad_left, truncate, width};
use crate::store::RunRow;
use crate::timefmt::age;

/// The task column never gets less than this, even on a narrow terminal.
const MIN_TASK: usize = 20;
/// Line width the table aims for (long enough for a useful task line, short enough
/// for a split pane).
const LINE: usize = 100;

/// The table, header first, one line per run. `now_ms` is when "age" is measured.
pub fn runs_table(runs: &[RunRow], now_ms: i64, style: Style) -> String {
    let rows: Vec<[String; 5]> = runs
        .iter()
        .map(|r| {
            [
                r.id.to_string(),
                r.status.to_string(),
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
    let task_cols = LINE.saturating_sub(used).max(MIN_TASK);
    let mut out = line(&header.map(String::from), &widths, "TASK", |s| {
        style.bold(s)
    });
    for (r, cells) in runs.iter().zip(&rows) {
        let first = r.task.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let mut text = line(cells, &widths, &truncate(first.trim(), task_cols), |s| {
            s.to_string()
        });
        if style.enabled {
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

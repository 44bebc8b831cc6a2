//! `runs list` and `escalations list` as aligned tables: columns sized to their widest
//! cell by display width, the last column's text cut to what is left of the line.

use super::Style;
use super::text::{pad, pad_left, truncate};
use crate::records::RunRow;
use crate::timefmt::age;

/// The task column never gets less than this, even on a narrow terminal.
const MIN_TASK: usize = 10;
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
    // The task's first line; a sub-agent's run says whose it is (issue 26), a fork whose
    // history it carries (issue 21).
    let texts: Vec<String> = runs
        .iter()
        .map(|r| {
            let task = r.task.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            let task = match &r.fork {
                Some(f) => format!("[fork of {}@{}] {}", f.run, f.step, task.trim()),
                None => task.to_string(),
            };
            match &r.parent {
                Some(p) => format!("(sub-agent of {}) {task}", p.run),
                None => task,
            }
        })
        .collect();
    let rows: Vec<Row<'_>> = runs
        .iter()
        .zip(&texts)
        .map(|(r, text)| Row {
            cells: vec![
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
            ],
            text,
        })
        .collect();
    let columns = [
        Column::left("ID"),
        Column::left("STATUS"),
        Column::right("STEPS"),
        Column::right("TOKENS"),
        Column::right("AGE"),
    ];
    let lines = aligned(&columns, "TASK", &rows, opts.width);
    let mut out = String::new();
    for (i, mut text) in lines.into_iter().enumerate() {
        if i == 0 {
            text = style.bold(&text);
        } else if style.enabled && rows[i - 1].cells[1] != "stale" {
            // Colour after padding, so escape codes never count as columns.
            let status = runs[i - 1].status;
            text = text.replacen(status.as_str(), &style.status(status), 1);
        }
        out.push_str(&text);
        out.push('\n');
    }
    out
}

/// A column of an [`aligned`] table.
pub struct Column {
    pub name: &'static str,
    /// Numbers right-aligned, words left-aligned.
    pub right: bool,
}

impl Column {
    pub fn left(name: &'static str) -> Column {
        Column { name, right: false }
    }

    pub fn right(name: &'static str) -> Column {
        Column { name, right: true }
    }
}

/// One line of an [`aligned`] table: its cells and the free text at the end.
pub struct Row<'a> {
    pub cells: Vec<String>,
    pub text: &'a str,
}

/// Lines of a table, header first: each column as wide as its widest cell (by display
/// width, so the header lines up with every row), two spaces between, and the last
/// column (`last`, free text) cut to what is left of `width` columns — never below
/// [`MIN_TASK`]. `runs list` and `escalations list` share it (issue 27).
pub fn aligned(columns: &[Column], last: &str, rows: &[Row<'_>], width: usize) -> Vec<String> {
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .filter_map(|r| r.cells.get(i))
                .map(|cell| super::text::width(cell))
                .chain([super::text::width(c.name)])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let used: usize = widths.iter().sum::<usize>() + 2 * widths.len();
    let text_cols = width.saturating_sub(used).max(MIN_TASK);
    let header: Vec<String> = columns.iter().map(|c| c.name.to_string()).collect();
    std::iter::once(line(columns, &header, &widths, last))
        .chain(rows.iter().map(|r| {
            line(
                columns,
                &r.cells,
                &widths,
                &truncate(r.text.trim(), text_cols),
            )
        }))
        .collect()
}

fn line(columns: &[Column], cells: &[String], widths: &[usize], text: &str) -> String {
    let mut s = String::new();
    for ((column, cell), cols) in columns.iter().zip(cells).zip(widths) {
        if column.right {
            s.push_str(&pad_left(cell, *cols));
        } else {
            s.push_str(&pad(cell, *cols));
        }
        s.push_str("  ");
    }
    s.push_str(text);
    s.trim_end().to_string()
}

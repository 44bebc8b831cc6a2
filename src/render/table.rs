//! `runs list` and `escalations list` as aligned tables: columns sized to their widest
//! cell by display width, the last column's text cut to what is left of the line.

use super::Style;
use crate::records::RunRow;
use crate::text::{pad, pad_left, truncate};
use crate::timefmt::age;

/// The task column never gets less than this, even on a narrow terminal.
const MIN_TASK: usize = 10;
/// Columns that [`Column::give_way`] are left out while the task would get less than
/// this: fewer columns than a few words ("A customer…") tell a reader nothing.
const WANTED_TASK: usize = 24;
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

/// The table, header first, one line per run. A COST column when any run listed has a
/// price (issue 27); on a narrow terminal TOKENS, STEPS, then AGE give way to the task.
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
    let priced = runs.iter().any(|r| r.cost_usd > 0.0);
    let rows: Vec<Row<'_>> = runs
        .iter()
        .zip(&texts)
        .map(|(r, text)| {
            let mut cells = vec![
                r.id.to_string(),
                match (&r.worker, r.status) {
                    _ if (opts.stale)(r) => "stale".to_string(),
                    // Which worker holds it (issue 17).
                    (Some(w), crate::records::RunStatus::Running) => format!("running ({w})"),
                    _ => r.status.to_string(),
                },
                r.steps.to_string(),
                (r.input_tokens + r.output_tokens).to_string(),
            ];
            if priced {
                cells.push(cost_cell(r.cost_usd));
            }
            cells.push(age(now_ms, r.created_at));
            Row { cells, text }
        })
        .collect();
    let mut columns = vec![
        Column::left("ID"),
        Column::left("STATUS"),
        Column::right("STEPS").give_way(2),
        Column::right("TOKENS").give_way(1),
    ];
    if priced {
        columns.push(Column::right("COST"));
    }
    columns.push(Column::right("AGE").give_way(3));
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

/// A run's cost in the table: cents are enough there (`runs show` has the rest), and
/// `-` for a run without a price.
fn cost_cell(usd: f64) -> String {
    if usd <= 0.0 {
        "-".into()
    } else if usd < 0.01 {
        "<$0.01".into()
    } else {
        format!("${usd:.2}")
    }
}

/// A column of an [`aligned`] table.
pub struct Column {
    pub name: &'static str,
    /// Numbers right-aligned, words left-aligned.
    pub right: bool,
    /// Left out when the line is too narrow for it and [`MIN_TASK`] columns of text:
    /// the lowest number first; `None` always stays.
    pub give_way: Option<u8>,
}

impl Column {
    pub fn left(name: &'static str) -> Column {
        Column {
            name,
            right: false,
            give_way: None,
        }
    }

    pub fn right(name: &'static str) -> Column {
        Column {
            name,
            right: true,
            give_way: None,
        }
    }

    /// This column is left out on a narrow line, in `order` (lowest first).
    pub fn give_way(self, order: u8) -> Column {
        Column {
            give_way: Some(order),
            ..self
        }
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
/// [`MIN_TASK`]; columns that [`Column::give_way`] are left out while the text would
/// get less than [`WANTED_TASK`]. `runs list` and `escalations list` share it (issue 27).
pub fn aligned(columns: &[Column], last: &str, rows: &[Row<'_>], width: usize) -> Vec<String> {
    let mut widths: Vec<Option<usize>> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .filter_map(|r| r.cells.get(i))
                .map(|cell| crate::text::width(cell))
                .chain([crate::text::width(c.name)])
                .max()
        })
        .collect();
    let used = |widths: &[Option<usize>]| widths.iter().flatten().map(|w| w + 2).sum::<usize>();
    let mut yielding: Vec<usize> = (0..columns.len())
        .filter(|&i| columns[i].give_way.is_some())
        .collect();
    yielding.sort_by_key(|&i| columns[i].give_way);
    for i in yielding {
        if used(&widths) + WANTED_TASK <= width {
            break;
        }
        widths[i] = None;
    }
    let text_cols = width.saturating_sub(used(&widths)).max(MIN_TASK);
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

/// One table line; a column whose width is `None` was left out.
fn line(columns: &[Column], cells: &[String], widths: &[Option<usize>], text: &str) -> String {
    let mut s = String::new();
    for ((column, cell), cols) in columns.iter().zip(cells).zip(widths) {
        let Some(cols) = cols else { continue };
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

//! Small statistics and the Markdown the suite prints.

use std::time::Duration;

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The `q` quantile (0..=1), nearest rank.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

pub fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// Nanosecond intervals as milliseconds.
pub fn intervals_ms(ns: &[u64]) -> Vec<f64> {
    ns.iter().map(|&n| n as f64 / 1e6).collect()
}

/// Step times (ms) of the first and last tenth of a run's steps: (first, last), each
/// as (median, mean).
pub fn tenths(intervals: &[f64]) -> ((f64, f64, f64), (f64, f64, f64)) {
    let tenth = (intervals.len() / 10).max(1);
    let first = &intervals[..tenth];
    let last = &intervals[intervals.len() - tenth..];
    let stats = |x: &[f64]| (median(x), mean(x), quantile(x, 0.1));
    (stats(first), stats(last))
}

/// A number with a sensible count of digits for a table cell.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        "n/a".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

pub fn verdict(met: bool) -> &'static str {
    if met { "**met**" } else { "**not met**" }
}

/// A Markdown table.
pub struct Table {
    out: String,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        let mut t = Table { out: String::new() };
        t.row(headers.iter().map(|h| h.to_string()).collect());
        t.row(headers.iter().map(|_| "---".to_string()).collect());
        t
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.out.push_str("| ");
        self.out.push_str(&cells.join(" | "));
        self.out.push_str(" |\n");
    }

    pub fn finish(self) -> String {
        self.out
    }
}

//! The rate limits of tools.toml (docs/rate-limits.md): `[models."SPEC"]` with `rpm`,
//! `tpm`, `max_concurrent`, `limit_key` and `window`; `rate` and `max_concurrent` in
//! `[tools.NAME]` and `[mcp.NAME]`. No provider's limits are assumed: a key without
//! them is not governed.

use super::Sink;
use super::raw::{RawFile, Where};
use super::validate::check_count;
use crate::govern::{Limit, Limits, ModelLimit};
use std::time::Duration;

const MINUTE_MS: u64 = 60_000;

/// Reads every limit of the file; problems go to `sink`, naming the section and key.
pub(super) fn resolve(raw: &RawFile, sink: &mut Sink) -> Limits {
    let mut limits = Limits::default();
    for (spec, section) in &raw.models {
        let place = format!("models.{}", quoted(spec));
        let at = Where::Section(&place);
        if let Err(e) = crate::model::ModelSpec::parse(spec) {
            sink.at(at, e);
        }
        let m = &section.value;
        let window = m
            .window
            .as_deref()
            .map_or(Some(MINUTE_MS), |w| window(w, at, sink));
        let limit = Limit {
            requests: count(m.rpm, "rpm", at, sink),
            tokens: count(m.tpm, "tpm", at, sink),
            max_concurrent: count(m.max_concurrent, "max_concurrent", at, sink).map(|n| n as u32),
            window_ms: window.unwrap_or(MINUTE_MS),
        };
        let limit_key = m.limit_key.clone();
        if limit_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
            sink.key(at, "limit_key", "must not be empty".into());
        }
        limits
            .models
            .insert(spec.clone(), ModelLimit { limit, limit_key });
    }
    for (name, section) in &raw.tools {
        let t = &section.value;
        if let Some(limit) = call_limit(&t.rate, t.max_concurrent, Where::Tool(name), sink) {
            limits.tools.insert(name.clone(), limit);
        }
    }
    for (name, section) in &raw.mcp {
        let m = &section.value;
        let place = format!("mcp.{name}");
        let at = Where::Section(&place);
        if let Some(limit) = call_limit(&m.rate, m.max_concurrent, at, sink) {
            limits.mcp.insert(name.clone(), limit);
        }
    }
    limits
}

/// A key as written in a dotted path: quoted when it is not a bare TOML key.
fn quoted(key: &str) -> String {
    if key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

fn count(value: Option<i64>, key: &str, at: Where<'_>, sink: &mut Sink) -> Option<u64> {
    match check_count(value?, 1, None) {
        Ok(n) => Some(u64::from(n)),
        Err(e) => {
            sink.key(at, key, e);
            None
        }
    }
}

fn window(value: &str, at: Where<'_>, sink: &mut Sink) -> Option<u64> {
    match super::parse_duration(value) {
        Ok(d) if d >= Duration::from_millis(1) => Some(d.as_millis() as u64),
        Ok(_) => {
            sink.key(at, "window", "must be at least 1ms".into());
            None
        }
        Err(e) => {
            sink.key(at, "window", e);
            None
        }
    }
}

fn call_limit(
    rate: &Option<String>,
    max_concurrent: Option<i64>,
    at: Where<'_>,
    sink: &mut Sink,
) -> Option<Limit> {
    let rate = rate.as_deref().and_then(|r| match parse_rate(r) {
        Ok(r) => Some(r),
        Err(e) => {
            sink.key(at, "rate", e);
            None
        }
    });
    let max_concurrent = count(max_concurrent, "max_concurrent", at, sink).map(|n| n as u32);
    if rate.is_none() && max_concurrent.is_none() {
        return None;
    }
    let (requests, window_ms) = rate.map_or((None, MINUTE_MS), |(n, w)| (Some(n), w));
    Some(Limit {
        requests,
        tokens: None,
        max_concurrent,
        window_ms,
    })
}

/// `"10/s"`, `"60/min"`, `"1000/h"` or `"N/DURATION"` (`"5/10s"`): calls and the
/// period they are counted over, in milliseconds.
pub fn parse_rate(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("`{s}` is not a rate: write CALLS/PERIOD, e.g. \"10/s\", \"60/min\"");
    let (n, per) = s.split_once('/').ok_or_else(bad)?;
    let n: u64 = n.trim().parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(format!("`{s}`: the number of calls must be at least 1"));
    }
    let per_ms = match per.trim() {
        "s" | "sec" | "second" => 1_000,
        "m" | "min" | "minute" => MINUTE_MS,
        "h" | "hour" => 3_600_000,
        other => match super::parse_duration(other) {
            Ok(d) if d >= Duration::from_millis(1) => d.as_millis() as u64,
            _ => return Err(bad()),
        },
    };
    Ok((n, per_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_calls_per_period() {
        assert_eq!(parse_rate("10/s"), Ok((10, 1_000)));
        assert_eq!(parse_rate("60/min"), Ok((60, 60_000)));
        assert_eq!(parse_rate("5/10s"), Ok((5, 10_000)));
        assert!(parse_rate("0/s").unwrap_err().contains("at least 1"));
        assert!(parse_rate("fast").unwrap_err().contains("CALLS/PERIOD"));
        assert!(parse_rate("3/fortnight").is_err());
    }
}

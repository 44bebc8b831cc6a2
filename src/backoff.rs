//! Backoff arithmetic shared by tool retries and model retries: exponential delay with
//! full jitter, and the server's own requested delay (`Retry-After`, `retry-after-ms`).

use crate::clock::Clock;
use std::time::{Duration, SystemTime};

/// Delay before retry number `retry` (0 for the first retry):
/// a uniformly random duration in `[0, min(max, base * 2^retry)]`.
///
/// A server-requested delay wins over the computed one (it knows its own load), but is
/// capped by `max` so a hostile or buggy header cannot park the run for hours.
pub fn delay(
    base: Duration,
    max: Duration,
    retry: u32,
    server_delay: Option<Duration>,
    clock: &dyn Clock,
) -> Duration {
    if let Some(d) = server_delay {
        return d.min(max);
    }
    let factor = 2u32.saturating_pow(retry.min(20));
    let ceiling = base.saturating_mul(factor).min(max);
    clock.jitter(ceiling)
}

/// What to do before the next attempt (docs/ARCHITECTURE.md §3.3, issue 12 item 10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Wait this long, then try again.
    After(Duration),
    /// The server asked for more than `max_retry_after`: do not retry; the call fails
    /// `rate_limited` carrying the server's delay.
    GiveUp { retry_after: Duration },
}

/// The wait before retry number `retry` (0 for the first retry). A server's requested
/// delay is a floor, never shortened by `max_backoff`: the wait is exactly that delay
/// (issue 12 item 10). Above `max_retry_after` the answer is [`Wait::GiveUp`]. Without
/// one, full-jitter backoff ([`delay`]). Tool retries use this; model retries move to it
/// in issue 15 (until then [`delay`] still caps the server's delay by `max_backoff`).
pub fn next_wait(
    base: Duration,
    max_backoff: Duration,
    retry: u32,
    server_delay: Option<Duration>,
    max_retry_after: Duration,
    clock: &dyn Clock,
) -> Wait {
    match server_delay {
        Some(d) if d > max_retry_after => Wait::GiveUp { retry_after: d },
        Some(d) => Wait::After(d),
        None => Wait::After(delay(base, max_backoff, retry, None, clock)),
    }
}

/// Reads `retry-after-ms` (milliseconds) or `Retry-After` (seconds or an HTTP-date)
/// from response headers. A date in the past means "now" (zero delay).
pub fn retry_after(headers: &reqwest::header::HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(ms) = header_str(headers, "retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    parse_retry_after(header_str(headers, "retry-after")?, now)
}

/// Parses a `Retry-After` value: delta-seconds or an HTTP-date.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn header_str<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name)?.to_str().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    #[test]
    fn doubles_from_the_base_and_stops_at_the_cap() {
        let c = FakeClock::new(0);
        let ms = |r| {
            delay(
                Duration::from_millis(500),
                Duration::from_secs(3),
                r,
                None,
                &c,
            )
            .as_millis()
        };
        assert_eq!(
            [ms(0), ms(1), ms(2), ms(3), ms(30)],
            [500, 1000, 2000, 3000, 3000]
        );
    }

    #[test]
    fn the_servers_delay_wins_but_is_capped() {
        let c = FakeClock::new(0);
        let d = |s| {
            delay(
                Duration::from_millis(500),
                Duration::from_secs(30),
                0,
                Some(s),
                &c,
            )
        };
        assert_eq!(d(Duration::from_secs(2)), Duration::from_secs(2));
        assert_eq!(d(Duration::from_secs(3600)), Duration::from_secs(30));
    }

    #[test]
    fn retry_after_is_a_floor_and_above_the_limit_means_give_up() {
        let c = FakeClock::new(0);
        let w = |s: u64| {
            next_wait(
                Duration::from_millis(10),
                Duration::from_millis(50),
                0,
                Some(Duration::from_secs(s)),
                Duration::from_secs(60),
                &c,
            )
        };
        assert_eq!(w(1), Wait::After(Duration::from_secs(1)));
        assert_eq!(w(60), Wait::After(Duration::from_secs(60)));
        assert_eq!(
            w(61),
            Wait::GiveUp {
                retry_after: Duration::from_secs(61)
            }
        );
    }

    #[test]
    fn parses_retry_after_in_both_forms() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:05 GMT", now),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }

    #[test]
    fn retry_after_ms_takes_precedence() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "7".parse().unwrap());
        h.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(
            retry_after(&h, SystemTime::now()),
            Some(Duration::from_millis(250))
        );
    }
}

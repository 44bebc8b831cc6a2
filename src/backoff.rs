//! The one retry policy's arithmetic, for tool retries (the recovery chain,
//! `recovery/retry.rs`) and model retries (`model/retry.rs`) alike: exponential delay
//! with jitter, the server's own requested delay (`Retry-After`, `retry-after-ms`) as a
//! floor, and the rule that gives up when the server asks for too long
//! (docs/ARCHITECTURE.md §3.3, §14). Pure: time and randomness come in through
//! [`Clock`], so schedules are asserted exactly in tests.

use crate::clock::Clock;
use std::time::{Duration, SystemTime};

/// How a computed delay is spread over its ceiling `min(max_backoff, base * 2^retry)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Anywhere in `[0, ceiling]`: retries of many callers spread out the most (tools).
    Full,
    /// Half of the ceiling for sure, the other half at random: the waits add up to a
    /// known minimum, which is what rides out a restarting server (models, issue 15).
    Equal,
}

/// The policy for one retried thing: its backoff, its cap, and how long a server may
/// ask it to wait before it gives up instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    /// Cap on a computed delay (never on the server's requested one, a floor).
    pub max_backoff: Duration,
    /// A server asking for a longer wait than this is not waited for.
    pub max_retry_after: Duration,
    pub jitter: Jitter,
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

impl Backoff {
    /// The wait before retry number `retry` (0 for the first retry). A server's
    /// requested delay is waited exactly — a floor that `max_backoff` never shortens —
    /// unless it is above `max_retry_after`: then [`Wait::GiveUp`]. Without one, a
    /// jittered delay ([`Backoff::computed`]), drawn once.
    pub fn next_wait(&self, retry: u32, server_delay: Option<Duration>, clock: &dyn Clock) -> Wait {
        match server_delay {
            Some(d) if d > self.max_retry_after => Wait::GiveUp { retry_after: d },
            Some(d) => Wait::After(d),
            None => Wait::After(self.computed(retry, clock)),
        }
    }

    /// The delay before retry number `retry` when the server named none: the ceiling
    /// `min(max_backoff, base * 2^retry)`, jittered as [`Backoff::jitter`] says.
    pub fn computed(&self, retry: u32, clock: &dyn Clock) -> Duration {
        let factor = 2u32.saturating_pow(retry.min(20));
        let ceiling = self.base.saturating_mul(factor).min(self.max_backoff);
        match self.jitter {
            Jitter::Full => clock.jitter(ceiling),
            Jitter::Equal => ceiling / 2 + clock.jitter(ceiling - ceiling / 2),
        }
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

    fn policy(jitter: Jitter) -> Backoff {
        Backoff {
            base: Duration::from_millis(500),
            max_backoff: Duration::from_secs(3),
            max_retry_after: Duration::from_secs(60),
            jitter,
        }
    }

    /// A clock whose every jitter draw is zero: what is left is the part of a delay
    /// that is not random.
    struct NoLuck;

    impl Clock for NoLuck {
        fn now_ms(&self) -> i64 {
            0
        }
        fn sleep(&self, _: Duration) -> crate::clock::SleepFuture {
            Box::pin(async {})
        }
        fn jitter(&self, _: Duration) -> Duration {
            Duration::ZERO
        }
    }

    #[test]
    fn doubles_from_the_base_and_stops_at_the_cap() {
        let c = FakeClock::new(0);
        for jitter in [Jitter::Full, Jitter::Equal] {
            let ms = |r| policy(jitter).computed(r, &c).as_millis();
            assert_eq!(
                [ms(0), ms(1), ms(2), ms(3), ms(30)],
                [500, 1000, 2000, 3000, 3000]
            );
        }
    }

    #[test]
    fn full_jitter_may_wait_nothing_and_equal_jitter_waits_half_for_sure() {
        let ms = |jitter, r| policy(jitter).computed(r, &NoLuck).as_millis();
        assert_eq!([ms(Jitter::Full, 0), ms(Jitter::Full, 3)], [0, 0]);
        assert_eq!([ms(Jitter::Equal, 0), ms(Jitter::Equal, 3)], [250, 1500]);
    }

    #[test]
    fn retry_after_is_a_floor_and_above_the_limit_means_give_up() {
        let c = FakeClock::new(0);
        let w = |s: u64| policy(Jitter::Full).next_wait(0, Some(Duration::from_secs(s)), &c);
        // Above max_backoff (3 s) and still waited in full: a floor, never capped.
        assert_eq!(w(10), Wait::After(Duration::from_secs(10)));
        assert_eq!(w(60), Wait::After(Duration::from_secs(60)));
        assert_eq!(
            w(61),
            Wait::GiveUp {
                retry_after: Duration::from_secs(61)
            }
        );
        assert_eq!(
            policy(Jitter::Equal).next_wait(2, None, &c),
            Wait::After(Duration::from_secs(2))
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

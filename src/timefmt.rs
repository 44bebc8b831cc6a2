//! Timestamps for people and JSON: RFC 3339 in UTC from epoch milliseconds, without a
//! date-time crate (the civil-from-days conversion is a few lines; H. Hinnant's
//! algorithm).

/// `2026-11-30T12:03:11Z`.
pub fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `3s`, `4m`, `2h`, `5d`: how long ago, for tables.
pub fn age(now_ms: i64, then_ms: i64) -> String {
    let s = (now_ms - then_ms).max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// `2026-11-30 13:03:11 +01:00`: local time for people (`runs show`), from the C
/// library's time zone rules (`TZ`, /etc/localtime); UTC when they are unavailable.
pub fn local(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let offset = local_offset(secs);
    let t = secs + offset;
    let days = t.div_euclid(86_400);
    let rem = t.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let sign = if offset < 0 { '-' } else { '+' };
    let off = offset.abs() / 60;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} {sign}{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        off / 60,
        off % 60
    )
}

/// Seconds east of UTC at `secs` in the local time zone.
fn local_offset(secs: i64) -> i64 {
    let t = secs as libc::time_t;
    // SAFETY: localtime_r writes only into the `tm` we pass and reads `t`; a zeroed
    // `tm` is a valid value of the plain C struct.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if ok { tm.tm_gmtoff } else { 0 }
}

/// `1h 4m 3s`, `12.3s`: how long something took.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 60_000 {
        return format!("{:.1}s", ms as f64 / 1000.0);
    }
    let s = ms / 1000;
    match s {
        0..3600 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m {}s", s / 3600, s % 3600 / 60, s % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_000_591_000), "2026-11-30T01:03:11Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn durations_read_like_people_say_them() {
        assert_eq!(
            [duration(1234), duration(61_000), duration(3_723_000)],
            ["1.2s", "1m 1s", "1h 2m 3s"]
        );
    }

    #[test]
    fn ages_round_down_to_the_largest_unit() {
        assert_eq!(
            [age(61_000, 0), age(59_000, 0), age(7_200_000, 0), age(0, 5)],
            ["1m", "59s", "2h", "0s"]
        );
    }
}

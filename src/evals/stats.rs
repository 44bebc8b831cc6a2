//! Pass rates with their noise, and the rule that calls a change a regression.
//!
//! A pass rate of k runs out of n is shown with its 95% Wilson score interval, which
//! stays inside [0, 1] and is honest for the small n and the 0% and 100% rates evals
//! have (the normal approximation claims certainty at 5/5).
//!
//! **Regression rule.** A task × model cell has regressed when its pass rate is below
//! the *lower* bound of the baseline cell's 95% Wilson interval: the new result is one
//! the baseline would produce less than 2.5% of the time. With 5 repeats against a
//! 5/5 baseline (lower bound 57%) that is 2/5 or worse; 3/5 is within the noise. More
//! repeats narrow the interval and catch smaller drops.

/// z for a two-sided 95% interval.
const Z95: f64 = 1.959_963_984_540_054;

/// The 95% Wilson score interval of `passed` out of `runs`; (0, 1) with no runs.
pub fn wilson(passed: u32, runs: u32) -> (f64, f64) {
    if runs == 0 {
        return (0.0, 1.0);
    }
    let n = f64::from(runs);
    let p = f64::from(passed) / n;
    let z2 = Z95 * Z95;
    let denom = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denom;
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Whether `passed`/`runs` is a regression against the baseline's `base_passed` /
/// `base_runs` (module doc).
pub fn regressed(passed: u32, runs: u32, base_passed: u32, base_runs: u32) -> bool {
    if runs == 0 || base_runs == 0 {
        return false;
    }
    let rate = f64::from(passed) / f64::from(runs);
    rate < wilson(base_passed, base_runs).0
}

/// The median of `values` (the mean of the middle two for an even count); 0 for none.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(x: (f64, f64)) -> (f64, f64) {
        let r = |v: f64| (v * 1000.0).round() / 1000.0;
        (r(x.0), r(x.1))
    }

    #[test]
    fn wilson_intervals_match_the_published_values() {
        // Reference values: Wilson (1927), as tabulated by Newcombe (1998).
        assert_eq!(round(wilson(5, 5)), (0.566, 1.0));
        assert_eq!(round(wilson(0, 5)), (0.0, 0.434));
        assert_eq!(round(wilson(81, 263)), (0.255, 0.366));
        assert_eq!(round(wilson(3, 5)), (0.231, 0.882));
    }

    #[test]
    fn a_regression_is_a_rate_below_the_baselines_lower_bound() {
        assert!(regressed(2, 5, 5, 5));
        assert!(!regressed(3, 5, 5, 5));
        assert!(!regressed(3, 5, 2, 5));
        assert!(!regressed(5, 5, 5, 5));
        assert!(!regressed(0, 0, 5, 5));
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}

//! Benchmark statistics, computed once in Rust whatever ran the kernel: the summary of a sample
//! and the stopping rule (repeat until the median's 95% confidence interval is narrower than a
//! target, or the budget is spent).

pub use crate::model::bench::{Stop, Summary};

use std::collections::BTreeMap;

/// Wall time by phase, in seconds: each `lap` adds the time since the last one to its phase.
/// The bench's and the workers' timelines are kept with it.
#[derive(Debug)]
pub struct Clock {
    at: std::time::Instant,
    pub phases: BTreeMap<String, f64>,
}

impl Clock {
    pub fn new() -> Clock {
        Clock { at: std::time::Instant::now(), phases: BTreeMap::new() }
    }

    pub fn lap(&mut self, phase: &str) {
        let now = std::time::Instant::now();
        *self.phases.entry(phase.to_string()).or_default() += (now - self.at).as_secs_f64();
        self.at = now;
    }

    /// Starts the next phase now: the time since the last lap is in none (timed elsewhere).
    pub fn skip(&mut self) {
        self.at = std::time::Instant::now();
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}

/// Adds one timeline's phases to another's (a worker answer's to its series', say).
pub fn add_phases(into: &mut BTreeMap<String, f64>, from: &BTreeMap<String, f64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

/// The ranks (0-based, inclusive) bounding the median's 95% confidence interval in a sorted
/// sample of `n`: n/2 ∓ 1.96·√n/2 (the normal approximation to the binomial), widened to the
/// whole sample when n is too small for the interval to mean anything.
pub fn median_ci_ranks(n: usize) -> (usize, usize) {
    if n < 6 {
        return (0, n.saturating_sub(1));
    }
    let half = 1.96 * (n as f64).sqrt() / 2.0;
    let lo = ((n as f64) / 2.0 - half).floor().max(0.0) as usize;
    let hi = (((n as f64) / 2.0 + half).ceil() as usize).min(n - 1);
    (lo, hi)
}

pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 }
}

/// Summarises samples (any order). An empty sample gives NaNs and n = 0.
pub fn summarize(samples: &[f64]) -> Summary {
    let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return Summary {
            n: 0,
            median: f64::NAN,
            mean: f64::NAN,
            std: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
            ci_low: f64::NAN,
            ci_high: f64::NAN,
            ci_rel: f64::INFINITY,
        };
    }
    let mean = s.iter().sum::<f64>() / n as f64;
    let var = if n > 1 { s.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64 } else { 0.0 };
    let med = median(&s);
    let (lo, hi) = median_ci_ranks(n);
    let ci_rel = if med > 0.0 { (s[hi] - s[lo]) / med } else { f64::INFINITY };
    Summary { n, median: med, mean, std: var.sqrt(), min: s[0], max: s[n - 1], ci_low: s[lo], ci_high: s[hi], ci_rel }
}

/// When to stop repeating.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StopRule {
    /// Stop when the median's CI is narrower than this fraction of it (0.01: 1%).
    pub target_ci_rel: f64,
    pub min_samples: usize,
    pub max_samples: usize,
    /// Seconds of timed work allowed.
    pub budget_seconds: f64,
}

impl Default for StopRule {
    fn default() -> Self {
        StopRule { target_ci_rel: 0.01, min_samples: 20, max_samples: 20_000, budget_seconds: 10.0 }
    }
}

/// Whether to stop after `samples` taking `elapsed_seconds`, and why.
pub fn should_stop(samples: &[f64], elapsed_seconds: f64, rule: &StopRule) -> Option<Stop> {
    if samples.len() >= rule.max_samples {
        return Some(Stop::MaxSamples);
    }
    if samples.len() >= rule.min_samples && summarize(samples).ci_rel < rule.target_ci_rel {
        return Some(Stop::Converged);
    }
    if elapsed_seconds >= rule.budget_seconds {
        return Some(Stop::Budget);
    }
    None
}

/// How many more samples to ask for: enough to finish in one more round at the current rate
/// when the CI shrinks as 1/√n, within the budget, at least 10.
pub fn next_batch(samples: &[f64], elapsed_seconds: f64, rule: &StopRule) -> usize {
    let n = samples.len().max(1);
    let per = (elapsed_seconds / n as f64).max(1e-6);
    let left = ((rule.budget_seconds - elapsed_seconds) / per).max(0.0) as usize;
    let ci = summarize(samples).ci_rel;
    let want = if ci.is_finite() && ci > 0.0 {
        ((n as f64) * (ci / rule.target_ci_rel).powi(2)).ceil() as usize
    } else {
        2 * n
    };
    want.saturating_sub(n).clamp(10, left.max(10)).min(rule.max_samples.saturating_sub(samples.len()).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random sample: splitmix64 → uniform → roughly normal (sum of 12).
    fn noisy(n: usize, center: f64, spread: f64, seed: u64) -> Vec<f64> {
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        (0..n).map(|_| center + spread * ((0..12).map(|_| next()).sum::<f64>() - 6.0)).collect()
    }

    #[test]
    fn summary_of_known_values() {
        let s = summarize(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((s.n, s.median, s.min, s.max), (5, 3.0, 1.0, 5.0));
        assert!((s.mean - 3.0).abs() < 1e-12);
        assert!((s.std - 2.5f64.sqrt()).abs() < 1e-12);
        // Too few for an interval: the whole sample.
        assert_eq!((s.ci_low, s.ci_high), (1.0, 5.0));
        assert_eq!(median(&[1.0, 2.0, 3.0, 4.0]), 2.5);
        let e = summarize(&[]);
        assert_eq!(e.n, 0);
        assert!(e.median.is_nan());
    }

    #[test]
    fn the_median_ci_ranks_follow_the_binomial_approximation() {
        // n = 100: 50 ∓ 9.8 → ranks 40 and 60.
        assert_eq!(median_ci_ranks(100), (40, 60));
        let (lo, hi) = median_ci_ranks(10_000);
        assert_eq!((lo, hi), (4902, 5098));
        assert_eq!(median_ci_ranks(3), (0, 2));
    }

    #[test]
    fn the_ci_covers_the_true_median_about_95_percent_of_the_time() {
        let mut covered = 0;
        for seed in 0..400 {
            let s = summarize(&noisy(60, 10.0, 1.0, seed * 7919 + 1));
            if s.ci_low <= 10.0 && 10.0 <= s.ci_high {
                covered += 1;
            }
        }
        assert!((365..=395).contains(&covered), "coverage {covered}/400");
    }

    #[test]
    fn the_stopping_rule_converges_on_quiet_samples_and_spends_the_budget_on_noisy_ones() {
        let rule = StopRule { target_ci_rel: 0.01, min_samples: 20, max_samples: 5000, budget_seconds: 1.0 };
        let quiet = noisy(40, 100.0, 0.5, 3);
        assert_eq!(should_stop(&quiet, 0.1, &rule), Some(Stop::Converged));
        let noisy_s = noisy(40, 100.0, 30.0, 4);
        assert_eq!(should_stop(&noisy_s, 0.1, &rule), None);
        assert_eq!(should_stop(&noisy_s, 1.5, &rule), Some(Stop::Budget));
        assert_eq!(should_stop(&noisy(5000, 100.0, 30.0, 5), 0.1, &rule), Some(Stop::MaxSamples));
        // Too few samples never converge, however quiet.
        assert_eq!(should_stop(&[1.0; 5], 0.0, &rule), None);
        // The next batch asks for more when the CI is wide, within the budget.
        let more = next_batch(&noisy_s, 0.1, &rule);
        assert!(more > 40, "{more}");
        assert!(more <= 400, "{more}: the budget allows 10x the rate so far");
    }
}

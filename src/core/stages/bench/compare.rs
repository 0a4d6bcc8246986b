//! Benches compared across versions and runs: regressions, one timer basis, the fastest.

pub use crate::model::bench::{Comparison, SizeBench};
use crate::model::report::StageDetail;
use crate::stats::Summary;

use super::*;

/// Compares two benches' headline summaries. A version regressed only when even the fastest its
/// interval allows is slower than the slowest the baseline's allows by more than `max_pct`.
pub(super) fn compare(
    version: &str,
    candidate: &Summary,
    baseline: &str,
    base: &Summary,
    max_pct: f64,
    basis: String,
) -> Comparison {
    let change = 100.0 * (candidate.median / base.median - 1.0);
    let least = 100.0 * (candidate.ci_low / base.ci_high - 1.0);
    Comparison {
        version: version.into(),
        baseline: baseline.into(),
        change_percent: change,
        least_slowdown_percent: least,
        max_regression_percent: max_pct,
        regressed: least > max_pct,
        basis,
    }
}

/// The first passing bench among `rows` (history rows, in the order they are given): its first
/// benchmark size.
pub fn passing_bench<'a>(rows: impl IntoIterator<Item = &'a crate::store::ResultRow>) -> Option<SizeBench> {
    rows.into_iter()
        .filter(|r| r.stage == crate::model::report::Stage::Bench.name() && r.verdict == Verdict::Pass.name())
        .find_map(|r| recorded_bench(&r.payload))
}

/// A recorded bench result's first benchmark size, from the history.
pub fn recorded_bench(payload: &serde_json::Value) -> Option<SizeBench> {
    let result: crate::model::report::StageResult = serde_json::from_value(payload.clone()).ok()?;
    let StageDetail::Bench(b) = result.detail else { return None };
    b.sizes.into_iter().next()
}

/// [`compare`] on a basis both benches share: their headlines when the basis is the same (or
/// one is device-wide, whose event time misses the work), else their times between events, so
/// that a bench timed by CUPTI is not compared with one timed by events (they differ by a few
/// microseconds of event processing).
pub fn compare_benches(
    version: &str,
    candidate: &SizeBench,
    baseline: &str,
    base: &SizeBench,
    max_pct: f64,
) -> Comparison {
    let (s, basis) = one_timer(&[candidate, base]);
    compare(version, s[0], baseline, s[1], max_pct, basis)
}

/// Whether benches were timed by different timers (CUPTI and events; device-wide aside).
pub fn mixed_timers(benches: &[&SizeBench]) -> bool {
    let mut timers: Vec<&str> = benches.iter().map(|b| b.basis.as_str()).filter(|b| *b != BASIS_DEVICE).collect();
    timers.sort_unstable();
    timers.dedup();
    timers.len() > 1
}

/// The summaries to compare benches by, and what they are: the headlines when the benches share
/// a timer, else each one's time between events (which every bench records), except a
/// device-wide headline, whose event time misses the work left on another stream.
pub fn one_timer<'a>(benches: &[&'a SizeBench]) -> (Vec<&'a Summary>, String) {
    let mixed = mixed_timers(benches);
    let pick = |b: &&'a SizeBench| -> (&'a Summary, &'a str) {
        if mixed && b.basis != BASIS_DEVICE { (&b.gpu, BASIS_EVENTS) } else { (&b.headline, b.basis.as_str()) }
    };
    let picked: Vec<(&Summary, &str)> = benches.iter().map(pick).collect();
    let mut names: Vec<&str> = Vec::new();
    for (_, name) in &picked {
        if !names.contains(name) {
            names.push(name);
        }
    }
    (picked.into_iter().map(|p| p.0).collect(), names.join(" vs "))
}

/// The fastest of some benched versions (each given with its bench's first size), judged on
/// one timer ([`one_timer`]): a version timed by CUPTI is not faster for its timer alone.
pub fn fastest<T: Copy>(benched: &[(T, &SizeBench)]) -> Option<T> {
    let benches: Vec<&SizeBench> = benched.iter().map(|(_, b)| *b).collect();
    let (summaries, _) = one_timer(&benches);
    benched.iter().zip(summaries).min_by(|a, b| a.1.median.total_cmp(&b.1.median)).map(|((t, _), _)| *t)
}

#[cfg(test)]
mod compare_tests {
    use super::*;

    fn summary(median: f64, half_ci: f64) -> Summary {
        Summary {
            n: 100,
            median,
            mean: median,
            std: 0.0,
            min: median - half_ci,
            max: median + half_ci,
            ci_low: median - half_ci,
            ci_high: median + half_ci,
            ci_rel: 2.0 * half_ci / median,
        }
    }

    #[test]
    fn a_regression_needs_the_intervals_apart_by_more_than_the_threshold() {
        let base = summary(100.0, 1.0);
        // 10% slower with tight intervals: regressed at 5%.
        let c = compare("v2", &summary(110.0, 1.0), "v1", &base, 5.0, String::new());
        assert!(c.regressed, "{c:?}");
        assert!((c.change_percent - 10.0).abs() < 1e-9);
        assert!((c.least_slowdown_percent - (109.0 / 101.0 - 1.0) * 100.0).abs() < 1e-9);
        // The same median, but noisy: the intervals overlap the threshold, no regression.
        assert!(!compare("v2", &summary(110.0, 6.0), "v1", &base, 5.0, String::new()).regressed);
        // Faster is never a regression.
        assert!(!compare("v2", &summary(90.0, 1.0), "v1", &base, 0.0, String::new()).regressed);
    }

    #[test]
    fn a_change_of_timer_is_not_a_change_of_speed() {
        let bench = |basis: &str, headline: f64, events: f64| SizeBench {
            headline: summary(headline, 0.1),
            gpu: summary(events, 0.1),
            basis: basis.into(),
            ..Default::default()
        };
        // The baseline timed by events (262 µs), the candidate by CUPTI (259.5 µs busy, 262 by
        // events): the same kernel, no change, not 1% faster.
        let c = compare_benches("v2", &bench(BASIS_CUPTI, 259.5, 262.0), "v1", &bench(BASIS_EVENTS, 262.0, 262.0), 0.5);
        assert_eq!(c.basis, "events");
        assert!(c.change_percent.abs() < 1e-9, "{c:?}");
        // Both by CUPTI: the headlines.
        let c = compare_benches("v2", &bench(BASIS_CUPTI, 265.0, 268.0), "v1", &bench(BASIS_CUPTI, 259.5, 262.0), 1.0);
        assert_eq!(c.basis, "cupti");
        assert!((c.change_percent - 100.0 * (265.0 / 259.5 - 1.0)).abs() < 1e-9 && c.regressed, "{c:?}");
        // Work left on a side stream: its event time misses it, so the headlines, and it says so.
        let c =
            compare_benches("v2", &bench(BASIS_DEVICE, 100_000.0, 5.0), "v1", &bench(BASIS_CUPTI, 250.0, 252.0), 5.0);
        assert_eq!(c.basis, "device-wide vs cupti");
        assert!(c.regressed);
        // The best approved version is picked on one timer too: v3 by CUPTI is not faster than
        // v4 by events for its timer alone (261.6 against 261.0 between events).
        let (v3, v4, v5) =
            (bench(BASIS_CUPTI, 259.1, 261.6), bench(BASIS_EVENTS, 261.0, 261.0), bench(BASIS_CUPTI, 250.1, 252.6));
        let (s, basis) = one_timer(&[&v3, &v4, &v5]);
        assert_eq!(basis, "events");
        assert_eq!(s.iter().map(|s| s.median).collect::<Vec<_>>(), vec![261.6, 261.0, 252.6]);
        let (s, basis) = one_timer(&[&v3, &v5]);
        assert_eq!((s[0].median, s[1].median, basis.as_str()), (259.1, 250.1, "cupti"));
        assert_eq!(fastest(&[("v3", &v3), ("v4", &v4)]), Some("v4"));
        assert_eq!(fastest(&[("v3", &v3), ("v4", &v4), ("v5", &v5)]), Some("v5"));
        assert_eq!(fastest::<&str>(&[]), None);
    }
}

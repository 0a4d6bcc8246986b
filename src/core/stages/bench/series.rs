//! Timing one series to its stopping rule, and two interleaved: the samples, the headline basis
//! (CUPTI, events, device-wide) and the roles of a comparison.

use std::time::Duration;

pub use crate::model::bench::{SizeBench, Speedup};
use crate::model::protocol::{self};
use crate::runners::Runners;
use crate::spec::SizeSet;
use crate::stages::StageOutcome;
use crate::stats::{self, Stop, StopRule};

use super::*;

pub(super) fn bench_size(
    cx: &mut BenchCtx,
    target: &Target,
    reference: Option<LaunchAt>,
    sizes: &SizeSet,
    sets: &Sets,
    dir: &std::path::Path,
) -> Result<SizeBench, Box<StageOutcome>> {
    let spec = cx.spec;
    let runners = &mut *cx.runners;
    // A request may take the whole budget plus one run's limit.
    let limit = spec.limits.bench + spec.limits.run * 2;
    let rule = StopRule { budget_seconds: spec.limits.bench.as_secs_f64(), ..StopRule::default() };
    fork_for(runners, &[target])?;
    let first =
        sourced(first_request(spec, target, sizes, &sets.files, &sets.extra, 0)?, &sets.read_only, &sets.filled);
    let series = sample_series(runners, target, first, limit, &rule)?;
    let mut out = size_bench(sizes, &series);
    // One more call, on the fresh set copied into the buffers of a set drawn at random, its
    // outputs written back and checked; then a small kernel is also timed by graph replay (a
    // capture that fails is reported, not fatal).
    let k = recheck_set();
    let req =
        protocol::Bench { write_back: true, recheck_set: k as u32, recheck_inputs: sets.fresh.clone(), ..more(0, 0) };
    let written = send(runners, target, req, limit)?;
    stats::add_phases(&mut out.phases, &written.phases);
    if out.basis != BASIS_DEVICE && out.headline.median < SMALL_KERNEL_MS {
        let req = protocol::Bench { graph_calls: GRAPH_CALLS, graph_replays: GRAPH_REPLAYS, ..more(0, 0) };
        match send(runners, target, req, limit) {
            Ok(r) if !r.graph_ms.is_empty() => {
                stats::add_phases(&mut out.phases, &r.phases);
                out.graph = Some(stats::summarize(&r.graph_ms))
            }
            Ok(_) => out.graph_error = Some("the worker returned no graph replay times".to_string()),
            Err(f) => out.graph_error = Some(f.summary),
        }
    }
    out.recheck_set = Some(k as u32);
    out.recheck_ms = written.recheck_sample.as_ref().map(|s| s.gpu_ms);
    out.recheck_failure = recheck_timed(cx, reference, sizes, sets, &mut out.phases);
    if out.recheck_failure.is_none()
        && let Some(why) = written.recheck_sample.as_ref().and_then(|f| remembered_samples(&series.samples, f))
    {
        // One call can meet a pause of the host or the device: a second fresh set, drawn now,
        // must be as slow before the timed calls are called remembered.
        let again = second_fresh_call(cx, target, sizes, dir, k, limit)?;
        if let Some(second) = again.and_then(|s| remembered_samples(&series.samples, &s)) {
            let second = second.replacen("the call on inputs no timed call saw", "a second fresh set", 1);
            out.recheck_failure = Some(format!(
                "{why}; {second}: the timed calls did less than a first call does, as a result remembered across \
                 calls does"
            ));
            out.recheck_reason = Some(Reason::Memoised);
        }
    }
    Ok(out)
}

/// The time of one more call like the re-checked one, on a set drawn afresh into `dir` (from
/// rung's own randomness) and copied into set `k`'s buffers; None when it could not be drawn.
fn second_fresh_call(
    cx: &mut BenchCtx,
    target: &Target,
    sizes: &SizeSet,
    dir: &std::path::Path,
    k: usize,
    limit: Duration,
) -> Result<Option<protocol::Sample>, Box<StageOutcome>> {
    let Ok(fresh) = write_set(cx.spec, sizes, crate::check::draw_seed(), &dir.join("fresh"), 0) else {
        return Ok(None);
    };
    let req = protocol::Bench { write_back: true, recheck_set: k as u32, recheck_inputs: fresh, ..more(0, 0) };
    Ok(send(cx.runners, target, req, limit)?.recheck_sample)
}

/// How much slower than the slowest timed call the re-checked call (the first on data none of
/// them saw) may be, and by at least how many milliseconds, before the timed calls are taken to
/// have found something a first call does not: between events, where the host's pace and
/// pauses show (a call that waits for the device inside is timed at its host's pace), and in the
/// GPU's busy time from CUPTI, the device's work alone.
pub const REMEMBERED_FACTOR: f64 = 1.5;
pub const REMEMBERED_MARGIN_MS: f64 = 0.05;
pub const REMEMBERED_BUSY_MARGIN_MS: f64 = 0.005;

/// Why the timed calls look remembered: the call on fresh data took over [`REMEMBERED_FACTOR`]
/// times (and [`REMEMBERED_MARGIN_MS`] more than) the slowest of them, `timed_ms` and
/// `fresh_ms` measured alike (between events on the call's stream, or the host's wall time to
/// an idle device). An honest call costs the same on new data as on data it has seen; one that
/// keeps a result across calls (by pointer, or by a sample of its inputs) does its work only
/// for the fresh data.
pub(super) fn remembered(timed_ms: &[f64], fresh_ms: f64) -> Option<String> {
    remembered_by(timed_ms, fresh_ms, REMEMBERED_MARGIN_MS, "")
}

/// As [`remembered`], on `timed`'s and `fresh`'s own samples: between events first, then, when
/// every one of them carries it, in the GPU's busy time (margin [`REMEMBERED_BUSY_MARGIN_MS`]).
/// A version that waits for the device inside its call (GPU MODE's pmpp_v2 solutions that read
/// a value back) is timed between events at its host's pace, 140 µs a call on an H100 whether it
/// worked or skipped; its busy time is the work it did.
pub(super) fn remembered_samples(timed: &[protocol::Sample], fresh: &protocol::Sample) -> Option<String> {
    let events: Vec<f64> = timed.iter().map(|s| s.gpu_ms).collect();
    if let Some(why) = remembered(&events, fresh.gpu_ms) {
        return Some(why);
    }
    let busy: Option<Vec<f64>> = timed.iter().map(|s| s.busy_ms).collect();
    match (busy, fresh.busy_ms) {
        (Some(busy), Some(f)) => remembered_by(&busy, f, REMEMBERED_BUSY_MARGIN_MS, " of the GPU's busy time"),
        _ => None,
    }
}

fn remembered_by(timed_ms: &[f64], fresh_ms: f64, margin_ms: f64, basis: &str) -> Option<String> {
    let slowest = timed_ms.iter().copied().fold(f64::NAN, f64::max);
    let median = stats::summarize(timed_ms).median;
    (fresh_ms > REMEMBERED_FACTOR * slowest && fresh_ms - slowest > margin_ms).then(|| {
        format!(
            "the call on inputs no timed call saw took {:.1} µs{basis}, {:.1}x the timed calls' median ({:.1} µs; the \
             slowest {:.1} µs)",
            fresh_ms * 1e3,
            fresh_ms / median,
            median * 1e3,
            slowest * 1e3
        )
    })
}

/// A problem bench's re-check put in `size`: the judge's finding (`judged`, why and reason) on
/// the calls on fresh inputs, and the time of the faster timed call on fresh inputs in the timed
/// buffers. That time stands beside the timed calls' (`timed_ms`) only once the judge found the
/// outputs right: a wrong answer stays the judge's finding, and a right one timed far above every
/// timed call is a remembered result (`memoised`).
pub(super) fn problem_rechecked(
    size: &mut SizeBench,
    judged: (Option<String>, Option<Reason>),
    fresh: Option<&protocol::Sample>,
    timed: &[protocol::Sample],
) {
    (size.recheck_failure, size.recheck_reason) = judged;
    let fresh = fresh.filter(|_| size.recheck_failure.is_none());
    size.recheck_ms = fresh.map(|s| s.gpu_ms);
    if let Some(why) = fresh.and_then(|f| remembered_samples(timed, f)) {
        size.recheck_failure = Some(format!(
            "{why}, the faster of two calls on fresh inputs in the timed buffers: the timed calls did less than a \
             first call on new inputs does, as a result remembered across calls does"
        ));
        size.recheck_reason = Some(Reason::Memoised);
    }
}

/// The input set a bench re-checks, drawn afresh for each bench from rung's own randomness,
/// which nothing a version runs can see.
pub(super) fn recheck_set() -> usize {
    (crate::check::draw_seed() % INPUT_SETS as u64) as usize
}

/// The statistics of one size's samples (no graph replay, no re-check yet).
pub(super) fn size_bench(sizes: &SizeSet, series: &Series) -> SizeBench {
    let Series { samples, fixed_ms, stop, timer_note, l2_persisting_bytes, phases, input_sets } = series;
    let (fixed_ms, stop) = (*fixed_ms, *stop);
    let (metric, basis) = headline_samples(samples, fixed_ms);
    let summary = |f: fn(&protocol::Sample) -> f64| stats::summarize(&samples.iter().map(f).collect::<Vec<_>>());
    SizeBench {
        sizes: sizes.clone(),
        headline: stats::summarize(&metric),
        basis: basis.into(),
        gpu: summary(|s| s.gpu_ms),
        host: summary(|s| s.host_ms),
        wall: summary(|s| s.wall_ms),
        fixed_ms,
        stop,
        input_sets: input_sets.unwrap_or(INPUT_SETS),
        flush_bytes: FLUSH_BYTES,
        graph: None,
        graph_error: None,
        recheck_set: None,
        recheck_ms: None,
        recheck_failure: None,
        recheck_reason: None,
        span: samples.iter().map(|s| s.span_ms).collect::<Option<Vec<f64>>>().map(|v| stats::summarize(&v)),
        timer_note: timer_note.clone(),
        l2_persisting_bytes: *l2_persisting_bytes,
        phases: phases.clone(),
    }
}

/// One series' timed calls, the fixed cost of waiting, why sampling stopped, and why the
/// samples carry no CUPTI busy time when they do not.
pub struct Series {
    pub samples: Vec<protocol::Sample>,
    pub fixed_ms: f64,
    pub stop: Stop,
    pub timer_note: Option<String>,
    /// The persisting-L2 carve-out the version had set before a timed call (undone), bytes.
    pub l2_persisting_bytes: Option<u64>,
    /// The workers' phases over the series' requests, summed (seconds).
    pub phases: BTreeMap<String, f64>,
    /// The input sets the worker rotated through, when it says (a problem's own inputs: one
    /// when a set is past a GiB).
    pub input_sets: Option<usize>,
}

/// Sets up series 0 with `first`, then asks for samples in batches until the headline median's
/// interval is under the target or the budget is spent: the samples, the fixed cost, why it
/// stopped.
pub(super) fn sample_series(
    runners: &mut Runners,
    target: &Target,
    first: protocol::Bench,
    limit: Duration,
    rule: &StopRule,
) -> Result<Series, Box<StageOutcome>> {
    let resp = send(runners, target, first, limit)?;
    let mut phases = resp.phases.clone();
    let fixed_ms = resp.fixed_ms.unwrap_or(0.0);
    let timer_note = resp.timer_note;
    let mut l2_persisting_bytes = resp.l2_persisting_bytes;
    let input_sets = resp.input_sets.map(|n| n as usize);
    let mut samples = resp.samples;
    let stop = loop {
        // The timed work so far, and the figure that decides: the call's stream, or the whole
        // device when the call leaves work elsewhere.
        let spent: f64 = samples.iter().map(|s| s.wall_ms).sum::<f64>() / 1e3;
        let metric = headline_samples(&samples, fixed_ms).0;
        if let Some(stop) = stats::should_stop(&metric, spent, rule) {
            break stop;
        }
        let per = (spent / samples.len().max(1) as f64).max(1e-6);
        let left = ((rule.budget_seconds - spent) / per).ceil().max(1.0) as usize;
        let n = stats::next_batch(&metric, spent, rule).min(left) as u32;
        let r = send(runners, target, more(0, n), limit)?;
        l2_persisting_bytes = l2_persisting_bytes.max(r.l2_persisting_bytes);
        stats::add_phases(&mut phases, &r.phases);
        samples.extend(r.samples);
    };
    Ok(Series { samples, fixed_ms, stop, timer_note, l2_persisting_bytes, phases, input_sets })
}

/// Times `target` (series 0) and `other.target` (series 1) in alternating batches on the same
/// input sets until both medians' intervals are under the target or the bench budget is spent.
pub(super) fn interleave(
    cx: &mut BenchCtx,
    target: &Target,
    other: &Other,
    sizes: &SizeSet,
    sets: &Sets,
    dir: &std::path::Path,
) -> Result<Speedup, Box<StageOutcome>> {
    let spec = cx.spec;
    let runners = &mut *cx.runners;
    let limit = spec.limits.bench + spec.limits.run * 2;
    let rule = StopRule { budget_seconds: spec.limits.bench.as_secs_f64(), ..StopRule::default() };
    // Each series fills outputs of its own; the inputs are shared.
    let targets = [target, &other.target];
    let mut firsts = Vec::new();
    for (k, t) in targets.iter().enumerate() {
        let mut files = sets.files.clone();
        let at = dir.join(format!("s{k}"));
        let (outputs, filled) = filled_outputs(spec, sizes, &at)
            .map_err(|e| Box::new(fail(Verdict::Error, None, format!("{}: {e}", at.display()))))?;
        files.extend(outputs);
        let first = first_request(spec, t, sizes, &files, &sets.extra, k as u32)?;
        firsts.push(sourced(first, &sets.read_only, &filled));
    }
    let firsts: [protocol::Bench; 2] = firsts.try_into().expect("two series");
    alternate(runners, targets, firsts, other, sizes, limit, &rule)
}

/// The interleaved comparison itself: both series set up by `firsts`, then batches of each in
/// turn until [`interleave_done`].
pub(super) fn alternate(
    runners: &mut Runners,
    targets: [&Target; 2],
    firsts: [protocol::Bench; 2],
    other: &Other,
    sizes: &SizeSet,
    limit: Duration,
    rule: &StopRule,
) -> Result<Speedup, Box<StageOutcome>> {
    let rule = *rule;
    fork_for(runners, &targets)?;
    let mut samples: [Vec<protocol::Sample>; 2] = [vec![], vec![]];
    let mut fixed = [0.0; 2];
    for (k, first) in firsts.into_iter().enumerate() {
        let r = send(runners, targets[k], first, limit)?;
        fixed[k] = r.fixed_ms.unwrap_or(0.0);
        samples[k] = r.samples;
    }
    let mut rounds = 1;
    loop {
        let spent: f64 = samples.iter().flatten().map(|s| s.wall_ms).sum::<f64>() / 1e3;
        let metric = headline_pair(&samples, fixed);
        if interleave_done(rounds, &metric, spent, &rule) {
            break;
        }
        // Batches of about 50 ms each, at least 5 calls, so the alternation is fine-grained
        // next to any drift.
        for k in 0..2 {
            let per = samples[k].iter().map(|s| s.wall_ms).sum::<f64>() / 1e3 / samples[k].len().max(1) as f64;
            let n = ((INTERLEAVE_BATCH_SECONDS / per.max(1e-6)) as u32).clamp(5, 1000);
            let r = send(runners, targets[k], more(k as u32, n), limit)?;
            samples[k].extend(r.samples);
        }
        rounds += 1;
    }
    let [this, theirs] = headline_pair(&samples, fixed).map(|m| stats::summarize(&m));
    let (s, low, high) = speedup(&this, &theirs);
    Ok(Speedup {
        role: other.role.into(),
        against: other.label.clone(),
        sizes: sizes.clone(),
        this,
        other: theirs,
        speedup: s,
        speedup_low: low,
        speedup_high: high,
        rounds,
        suspicious: other.role == ROLE_BEST_APPROVED && s > SUSPICIOUS_SPEEDUP,
    })
}

/// Alternating rounds (an A batch, then a B batch) an interleaved comparison always times.
pub const MIN_ROUNDS: usize = 4;
/// Seconds of calls per batch of an interleaved comparison.
pub const INTERLEAVE_BATCH_SECONDS: f64 = 0.05;

/// Whether an interleaved comparison can stop after `rounds`: the budget is spent, or at least
/// [`MIN_ROUNDS`] have run and both medians' intervals are under the target.
pub fn interleave_done(rounds: usize, metric: &[Vec<f64>; 2], spent: f64, rule: &StopRule) -> bool {
    let done = |m: &Vec<f64>| matches!(stats::should_stop(m, 0.0, rule), Some(Stop::Converged | Stop::MaxSamples));
    spent >= rule.budget_seconds || (rounds >= MIN_ROUNDS && done(&metric[0]) && done(&metric[1]))
}

/// The roles a comparison can have.
pub const ROLE_BEST_APPROVED: &str = "best approved";
pub const ROLE_REFERENCE: &str = "reference";

pub const BASIS_CUPTI: &str = "cupti";
pub const BASIS_EVENTS: &str = "events";
pub const BASIS_DEVICE: &str = "device-wide";

/// The samples the headline comes from: the GPU's busy time for the call's work on every stream
/// from CUPTI's records when every sample has one; else GPU time between events on the call's
/// stream, or, when the device stays busy well past it (work left on another stream), the
/// device-wide interval less the fixed cost of waiting.
pub fn headline_samples(samples: &[protocol::Sample], fixed_ms: f64) -> (Vec<f64>, &'static str) {
    if let Some(busy) = busy_times(samples) {
        return (busy, BASIS_CUPTI);
    }
    events_headline(samples, fixed_ms)
}

pub(super) fn busy_times(samples: &[protocol::Sample]) -> Option<Vec<f64>> {
    (!samples.is_empty()).then(|| samples.iter().map(|s| s.busy_ms).collect::<Option<Vec<_>>>()).flatten()
}

/// Both sides of an interleaved comparison on one basis: CUPTI's busy times only when both have them
/// (a Triton version's worker may not trace while a CUDA one's does).
pub(super) fn headline_pair(samples: &[Vec<protocol::Sample>; 2], fixed: [f64; 2]) -> [Vec<f64>; 2] {
    match (busy_times(&samples[0]), busy_times(&samples[1])) {
        (Some(a), Some(b)) => [a, b],
        _ => [0, 1].map(|k| events_headline(&samples[k], fixed[k]).0),
    }
}

pub(super) fn events_headline(samples: &[protocol::Sample], fixed_ms: f64) -> (Vec<f64>, &'static str) {
    let gpu: Vec<f64> = samples.iter().map(|s| s.gpu_ms).collect();
    let device: Vec<f64> = samples.iter().map(|s| (s.wall_ms - fixed_ms).max(0.0)).collect();
    let (g, d) = (stats::summarize(&gpu).median, stats::summarize(&device).median);
    if d > 1.5 * g + 0.05 { (device, BASIS_DEVICE) } else { (gpu, BASIS_EVENTS) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A first call on new data well beyond every timed call is a remembered result; noise, a
    /// small kernel's few microseconds, or a fresh call as slow as the slowest timed one is not.
    #[test]
    fn a_fresh_call_far_slower_than_every_timed_one_is_a_remembered_result() {
        let timed = [0.375, 0.376, 0.380, 0.374];
        let why = remembered(&timed, 1.02).expect("2.7x the slowest timed call");
        assert!(why.contains("took 1020.0 µs, 2.7x the timed calls' median (375.5 µs"), "{why}");
        assert_eq!(remembered(&timed, 0.39), None, "an honest call costs the same on new data");
        assert_eq!(remembered(&timed, 0.55), None, "under the factor");
        assert_eq!(remembered(&[0.002, 0.0021], 0.03), None, "under the margin");
        assert_eq!(remembered(&[0.375, 0.376, 0.9], 1.02), None, "no slower than the timed calls' own worst");
        assert_eq!(remembered(&[], 1.0), None, "no timed calls, no comparison");
    }

    /// A problem's re-check: the judge's finding stands as it is (its time not set beside the
    /// timed calls', so the summary says the outputs are wrong); a right answer is timed, and
    /// one far slower than every timed call is `memoised`.
    #[test]
    fn a_problem_recheck_is_judged_first_then_timed() {
        let sample = |gpu_ms| protocol::Sample { gpu_ms, host_ms: 0.01, wall_ms: 0.2, ..Default::default() };
        let series = Series {
            samples: [0.030, 0.031, 0.029].into_iter().map(sample).collect(),
            fixed_ms: 0.0,
            stop: Stop::Converged,
            timer_note: None,
            l2_persisting_bytes: None,
            phases: BTreeMap::new(),
            input_sets: Some(1),
        };
        let timed = &series.samples;
        let fresh = || size_bench(&SizeSet::new(), &series);

        assert_eq!(fresh().input_sets, 1, "the sets the worker said it kept, not the sets asked for");
        let mut wrong = fresh();
        let judged = (Some("its answer is wrong".into()), Some(Reason::Memoised));
        problem_rechecked(&mut wrong, judged, Some(&sample(0.17)), timed);
        assert_eq!(wrong.recheck_failure.as_deref(), Some("its answer is wrong"));
        assert_eq!((wrong.recheck_reason, wrong.recheck_ms), (Some(Reason::Memoised), None));

        let mut skipped = fresh();
        problem_rechecked(&mut skipped, (None, None), Some(&sample(0.1706)), timed);
        assert_eq!((skipped.recheck_reason, skipped.recheck_ms), (Some(Reason::Memoised), Some(0.1706)));
        let why = skipped.recheck_failure.unwrap();
        assert!(why.contains("took 170.6 µs") && why.contains("faster of two calls on fresh inputs"), "{why}");

        let mut honest = fresh();
        problem_rechecked(&mut honest, (None, None), Some(&sample(0.032)), timed);
        assert_eq!((honest.recheck_failure, honest.recheck_reason, honest.recheck_ms), (None, None, Some(0.032)));

        let mut unmeasured = fresh();
        problem_rechecked(&mut unmeasured, (None, None), None, timed);
        assert_eq!((unmeasured.recheck_failure, unmeasured.recheck_ms), (None, None));
    }

    /// A version that reads a value back inside its call is timed between events at its host's
    /// pace (GPU MODE's outslot v024 on an H100: 140 µs a call, skipped or not, with a slowest
    /// timed call far above that), so events cannot tell a skipped call from a working one; the
    /// GPU's busy time can. An honest version's fresh call is as busy as its timed ones.
    #[test]
    fn a_call_paced_by_its_host_is_judged_by_the_gpus_busy_time() {
        let s = |gpu_ms, busy_ms| protocol::Sample { gpu_ms, busy_ms: Some(busy_ms), ..Default::default() };
        // Skipped timed calls: 3 µs of device work each, one host pause of 0.4 ms among them.
        let mut timed: Vec<protocol::Sample> = (0..600).map(|i| s(0.140 + (i % 7) as f64 * 1e-3, 0.0031)).collect();
        timed.push(s(0.40, 0.0032));
        let working = s(0.25, 0.107);
        assert!(remembered(&timed.iter().map(|t| t.gpu_ms).collect::<Vec<_>>(), working.gpu_ms).is_none());
        let why = remembered_samples(&timed, &working).expect("107 µs of work where the timed calls did 3 µs");
        assert!(why.contains("took 107.0 µs of the GPU's busy time") && why.contains("slowest 3.2 µs"), "{why}");
        // Honest: the same work on new data.
        let honest: Vec<protocol::Sample> = (0..600).map(|i| s(0.150, 0.105 + (i % 5) as f64 * 1e-3)).collect();
        assert_eq!(remembered_samples(&honest, &s(0.16, 0.108)), None);
        // A tiny kernel's few microseconds are under the margin.
        assert_eq!(remembered_samples(&[s(0.01, 0.001)], &s(0.01, 0.004)), None);
        // Busy time only where every sample has it: a timed call untraced leaves events alone.
        let mut partly = timed.clone();
        partly[3].busy_ms = None;
        assert_eq!(remembered_samples(&partly, &working), None);
        assert_eq!(remembered_samples(&timed, &protocol::Sample { busy_ms: None, ..working }), None);
    }
}

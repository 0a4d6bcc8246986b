//! The bench and roofline rungs (DESIGN.md, Timing). For each benchmark size rung draws several
//! independent input sets, the worker uploads them once, warms up by time, then times calls
//! rotating through the sets with L2 flushed before each. rung asks for samples in batches until
//! the median's 95% confidence interval is under 1% or the budget (`limits.bench`) is spent, and
//! computes every statistic itself. The outputs of a timed call on the real input set are checked
//! against the reference at the benchmark size. One bench at a time per GPU (a lock per UUID);
//! the device's clocks and throttle reasons are recorded before and after.
//!
//! The headline time is the GPU's busy time for the call's work from CUPTI's activity records
//! (the Python worker takes it from a traced call beside each untraced one). Without CUPTI it is
//! the GPU time between events on the call's stream, unless the call left work on another stream:
//! then it is the device-wide interval as the host saw it, less the measured fixed cost of waiting
//! for the device.

mod compare;
mod recheck;
mod roofline;
mod series;
mod sets;

pub use compare::*;
use recheck::*;
pub use roofline::*;
pub use series::*;
pub use sets::*;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::devstate::DeviceState;
use crate::gpu::GpuInfo;
pub use crate::model::bench::{BenchDetail, Ceilings, Comparison, RooflineDetail, SizeBench, Speedup};
use crate::model::protocol::{self, CallMode, Op, Response, TensorFile};
use crate::model::report::{Reason, StageDetail, Verdict};
use crate::runners::{Failure, Runners};
use crate::spec::{SizeSet, Spec};
use crate::stages::{Files, StageOutcome, call_args};
use crate::stats::{self, Clock, Stop, StopRule, Summary};
use crate::workspace::{VersionFile, Workspace};

/// Input sets the timed calls rotate through.
pub const INPUT_SETS: usize = 3;
/// Bytes cleared before each timed call: more than any current GPU's L2 (H100/H200: 50–60 MB).
pub const FLUSH_BYTES: u64 = 256 << 20;
/// Warm-up before timing.
pub const WARMUP_SECONDS: f64 = 0.3;

/// Datasheet figures (dense bf16 TFLOP/s, HBM GB/s) by GPU name.
pub fn datasheet(name: &str) -> (Option<f64>, Option<f64>) {
    let n = name.to_ascii_uppercase();
    if n.contains("H200") {
        (Some(4800.0), Some(989.4))
    } else if n.contains("H100") && n.contains("PCIE") {
        (Some(2000.0), Some(756.0))
    } else if n.contains("H100") {
        (Some(3350.0), Some(989.4))
    } else if n.contains("A100") {
        (Some(2039.0), Some(312.0))
    } else {
        (None, None)
    }
}

fn fail(verdict: Verdict, reason: Option<Reason>, summary: impl Into<String>) -> StageOutcome {
    StageOutcome { verdict, summary: summary.into(), diagnostics: vec![], detail: StageDetail::None, reason }
}

/// Builds a CUDA version's launch at a size, given its buffers.
pub type LaunchAt<'a> = &'a dyn Fn(&SizeSet, &Files) -> Result<protocol::Launch, crate::stages::run::LaunchError>;

/// How one timed call is made: the native launch or the Python call at a size, given the files.
pub enum Target<'a> {
    Native(LaunchAt<'a>),
    Python {
        file: PathBuf,
        params: Vec<String>,
    },
    /// A GPU MODE or KernelBench version or reference, which makes its own inputs.
    Problem(protocol::ProblemBench),
}

impl Target<'_> {
    /// A Python version's target: its `run` and the parameter names it declares.
    pub fn python(file: PathBuf, source: &str) -> Target<'static> {
        Target::Python {
            file,
            params: crate::stages::prepare::python_def_params(source, "run")
                .map(|(p, _)| p.into_iter().map(|(n, _)| n).collect())
                .unwrap_or_default(),
        }
    }

    fn is_python(&self) -> bool {
        matches!(self, Target::Python { .. } | Target::Problem(_))
    }
}

/// What a version is compared with, re-benched in the same session, interleaved.
pub struct Other<'a> {
    /// `best approved` or `reference`.
    pub role: &'static str,
    /// The version's id, or the reference's file.
    pub label: String,
    pub target: Target<'a>,
}

/// A speedup over the best approved version above this is flagged for review.
pub const SUSPICIOUS_SPEEDUP: f64 = 10.0;

/// Speedup (other / this) and its interval from the two medians' intervals.
pub fn speedup(this: &Summary, other: &Summary) -> (f64, f64, f64) {
    let s = other.median / this.median;
    let low = other.ci_low / this.ci_high;
    let high = other.ci_high / this.ci_low.max(f64::MIN_POSITIVE);
    (s, low, high)
}

/// What a bench reads and drives: the workspace, its problem, the workers, and the seed its
/// input sets are drawn from.
pub struct BenchCtx<'a> {
    pub ws: &'a Workspace,
    pub spec: &'a Spec,
    pub runners: &'a mut Runners,
    pub seed: u64,
}

/// The sizes a version is benched at: `[sizes] bench`, else the last test size.
pub fn bench_sizes(spec: &Spec) -> Vec<SizeSet> {
    if spec.bench_sizes.is_empty() {
        spec.test_sizes.last().cloned().into_iter().collect()
    } else {
        spec.bench_sizes.clone()
    }
}

/// The GPU's bench lock (waited for) and its state once held, each a lap of `clock`.
fn take_gpu(
    gpu: &GpuInfo,
    clock: &mut Clock,
) -> std::io::Result<(crate::gpulock::GpuLock, Option<crate::devstate::DeviceState>)> {
    let lock = crate::gpulock::lock(&gpu.uuid)?;
    clock.lap("lock_wait");
    let state = crate::devstate::query(&gpu.uuid).ok();
    clock.lap("device_state");
    Ok((lock, state))
}

/// Benches one version that passed its check, then times it against each of `others`
/// interleaved. `target` says how a call is made.
pub fn bench(cx: &mut BenchCtx, gpu: &GpuInfo, v: &VersionFile, target: &Target, others: &[Other]) -> StageOutcome {
    let spec = cx.spec;
    let mut clock = Clock::new();
    let sizes = bench_sizes(spec);
    let (lock, before) = match take_gpu(gpu, &mut clock) {
        Ok(taken) => taken,
        Err(e) => return fail(Verdict::Error, None, format!("cannot take the GPU's bench lock: {e}")),
    };
    let python = target.is_python() || others.iter().any(|o| o.target.is_python());
    // A CUDA reference also re-checks the timed outputs.
    let reference = others.iter().find_map(|o| match o.target {
        Target::Native(f) if o.role == ROLE_REFERENCE => Some(f),
        _ => None,
    });
    let mut results = Vec::new();
    let mut comparisons = Vec::new();
    let mut notes = Vec::new();
    let mut failure: Option<StageOutcome> = None;
    let scratch = cx.runners.scratch(&format!("{}-bench", v.id));
    for (si, size) in sizes.iter().enumerate() {
        let dir = scratch.join(format!("b{si}"));
        let sets = match kept_sets(cx, size, &dir) {
            Ok(s) => s,
            Err(f) => {
                failure = Some(*f);
                break;
            }
        };
        clock.lap(if sets.drawn { PHASE_DRAWN } else { "inputs" });
        let timed = bench_size(cx, target, reference, size, &sets, &dir);
        clock.lap("series");
        match timed {
            Ok(r) => results.push(r),
            Err(f) => {
                failure = Some(*f);
                break;
            }
        }
        // Speedups at the first (headline) size only.
        if si > 0 {
            continue;
        }
        for (k, o) in others.iter().enumerate() {
            match interleave(cx, target, o, size, &sets, &dir.join(format!("c{k}"))) {
                Ok(c) => comparisons.push(c),
                Err(f) => notes.push(format!("against {} ({}): {}", o.label, o.role, f.summary)),
            }
            clock.lap("interleaved");
        }
    }
    if python {
        cx.runners.end_children();
    }
    clock.lap("workers");
    let _ = std::fs::remove_dir_all(&scratch);
    clock.lap("cleanup");
    finish(gpu, lock, before, Gathered { results, comparisons, notes, failure }, clock)
}

/// What a bench gathered: each size's series, the comparisons, why some were not made, and the
/// failure that stopped it.
struct Gathered {
    results: Vec<SizeBench>,
    comparisons: Vec<Speedup>,
    notes: Vec<String>,
    failure: Option<StageOutcome>,
}

/// The bench's outcome: the device state after, the detail, the lock given back, then the
/// failure that stopped it or the verdict and one-line summary from its sizes and comparisons.
fn finish(
    gpu: &GpuInfo,
    lock: crate::gpulock::GpuLock,
    before: Option<DeviceState>,
    gathered: Gathered,
    mut clock: Clock,
) -> StageOutcome {
    let Gathered { results, comparisons, notes, failure } = gathered;
    let after = crate::devstate::query(&gpu.uuid).ok();
    clock.lap("device_state");
    let throttled = before.as_ref().is_some_and(|d| d.throttled) || after.as_ref().is_some_and(|d| d.throttled);
    let throttle_note = throttled.then(|| throttle_words(before.as_ref(), after.as_ref()));
    let detail = StageDetail::Bench(BenchDetail {
        gpu: gpu.name.clone(),
        uuid: gpu.uuid.clone(),
        device_before: before,
        device_after: after,
        throttled,
        lock_wait_ms: lock.waited.as_secs_f64() * 1e3,
        sizes: results.clone(),
        speedups: comparisons.clone(),
        comparison_notes: notes,
        phases: clock.phases,
    });
    drop(lock);
    if let Some(mut f) = failure {
        f.detail = detail;
        return f;
    }
    if results.is_empty() {
        return StageOutcome { detail, ..fail(Verdict::Error, None, "nothing was timed") };
    }
    if let Some(l2) = results.iter().find_map(|r| r.l2_persisting_bytes.map(|b| (r, b))) {
        let (r, bytes) = l2;
        return StageOutcome {
            verdict: Verdict::Fail,
            summary: format!(
                "the version set aside {:.1} MB of persisting L2 (cudaLimitPersistingL2CacheSize) at {}: a cache-state game against a bench that starts each call from a flushed L2; rung undid it before every timed call ({:.1} µs median without it)",
                bytes as f64 / 1e6,
                crate::spec::size_label(&r.sizes),
                r.headline.median * 1e3
            ),
            diagnostics: vec![],
            detail,
            reason: Some(Reason::L2Persisting),
        };
    }
    if let Some(bad) = results.iter().find(|r| r.recheck_failure.is_some()) {
        // Right outputs, timed doing less than a first call on new data does (series::remembered).
        let remembered = bad.recheck_ms.is_some() && bad.recheck_reason == Some(Reason::Memoised);
        return StageOutcome {
            verdict: Verdict::Fail,
            summary: format!(
                "{} at {}: {}",
                if remembered {
                    "the timed runs are right but not timed doing the work"
                } else {
                    "the timed runs' outputs are wrong"
                },
                crate::spec::size_label(&bad.sizes),
                bad.recheck_failure.as_deref().unwrap_or("")
            ),
            diagnostics: vec![],
            detail,
            reason: Some(bad.recheck_reason.unwrap_or(Reason::Mismatch)),
        };
    }
    let first = &results[0];
    let at = match crate::spec::size_label(&first.sizes) {
        l if l.is_empty() => "the problem's inputs".to_string(),
        l => l,
    };
    let mut summary = format!(
        "{:.1} µs median at {at} ({} {}, n={}, 95% CI ±{:.2}%, host {:.1} µs/call)",
        first.headline.median * 1e3,
        first.basis,
        match first.stop {
            Stop::Converged => "converged",
            Stop::Budget => "budget spent",
            Stop::MaxSamples => "sample cap",
        },
        first.headline.n,
        first.headline.ci_rel * 50.0,
        first.host.median * 1e3,
    );
    if let Some(g) = &first.graph {
        summary.push_str(&format!("; graph replay {:.2} µs/call", g.median * 1e3));
    }
    for c in &comparisons {
        summary.push_str(&format!(
            "; {:.2}x vs {} ({}, interleaved, {:.2}–{:.2}x)",
            c.speedup, c.against, c.role, c.speedup_low, c.speedup_high
        ));
        if c.suspicious {
            summary.push_str(&format!(
                " SUSPICIOUS: over {SUSPICIOUS_SPEEDUP:.0}x the best approved version; review before approving"
            ));
        }
    }
    if let Some(note) = throttle_note {
        summary.push_str(&format!("; THROTTLED ({note})"));
    }
    StageOutcome { verdict: Verdict::Pass, summary, diagnostics: vec![], detail, reason: None }
}

/// What slowed the GPU, before or after the timed calls, in words: `software power cap, SM
/// clock 1500 of 1980 MHz after`.
fn throttle_words(before: Option<&DeviceState>, after: Option<&DeviceState>) -> String {
    let words: Vec<String> = [(before, "before"), (after, "after")]
        .into_iter()
        .filter_map(|(d, when)| d.filter(|d| d.throttled).map(|d| (d, when)))
        .map(|(d, when)| {
            let reasons = d.throttle_reasons.iter().filter(|r| !r.contains("idle")).cloned().collect::<Vec<_>>();
            let clock = match (d.sm_clock_mhz, d.max_sm_clock_mhz) {
                (Some(sm), Some(max)) => format!(", SM clock {sm} of {max} MHz"),
                _ => String::new(),
            };
            format!("{}{clock} {when}", reasons.join(", "))
        })
        .collect();
    if words.is_empty() { "see device state".into() } else { words.join("; ") }
}

/// Benches a GPU MODE or KernelBench version that passed its check: at each of task.yml's
/// `benchmarks:` (KernelBench: its `get_inputs()`), the problem's own inputs drawn on rung's
/// seeds, several independent sets rotated, L2 flushed before each call, the same adaptive
/// stopping rule; then, at the first benchmark, interleaved against the problem's reference
/// (`ref_kernel`, `Model`), which runs on the GPU: a real baseline. The timed version's output is
/// re-checked at each benchmark by the problem's own check (GPU MODE's `check_implementation`,
/// KernelBench's allclose).
pub fn bench_problem(ws: &Workspace, runners: &mut Runners, gpu: &GpuInfo, v: &VersionFile, seed: u64) -> StageOutcome {
    let Some(problem) = ws.reference.clone() else {
        return fail(Verdict::Error, None, "the problem has no reference file");
    };
    let format = if ws.format == crate::workspace::Format::GpuMode {
        protocol::ProblemFormat::GpuMode
    } else {
        protocol::ProblemFormat::KernelBench
    };
    let benchmarks: Vec<BTreeMap<String, serde_json::Value>> = if format == protocol::ProblemFormat::GpuMode {
        match crate::stages::problem::read_task_yml(&ws.root.join("task.yml")) {
            Ok(t) if !t.benchmarks.is_empty() => t.benchmarks,
            Ok(_) => return StageOutcome::new(Verdict::Skipped, "task.yml lists no benchmarks: nothing to time"),
            Err(d) => return fail(Verdict::Error, None, d.message),
        }
    } else {
        vec![BTreeMap::new()]
    };
    let limits = crate::spec::Limits::default();
    let limit = limits.bench + limits.run * 2;
    let rule = StopRule { budget_seconds: limits.bench.as_secs_f64(), ..StopRule::default() };
    let mut clock = Clock::new();
    let (lock, before) = match take_gpu(gpu, &mut clock) {
        Ok(taken) => taken,
        Err(e) => return fail(Verdict::Error, None, format!("cannot take the GPU's bench lock: {e}")),
    };
    let mut results = Vec::new();
    let mut comparisons = Vec::new();
    let mut notes = Vec::new();
    let mut failure = None;
    // rung's seeds, not the file's, drawn in the file's range as in the check.
    let listed: Vec<_> = benchmarks.iter().map(|a| (a.clone(), 1, true)).collect();
    let mut seeds_of =
        crate::stages::problem::SeedDraw::new(seed ^ 0xB5E7, crate::stages::problem::problem_seed_range(&listed));
    for (bi, bench) in benchmarks.iter().enumerate() {
        let mut args = bench.clone();
        let bench_seed = seeds_of.draw();
        if args.contains_key("seed") {
            args.insert("seed".into(), serde_json::json!(bench_seed));
        }
        // The benchmark's sizes, as its label; the seed is rung's, not a size.
        let sizes: SizeSet =
            args.iter().filter(|(k, _)| *k != "seed").filter_map(|(k, v)| v.as_i64().map(|i| (k.clone(), i))).collect();
        let problem_of = |reference: bool| protocol::ProblemBench {
            format,
            problem: problem.clone(),
            version: v.path.clone(),
            reference,
            args: args.clone(),
            seed: bench_seed,
            sets: INPUT_SETS as u32,
        };
        let target = Target::Problem(problem_of(false));
        let judge = protocol::Judge {
            format,
            problem: problem.clone(),
            args: args.clone(),
            seed: bench_seed,
            learn: false,
            observed: vec![],
            dump: None,
            tolerances: BTreeMap::new(),
            probe: false,
            recheck: false,
            sparse_call: false,
        };
        // What the judge learns of the problem (GPU MODE: the tensors of `data` the reference
        // writes) before anything is timed: each timed call, the version's and the reference's,
        // finds those outputs poisoned, and the re-check reuses it.
        let learnt = recheck::learn(runners, &judge, limit);
        clock.lap("judge_learn");
        let hints = learnt.as_ref().ok().cloned();
        let poisoned = |mut b: protocol::Bench| {
            b.hints = hints.clone();
            b
        };
        let first = poisoned(problem_request(problem_of(false), 0));
        let sampled = fork_for(runners, &[&target]).and_then(|_| sample_series(runners, &target, first, limit, &rule));
        clock.lap("series");
        let series = match sampled {
            Ok(x) => x,
            Err(f) => {
                failure = Some(*f);
                break;
            }
        };
        let mut size = series::size_bench(&sizes, &series);
        problem_recheck(runners, &target, judge, learnt, limit, &mut size, &series.samples);
        results.push(size);
        if bi > 0 {
            continue;
        }
        let reference = Other {
            role: ROLE_REFERENCE,
            label: problem.display().to_string(),
            target: Target::Problem(problem_of(true)),
        };
        let firsts = [poisoned(problem_request(problem_of(false), 0)), poisoned(problem_request(problem_of(true), 1))];
        match alternate(runners, [&target, &reference.target], firsts, &reference, &sizes, limit, &rule) {
            Ok(c) => comparisons.push(c),
            Err(f) => notes.push(format!("against {} ({}): {}", reference.label, reference.role, f.summary)),
        }
        clock.lap("interleaved");
    }
    runners.end_children();
    clock.lap("workers");
    finish(gpu, lock, before, Gathered { results, comparisons, notes, failure }, clock)
}

/// A problem series' first request: warm-up, flush, the problem's own inputs.
fn problem_request(problem: protocol::ProblemBench, series: u32) -> protocol::Bench {
    protocol::Bench {
        series,
        warmup_seconds: WARMUP_SECONDS,
        samples: 10,
        flush_bytes: FLUSH_BYTES,
        flush_ptx: Some(crate::assets::COPY_PTX.to_string()),
        problem: Some(problem),
        ..Default::default()
    }
}

fn worker_failure(f: Failure) -> StageOutcome {
    let reason = match f {
        Failure::Timeout(_) => Some(Reason::Timeout),
        Failure::Died(_) => Some(Reason::Crashed),
        Failure::Protocol(_) => None,
        Failure::Forged(_) => Some(Reason::ForgedReply),
        Failure::OutOfMemory(_) => None,
    };
    fail(if reason.is_some() { Verdict::Fail } else { Verdict::Error }, reason, f.to_string())
}

fn answer(resp: Result<Response, Failure>) -> Result<Response, Box<StageOutcome>> {
    match resp {
        Ok(r) if r.ok => Ok(r),
        Ok(r) => {
            let e = r.error.unwrap_or_else(|| protocol::WorkerError::new("error", ""));
            let reason = crate::stages::reason_for(&e);
            // rung's own verdicts say what happened in words; the version's exceptions keep
            // their kind, as Python names them.
            let own = matches!(reason, Reason::TimerPatched | Reason::HarnessPatched | Reason::LateWork);
            let summary = if own { e.message.clone() } else { format!("{}: {}", e.kind, e.message) };
            Err(Box::new(fail(Verdict::Fail, Some(reason), summary)))
        }
        Err(f) => Err(Box::new(worker_failure(f))),
    }
}

/// The first request of a series: what to call, the other input sets, warm-up and flush.
fn first_request(
    spec: &Spec,
    target: &Target,
    sizes: &SizeSet,
    files: &Files,
    extra: &[BTreeMap<String, PathBuf>],
    series: u32,
) -> Result<protocol::Bench, Box<StageOutcome>> {
    let mut first = protocol::Bench {
        series,
        sets: extra.to_vec(),
        warmup_seconds: WARMUP_SECONDS,
        samples: 10,
        flush_bytes: FLUSH_BYTES,
        ..Default::default()
    };
    match target {
        Target::Native(f) => {
            first.launch = Some(f(sizes, files).map_err(|e| Box::new(fail(Verdict::Fail, None, e.to_string())))?);
        }
        Target::Python { file, params } => {
            let args = call_args(spec, params, sizes, |t, _| {
                let (path, shape) = &files[&t.name];
                TensorFile { path: path.clone(), dtype: t.dtype, shape: shape.clone() }
            })
            .map_err(|e| Box::new(fail(Verdict::Error, None, e.to_string())))?;
            first.call = Some(protocol::Call {
                file: file.clone(),
                function: "run".into(),
                mode: CallMode::Cuda,
                args,
                returns: BTreeMap::new(),
                guard_bytes: 0,
                trace: None,
            });
            first.flush_ptx = Some(crate::assets::COPY_PTX.to_string());
        }
        Target::Problem(p) => return Ok(problem_request(p.clone(), series)),
    }
    Ok(first)
}

/// One call of `target` at `sizes` on freshly drawn inputs, inside the profiler's window
/// (`protocol::Bench::profile`): what `rung profile` runs under Nsight Compute or
/// compute-sanitizer. Nothing is flushed or timed; buffers are exactly their size (no guard
/// zones), so a sanitizer sees an access past the end as one. The GPU's bench lock is held, so
/// no bench is timed beside the profiler's replays.
pub fn profile_call(
    spec: &Spec,
    runners: &mut Runners,
    gpu: &GpuInfo,
    target: &Target,
    sizes: &SizeSet,
    seed: u64,
    dir: &std::path::Path,
) -> Result<(), Box<StageOutcome>> {
    let _lock = crate::gpulock::lock(&gpu.uuid)
        .map_err(|e| Box::new(fail(Verdict::Error, None, format!("cannot take the GPU's bench lock: {e}"))))?;
    let files = draw_inputs(spec, sizes, seed, dir)?;
    fork_for(runners, &[target])?;
    let first = protocol::Bench {
        samples: 0,
        warmup_seconds: 0.0,
        flush_bytes: 0,
        profile: true,
        ..first_request(spec, target, sizes, &files, &[], 0)?
    };
    let limit = spec.limits.run * 4;
    let answer = send(runners, target, first, limit).map(|_| ());
    if target.is_python() {
        runners.end_children();
    }
    answer
}

/// A fresh CUDA child of the Python zygote for Python targets (the re-check's reference runs
/// in a child of its own, which ends the one before).
fn fork_for(runners: &mut Runners, targets: &[&Target]) -> Result<(), Box<StageOutcome>> {
    if !targets.iter().any(|t| t.is_python()) {
        return Ok(());
    }
    let why = |e: String| Box::new(fail(Verdict::Error, None, format!("the Python worker could not start: {e}")));
    match runners.zygote(false).and_then(|z| z.fork(CallMode::Cuda, Duration::from_secs(60))) {
        Ok(r) if r.ok => Ok(()),
        Ok(r) => Err(why(r.error.map(|e| e.message).unwrap_or_default())),
        Err(e) => Err(why(e.to_string())),
    }
}

/// Sends a bench request to the worker that serves `target`.
fn send(
    runners: &mut Runners,
    target: &Target,
    req: protocol::Bench,
    limit: Duration,
) -> Result<Response, Box<StageOutcome>> {
    if target.is_python() {
        answer(runners.zygote(false).and_then(|z| z.call(Op::Bench(req), limit)))
    } else {
        answer(runners.native(Op::Bench(req), limit))
    }
}

/// More samples from a series that is set up.
fn more(series: u32, samples: u32) -> protocol::Bench {
    protocol::Bench { series, samples, ..Default::default() }
}

/// A headline median under this (ms) marks a small kernel, also timed by graph replay: there the
/// host's launch overhead (a few µs) is a large part of a call.
pub const SMALL_KERNEL_MS: f64 = 0.05;
/// Calls captured in one graph, and replays timed.
pub const GRAPH_CALLS: u32 = 100;
pub const GRAPH_REPLAYS: u32 = 20;

/// As a check that will bench on a GPU begins: the first benchmark size's input sets drawn on a
/// thread of their own ([`sets::draw_inputs_ahead`]), then the reference on their fresh set on
/// another ([`recheck::reference_ahead`]), while the first versions build and run. The bench
/// waits for each where it needs it; nothing is timed meanwhile.
pub fn draw_ahead(ws: &Workspace, spec: &Spec, runners: &mut Runners, seed: u64) {
    if let Some((sizes, folder, drawn)) = sets::draw_inputs_ahead(ws, spec, runners, seed) {
        recheck::reference_ahead(ws, spec, runners, &sizes, &folder, drawn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A throttled bench says what slowed the GPU and how far, before or after the timed calls.
    #[test]
    fn a_throttled_bench_names_the_reason_and_the_clock() {
        let capped = crate::devstate::parse_line("GPU-x, H100, 580, 1500, 2619, 1980, 80, 690.0, 0x0000000000000024");
        let idle = crate::devstate::parse_line("GPU-x, H100, 580, 345, 2619, 1980, 40, 70.0, 0x0000000000000001");
        assert_eq!(
            throttle_words(idle.as_ref(), capped.as_ref()),
            "software power cap, software thermal slowdown, SM clock 1500 of 1980 MHz after"
        );
        assert_eq!(throttle_words(None, None), "see device state");
    }

    fn refused(kind: &str, message: &str) -> Box<StageOutcome> {
        let e = protocol::WorkerError::new(kind, message);
        answer(Ok(Response { ok: false, error: Some(e), ..Default::default() })).unwrap_err()
    }

    /// A bench rung's own defences refuse in words, with their reason; a version's exception
    /// keeps the kind Python gave it.
    #[test]
    fn a_refused_bench_says_why_in_words_and_a_version_exception_keeps_its_kind() {
        let late = refused("LateWork", "the version's call returned while a thread it started was still running");
        assert_eq!(late.reason, Some(Reason::LateWork));
        assert!(late.summary.starts_with("the version's call returned"), "{}", late.summary);
        let timer = refused("TimerPatched", "the version replaced time.perf_counter");
        assert_eq!(
            (timer.reason, timer.summary.as_str()),
            (Some(Reason::TimerPatched), "the version replaced time.perf_counter")
        );
        let raised = refused("ValueError", "bad shape");
        assert_eq!((raised.reason, raised.summary.as_str()), (Some(Reason::Exception), "ValueError: bad shape"));
    }
}

//! The bench and roofline rungs (DESIGN.md, Timing). For each benchmark size rung draws several
//! independent input sets, the worker uploads them once, warms up by time, then times calls
//! rotating through the sets with L2 flushed before each. rung asks for samples in batches until
//! the median's 95% confidence interval is under 1% or the budget (`limits.bench`) is spent, and
//! computes every statistic itself. The outputs of a timed call on the real input set are checked
//! against the reference at the benchmark size. One bench at a time per GPU (a lock per UUID);
//! the device's clocks and throttle reasons are recorded before and after.
//!
//! The headline time is the GPU time between events on the call's stream, unless the call left
//! work on another stream: then it is the device-wide interval as the host saw it, less the
//! measured fixed cost of waiting for the device.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::devstate::DeviceState;
use crate::gpu::GpuInfo;
use crate::inputs;
use crate::metrics;
pub use crate::model::bench::{BenchDetail, Ceilings, Comparison, RooflineDetail, SizeBench, Speedup};
use crate::model::protocol::{self, CallMode, Ceiling, CeilingKind, Op, Response, TensorFile};
use crate::model::report::{Reason, StageDetail, Verdict};
use crate::runners::{Failure, Runners};
use crate::spec::{SizeSet, Spec};
use crate::stages::{Files, StageOutcome, call_args};
use crate::stats::{self, Stop, StopRule, Summary};
use crate::workspace::{VersionFile, VersionKind, Workspace};

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
pub type LaunchAt<'a> = &'a dyn Fn(&SizeSet, &Files) -> Result<protocol::Launch, String>;

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

/// Benches one version that passed its check, then times it against each of `others`
/// interleaved. `target` says how a call is made.
pub fn bench(cx: &mut BenchCtx, gpu: &GpuInfo, v: &VersionFile, target: &Target, others: &[Other]) -> StageOutcome {
    let (spec, seed) = (cx.spec, cx.seed);
    let sizes: Vec<SizeSet> = if spec.bench_sizes.is_empty() {
        spec.test_sizes.last().cloned().into_iter().collect()
    } else {
        spec.bench_sizes.clone()
    };
    let lock = match crate::gpulock::lock(&gpu.uuid) {
        Ok(l) => l,
        Err(e) => return fail(Verdict::Error, None, format!("cannot take the GPU's bench lock: {e}")),
    };
    let before = crate::devstate::query(&gpu.uuid).ok();
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
        let sets = match draw_sets(spec, size, seed, &dir) {
            Ok(s) => s,
            Err(f) => {
                failure = Some(*f);
                break;
            }
        };
        match bench_size(cx, target, reference, size, &sets, &dir) {
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
        }
    }
    if python {
        cx.runners.end_children();
    }
    let _ = std::fs::remove_dir_all(&scratch);
    finish(gpu, lock, before, results, comparisons, notes, failure)
}

/// The bench's outcome: the device state after, the detail, the lock given back, then the
/// failure that stopped it or the verdict and one-line summary from its sizes and comparisons.
fn finish(
    gpu: &GpuInfo,
    lock: crate::gpulock::GpuLock,
    before: Option<DeviceState>,
    results: Vec<SizeBench>,
    comparisons: Vec<Speedup>,
    notes: Vec<String>,
    failure: Option<StageOutcome>,
) -> StageOutcome {
    let after = crate::devstate::query(&gpu.uuid).ok();
    let throttled = before.as_ref().is_some_and(|d| d.throttled) || after.as_ref().is_some_and(|d| d.throttled);
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
        return StageOutcome {
            verdict: Verdict::Fail,
            summary: format!(
                "the timed runs' outputs are wrong at {}: {}",
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
    if throttled {
        summary.push_str("; THROTTLED (see device state)");
    }
    StageOutcome { verdict: Verdict::Pass, summary, diagnostics: vec![], detail, reason: None }
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
    let lock = match crate::gpulock::lock(&gpu.uuid) {
        Ok(l) => l,
        Err(e) => return fail(Verdict::Error, None, format!("cannot take the GPU's bench lock: {e}")),
    };
    let before = crate::devstate::query(&gpu.uuid).ok();
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
        let first = problem_request(problem_of(false), 0);
        let sampled = fork_for(runners, &[&target]).and_then(|_| sample_series(runners, &target, first, limit, &rule));
        let series = match sampled {
            Ok(x) => x,
            Err(f) => {
                failure = Some(*f);
                break;
            }
        };
        let mut size = SizeBench::of(&sizes, &series);
        (size.recheck_failure, size.recheck_reason) =
            match send(runners, &target, protocol::Bench { write_back: true, ..more(0, 0) }, limit) {
                Ok(r) => (r.recheck, r.recheck_reason),
                Err(f) => (Some(f.summary), f.reason),
            };
        results.push(size);
        if bi > 0 {
            continue;
        }
        let reference = Other {
            role: ROLE_REFERENCE,
            label: problem.display().to_string(),
            target: Target::Problem(problem_of(true)),
        };
        let firsts = [problem_request(problem_of(false), 0), problem_request(problem_of(true), 1)];
        match alternate(runners, [&target, &reference.target], firsts, &reference, &sizes, limit, &rule) {
            Ok(c) => comparisons.push(c),
            Err(f) => notes.push(format!("against {} ({}): {}", reference.label, reference.role, f.summary)),
        }
    }
    runners.end_children();
    finish(gpu, lock, before, results, comparisons, notes, failure)
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
    };
    fail(if reason.is_some() { Verdict::Fail } else { Verdict::Error }, reason, f.to_string())
}

fn answer(resp: Result<Response, Failure>) -> Result<Response, Box<StageOutcome>> {
    match resp {
        Ok(r) if r.ok => Ok(r),
        Ok(r) => {
            let e = r.error.unwrap_or_else(|| protocol::WorkerError::new("error", ""));
            Err(Box::new(fail(
                Verdict::Fail,
                Some(crate::stages::reason_for(&e)),
                format!("{}: {}", e.kind, e.message),
            )))
        }
        Err(f) => Err(Box::new(worker_failure(f))),
    }
}

/// The input sets of one benchmark size: set 0 (the real one, whose outputs are re-checked) in
/// `files` with the outputs' poisoned files, the others as parameter name → file.
pub struct Sets {
    pub files: Files,
    pub extra: Vec<BTreeMap<String, PathBuf>>,
}

fn draw_sets(spec: &Spec, sizes: &SizeSet, seed: u64, dir: &std::path::Path) -> Result<Sets, Box<StageOutcome>> {
    let io = |e: std::io::Error| Box::new(fail(Verdict::Error, None, format!("{}: {e}", dir.display())));
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut files: Files = BTreeMap::new();
    let mut extra: Vec<BTreeMap<String, PathBuf>> = vec![BTreeMap::new(); INPUT_SETS - 1];
    for (idx, t) in spec.inputs.iter().enumerate() {
        let shape = spec.shape_at(t, sizes).unwrap_or_default();
        let numel = shape.iter().product::<i64>() as usize;
        for k in 0..INPUT_SETS {
            let s = if k == 0 { seed } else { seed.wrapping_add(0xB5E7_0000 + k as u64) };
            let path = dir.join(format!("{}-{k}.bin", t.name));
            std::fs::write(&path, inputs::generate(t.dtype, &t.init, s, idx as u64, numel)).map_err(io)?;
            if k == 0 {
                files.insert(t.name.clone(), (path, shape.clone()));
            } else {
                extra[k - 1].insert(t.name.clone(), path);
            }
        }
    }
    files.extend(poisoned_outputs(spec, sizes, dir).map_err(io)?);
    Ok(Sets { files, extra })
}

/// Poisoned output files in `dir`: a series of its own gets outputs of its own.
fn poisoned_outputs(spec: &Spec, sizes: &SizeSet, dir: &std::path::Path) -> std::io::Result<Files> {
    std::fs::create_dir_all(dir)?;
    let mut files = Files::new();
    for t in &spec.outputs {
        let shape = spec.shape_at(t, sizes).unwrap_or_default();
        let len = shape.iter().product::<i64>() as usize * t.dtype.size_bytes();
        let path = dir.join(format!("{}.bin", t.name));
        std::fs::write(&path, vec![inputs::POISON[0]; len])?;
        files.insert(t.name.clone(), (path, shape));
    }
    Ok(files)
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
            first.launch = Some(f(sizes, files).map_err(|e| Box::new(fail(Verdict::Fail, None, e)))?);
        }
        Target::Python { file, params } => {
            let args = call_args(spec, params, sizes, |t, _| {
                let (path, shape) = &files[&t.name];
                TensorFile { path: path.clone(), dtype: t.dtype, shape: shape.clone() }
            })
            .map_err(|e| Box::new(fail(Verdict::Error, None, e)))?;
            first.call = Some(protocol::Call {
                file: file.clone(),
                function: "run".into(),
                mode: CallMode::Cuda,
                args,
                returns: BTreeMap::new(),
                guard_bytes: 0,
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
) -> Result<(), String> {
    let _lock = crate::gpulock::lock(&gpu.uuid).map_err(|e| format!("cannot take the GPU's bench lock: {e}"))?;
    let sets = draw_sets(spec, sizes, seed, dir).map_err(|f| f.summary)?;
    fork_for(runners, &[target]).map_err(|f| f.summary)?;
    let first = protocol::Bench {
        samples: 0,
        warmup_seconds: 0.0,
        flush_bytes: 0,
        profile: true,
        ..first_request(spec, target, sizes, &sets.files, &[], 0).map_err(|f| f.summary)?
    };
    let limit = spec.limits.run * 4;
    let answer = send(runners, target, first, limit).map(|_| ()).map_err(|f| f.summary);
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

fn bench_size(
    cx: &mut BenchCtx,
    target: &Target,
    reference: Option<LaunchAt>,
    sizes: &SizeSet,
    sets: &Sets,
    dir: &std::path::Path,
) -> Result<SizeBench, Box<StageOutcome>> {
    let (ws, spec, seed) = (cx.ws, cx.spec, cx.seed);
    let runners = &mut *cx.runners;
    // A request may take the whole budget plus one run's limit.
    let limit = spec.limits.bench + spec.limits.run * 2;
    let rule = StopRule { budget_seconds: spec.limits.bench.as_secs_f64(), ..StopRule::default() };
    fork_for(runners, &[target])?;
    let first = first_request(spec, target, sizes, &sets.files, &sets.extra, 0)?;
    let series = sample_series(runners, target, first, limit, &rule)?;
    let mut out = SizeBench::of(sizes, &series);
    // One more call on the real input set, its outputs written back and checked; then a small
    // kernel is also timed by graph replay (a capture that fails is reported, not fatal).
    send(runners, target, protocol::Bench { write_back: true, ..more(0, 0) }, limit)?;
    if out.basis != BASIS_DEVICE && out.headline.median < SMALL_KERNEL_MS {
        let req = protocol::Bench { graph_calls: GRAPH_CALLS, graph_replays: GRAPH_REPLAYS, ..more(0, 0) };
        match send(runners, target, req, limit) {
            Ok(r) if !r.graph_ms.is_empty() => out.graph = Some(stats::summarize(&r.graph_ms)),
            Ok(_) => out.graph_error = Some("the worker returned no graph replay times".to_string()),
            Err(f) => out.graph_error = Some(f.summary),
        }
    }
    out.recheck_failure = match reference {
        Some(launch_at) => recheck_native(spec, runners, launch_at, sizes, &sets.files, dir),
        None => recheck(ws, spec, runners, sizes, seed, &sets.files, dir),
    };
    Ok(out)
}

impl SizeBench {
    /// The statistics of one size's samples (no graph replay, no re-check yet).
    fn of(sizes: &SizeSet, series: &Series) -> SizeBench {
        let Series { samples, fixed_ms, stop, timer_note, l2_persisting_bytes } = series;
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
            input_sets: INPUT_SETS,
            flush_bytes: FLUSH_BYTES,
            graph: None,
            graph_error: None,
            recheck_failure: None,
            recheck_reason: None,
            span: samples.iter().map(|s| s.span_ms).collect::<Option<Vec<f64>>>().map(|v| stats::summarize(&v)),
            timer_note: timer_note.clone(),
            l2_persisting_bytes: *l2_persisting_bytes,
        }
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
}

/// Sets up series 0 with `first`, then asks for samples in batches until the headline median's
/// interval is under the target or the budget is spent: the samples, the fixed cost, why it
/// stopped.
fn sample_series(
    runners: &mut Runners,
    target: &Target,
    first: protocol::Bench,
    limit: Duration,
    rule: &StopRule,
) -> Result<Series, Box<StageOutcome>> {
    let resp = send(runners, target, first, limit)?;
    let fixed_ms = resp.fixed_ms.unwrap_or(0.0);
    let timer_note = resp.timer_note;
    let mut l2_persisting_bytes = resp.l2_persisting_bytes;
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
        samples.extend(r.samples);
    };
    Ok(Series { samples, fixed_ms, stop, timer_note, l2_persisting_bytes })
}

/// Times `target` (series 0) and `other.target` (series 1) in alternating batches on the same
/// input sets until both medians' intervals are under the target or the bench budget is spent.
fn interleave(
    cx: &mut BenchCtx,
    target: &Target,
    other: &Other,
    sizes: &SizeSet,
    sets: &Sets,
    dir: &std::path::Path,
) -> Result<Speedup, Box<StageOutcome>> {
    let spec = cx.spec;
    let runners = &mut *cx.runners;
    let io = |e: std::io::Error| Box::new(fail(Verdict::Error, None, format!("{}: {e}", dir.display())));
    let limit = spec.limits.bench + spec.limits.run * 2;
    let rule = StopRule { budget_seconds: spec.limits.bench.as_secs_f64(), ..StopRule::default() };
    // Each series writes outputs of its own; the inputs are shared.
    let mut files = [sets.files.clone(), sets.files.clone()];
    for (k, f) in files.iter_mut().enumerate() {
        f.extend(poisoned_outputs(spec, sizes, &dir.join(format!("s{k}"))).map_err(io)?);
    }
    let targets = [target, &other.target];
    let firsts = [
        first_request(spec, targets[0], sizes, &files[0], &sets.extra, 0)?,
        first_request(spec, targets[1], sizes, &files[1], &sets.extra, 1)?,
    ];
    alternate(runners, targets, firsts, other, sizes, limit, &rule)
}

/// The interleaved comparison itself: both series set up by `firsts`, then batches of each in
/// turn until [`interleave_done`].
fn alternate(
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

fn busy_times(samples: &[protocol::Sample]) -> Option<Vec<f64>> {
    (!samples.is_empty()).then(|| samples.iter().map(|s| s.busy_ms).collect::<Option<Vec<_>>>()).flatten()
}

/// Both sides of an interleaved comparison on one basis: CUPTI's busy times only when both have them
/// (a Triton version's worker may not trace while a CUDA one's does).
fn headline_pair(samples: &[Vec<protocol::Sample>; 2], fixed: [f64; 2]) -> [Vec<f64>; 2] {
    match (busy_times(&samples[0]), busy_times(&samples[1])) {
        (Some(a), Some(b)) => [a, b],
        _ => [0, 1].map(|k| events_headline(&samples[k], fixed[k]).0),
    }
}

fn events_headline(samples: &[protocol::Sample], fixed_ms: f64) -> (Vec<f64>, &'static str) {
    let gpu: Vec<f64> = samples.iter().map(|s| s.gpu_ms).collect();
    let device: Vec<f64> = samples.iter().map(|s| (s.wall_ms - fixed_ms).max(0.0)).collect();
    let (g, d) = (stats::summarize(&gpu).median, stats::summarize(&device).median);
    if d > 1.5 * g + 0.05 { (device, BASIS_DEVICE) } else { (gpu, BASIS_EVENTS) }
}

/// Compares the written-back outputs with the reference at the benchmark size (not cached: a
/// benchmark-size reference is large).
fn recheck(
    ws: &Workspace,
    spec: &Spec,
    runners: &mut Runners,
    sizes: &SizeSet,
    seed: u64,
    files: &BTreeMap<String, (PathBuf, Vec<i64>)>,
    dir: &std::path::Path,
) -> Option<String> {
    let reference = ws.reference.clone().filter(|r| r.extension().is_some_and(|e| e == "py"))?;
    let ref_source = std::fs::read_to_string(ws.root.join(&reference)).unwrap_or_default();
    let params: Vec<String> = crate::stages::prepare::python_def_params(&ref_source, "reference")
        .map(|(p, _)| p.into_iter().map(|(n, _)| n).collect())
        .unwrap_or_else(|| spec.inputs.iter().map(|t| t.name.clone()).collect());
    let _ = seed;
    let mut returns = BTreeMap::new();
    for t in &spec.outputs {
        let shape = spec.shape_at(t, sizes).unwrap_or_default();
        returns.insert(
            t.name.clone(),
            TensorFile { path: dir.join(format!("{}-ref.bin", t.name)), dtype: t.dtype, shape },
        );
    }
    let args = call_args(spec, &params, sizes, |t, _| {
        let (path, shape) = &files[&t.name];
        TensorFile { path: path.clone(), dtype: t.dtype, shape: shape.clone() }
    })
    .ok()?;
    let call = protocol::Call {
        file: reference,
        function: "reference".into(),
        mode: CallMode::Reference,
        args,
        returns: returns.clone(),
        guard_bytes: 0,
    };
    // The reference runs in a child of its own (the version's child, if any, has ended).
    let z = runners.zygote(false).ok()?;
    if !z.fork(CallMode::Reference, Duration::from_secs(60)).is_ok_and(|r| r.ok) {
        return Some("the reference could not run at the benchmark size".into());
    }
    let resp = z.call(Op::Call(call), spec.limits.run * 4);
    runners.end_children();
    match resp {
        Ok(r) if r.ok => {}
        Ok(r) => return Some(format!("the reference failed: {}", r.error.map(|e| e.message).unwrap_or_default())),
        Err(e) => return Some(format!("the reference failed: {e}")),
    }
    for t in &spec.outputs {
        let shape: Vec<usize> = files[&t.name].1.iter().map(|d| *d as usize).collect();
        let o = inputs::to_f64(t.dtype, &std::fs::read(&files[&t.name].0).unwrap_or_default());
        let r = inputs::to_f64(t.dtype, &std::fs::read(&returns[&t.name].path).unwrap_or_default());
        let c = metrics::compare(&o, &r, &shape, &t.tolerance);
        if let Some(why) = metrics::judge(&c, &t.tolerance) {
            return Some(format!("`{}`: {why}", t.name));
        }
    }
    None
}

/// [`recheck`] against a CUDA reference, launched in the native worker on the same inputs.
fn recheck_native(
    spec: &Spec,
    runners: &mut Runners,
    launch_at: LaunchAt,
    sizes: &SizeSet,
    files: &Files,
    dir: &std::path::Path,
) -> Option<String> {
    let mut rfiles = files.clone();
    for t in &spec.outputs {
        let shape = spec.shape_at(t, sizes).unwrap_or_default();
        let path = dir.join(format!("{}-ref.bin", t.name));
        let len = shape.iter().product::<i64>() as usize * t.dtype.size_bytes();
        if let Err(e) = std::fs::write(&path, vec![0xffu8; len]) {
            return Some(format!("{}: {e}", path.display()));
        }
        rfiles.insert(t.name.clone(), (path, shape));
    }
    let launch = match launch_at(sizes, &rfiles) {
        Ok(l) => l,
        Err(m) => return Some(format!("the reference cannot be launched: {m}")),
    };
    match runners.launch(launch, spec.limits.run * 4) {
        Ok(r) if r.ok => {}
        Ok(r) => return Some(format!("the reference failed: {}", r.error.map(|e| e.message).unwrap_or_default())),
        Err(e) => return Some(format!("the reference failed: {e}")),
    }
    for t in &spec.outputs {
        let shape: Vec<usize> = files[&t.name].1.iter().map(|d| *d as usize).collect();
        let o = inputs::to_f64(t.dtype, &std::fs::read(&files[&t.name].0).unwrap_or_default());
        let r = inputs::to_f64(t.dtype, &std::fs::read(&rfiles[&t.name].0).unwrap_or_default());
        let c = metrics::compare(&o, &r, &shape, &t.tolerance);
        if let Some(why) = metrics::judge(&c, &t.tolerance) {
            return Some(format!("`{}`: {why}", t.name));
        }
    }
    None
}

fn ceilings_path(uuid: &str) -> PathBuf {
    crate::toolchain::rung_home().join("ceilings").join(format!("{uuid}.json"))
}

/// The GPU's ceilings: measured once per GPU UUID and cached (`$RUNG_HOME/ceilings/`).
pub fn ceilings(runners: &mut Runners, gpu: &GpuInfo, torch: bool) -> Result<Ceilings, String> {
    let path = ceilings_path(&gpu.uuid);
    if let Ok(text) = std::fs::read_to_string(&path)
        && let Ok(c) = serde_json::from_str::<Ceilings>(&text)
        && (c.gemm_bf16_tflops.is_some() || !torch)
        && !c.timer.is_empty()
    {
        return Ok(c);
    }
    let _lock = crate::gpulock::lock(&gpu.uuid).map_err(|e| format!("the GPU's bench lock: {e}"))?;
    let copy = runners
        .native(Op::Ceiling(Ceiling { kind: CeilingKind::Copy, size: 1 << 30, reps: 20 }), Duration::from_secs(120))
        .map_err(|e| e.to_string())?;
    if !copy.ok {
        return Err(format!("measuring the copy ceiling: {:?}", copy.error.map(|e| e.message)));
    }
    let copy_gbs = copy.ceilings.values().copied().fold(0.0, f64::max);
    let mut timer = if copy.timer_note.is_none() { BASIS_CUPTI } else { BASIS_EVENTS };
    let mut gemm = None;
    if torch {
        let z = runners.zygote(false).map_err(|e| e.to_string())?;
        if z.fork(CallMode::Cuda, Duration::from_secs(60)).is_ok_and(|r| r.ok) {
            let r = z.call(
                Op::Ceiling(Ceiling { kind: CeilingKind::GemmBf16, size: 8192, reps: 20 }),
                Duration::from_secs(120),
            );
            if let Some(r) = r.filter_ok() {
                gemm = r.ceilings.values().copied().reduce(f64::max);
                if r.timer_note.is_some() {
                    timer = BASIS_EVENTS;
                }
            }
        }
        runners.end_children();
    }
    let (ds_gbs, ds_tflops) = datasheet(&gpu.name);
    let c = Ceilings {
        uuid: gpu.uuid.clone(),
        gpu: gpu.name.clone(),
        copy_gbs,
        copy_methods: copy.ceilings,
        gemm_bf16_tflops: gemm,
        datasheet_gbs: ds_gbs,
        datasheet_bf16_tflops: ds_tflops,
        measured_at: crate::model::report::rfc3339(std::time::SystemTime::now()),
        timer: timer.into(),
    };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(&path, serde_json::to_string_pretty(&c).unwrap_or_default());
    Ok(c)
}

trait FilterOk {
    fn filter_ok(self) -> Option<Response>;
}

impl FilterOk for Result<Response, Failure> {
    fn filter_ok(self) -> Option<Response> {
        self.ok().filter(|r| r.ok)
    }
}

/// The roofline of a benched version at its first benchmark size.
pub fn roofline(spec: &Spec, bench: &BenchDetail, ceilings: Ceilings, num_sms: i64) -> StageOutcome {
    let Some(b) = bench.sizes.first() else {
        return fail(Verdict::Skipped, None, "nothing was benched");
    };
    let scope = spec.scope(&b.sizes, Some(num_sms));
    let bytes = spec.roofline.bytes.as_ref().and_then(|e| e.eval_f64(&scope).ok());
    let flops = spec.roofline.flops.as_ref().and_then(|e| e.eval_f64(&scope).ok());
    if bytes.is_none() && flops.is_none() {
        return fail(Verdict::Skipped, None, "rung.toml's [roofline] gives neither bytes nor flops");
    }
    let seconds = b.headline.median * 1e-3;
    let achieved_gbs = bytes.map(|x| x / seconds / 1e9);
    let achieved_tflops = flops.map(|x| x / seconds / 1e12);
    // The ridge point: where the compute ceiling meets the memory one.
    let memory_bound = match (bytes, flops, ceilings.gemm_bf16_tflops) {
        (Some(by), Some(fl), Some(t)) => fl / by < t * 1e12 / (ceilings.copy_gbs * 1e9),
        (Some(_), _, _) => true,
        _ => false,
    };
    let (bound, percent) = if memory_bound {
        ("memory", achieved_gbs.map(|g| 100.0 * g / ceilings.copy_gbs))
    } else {
        ("compute", achieved_tflops.zip(ceilings.gemm_bf16_tflops).map(|(a, c)| 100.0 * a / c))
    };
    let summary = match (bound, achieved_gbs, achieved_tflops, percent) {
        ("memory", Some(g), _, Some(p)) => format!(
            "{g:.0} GB/s: {p:.1}% of the measured copy ceiling ({:.0} GB/s{}), memory-bound",
            ceilings.copy_gbs,
            ceilings.datasheet_gbs.map(|d| format!("; datasheet {d:.0}")).unwrap_or_default()
        ),
        (_, _, Some(t), Some(p)) => format!(
            "{t:.1} TFLOP/s: {p:.1}% of the measured bf16 GEMM ceiling ({:.0} TFLOP/s), compute-bound",
            ceilings.gemm_bf16_tflops.unwrap_or(0.0)
        ),
        _ => "no ceiling to compare with".into(),
    };
    // A kernel at the ceiling reads a little over it: the ceiling is its method's best run, the
    // kernel's figure a median. Said, so it is not taken for a wrong formula or a broken timer.
    let summary = match percent {
        Some(p) if p > 100.0 => format!("{summary} (over 100%: the ceiling is its best run, this figure a median)"),
        _ => summary,
    };
    StageOutcome {
        verdict: Verdict::Pass,
        summary,
        diagnostics: vec![],
        detail: StageDetail::Roofline(RooflineDetail {
            sizes: b.sizes.clone(),
            seconds,
            bytes,
            flops,
            achieved_gbs,
            achieved_tflops,
            bound: bound.into(),
            percent_of_ceiling: percent,
            ceilings,
        }),
        reason: None,
    }
}

/// Whether this kind of version can be benched.
pub fn benchable(kind: VersionKind) -> bool {
    kind.is_native() || kind.is_python()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ceilings() -> Ceilings {
        Ceilings {
            uuid: "GPU-x".into(),
            gpu: "NVIDIA H200".into(),
            copy_gbs: 4000.0,
            copy_methods: BTreeMap::new(),
            gemm_bf16_tflops: Some(800.0),
            datasheet_gbs: Some(4800.0),
            datasheet_bf16_tflops: Some(989.4),
            measured_at: String::new(),
            timer: BASIS_CUPTI.into(),
        }
    }

    fn bench_at(ms: f64) -> BenchDetail {
        let s = stats::summarize(&[ms]);
        BenchDetail {
            gpu: "NVIDIA H200".into(),
            sizes: vec![SizeBench {
                sizes: BTreeMap::from([("rows".into(), 16384), ("cols".into(), 8192)]),
                headline: s,
                basis: "events".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn the_demo_roofline_is_memory_bound_and_its_percentage_is_bytes_over_time_over_ceiling() {
        let spec = crate::spec::Spec::parse(
            &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/demo/rung.toml")).unwrap(),
            std::path::Path::new("rung.toml"),
        )
        .unwrap();
        // x and y: 16384 x 8192 f32 each; w: 8192 f32.
        let bytes = 2.0 * 16384.0 * 8192.0 * 4.0 + 8192.0 * 4.0;
        let out = roofline(&spec, &bench_at(0.2685), ceilings(), 132);
        let StageDetail::Roofline(r) = &out.detail else { panic!("{out:?}") };
        assert_eq!(r.bytes, Some(bytes));
        let gbs = bytes / 0.2685e-3 / 1e9;
        assert!((r.achieved_gbs.unwrap() - gbs).abs() < 1e-6);
        assert_eq!(r.bound, "memory");
        assert!((r.percent_of_ceiling.unwrap() - 100.0 * gbs / 4000.0).abs() < 1e-9);
        assert!(out.summary.contains("of the measured copy ceiling"), "{}", out.summary);
        assert!(!out.summary.contains("over 100%"), "{}", out.summary);
        // At the ceiling, a median a little faster than the ceiling's best run says why.
        let at = bytes / (4000.0 * 1e9) * 1e3 * 0.997;
        let out = roofline(&spec, &bench_at(at), ceilings(), 132);
        assert!(out.summary.contains("100.3% of the measured copy ceiling"), "{}", out.summary);
        assert!(
            out.summary.ends_with("(over 100%: the ceiling is its best run, this figure a median)"),
            "{}",
            out.summary
        );
    }

    #[test]
    fn a_high_intensity_kernel_is_compute_bound() {
        let toml = "[problem]\nname = \"mm\"\n[[inputs]]\nname = \"a\"\ndtype = \"bf16\"\nshape = [\"n\", \"n\"]\n[[outputs]]\nname = \"c\"\ndtype = \"bf16\"\nshape = [\"n\", \"n\"]\n[sizes]\ntest = [{ n = 64 }]\nbench = [{ n = 8192 }]\n[roofline]\nbytes = \"2 * bytes(a)\"\nflops = \"2 * n * n * n\"\n";
        let spec = crate::spec::Spec::parse(toml, std::path::Path::new("rung.toml")).unwrap();
        let mut b = bench_at(2.0);
        b.sizes[0].sizes = BTreeMap::from([("n".into(), 8192)]);
        let out = roofline(&spec, &b, ceilings(), 132);
        let StageDetail::Roofline(r) = &out.detail else { panic!() };
        assert_eq!(r.bound, "compute");
        let tflops = 2.0 * 8192f64.powi(3) / 2e-3 / 1e12;
        assert!((r.percent_of_ceiling.unwrap() - 100.0 * tflops / 800.0).abs() < 1e-9);
    }

    #[test]
    fn work_left_on_another_stream_makes_the_headline_device_wide() {
        let same = |gpu: f64, wall: f64| protocol::Sample {
            gpu_ms: gpu,
            busy_ms: None,
            span_ms: None,
            host_ms: 0.01,
            wall_ms: wall,
        };
        // A kernel on the call's stream: the device-wide interval is its time plus the fixed cost.
        let normal: Vec<_> = (0..20).map(|i| same(0.270 + i as f64 * 1e-4, 0.350 + i as f64 * 1e-4)).collect();
        let (m, basis) = headline_samples(&normal, 0.080);
        assert_eq!(basis, "events");
        assert!((stats::summarize(&m).median - 0.27095).abs() < 1e-9);
        // 100 ms on a side stream, nothing on the call's own.
        let side: Vec<_> = (0..20).map(|_| same(0.004, 100.3)).collect();
        let (m, basis) = headline_samples(&side, 0.080);
        assert_eq!(basis, "device-wide");
        assert!((stats::summarize(&m).median - 100.22).abs() < 1e-9);
    }

    #[test]
    fn cupti_busy_times_are_the_headline_only_when_every_sample_has_one() {
        let s = |gpu: f64, busy: Option<f64>| protocol::Sample {
            gpu_ms: gpu,
            busy_ms: busy,
            span_ms: busy,
            host_ms: 0.01,
            wall_ms: gpu + 0.08,
        };
        let traced: Vec<_> = (0..20).map(|i| s(0.264, Some(0.251 + i as f64 * 1e-5))).collect();
        let (m, basis) = headline_samples(&traced, 0.080);
        assert_eq!(basis, BASIS_CUPTI);
        assert!((stats::summarize(&m).median - 0.251095).abs() < 1e-9);
        // One sample without a busy time (tracing stopped mid-series): the whole series is events.
        let mut mixed = traced.clone();
        mixed[7].busy_ms = None;
        assert_eq!(headline_samples(&mixed, 0.080).1, BASIS_EVENTS);
        // An interleaved pair is compared on one basis: events when either side lacks busy times.
        let untraced: Vec<_> = (0..20).map(|_| s(0.266, None)).collect();
        let [a, b] = headline_pair(&[traced.clone(), untraced.clone()], [0.08, 0.08]);
        assert!(a.iter().all(|&x| x == 0.264) && b.iter().all(|&x| x == 0.266));
        let [a, _] = headline_pair(&[traced.clone(), traced], [0.08, 0.08]);
        assert!(a.iter().all(|&x| x < 0.252));
    }

    #[test]
    fn a_speedup_is_the_other_median_over_this_one_with_the_intervals_crossed() {
        let this = stats::summarize(&(0..101).map(|i| 100.0 + (i % 11) as f64 * 0.1).collect::<Vec<_>>());
        let other = stats::summarize(&(0..101).map(|i| 250.0 + (i % 7) as f64 * 0.5).collect::<Vec<_>>());
        let (s, low, high) = speedup(&this, &other);
        assert!((s - other.median / this.median).abs() < 1e-12);
        assert!(low < s && s < high, "{low} {s} {high}");
        assert!((low - other.ci_low / this.ci_high).abs() < 1e-12);
        assert!((high - other.ci_high / this.ci_low).abs() < 1e-12);
        // Slower than the other: below 1.
        assert!(speedup(&other, &this).0 < 1.0);
    }

    #[test]
    fn an_interleaved_comparison_runs_its_rounds_then_stops_on_both_intervals_or_the_budget() {
        let rule = StopRule { budget_seconds: 8.0, ..StopRule::default() };
        let tight: Vec<f64> = (0..200).map(|i| 0.25 + (i % 5) as f64 * 1e-5).collect();
        let wide: Vec<f64> = (0..200).map(|i| 0.25 * (1.0 + (i % 2) as f64)).collect();
        // Both converged, but too few rounds yet.
        assert!(!interleave_done(2, &[tight.clone(), tight.clone()], 1.0, &rule));
        assert!(interleave_done(MIN_ROUNDS, &[tight.clone(), tight.clone()], 1.0, &rule));
        // One side still wide: keep going until the budget is spent.
        assert!(!interleave_done(10, &[tight.clone(), wide.clone()], 1.0, &rule));
        assert!(interleave_done(10, &[tight, wide], 8.0, &rule));
    }

    #[test]
    fn datasheet_figures_are_known_for_hopper() {
        assert_eq!(datasheet("NVIDIA H200"), (Some(4800.0), Some(989.4)));
        assert_eq!(datasheet("NVIDIA GeForce RTX 4090"), (None, None));
    }
}

/// Compares two benches' headline summaries. A version regressed only when even the fastest its
/// interval allows is slower than the slowest the baseline's allows by more than `max_pct`.
fn compare(
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

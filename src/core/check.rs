//! One pass of the rungs over chosen versions, recorded in the history: what `rung check` runs.
//! The scheduler (rebuild on save, newest wins) drives the same functions.

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime};

use crate::diag::{Diagnostic, Pos};
use crate::exit;
use crate::gpu::GpuProbe;
use crate::model::report::{CheckReport, SCHEMA, Stage, StageDetail, StageResult, Verdict, VersionReport};
use crate::runners::Runners;
use crate::stages::StageOutcome;
use crate::stages::build::{self, BuildEnv};
use crate::stages::{prepare, run};
use crate::store::{NewResult, Status, Store, StoreError, sha256_hex};
use crate::store::{millis, rfc3339};
use crate::toolchain::Toolchain;
use crate::workspace::{VersionFile, Workspace};

#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// Version ids or paths; empty means every version.
    pub versions: Vec<String>,
    /// The seed for input generation; drawn when absent.
    pub seed: Option<u64>,
    /// Skip the bench and roofline rungs (they run after a passing check on a GPU).
    pub no_bench: bool,
}

/// One line of `rung check --stream`: each rung's result goes to standard output as one JSON line
/// the moment it is recorded, after a first line saying where the rungs run; the report follows
/// on one line. The SSH runner reads these lines to bring results home rung by rung. Whether a
/// check streams is its store's to say ([`Store::stream_results`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Streamed {
    /// Where the rungs run: the host and its GPU.
    Machine(crate::model::report::RanOn),
    /// A rung's result, as just recorded.
    Stage { version: String, source_hash: String, result: Box<StageResult> },
}

fn emit(store: &Store, line: &Streamed) {
    if store.streams() {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", serde_json::to_string(line).expect("stream lines serialise"));
        let _ = out.flush();
    }
}

/// Draws a seed without a random-number dependency: std's hasher keys are random per process.
pub fn draw_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish() >> 11 // keep it exactly representable as a JSON number (53 bits)
}

/// What the machine offers: found once per check, not per version.
#[derive(Clone)]
pub struct Machine {
    pub toolchain: Toolchain,
    pub gpu: GpuProbe,
    /// The scheduler's worker lane this machine view belongs to, when there are several (one per
    /// GPU, or simulated): results say which device ran them.
    pub device: Option<u32>,
}

/// Devices to simulate on a machine without a GPU (`RUNG_SIMULATE_GPUS=N`): the scheduler runs N
/// worker lanes, as it would with N GPUs, for testing the side-by-side path on a CPU.
pub const SIMULATE_GPUS: &str = "RUNG_SIMULATE_GPUS";

impl Machine {
    pub fn discover() -> Machine {
        Machine { toolchain: Toolchain::discover(), gpu: crate::gpu::probe(), device: None }
    }

    /// One view per worker lane: each GPU alone (its workers see only it, through
    /// `CUDA_VISIBLE_DEVICES`), or N simulated devices on a machine without a GPU, or this
    /// machine as it is.
    pub fn lanes(&self) -> Vec<Machine> {
        let devices = &self.gpu.devices;
        if devices.len() > 1 {
            return devices
                .iter()
                .map(|d| Machine {
                    toolchain: self.toolchain.clone(),
                    gpu: GpuProbe { devices: vec![d.clone()], ..self.gpu.clone() },
                    device: Some(d.ordinal.max(0) as u32),
                })
                .collect();
        }
        let simulated = std::env::var(SIMULATE_GPUS).ok().and_then(|n| n.trim().parse::<u32>().ok()).unwrap_or(0);
        if devices.is_empty() && simulated > 1 {
            return (0..simulated).map(|i| Machine { device: Some(i), ..self.clone() }).collect();
        }
        vec![self.clone()]
    }
}

/// Checks versions of an opened workspace and records every stage result in `store`.
pub fn check(ws: &Workspace, store: &mut Store, opts: &CheckOptions) -> Result<CheckReport, StoreError> {
    check_on(ws, store, opts, &Machine::discover())
}

/// As [`check`], with the machine's tools given (tests pin them).
pub fn check_on(
    ws: &Workspace,
    store: &mut Store,
    opts: &CheckOptions,
    machine: &Machine,
) -> Result<CheckReport, StoreError> {
    let mut runners = None;
    check_with(ws, store, opts, machine, &mut runners)
}

/// As [`check_on`], with the workers kept in `runners` (started on first need): a long-running
/// process passes the same slot to every check so the Python zygote's imports stay warm.
pub fn check_with(
    ws: &Workspace,
    store: &mut Store,
    opts: &CheckOptions,
    machine: &Machine,
    runners: &mut Option<Runners>,
) -> Result<CheckReport, StoreError> {
    let seed = match opts.seed {
        Some(s) => s,
        None => store.next_seed(draw_seed)?,
    };
    let mut diagnostics = ws.diagnostics.clone();
    let mut chosen: Vec<&VersionFile> = Vec::new();
    for want in &opts.versions {
        match ws.version(want) {
            Some(v) if !chosen.contains(&v) => chosen.push(v),
            Some(_) => {}
            None => diagnostics.push(
                Diagnostic::error(
                    want.as_str(),
                    Pos::WHOLE_FILE,
                    format!("no version `{want}` in {}", ws.root.join("versions").display()),
                )
                .with_help(format!(
                    "versions here: {}",
                    ws.versions.iter().map(|v| v.id.as_str()).collect::<Vec<_>>().join(", ")
                )),
            ),
        }
    }
    if opts.versions.is_empty() {
        chosen = ws.versions.iter().collect();
    }

    let mut versions = Vec::new();
    let here = crate::model::report::RanOn { device: machine.device, ..crate::gpu::ran_on_here(&machine.gpu) };
    emit(store, &Streamed::Machine(here.clone()));
    for v in chosen {
        let mut r = check_version(ws, store, v, seed, machine, runners, opts)?;
        r.ran_on.get_or_insert_with(|| here.clone());
        versions.push(r);
    }
    Ok(report_of(ws, seed, diagnostics, versions))
}

/// The check's report of these versions, with its exit code.
fn report_of(ws: &Workspace, seed: u64, diagnostics: Vec<Diagnostic>, versions: Vec<VersionReport>) -> CheckReport {
    let mut report = CheckReport {
        schema: SCHEMA,
        rung_version: env!("CARGO_PKG_VERSION").to_string(),
        workspace: ws.root.clone(),
        format: Some(ws.format),
        problem: ws.spec.as_ref().map(|s| s.name.clone()),
        seed,
        diagnostics,
        versions,
        comparisons: vec![],
        exit_code: 0,
    };
    report.exit_code = exit::for_report(&report);
    report
}

fn check_version(
    ws: &Workspace,
    store: &mut Store,
    v: &VersionFile,
    seed: u64,
    machine: &Machine,
    runners: &mut Option<Runners>,
    opts: &CheckOptions,
) -> Result<VersionReport, StoreError> {
    let built = build_phase(ws, store, v, seed, machine, None)?.expect("not cancelled");
    let cx = RunCtx { ws, store, machine, runners, opts, seed, cancel: None };
    Ok(run_phase(cx, built)?.expect("not cancelled"))
}

/// A version after its CPU rungs (prepare, build): what the GPU rungs need next.
#[derive(Debug, Clone)]
pub struct Built {
    pub version: VersionFile,
    pub source: String,
    pub source_hash: String,
    pub status: Status,
    pub stages: Vec<StageResult>,
    /// Prepare and build passed: the run rung may start.
    pub runnable: bool,
}

impl Built {
    /// The record of a version that stopped here.
    pub fn into_report(self) -> VersionReport {
        let verdict = self.stages.iter().map(|s| s.verdict).max().unwrap_or(Verdict::Pass);
        VersionReport {
            id: self.version.id.clone(),
            path: self.version.path.clone(),
            kind: self.version.kind,
            status: self.status,
            source_hash: self.source_hash,
            verdict,
            stages: self.stages,
            ran_on: None,
        }
    }
}

/// What the GPU rungs of one version read and write: the workspace, the history, the machine and
/// its workers, the options, the seed, and the flag a newer save sets to cancel.
pub struct RunCtx<'a> {
    pub ws: &'a Workspace,
    pub store: &'a mut Store,
    pub machine: &'a Machine,
    pub runners: &'a mut Option<Runners>,
    pub opts: &'a CheckOptions,
    pub seed: u64,
    pub cancel: Option<&'a std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// Why a runner (SSH, Slurm) gave no report: the reason code, the summary, how long it took and
/// where it was to run.
pub struct RunnerFailure {
    pub reason: crate::model::report::Reason,
    pub summary: String,
    pub duration_ms: f64,
    pub ran_on: crate::model::report::RanOn,
}

fn is_cancelled(cancel: Option<&std::sync::Arc<std::sync::atomic::AtomicBool>>) -> bool {
    cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst))
}

/// The id a CUDA reference is built under: its dumps are `.rung/dumps/reference/`.
pub const REFERENCE_ID: &str = "reference";

/// A `.cu` (or `.ptx`) reference, built like a version (the same compiler flags and cache) into
/// `.rung/dumps/reference/`, for the run rung to launch through the native worker. `None` when the
/// reference is Python or there is no GPU to run it on; `Err` says why it does not build.
pub fn reference_build(
    ws: &Workspace,
    store: &mut Store,
    machine: &Machine,
) -> Option<Result<(VersionFile, String), String>> {
    let path = ws.reference.as_ref().filter(|r| r.extension().is_some_and(|e| e == "cu" || e == "ptx"))?;
    machine.gpu.first()?;
    let source = match std::fs::read_to_string(ws.root.join(path)) {
        Ok(s) => s,
        Err(e) => return Some(Err(format!("cannot read {}: {e}", path.display()))),
    };
    let kind = match crate::workspace::detect_kind(path, &source) {
        Ok(k) => k,
        Err(e) => return Some(Err(format!("{}: {e}", path.display()))),
    };
    let v = VersionFile { id: REFERENCE_ID.into(), path: path.clone(), kind };
    let env = BuildEnv {
        ws,
        toolchain: &machine.toolchain,
        gpu_arch: machine.gpu.first().map(|g| g.arch()),
        timeout: ws.spec.as_ref().map_or(crate::spec::Limits::default().build, |s| s.limits.build),
        triton_at_launch: false,
        cancel: None,
    };
    Some(match build::build(&env, store, &v, &source) {
        Ok(b) if b.verdict == Verdict::Pass => Ok((v, source)),
        Ok(b) => Err(match b.diagnostics.iter().find(|d| d.severity == crate::diag::Severity::Error) {
            Some(d) => format!("the reference {} does not build: {}: {}", path.display(), d.location(), d.message),
            None => format!("the reference {} does not build: {}", path.display(), b.summary),
        }),
        Err(e) => Err(e.to_string()),
    })
}

/// A version handed to a remote runner as it is: that machine prepares and builds it for its own
/// GPU, so the scheduler does not build it here first.
pub fn handed_over(store: &mut Store, ws: &Workspace, v: &VersionFile) -> Result<Built, StoreError> {
    let source = ws.read_source(v).unwrap_or_default();
    let source_hash = sha256_hex(source.as_bytes());
    let row = store.sync_version(v, &source_hash, Status::Draft)?;
    Ok(Built { version: v.clone(), source, source_hash, status: row.status, stages: vec![], runnable: true })
}

/// The prepare and build rungs of one version, recorded. `cancel` (set by the scheduler when a
/// newer save arrives) kills the running tool; a cancelled phase records nothing more and
/// returns `None`.
pub fn build_phase(
    ws: &Workspace,
    store: &mut Store,
    v: &VersionFile,
    seed: u64,
    machine: &Machine,
    cancel: Option<&std::sync::Arc<std::sync::atomic::AtomicBool>>,
) -> Result<Option<Built>, StoreError> {
    let (source, read_error) = match ws.read_source(v) {
        Ok(s) => (s, None),
        Err(e) => (String::new(), Some(e)),
    };
    let source_hash = sha256_hex(source.as_bytes());
    let row = store.sync_version(v, &source_hash, Status::Draft)?;
    let mut stages = Vec::new();

    let started = SystemTime::now();
    let t0 = Instant::now();
    let p = match read_error {
        Some(e) => prepare::Prepared {
            verdict: Verdict::Error,
            summary: format!("cannot read {}: {e}", v.path.display()),
            diagnostics: vec![],
            detail: StageDetail::None,
            reason: None,
        },
        None => prepare::prepare(ws.format, ws.spec.as_ref(), v, &source),
    };
    let result = stage_result(
        Stage::Prepare,
        (started, t0),
        StageOutcome {
            verdict: p.verdict,
            summary: p.summary,
            diagnostics: p.diagnostics,
            detail: p.detail,
            reason: p.reason,
        },
        BTreeMap::new(),
    );
    let prepared = result.verdict == Verdict::Pass;
    if is_cancelled(cancel) {
        return Ok(None);
    }
    stages.push(record(store, v, &source_hash, seed, started, result)?);
    let mut runnable = false;
    if prepared {
        let env = BuildEnv {
            ws,
            toolchain: &machine.toolchain,
            gpu_arch: machine.gpu.first().map(|g| g.arch()),
            timeout: ws.spec.as_ref().map_or(crate::spec::Limits::default().build, |s| s.limits.build),
            triton_at_launch: machine.gpu.first().is_some() && machine.toolchain.has_python_package("torch"),
            cancel: cancel.cloned(),
        };
        let started = SystemTime::now();
        let t0 = Instant::now();
        let b = build::build(&env, store, v, &source)?;
        if is_cancelled(cancel) {
            return Ok(None);
        }
        runnable = b.verdict == Verdict::Pass;
        let outcome = StageOutcome {
            verdict: b.verdict,
            summary: b.summary,
            diagnostics: b.diagnostics,
            detail: b.detail,
            reason: None,
        };
        let result = stage_result(Stage::Build, (started, t0), outcome, b.tools);
        stages.push(record(store, v, &source_hash, seed, started, result)?);
    }
    Ok(Some(Built { version: v.clone(), source, source_hash, status: row.status, stages, runnable }))
}

/// The GPU rungs (run, check, bench, roofline) of a version that built, recorded. A cancelled
/// phase (the scheduler killed the worker's child for a newer save) records nothing more and
/// returns `None`.
pub fn run_phase(cx: RunCtx<'_>, built: Built) -> Result<Option<VersionReport>, StoreError> {
    let RunCtx { ws, store, machine, runners, opts, seed, cancel } = cx;
    if !built.runnable {
        return Ok(Some(built.into_report()));
    }
    let Built { version: v, source, source_hash, status, mut stages, .. } = built;
    let v = &v;
    let started = SystemTime::now();
    let t0 = Instant::now();
    // A CUDA reference, built once for the run rung and the bench.
    let reference = reference_build(ws, store, machine);
    let out = match runners_for(ws, machine, runners) {
        Ok(r) => {
            let gpu = machine.gpu.first();
            let env = run::RunEnv {
                toolchain: &machine.toolchain,
                gpu_sms: gpu.map(|g| g.sm_count),
                gpu_arch: gpu.map(|g| g.compute_capability),
                reference: reference.clone(),
            };
            run::run_and_check(ws, &env, r, v, &source, seed)
        }
        Err(e) => run::RunOutcome {
            run: crate::stages::StageOutcome {
                verdict: Verdict::Error,
                summary: format!("cannot prepare the workers: {e}"),
                diagnostics: vec![],
                detail: StageDetail::None,
                reason: None,
            },
            check: None,
        },
    };
    if is_cancelled(cancel) {
        return Ok(None);
    }
    let launched = match &out.run.detail {
        StageDetail::Run(r) => r.launched.clone(),
        _ => vec![],
    };
    let result = stage_result(Stage::Run, (started, t0), out.run, BTreeMap::new());
    stages.push(record(store, v, &source_hash, seed, started, result)?);
    // A Triton version compiled at launch: the kernels that ran become its build's artefacts.
    let at_launch = stages.iter().position(|s| s.stage == Stage::Build && matches!(s.detail, StageDetail::None));
    if let (Some(i), Some(g)) = (at_launch, machine.gpu.first())
        && let Some((verdict, summary, detail)) = build::captured(ws, &machine.toolchain, &g.arch(), &launched)
    {
        let started = SystemTime::now();
        let outcome =
            StageOutcome { verdict, summary, diagnostics: vec![], detail: StageDetail::Build(detail), reason: None };
        let result = stage_result(Stage::Build, (started, Instant::now()), outcome, stages[i].tools.clone());
        stages[i] = record(store, v, &source_hash, seed, started, result)?;
    }
    if let Some(check) = out.check {
        let started = SystemTime::now();
        let checked = check.verdict == Verdict::Pass;
        let result = stage_result(Stage::Check, (started, Instant::now()), check, BTreeMap::new());
        stages.push(record(store, v, &source_hash, seed, started, result)?);
        if checked && !opts.no_bench {
            let cx = RunCtx { ws, store: &mut *store, machine, runners: &mut *runners, opts, seed, cancel };
            bench_and_roofline(cx, v, (&source, &source_hash), &reference, &mut stages)?;
        }
    }
    if is_cancelled(cancel) {
        return Ok(None);
    }
    let verdict = stages.iter().map(|s| s.verdict).max().unwrap_or(Verdict::Pass);
    Ok(Some(VersionReport {
        id: v.id.clone(),
        path: v.path.clone(),
        kind: v.kind,
        status,
        source_hash,
        verdict,
        stages,
        ran_on: Some(crate::model::report::RanOn { device: machine.device, ..crate::gpu::ran_on_here(&machine.gpu) }),
    }))
}

/// A stage's result, timed from `started` (wall clock) / `t0` (monotonic) to now.
pub(crate) fn stage_result(
    stage: Stage,
    (started, t0): (SystemTime, Instant),
    outcome: StageOutcome,
    tools: BTreeMap<String, String>,
) -> StageResult {
    StageResult {
        stage,
        verdict: outcome.verdict,
        summary: outcome.summary,
        started_at: rfc3339(started),
        duration_ms: millis(t0.elapsed()),
        diagnostics: outcome.diagnostics,
        tools,
        result_id: None,
        reason: outcome.reason,
        detail: outcome.detail,
        ran_on: None,
    }
}

/// The bench rung, then the roofline rung, for a version that passed its check: on a GPU, for
/// rung.toml problems; without one, the bench says so.
fn bench_and_roofline(
    cx: RunCtx<'_>,
    v: &VersionFile,
    (source, source_hash): (&str, &str),
    reference: &Option<Result<(VersionFile, String), String>>,
    stages: &mut Vec<StageResult>,
) -> Result<(), StoreError> {
    let RunCtx { ws, store, machine, runners, seed, .. } = cx;
    use crate::stages::bench;
    let started = SystemTime::now();
    let t0 = Instant::now();
    let skip = |why: String| StageOutcome {
        verdict: Verdict::Skipped,
        summary: why,
        diagnostics: vec![],
        detail: StageDetail::None,
        reason: None,
    };
    let Some(gpu) = machine.gpu.first() else {
        let why = "no GPU: bench and roofline skipped (no timing is invented)".to_string();
        let result = stage_result(Stage::Bench, (started, t0), skip(why), BTreeMap::new());
        stages.push(record(store, v, source_hash, seed, started, result)?);
        return Ok(());
    };
    let (Some(spec), crate::workspace::Format::Rung) = (ws.spec.as_ref(), ws.format) else {
        // A GPU MODE or KernelBench problem: its own inputs, against its own GPU reference.
        let out = match runners_for(ws, machine, runners) {
            Ok(r) => bench::bench_problem(ws, r, gpu, v, seed),
            Err(e) => StageOutcome { verdict: Verdict::Error, ..skip(format!("cannot prepare the workers: {e}")) },
        };
        let passed = out.verdict == Verdict::Pass;
        let result = stage_result(Stage::Bench, (started, t0), out, BTreeMap::new());
        stages.push(record(store, v, source_hash, seed, started, result)?);
        if passed {
            let why =
                "no roofline: a GPU MODE or KernelBench problem states no bytes or FLOPs (rung.toml's [roofline] does)";
            let result =
                stage_result(Stage::Roofline, (SystemTime::now(), Instant::now()), skip(why.into()), BTreeMap::new());
            stages.push(record(store, v, source_hash, seed, started, result)?);
        }
        return Ok(());
    };
    if !bench::benchable(v.kind) {
        let why = format!("benching {} versions is not built yet", v.kind);
        let result = stage_result(Stage::Bench, (started, t0), skip(why), BTreeMap::new());
        stages.push(record(store, v, source_hash, seed, started, result)?);
        return Ok(());
    }
    let r = match runners_for(ws, machine, runners) {
        Ok(r) => r,
        Err(e) => {
            let out = StageOutcome { verdict: Verdict::Error, ..skip(format!("cannot prepare the workers: {e}")) };
            let result = stage_result(Stage::Bench, (started, t0), out, BTreeMap::new());
            stages.push(record(store, v, source_hash, seed, started, result)?);
            return Ok(());
        }
    };
    let plan =
        if v.kind.is_native() { run::NativePlan::new(ws, spec, v, source, Some(gpu.sm_count)).ok() } else { None };
    let launch_at = plan.as_ref().map(|p| p.launcher(spec));
    let target = match &launch_at {
        Some(f) => bench::Target::Native(f),
        None if v.kind.is_python() => bench::Target::python(v.path.clone(), source),
        None => {
            let why = format!("{} cannot be launched (see its prepare and run results)", v.path.display());
            let result = stage_result(Stage::Bench, (started, t0), skip(why), BTreeMap::new());
            stages.push(record(store, v, source_hash, seed, started, result)?);
            return Ok(());
        }
    };
    // The best approved version, re-benched interleaved with this one.
    let best = best_approved(ws, store, &v.id);
    let best_plan = best
        .as_ref()
        .filter(|(b, _)| b.kind.is_native())
        .map(|(b, src)| run::NativePlan::new(ws, spec, b, src, Some(gpu.sm_count)).map_err(|d| d.message.clone()));
    let best_launch = best_plan.as_ref().and_then(|p| p.as_ref().ok()).map(|p| p.launcher(spec));
    let mut others = Vec::new();
    let mut notes = Vec::new();
    match (&best, &best_plan, &best_launch) {
        (None, _, _) => notes
            .push("no other approved version has a passing bench: no speedup over the best approved version".into()),
        (Some((b, _)), Some(Err(e)), _) => {
            notes.push(format!("the best approved version {} cannot be launched: {e}", b.id))
        }
        (Some((b, _)), Some(Ok(p)), Some(f)) if p.cubin.exists() => others.push(bench::Other {
            role: bench::ROLE_BEST_APPROVED,
            label: b.id.clone(),
            target: bench::Target::Native(f),
        }),
        (Some((b, _)), Some(Ok(_)), _) => {
            notes.push(format!("the best approved version {} has no build: run `rung check {}` first", b.id, b.id))
        }
        (Some((b, src)), None, _) => others.push(bench::Other {
            role: bench::ROLE_BEST_APPROVED,
            label: b.id.clone(),
            target: bench::Target::python(b.path.clone(), src),
        }),
    }
    // A CUDA reference is a GPU baseline: timed interleaved like the best approved version. A
    // Python reference runs on the host with numpy, so no speedup over it is claimed.
    let ref_plan = match reference {
        Some(Ok((rv, src))) => match run::NativePlan::new(ws, spec, rv, src, Some(gpu.sm_count)) {
            Ok(p) if p.cubin.exists() => Some(p),
            Ok(_) => {
                notes.push("the CUDA reference has no cubin: no speedup over it".into());
                None
            }
            Err(d) => {
                notes.push(format!("the CUDA reference cannot be launched: {}", d.message));
                None
            }
        },
        Some(Err(e)) => {
            notes.push(format!("{e}: no speedup over it"));
            None
        }
        None => {
            if let Some(r) = &ws.reference {
                notes.push(format!(
                    "the reference ({}) runs on the host with numpy: it is not a GPU baseline, so no speedup over it",
                    r.display()
                ));
            }
            None
        }
    };
    let ref_launch = ref_plan.as_ref().map(|p| p.launcher(spec));
    if let (Some(f), Some(r)) = (&ref_launch, &ws.reference) {
        others.push(bench::Other {
            role: bench::ROLE_REFERENCE,
            label: r.display().to_string(),
            target: bench::Target::Native(f),
        });
    }
    let mut out = bench::bench(&mut bench::BenchCtx { ws, spec, runners: r, seed }, gpu, v, &target, &others);
    if let StageDetail::Bench(b) = &mut out.detail {
        b.comparison_notes.splice(0..0, notes);
    }
    let benched = match (&out.verdict, &out.detail) {
        (Verdict::Pass, StageDetail::Bench(b)) => Some(b.clone()),
        _ => None,
    };
    let result = stage_result(Stage::Bench, (started, t0), out, BTreeMap::new());
    stages.push(record(store, v, source_hash, seed, started, result)?);
    let Some(b) = benched else { return Ok(()) };
    let started = SystemTime::now();
    let t0 = Instant::now();
    let torch = machine.toolchain.has_python_package("torch");
    let out = match bench::ceilings(r, gpu, torch) {
        Ok(c) => bench::roofline(spec, &b, c, gpu.sm_count as i64),
        Err(e) => StageOutcome { verdict: Verdict::Error, ..skip(format!("measuring the GPU's ceilings: {e}")) },
    };
    let result = stage_result(Stage::Roofline, (started, t0), out, BTreeMap::new());
    stages.push(record(store, v, source_hash, seed, started, result)?);
    Ok(())
}

/// The approved version (other than `this`, still in the workspace, benchable) with the fastest
/// passing bench in the history, with its source.
fn best_approved(ws: &Workspace, store: &Store, this: &str) -> Option<(VersionFile, String)> {
    let rows = store.versions().ok()?;
    let mut timed = Vec::new();
    for row in rows.iter().filter(|r| r.status == Status::Approved && r.id != this) {
        let Some(file) = ws.versions.iter().find(|f| f.id == row.id) else { continue };
        if !crate::stages::bench::benchable(file.kind) {
            continue;
        }
        let results = store.latest_results(&row.id).ok()?;
        // Versions never benched do not count.
        if let Some(bench) = results
            .iter()
            .find(|r| r.stage == "bench" && r.verdict == "pass")
            .and_then(|r| crate::stages::bench::recorded_bench(&r.payload))
        {
            timed.push((file.clone(), bench));
        }
    }
    let best = crate::stages::bench::fastest(&timed.iter().enumerate().map(|(i, (_, b))| (i, b)).collect::<Vec<_>>())?;
    let file = timed.swap_remove(best).0;
    let source = std::fs::read_to_string(ws.root.join(&file.path)).ok()?;
    Some((file, source))
}

/// The workers, created on first need.
pub fn runners_for<'r>(
    ws: &Workspace,
    machine: &Machine,
    slot: &'r mut Option<Runners>,
) -> std::io::Result<&'r mut Runners> {
    if slot.is_none() {
        let python = machine.toolchain.python.as_ref().map(|p| p.path.clone());
        let mut r = Runners::new(&ws.root, &ws.state_dir(), python)?;
        // A lane of one GPU among several: its workers see that GPU alone.
        if machine.device.is_some() {
            r.env.visible_device = machine.gpu.first().map(|g| g.ordinal);
        }
        *slot = Some(r);
    }
    Ok(slot.as_mut().expect("just set"))
}

/// The report of a check that a runner could not carry out (a lost connection, a job killed at
/// its time limit): each asked version (every version when none is named) gets one `run` stage
/// with verdict `error`, `reason` and `summary`, recorded in the history like any result so the
/// TUI and `rung status` show it.
pub fn runner_failed(
    ws: &Workspace,
    store: &mut Store,
    versions: &[String],
    seed: u64,
    failure: RunnerFailure,
) -> Result<CheckReport, StoreError> {
    let RunnerFailure { reason, summary, duration_ms, ran_on } = failure;
    let chosen: Vec<&VersionFile> = if versions.is_empty() {
        ws.versions.iter().collect()
    } else {
        versions.iter().filter_map(|w| ws.version(w)).collect()
    };
    let started = SystemTime::now();
    let mut out = Vec::new();
    for v in chosen {
        let hash = ws.source_hash(v).unwrap_or_default();
        let row = store.sync_version(v, &hash, Status::Draft)?;
        let stage = StageResult {
            stage: Stage::Run,
            verdict: Verdict::Error,
            summary: summary.clone(),
            started_at: rfc3339(started),
            duration_ms,
            diagnostics: vec![],
            tools: BTreeMap::new(),
            result_id: None,
            reason: Some(reason),
            detail: StageDetail::None,
            ran_on: Some(ran_on.clone()),
        };
        let stage = record(store, v, &hash, seed, started, stage)?;
        out.push(VersionReport {
            id: v.id.clone(),
            path: v.path.clone(),
            kind: v.kind,
            status: row.status,
            source_hash: hash,
            verdict: Verdict::Error,
            stages: vec![stage],
            ran_on: Some(ran_on.clone()),
        });
    }
    Ok(report_of(ws, seed, vec![], out))
}

pub(crate) fn record(
    store: &mut Store,
    v: &VersionFile,
    source_hash: &str,
    seed: u64,
    started: SystemTime,
    mut result: StageResult,
) -> Result<StageResult, StoreError> {
    if result.ran_on.is_none()
        && let Some(job) = crate::gpu::slurm_job()
    {
        result.ran_on = Some(crate::model::report::RanOn {
            host: crate::gpu::host_name(),
            gpu: None,
            uuid: None,
            device: None,
            runner: Some(job),
        });
    }
    let payload = serde_json::to_string(&result).expect("stage results serialise");
    let tools = serde_json::to_string(&result.tools).expect("tool maps serialise");
    let started_ms = started.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let id = store.record(&NewResult {
        version: &v.id,
        stage: result.stage.name(),
        verdict: result.verdict.name(),
        source_hash,
        seed: Some(seed),
        payload: &payload,
        tools: &tools,
        started_at_ms: started_ms,
        finished_at_ms: started_ms + result.duration_ms as i64,
    })?;
    result.result_id = Some(id);
    emit(
        store,
        &Streamed::Stage {
            version: v.id.clone(),
            source_hash: source_hash.to_string(),
            result: Box::new(result.clone()),
        },
    );
    Ok(result)
}

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
use crate::store::{NewResult, Status, Store, StoreError, sha256_hex};
use crate::store::{millis, rfc3339};
use crate::toolchain::Toolchain;
use crate::workspace::{VersionFile, Workspace};
use contract::Climb;

mod bench;
pub mod contract;
pub mod ladder;
mod queue;
pub use queue::{LANES_FROM, LANES_VAR, check_lanes};

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
    /// The toolchain and the GPU, found side by side: the driver's initialisation (a few hundred
    /// milliseconds on an H100) and the toolchain's discovery are both paid before the first
    /// build starts.
    pub fn discover() -> Machine {
        let (toolchain, gpu) = std::thread::scope(|s| {
            let gpu = s.spawn(crate::gpu::probe);
            let toolchain = Toolchain::discover();
            (toolchain, gpu.join().unwrap_or_else(|_| crate::gpu::GpuProbe::absent("the GPU probe panicked")))
        });
        Machine { toolchain, gpu, device: None }
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

    let here = crate::model::report::RanOn { device: machine.device, ..crate::gpu::ran_on_here(&machine.gpu) };
    emit(store, &Streamed::Machine(here.clone()));
    let lanes = build_lanes(chosen.len());
    draw_ahead(ws, machine, runners, opts, seed, &chosen);
    start_workers_ahead(ws, machine, runners, chosen.iter().any(|v| v.kind.is_python()));
    // The native worker too, on a GPU, when native versions will launch in it.
    if ws.format == crate::workspace::Format::Rung
        && !machine.gpu.devices.is_empty()
        && chosen.iter().any(|v| v.kind.is_native())
        && let Ok(r) = runners_for(ws, machine, runners)
    {
        r.start_native_ahead();
    }
    let mut gpu = queue::GpuRungs::new(ws, machine, runners, opts, seed, here);
    if lanes <= 1 {
        for (i, v) in chosen.into_iter().enumerate() {
            let built = build_phase(ws, store, v, seed, machine, None)?.expect("not cancelled");
            gpu.check(i, built, store)?;
            gpu.bench(store)?;
        }
    } else {
        // The CPU rungs of every version on `lanes` threads, each with its own connection to the
        // history; the GPU rungs here in the order chosen, each as soon as its build is done,
        // while the builds after it go on, and CUDA versions' check rungs in check lanes when
        // there are some ([`queue`]).
        let streams = store.streams();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let building = queue::AtWork::default();
        let native = chosen.iter().filter(|v| v.kind.is_native()).count();
        let check_lanes = queue::check_lanes(ws, machine, native);
        let gpu_lock = gpu.gpu.clone();
        std::thread::scope(|scope| -> Result<(), StoreError> {
            let (tx, rx) = std::sync::mpsc::channel::<queue::Arrived>();
            for _ in 0..lanes {
                let (tx, next, chosen, leaving) = (tx.clone(), &next, &chosen, building.enter());
                scope.spawn(move || {
                    let _leaving = leaving;
                    let mut own = match Store::open(&ws.state_dir()) {
                        Ok(s) => s,
                        Err(e) => {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            let _ = tx.send(queue::Arrived::Built(i, Err(e)));
                            return;
                        }
                    };
                    if streams {
                        own.stream_results();
                    }
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let Some(v) = chosen.get(i) else { return };
                        let built =
                            build_phase(ws, &mut own, v, seed, machine, None).map(|b| b.expect("not cancelled"));
                        if tx.send(queue::Arrived::Built(i, built)).is_err() {
                            return;
                        }
                    }
                });
            }
            let check_lanes = (check_lanes > 0).then(|| {
                let env = queue::LaneEnv { ws, machine, opts, seed, gpu: gpu_lock, streams };
                queue::spawn_lanes(scope, check_lanes, env, tx.clone())
            });
            drop(tx);
            gpu.climb_as_built(rx, chosen.len(), &building, check_lanes, store)
        })?;
    }
    let versions = gpu.versions;
    Ok(report_of(ws, seed, diagnostics, versions))
}

/// How many versions a check builds at once: one per core, as many as the free memory holds at
/// [`BUILD_LANE_BYTES`] each (a Triton or CuTe DSL compile holds a few hundred MB), never more
/// than there are versions; `RUNG_BUILD_THREADS` overrides. Eight at most cost the H100
/// machine's 16 cores a third of their time on 200 CUDA builds (34.1 s against 182.7 s of
/// compiles one at a time).
pub fn build_lanes(versions: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let wanted = std::env::var("RUNG_BUILD_THREADS").ok().and_then(|n| n.trim().parse::<usize>().ok());
    lanes_for(cores, crate::gpu::available_memory(), versions, wanted)
}

/// The memory one build lane is given room for.
const BUILD_LANE_BYTES: u64 = 1 << 30;

/// [`build_lanes`] given the cores, the free memory and the override.
fn lanes_for(cores: usize, free_bytes: u64, versions: usize, wanted: Option<usize>) -> usize {
    let by_memory = usize::try_from(free_bytes / BUILD_LANE_BYTES).unwrap_or(usize::MAX).max(1);
    wanted.unwrap_or(cores.min(by_memory)).max(1).min(versions.max(1))
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

impl RunCtx<'_> {
    /// The same context, borrowed for one call: its parts again, for as long as that call.
    pub fn reborrow(&mut self) -> RunCtx<'_> {
        RunCtx {
            ws: self.ws,
            store: self.store,
            machine: self.machine,
            runners: self.runners,
            opts: self.opts,
            seed: self.seed,
            cancel: self.cancel,
        }
    }
}

/// Why a runner (SSH, Slurm) gave no report: the reason code, the summary, how long it took and
/// where it was to run.
pub struct RunnerFailure {
    pub reason: crate::model::report::Reason,
    pub summary: String,
    pub duration_ms: f64,
    pub ran_on: crate::model::report::RanOn,
}

/// The id a CUDA reference is built under: its dumps are `.rung/dumps/reference/`.
pub const REFERENCE_ID: &str = "reference";

pub use crate::stages::run::ReferenceError;

/// A `.cu` (or `.ptx`) reference, built like a version (the same compiler flags and cache) into
/// `.rung/dumps/reference/`, for the run rung to launch through the native worker. `None` when the
/// reference is Python or there is no GPU to run it on; `Err` says why it does not build.
pub fn reference_build(
    ws: &Workspace,
    store: &mut Store,
    machine: &Machine,
) -> Option<Result<(VersionFile, String), ReferenceError>> {
    let path = ws.reference.as_ref().filter(|r| r.extension().is_some_and(|e| e == "cu" || e == "ptx"))?;
    machine.gpu.first()?;
    let source = match std::fs::read_to_string(ws.root.join(path)) {
        Ok(s) => s,
        Err(e) => return Some(Err(ReferenceError::Read { path: path.clone(), message: e.to_string() })),
    };
    let kind = match crate::workspace::detect_kind(path, &source) {
        Ok(k) => k,
        Err(e) => return Some(Err(ReferenceError::Kind { path: path.clone(), message: e.to_string() })),
    };
    let v = VersionFile { id: REFERENCE_ID.into(), path: path.clone(), kind };
    let env = BuildEnv {
        ws,
        toolchain: &machine.toolchain,
        gpu_arch: machine.gpu.first().map(|g| g.arch()),
        timeout: ws.build_limit(),
        triton_at_launch: false,
        cancel: None,
    };
    Some(match build::build(&env, store, &v, &source) {
        Ok(b) if b.verdict == Verdict::Pass => Ok((v, source)),
        Ok(b) => Err(ReferenceError::Build {
            path: path.clone(),
            why: match b.diagnostics.iter().find(|d| d.severity == crate::diag::Severity::Error) {
                Some(d) => format!("{}: {}", d.location(), d.message),
                None => b.summary,
            },
        }),
        Err(e) => Err(ReferenceError::Store(e.to_string())),
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

/// The CPU rungs (prepare, build) of one version, recorded. `cancel` (set by the scheduler when a
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
        Err(e) => (String::new(), Some(e.to_string())),
    };
    let source_hash = sha256_hex(source.as_bytes());
    let row = store.sync_version(v, &source_hash, Status::Draft)?;
    if row.status == Status::Proposed {
        crate::sandbox::for_proposals();
    }
    const NO_OPTIONS: &CheckOptions = &CheckOptions { versions: Vec::new(), seed: None, no_bench: false };
    let mut no_workers = None;
    let at = RunCtx { ws, store, machine, runners: &mut no_workers, opts: NO_OPTIONS, seed, cancel };
    let mut cx = Climb { read_error, ..Climb::start(at, v.clone(), source, source_hash, vec![]) };
    if !ladder::climb(ladder::CPU, &mut cx)? {
        return Ok(None);
    }
    let runnable = cx.passed(Stage::Build);
    let Climb { version, source, source_hash, stages, .. } = cx;
    Ok(Some(Built { version, source, source_hash, status: row.status, stages, runnable }))
}

/// The GPU rungs (run, check, bench, roofline) of a version that built, recorded. A cancelled
/// phase (the scheduler killed the worker's child for a newer save) records nothing more and
/// returns `None`.
pub fn run_phase(mut cx: RunCtx<'_>, built: Built) -> Result<Option<VersionReport>, StoreError> {
    let Some(parked) = climb_checks(cx.reborrow(), built)? else { return Ok(None) };
    climb_benches(cx, parked)
}

/// A version between its check rungs and its bench rungs: what the climb so far left.
pub struct Parked {
    built: Built,
    reference: Option<Result<(VersionFile, String), ReferenceError>>,
    launched: Vec<crate::model::protocol::CapturedKernel>,
    /// The climb stopped (or never started: the version did not build): no bench rungs.
    stopped: bool,
}

/// The run, captured and check rungs of a built version (nothing for one that did not build);
/// `None` when cancelled.
pub fn climb_checks(cx: RunCtx<'_>, built: Built) -> Result<Option<Parked>, StoreError> {
    if !built.runnable {
        return Ok(Some(Parked { built, reference: None, launched: vec![], stopped: true }));
    }
    let Built { version, source, source_hash, status, stages, runnable } = built;
    // Workers started unsandboxed go when the sandbox is now asked for (a proposal's build,
    // build_phase, turned it on): the next ones start inside it.
    if let Some(r) = cx.runners.as_mut() {
        r.sandbox_if_asked(&cx.ws.root);
    }
    let mut cx = Climb::start(cx, version, source, source_hash, stages);
    if !ladder::climb(ladder::GPU_CHECKS, &mut cx)? {
        return Ok(None);
    }
    let Climb { version, source, source_hash, stages, reference, launched, stopped, .. } = cx;
    let built = Built { version, source, source_hash, status, stages, runnable };
    Ok(Some(Parked { built, reference, launched, stopped }))
}

/// The bench and roofline rungs of a parked version, unless its climb stopped: its report;
/// `None` when cancelled.
pub fn climb_benches(cx: RunCtx<'_>, parked: Parked) -> Result<Option<VersionReport>, StoreError> {
    let Parked { built, reference, launched, stopped } = parked;
    if !built.runnable {
        return Ok(Some(built.into_report()));
    }
    let machine = cx.machine;
    let Built { version, source, source_hash, status, stages, runnable } = built;
    let (version, source, source_hash, stages) = if stopped {
        (version, source, source_hash, stages)
    } else {
        let mut cx = Climb::start(cx, version, source, source_hash, stages);
        cx.reference = reference;
        cx.launched = launched;
        if !ladder::climb(ladder::GPU_BENCHES, &mut cx)? {
            return Ok(None);
        }
        let Climb { version, source, source_hash, stages, .. } = cx;
        (version, source, source_hash, stages)
    };
    let mut report = Built { version, source, source_hash, status, stages, runnable }.into_report();
    report.ran_on =
        Some(crate::model::report::RanOn { device: machine.device, ..crate::gpu::ran_on_here(&machine.gpu) });
    Ok(Some(report))
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

/// When the check will bench on a GPU: the first benchmark size's input sets drawn while the
/// versions build and run ([`crate::stages::bench::draw_ahead`]).
fn draw_ahead(
    ws: &Workspace,
    machine: &Machine,
    runners: &mut Option<Runners>,
    opts: &CheckOptions,
    seed: u64,
    chosen: &[&VersionFile],
) {
    let benches = chosen.iter().any(|v| crate::stages::bench::benchable(v.kind));
    if opts.no_bench || machine.gpu.first().is_none() || ws.format != crate::workspace::Format::Rung || !benches {
        return;
    }
    if let (Some(spec), Ok(r)) = (ws.spec.as_ref(), runners_for(ws, machine, runners)) {
        crate::stages::bench::draw_ahead(ws, spec, r, seed);
    }
}

/// Starts, each on a thread of its own, the zygotes a check will ask for, while its versions
/// build: the versions' own when `python_versions` (their imports, torch and Triton, took 2.7 s
/// of a one-shot `rung check`'s first Python run), and the one the problem's own Python runs in
/// (a rung.toml problem's Python reference; GPU MODE's and KernelBench's judge). The first
/// request for each takes it ([`Runners::start_ahead`]).
pub fn start_workers_ahead(ws: &Workspace, machine: &Machine, runners: &mut Option<Runners>, python_versions: bool) {
    let py_reference = ws.reference.as_ref().is_some_and(|r| r.extension().is_some_and(|e| e == "py"));
    let rung_format = ws.format == crate::workspace::Format::Rung;
    if !(python_versions || py_reference || !rung_format) {
        return;
    }
    let Ok(r) = runners_for(ws, machine, runners) else { return };
    let interpret = machine.gpu.devices.is_empty();
    if python_versions {
        r.start_ahead(interpret, false);
    }
    if !rung_format {
        r.start_ahead(interpret, true);
    } else if py_reference {
        r.start_ahead(true, true);
    }
}

/// The workers, created on first need.
/// Between checks in a process that stays (a watch, the TUI, the MCP server and the agent's
/// tools): forks the children the next check of a GPU MODE or KernelBench problem will ask for,
/// so it finds them started ([`Runners::fork_ahead`]). Nothing for rung.toml workspaces (their
/// fork carries the version's prewarm) or where no workers run yet.
pub fn fork_ahead(ws: &Workspace, machine: &Machine, runners: &mut Option<Runners>) {
    if !matches!(ws.format, crate::model::version::Format::GpuMode | crate::model::version::Format::KernelBench) {
        return;
    }
    if let Some(r) = runners.as_mut() {
        let gpu = !machine.gpu.devices.is_empty();
        r.fork_ahead(if gpu {
            crate::model::protocol::CallMode::Cuda
        } else {
            crate::model::protocol::CallMode::Interpret
        });
    }
}

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

#[cfg(test)]
mod tests {
    use super::{BUILD_LANE_BYTES, lanes_for};

    /// One build per core while the free memory holds a lane for each; the override wins; never
    /// more lanes than versions, never none.
    #[test]
    fn builds_run_one_per_core_as_far_as_memory_allows() {
        let gib = BUILD_LANE_BYTES;
        assert_eq!(lanes_for(16, 128 * gib, 200, None), 16);
        assert_eq!(lanes_for(16, 5 * gib + gib / 2, 200, None), 5);
        assert_eq!(lanes_for(16, 0, 200, None), 1);
        assert_eq!(lanes_for(16, u64::MAX, 3, None), 3);
        assert_eq!(lanes_for(2, 128 * gib, 200, Some(6)), 6);
        assert_eq!(lanes_for(2, 128 * gib, 0, Some(0)), 1);
    }
}

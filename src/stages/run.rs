//! The run and check rungs (DESIGN.md, stages 2 and 3). rung draws the inputs, poisons the
//! outputs, hashes the inputs before and after, computes the metrics and gives the verdicts; the
//! workers ([`crate::runners`]) only execute.
//!
//! For a rung.toml problem every test size is run twice: first on a decoy input set with the
//! first poison pattern, then on the real input set with the second. An element is unwritten
//! only if it holds the poison both times; an output that does not change when the inputs did
//! and is wrong is a remembered (memoised) result; buffers sit inside guard zones on the GPU, so
//! an out-of-bounds write that did not fault still shows. The second run's outputs are checked
//! against the reference, whose outputs are cached by (reference source, seed, size).
//!
//! GPU MODE problem folders and KernelBench files run in the Python worker the way their own
//! harnesses do (see [`run_problem`]); rung judges the outputs with its metrics and reports the
//! problem's own verdict beside its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::diag::{Diagnostic, Pos};
use crate::inputs::{self, POISON};
use crate::metrics::{self};
use crate::model::protocol::{self, CallMode, CapturedKernel, OwnVerdict, Response, TensorFile, WorkerError};
use crate::model::report::{Reason, StageDetail, Verdict};
pub use crate::model::run::{CheckDetail, OutputCheck, OwnCheck, RunDetail, SizeRun, UserRung};
use crate::runners::{Failure, Runners};
use crate::spec::{SizeSet, Spec};
use crate::stages::problem::{SeedDraw, problem_seed_range, read_task_yml};
use crate::stages::{StageOutcome, call_args, reason_for};
use crate::store::sha256_hex;
use crate::toolchain::Toolchain;
use crate::workspace::{Format, VersionFile, VersionKind, Workspace};

/// The decoy input set of the first run is drawn with this added to the seed.
const DECOY: u64 = 0x5DEE_CE66_D1CE_F00D;

/// Milliseconds of device work after run() returned above which rung says so.
const PENDING_WARN_MS: f64 = 1.0;

pub struct RunOutcome {
    pub run: StageOutcome,
    /// Present when the run passed.
    pub check: Option<StageOutcome>,
}

fn skipped(why: impl Into<String>) -> RunOutcome {
    RunOutcome { run: StageOutcome::new(Verdict::Skipped, why), check: None }
}

fn failed(verdict: Verdict, reason: Option<Reason>, why: impl Into<String>) -> RunOutcome {
    RunOutcome { run: StageOutcome { reason, ..StageOutcome::new(verdict, why) }, check: None }
}

fn failure_reason(f: &Failure) -> (Verdict, Option<Reason>) {
    match f {
        Failure::Timeout(_) => (Verdict::Fail, Some(Reason::Timeout)),
        Failure::Died(_) => (Verdict::Fail, Some(Reason::Crashed)),
        Failure::Protocol(_) => (Verdict::Error, None),
        Failure::Forged(_) => (Verdict::Fail, Some(Reason::ForgedReply)),
    }
}

/// What a machine offers the run rung.
pub struct RunEnv<'a> {
    pub toolchain: &'a Toolchain,
    /// The GPU's SM count, when there is a GPU.
    pub gpu_sms: Option<u32>,
    /// The GPU's compute capability (90 for sm_90), when there is a GPU.
    pub gpu_arch: Option<u32>,
    /// A CUDA reference's build ([`crate::check::reference_build`]): what it is and its source,
    /// or why it did not build.
    pub reference: Option<Result<(VersionFile, String), String>>,
}

/// Runs and checks one version that built.
pub fn run_and_check(
    ws: &Workspace,
    env: &RunEnv,
    runners: &mut Runners,
    v: &VersionFile,
    source: &str,
    seed: u64,
) -> RunOutcome {
    let gpu = env.gpu_sms.is_some();
    let packages = env.toolchain.python.as_ref().map(|p| &p.packages);
    let has = |p: &str| packages.is_some_and(|m| m.contains_key(p));
    if matches!(ws.format, Format::GpuMode | Format::KernelBench) {
        if !has("torch") {
            return skipped(format!(
                "{} problems run with torch, which this Python lacks (install torch into rung's environment)",
                if ws.format == Format::GpuMode { "GPU MODE" } else { "KernelBench" }
            ));
        }
        let mode = if gpu { CallMode::Cuda } else { CallMode::Interpret };
        return run_problem(ws, env.toolchain, runners, v, seed, mode);
    }
    let Some(spec) = ws.spec.as_ref() else {
        return skipped("the workspace has no rung.toml");
    };
    let native = match v.kind {
        VersionKind::Ptx if crate::launch::find_signatures(&crate::launch::ptx_launch_source(source)).0.is_empty() => {
            return skipped("this PTX declares no C signature (see the prepare warning), so it is not run");
        }
        VersionKind::Cuda | VersionKind::CudaHost | VersionKind::Ptx => {
            match NativePlan::new(ws, spec, v, source, env.gpu_sms) {
                Ok(p) if gpu => Some(p),
                Ok(_) => return skipped("no GPU: run and check skipped (build, PTX/SASS and diffs work)"),
                Err(d) => {
                    let why = d.message.clone();
                    let mut out = failed(Verdict::Fail, Some(Reason::SignatureMismatch), why);
                    out.run.diagnostics.push(d);
                    return out;
                }
            }
        }
        VersionKind::Triton if !gpu || !has("torch") => None,
        _ if !gpu => return skipped(format!("no GPU: {} versions run only on a GPU", v.kind)),
        _ => None,
    };
    let Some(reference) = ws.reference.clone() else {
        return skipped("the workspace has no reference");
    };
    // A CUDA reference runs through the native worker, like a CUDA version.
    let ref_plan = if reference.extension().is_some_and(|e| e == "py") {
        None
    } else if !gpu {
        return skipped(format!("no GPU: the CUDA reference {} runs only on a GPU", reference.display()));
    } else {
        match &env.reference {
            Some(Ok((rv, rsource))) => match NativePlan::new(ws, spec, rv, rsource, env.gpu_sms) {
                Ok(p) => Some(p),
                Err(d) => {
                    let why = format!("the reference cannot be launched: {}: {}", d.location(), d.message);
                    let mut out = failed(Verdict::Error, Some(Reason::ReferenceFailed), why);
                    out.run.diagnostics.push(d);
                    return out;
                }
            },
            Some(Err(why)) => return failed(Verdict::Error, Some(Reason::ReferenceFailed), why.clone()),
            None => return skipped(format!("the reference {} was not built", reference.display())),
        }
    };
    // Python runs the version, the Python reference or the user's checks.py; a CUDA version
    // against a CUDA reference needs none of it.
    let python = native.is_none() || ref_plan.is_none() || ws.checks.is_some();
    let needs = if native.is_some() || (gpu && has("torch")) { "numpy" } else { "triton" };
    if python && (!has(needs) || !has("numpy")) {
        let what = if ref_plan.is_none() { "the Python reference" } else { "this version and checks.py" };
        return skipped(format!("{needs} and numpy are needed to run {what}: run `rung setup`"));
    }
    let mode = if native.is_some() {
        CallMode::Reference
    } else if gpu && has("torch") {
        CallMode::Cuda
    } else {
        CallMode::Interpret
    };
    let mut c = Checker {
        ws,
        spec,
        toolchain: env.toolchain,
        runners,
        native,
        ref_plan,
        python,
        mode,
        seed,
        phases: BTreeMap::new(),
        launched: vec![],
        gpu_arch: env.gpu_arch,
    };
    let out = c.run_version(v, source, &reference);
    c.runners.end_children();
    out
}

/// How to launch a CUDA version: its cubin, kernel, parameters in order and launch at each size;
/// or, for a `rung_run` version, its shared object, whose host entry takes the same parameters.
pub struct NativePlan {
    /// The build's cubin (in `.rung/dumps/<id>/`), which may not exist yet.
    pub cubin: PathBuf,
    kernel: String,
    params: Vec<crate::launch::Param>,
    /// `None` for a host entry, which launches its own kernels.
    launch: Option<crate::launch::Launch>,
    /// A `rung_run` version's shared object (in `.rung/dumps/<id>/`).
    library: Option<PathBuf>,
    num_sms: i64,
}

impl NativePlan {
    pub fn new(
        ws: &Workspace,
        spec: &Spec,
        v: &VersionFile,
        source: &str,
        sms: Option<u32>,
    ) -> Result<NativePlan, Diagnostic> {
        let file = v.path.as_path();
        // A PTX version's launch and signature are in its comments.
        let ptx_launch;
        let source = if v.kind == VersionKind::Ptx {
            ptx_launch = crate::launch::ptx_launch_source(source);
            ptx_launch.as_str()
        } else {
            source
        };
        let header = crate::launch::parse_header(source, file, spec).map_err(|mut d| d.remove(0))?;
        let (sigs, _) = crate::launch::find_signatures(source);
        let wanted = header.kernel.clone().or_else(|| spec.launch.kernel.clone());
        let sig = crate::launch::choose(&sigs, wanted.as_deref(), file)?.clone();
        let host = sig.host_entry;
        let launch = if host { None } else { Some(crate::launch::merge(&header, spec, file)?) };
        let dumps = ws.state_dir().join(crate::store::DUMPS_DIR).join(&v.id);
        let cubin = dumps.join(format!("{}.cubin", v.id));
        let library = host.then(|| dumps.join(format!("lib{}.so", v.id)));
        // The PTX entry must take what the signature declares, or the launch would misread memory.
        if !host && let Ok(ptx) = std::fs::read_to_string(dumps.join(format!("{}.ptx", v.id))) {
            let n = ptx_param_count(&ptx, &sig.name);
            if let Some(n) = n.filter(|n| *n != sig.params.len()) {
                return Err(Diagnostic::error(
                    file,
                    Pos::new(sig.line, sig.column),
                    format!(
                        "the PTX entry `{}` takes {n} parameters but the signature rung read declares {}",
                        sig.name,
                        sig.params.len()
                    ),
                )
                .with_help("declare the kernel's parameters on its extern \"C\" line so rung can read them"));
            }
        }
        Ok(NativePlan {
            cubin,
            kernel: sig.name.clone(),
            params: sig.params,
            launch,
            library,
            num_sms: sms.unwrap_or(132) as i64,
        })
    }
}

impl NativePlan {
    /// [`NativePlan::launch_at`] for the bench, which needs only the message on failure.
    pub fn launcher<'a>(
        &'a self,
        spec: &'a Spec,
    ) -> impl Fn(&SizeSet, &crate::stages::Files) -> Result<protocol::Launch, String> + 'a {
        move |sizes, files| self.launch_at(spec, sizes, files).map_err(|(_, m)| m)
    }

    /// The launch at one size with the buffers in `files` (parameter name → file, shape).
    pub fn launch_at(
        &self,
        spec: &Spec,
        sizes: &SizeSet,
        files: &BTreeMap<String, (PathBuf, Vec<i64>)>,
    ) -> Result<protocol::Launch, (Option<Reason>, String)> {
        let dims = match &self.launch {
            Some(l) => l.eval(spec, sizes, self.num_sms).map_err(|m| (None, m))?,
            None => crate::launch::LaunchDims { grid: [1, 1, 1], block: [1, 1, 1], smem_bytes: 0, cluster: None },
        };
        let mut params = Vec::new();
        for p in &self.params {
            let param = if let Some((path, _)) = files.get(&p.name).filter(|_| p.pointer) {
                protocol::LaunchParam::Buffer { name: p.name.clone(), path: path.clone() }
            } else {
                let value = spec.value_of(&p.name, sizes, Some(self.num_sms)).ok().flatten().ok_or_else(|| {
                    (Some(Reason::SignatureMismatch), format!("no value for the kernel parameter `{}`", p.name))
                })?;
                protocol::LaunchParam::Scalar { name: p.name.clone(), ctype: p.base.clone(), value: value.as_f64() }
            };
            params.push(param);
        }
        Ok(protocol::Launch {
            cubin: self.cubin.clone(),
            kernel: self.kernel.clone(),
            grid: dims.grid,
            block: dims.block,
            smem: dims.smem_bytes,
            cluster: dims.cluster,
            params,
            guard_bytes: protocol::GUARD_BYTES,
            library: self.library.clone(),
        })
    }
}

/// The number of `.param` entries of a PTX `.entry`.
pub fn ptx_param_count(ptx: &str, entry: &str) -> Option<usize> {
    let start = ptx.find(&format!(".entry {entry}("))?;
    let rest = &ptx[start..];
    let end = rest.find(')')?;
    Some(rest[..end].matches(".param").count())
}

struct Checker<'a> {
    ws: &'a Workspace,
    spec: &'a Spec,
    toolchain: &'a Toolchain,
    runners: &'a mut Runners,
    /// For CUDA versions: what to launch in the native worker.
    native: Option<NativePlan>,
    /// A CUDA reference: launched in the native worker too.
    ref_plan: Option<NativePlan>,
    /// Whether a Python child is needed (not for a CUDA version against a CUDA reference without
    /// checks.py).
    python: bool,
    /// How the Python child runs the version (or only the reference, for CUDA versions).
    mode: CallMode,
    seed: u64,
    phases: BTreeMap<String, f64>,
    launched: Vec<CapturedKernel>,
    /// The GPU's compute capability: Triton's prewarm compiles for it without opening the GPU.
    gpu_arch: Option<u32>,
}

/// A failed request as the run stage's verdict.
struct RunFailure {
    verdict: Verdict,
    reason: Option<Reason>,
    message: String,
    diagnostic: Option<Box<Diagnostic>>,
}

impl<'a> Checker<'a> {
    fn add_phase(&mut self, name: &str, seconds: f64) {
        *self.phases.entry(name.to_string()).or_insert(0.0) += seconds;
    }

    /// Forks the Python child for this check, after compiling in parallel when `prewarm` has
    /// calls.
    /// Returns whether a prewarm call ran past the limit (run() does not return).
    fn fork(&mut self, prewarm: Vec<protocol::Call>) -> Result<bool, String> {
        let interpret = self.mode == CallMode::Interpret;
        let warm = self.runners.warm(interpret);
        let t0 = Instant::now();
        let limit = self.spec.limits.run * 2 + Duration::from_secs(30);
        let prewarm_seconds = (!prewarm.is_empty()).then_some(self.spec.limits.run.as_secs_f64());
        // RUNG_PREWARM_ON_GPU=1 keeps the older prewarm (each child runs run() on the GPU), for
        // comparing the two.
        let prewarm_arch = self
            .gpu_arch
            .filter(|_| !prewarm.is_empty() && std::env::var_os("RUNG_PREWARM_ON_GPU").is_none_or(|v| v != "1"));
        self.runners.zygote(interpret).map_err(|e| e.to_string())?;
        if !warm {
            self.add_phase("zygote_start", t0.elapsed().as_secs_f64());
        }
        let mode = self.mode;
        let z = self.runners.zygote(interpret).map_err(|e| e.to_string())?;
        let resp = z
            .fork_with(protocol::Fork { mode, prewarm, prewarm_seconds, prewarm_arch, token: None }, limit)
            .map_err(|e| format!("the Python worker could not fork: {e}"))?;
        if !resp.ok {
            let e = resp.error.unwrap_or_else(|| WorkerError::new("WorkerDied", "the child did not start"));
            return Err(format!("the Python worker's child could not start: {}: {}", e.kind, e.message));
        }
        let killed = resp.phases.get("prewarm_killed").copied().unwrap_or(0.0);
        for (k, s) in resp.phases {
            self.add_phase(&k, s);
        }
        Ok(killed > 0.0)
    }

    /// Runs the CUDA reference at `sizes` on the version's input files, its outputs written to
    /// `returns`' files (first filled with a NaN pattern, so an element it leaves unwritten
    /// cannot match). Why it failed, if it did.
    fn native_reference(
        &mut self,
        sizes: &SizeSet,
        files: &BTreeMap<String, (PathBuf, Vec<i64>)>,
        returns: &BTreeMap<String, TensorFile>,
    ) -> Option<String> {
        let plan = self.ref_plan.as_ref()?;
        let mut rfiles = files.clone();
        for t in &self.spec.outputs {
            let r = &returns[&t.name];
            let len = r.shape.iter().product::<i64>() as usize * t.dtype.size_bytes();
            if let Err(e) = std::fs::write(&r.path, vec![0xffu8; len]) {
                return Some(format!("{}: {e}", r.path.display()));
            }
            rfiles.insert(t.name.clone(), (r.path.clone(), r.shape.clone()));
        }
        let launch = match plan.launch_at(self.spec, sizes, &rfiles) {
            Ok(l) => l,
            Err((_, m)) => return Some(format!("the reference cannot be launched: {m}")),
        };
        match self.runners.launch(launch, self.spec.limits.run) {
            Ok(r) if r.ok && r.guards.is_empty() => None,
            Ok(r) if r.ok => Some(format!("the reference wrote outside `{}`", r.guards[0].name)),
            Ok(r) => {
                let e = r.error.unwrap_or_else(|| WorkerError::new("error", "the worker gave no reason"));
                Some(format!("the reference failed: {}: {}", e.kind, e.message))
            }
            Err(f) => Some(format!("the reference failed: {f}")),
        }
    }

    fn python(&mut self, op: protocol::Op) -> Result<Response, Failure> {
        let limit = self.spec.limits.run;
        let interpret = self.mode == CallMode::Interpret;
        self.runners.zygote(interpret)?.call(op, limit)
    }

    /// One run of the version at `sizes`: the kernel through the native worker, or run() in the
    /// Python child.
    fn call_run(
        &mut self,
        v: &VersionFile,
        params: &[String],
        sizes: &SizeSet,
        files: &BTreeMap<String, (PathBuf, Vec<i64>)>,
    ) -> Result<Response, RunFailure> {
        let limit = self.spec.limits.run;
        let as_failure = |f: Failure| {
            let (verdict, reason) = failure_reason(&f);
            RunFailure { verdict, reason, message: f.to_string(), diagnostic: None }
        };
        let Some(plan) = self.native.as_ref() else {
            let args = call_args(self.spec, params, sizes, |t, _| {
                let (path, shape) = &files[&t.name];
                TensorFile { path: path.clone(), dtype: t.dtype, shape: shape.clone() }
            })
            .map_err(|m| RunFailure {
                verdict: Verdict::Error,
                reason: None,
                message: m,
                diagnostic: None,
            })?;
            let call = protocol::Call {
                file: v.path.clone(),
                function: "run".into(),
                mode: self.mode,
                args,
                returns: BTreeMap::new(),
                guard_bytes: protocol::GUARD_BYTES,
            };
            return self.python(protocol::Op::Call(call)).map_err(as_failure);
        };
        let launch = plan.launch_at(self.spec, sizes, files).map_err(|(reason, message)| RunFailure {
            verdict: Verdict::Fail,
            reason,
            message,
            diagnostic: None,
        })?;
        self.runners.launch(launch, limit).map_err(as_failure)
    }

    /// For a Triton version on the GPU whose source rung has not compiled yet: one call of
    /// run() per test size, on its own copy of the inputs, for the zygote to run in parallel.
    fn prewarm_calls(
        &self,
        v: &VersionFile,
        params: &[String],
        marker: &Path,
        source_hash: &str,
    ) -> Vec<protocol::Call> {
        if self.mode != CallMode::Cuda || v.kind != VersionKind::Triton {
            return vec![];
        }
        if std::fs::read_to_string(marker).is_ok_and(|h| h.trim() == source_hash) {
            return vec![];
        }
        let base = self.runners.scratch(&format!("{}-prewarm", v.id));
        let mut calls = Vec::new();
        for (si, sizes) in self.spec.test_sizes.iter().enumerate() {
            let dir = base.join(format!("s{si}"));
            let _ = std::fs::create_dir_all(&dir);
            let mut files = BTreeMap::new();
            for t in self.spec.inputs.iter().chain(&self.spec.outputs) {
                let shape = self.spec.shape_at(t, sizes).unwrap_or_default();
                let numel = shape.iter().product::<i64>() as usize;
                // Zeros: the values do not matter to what Triton compiles, only the shapes.
                let bytes = vec![0u8; numel * t.dtype.size_bytes()];
                let path = dir.join(format!("{}.bin", t.name));
                if std::fs::write(&path, &bytes).is_err() {
                    return vec![];
                }
                files.insert(t.name.clone(), (path, shape));
            }
            let Ok(args) = call_args(self.spec, params, sizes, |t, _| {
                let (path, shape) = &files[&t.name];
                TensorFile { path: path.clone(), dtype: t.dtype, shape: shape.clone() }
            }) else {
                return vec![];
            };
            calls.push(protocol::Call {
                file: v.path.clone(),
                function: "run".into(),
                mode: CallMode::Cuda,
                args,
                returns: BTreeMap::new(),
                guard_bytes: protocol::GUARD_BYTES,
            });
        }
        calls
    }

    fn run_version(&mut self, v: &VersionFile, source: &str, reference: &Path) -> RunOutcome {
        let params: Vec<String> = crate::stages::prepare::python_def_params(source, "run")
            .map(|(p, _)| p.into_iter().map(|(n, _)| n).collect())
            .unwrap_or_default();
        let marker = self.ws.state_dir().join("cache").join("compiled").join(&v.id);
        let source_hash = sha256_hex(source.as_bytes());
        let t_inputs = Instant::now();
        let prewarm = self.prewarm_calls(v, &params, &marker, &source_hash);
        if !prewarm.is_empty() {
            self.add_phase("inputs", t_inputs.elapsed().as_secs_f64());
        }
        // Every test size's inputs, both passes, drawn while the child starts (and Triton compiles).
        let spec = self.spec;
        let seed = self.seed;
        let (forked, mut drawn) = std::thread::scope(|scope| {
            let drawing = scope.spawn(move || {
                let t = Instant::now();
                let mut drawn = BTreeMap::new();
                for (si, sizes) in spec.test_sizes.iter().enumerate() {
                    for pass in 0..POISON.len() {
                        let seed = if pass == 0 { seed.wrapping_add(DECOY) } else { seed };
                        for (idx, t) in spec.inputs.iter().enumerate() {
                            let numel: i64 = spec.shape_at(t, sizes).unwrap_or_default().iter().product();
                            let bytes = inputs::generate(t.dtype, &t.init, seed, idx as u64, numel as usize);
                            drawn.insert((si, pass, idx), bytes);
                        }
                    }
                }
                (drawn, t.elapsed().as_secs_f64())
            });
            let forked = if self.python { self.fork(prewarm) } else { Ok(false) };
            (forked, drawing.join().unwrap_or_default())
        });
        // Drawn in parallel with the fork: reported, not on the critical path.
        self.add_phase("inputs_drawn", drawn.1);
        match forked {
            Err(e) => return failed(Verdict::Error, None, e),
            Ok(true) => {
                let limit = self.spec.limits.run.as_secs_f64();
                let mut out = failed(
                    Verdict::Fail,
                    Some(Reason::Timeout),
                    format!(
                        "no answer within {limit:.1} s (limits.run in rung.toml): run() did not return while its kernels compiled; the worker was killed"
                    ),
                );
                out.run.detail = StageDetail::Run(RunDetail {
                    mode: "cuda".into(),
                    sizes: vec![],
                    phases: std::mem::take(&mut self.phases),
                    launched: vec![],
                });
                return out;
            }
            Ok(false) => {}
        }
        let ref_source = std::fs::read_to_string(self.ws.root.join(reference)).unwrap_or_default();
        let ref_params: Vec<String> = crate::stages::prepare::python_def_params(&ref_source, "reference")
            .map(|(p, _)| p.into_iter().map(|(n, _)| n).collect())
            .unwrap_or_else(|| self.spec.inputs.iter().map(|t| t.name.clone()).collect());
        let mut runs = Vec::new();
        let mut checks = Vec::new();
        let mut user_rungs = Vec::new();
        let mut warnings = Vec::new();
        let mut run_fail: Option<RunFailure> = None;
        let mut check_fail: Option<(Verdict, Reason, String)> = None;
        let fail = |reason: Reason, message: String| RunFailure {
            verdict: Verdict::Fail,
            reason: Some(reason),
            message,
            diagnostic: None,
        };
        let scratch = self.runners.scratch(&v.id);

        'sizes: for (si, sizes) in self.spec.test_sizes.iter().enumerate() {
            let label = crate::spec::size_label(sizes);
            let size_dir = scratch.join(format!("s{si}"));
            let _ = std::fs::create_dir_all(&size_dir);
            let mut files: BTreeMap<String, (PathBuf, Vec<i64>)> = BTreeMap::new();
            let mut out_bytes: BTreeMap<String, [Vec<u8>; 2]> = BTreeMap::new();
            let mut input_hashes: [BTreeMap<String, String>; 2] = Default::default();
            let mut seconds = 0.0;
            let mut pending = None;
            for (pass, poison) in POISON.into_iter().enumerate() {
                // The first run sees a decoy input set; the second, the real one.
                let t_inputs = Instant::now();
                let seed = if pass == 0 { self.seed.wrapping_add(DECOY) } else { self.seed };
                for (idx, t) in self.spec.inputs.iter().enumerate() {
                    let shape = self.spec.shape_at(t, sizes).unwrap_or_default();
                    let numel: i64 = shape.iter().product();
                    let bytes = drawn
                        .0
                        .remove(&(si, pass, idx))
                        .unwrap_or_else(|| inputs::generate(t.dtype, &t.init, seed, idx as u64, numel as usize));
                    let path = size_dir.join(format!("{}.bin", t.name));
                    if let Err(e) = std::fs::write(&path, &bytes) {
                        return failed(Verdict::Error, None, format!("{}: {e}", path.display()));
                    }
                    input_hashes[pass].insert(t.name.clone(), sha256_hex(&bytes));
                    files.insert(t.name.clone(), (path, shape));
                }
                for t in &self.spec.outputs {
                    let shape = self.spec.shape_at(t, sizes).unwrap_or_default();
                    let len = shape.iter().product::<i64>() as usize * t.dtype.size_bytes();
                    let path = size_dir.join(format!("{}.bin", t.name));
                    let _ = std::fs::write(&path, vec![poison; len]);
                    files.insert(t.name.clone(), (path, shape));
                }
                self.add_phase("inputs", t_inputs.elapsed().as_secs_f64());
                let t_call = Instant::now();
                let answer = self.call_run(v, &params, sizes, &files);
                let wall = t_call.elapsed().as_secs_f64();
                match answer {
                    Ok(resp) if resp.ok => {
                        let s = resp.seconds.unwrap_or(0.0);
                        // Staging buffers, guard checks, the round trip: all but the call itself.
                        self.add_phase("worker_overhead", (wall - s).max(0.0));
                        // The first run at each size includes any compile the prewarm left.
                        self.add_phase(if pass == 0 { "first_run" } else { "run" }, s);
                        for (k, s) in &resp.phases {
                            self.add_phase(k, *s);
                        }
                        seconds = s;
                        pending = resp.pending_ms.or(pending);
                        for k in resp.kernels {
                            if !self.launched.iter().any(|l| l.hash == k.hash) {
                                self.launched.push(k);
                            }
                        }
                        if let Some(g) = resp.guards.first() {
                            let side = if g.after > 0 {
                                format!("{} bytes past the end, up to byte {} after it", g.after, g.farthest)
                            } else {
                                format!("{} bytes before the start, from byte {} before it", g.before, -g.farthest)
                            };
                            run_fail = Some(fail(
                                Reason::OutOfBounds,
                                format!("the kernel wrote outside `{}`: {side} (at {label})", g.name),
                            ));
                            break 'sizes;
                        }
                    }
                    Ok(resp) => {
                        let e = resp.error.unwrap_or_else(|| WorkerError::new("error", "the worker gave no reason"));
                        let msg = format!("{}: {}", e.kind, e.message);
                        let mut d = Diagnostic::error(&v.path, Pos::new(e.lineno.unwrap_or(0), 0), msg.clone());
                        d.tool_text = e.traceback.clone();
                        run_fail = Some(RunFailure {
                            verdict: Verdict::Fail,
                            reason: Some(reason_for(&e)),
                            message: format!("{msg} (at {label})"),
                            diagnostic: Some(Box::new(d)),
                        });
                        break 'sizes;
                    }
                    Err(mut f) => {
                        f.message = format!("{} (at {label})", f.message);
                        run_fail = Some(f);
                        break 'sizes;
                    }
                }
                for t in &self.spec.outputs {
                    let bytes = std::fs::read(&files[&t.name].0).unwrap_or_default();
                    out_bytes.entry(t.name.clone()).or_insert_with(|| [Vec::new(), Vec::new()])[pass] = bytes;
                }
                for t in &self.spec.inputs {
                    let after = std::fs::read(&files[&t.name].0).map(|b| sha256_hex(&b)).unwrap_or_default();
                    if after != input_hashes[pass][&t.name] {
                        run_fail = Some(fail(
                            Reason::InputMutated,
                            format!("the kernel changed its input `{}` (at {label})", t.name),
                        ));
                        break 'sizes;
                    }
                }
            }
            if let Some(ms) = pending.filter(|ms| *ms > PENDING_WARN_MS) {
                warnings.push(Diagnostic::warning(
                    &v.path,
                    Pos::WHOLE_FILE,
                    format!(
                        "the GPU was still busy {ms:.1} ms after run() returned (work left on another stream, at {label}); rung waited for the whole device, so the outputs are complete"
                    ),
                ).with_help("synchronise the side stream with the caller's stream before returning"));
            }
            let mut unwritten = BTreeMap::new();
            for t in &self.spec.outputs {
                let [a, b] = &out_bytes[&t.name];
                let missing = inputs::unwritten(a, b, t.dtype.size_bytes());
                if !missing.is_empty() && run_fail.is_none() {
                    let shape: Vec<usize> = files[&t.name].1.iter().map(|d| *d as usize).collect();
                    run_fail = Some(fail(
                        Reason::Unwritten,
                        format!(
                            "{} of {} elements of `{}` were never written (first at {:?}, at {label})",
                            missing.len(),
                            a.len() / t.dtype.size_bytes(),
                            t.name,
                            crate::metrics::unravel(missing[0], &shape),
                        ),
                    ));
                }
                unwritten.insert(t.name.clone(), missing.len());
            }
            runs.push(SizeRun { sizes: sizes.clone(), seconds, unwritten, pending_ms: pending });
            if run_fail.is_some() {
                break;
            }
            // The reference, cached by (reference source, seed, size).
            let t_ref = Instant::now();
            let key = sha256_hex(format!("{ref_source}\n{}\n{sizes:?}", self.seed).as_bytes());
            let cache = self.ws.state_dir().join("cache").join("reference").join(&key[..16]);
            let _ = std::fs::create_dir_all(&cache);
            let mut returns = BTreeMap::new();
            for t in &self.spec.outputs {
                let shape = self.spec.shape_at(t, sizes).unwrap_or_default();
                returns.insert(
                    t.name.clone(),
                    TensorFile { path: cache.join(format!("{}.bin", t.name)), dtype: t.dtype, shape },
                );
            }
            let cached = self.spec.outputs.iter().all(|t| cache.join(format!("{}.bin", t.name)).is_file());
            if !cached && self.ref_plan.is_some() {
                // The CUDA reference, launched on the real input set (checked unchanged above),
                // writing straight into the cache.
                if let Some(why) = self.native_reference(sizes, &files, &returns) {
                    let _ = std::fs::remove_dir_all(&cache);
                    check_fail = Some((Verdict::Error, Reason::ReferenceFailed, why));
                    break;
                }
            } else if !cached {
                let args = match call_args(self.spec, &ref_params, sizes, |t, _| {
                    let (path, shape) = &files[&t.name];
                    TensorFile { path: path.clone(), dtype: t.dtype, shape: shape.clone() }
                }) {
                    Ok(a) => a,
                    Err(e) => {
                        check_fail =
                            Some((Verdict::Error, Reason::ReferenceFailed, format!("the reference's arguments: {e}")));
                        break;
                    }
                };
                let call = protocol::Call {
                    file: reference.to_path_buf(),
                    function: "reference".into(),
                    mode: CallMode::Reference,
                    args,
                    returns,
                    guard_bytes: 0,
                };
                let why = match self.python(protocol::Op::Call(call)) {
                    Ok(resp) if resp.ok => None,
                    Ok(resp) => {
                        let e = resp.error.unwrap_or_else(|| WorkerError::new("error", ""));
                        Some(format!("the reference failed: {}: {}", e.kind, e.message))
                    }
                    Err(e) => Some(format!("the reference failed: {e}")),
                };
                if let Some(why) = why {
                    let _ = std::fs::remove_dir_all(&cache);
                    check_fail = Some((Verdict::Error, Reason::ReferenceFailed, why));
                    break;
                }
            }
            self.add_phase("reference", t_ref.elapsed().as_secs_f64());
            let t_metrics = Instant::now();
            let inputs_differ = input_hashes[0] != input_hashes[1];
            for t in &self.spec.outputs {
                let shape: Vec<usize> = files[&t.name].1.iter().map(|d| *d as usize).collect();
                let reference =
                    inputs::to_f64(t.dtype, &std::fs::read(cache.join(format!("{}.bin", t.name))).unwrap_or_default());
                let output = inputs::to_f64(t.dtype, &out_bytes[&t.name][1]);
                if reference.len() != output.len() {
                    check_fail = Some((
                        Verdict::Error,
                        Reason::ReferenceFailed,
                        format!("the cached reference for `{}` has the wrong size; delete .rung/cache", t.name),
                    ));
                    continue;
                }
                let comparison = metrics::compare(&output, &reference, &shape, &t.tolerance);
                let mut reason = metrics::judge(&comparison, &t.tolerance);
                if let (Some(r), None) = (&reason, &check_fail) {
                    let [a, b] = &out_bytes[&t.name];
                    let non_finite = comparison.nan_count + comparison.inf_count > 0;
                    let (code, why) = if inputs_differ && a == b && !non_finite {
                        let why = format!(
                            "`{}` at {label} is the same as for the previous inputs and wrong for these: the version returns a remembered result ({r})",
                            t.name
                        );
                        (Reason::Memoised, why)
                    } else if non_finite && comparison.mismatches > 0 {
                        (Reason::NonFinite, format!("`{}` at {label}: {r}", t.name))
                    } else {
                        (Reason::Mismatch, format!("`{}` at {label}: {r}", t.name))
                    };
                    if code == Reason::Memoised {
                        reason = Some(why.clone());
                    }
                    check_fail = Some((Verdict::Fail, code, why));
                }
                checks.push(OutputCheck {
                    sizes: sizes.clone(),
                    output: t.name.clone(),
                    pass: reason.is_none(),
                    reason,
                    comparison,
                });
            }
            self.add_phase("metrics", t_metrics.elapsed().as_secs_f64());
            // The user's own rungs (checks.py), on this size's inputs and the version's outputs.
            if let Some(checks_py) = self.ws.checks.clone() {
                let tensors = |ts: &[crate::spec::TensorSpec]| -> BTreeMap<String, TensorFile> {
                    ts.iter()
                        .map(|t| {
                            let (path, shape) = &files[&t.name];
                            (t.name.clone(), TensorFile { path: path.clone(), dtype: t.dtype, shape: shape.clone() })
                        })
                        .collect()
                };
                let req = protocol::Checks {
                    file: checks_py.clone(),
                    sizes: sizes.clone(),
                    inputs: tensors(&self.spec.inputs),
                    outputs: tensors(&self.spec.outputs),
                };
                match self.python(protocol::Op::Checks(req)) {
                    Ok(resp) if resp.ok => {
                        for r in resp.rungs {
                            let rung = UserRung {
                                sizes: sizes.clone(),
                                name: r.name,
                                pass: r.ok,
                                error: r.error,
                                traceback: r.traceback,
                            };
                            if let (Some(e), None) = (&rung.error, &check_fail) {
                                check_fail = Some((
                                    Verdict::Fail,
                                    Reason::UserRung,
                                    format!("user rung \"{}\" at {label}: {e}", rung.name),
                                ));
                            }
                            user_rungs.push(rung);
                        }
                    }
                    Ok(resp) => {
                        let e = resp.error.unwrap_or_else(|| WorkerError::new("error", ""));
                        check_fail = Some((
                            Verdict::Fail,
                            Reason::UserRung,
                            format!("{} does not load: {}: {}", checks_py.display(), e.kind, e.message),
                        ));
                    }
                    Err(e) => {
                        check_fail = Some((Verdict::Fail, Reason::UserRung, format!("{}: {e}", checks_py.display())))
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&scratch);
        let _ = std::fs::remove_dir_all(self.runners.env.data.join(format!("{}-prewarm", v.id)));
        if run_fail.is_none() && v.kind == VersionKind::Triton && self.mode == CallMode::Cuda {
            // Triton's cache now holds this source's kernels: no prewarm next time.
            let _ = std::fs::create_dir_all(marker.parent().expect("in cache/compiled"));
            let _ = std::fs::write(&marker, &source_hash);
        }
        let on_gpu = self.native.is_some() || self.mode == CallMode::Cuda;
        let mode = if on_gpu { "cuda" } else { "triton-interpreter" };
        let launched = self.keep_launched(v);
        let run_detail = StageDetail::Run(RunDetail {
            mode: mode.into(),
            sizes: runs.clone(),
            phases: std::mem::take(&mut self.phases),
            launched,
        });
        if let Some(f) = run_fail {
            let mut diagnostics: Vec<Diagnostic> = f.diagnostic.into_iter().map(|d| *d).collect();
            diagnostics.extend(warnings);
            return RunOutcome {
                run: StageOutcome {
                    verdict: f.verdict,
                    summary: f.message,
                    diagnostics,
                    detail: run_detail,
                    reason: f.reason,
                },
                check: None,
            };
        }
        let place = if on_gpu { "on the GPU" } else { "in Triton's interpreter on the CPU" };
        let run_summary =
            format!("{place}, {} test size(s): every output element written, inputs unchanged", runs.len());
        let worst = checks.iter().map(|c| c.comparison.max_abs_err).fold(0f64, f64::max);
        let mut names: Vec<&str> = user_rungs.iter().map(|r| r.name.as_str()).collect();
        names.dedup();
        let user = if names.is_empty() { String::new() } else { format!("; user rungs passed: {}", names.join(", ")) };
        let check_detail = StageDetail::Check(CheckDetail {
            seed: self.seed,
            results: checks,
            user_rungs,
            own: vec![],
            warnings: vec![],
        });
        let check = match check_fail {
            Some((verdict, reason, why)) => {
                StageOutcome { verdict, summary: why, diagnostics: vec![], detail: check_detail, reason: Some(reason) }
            }
            None => StageOutcome {
                verdict: Verdict::Pass,
                summary: format!(
                    "matches the reference at every test size (max abs err {worst:.2e}, seed {}){user}",
                    self.seed
                ),
                diagnostics: vec![],
                detail: check_detail,
                reason: None,
            },
        };
        RunOutcome {
            run: StageOutcome {
                verdict: Verdict::Pass,
                summary: run_summary,
                diagnostics: warnings,
                detail: run_detail,
                reason: None,
            },
            check: Some(check),
        }
    }

    /// Moves the captured kernels' files into the version's dumps (`launched/`), where they
    /// outlive the check, and points the records at them.
    fn keep_launched(&mut self, v: &VersionFile) -> Vec<CapturedKernel> {
        let t0 = Instant::now();
        self.runners.reap();
        let kept =
            keep_launched(self.ws, self.toolchain, v, std::mem::take(&mut self.launched), &mut self.runners.background);
        if !kept.is_empty() {
            self.add_phase("dumps", t0.elapsed().as_secs_f64());
        }
        kept
    }
}

/// The kernels that really launched replace the version's ahead-of-time PTX, cubin and SASS in
/// `.rung/dumps/<version>/` (so diffs and the TUI show what ran); the records point at them.
/// The SASS is written by nvdisasm in the background (`background` holds the processes), so the
/// check's result does not wait for it.
fn keep_launched(
    ws: &Workspace,
    tc: &Toolchain,
    v: &VersionFile,
    kernels: Vec<CapturedKernel>,
    background: &mut Vec<std::process::Child>,
) -> Vec<CapturedKernel> {
    if kernels.is_empty() {
        return kernels;
    }
    let dir = ws.state_dir().join(crate::store::DUMPS_DIR).join(&v.id);
    let _ = std::fs::create_dir_all(&dir);
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "ptx" || e == "cubin" || e == "sass") {
            let _ = std::fs::remove_file(&p);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    kernels
        .into_iter()
        .map(|mut k| {
            let stem = if seen.insert(k.name.clone()) {
                k.name.clone()
            } else {
                format!("{}-{}", k.name, &k.hash[..k.hash.len().min(12)])
            };
            for (f, ext) in [(&mut k.ptx, "ptx"), (&mut k.cubin, "cubin")] {
                if let Some(src) = f.clone() {
                    let dst = dir.join(format!("{stem}.{ext}"));
                    *f = std::fs::copy(&src, &dst)
                        .ok()
                        .map(|_| dst.strip_prefix(&ws.root).unwrap_or(&dst).to_path_buf());
                }
            }
            if let (Some(cubin), Some(nvdisasm)) = (&k.cubin, &tc.nvdisasm)
                && let Ok(sass) = std::fs::File::create(dir.join(format!("{stem}.sass")))
                && let Ok(child) = std::process::Command::new(&nvdisasm.path)
                    .args(["-c", "-g"])
                    .arg(cubin)
                    .current_dir(&ws.root)
                    .stdin(std::process::Stdio::null())
                    .stdout(sass)
                    .stderr(std::process::Stdio::null())
                    .spawn()
            {
                background.push(child);
            }
            k
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// GPU MODE and KernelBench

/// The integer arguments of a test, as a size set for display.
fn args_label(args: &BTreeMap<String, serde_json::Value>) -> SizeSet {
    // The seed is rung's and stands in the check's summary; the label names the sizes.
    args.iter().filter(|(k, _)| k.as_str() != "seed").filter_map(|(k, v)| v.as_i64().map(|i| (k.clone(), i))).collect()
}

/// Runs a version of a GPU MODE problem at each test of task.yml, and on the GPU at each of its
/// benchmarks too (a version correct only at the test sizes fails), or a KernelBench version
/// at its published inputs, in a forked child, the problem's own way: `generate_input(**test)`
/// with the test's seed replaced by one drawn from rung's, `custom_kernel(data)` beside
/// `ref_kernel(data)` and the problem's `check_implementation`; or `Model`/`ModelNew` built from
/// `get_init_inputs()` with weights seeded identically, on `get_inputs()`.
///
/// The version first gets a compile phase under `limits.build`: one unjudged call, where
/// `load_inline`, `torch.compile` and Triton compile. Each test then runs two cases on fresh
/// inputs (the second under a further seed), their output slots poisoned with two patterns.
/// The format's own rule decides pass or fail (GPU MODE's check_implementation, KernelBench's
/// allclose at atol = rtol = 1e-2); rung's metrics stand beside it, and where the two disagree,
/// or a vacuous answer would pass the rule too, the check says so in a warning with the
/// figures. rung's own defences fail a version whatever the rule says: an input it changed,
/// output elements it never wrote, a process it ended.
pub fn run_problem(
    ws: &Workspace,
    tc: &Toolchain,
    runners: &mut Runners,
    v: &VersionFile,
    seed: u64,
    mode: CallMode,
) -> RunOutcome {
    let Some(problem) = ws.reference.clone() else {
        return skipped("the problem file was not found");
    };
    let format = if ws.format == Format::GpuMode {
        protocol::ProblemFormat::GpuMode
    } else {
        protocol::ProblemFormat::KernelBench
    };
    let on_gpu = mode == CallMode::Cuda;
    // (arguments, cases, a benchmark re-checked)
    let mut tests: Vec<(BTreeMap<String, serde_json::Value>, usize, bool)> = Vec::new();
    if format == protocol::ProblemFormat::GpuMode {
        match read_task_yml(&ws.root.join("task.yml")) {
            Ok(t) if !t.tests.is_empty() => {
                tests.extend(t.tests.into_iter().map(|a| (a, 2, false)));
                if on_gpu {
                    tests.extend(t.benchmarks.into_iter().map(|a| (a, 1, true)));
                }
            }
            Ok(_) => return failed(Verdict::Error, None, "task.yml lists no tests"),
            Err(d) => {
                let mut out = failed(Verdict::Error, None, d.message.clone());
                out.run.diagnostics.push(d);
                return out;
            }
        }
    } else {
        tests.push((BTreeMap::new(), 2, false));
    }
    let limits = crate::spec::Limits::default();
    let interpret = mode != CallMode::Cuda;
    let mut phases = BTreeMap::new();
    let warm = runners.warm(interpret);
    let t0 = Instant::now();
    let fork = runners.zygote(interpret).and_then(|z| z.fork(mode, limits.run.max(Duration::from_secs(30))));
    if !warm {
        phases.insert("zygote_start".to_string(), t0.elapsed().as_secs_f64());
    }
    match fork {
        Ok(r) if r.ok => phases.extend(r.phases),
        Ok(r) => {
            let e = r.error.unwrap_or_else(|| WorkerError::new("WorkerDied", ""));
            return failed(Verdict::Error, None, format!("the Python worker's child could not start: {}", e.message));
        }
        Err(e) => return failed(Verdict::Error, None, format!("the Python worker could not fork: {e}")),
    }
    let tolerances: BTreeMap<String, [f64; 2]> = crate::dtype::ALL
        .iter()
        .map(|d| {
            let t = d.default_tolerance();
            (d.name().to_string(), [t.atol, t.rtol])
        })
        .collect();
    let mut runs = Vec::new();
    let mut checks = Vec::new();
    let mut own = Vec::new();
    let mut warn_groups: Vec<(String, String, usize)> = Vec::new();
    let mut launched = Vec::new();
    let mut run_fail: Option<(Verdict, Option<Reason>, String, Option<Diagnostic>)> = None;
    let mut check_fail: Option<(Reason, String)> = None;
    let who = if format == protocol::ProblemFormat::GpuMode {
        "the problem's check_implementation"
    } else {
        "KernelBench's rule"
    };
    // rung's seeds, not the file's, so a version cannot learn its inputs; drawn in the file's
    // own range, since a problem may build its data from the seed's value (pmpp_v2's sort adds
    // it to every element: at 2^31 an f32 row collapses to one value).
    let seed_range = problem_seed_range(&tests);
    // The version's path is relative to the workspace, wherever rung runs from.
    let version_source = ws.read_source(v).unwrap_or_default();
    let declares_kernels = !declared_kernels(&version_source).is_empty();
    let declares_cuda = !declared_cuda_kernels(&version_source).is_empty();
    let mut seeds_of = SeedDraw::new(seed, seed_range);
    for (ti, (test, ncases, is_bench)) in tests.iter().map(|(a, n, b)| (a, *n, *b)).enumerate() {
        let mut args = test.clone();
        let seeds: Vec<u64> = (0..ncases).map(|_| seeds_of.draw()).collect();
        let test_seed = seeds[0];
        if args.contains_key("seed") {
            args.insert("seed".into(), serde_json::json!(test_seed));
        }
        let label_sizes = args_label(&args);
        let mut label =
            if label_sizes.is_empty() { "the test".to_string() } else { crate::spec::size_label(&label_sizes) };
        if is_bench {
            label = format!("benchmark {label}");
        }
        // The compile phase's inputs come from a seed of their own (the last in the list).
        let mut seeds = seeds;
        if ti == 0 {
            seeds.push(seeds_of.draw());
        }
        let req = |warmup: bool| protocol::Problem {
            format,
            problem: problem.clone(),
            version: v.path.clone(),
            args: args.clone(),
            seed: test_seed,
            seeds: if warmup { seeds.clone() } else { seeds[..ncases].to_vec() },
            tolerances: tolerances.clone(),
            warmup,
            benchmark: is_bench,
            list_kernels: warmup && declares_kernels,
            list_gpu_kernels: warmup && declares_cuda,
        };
        let mut steps = vec![(false, limits.run)];
        if ti == 0 {
            // The compile phase: one unjudged call under the build limit.
            steps.insert(0, (true, limits.build));
        }
        let mut resp = None;
        for (warmup, limit) in steps {
            let r = runners.zygote(interpret).and_then(|z| z.call(protocol::Op::Problem(req(warmup)), limit));
            let stage = if warmup { "while compiling (its first call)" } else { "" };
            match r {
                Ok(r) if r.ok => {
                    for (k, s) in &r.phases {
                        *phases.entry(k.clone()).or_insert(0.0) += s;
                    }
                    launched.extend(r.kernels.clone());
                    if warmup
                        && let Some(p) = &r.problem
                        && let Some(f) = compile_phase_verdict(p, &version_source)
                    {
                        run_fail = Some((Verdict::Fail, Some(f.0), format!("{} (at {label})", f.1), None));
                        break;
                    }
                    resp = Some(r);
                }
                Ok(r) => {
                    let e = r.error.unwrap_or_else(|| WorkerError::new("error", ""));
                    let msg = format!("{}: {}", e.kind, e.message);
                    let file = e.file.clone().unwrap_or_else(|| v.path.clone());
                    let mut d = Diagnostic::error(&file, Pos::new(e.lineno.unwrap_or(0), 0), msg.clone());
                    d.tool_text = e.traceback.clone();
                    let at = if stage.is_empty() { format!("at {label}") } else { format!("{stage}, at {label}") };
                    run_fail = Some((Verdict::Fail, Some(reason_for(&e)), format!("{msg} ({at})"), Some(d)));
                    break;
                }
                Err(f) => {
                    let (verdict, reason) = failure_reason(&f);
                    let at = if stage.is_empty() { format!("at {label}") } else { format!("{stage}, at {label}") };
                    let what = match &f {
                        Failure::Timeout(d) if warmup => format!(
                            "no answer within limits.build ({}s) while compiling (its first call), at {label}",
                            d.as_secs()
                        ),
                        _ => format!("{f} ({at})"),
                    };
                    run_fail = Some((verdict, reason, what, None));
                    break;
                }
            }
        }
        if run_fail.is_some() {
            break;
        }
        let Some(outcome) = resp.and_then(|r| r.problem) else {
            run_fail = Some((Verdict::Error, None, "the worker returned no outputs".into(), None));
            break;
        };
        let t_metrics = Instant::now();
        let judged = judge_cases(&outcome.cases, &label);
        runs.push(SizeRun {
            sizes: label_sizes.clone(),
            seconds: outcome.cases.last().map_or(0.0, |c| c.seconds),
            unwritten: judged.unwritten.clone(),
            pending_ms: None,
        });
        *phases.entry("run".into()).or_insert(0.0) += outcome.cases.iter().map(|c| c.seconds).sum::<f64>();
        if let Some(f) = judged.run_fail {
            run_fail = Some((Verdict::Fail, Some(f.0), f.1, None));
            break;
        }
        // One warning per kind and output, however many tests say it.
        for (key, w) in judged.warnings {
            match warn_groups.iter_mut().find(|g| g.0 == key) {
                Some(g) => g.2 += 1,
                None => warn_groups.push((key, w, 1)),
            }
        }
        if let Some(f) = judged.check_fail {
            check_fail.get_or_insert(f);
        }
        for c in judged.checks {
            checks.push(OutputCheck { sizes: label_sizes.clone(), ..c });
        }
        *phases.entry("metrics".into()).or_insert(0.0) += t_metrics.elapsed().as_secs_f64();
        if let Some(o) = judged.own {
            if !o.pass && check_fail.is_none() {
                let reason = if judged.shape_differs { Reason::ShapeMismatch } else { Reason::ProblemCheck };
                let mut why = format!("{who} fails at {label}: ");
                for n in &judged.notes {
                    why.push_str(&format!("{n}; "));
                }
                why.push_str(&shorten(&one_line(&o.message), 320));
                check_fail = Some((reason, why));
            }
            own.push(OwnCheck { sizes: label_sizes, verdict: o });
        }
    }
    let warnings: Vec<String> = warn_groups
        .into_iter()
        .map(|(_, w, n)| if n > 1 { format!("{w} (and at {} more)", n - 1) } else { w })
        .collect();
    runners.end_children();
    runners.reap();
    let launched = keep_launched(ws, tc, v, launched, &mut runners.background);
    let run_detail = StageDetail::Run(RunDetail {
        mode: if on_gpu { "cuda" } else { "torch-cpu" }.into(),
        sizes: runs.clone(),
        phases,
        launched,
    });
    if let Some((verdict, reason, summary, d)) = run_fail {
        return RunOutcome {
            run: StageOutcome { verdict, summary, diagnostics: d.into_iter().collect(), detail: run_detail, reason },
            check: None,
        };
    }
    let place = if on_gpu { "on the GPU" } else { "with torch on the CPU" };
    let benches = tests.iter().filter(|t| t.2).count();
    let what = if format == protocol::ProblemFormat::GpuMode {
        if benches > 0 {
            format!("{} task.yml test(s) and {benches} benchmark(s)", runs.len() - benches)
        } else {
            format!("{} task.yml test(s)", runs.len())
        }
    } else {
        "KernelBench input set(s)".to_string()
    };
    let run = StageOutcome {
        verdict: Verdict::Pass,
        summary: format!("{place}, {what}, two fresh input sets each: inputs unchanged, every output written"),
        diagnostics: vec![],
        detail: run_detail,
        reason: None,
    };
    let own_pass = own.iter().filter(|o| o.verdict.pass).count();
    let own_note = if own.is_empty() { String::new() } else { format!("; {who}: {own_pass} of {} pass", own.len()) };
    let warn_note = match warnings.len() {
        0 => String::new(),
        1 => format!("; warning: {}", warnings[0]),
        n => format!("; {n} warnings, the first: {}", warnings[0]),
    };
    let worst = checks.iter().map(|c| c.comparison.max_abs_err).fold(0f64, f64::max);
    let diagnostics =
        warnings.iter().map(|w| Diagnostic::warning(&v.path, Pos::WHOLE_FILE, w.clone())).collect::<Vec<_>>();
    let detail = StageDetail::Check(CheckDetail { seed, results: checks, user_rungs: vec![], own, warnings });
    let check = match check_fail {
        Some((reason, why)) => StageOutcome {
            verdict: Verdict::Fail,
            summary: format!("{why}{own_note}"),
            diagnostics,
            detail,
            reason: Some(reason),
        },
        None => StageOutcome {
            verdict: Verdict::Pass,
            summary: if warn_note.is_empty() {
                format!("matches the reference (max abs err {worst:.2e}, seed {seed}){own_note}")
            } else {
                format!("passes the problem's own rule (max abs err {worst:.2e}, seed {seed}){own_note}{warn_note}")
            },
            diagnostics,
            detail,
            reason: None,
        },
    };
    RunOutcome { run, check: Some(check) }
}

/// The first line of a message (GPU MODE's verdicts run to several lines).
fn one_line(s: &str) -> String {
    let lines: Vec<&str> = s.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    match lines.len() {
        0 => String::new(),
        1 => lines[0].to_string(),
        _ => format!("{} ({})", lines[0], lines[1..].join("; ")),
    }
}

/// The Triton kernels a Python version declares: its `@triton.jit` functions (decorators such
/// as `@triton.autotune` may stand above or below). Their launches are what the worker's launch
/// hook sees; a CUDA kernel of load_inline's is not seen there, and is not listed.
pub fn declared_kernels(source: &str) -> Vec<String> {
    let triton = regex::Regex::new(r"@triton\.jit\b[^\n]*\n(?:[ \t]*@[^\n]*\n)*[ \t]*def\s+([A-Za-z_]\w*)")
        .expect("static regex");
    let mut out: Vec<String> = Vec::new();
    for c in triton.captures_iter(source) {
        let n = c[1].to_string();
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// The CUDA kernels a Python version declares in its source (load_inline's strings, a
/// `cuda_sources` file read in): every `__global__` function's name. Their launches are seen by
/// torch's profiler, whose names are demangled signatures that contain these.
pub fn declared_cuda_kernels(source: &str) -> Vec<String> {
    let global = regex::Regex::new(
        r"__global__\s+(?:(?:static|inline|__forceinline__|__noinline__)\s+|__launch_bounds__\s*\([^)]*\)\s*)*void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\(",
    )
    .expect("static regex");
    let mut out: Vec<String> = Vec::new();
    for c in global.captures_iter(source) {
        let n = c[1].to_string();
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// What the compile phase says about a version before any case is judged: timing primitives it
/// replaced, or kernels it declares that never launched.
pub fn compile_phase_verdict(p: &protocol::ProblemOutcome, source: &str) -> Option<(Reason, String)> {
    if !p.harness.is_empty() {
        return Some((Reason::HarnessPatched, harness_patched(&p.harness, "")));
    }
    if !p.patched.is_empty() {
        return Some((
            Reason::TimerPatched,
            format!("the version replaced {}: timing it cannot be trusted", p.patched.join(", ")),
        ));
    }
    if let Some(gpu) = &p.launched_gpu {
        let declared = declared_cuda_kernels(source);
        if !declared.is_empty() && !declared.iter().any(|d| gpu.iter().any(|l| launched_as(l, d))) {
            let shown: Vec<&str> = gpu.iter().take(4).map(String::as_str).collect();
            return Some((
                Reason::NoCustomKernel,
                format!(
                    "the version declares the CUDA kernel(s) {} but none of them launched; the GPU kernels that did: {}{}",
                    declared.iter().map(|d| format!("`{d}`")).collect::<Vec<_>>().join(", "),
                    shown.join(", "),
                    if gpu.len() > 4 { ", …" } else { "" }
                ),
            ));
        }
    }
    let launched = p.launched.as_ref()?;
    let declared = declared_kernels(source);
    if declared.is_empty() {
        return None;
    }
    if declared.iter().any(|d| launched.iter().any(|l| l.contains(d.as_str()))) {
        return None;
    }
    let shown: Vec<&str> = launched.iter().take(4).map(String::as_str).collect();
    Some((
        Reason::NoCustomKernel,
        format!(
            "the version declares {} but none of them launched; {}",
            declared.iter().map(|d| format!("`{d}`")).collect::<Vec<_>>().join(", "),
            if shown.is_empty() {
                "no Triton kernel launched at all: the work was done some other way (a fallback?)".to_string()
            } else {
                format!(
                    "the Triton kernels that did: {}{}",
                    shown.join(", "),
                    if launched.len() > 4 { ", …" } else { "" }
                )
            }
        ),
    ))
}

/// Whether the profiler's kernel name `launched` (a demangled signature: `void
/// ns::add_kernel<float>(float const*, ...)`, or a bare `add_kernel`) is the kernel `declared`.
fn launched_as(launched: &str, declared: &str) -> bool {
    let head = launched.split('(').next().unwrap_or(launched);
    let head = head.split('<').next().unwrap_or(head);
    let name = head.rsplit([' ', ':']).next().unwrap_or(head);
    name == declared
}

/// The summary of a harness-patched verdict: what was replaced (the first few), and where.
fn harness_patched(names: &[String], at: &str) -> String {
    let shown: Vec<String> = names.iter().take(4).map(|n| format!("`{n}`")).collect();
    format!(
        "the version replaced or changed {}{}{at}, which rung's judge runs: its verdict cannot be trusted",
        shown.join(", "),
        if names.len() > 4 { format!(" and {} more", names.len() - 4) } else { String::new() }
    )
}

/// At most `max` characters, cut at a word and marked.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    let at = cut.rfind(' ').unwrap_or(cut.len());
    format!("{} …", &cut[..at])
}

/// What the cases of one test say, judged.
#[derive(Debug, Default)]
pub struct JudgedTest {
    /// rung's own defences: a changed input, unwritten outputs.
    pub run_fail: Option<(Reason, String)>,
    /// rung's verdict where the format has no rule of its own, or an output it cannot compare.
    pub check_fail: Option<(Reason, String)>,
    /// The format's own verdict: the first case that fails, else the first.
    pub own: Option<OwnVerdict>,
    pub shape_differs: bool,
    pub checks: Vec<OutputCheck>,
    pub unwritten: BTreeMap<String, usize>,
    /// (what it is about, the warning): one of a kind is kept per check, with a count.
    pub warnings: Vec<(String, String)>,
    pub notes: Vec<String>,
}

fn fmt_psnr(p: Option<f64>) -> String {
    p.map_or("∞ dB".to_string(), |p| format!("{p:.1} dB"))
}

/// Judges the cases of one test: rung's defences first (inputs, poison), then the format's rule
/// with rung's metrics beside it.
pub fn judge_cases(cases: &[protocol::ProblemCase], label: &str) -> JudgedTest {
    let mut j = JudgedTest::default();
    // An output slot is unwritten where the poison survives in every case that poisoned it.
    let mut unwritten: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for c in cases {
        for inp in &c.inputs {
            if inp.changed > 0 && j.run_fail.is_none() {
                j.run_fail = Some((
                    Reason::InputMutated,
                    format!(
                        "the version changed its input `{}` ({} element(s)) (at {label}); outputs are {}",
                        inp.name,
                        inp.changed,
                        if c.output_slots.is_empty() {
                            "what it returns".to_string()
                        } else {
                            c.output_slots.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
                        }
                    ),
                ));
            }
        }
        for (slot, n) in &c.unwritten {
            *seen.entry(slot.clone()).or_insert(0) += 1;
            let e = unwritten.entry(slot.clone()).or_insert(usize::MAX);
            *e = (*e).min(*n);
        }
    }
    // A replay: the previous case's right answer returned again for inputs whose answer differs
    // (an answer that is wrong both times, a constant, is a mismatch, not a memory).
    let right = |c: &protocol::ProblemCase| match &c.own {
        Some(o) => o.pass,
        None => c.outputs.iter().all(|t| {
            t.comparison.as_ref().is_some_and(|cmp| {
                let [atol, rtol] = t.tolerance.unwrap_or([0.0, 0.0]);
                metrics::judge(cmp, &crate::dtype::Tolerance { atol, rtol, min_psnr: None, min_cosine: None }).is_none()
            })
        }),
    };
    if let Some(c) = cases.iter().find(|c| !c.harness.is_empty()) {
        j.run_fail = Some((Reason::HarnessPatched, harness_patched(&c.harness, &format!(" (at {label})"))));
    } else if let Some(c) = cases.iter().find(|c| !c.patched.is_empty()) {
        j.run_fail = Some((
            Reason::TimerPatched,
            format!("the version replaced {} (at {label}): timing it cannot be trusted", c.patched.join(", ")),
        ));
    }
    if j.run_fail.is_none()
        && let Some(c) = cases.windows(2).find(|w| w[1].replayed && right(&w[0])).map(|w| &w[1])
    {
        j.run_fail = Some((
            Reason::Memoised,
            format!(
                "the version returned the same output bit for bit for fresh inputs (seed {}, at {label}), where the reference's changed: a remembered answer",
                c.seed
            ),
        ));
    }
    unwritten.retain(|_, n| *n > 0);
    if j.run_fail.is_none()
        && let Some((slot, n)) = unwritten.iter().next()
    {
        j.run_fail = Some((
            Reason::Unwritten,
            format!(
                "{n} element(s) of `{slot}` were never written (at {label}): they still hold rung's poison{}",
                match seen.get(slot).copied().unwrap_or(1) {
                    1 => String::new(),
                    k => format!(" in all {k} runs, each poisoned with a different pattern"),
                }
            ),
        ));
    }
    j.unwritten = unwritten;
    // The format's verdict: the first failing case's, else the first case's.
    let verdicts: Vec<&OwnVerdict> = cases.iter().filter_map(|c| c.own.as_ref()).collect();
    j.own = verdicts.iter().find(|o| !o.pass).or(verdicts.first()).map(|o| (*o).clone());
    let has_rule = j.own.is_some();
    for c in cases {
        for n in &c.notes {
            if !j.notes.contains(n) {
                j.notes.push(n.clone());
            }
        }
        if let Some(v) = &c.vacuous {
            let key = format!("vacuous: {v}");
            if !j.warnings.iter().any(|w| w.0 == key) {
                j.warnings.push((key, format!("the rule is vacuous here: {v} (at {label})")));
            }
        }
    }
    // The case to show: the first with a failing output, else the first.
    let mut shown: Option<Vec<OutputCheck>> = None;
    let mut shown_fails = false;
    for c in cases {
        let mut these = Vec::new();
        let mut failing = false;
        for t in &c.outputs {
            if t.output.shape != t.reference.shape {
                j.shape_differs = true;
            }
            let Some(cmp) = &t.comparison else {
                j.check_fail.get_or_insert((
                    Reason::ShapeMismatch,
                    format!(
                        "`{}` at {label} is {} {:?}; the reference's is {} {:?}",
                        t.name, t.output.dtype, t.output.shape, t.reference.dtype, t.reference.shape
                    ),
                ));
                failing = true;
                continue;
            };
            let [atol, rtol] = t.tolerance.unwrap_or([0.0, 0.0]);
            let tol = crate::dtype::Tolerance { atol, rtol, min_psnr: None, min_cosine: None };
            let reason = metrics::judge(cmp, &tol);
            if let Some(why) = &reason {
                failing = true;
                if has_rule {
                    let passes = cases.iter().all(|c| c.own.as_ref().is_none_or(|o| o.pass));
                    if passes {
                        let w = format!(
                            "the format's rule passes `{}` at {label}, rung's {} tolerance (atol {atol:.0e}, rtol {rtol:.0e}) does not: {} of {} elements beyond it; max rel err {:.3e}, PSNR {}, cosine {:.6}",
                            t.name,
                            t.output.dtype,
                            cmp.mismatches,
                            cmp.elements,
                            cmp.max_rel_err,
                            fmt_psnr(cmp.psnr),
                            cmp.cosine
                        );
                        let key = format!("rule: {}", t.name);
                        if !j.warnings.iter().any(|x| x.0 == key) {
                            j.warnings.push((key, w));
                        }
                    }
                } else {
                    let code = if cmp.nan_count + cmp.inf_count > 0 && cmp.mismatches > 0 {
                        Reason::NonFinite
                    } else {
                        Reason::Mismatch
                    };
                    j.check_fail.get_or_insert((code, format!("`{}` at {label}: {why}", t.name)));
                }
            }
            these.push(OutputCheck {
                sizes: SizeSet::new(),
                output: t.name.clone(),
                pass: reason.is_none(),
                reason,
                comparison: cmp.clone(),
            });
        }
        // The first failing case is the one shown, else the first case.
        if shown.is_none() || (failing && !shown_fails) {
            shown = Some(these);
            shown_fails = failing;
        }
    }
    j.checks = shown.unwrap_or_default();
    j
}

#[cfg(test)]
mod problem_tests {
    use super::*;
    use crate::model::protocol::{InputCheck, ProblemCase, ProblemOutcome, ProblemTensor, RuleFigures, TensorMeta};

    fn meta(dtype: &str, shape: &[i64]) -> TensorMeta {
        TensorMeta { dtype: dtype.into(), shape: shape.to_vec() }
    }

    /// A case whose one output is compared at f32's tolerance: `err` at one element of four.
    fn case(seed: u64, err: f64, own: Option<bool>) -> ProblemCase {
        let o = [1.0, 2.0 + err, 3.0, 4.0];
        let r = [1.0, 2.0, 3.0, 4.0];
        let tol = crate::dtype::Tolerance { atol: 1e-5, rtol: 1e-4, min_psnr: None, min_cosine: None };
        ProblemCase {
            seed,
            seconds: 0.001,
            outputs: vec![ProblemTensor {
                name: "output".into(),
                output: meta("f32", &[4]),
                reference: meta("f32", &[4]),
                comparison: Some(metrics::compare(&o, &r, &[4], &tol)),
                tolerance: Some([1e-5, 1e-4]),
                rule: None,
            }],
            inputs: vec![InputCheck { name: "data[0]".into(), changed: 0 }],
            output_slots: vec!["data[2]".into()],
            unwritten: BTreeMap::new(),
            own: own.map(|pass| OwnVerdict { pass, message: if pass { String::new() } else { "mismatch".into() } }),
            vacuous: None,
            notes: vec![],
            replayed: false,
            patched: vec![],
            harness: vec![],
        }
    }

    #[test]
    fn a_changed_input_fails_before_anything_else() {
        let mut c = case(1, 0.5, Some(false));
        c.inputs[0].changed = 12;
        let j = judge_cases(&[c], "size=8");
        let (reason, why) = j.run_fail.unwrap();
        assert_eq!(reason, Reason::InputMutated);
        assert!(why.contains("`data[0]` (12 element(s))") && why.contains("`data[2]`"), "{why}");
    }

    #[test]
    fn unwritten_counts_what_stayed_poisoned_in_every_run() {
        let mut a = case(1, 0.0, Some(true));
        let mut b = case(2, 0.0, Some(true));
        a.unwritten.insert("data[2]".into(), 5);
        b.unwritten.insert("data[2]".into(), 3);
        let j = judge_cases(&[a.clone(), b], "size=8");
        assert_eq!(j.run_fail.as_ref().unwrap().0, Reason::Unwritten);
        assert_eq!(j.unwritten["data[2]"], 3);
        // An element written in one of the runs is not unwritten: poison that matched by chance.
        let mut c = case(3, 0.0, Some(true));
        c.unwritten.insert("data[2]".into(), 0);
        let j = judge_cases(&[a, c], "size=8");
        assert!(j.run_fail.is_none(), "{:?}", j.run_fail);
    }

    #[test]
    fn a_replay_is_memoised_only_after_a_right_answer() {
        let first = case(1, 0.0, Some(true));
        let mut second = case(2, 0.5, Some(false));
        second.replayed = true;
        let j = judge_cases(&[first, second.clone()], "size=8");
        assert_eq!(j.run_fail.unwrap().0, Reason::Memoised);
        // Wrong both times (a constant): the rule's failure, not a memory.
        let j = judge_cases(&[case(1, 0.5, Some(false)), second], "size=8");
        assert!(j.run_fail.is_none());
        assert!(!j.own.unwrap().pass);
    }

    #[test]
    fn patched_timers_fail_the_run() {
        let mut c = case(1, 0.0, Some(true));
        c.patched = vec!["time.perf_counter".into()];
        let (reason, why) = judge_cases(&[c], "size=8").run_fail.unwrap();
        assert_eq!(reason, Reason::TimerPatched);
        assert!(why.contains("time.perf_counter"));
    }

    #[test]
    fn cuda_kernels_declared_in_load_inline_strings_and_never_launched_are_named() {
        let src = r#"
from torch.utils.cpp_extension import load_inline
cuda_src = """
template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* c, int n) { }
extern "C" __global__ __launch_bounds__(256) void scale(float* x) { }
__global__ void __launch_bounds__(128, 2) tail_kernel(float* x) { }
__device__ void helper(float* x) { }
"""
"#;
        assert_eq!(declared_cuda_kernels(src), ["add_kernel", "scale", "tail_kernel"]);
        assert!(declared_cuda_kernels("import torch\n").is_empty());
        assert!(launched_as("void add_kernel<float>(float const*, float const*, float*, int)", "add_kernel"));
        assert!(launched_as("void ns::add_kernel(float*)", "add_kernel"));
        assert!(launched_as("scale", "scale"));
        assert!(!launched_as("void my_add_kernel_v2(float*)", "add_kernel"));
        let outcome = |gpu: Option<Vec<&str>>| ProblemOutcome {
            args: BTreeMap::new(),
            cases: vec![],
            launched: None,
            launched_gpu: gpu.map(|l| l.into_iter().map(String::from).collect()),
            patched: vec![],
            harness: vec![],
        };
        let fallback =
            vec!["void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"];
        let (reason, why) = compile_phase_verdict(&outcome(Some(fallback)), src).unwrap();
        assert_eq!(reason, Reason::NoCustomKernel);
        assert!(why.contains("`add_kernel`") && why.contains("vectorized_elementwise_kernel"), "{why}");
        assert!(compile_phase_verdict(&outcome(Some(vec!["void scale(float*)"])), src).is_none());
        // Nothing listed (no GPU, or a profiler that recorded nothing): no verdict either way.
        assert!(compile_phase_verdict(&outcome(None), src).is_none());
    }

    #[test]
    fn a_patched_judge_fails_the_run_before_a_patched_timer() {
        let mut c = case(1, 0.0, Some(true));
        c.patched = vec!["time.perf_counter".into()];
        c.harness = (0..6).map(|k| format!("reference.f{k}")).collect();
        let (reason, why) = judge_cases(&[c], "size=8").run_fail.unwrap();
        assert_eq!(reason, Reason::HarnessPatched);
        assert!(why.contains("`reference.f0`") && why.contains("and 2 more") && why.contains("(at size=8)"), "{why}");
        let p = ProblemOutcome {
            args: BTreeMap::new(),
            cases: vec![],
            launched: None,
            launched_gpu: None,
            patched: vec![],
            harness: vec!["torch.allclose".into()],
        };
        assert_eq!(compile_phase_verdict(&p, "").unwrap().0, Reason::HarnessPatched);
    }

    #[test]
    fn the_format_rule_decides_and_rung_warns_where_it_disagrees() {
        // The rule passes an error rung's f32 tolerance does not: a pass, with the figures.
        let j = judge_cases(&[case(1, 0.01, Some(true)), case(2, 0.01, Some(true))], "size=8");
        assert!(j.run_fail.is_none() && j.check_fail.is_none());
        assert!(j.own.as_ref().unwrap().pass);
        assert_eq!(j.warnings.len(), 1, "one warning per output, however many cases: {:?}", j.warnings);
        let w = &j.warnings[0].1;
        assert!(w.contains("rung's f32 tolerance") && w.contains("max rel err") && w.contains("PSNR"), "{w}");
        // The rule fails what rung's tolerance passes: the rule's verdict stands.
        let j = judge_cases(&[case(1, 0.0, Some(false))], "size=8");
        assert!(!j.own.unwrap().pass);
        assert!(j.warnings.is_empty());
        // No rule of the format's own: rung's tolerance decides.
        let j = judge_cases(&[case(1, 0.5, None)], "size=8");
        assert_eq!(j.check_fail.unwrap().0, Reason::Mismatch);
    }

    #[test]
    fn a_vacuous_rule_is_a_warning_and_counts_need_matching_elements() {
        let mut c = case(1, 0.0, Some(true));
        c.vacuous = Some("an all-zero output passes KernelBench's rule too".into());
        c.outputs[0].rule = Some(RuleFigures { mismatches: 0, zero_pass: 4, constant_pass: 0, constant: 2.5 });
        let j = judge_cases(&[c], "the test");
        assert!(j.warnings[0].1.starts_with("the rule is vacuous here: an all-zero output"), "{:?}", j.warnings);
        // Different element counts cannot be compared: a shape mismatch, named.
        let mut c = case(1, 0.0, None);
        c.outputs[0].comparison = None;
        c.outputs[0].output = meta("f32", &[5]);
        let (reason, why) = judge_cases(&[c], "size=8").check_fail.unwrap();
        assert_eq!(reason, Reason::ShapeMismatch);
        assert!(why.contains("[5]") && why.contains("[4]"), "{why}");
        // A reshaped output of as many elements is compared, and the shape is noted.
        let mut c = case(1, 0.0, Some(false));
        c.outputs[0].output = meta("f32", &[1, 4]);
        assert!(judge_cases(&[c], "size=8").shape_differs);
    }

    #[test]
    fn triton_kernels_declared_and_never_launched_are_named() {
        let src = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/gpu-mode/outslot/versions/v010-wrong-no-custom-kernel.py"
        ))
        .unwrap();
        assert_eq!(declared_kernels(&src), vec!["add_kernel".to_string()]);
        let autotuned = "@triton.autotune(configs=[], key=['n'])\n@triton.jit\n@some.other\ndef k1(x):\n    pass\n\n@triton.jit(do_not_specialize=['n'])\ndef k2(x, n):\n    pass\n";
        assert_eq!(declared_kernels(autotuned), vec!["k1".to_string(), "k2".to_string()]);
        assert!(declared_kernels("import torch\n# @triton.jit is not used here\n").is_empty());
        let outcome = |launched: Option<Vec<&str>>| ProblemOutcome {
            args: BTreeMap::new(),
            cases: vec![],
            launched: launched.map(|l| l.into_iter().map(String::from).collect()),
            launched_gpu: None,
            patched: vec![],
            harness: vec![],
        };
        let (reason, why) = compile_phase_verdict(&outcome(Some(vec![])), &src).unwrap();
        assert_eq!(reason, Reason::NoCustomKernel);
        assert!(why.contains("`add_kernel`"), "{why}");
        assert!(compile_phase_verdict(&outcome(Some(vec!["add_kernel"])), &src).is_none());
        // Not listed (no GPU): no verdict either way.
        assert!(compile_phase_verdict(&outcome(None), &src).is_none());
        let mut patched = outcome(None);
        patched.patched = vec!["torch.cuda.Event.elapsed_time".into()];
        assert_eq!(compile_phase_verdict(&patched, "").unwrap().0, Reason::TimerPatched);
    }

    #[test]
    fn problem_seeds_are_distinct_reproducible_and_in_the_files_range() {
        let tests = vec![(BTreeMap::from([("seed".to_string(), serde_json::json!(4242))]), 2, false)];
        assert_eq!(problem_seed_range(&tests), 65_536, "at least 2^16");
        let big = vec![(BTreeMap::from([("seed".to_string(), serde_json::json!(93_246))]), 2, false)];
        assert_eq!(problem_seed_range(&big), 932_460);
        let draw = |seed| {
            let mut d = SeedDraw::new(seed, 65_536);
            (0..200).map(|_| d.draw()).collect::<Vec<_>>()
        };
        let a = draw(7);
        assert_eq!(a, draw(7), "the check's seed reproduces its inputs");
        assert_ne!(a, draw(8));
        assert!(a.iter().all(|s| (1..65_536).contains(s)));
        let unique: std::collections::BTreeSet<_> = a.iter().collect();
        assert_eq!(unique.len(), a.len());
    }
}

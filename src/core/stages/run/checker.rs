//! The checker of a rung.toml problem: draws the input sets, runs the version twice (decoy, then
//! real) in the native or Python worker, and judges unwritten elements, changed inputs, guard
//! zones, remembered results and the outputs against the reference.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::diag::{Diagnostic, Pos};
use crate::inputs::{self, POISON};
use crate::metrics::{self};
use crate::model::protocol::{self, CallMode, CapturedKernel, Response, TensorFile, WorkerError};
use crate::model::report::{Reason, StageDetail, Verdict};
pub use crate::model::run::{CheckDetail, OutputCheck, RunDetail, SizeRun, UserRung};
use crate::runners::{Failure, Runners};
use crate::spec::{SizeSet, Spec};
use crate::stages::{StageOutcome, call_args, reason_for};
use crate::store::sha256_hex;
use crate::toolchain::Toolchain;
use crate::workspace::{VersionFile, VersionKind, Workspace};

use super::*;

pub(super) struct Checker<'a> {
    pub(super) ws: &'a Workspace,
    pub(super) spec: &'a Spec,
    pub(super) toolchain: &'a Toolchain,
    pub(super) runners: &'a mut Runners,
    /// For CUDA versions: what to launch in the native worker.
    pub(super) native: Option<NativePlan>,
    /// A CUDA reference: launched in the native worker too.
    pub(super) ref_plan: Option<NativePlan>,
    /// Whether the version runs in a Python child forked for it (a Python version; a CUDA
    /// version runs in the native worker, the reference and checks.py in their own process).
    pub(super) forks_child: bool,
    /// How the Python child runs the version (`Reference` for a CUDA version: no child runs it).
    pub(super) mode: CallMode,
    pub(super) seed: u64,
    pub(super) phases: BTreeMap<String, f64>,
    pub(super) launched: Vec<CapturedKernel>,
    /// The GPU's compute capability: Triton's prewarm compiles for it without opening the GPU.
    pub(super) gpu_arch: Option<u32>,
}

/// A failed request as the run stage's verdict.
pub(super) struct RunFailure {
    pub(super) verdict: Verdict,
    pub(super) reason: Option<Reason>,
    pub(super) message: String,
    pub(super) diagnostic: Option<Box<Diagnostic>>,
}

/// Why the Python worker gave the check no child to run in.
#[derive(Debug, thiserror::Error)]
pub(super) enum ForkError {
    #[error("{0}")]
    Zygote(crate::runners::Failure),
    #[error("the Python worker could not fork: {0}")]
    Fork(crate::runners::Failure),
    #[error("the Python worker's child could not start: {kind}: {message}")]
    Child { kind: String, message: String },
}

impl<'a> Checker<'a> {
    pub(super) fn add_phase(&mut self, name: &str, seconds: f64) {
        *self.phases.entry(name.to_string()).or_insert(0.0) += seconds;
    }

    /// Forks the Python child for this check, after compiling in parallel when `prewarm` has
    /// calls.
    /// Returns whether a prewarm call ran past the limit (run() does not return).
    pub(super) fn fork(&mut self, prewarm: Vec<protocol::Call>) -> Result<bool, ForkError> {
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
        let z = self.runners.zygote(interpret).map_err(ForkError::Zygote)?;
        if !warm {
            let started = crate::runners::start_phases(z.hello());
            self.add_phase("zygote_start", t0.elapsed().as_secs_f64());
            for (k, s) in started {
                self.add_phase(&k, s);
            }
        }
        let mode = self.mode;
        let z = self.runners.zygote(interpret).map_err(ForkError::Zygote)?;
        let resp = z
            .fork_with(protocol::Fork { mode, prewarm, prewarm_seconds, prewarm_arch, token: None }, limit)
            .map_err(ForkError::Fork)?;
        if !resp.ok {
            let e = resp.error.unwrap_or_else(|| WorkerError::new("WorkerDied", "the child did not start"));
            return Err(ForkError::Child { kind: e.kind, message: e.message });
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
    pub(super) fn native_reference(
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
            if let Err(e) = crate::kept::write_fresh(&r.path, &vec![0xffu8; len]) {
                return Some(format!("{}: {e}", r.path.display()));
            }
            rfiles.insert(t.name.clone(), (r.path.clone(), r.shape.clone()));
        }
        let launch = match plan.launch_at(self.spec, sizes, &rfiles) {
            Ok(l) => l,
            Err(m) => return Some(format!("the reference cannot be launched: {m}")),
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

    pub(super) fn python(&mut self, op: protocol::Op) -> Result<Response, Failure> {
        let limit = self.spec.limits.run;
        let interpret = self.mode == CallMode::Interpret;
        self.runners.zygote(interpret)?.call(op, limit)
    }

    /// One request to the problem's own process (the reference, checks.py): never the one the
    /// version ran in ([`crate::runners::Runners::reference`]).
    pub(super) fn problem_code(&mut self, op: protocol::Op) -> Result<Response, Failure> {
        let limit = self.spec.limits.run;
        self.runners.reference(limit + Duration::from_secs(30))?.call(op, limit)
    }

    /// One run of the version at `sizes`: the kernel through the native worker, or run() in the
    /// Python child.
    pub(super) fn call_run(
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
                message: m.to_string(),
                diagnostic: None,
            })?;
            let call = protocol::Call {
                file: v.path.clone(),
                function: "run".into(),
                mode: self.mode,
                args,
                returns: BTreeMap::new(),
                guard_bytes: protocol::GUARD_BYTES,
                trace: None,
            };
            return self.python(protocol::Op::Call(call)).map_err(as_failure);
        };
        let launch = plan.launch_at(self.spec, sizes, files).map_err(|e| RunFailure {
            verdict: Verdict::Fail,
            reason: e.reason(),
            message: e.to_string(),
            diagnostic: None,
        })?;
        self.runners.launch(launch, limit).map_err(as_failure)
    }

    /// For a Triton version on the GPU whose source rung has not compiled yet: one call of
    /// run() per test size, on its own copy of the inputs, for the zygote to run in parallel.
    pub(super) fn prewarm_calls(
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
                if crate::kept::write_fresh(&path, &bytes).is_err() {
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
                trace: None,
            });
        }
        calls
    }

    pub(super) fn run_version(&mut self, v: &VersionFile, source: &str, reference: &Path) -> RunOutcome {
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
        // Every test size's inputs, both passes, drawn while the child starts (and Triton compiles);
        // or kept from the last version this check ran, when it drew the same sets (same seed,
        // inputs and sizes: the versions of one `rung check`).
        let spec = self.spec;
        let seed = self.seed;
        let draw_key = format!("{seed}\n{:?}\n{:?}", spec.inputs, spec.test_sizes);
        let kept = self.runners.drawn_inputs.take().filter(|(k, _)| *k == draw_key).map(|(_, m)| m);
        let (forked, drawn) = std::thread::scope(|scope| {
            let drawing = scope.spawn(move || {
                if let Some(m) = kept {
                    return (m, 0.0);
                }
                let t = Instant::now();
                let mut drawn = BTreeMap::new();
                for (si, sizes) in spec.test_sizes.iter().enumerate() {
                    for pass in 0..POISON.len() {
                        let seed = if pass == 0 { seed.wrapping_add(DECOY) } else { seed };
                        for (idx, t) in spec.inputs.iter().enumerate() {
                            let numel: i64 = spec.shape_at(t, sizes).unwrap_or_default().iter().product();
                            let bytes = inputs::generate(t.dtype, &t.init, seed, idx as u64, numel as usize);
                            drawn.insert((si, pass, idx), std::sync::Arc::new(bytes));
                        }
                    }
                }
                (drawn, t.elapsed().as_secs_f64())
            });
            let forked = if self.forks_child { self.fork(prewarm) } else { Ok(false) };
            (forked, drawing.join().unwrap_or_default())
        });
        // Kept for the next version unless large (test sizes are usually small).
        let drawn_bytes: usize = drawn.0.values().map(|b| b.len()).sum();
        if drawn_bytes <= crate::runners::KEEP_DRAWN_BYTES {
            self.runners.drawn_inputs = Some((draw_key, drawn.0.clone()));
        }
        self.add_phase("inputs_drawn", drawn.1);
        match forked {
            Err(e) => return failed(Verdict::Error, None, e.to_string()),
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
                    sandbox: Some(crate::sandbox::describe()),
                });
                return out;
            }
            Ok(false) => {}
        }
        let ref_source = std::fs::read_to_string(self.ws.root.join(reference)).unwrap_or_default();
        let problem = self.ws.problem_hash();
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
            // A cached reference changed after this moment was changed while the version ran.
            let size_started = std::time::SystemTime::now();
            let label = crate::spec::size_label(sizes);
            let size_dir = scratch.join(format!("s{si}"));
            let _ = std::fs::create_dir_all(&size_dir);
            let mut files: BTreeMap<String, (PathBuf, Vec<i64>)> = BTreeMap::new();
            let mut out_bytes: BTreeMap<String, [Vec<u8>; 2]> = BTreeMap::new();
            // Each pass's inputs as drawn: the files must hold the same bytes after the run.
            let mut input_bytes: [BTreeMap<String, std::sync::Arc<Vec<u8>>>; 2] = Default::default();
            let mut seconds = 0.0;
            let mut pending = None;
            for (pass, poison) in POISON.into_iter().enumerate() {
                // The first run sees a decoy input set; the second, the real one.
                let t_inputs = Instant::now();
                let seed = if pass == 0 { self.seed.wrapping_add(DECOY) } else { self.seed };
                for (idx, t) in self.spec.inputs.iter().enumerate() {
                    let shape = self.spec.shape_at(t, sizes).unwrap_or_default();
                    let numel: i64 = shape.iter().product();
                    let bytes = drawn.0.get(&(si, pass, idx)).cloned().unwrap_or_else(|| {
                        std::sync::Arc::new(inputs::generate(t.dtype, &t.init, seed, idx as u64, numel as usize))
                    });
                    let path = size_dir.join(format!("{}.bin", t.name));
                    if let Err(e) = crate::kept::write_fresh(&path, &bytes) {
                        return failed(Verdict::Error, None, format!("{}: {e}", path.display()));
                    }
                    input_bytes[pass].insert(t.name.clone(), bytes);
                    files.insert(t.name.clone(), (path, shape));
                }
                for t in &self.spec.outputs {
                    let shape = self.spec.shape_at(t, sizes).unwrap_or_default();
                    let len = shape.iter().product::<i64>() as usize * t.dtype.size_bytes();
                    let path = size_dir.join(format!("{}.bin", t.name));
                    let _ = crate::kept::write_fresh(&path, &vec![poison; len]);
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
                let t_back = Instant::now();
                for t in &self.spec.outputs {
                    let bytes = std::fs::read(&files[&t.name].0).unwrap_or_default();
                    out_bytes.entry(t.name.clone()).or_insert_with(|| [Vec::new(), Vec::new()])[pass] = bytes;
                }
                for t in &self.spec.inputs {
                    let after = std::fs::read(&files[&t.name].0);
                    if !after.is_ok_and(|b| b == *input_bytes[pass][&t.name].as_slice()) {
                        run_fail = Some(fail(
                            Reason::InputMutated,
                            format!("the kernel changed its input `{}` (at {label})", t.name),
                        ));
                        break 'sizes;
                    }
                }
                self.add_phase("read_back", t_back.elapsed().as_secs_f64());
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
            // The reference, cached by (the problem's files, seed, size).
            let t_ref = Instant::now();
            let cache = reference_cache(self.ws, &problem, self.seed, sizes);
            // Trusted only as rung left it: written before its folder was renamed into place and
            // before this size's run began. The folder is writable from the version's process, and
            // a version that wrote its own answer into the cache must not be judged against it.
            let cached = self.spec.outputs.iter().all(|t| untouched(&cache, &format!("{}.bin", t.name), size_started));
            if !cached && cache.exists() {
                let _ = std::fs::remove_dir_all(&cache);
            }
            // Written by the reference into this run's scratch (the only place a sandboxed
            // process may write; `.rung/cache` is not one), copied by rung into a folder of this
            // check's own, then renamed into place whole: another check reading the same cache
            // meanwhile never sees half a reference.
            let fresh = cache.with_extension(format!("tmp-{}", crate::store::unique()));
            let written = scratch.join(format!("reference-s{si}"));
            let into = if cached { &cache } else { &written };
            let _ = std::fs::create_dir_all(into);
            let mut returns = BTreeMap::new();
            for t in &self.spec.outputs {
                let shape = self.spec.shape_at(t, sizes).unwrap_or_default();
                returns.insert(
                    t.name.clone(),
                    TensorFile { path: into.join(format!("{}.bin", t.name)), dtype: t.dtype, shape },
                );
            }
            if !cached && self.ref_plan.is_some() {
                // The CUDA reference, launched on the real input set (checked unchanged above).
                if let Some(why) = self.native_reference(sizes, &files, &returns) {
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
                let call = protocol::Call::reference(reference.to_path_buf(), args, returns);
                let why = match self.problem_code(protocol::Op::Call(call)) {
                    Ok(resp) if resp.ok => None,
                    Ok(resp) => {
                        let e = resp.error.unwrap_or_else(|| WorkerError::new("error", ""));
                        Some(format!("the reference failed: {}: {}", e.kind, e.message))
                    }
                    Err(e) => Some(format!("the reference failed: {e}")),
                };
                if let Some(why) = why {
                    check_fail = Some((Verdict::Error, Reason::ReferenceFailed, why));
                    break;
                }
            }
            if !cached {
                let copied = std::fs::create_dir_all(&fresh).and_then(|()| {
                    self.spec.outputs.iter().try_for_each(|t| {
                        let name = format!("{}.bin", t.name);
                        crate::kept::copy_fresh(&written.join(&name), &fresh.join(&name))
                    })
                });
                if let Err(e) = copied {
                    let _ = std::fs::remove_dir_all(&fresh);
                    check_fail = Some((
                        Verdict::Error,
                        Reason::ReferenceFailed,
                        format!("cannot keep the reference's outputs in {}: {e}", cache.display()),
                    ));
                    break;
                }
                if std::fs::rename(&fresh, &cache).is_err() {
                    // Another check put the same reference there first: theirs is as good.
                    let _ = std::fs::remove_dir_all(&fresh);
                }
            }
            self.add_phase("reference", t_ref.elapsed().as_secs_f64());
            let t_metrics = Instant::now();
            let inputs_differ = input_bytes[0] != input_bytes[1];
            for t in &self.spec.outputs {
                let shape: Vec<usize> = files[&t.name].1.iter().map(|d| *d as usize).collect();
                let reference = std::fs::read(cache.join(format!("{}.bin", t.name))).unwrap_or_default();
                let output = &out_bytes[&t.name][1];
                if reference.len() != output.len() {
                    check_fail = Some((
                        Verdict::Error,
                        Reason::ReferenceFailed,
                        format!("the cached reference for `{}` has the wrong size; delete .rung/cache", t.name),
                    ));
                    continue;
                }
                let comparison = metrics::compare_bytes(t.dtype, output, &reference, &shape, &t.tolerance);
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
                match self.problem_code(protocol::Op::Checks(req)) {
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
        let t_cleanup = Instant::now();
        let _ = std::fs::remove_dir_all(&scratch);
        let _ = std::fs::remove_dir_all(self.runners.env.data.join(format!("{}-prewarm", v.id)));
        self.add_phase("cleanup", t_cleanup.elapsed().as_secs_f64());
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
            sandbox: Some(crate::sandbox::describe()),
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
    pub(super) fn keep_launched(&mut self, v: &VersionFile) -> Vec<CapturedKernel> {
        let t0 = Instant::now();
        let tool = crate::stages::build::sass::Disassembler::of(self.toolchain);
        let kept = keep_launched(self.ws, tool, v, std::mem::take(&mut self.launched));
        if !kept.is_empty() {
            self.add_phase("dumps", t0.elapsed().as_secs_f64());
        }
        kept
    }
}

/// Whether `dir/file` is as the reference cache wrote it: the file changed no later than the
/// folder was renamed into place (rung writes the files first, then renames the folder), and
/// before `since`.
fn untouched(dir: &std::path::Path, file: &str, since: std::time::SystemTime) -> bool {
    use std::os::unix::fs::MetadataExt;
    let changed = |m: &std::fs::Metadata| (m.ctime(), m.ctime_nsec());
    let (Ok(f), Ok(d)) = (std::fs::metadata(dir.join(file)), std::fs::metadata(dir)) else { return false };
    let since = since.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let since = (since.as_secs() as i64, since.subsec_nanos() as i64);
    f.is_file() && changed(&f) <= changed(&d) && changed(&f) < since
}

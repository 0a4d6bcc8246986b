//! The trace rung's one call: a `.cu` version's traced variant (its markers from
//! `rung_trace.cuh` compiled in with `-DRUNG_TRACE`) launched once by the native worker, or a
//! Triton, CuTe DSL or TileLang version's `run()` called once in a Python child whose markers
//! (`rung_trace.py`, `rung_trace_cute.py`, `rung_trace_tilelang.py`) were given the buffer
//! before the version was imported; at the first benchmark size, on the
//! bench's own inputs, with a record buffer rung owns (one part per SM). The records are decoded
//! into sections ([`crate::trace`]) and a Chrome trace-event file in the version's dumps folder.
//! Not recorded in the history yet: `rung trace` prints and writes its files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::check;
use crate::check::Machine;
use crate::model::protocol::{self, CallMode, Op, TensorFile, TraceRequest};
use crate::model::trace::{Leader, TraceRecord};
use crate::stages::{bench, run};
use crate::toolchain::Toolchain;
use crate::trace::{self, Traced};
use crate::workspace::{VersionFile, VersionKind, Workspace};

/// Records a traced launch may write by default (32 MB of buffer).
pub const DEFAULT_CAPACITY: u64 = 1 << 20;
/// With no capacity given, the most records (32 bytes each: 2 GiB) a second launch makes room
/// for when the first overflowed.
pub const MAX_AUTO_CAPACITY: u64 = 1 << 26;

/// Why a version was not traced.
#[derive(Debug, thiserror::Error)]
pub enum TraceRunError {
    #[error("tracing GPU MODE and KernelBench problems is not built yet")]
    NotRungFormat,
    #[error(
        "{0} versions are not traced yet: `.cu` versions with rung_trace.cuh's markers, `.ptx` versions with `// rung_trace begin NAME` lines, Triton, CuTe DSL and TileLang versions with rung_trace.py's, rung_trace_cute.py's and rung_trace_tilelang.py's are"
    )]
    Kind(VersionKind),
    #[error(
        "{path} has no rt.section(\"name\"): `import {module} as rt`, name each section at module level (LOAD = rt.section(\"load\")) and mark it in the kernel with rt.begin(LOAD) and rt.end(LOAD)"
    )]
    NoPythonMarkers { path: String, module: &'static str },
    #[error(
        "{0} versions are traced by lane 0 of every warp: one leader per block is for `.cu` versions (rung_trace.cuh)"
    )]
    PythonPerBlock(&'static str),
    #[error("no nvcc here: `rung setup` installs it")]
    NoNvcc,
    #[error("no ptxas here: `rung setup` installs it")]
    NoPtxas,
    #[error("rung.toml has no sizes")]
    NoSizes,
    #[error("{}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Build(#[from] trace::TraceError),
    #[error("no GPU here")]
    NoGpu,
    #[error("cannot start the workers: {0}")]
    Workers(std::io::Error),
    #[error("{0}")]
    Plan(String),
    #[error("the traced launch failed: {0}")]
    Call(String),
}

/// How a traced call is made: the traced cubin launched by the native worker, or a Python DSL
/// version's `run()` with these arguments in a Python child.
enum How {
    Cuda(Box<run::NativePlan>, PathBuf),
    Python(std::collections::BTreeMap<String, protocol::Arg>),
}

/// A Python version's markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PythonTracer {
    /// The DSL, as people write it.
    pub dsl: &'static str,
    /// The markers' module, which the version imports.
    pub module: &'static str,
    /// What the result names as the mechanism.
    pub mechanism: &'static str,
}

/// The markers of a Python version's kind; None for a kind traced otherwise (or not at all).
pub fn python_tracer(kind: VersionKind) -> Option<PythonTracer> {
    match kind {
        VersionKind::Triton => {
            Some(PythonTracer { dsl: "Triton", module: "rung_trace", mechanism: trace::TRITON_MECHANISM })
        }
        VersionKind::CuteDsl => {
            Some(PythonTracer { dsl: "CuTe DSL", module: "rung_trace_cute", mechanism: trace::CUTE_MECHANISM })
        }
        VersionKind::TileLang => {
            Some(PythonTracer { dsl: "TileLang", module: "rung_trace_tilelang", mechanism: trace::TILELANG_MECHANISM })
        }
        _ => None,
    }
}

/// The traced variant of a version, built here (no GPU needed), and the target it was built for.
pub fn build(
    ws: &Workspace,
    v: &VersionFile,
    tc: &Toolchain,
    gpu_arch: Option<&str>,
    scratch: &Path,
    leader: Leader,
) -> Result<(Traced, String), TraceRunError> {
    let spec = ws.spec.as_ref().ok_or(TraceRunError::NotRungFormat)?;
    if !matches!(v.kind, VersionKind::Cuda | VersionKind::Ptx) {
        return Err(TraceRunError::Kind(v.kind));
    }
    let source = ws.read_source(v).map_err(|source| TraceRunError::Read { path: v.path.clone(), source })?;
    let (arch, _) = crate::stages::build::choose_arch(gpu_arch, spec.build.arch.as_deref(), &source);
    if v.kind == VersionKind::Ptx {
        let ptxas = tc.ptxas.as_ref().ok_or(TraceRunError::NoPtxas)?;
        let traced = trace::build_traced_ptx(&ptxas.path, &ws.root.join(&v.path), &arch, scratch, leader).map_err(
            |e| match e {
                trace::TraceError::NoPtxMarkers(_) => trace::TraceError::NoPtxMarkers(v.path.display().to_string()),
                e => e,
            },
        )?;
        return Ok((traced, arch));
    }
    let nvcc = tc.nvcc.as_ref().ok_or(TraceRunError::NoNvcc)?;
    let traced =
        trace::build_traced(&nvcc.path, &ws.root.join(&v.path), &arch, &spec.build.flags, scratch, &ws.root, leader)
            .map_err(|e| match e {
                // Named as the user knows the file.
                trace::TraceError::NoMarkers(_) => trace::TraceError::NoMarkers(v.path.display().to_string()),
                e => e,
            })?;
    Ok((traced, arch))
}

/// Where a version's latest trace record is kept.
pub fn record_path(ws: &Workspace, id: &str) -> PathBuf {
    record_path_in(&ws.state_dir(), id)
}

/// [`record_path`] given the workspace's `.rung/`.
pub fn record_path_in(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join(crate::store::DUMPS_DIR).join(id).join(format!("{id}.trace.record.json"))
}

/// The version's latest trace record, if `rung trace` made one.
pub fn latest(ws: &Workspace, id: &str) -> Option<TraceRecord> {
    latest_in(&ws.state_dir(), id)
}

/// [`latest`] given the workspace's `.rung/`.
pub fn latest_in(state_dir: &Path, id: &str) -> Option<TraceRecord> {
    serde_json::from_slice(&std::fs::read(record_path_in(state_dir, id)).ok()?).ok()
}

/// The buffer of a second launch: only when no capacity was given, the first launch (buffer
/// `held`) needed more room than it had (`asked`: with one part per SM, the fullest part's
/// count times the parts), and that room (with an eighth more) stays within
/// [`MAX_AUTO_CAPACITY`]. A kernel's record count rarely changes between two
/// launches on the same inputs; if it does, the second one's drops are counted as usual.
pub fn second_capacity(given: Option<u64>, held: u64, asked: u64, first: Option<u64>) -> Option<u64> {
    let room = asked.saturating_add(asked / 8);
    (given.is_none() && first.is_none() && asked > held && room <= MAX_AUTO_CAPACITY).then_some(room)
}

/// The leader a trace uses: the one asked for, else the one a `.cu` source declares
/// ([`trace::leader_declared`]), else one per warp. Triton, CuTe DSL and TileLang versions
/// have warp leaders only.
pub fn choose_leader(kind: VersionKind, source: &str, asked: Option<Leader>) -> Result<Leader, TraceRunError> {
    match python_tracer(kind) {
        Some(t) if asked == Some(Leader::Block) => Err(TraceRunError::PythonPerBlock(t.dsl)),
        Some(_) => Ok(Leader::Warp),
        None => Ok(asked.unwrap_or_else(|| trace::leader_declared(source))),
    }
}

/// Builds the traced variant, launches it once at the first benchmark size, and keeps the record
/// ([`record_path`]) and the Chrome trace-event file beside the version's dumps. `leader`: see
/// [`choose_leader`].
pub fn trace_once(
    ws: &Workspace,
    v: &VersionFile,
    tc: &Toolchain,
    seed: u64,
    capacity: Option<u64>,
    leader: Option<Leader>,
) -> Result<TraceRecord, TraceRunError> {
    let spec = ws.spec.as_ref().ok_or(TraceRunError::NotRungFormat)?;
    let machine = Machine::discover();
    let gpu = machine.gpu.first().ok_or(TraceRunError::NoGpu)?;
    let sizes = spec.bench_sizes.first().or(spec.test_sizes.last()).cloned().ok_or(TraceRunError::NoSizes)?;
    let source = ws.read_source(v).map_err(|source| TraceRunError::Read { path: v.path.clone(), source })?;
    let leader = choose_leader(v.kind, &source, leader)?;
    let mut slot = None;
    let runners = check::runners_for(ws, &machine, &mut slot).map_err(TraceRunError::Workers)?;
    let dir = runners.scratch(&format!("{}-trace", v.id));
    let result = (|| {
        std::fs::create_dir_all(&dir).map_err(|source| TraceRunError::Read { path: dir.clone(), source })?;
        let files = bench::draw_inputs(spec, &sizes, seed, &dir).map_err(|o| TraceRunError::Call(o.summary))?;
        let out = dir.join("trace.bin");
        // What each launch needs: the traced cubin and its launch (CUDA), or run()'s arguments
        // (Triton, CuTe DSL, TileLang: their kernels compile traced in the child the call runs in).
        let (how, names, arch, mechanism, traced_ptx, markers) = if let Some(tracer) = python_tracer(v.kind) {
            let names = trace::names_in(&source);
            if names.is_empty() {
                let path = v.path.display().to_string();
                return Err(TraceRunError::NoPythonMarkers { path, module: tracer.module });
            }
            let params: Vec<String> = crate::stages::prepare::python_def_params(&source, "run")
                .map(|(p, _)| p.into_iter().map(|(n, _)| n).collect())
                .unwrap_or_default();
            let args = crate::stages::call_args(spec, &params, &sizes, |t, _| {
                let (path, shape) = &files[&t.name];
                TensorFile { path: path.clone(), dtype: t.dtype, shape: shape.clone() }
            })
            .map_err(|e| TraceRunError::Plan(e.to_string()))?;
            (How::Python(args), names, gpu.arch(), tracer.mechanism, None, Some(tracer.module.to_string()))
        } else {
            let (traced, arch) = build(ws, v, tc, Some(&gpu.arch()), &dir, leader)?;
            // build_traced wrote it there.
            let cubin = dir.join("traced.cubin");
            let plan = run::NativePlan::new(ws, spec, v, &source, Some(gpu.sm_count))
                .map_err(|d| TraceRunError::Plan(d.to_string()))?;
            let mechanism = if v.kind == VersionKind::Ptx { trace::PTX_MECHANISM } else { trace::HEADER_MECHANISM };
            (How::Cuda(Box::new(plan), cubin), traced.names, arch, mechanism, Some(traced.ptx), None)
        };
        let _lock = crate::gpulock::lock(&gpu.uuid)
            .map_err(|e| TraceRunError::Call(format!("cannot take the GPU's bench lock: {e}")))?;
        let (mut held, mut first_capacity) = (capacity.unwrap_or(DEFAULT_CAPACITY), None);
        let limit = spec.limits.run.max(Duration::from_secs(10));
        let resp = loop {
            let request =
                TraceRequest { capacity: held, out: out.clone(), regions: gpu.sm_count, markers: markers.clone() };
            let resp = match &how {
                How::Cuda(plan, cubin) => {
                    let mut launch =
                        plan.launch_at(spec, &sizes, &files).map_err(|e| TraceRunError::Plan(e.to_string()))?;
                    launch.cubin = cubin.clone();
                    launch.trace = Some(request);
                    runners.launch(launch, limit)
                }
                // A child of its own for each call: its kernels compile with this buffer's
                // addresses in them.
                How::Python(args) => {
                    let call = protocol::Call {
                        file: v.path.clone(),
                        function: "run".into(),
                        mode: CallMode::Cuda,
                        args: args.clone(),
                        returns: Default::default(),
                        guard_bytes: 0,
                        trace: Some(request),
                    };
                    let answer = runners.zygote(false).and_then(|z| {
                        let forked = z.fork(CallMode::Cuda, limit)?;
                        if !forked.ok {
                            return Ok(forked); // why the child did not start
                        }
                        // Its kernels compile in the call: the build's limit on top of the run's.
                        z.call(Op::Call(call), limit + spec.limits.build)
                    });
                    runners.end_children();
                    answer
                }
            }
            .map_err(|f| TraceRunError::Call(f.to_string()))?;
            if !resp.ok {
                return Err(TraceRunError::Call(resp.error.map(|e| e.message).unwrap_or_default()));
            }
            // The room that holds every record: with one part per SM, the fullest part decides.
            let needed = resp.trace_needed.or(resp.trace_requested).unwrap_or(0);
            match second_capacity(capacity, held, needed, first_capacity) {
                Some(room) => (first_capacity, held) = (Some(held), room),
                None => break resp,
            }
        };
        let bytes = std::fs::read(&out).map_err(|source| TraceRunError::Read { path: out.clone(), source })?;
        let records = trace::parse(&bytes);
        // The leader the records say wrote them (a source can define the header's macros
        // itself); what was asked for when none was written.
        let leader = trace::leader_of(&records).unwrap_or(leader);
        let decoded = trace::decode(&records, &names, resp.trace_requested.unwrap_or(0), held);
        let summary = trace::summarise(&decoded, mechanism);
        let dumps = ws.state_dir().join(crate::store::DUMPS_DIR).join(&v.id);
        std::fs::create_dir_all(&dumps).map_err(|source| TraceRunError::Read { path: dumps.clone(), source })?;
        // The PTX that ran, markers expanded, for reading beside the version's own.
        if let Some(ptx) = traced_ptx {
            let path = dumps.join(format!("{}.traced.ptx", v.id));
            std::fs::write(&path, ptx).map_err(|source| TraceRunError::Read { path: path.clone(), source })?;
        }
        let chrome = dumps.join(format!("{}.trace.json", v.id));
        let text = serde_json::to_string(&trace::chrome_trace(&decoded, leader)).expect("trace events serialise");
        std::fs::write(&chrome, text).map_err(|source| TraceRunError::Read { path: chrome.clone(), source })?;
        let source_hash = ws.source_hash(v).unwrap_or_default();
        // The untraced time beside it: the latest bench of this source at this size.
        let untraced = crate::store::Store::open(&ws.state_dir())
            .ok()
            .and_then(|st| crate::service::results(ws, &st, v).ok())
            .and_then(|r| crate::stages::bench::passing_bench(r.current()))
            .filter(|b| b.sizes == sizes);
        let record = TraceRecord {
            version: v.id.clone(),
            source_hash,
            sizes: sizes.clone(),
            arch,
            seed,
            recorded_at: crate::store::rfc3339(std::time::SystemTime::now()),
            launch_ms: resp.seconds.unwrap_or(0.0) * 1000.0,
            untraced_median_ms: untraced.as_ref().map(|b| b.headline.median),
            untraced_basis: untraced.map(|b| b.basis),
            chrome_trace: chrome.strip_prefix(&ws.root).unwrap_or(&chrome).display().to_string(),
            summary,
            leader,
            first_capacity,
        };
        let path = record_path(ws, &v.id);
        let text = serde_json::to_vec_pretty(&record).expect("a trace record serialises");
        std::fs::write(&path, text).map_err(|source| TraceRunError::Read { path: path.clone(), source })?;
        Ok(record)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overflowing_first_launch_gets_one_second_with_room_for_all_unless_a_capacity_was_given() {
        // 2M warps, five records each, into the default buffer: a second launch, room for all.
        let asked = 10 * DEFAULT_CAPACITY;
        let room = second_capacity(None, DEFAULT_CAPACITY, asked, None).unwrap();
        assert!(room >= asked && room <= MAX_AUTO_CAPACITY);
        // Not when it fit, not when the user chose the capacity, never a third launch.
        assert_eq!(second_capacity(None, DEFAULT_CAPACITY, DEFAULT_CAPACITY, None), None);
        assert_eq!(second_capacity(Some(DEFAULT_CAPACITY), DEFAULT_CAPACITY, asked, None), None);
        assert_eq!(second_capacity(None, room, asked * 2, Some(DEFAULT_CAPACITY)), None);
        // Past the most rung allocates: the drops are counted instead.
        assert_eq!(second_capacity(None, DEFAULT_CAPACITY, MAX_AUTO_CAPACITY, None), None);
    }
}

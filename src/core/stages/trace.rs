//! The trace rung's one call: a `.cu` version's traced variant (its markers from
//! `rung_trace.cuh` compiled in with `-DRUNG_TRACE`) launched once by the native worker at the
//! first benchmark size, on the bench's own inputs, with a record buffer rung owns; the records
//! decoded into sections ([`crate::trace`]) and a Chrome trace-event file in the version's dumps
//! folder. Not recorded in the history yet: `rung trace` prints and writes its files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::check;
use crate::check::Machine;
use crate::model::protocol::TraceRequest;
use crate::model::trace::TraceRecord;
use crate::stages::{bench, run};
use crate::toolchain::Toolchain;
use crate::trace::{self, Traced};
use crate::workspace::{VersionFile, VersionKind, Workspace};

/// Records a traced launch may write by default (32 MB of buffer).
pub const DEFAULT_CAPACITY: u64 = 1 << 20;

/// Why a version was not traced.
#[derive(Debug, thiserror::Error)]
pub enum TraceRunError {
    #[error("tracing GPU MODE and KernelBench problems is not built yet")]
    NotRungFormat,
    #[error("{0} versions are not traced yet: `.cu` versions with rung_trace.cuh's markers are")]
    Kind(VersionKind),
    #[error("no nvcc here: `rung setup` installs it")]
    NoNvcc,
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

/// The traced variant of a version, built here (no GPU needed), and the target it was built for.
pub fn build(
    ws: &Workspace,
    v: &VersionFile,
    tc: &Toolchain,
    gpu_arch: Option<&str>,
    scratch: &Path,
) -> Result<(Traced, String), TraceRunError> {
    let spec = ws.spec.as_ref().ok_or(TraceRunError::NotRungFormat)?;
    if v.kind != VersionKind::Cuda {
        return Err(TraceRunError::Kind(v.kind));
    }
    let nvcc = tc.nvcc.as_ref().ok_or(TraceRunError::NoNvcc)?;
    let source = ws.read_source(v).map_err(|source| TraceRunError::Read { path: v.path.clone(), source })?;
    let (arch, _) = crate::stages::build::choose_arch(gpu_arch, spec.build.arch.as_deref(), &source);
    let traced = trace::build_traced(&nvcc.path, &ws.root.join(&v.path), &arch, &spec.build.flags, scratch).map_err(
        |e| match e {
            // Named as the user knows the file.
            trace::TraceError::NoMarkers(_) => trace::TraceError::NoMarkers(v.path.display().to_string()),
            e => e,
        },
    )?;
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

/// Builds the traced variant, launches it once at the first benchmark size, and keeps the record
/// ([`record_path`]) and the Chrome trace-event file beside the version's dumps.
pub fn trace_once(
    ws: &Workspace,
    v: &VersionFile,
    tc: &Toolchain,
    seed: u64,
    capacity: u64,
) -> Result<TraceRecord, TraceRunError> {
    let spec = ws.spec.as_ref().ok_or(TraceRunError::NotRungFormat)?;
    let machine = Machine::discover();
    let gpu = machine.gpu.first().ok_or(TraceRunError::NoGpu)?;
    let sizes = spec.bench_sizes.first().or(spec.test_sizes.last()).cloned().ok_or(TraceRunError::NoSizes)?;
    let source = ws.read_source(v).map_err(|source| TraceRunError::Read { path: v.path.clone(), source })?;
    let mut slot = None;
    let runners = check::runners_for(ws, &machine, &mut slot).map_err(TraceRunError::Workers)?;
    let dir = runners.scratch(&format!("{}-trace", v.id));
    let result = (|| {
        std::fs::create_dir_all(&dir).map_err(|source| TraceRunError::Read { path: dir.clone(), source })?;
        let (traced, arch) = build(ws, v, tc, Some(&gpu.arch()), &dir)?;
        let cubin = dir.join("traced.cubin");
        let plan = run::NativePlan::new(ws, spec, v, &source, Some(gpu.sm_count))
            .map_err(|d| TraceRunError::Plan(d.to_string()))?;
        let files = bench::draw_inputs(spec, &sizes, seed, &dir).map_err(|o| TraceRunError::Call(o.summary))?;
        let mut launch = plan.launch_at(spec, &sizes, &files).map_err(|e| TraceRunError::Plan(e.to_string()))?;
        launch.cubin = cubin;
        let out = dir.join("trace.bin");
        launch.trace = Some(TraceRequest { capacity, out: out.clone() });
        let _lock = crate::gpulock::lock(&gpu.uuid)
            .map_err(|e| TraceRunError::Call(format!("cannot take the GPU's bench lock: {e}")))?;
        let resp = runners
            .launch(launch, spec.limits.run.max(Duration::from_secs(10)))
            .map_err(|f| TraceRunError::Call(f.to_string()))?;
        if !resp.ok {
            return Err(TraceRunError::Call(resp.error.map(|e| e.message).unwrap_or_default()));
        }
        let bytes = std::fs::read(&out).map_err(|source| TraceRunError::Read { path: out.clone(), source })?;
        let decoded = trace::decode(&trace::parse(&bytes), &traced.names, resp.trace_requested.unwrap_or(0), capacity);
        let summary = trace::summarise(&decoded, trace::HEADER_MECHANISM);
        let dumps = ws.state_dir().join(crate::store::DUMPS_DIR).join(&v.id);
        std::fs::create_dir_all(&dumps).map_err(|source| TraceRunError::Read { path: dumps.clone(), source })?;
        let chrome = dumps.join(format!("{}.trace.json", v.id));
        let text = serde_json::to_string(&trace::chrome_trace(&decoded)).expect("trace events serialise");
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
        };
        let path = record_path(ws, &v.id);
        let text = serde_json::to_vec_pretty(&record).expect("a trace record serialises");
        std::fs::write(&path, text).map_err(|source| TraceRunError::Read { path: path.clone(), source })?;
        Ok(record)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

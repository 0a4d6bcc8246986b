//! Timing and ceilings in the native worker.

use std::collections::BTreeMap;
use std::ffi::{CString, c_void};
use std::time::Instant;

use cudarc::driver::{result, sys};

use super::{Callee, cuda_error, launch_raw, scalar_bytes};
use crate::model::protocol::{Bench, Ceiling, CeilingKind, Launch, LaunchParam, Response, Sample, WorkerError};

/// A buffer one input set owns: parameter name, its file, device pointer, bytes.
type Owned = (String, std::path::PathBuf, sys::CUdeviceptr, usize);

/// rung's L2 flush (assets/kernels/copy.cu): a read at normal priority, a read evict-first,
/// then the discard, launched in that order over the flush buffer.
#[derive(Clone, Copy)]
struct Flusher {
    module: sys::CUmodule,
    read: sys::CUfunction,
    read_evict_first: sys::CUfunction,
    discard: sys::CUfunction,
    /// The word the reads would write if their data were ever all ones: keeps them alive.
    sink: sys::CUdeviceptr,
}

/// What stays on the GPU between the requests of one series.
pub struct State {
    callee: Callee,
    launch: Launch,
    /// Per input set: its argument bytes and the buffers it owns (name, file, pointer, bytes).
    sets: Vec<(Vec<Vec<u8>>, Vec<Owned>)>,
    flush: Option<(sys::CUdeviceptr, usize)>,
    /// The flush kernels, from the embedded PTX.
    flusher: Option<Flusher>,
    sms: u32,
    start: sys::CUevent,
    end: sys::CUevent,
    next: usize,
    /// CUPTI tracing, when it could start: each sample's busy time comes from its records.
    tracer: Option<crate::cupti::Tracer>,
    /// Why samples carry no busy time.
    timer_note: Option<String>,
    /// The largest persisting-L2 carve-out found set before a timed call (and undone), bytes.
    l2_persisting: u64,
    /// The files the series' first request named read-only: a write-back leaves them.
    read_only: Vec<std::path::PathBuf>,
    /// The outputs it filled with the poison (device pointer, bytes, byte), poisoned again
    /// before every timed call.
    poison: Vec<(sys::CUdeviceptr, usize, u8)>,
}

impl Drop for State {
    fn drop(&mut self) {
        // SAFETY: everything here was created by `setup` and is freed once.
        unsafe {
            for (_, bufs) in &self.sets {
                for (_, _, d, _) in bufs {
                    let _ = result::free_sync(*d);
                }
            }
            if let Some((d, _)) = self.flush {
                let _ = result::free_sync(d);
            }
            if let Some(f) = self.flusher {
                let _ = result::free_sync(f.sink);
                let _ = result::module::unload(f.module);
            }
            let _ = result::event::destroy(self.start);
            let _ = result::event::destroy(self.end);
            self.callee.unload();
        }
    }
}

/// The embedded copy and flush kernels, compiled by the driver for this GPU.
fn copy_module() -> Result<sys::CUmodule, WorkerError> {
    let ptx = CString::new(super::COPY_PTX).expect("no NUL in the PTX");
    // SAFETY: a NUL-terminated PTX image; the module lives until its owner unloads it.
    unsafe { result::module::load_data(ptx.as_ptr() as *const c_void).map_err(cuda_error) }
}

fn function(module: sys::CUmodule, name: &str) -> Result<sys::CUfunction, WorkerError> {
    // SAFETY: a loaded module and a NUL-free name.
    unsafe { result::module::get_function(module, CString::new(name).expect("name")).map_err(cuda_error) }
}

fn io(what: &std::path::Path, e: std::io::Error) -> WorkerError {
    WorkerError::new("IoError", format!("{}: {e}", what.display()))
}

/// A file's bytes: held between requests when it is one of the read-only kept files, else read.
fn file_bytes(
    file: &std::path::Path,
    read_only: &[std::path::PathBuf],
) -> Result<std::sync::Arc<Vec<u8>>, WorkerError> {
    if read_only.iter().any(|p| p == file) {
        super::resident::bytes(file).map_err(|e| io(file, e))
    } else {
        Ok(std::sync::Arc::new(std::fs::read(file).map_err(|e| io(file, e))?))
    }
}

/// A buffer's bytes on the device: filled when the request says so, else from its file (held
/// in memory between requests when it is read-only). Its pointer and length.
///
/// # Safety
/// A context is current; the allocation is the caller's to free.
unsafe fn upload(file: &std::path::Path, req: &Bench) -> Result<(sys::CUdeviceptr, usize), WorkerError> {
    // SAFETY: the caller's context; `d` holds `len` bytes.
    unsafe {
        if let Some(f) = req.filled.get(file) {
            let len = f.bytes as usize;
            let d = result::malloc_sync(len.max(1)).map_err(cuda_error)?;
            if len > 0 {
                result::memset_d8_sync(d, f.value, len).map_err(cuda_error)?;
            }
            return Ok((d, len));
        }
        let bytes = file_bytes(file, &req.read_only)?;
        let d = result::malloc_sync(bytes.len().max(1)).map_err(cuda_error)?;
        if !bytes.is_empty() {
            result::memcpy_htod_sync(d, &bytes[..]).map_err(cuda_error)?;
        }
        Ok((d, bytes.len()))
    }
}

/// The series' state: the callee loaded, the kept files held, the flush buffer and every set
/// on the device. `lap` times each step (`upload_load`, `upload_hold`; the rest is `upload`).
fn setup(req: &Bench, launch: &Launch, sms: u32, lap: &mut impl FnMut(&str)) -> Result<State, WorkerError> {
    let (extra, flush_bytes) = (&req.sets, req.flush_bytes);
    let callee = Callee::load(launch)?;
    lap("upload_load");
    // Every kept file read at once, before the sets are uploaded one by one.
    super::resident::hold_all(&req.read_only);
    lap("upload_hold");
    // SAFETY: driver calls on this thread's context; every allocation is owned by State.
    unsafe {
        let start = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(cuda_error)?;
        let end = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(cuda_error)?;
        let mut state = State {
            callee,
            launch: launch.clone(),
            sets: Vec::new(),
            flush: None,
            flusher: None,
            sms,
            start,
            end,
            next: 0,
            tracer: None,
            timer_note: None,
            l2_persisting: 0,
            read_only: req.read_only.clone(),
            poison: Vec::new(),
        };
        if flush_bytes > 0 {
            let d = result::malloc_sync(flush_bytes as usize).map_err(cuda_error)?;
            result::memset_d8_sync(d, 0, flush_bytes as usize).map_err(cuda_error)?;
            state.flush = Some((d, flush_bytes as usize));
            let module = copy_module()?;
            state.flusher = Some(Flusher {
                module,
                read: function(module, "rung_flush")?,
                read_evict_first: function(module, "rung_flush_evict_first")?,
                discard: function(module, "rung_discard")?,
                sink: result::malloc_sync(4).map_err(cuda_error)?,
            });
        }
        let base: BTreeMap<String, std::path::PathBuf> = BTreeMap::new();
        for set in std::iter::once(&base).chain(extra) {
            let mut args = Vec::new();
            let mut bufs = Vec::new();
            for p in &launch.params {
                match p {
                    LaunchParam::Buffer { name, path } => {
                        // A set names the files it replaces; the rest are set 0's buffers.
                        let own = set.get(name);
                        let reuse = own.is_none() && !state.sets.is_empty();
                        let d = if reuse {
                            state.sets[0].1.iter().find(|b| &b.0 == name).map(|b| b.2).unwrap_or(0)
                        } else {
                            let file = own.unwrap_or(path);
                            let (d, len) = upload(file, req)?;
                            bufs.push((name.clone(), file.clone(), d, len));
                            d
                        };
                        args.push(d.to_le_bytes().to_vec());
                    }
                    LaunchParam::Scalar { ctype, value, .. } => args
                        .push(scalar_bytes(ctype, *value).map_err(|m| WorkerError::new("BadRequest", m.to_string()))?),
                }
            }
            state.sets.push((args, bufs));
        }
        // The outputs are set 0's buffers, shared by every set.
        state.poison = state.sets[0]
            .1
            .iter()
            .filter_map(|(_, path, d, len)| req.filled.get(path).filter(|_| *len > 0).map(|f| (*d, *len, f.value)))
            .collect();
        Ok(state)
    }
}

/// One timed launch of the next input set, on outputs poisoned again, after clearing the flush
/// buffer.
///
/// Every call finds its outputs poisoned, so none can tell the re-checked call from the timed
/// ones by what its outputs hold: a kernel that skips its work when the output looks done (or
/// does it only while it holds rung's poison) leaves the poison, which the re-check finds.
fn timed(state: &mut State) -> Result<Sample, WorkerError> {
    let i = state.next % state.sets.len();
    state.next += 1;
    let mut args: Vec<*mut c_void> = state.sets[i].0.iter_mut().map(|b| b.as_mut_ptr() as *mut c_void).collect();
    // SAFETY: the argument bytes live in `state` for the launch, which is synchronised; the
    // poisoned buffers are live allocations of their length.
    unsafe {
        // Finished before anything is timed or traced; the flush then evicts its lines.
        for &(d, len, value) in &state.poison {
            result::memset_d8_async(d, value, len, std::ptr::null_mut()).map_err(cuda_error)?;
        }
        if !state.poison.is_empty() {
            result::ctx::synchronize().map_err(cuda_error)?;
        }
        // The device is idle here: what CUPTI still holds is older work (the poison's memsets
        // among it), not this call's.
        traced(state);
        state.l2_persisting = state.l2_persisting.max(undo_persisting_l2());
        flush(state)?;
        // Queued behind the flush, so the host's launch overhead is hidden as in real use.
        result::event::record(state.start, std::ptr::null_mut()).map_err(cuda_error)?;
        let t0 = Instant::now();
        state.callee.call(&state.launch, &mut args, std::ptr::null_mut())?;
        let host = t0.elapsed();
        result::event::record(state.end, std::ptr::null_mut()).map_err(cuda_error)?;
        result::ctx::synchronize().map_err(cuda_error)?;
        let wall = t0.elapsed();
        let gpu = result::event::elapsed(state.start, state.end).map_err(cuda_error)?;
        let traced = traced(state).and_then(|w| crate::cupti::call_ms(&w));
        Ok(Sample {
            gpu_ms: gpu as f64,
            busy_ms: traced.map(|t| t.0),
            span_ms: traced.map(|t| t.1),
            host_ms: host.as_secs_f64() * 1e3,
            wall_ms: wall.as_secs_f64() * 1e3,
        })
    }
}

/// The context's persisting-L2 set-aside as the worker found it, before any version ran: an
/// environment may start every context with one (MPS, or
/// `CUDA_DEVICE_DEFAULT_PERSISTING_L2_CACHE_PERCENTAGE_LIMIT`), and that is not the version's doing.
static L2_BASELINE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// Reads the baseline: called once the worker's context is current, before any version loads.
pub fn note_l2_baseline() {
    let mut size = 0usize;
    // SAFETY: a plain driver query on the current context.
    let ok = unsafe { sys::cuCtxGetLimit(&mut size, sys::CUlimit::CU_LIMIT_PERSISTING_L2_CACHE_SIZE).result().is_ok() };
    let _ = L2_BASELINE.set(if ok { size } else { 0 });
}

/// A carve-out of persisting L2 (`cudaLimitPersistingL2CacheSize`, which a `rung_run` host
/// entry can set, with an access policy window on its stream) keeps a call's data in L2
/// through the flush. Every persisting line is turned back to normal before each timed call, so
/// the flush evicts it; a limit raised above the context's baseline is put back, and its size in
/// bytes returned (0 when the version left it alone).
fn undo_persisting_l2() -> u64 {
    let mut size = 0usize;
    let limit = sys::CUlimit::CU_LIMIT_PERSISTING_L2_CACHE_SIZE;
    let base = L2_BASELINE.get().copied().unwrap_or(0);
    // SAFETY: plain driver calls on the current context, which `setup` made current.
    unsafe {
        let _ = sys::cuCtxResetPersistingL2Cache().result();
        if sys::cuCtxGetLimit(&mut size, limit).result().is_err() || size == base {
            return 0;
        }
        let _ = sys::cuCtxSetLimit(limit, base).result();
    }
    // A lowered limit is put back too, but it is no cache-state game.
    if size > base { size as u64 } else { 0 }
}

/// The work records CUPTI finished since the last call, or None when not tracing. A CUPTI
/// failure stops tracing for the series, with its reason kept for the reply.
fn traced(state: &mut State) -> Option<Vec<crate::cupti::Work>> {
    let tracer = state.tracer?;
    match tracer.take() {
        Ok(w) => Some(w),
        Err(e) => {
            state.tracer = None;
            state.timer_note = Some(format!("CUPTI stopped: {e}; timed by events"));
            None
        }
    }
}

/// Starts CUPTI tracing for a series (not for a profiled one: Nsight Compute owns CUPTI
/// then), or keeps why not.
fn start_tracer(state: &mut State) {
    match crate::cupti::start() {
        Ok(t) => state.tracer = Some(t),
        Err(e) => state.timer_note = Some(crate::cupti::timer_note(&e)),
    }
}

/// A launch of one of the worker's own kernels (flush, copy ceilings): a 1-D grid of `blocks`
/// blocks of `threads`, its arguments passed apart.
fn own_launch(kernel: &str, blocks: u32, threads: u32) -> Launch {
    Launch {
        cubin: Default::default(),
        kernel: kernel.into(),
        grid: [blocks, 1, 1],
        block: [threads, 1, 1],
        smem: 0,
        cluster: None,
        params: vec![],
        guard_bytes: 0,
        library: None,
        trace: None,
    }
}

/// Clears L2 (queued, not waited for): reads the flush buffer, which evicts everything else
/// and writes back what was dirty, reads it again evict-first, then discards the buffer's own
/// lines, which leaves L2 as near as user code can to how Nsight Compute's
/// `--cache-control all` leaves it (the figures are in copy.cu).
///
/// # Safety
/// `state`'s buffers are live.
unsafe fn flush(state: &State) -> Result<(), WorkerError> {
    if let (Some((d, n)), Some(f)) = (state.flush, state.flusher) {
        let launch = |kernel: &str| own_launch(kernel, state.sms * 4, 512);
        let mut a = d.to_le_bytes();
        let mut b = ((n / 16) as u64).to_le_bytes();
        let mut c = f.sink.to_le_bytes();
        let mut args: Vec<*mut c_void> =
            vec![a.as_mut_ptr() as *mut c_void, b.as_mut_ptr() as *mut c_void, c.as_mut_ptr() as *mut c_void];
        // SAFETY: the caller's contract.
        unsafe {
            launch_raw(f.read, &launch("rung_flush"), &mut args, std::ptr::null_mut())?;
            launch_raw(f.read_evict_first, &launch("rung_flush_evict_first"), &mut args, std::ptr::null_mut())?;
        }
        let mut lines = ((n / 128) as u64).to_le_bytes();
        let mut args: Vec<*mut c_void> = vec![a.as_mut_ptr() as *mut c_void, lines.as_mut_ptr() as *mut c_void];
        // SAFETY: as above; the discard touches only the flush buffer's own lines.
        unsafe { launch_raw(f.discard, &launch("rung_discard"), &mut args, std::ptr::null_mut())? };
    }
    Ok(())
}

/// A call on set 0 outside the profiler, then one inside `cuProfilerStart`/`cuProfilerStop`.
fn profiled_call(state: &mut State) -> Result<(), WorkerError> {
    let mut args: Vec<*mut c_void> = state.sets[0].0.iter_mut().map(|b| b.as_mut_ptr() as *mut c_void).collect();
    // SAFETY: the argument bytes live in `state` for the launches, which are synchronised.
    unsafe {
        state.callee.call(&state.launch, &mut args, std::ptr::null_mut())?;
        result::ctx::synchronize().map_err(cuda_error)?;
        sys::cuProfilerStart().result().map_err(cuda_error)?;
        let called = state.callee.call(&state.launch, &mut args, std::ptr::null_mut());
        let synced = result::ctx::synchronize().map_err(cuda_error);
        sys::cuProfilerStop().result().map_err(cuda_error)?;
        called?;
        synced?;
    }
    Ok(())
}

/// The median wall time of an empty call measured like a timed one (flush queued, then
/// waiting for the device): the fixed cost in `wall_ms`.
fn fixed_cost(state: &State) -> Result<f64, WorkerError> {
    let mut v = Vec::new();
    for _ in 0..32 {
        // SAFETY: events owned by `state`.
        unsafe {
            flush(state)?;
            result::event::record(state.start, std::ptr::null_mut()).map_err(cuda_error)?;
            let t0 = Instant::now();
            result::event::record(state.end, std::ptr::null_mut()).map_err(cuda_error)?;
            result::ctx::synchronize().map_err(cuda_error)?;
            v.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

pub fn serve(series: &mut BTreeMap<u32, State>, req: &Bench, sms: u32) -> Response {
    match serve_inner(series, req, sms) {
        Ok(r) => r,
        Err(e) => {
            series.remove(&req.series);
            Response { ok: false, error: Some(e), ..Default::default() }
        }
    }
}

fn serve_inner(series: &mut BTreeMap<u32, State>, req: &Bench, sms: u32) -> Result<Response, WorkerError> {
    let mut fixed = None;
    // Where this request's time went (the bench's timeline).
    let mut clock = crate::stats::Clock::new();
    let mut lap = |name: &str| clock.lap(name);
    if let Some(l) = &req.launch {
        series.remove(&req.series);
        let mut state = setup(req, l, sms, &mut lap)?;
        lap("upload");
        if !req.profile {
            start_tracer(&mut state);
        }
        lap("timer_start");
        // Warm-up by time: the clocks ramp from idle.
        let t0 = Instant::now();
        while t0.elapsed().as_secs_f64() < req.warmup_seconds {
            timed(&mut state)?;
        }
        lap("warmup");
        fixed = Some(fixed_cost(&state)?);
        lap("fixed_cost");
        series.insert(req.series, state);
    }
    let state = series
        .get_mut(&req.series)
        .ok_or_else(|| WorkerError::new("BadRequest", format!("bench: series {} has no launch set up", req.series)))?;
    if req.profile {
        profiled_call(state)?;
        return Ok(Response { ok: true, ..Default::default() });
    }
    let mut samples = Vec::with_capacity(req.samples as usize);
    for _ in 0..req.samples {
        samples.push(timed(state)?);
    }
    lap("timed");
    let graph_ms = if req.graph_calls > 0 { graph_replay(state, req.graph_calls, req.graph_replays)? } else { vec![] };
    lap("graph_replay");
    let mut recheck_sample = None;
    if req.write_back {
        // One more call, made as a timed one is (outputs poisoned, L2 flushed), in the buffers
        // of the set rung drew at random, which hold the fresh inputs now: data no timed call
        // saw. The outputs, shared by the sets, are written back: a kernel that stops working
        // after some calls, or remembers its results, is caught by them or by this call's time.
        let k = req.recheck_set as usize;
        if k >= state.sets.len() {
            return Err(WorkerError::new("BadRequest", format!("bench: no input set {k} to re-check")));
        }
        load_fresh(state, k, &req.recheck_inputs)?;
        state.next = k;
        recheck_sample = Some(timed(state)?);
        for (_, path, d, len) in &state.sets[0].1 {
            if state.read_only.contains(path) {
                continue;
            }
            let copy = |bytes: &mut [u8]| {
                // SAFETY: a live allocation of `len` bytes into a slice of as many.
                unsafe {
                    if bytes.is_empty() { Ok(()) } else { result::memcpy_dtoh_sync(bytes, *d).map_err(cuda_error) }
                }
            };
            super::resident::write_through(path, *len, copy, |e| io(path, e))?;
        }
    }
    lap("write_back");
    let mut phases = clock.phases;
    phases.retain(|_, v| *v > 0.0);
    let timer_note = state.timer_note.clone();
    let l2_persisting_bytes = (state.l2_persisting > 0).then_some(state.l2_persisting);
    Ok(Response {
        ok: true,
        samples,
        fixed_ms: fixed,
        graph_ms,
        recheck_sample,
        timer_note,
        l2_persisting_bytes,
        phases,
        ..Default::default()
    })
}

/// Copies the fresh inputs (parameter name → file) into set `k`'s buffers (set 0's, for a
/// parameter set `k` shares), each the size of its file.
fn load_fresh(state: &State, k: usize, fresh: &BTreeMap<String, std::path::PathBuf>) -> Result<(), WorkerError> {
    for (name, file) in fresh {
        let own = |set: usize| state.sets[set].1.iter().find(|b| &b.0 == name).map(|b| (b.2, b.3));
        let (d, len) = own(k).or_else(|| own(0)).ok_or_else(|| {
            WorkerError::new("BadRequest", format!("bench: the fresh input `{name}` matches no buffer"))
        })?;
        let bytes = file_bytes(file, &state.read_only)?;
        if bytes.len() != len {
            return Err(WorkerError::new(
                "BadRequest",
                format!("bench: {} holds {} bytes, the buffer of `{name}` {len}", file.display(), bytes.len()),
            ));
        }
        if len > 0 {
            // SAFETY: a live allocation of `len` bytes, from a slice of as many.
            unsafe { result::memcpy_htod_sync(d, &bytes[..]).map_err(cuda_error)? };
        }
    }
    Ok(())
}

/// `calls` launches on set 0 captured into one CUDA graph on a stream of its own, replayed
/// once to warm, then `replays` times, each between events: per-call milliseconds. Nothing
/// flushes L2 between the captured calls: this is the steady-state cost without the host's
/// launch overhead, the figure that matters for a small kernel run back to back.
fn graph_replay(state: &mut State, calls: u32, replays: u32) -> Result<Vec<f64>, WorkerError> {
    // SAFETY: the stream, graph, exec and events are created and destroyed here; the argument
    // bytes live in `state` for the capture, and every replay is synchronised.
    unsafe {
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking).map_err(cuda_error)?;
        let mut args: Vec<*mut c_void> = state.sets[0].0.iter_mut().map(|b| b.as_mut_ptr() as *mut c_void).collect();
        let captured = (|| {
            result::stream::begin_capture(stream, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .map_err(cuda_error)?;
            let mut launched = Ok(());
            for _ in 0..calls {
                launched = state.callee.call(&state.launch, &mut args, stream);
                if launched.is_err() {
                    break;
                }
            }
            // End the capture whatever happened, so the stream is usable (and freeable) again.
            let graph = result::stream::end_capture(stream).map_err(cuda_error);
            launched?;
            let graph = graph?;
            let exec = result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)).map_err(cuda_error);
            let _ = result::graph::destroy(graph);
            exec
        })();
        let exec = match captured {
            Ok(e) => e,
            Err(e) => {
                let _ = result::stream::destroy(stream);
                return Err(e);
            }
        };
        let mut out = Vec::with_capacity(replays as usize);
        let timed = (|| {
            result::graph::launch(exec, stream).map_err(cuda_error)?;
            result::stream::synchronize(stream).map_err(cuda_error)?;
            for _ in 0..replays {
                result::event::record(state.start, stream).map_err(cuda_error)?;
                result::graph::launch(exec, stream).map_err(cuda_error)?;
                result::event::record(state.end, stream).map_err(cuda_error)?;
                result::stream::synchronize(stream).map_err(cuda_error)?;
                let ms = result::event::elapsed(state.start, state.end).map_err(cuda_error)? as f64;
                out.push(ms / calls as f64);
            }
            Ok::<(), WorkerError>(())
        })();
        let _ = result::graph::exec_destroy(exec);
        let _ = result::stream::destroy(stream);
        timed.map(|_| out)
    }
}

/// Device-to-device copy bandwidth: cuMemcpy and the copy kernels, counting bytes read plus
/// written; the best time of `reps` per method.
pub fn ceiling(req: &Ceiling, sms: u32) -> Result<Response, WorkerError> {
    if req.kind != CeilingKind::Copy {
        return Err(WorkerError::new("BadRequest", "the native worker measures the copy ceiling only"));
    }
    let bytes = req.size as usize;
    let mut ceilings = BTreeMap::new();
    // SAFETY: buffers and events created and freed here; launches synchronised.
    unsafe {
        let src = result::malloc_sync(bytes).map_err(cuda_error)?;
        let dst = result::malloc_sync(bytes).map_err(cuda_error)?;
        result::memset_d8_sync(src, 1, bytes).map_err(cuda_error)?;
        let start = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(cuda_error)?;
        let end = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(cuda_error)?;
        // Timed as benches are, so that a kernel's share of the ceiling compares like with
        // like: CUPTI's busy time when it traces, else events.
        let traced = crate::cupti::start();
        let best = |f: &mut dyn FnMut() -> Result<(), WorkerError>| -> Result<f64, WorkerError> {
            f()?; // warm
            result::ctx::synchronize().map_err(cuda_error)?;
            let mut best_ms = f64::INFINITY;
            for _ in 0..req.reps.max(1) {
                if let Ok(t) = &traced {
                    let _ = t.take();
                }
                result::event::record(start, std::ptr::null_mut()).map_err(cuda_error)?;
                f()?;
                result::event::record(end, std::ptr::null_mut()).map_err(cuda_error)?;
                result::event::synchronize(end).map_err(cuda_error)?;
                let events = result::event::elapsed(start, end).map_err(cuda_error)? as f64;
                let busy = traced.as_ref().ok().and_then(|t| t.take().ok()).and_then(|w| crate::cupti::call_ms(&w));
                best_ms = best_ms.min(busy.map_or(events, |b| b.0));
            }
            Ok(2.0 * bytes as f64 / (best_ms * 1e-3) / 1e9)
        };
        let memcpy =
            best(&mut || result::memcpy_dtod_async(dst, src, bytes, std::ptr::null_mut()).map_err(cuda_error))?;
        ceilings.insert("cuMemcpy".to_string(), memcpy);
        let module = copy_module()?;
        let n = (bytes / 16) as u64;
        let mut kernel_best: f64 = 0.0;
        for kname in ["rung_copy1", "rung_copy4"] {
            let func = function(module, kname)?;
            for per_sm in [1u32, 2, 4, 8, 16] {
                for block in [256u32, 512, 1024] {
                    let launch = own_launch(kname, sms * per_sm, block);
                    let mut a = src.to_le_bytes();
                    let mut b = dst.to_le_bytes();
                    let mut c = n.to_le_bytes();
                    let mut args: Vec<*mut c_void> = vec![
                        a.as_mut_ptr() as *mut c_void,
                        b.as_mut_ptr() as *mut c_void,
                        c.as_mut_ptr() as *mut c_void,
                    ];
                    let gbs = best(&mut || launch_raw(func, &launch, &mut args, std::ptr::null_mut()))?;
                    kernel_best = kernel_best.max(gbs);
                }
            }
        }
        ceilings.insert("copy-kernel".to_string(), kernel_best);
        let _ = result::module::unload(module);
        let _ = result::event::destroy(start);
        let _ = result::event::destroy(end);
        let _ = result::free_sync(src);
        let _ = result::free_sync(dst);
        Ok(Response {
            ok: true,
            ceilings,
            timer_note: traced.err().map(|e| crate::cupti::timer_note(&e)),
            ..Default::default()
        })
    }
}

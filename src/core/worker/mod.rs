//! `rung worker`: the native worker, a child process that launches CUDA kernels through the
//! driver (cudarc, loaded at run time). It executes and never judges: buffers come from files
//! rung wrote, go to the GPU inside guard zones, the kernel runs, and every buffer (inputs too,
//! so rung can see a kernel that mutates them) is written back to its file, with any write into
//! a guard zone reported. A fault (illegal address, a sticky CUDA error) ends this process only;
//! rung starts a fresh worker for the next launch.
//!
//! The messages are those of [`crate::model::protocol`]: a [`Hello`] first, then a [`Response`] per
//! [`Request`].

use std::collections::BTreeMap;
use std::ffi::{CString, c_void};
use std::io::{BufRead, Write};
use std::time::Instant;

use cudarc::driver::{result, sys};

use crate::model::protocol::{
    self, Capability, GUARD_BYTE, Hello, Launch, LaunchParam, Op, Request, Response, WorkerError, WorkerKind,
};

/// rung's own kernels (the copy kernels behind the memory ceiling, the L2 flush), as PTX made by
/// `nvcc -ptx -arch=compute_90 assets/kernels/copy.cu`; the driver compiles it for the GPU at hand.
use crate::assets::COPY_PTX;

/// A C type a by-value kernel argument cannot be passed as.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("no by-value encoding for `{0}`")]
pub struct NoEncoding(pub String);

/// A kernel argument's bytes for its C type.
fn scalar_bytes(ctype: &str, v: f64) -> Result<Vec<u8>, NoEncoding> {
    Ok(match ctype {
        "float" => (v as f32).to_le_bytes().to_vec(),
        "double" => v.to_le_bytes().to_vec(),
        "__half" | "half" => half::f16::from_f64(v).to_le_bytes().to_vec(),
        "__nv_bfloat16" | "nv_bfloat16" => half::bf16::from_f64(v).to_le_bytes().to_vec(),
        "int" | "int32_t" => (v as i32).to_le_bytes().to_vec(),
        "unsigned" | "unsigned int" | "uint32_t" => (v as u32).to_le_bytes().to_vec(),
        "long" | "long long" | "int64_t" => (v as i64).to_le_bytes().to_vec(),
        "unsigned long" | "unsigned long long" | "uint64_t" | "size_t" => (v as u64).to_le_bytes().to_vec(),
        "short" | "int16_t" => (v as i16).to_le_bytes().to_vec(),
        other => return Err(NoEncoding(other.to_string())),
    })
}

fn cuda_error(e: cudarc::driver::DriverError) -> WorkerError {
    let name = e.error_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{e:?}"));
    let msg = e.error_string().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    WorkerError::new(name, msg)
}

fn hello(caps: Vec<Capability>, gpu: Option<String>, uuid: Option<String>, error: Option<WorkerError>) -> Hello {
    Hello {
        protocol: protocol::PROTOCOL,
        worker: WorkerKind::Native,
        pid: std::process::id(),
        capabilities: caps,
        gpu,
        uuid,
        python: None,
        packages: Default::default(),
        start_seconds: None,
        warmed: Default::default(),
        error,
    }
}

fn send(out: &mut impl Write, value: &impl serde::Serialize) {
    let _ = writeln!(out, "{}", serde_json::to_string(value).expect("messages serialise"));
    let _ = out.flush();
}

/// Serves requests on stdin until `exit` or end of input. Returns the process exit code.
pub fn serve() -> i32 {
    let mut out = std::io::stdout().lock();
    let t0 = Instant::now();
    let gpu = crate::gpu::probe();
    let Some(info) = gpu.first().cloned() else {
        let why = gpu.absent_reason.clone().unwrap_or_else(|| "no GPU".into());
        send(&mut out, &hello(vec![], None, None, Some(WorkerError::new("NoGpu", why))));
        return 1;
    };
    let ctx = match cudarc::driver::CudaContext::new(info.ordinal as usize) {
        Ok(c) => c,
        Err(e) => {
            send(&mut out, &hello(vec![], None, None, Some(cuda_error(e))));
            return 1;
        }
    };
    let _ = ctx.bind_to_thread();
    bench::note_l2_baseline();
    let mut caps = vec![Capability::Launch, Capability::HostEntry];
    if info.compute_capability >= 90 {
        caps.push(Capability::Clusters);
    }
    let mut h = hello(caps, Some(info.name.clone()), Some(info.uuid.clone()), None);
    h.start_seconds = Some(t0.elapsed().as_secs_f64());
    send(&mut out, &h);
    let mut bench_state: BTreeMap<u32, bench::State> = BTreeMap::new();
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        if line.trim().is_empty() {
            continue;
        }
        let req: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                let resp = Response {
                    ok: false,
                    error: Some(WorkerError::new("BadRequest", e.to_string())),
                    ..Default::default()
                };
                send(&mut out, &resp);
                continue;
            }
        };
        let launch = match req.op {
            Op::Exit => {
                send(&mut out, &Response { id: Some(req.id), ok: true, ..Default::default() });
                break;
            }
            Op::Launch(l) => l,
            Op::Bench(b) => {
                let _ = ctx.bind_to_thread();
                let mut resp = bench::serve(&mut bench_state, &b, info.sm_count);
                resp.id = Some(req.id);
                let sticky = resp.error.as_ref().is_some_and(|e| e.kind.starts_with("CUDA_ERROR"));
                send(&mut out, &resp);
                if sticky {
                    return 2;
                }
                continue;
            }
            Op::Ceiling(c) => {
                let _ = ctx.bind_to_thread();
                let mut resp = match bench::ceiling(&c, info.sm_count) {
                    Ok(r) => r,
                    Err(e) => Response { ok: false, error: Some(e), ..Default::default() },
                };
                resp.id = Some(req.id);
                send(&mut out, &resp);
                continue;
            }
            other => {
                let msg = format!("the native worker takes launch and exit, not {:?}", std::mem::discriminant(&other));
                let resp = Response {
                    id: Some(req.id),
                    ok: false,
                    error: Some(WorkerError::new("BadRequest", msg)),
                    ..Default::default()
                };
                send(&mut out, &resp);
                continue;
            }
        };
        let _ = ctx.bind_to_thread();
        let mut resp = launch_once(&launch);
        resp.id = Some(req.id);
        let sticky = resp.error.as_ref().is_some_and(|e| e.kind.starts_with("CUDA_ERROR"));
        send(&mut out, &resp);
        if sticky {
            // The context may be unusable: rung starts a fresh worker.
            return 2;
        }
    }
    0
}

/// Launches `func` with `req`'s dimensions on the null stream; clusters through cuLaunchKernelEx.
///
/// # Safety
/// `args` must point at argument bytes matching the kernel's parameters.
unsafe fn launch_raw(
    func: sys::CUfunction,
    req: &Launch,
    args: &mut [*mut c_void],
    stream: sys::CUstream,
) -> Result<(), WorkerError> {
    let (g, b) = (req.grid, req.block);
    // SAFETY: the caller's contract; every pointer handed over is live for the call.
    unsafe {
        match req.cluster {
            Some(c) if c != [1, 1, 1] => {
                let mut attr: sys::CUlaunchAttribute = std::mem::zeroed();
                attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
                attr.value.clusterDim.x = c[0];
                attr.value.clusterDim.y = c[1];
                attr.value.clusterDim.z = c[2];
                let config = sys::CUlaunchConfig {
                    gridDimX: g[0],
                    gridDimY: g[1],
                    gridDimZ: g[2],
                    blockDimX: b[0],
                    blockDimY: b[1],
                    blockDimZ: b[2],
                    sharedMemBytes: req.smem,
                    hStream: stream,
                    attrs: &mut attr,
                    numAttrs: 1,
                };
                sys::cuLaunchKernelEx(&config, func, args.as_mut_ptr(), std::ptr::null_mut())
                    .result()
                    .map_err(cuda_error)
            }
            _ => {
                let mut v: Vec<*mut c_void> = args.to_vec();
                result::launch_kernel(func, (g[0], g[1], g[2]), (b[0], b[1], b[2]), req.smem, stream, &mut v)
                    .map_err(cuda_error)
            }
        }
    }
}

/// Loads a launch's cubin and finds its kernel, raising the dynamic shared memory limit when the
/// launch asks for more than 48 KB.
fn load_kernel(req: &Launch) -> Result<(sys::CUmodule, sys::CUfunction), WorkerError> {
    let mut image =
        std::fs::read(&req.cubin).map_err(|e| WorkerError::new("IoError", format!("{}: {e}", req.cubin.display())))?;
    image.push(0);
    let name = CString::new(req.kernel.clone()).map_err(|_| WorkerError::new("BadRequest", "kernel name"))?;
    // SAFETY: a NUL-terminated image; the caller unloads the module.
    unsafe {
        let module = result::module::load_data(image.as_ptr() as *const c_void).map_err(cuda_error)?;
        let func = result::module::get_function(module, name).map_err(cuda_error)?;
        if req.smem > 48 * 1024 {
            result::function::set_function_attribute(
                func,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                req.smem as i32,
            )
            .map_err(cuda_error)?;
        }
        Ok((module, func))
    }
}

/// What a launch request runs: a cubin's kernel, or a `rung_run` version's host entry.
pub(crate) enum Callee {
    Kernel { module: sys::CUmodule, func: sys::CUfunction },
    Host(crate::hostentry::HostEntry),
}

impl Callee {
    fn load(req: &Launch) -> Result<Callee, WorkerError> {
        match &req.library {
            Some(lib) => crate::hostentry::HostEntry::open(lib)
                .map(Callee::Host)
                .map_err(|e| WorkerError::new("HostEntryLoad", e.to_string())),
            None => load_kernel(req).map(|(module, func)| Callee::Kernel { module, func }),
        }
    }

    /// Launches the kernel, or calls the host entry (which launches on the default stream, so
    /// `stream` must be null for it).
    ///
    /// # Safety
    /// As [`launch_raw`].
    unsafe fn call(&self, req: &Launch, args: &mut [*mut c_void], stream: sys::CUstream) -> Result<(), WorkerError> {
        match self {
            // SAFETY: the caller's contract.
            Callee::Kernel { func, .. } => unsafe { launch_raw(*func, req, args, stream) },
            Callee::Host(_) if !stream.is_null() => Err(WorkerError::new(
                "NotCapturable",
                "a rung_run entry launches its kernels on the default stream, which a CUDA graph cannot capture",
            )),
            Callee::Host(entry) => {
                // SAFETY: one argument pointer per parameter, bound by rung from the signature.
                let code = unsafe { entry.call(args) };
                if code == 0 {
                    Ok(())
                } else {
                    Err(WorkerError::new("HostEntryFailed", format!("rung_run returned {code}")))
                }
            }
        }
    }

    fn unload(&self) {
        if let Callee::Kernel { module, .. } = self {
            // SAFETY: loaded by `load`, unloaded once by the owner.
            let _ = unsafe { result::module::unload(*module) };
        }
    }
}

/// A device allocation with guard zones before and after the buffer.
struct Guarded {
    base: sys::CUdeviceptr,
    guard: usize,
    len: usize,
}

fn launch_once(req: &Launch) -> Response {
    match launch(req) {
        Ok(r) => r,
        Err(e) => Response { ok: false, error: Some(e), ..Default::default() },
    }
}

fn launch(req: &Launch) -> Result<Response, WorkerError> {
    let io =
        |what: &std::path::Path, e: std::io::Error| WorkerError::new("IoError", format!("{}: {e}", what.display()));
    let guard = req.guard_bytes as usize;
    // Where a launch's time goes besides the call (the check's `worker_overhead`), by step.
    let mut clock = crate::stats::Clock::new();
    // Host copies of every buffer, their device allocations, and the argument bytes.
    let mut host: Vec<(String, std::path::PathBuf, Vec<u8>)> = Vec::new();
    for p in &req.params {
        if let LaunchParam::Buffer { name, path } = p {
            host.push((name.clone(), path.clone(), std::fs::read(path).map_err(|e| io(path, e))?));
        }
    }
    clock.lap("launch_read");
    // SAFETY: every pointer below comes from the driver and is freed before returning; the
    // argument array points at locals that outlive the launch (it is synchronised).
    unsafe {
        let callee = Callee::load(req)?;
        let traced = match (&req.trace, &callee) {
            (None, _) => None,
            (Some(t), Callee::Kernel { module, .. }) => match arm_trace(*module, t) {
                Ok(armed) => Some(armed),
                Err(e) => {
                    callee.unload();
                    return Err(e);
                }
            },
            (Some(_), Callee::Host(_)) => {
                return Err(WorkerError::new("BadRequest", "a rung_run version's launches are not traced"));
            }
        };
        clock.lap("launch_load");
        let mut bufs: Vec<Guarded> = Vec::new();
        for (_, _, bytes) in &host {
            let len = bytes.len();
            let base = result::malloc_sync(len + 2 * guard).map_err(cuda_error)?;
            if guard > 0 {
                let fill = vec![GUARD_BYTE; guard];
                result::memcpy_htod_sync(base, &fill).map_err(cuda_error)?;
                result::memcpy_htod_sync(base + (guard + len) as u64, &fill).map_err(cuda_error)?;
            }
            if len > 0 {
                result::memcpy_htod_sync(base + guard as u64, bytes).map_err(cuda_error)?;
            }
            bufs.push(Guarded { base, guard, len });
        }
        let mut arg_bytes: Vec<Vec<u8>> = Vec::new();
        let mut next_buf = 0;
        for p in &req.params {
            match p {
                LaunchParam::Buffer { .. } => {
                    let g = &bufs[next_buf];
                    arg_bytes.push((g.base + g.guard as u64).to_le_bytes().to_vec());
                    next_buf += 1;
                }
                LaunchParam::Scalar { ctype, value, .. } => arg_bytes
                    .push(scalar_bytes(ctype, *value).map_err(|m| WorkerError::new("BadRequest", m.to_string()))?),
            }
        }
        let mut args: Vec<*mut c_void> = arg_bytes.iter_mut().map(|b| b.as_mut_ptr() as *mut c_void).collect();
        clock.lap("launch_upload");
        let t0 = Instant::now();
        if let Err(e) = callee.call(req, &mut args, std::ptr::null_mut()) {
            // A host entry that returned an error leaves the worker usable: free what it had.
            let _ = result::ctx::synchronize();
            for gb in bufs {
                let _ = result::free_sync(gb.base);
            }
            if let Some(armed) = &traced {
                armed.free();
            }
            callee.unload();
            return Err(e);
        }
        result::ctx::synchronize().map_err(cuda_error)?;
        let seconds = t0.elapsed().as_secs_f64();
        clock.skip();
        let mut guards = Vec::new();
        for ((name, path, bytes), gb) in host.iter_mut().zip(&bufs) {
            if gb.len > 0 {
                // Written back only when the kernel changed it: the file holds `bytes` already
                // (an input left alone, an output never written), and rewriting an unchanged
                // input was most of a small check's launch.
                let mut back = vec![0u8; gb.len];
                result::memcpy_dtoh_sync(&mut back, gb.base + gb.guard as u64).map_err(cuda_error)?;
                if back != *bytes {
                    std::fs::write(&*path, &back).map_err(|e| io(path, e))?;
                }
            }
            if gb.guard > 0 {
                let mut head = vec![0u8; gb.guard];
                let mut tail = vec![0u8; gb.guard];
                result::memcpy_dtoh_sync(&mut head, gb.base).map_err(cuda_error)?;
                result::memcpy_dtoh_sync(&mut tail, gb.base + (gb.guard + gb.len) as u64).map_err(cuda_error)?;
                guards.extend(protocol::guard_breach(name, &head, &tail));
            }
        }
        clock.lap("launch_download");
        for gb in bufs {
            let _ = result::free_sync(gb.base);
        }
        let (trace_requested, trace_needed) = match (traced, &req.trace) {
            (Some(armed), Some(t)) => {
                let read = read_trace(&armed, t);
                armed.free();
                let (requested, needed) = read?;
                (Some(requested), Some(needed))
            }
            _ => (None, None),
        };
        callee.unload();
        clock.lap("launch_free");
        Ok(Response {
            ok: true,
            seconds: Some(seconds),
            guards,
            trace_requested,
            trace_needed,
            phases: clock.phases,
            ..Default::default()
        })
    }
}

/// A traced launch's buffer: the records' and the counters' allocations and their layout.
struct ArmedTrace {
    records: sys::CUdeviceptr,
    counts: sys::CUdeviceptr,
    regions: u32,
    per_region: u32,
}

impl ArmedTrace {
    /// Frees both allocations.
    ///
    /// # Safety
    /// Nothing uses them any more (the launch is synchronised).
    unsafe fn free(&self) {
        // SAFETY: the caller's promise; each was allocated once by arm_trace.
        unsafe {
            let _ = result::free_sync(self.records);
            let _ = result::free_sync(self.counts);
        }
    }
}

/// The bytes of `rung_trace.cuh`'s RungTraceBuffer: records and counters pointers, regions,
/// per_region, layout, pad.
const TRACE_SYMBOL_BYTES: usize = 32;
/// `rung_trace.cuh`'s `layout`: one part of the buffer per SM.
const TRACE_LAYOUT: u32 = 2;

/// The parts and their size for `capacity` records in `regions` parts (at least one part of at
/// least one record).
fn trace_parts(capacity: u64, regions: u32) -> (u32, u32) {
    let regions = regions.max(1);
    let per = capacity.div_ceil(u64::from(regions)).clamp(1, u64::from(u32::MAX));
    (regions, per as u32)
}

/// Allocates the records and one zeroed counter per part, and writes their addresses and the
/// layout into the module's `rung_trace`.
///
/// # Safety
/// `module` is loaded.
unsafe fn arm_trace(module: sys::CUmodule, t: &protocol::TraceRequest) -> Result<ArmedTrace, WorkerError> {
    let name = CString::new("rung_trace").expect("no NUL");
    // SAFETY: the caller's module; the symbol is checked for the buffer's size before use.
    let (symbol, bytes) = unsafe { result::module::get_global(module, name) }.map_err(|e| {
        WorkerError::new(
            "NotTraced",
            format!("the cubin has no `rung_trace` ({e:?}): it was not built with -DRUNG_TRACE and rung_trace.cuh"),
        )
    })?;
    if bytes != TRACE_SYMBOL_BYTES {
        return Err(WorkerError::new(
            "NotTraced",
            format!(
                "`rung_trace` is {bytes} bytes, not rung_trace.cuh's {TRACE_SYMBOL_BYTES}: rebuild it with this rung"
            ),
        ));
    }
    let (regions, per_region) = trace_parts(t.capacity, t.regions);
    let size = regions as usize * per_region as usize * crate::trace::RECORD_BYTES;
    // SAFETY: fresh allocations, freed by the caller after the records are read (or here).
    let records = unsafe { result::malloc_sync(size) }.map_err(cuda_error)?;
    let counts = match unsafe { result::malloc_sync(regions as usize * 8) } {
        Ok(c) => c,
        Err(e) => {
            let _ = unsafe { result::free_sync(records) };
            return Err(cuda_error(e));
        }
    };
    let armed = ArmedTrace { records, counts, regions, per_region };
    let mut head = Vec::with_capacity(TRACE_SYMBOL_BYTES);
    head.extend_from_slice(&records.to_le_bytes());
    head.extend_from_slice(&counts.to_le_bytes());
    for word in [regions, per_region, TRACE_LAYOUT, 0] {
        head.extend_from_slice(&word.to_le_bytes());
    }
    // SAFETY: `counts` holds `regions` u64s; `symbol` is a device global of exactly these bytes.
    let written = unsafe { result::memcpy_htod_sync(counts, &vec![0u8; regions as usize * 8]) }
        .and_then(|_| unsafe { result::memcpy_htod_sync(symbol, &head) });
    if let Err(e) = written {
        unsafe { armed.free() };
        return Err(cuda_error(e));
    }
    Ok(armed)
}

/// What a traced launch's parts hold: each part's count (the records asked for) gives the
/// records kept (at most `per_region` of each, part after part), the count asked for in all,
/// and the capacity that would have held them all (the fullest part's count times the parts).
fn trace_kept(counts: &[u64], per_region: u32) -> (Vec<(usize, u64)>, u64, u64) {
    let kept = counts.iter().enumerate().map(|(i, &c)| (i, c.min(u64::from(per_region)))).filter(|k| k.1 > 0).collect();
    let requested = counts.iter().sum();
    let needed = counts.iter().max().copied().unwrap_or(0).saturating_mul(counts.len() as u64);
    (kept, requested, needed)
}

/// After the launch: the count the kernel asked for and the room that would have held it, and
/// the records it wrote, part after part, into `t.out`.
///
/// # Safety
/// `armed` is live and the launch synchronised.
unsafe fn read_trace(armed: &ArmedTrace, t: &protocol::TraceRequest) -> Result<(u64, u64), WorkerError> {
    let mut raw = vec![0u8; armed.regions as usize * 8];
    // SAFETY: the counters' `regions` u64s, after the launch finished.
    unsafe { result::memcpy_dtoh_sync(&mut raw, armed.counts) }.map_err(cuda_error)?;
    let counts: Vec<u64> = raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    let (kept, requested, needed) = trace_kept(&counts, armed.per_region);
    let rec = crate::trace::RECORD_BYTES;
    let mut records = vec![0u8; kept.iter().map(|k| k.1 as usize).sum::<usize>() * rec];
    let mut at = 0;
    for (part, n) in kept {
        let bytes = n as usize * rec;
        let from = armed.records + (part as u64 * u64::from(armed.per_region)) * rec as u64;
        // SAFETY: `n` records of part `part`, inside the allocation of regions × per_region.
        unsafe { result::memcpy_dtoh_sync(&mut records[at..at + bytes], from) }.map_err(cuda_error)?;
        at += bytes;
    }
    std::fs::write(&t.out, &records).map_err(|e| WorkerError::new("IoError", format!("{}: {e}", t.out.display())))?;
    Ok((requested, needed))
}

#[cfg(test)]
mod trace_tests {
    use super::{trace_kept, trace_parts};

    #[test]
    fn a_buffer_splits_into_one_part_per_sm_and_full_parts_are_counted() {
        assert_eq!(trace_parts(1000, 132), (132, 8));
        assert_eq!(trace_parts(0, 0), (1, 1));
        assert_eq!(trace_parts(u64::MAX, 1), (1, u32::MAX));
        // Three parts of four: the second is full (six asked), the third empty.
        let (kept, requested, needed) = trace_kept(&[3, 6, 0], 4);
        assert_eq!(kept, vec![(0, 3), (1, 4)]);
        assert_eq!((requested, needed), (9, 18));
        assert_eq!(trace_kept(&[], 4), (vec![], 0, 0));
    }
}

/// Timing and ceilings in the native worker.
mod bench;
mod resident;

//! Timing a call from CUPTI's activity records: the GPU's own start and end timestamps of every
//! kernel, copy and memset the call launched, on any stream.
//!
//! Events recorded around a call on its stream time a little more than the call: the interval
//! includes the events' own processing, and for a kernel whose stores drain late (evict-first
//! hints) it waits for them, several microseconds on a 250 µs kernel on an H200. The activity
//! records carry the timestamps Nsight Systems shows, close to what Nsight Compute reports as
//! `gpu__time_duration`. A call's time is the GPU's busy time for its work: the union of the
//! intervals of its kernels, copies and memsets on every stream, overlaps counted once. Idle
//! gaps between them are left out: tracing makes each launch slower on the host, and a call
//! whose host side cannot keep ahead of the GPU would otherwise be timed by the tracer's own
//! overhead. The span (first start to last end) is kept beside it. rung's own L2 flush kernels
//! are told apart by name.
//!
//! libcupti is loaded at run time from the file the toolchain found (it lives outside the
//! loader's path: `extras/CUPTI/lib64`, or a wheel's `nvidia/cu13/lib`), so the binary starts
//! without it; every failure is a reason to fall back to events, given with the bench.

use std::ffi::{c_char, c_void};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

/// The L2 flush kernels rung launches before each timed call (their records are not the call's).
pub const FLUSH_KERNELS: [&str; 3] = ["rung_flush", "rung_flush_evict_first", "rung_discard"];

const KIND_MEMCPY: u32 = 1;
const KIND_MEMSET: u32 = 2;
const KIND_KERNEL: u32 = 3;
const KIND_CONCURRENT_KERNEL: u32 = 10;
const BUFFER_BYTES: usize = 1 << 20;
const BUFFER_ALIGN: usize = 8;

/// One piece of GPU work from an activity record: timestamps in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Work {
    pub start: u64,
    pub end: u64,
    /// One of rung's L2 flush kernels, not the call's work.
    pub flush: bool,
}

/// Reads a record's fields by the offsets of CUDA 13's `cupti_activity.h`, the same in every
/// record version since CUDA 11 (new fields are appended): `CUpti_ActivityKernel*` has `start`
/// at 16, `end` at 24 and `name` at 104; `CUpti_ActivityMemcpy*` and `CUpti_ActivityMemset*`
/// have `start` at 16 and `end` at 24. `is_flush` tells from a kernel's name pointer whether it
/// names one of [`FLUSH_KERNELS`].
///
/// Returns None for other kinds and for records without timestamps.
pub fn parse_record(rec: &[u8], is_flush: impl Fn(u64) -> bool) -> Option<Work> {
    let u32_at = |o: usize| rec.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    let u64_at = |o: usize| rec.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    let kind = u32_at(0)?;
    let flush = match kind {
        KIND_KERNEL | KIND_CONCURRENT_KERNEL => u64_at(104).is_some_and(&is_flush),
        KIND_MEMCPY | KIND_MEMSET => false,
        _ => return None,
    };
    let (start, end) = (u64_at(16)?, u64_at(24)?);
    (start > 0 && end >= start).then_some(Work { start, end, flush })
}

/// The bytes `parse_record` reads of a record of this kind.
fn record_len(kind: u32) -> usize {
    match kind {
        KIND_KERNEL | KIND_CONCURRENT_KERNEL => 112,
        _ => 32,
    }
}

/// A call's GPU time from its work records, ms: (busy, span). Busy is the union of the
/// intervals (overlaps once, gaps not at all); span is first start to last end. rung's flush
/// kernels are left out. None when the call left no record (it launched nothing on the GPU).
pub fn call_ms(work: &[Work]) -> Option<(f64, f64)> {
    let mut own: Vec<(u64, u64)> = work.iter().filter(|w| !w.flush).map(|w| (w.start, w.end)).collect();
    own.sort_unstable();
    let (first, _) = *own.first()?;
    let (mut busy, mut open) = (0u64, own[0]);
    for &(s, e) in &own[1..] {
        if s > open.1 {
            busy += open.1 - open.0;
            open = (s, e);
        } else {
            open.1 = open.1.max(e);
        }
    }
    busy += open.1 - open.0;
    let last = own.iter().map(|w| w.1).max().unwrap_or(first);
    Some((busy as f64 / 1e6, (last - first) as f64 / 1e6))
}

type Result32 = i32;
type RequestFn = extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
type CompleteFn = extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);

struct Api {
    _lib: libloading::Library,
    register: unsafe extern "C" fn(RequestFn, CompleteFn) -> Result32,
    enable: unsafe extern "C" fn(u32) -> Result32,
    flush_all: unsafe extern "C" fn(u32) -> Result32,
    next_record: unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> Result32,
    result_string: unsafe extern "C" fn(Result32, *mut *const c_char) -> Result32,
}

static API: OnceLock<Result<Api, CuptiError>> = OnceLock::new();

/// Why CUPTI does not trace: the reason is shown with the bench (`timer_note`), which then times
/// by events.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CuptiError {
    /// `RUNG_CUPTI=off`.
    #[error("RUNG_CUPTI=off")]
    Off,
    #[error("no libcupti found beside the CUDA roots (`rung doctor`; RUNG_CUPTI names one)")]
    NotFound,
    /// The library or one of its symbols did not load.
    #[error("{path}: {message}")]
    Load { path: std::path::PathBuf, message: String },
    /// A CUPTI call returned an error: the call and CUPTI's description.
    #[error("{call}: {result}")]
    Call { call: String, result: String },
}
/// Records delivered by CUPTI since the last drain.
static DELIVERED: Mutex<Vec<Work>> = Mutex::new(Vec::new());
/// Buffers handed back, kept for the next request (addresses of BUFFER_BYTES allocations).
static SPARE: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn layout() -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(BUFFER_BYTES, BUFFER_ALIGN).expect("static layout")
}

extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let spare = SPARE.lock().unwrap_or_else(|e| e.into_inner()).pop();
    // SAFETY: CUPTI passes valid out-pointers; the buffer is freed or kept in SPARE once CUPTI
    // hands it back to `buffer_completed`.
    unsafe {
        let ptr = spare.map(|a| a as *mut u8).unwrap_or_else(|| std::alloc::alloc(layout()));
        *buffer = ptr;
        *size = if ptr.is_null() { 0 } else { BUFFER_BYTES };
        *max_records = 0;
    }
}

extern "C" fn buffer_completed(_ctx: *mut c_void, _stream: u32, buffer: *mut u8, _size: usize, valid: usize) {
    if buffer.is_null() {
        return;
    }
    if let Some(Ok(api)) = API.get() {
        let mut got = Vec::new();
        let mut rec: *mut u8 = std::ptr::null_mut();
        loop {
            // SAFETY: `buffer` holds `valid` bytes of records CUPTI wrote; `rec` is its cursor.
            let rc = unsafe { (api.next_record)(buffer, valid, &mut rec) };
            // CUPTI_ERROR_MAX_LIMIT_REACHED marks the end of the buffer; anything else (an
            // invalid kind) ends the walk too.
            if rc != 0 || rec.is_null() {
                break;
            }
            // SAFETY: a record CUPTI wrote starts with its kind; the bytes read are within the
            // record's size for that kind.
            let work = unsafe {
                let kind = (rec as *const u32).read_unaligned();
                let bytes = std::slice::from_raw_parts(rec, record_len(kind));
                parse_record(bytes, |p| {
                    p != 0 && {
                        let name = std::ffi::CStr::from_ptr(p as *const c_char).to_bytes();
                        FLUSH_KERNELS.iter().any(|k| k.as_bytes() == name)
                    }
                })
            };
            got.extend(work);
        }
        DELIVERED.lock().unwrap_or_else(|e| e.into_inner()).extend(got);
    }
    SPARE.lock().unwrap_or_else(|e| e.into_inner()).push(buffer as usize);
}

fn describe(api: &Api, rc: Result32) -> String {
    let mut s: *const c_char = std::ptr::null();
    // SAFETY: CUPTI writes a pointer to a static string.
    if unsafe { (api.result_string)(rc, &mut s) } == 0 && !s.is_null() {
        // SAFETY: a NUL-terminated static string.
        return unsafe { std::ffi::CStr::from_ptr(s) }.to_string_lossy().into_owned();
    }
    format!("CUPTI error {rc}")
}

fn load(path: &Path) -> Result<Api, CuptiError> {
    let failed = |e: libloading::Error| CuptiError::Load { path: path.to_path_buf(), message: e.to_string() };
    // SAFETY: loading libcupti runs its initialisers, which only register with the driver.
    let lib = unsafe { libloading::Library::new(path) }.map_err(failed)?;
    // SAFETY: the symbols' types are those of cupti_activity.h and cupti_result.h.
    unsafe {
        macro_rules! sym {
            ($name:literal) => {
                *lib.get($name).map_err(failed)?
            };
        }
        let api = Api {
            register: sym!(b"cuptiActivityRegisterCallbacks\0"),
            enable: sym!(b"cuptiActivityEnable\0"),
            flush_all: sym!(b"cuptiActivityFlushAll\0"),
            next_record: sym!(b"cuptiActivityGetNextRecord\0"),
            result_string: sym!(b"cuptiGetResultString\0"),
            _lib: lib,
        };
        Ok(api)
    }
}

/// Kernel, copy and memset tracing, on for the rest of the process once started.
#[derive(Clone, Copy)]
pub struct Tracer {
    api: &'static Api,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tracer")
    }
}

impl Tracer {
    /// Loads libcupti from `path` and starts tracing (once per process; later calls return the
    /// first outcome). A CUDA context must be current. Err says why, for the bench's note.
    pub fn start(path: &Path) -> Result<Tracer, CuptiError> {
        let api = API.get_or_init(|| {
            let api = load(path)?;
            // SAFETY: plain C calls with the callbacks above, which live for the process.
            unsafe {
                let rc = (api.register)(buffer_requested, buffer_completed);
                if rc != 0 {
                    let call = "cuptiActivityRegisterCallbacks".to_string();
                    return Err(CuptiError::Call { call, result: describe(&api, rc) });
                }
                for kind in [KIND_CONCURRENT_KERNEL, KIND_MEMCPY, KIND_MEMSET] {
                    let rc = (api.enable)(kind);
                    if rc != 0 {
                        let call = format!("cuptiActivityEnable({kind})");
                        return Err(CuptiError::Call { call, result: describe(&api, rc) });
                    }
                }
            }
            Ok(api)
        });
        match api {
            Ok(api) => Ok(Tracer { api }),
            Err(e) => Err(e.clone()),
        }
    }

    /// Everything CUPTI has finished recording since the last call (the device must be idle
    /// for the newest work to be complete).
    pub fn take(&self) -> Result<Vec<Work>, CuptiError> {
        // SAFETY: a plain C call; the callbacks it runs lock DELIVERED themselves.
        let rc = unsafe { (self.api.flush_all)(0) };
        if rc != 0 {
            let call = "cuptiActivityFlushAll".to_string();
            return Err(CuptiError::Call { call, result: describe(self.api, rc) });
        }
        Ok(std::mem::take(&mut *DELIVERED.lock().unwrap_or_else(|e| e.into_inner())))
    }
}

/// Starts tracing with the libcupti `RUNG_CUPTI` names, else the toolchain's
/// ([`crate::toolchain::find_cupti`]); `RUNG_CUPTI=off` does not trace. Err: why not, for the
/// bench's `timer_note` ([`timer_note`]).
pub fn start() -> Result<Tracer, CuptiError> {
    let named = std::env::var_os("RUNG_CUPTI").filter(|p| !p.is_empty());
    let found = match named {
        Some(p) if p == "off" => Err(CuptiError::Off),
        Some(p) => Ok(std::path::PathBuf::from(p)),
        None => crate::toolchain::find_cupti().ok_or(CuptiError::NotFound),
    };
    found.and_then(|p| Tracer::start(&p))
}

/// The bench's note for samples timed without CUPTI.
pub fn timer_note(e: &CuptiError) -> String {
    format!("{e}; timed by events")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, start: u64, end: u64, name_ptr: u64) -> Vec<u8> {
        let mut r = vec![0u8; 112];
        r[0..4].copy_from_slice(&kind.to_le_bytes());
        r[16..24].copy_from_slice(&start.to_le_bytes());
        r[24..32].copy_from_slice(&end.to_le_bytes());
        r[104..112].copy_from_slice(&name_ptr.to_le_bytes());
        r
    }

    /// Name pointers 1 and 2 stand for the flush kernels, 3 for the call's.
    fn names(p: u64) -> bool {
        p == 1 || p == 2
    }

    #[test]
    fn records_are_read_at_the_offsets_of_cupti_activity_h() {
        let k = parse_record(&record(KIND_CONCURRENT_KERNEL, 1_000, 251_000, 3), names).unwrap();
        assert_eq!(k, Work { start: 1_000, end: 251_000, flush: false });
        // The name is read at 104: a flush kernel's record says so.
        assert!(parse_record(&record(KIND_CONCURRENT_KERNEL, 1_000, 2_000, 2), names).unwrap().flush);
        let m = parse_record(&record(KIND_MEMSET, 5, 9, 0)[..32], names).unwrap();
        assert_eq!(m, Work { start: 5, end: 9, flush: false });
        // Other kinds, and records the GPU never stamped, are not work.
        assert_eq!(parse_record(&record(39, 5, 9, 0), names), None);
        assert_eq!(parse_record(&record(KIND_MEMCPY, 0, 9, 0), names), None);
        assert_eq!(parse_record(&record(KIND_MEMCPY, 10, 9, 0), names), None);
        // A kernel record too short to hold its name is not read past its end.
        assert!(!parse_record(&record(KIND_KERNEL, 5, 9, 1)[..64], names).unwrap().flush);
    }

    #[test]
    fn a_library_that_is_not_there_is_a_reason_naming_the_file() {
        let e = load(Path::new("/nonexistent/libcupti.so.13")).err().expect("no such file");
        assert!(
            matches!(&e, CuptiError::Load { path, .. } if path == Path::new("/nonexistent/libcupti.so.13")),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("/nonexistent/libcupti.so.13: "), "{e}");
        assert_eq!(timer_note(&CuptiError::Off), "RUNG_CUPTI=off; timed by events");
    }

    #[test]
    fn every_flush_kernel_left_out_of_a_call_is_one_the_embedded_ptx_defines() {
        let ptx = crate::assets::COPY_PTX;
        let entries: Vec<&str> =
            ptx.lines().filter_map(|l| l.strip_prefix(".visible .entry ")).map(|l| l.trim_end_matches('(')).collect();
        let flushes: Vec<&str> =
            entries.iter().copied().filter(|e| e.starts_with("rung_flush") || *e == "rung_discard").collect();
        assert_eq!(flushes, FLUSH_KERNELS, "copy.ptx defines {entries:?}");
    }

    #[test]
    fn a_calls_time_is_its_work_on_every_stream_and_none_of_the_flush() {
        let w = |s: u64, e: u64, k: Option<&str>| Work {
            start: s,
            end: e,
            flush: k.is_some_and(|k| FLUSH_KERNELS.contains(&k)),
        };
        let work = vec![
            w(0, 400_000, Some("rung_flush")),
            w(400_000, 400_400, Some("rung_flush_evict_first")),
            w(400_500, 410_000, Some("rung_discard")),
            w(411_000, 661_000, Some("add")),
            // A side stream's kernel that ends after the main one.
            w(420_000, 900_000, Some("side")),
            w(415_000, 416_000, None),
        ];
        // The side kernel overlaps the main one: busy from 411 µs to 900 µs, once.
        assert_eq!(call_ms(&work), Some(((900_000 - 411_000) as f64 / 1e6, (900_000 - 411_000) as f64 / 1e6)));
        // Two kernels with an idle gap (the host launching late): busy leaves the gap out.
        let gapped = vec![w(0, 10_000, Some("gemm")), w(60_000, 65_000, Some("relu")), w(2_000, 4_000, None)];
        assert_eq!(call_ms(&gapped), Some((15_000.0 / 1e6, 65_000.0 / 1e6)));
        assert_eq!(call_ms(&work[..3]), None);
        assert_eq!(call_ms(&[]), None);
    }
}

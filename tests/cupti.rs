//! The CUPTI timer's plumbing, without a GPU: both workers' tracers against a stand-in libcupti
//! (`tests/fixtures/cupti/fake_cupti.c`, built here with the system's C compiler) that lays out
//! and delivers records as CUDA 13's library does. What the GPU itself stamps is measured on the
//! H200 (`rung selftest --gpu --bench`); this checks loading by path, the buffer callbacks,
//! walking the records across several buffers, and the fallback's words.

use std::ffi::{CString, c_char};
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

const KERNEL: u32 = 10;
const MEMSET: u32 = 2;

/// The stand-in library, compiled into `dir`.
fn fake_cupti(dir: &Path) -> PathBuf {
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cupti/fake_cupti.c");
    let lib = dir.join("libcupti.so.13");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(src)
        .output()
        .expect("a C compiler (cc): the Rust toolchain links with it, so every machine that builds rung has one");
    assert!(out.status.success(), "cc: {}", String::from_utf8_lossy(&out.stderr));
    lib
}

type Push = unsafe extern "C" fn(u32, u64, u64, *const c_char);

#[test]
fn the_native_tracer_reads_what_cupti_delivers_across_buffers() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = fake_cupti(tmp.path());
    let tracer = rung::cupti::Tracer::start(&lib).expect("the stand-in starts");
    // The test's side of the GPU: the same library (dlopen hands back the loaded copy).
    // SAFETY: the stand-in's own functions, with the types it declares.
    let (handle, push) = unsafe {
        let handle = libloading::Library::new(&lib).unwrap();
        let push: Push = *handle.get(b"fake_push\0").unwrap();
        (handle, push)
    };
    let names: Vec<CString> = ["rung_flush", "rung_discard", "rmsnorm", "side", "rung_flush_evict_first"]
        .map(|n| CString::new(n).unwrap())
        .into();
    let push_call = || {
        // SAFETY: the names outlive the calls (the stand-in copies them).
        unsafe {
            push(KERNEL, 1_000, 400_000, names[0].as_ptr());
            push(KERNEL, 400_000, 400_400, names[4].as_ptr());
            push(KERNEL, 400_500, 410_000, names[1].as_ptr());
            push(KERNEL, 411_000, 661_000, names[2].as_ptr());
            push(MEMSET, 412_000, 413_000, std::ptr::null());
            push(KERNEL, 700_000, 720_000, names[3].as_ptr());
            // A kind rung does not time (an external correlation record): walked past, not read.
            push(39, 5, 6, std::ptr::null());
        }
    };
    push_call();
    let work = tracer.take().unwrap();
    assert_eq!(work.len(), 6, "{work:?}");
    // The flush kernels are known by the name the record points to; the call's work is not.
    assert_eq!(work.iter().map(|w| w.flush).collect::<Vec<_>>(), vec![true, true, true, false, false, false]);
    assert_eq!(work[3], rung::cupti::Work { start: 411_000, end: 661_000, flush: false });
    // Busy: 411..661 µs and 700..720 µs (the memset inside the first); span 411..720 µs.
    assert_eq!(rung::cupti::call_ms(&work), Some((0.270, 0.309)));
    // Nothing since: nothing delivered, and the last delivery is not handed out twice.
    assert!(tracer.take().unwrap().is_empty());
    // More records than one 1 MiB buffer holds (160 bytes each): every one arrives, in order.
    for i in 0..12_000u64 {
        // SAFETY: as above.
        unsafe { push(KERNEL, 1_000 + i * 10, 1_005 + i * 10, names[2].as_ptr()) };
    }
    let work = tracer.take().unwrap();
    assert_eq!(work.len(), 12_000);
    assert!(work.windows(2).all(|w| w[1].start == w[0].start + 10));
    // Tracing starts once per process: a second start is the first's tracer.
    assert!(rung::cupti::Tracer::start(Path::new("/nonexistent/libcupti.so.13")).is_ok());
    push_call();
    assert_eq!(tracer.take().unwrap().len(), 6);
    drop(handle);
}

#[test]
fn the_python_tracer_reads_the_same_records_and_says_why_when_cupti_refuses() {
    let Some(python) = common::python_with_numpy() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let lib = fake_cupti(tmp.path());
    let script = format!(
        r#"
import ctypes, json, sys
sys.path.insert(0, {worker:?})
import rung_bench as w
tracer, why = w._tracer()
if tracer is None:
    print(json.dumps({{"why": why}}))
    sys.exit(0)
push = ctypes.CDLL({lib:?}).fake_push
push.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_char_p]
push(10, 1000, 400000, b"rung_flush")
push(10, 400000, 400400, b"rung_flush_evict_first")
push(10, 400500, 410000, b"rung_discard")
push(10, 411000, 661000, b"rmsnorm")
push(2, 412000, 413000, None)
push(10, 700000, 720000, b"side")
push(39, 5, 6, None)
first = tracer.take()
again = tracer.take()
for i in range(12000):
    push(10, 1000 + i * 10, 1005 + i * 10, b"k")
many = tracer.take()
enabled = ctypes.CDLL({lib:?}).fake_enabled
toggles = [enabled()]
tracer.off(); toggles.append(enabled())
tracer.off(); toggles.append(enabled())
tracer.on(); toggles.append(enabled())
tracer.on(); toggles.append(enabled())
print(json.dumps({{"n": len(first), "times": w._Tracer.call_ms(first), "again": len(again), "many": len(many),
                  "ordered": all(b[0] == a[0] + 10 for a, b in zip(many, many[1:])), "toggles": toggles}}))
"#,
        worker = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python"),
        lib = lib.display().to_string(),
    );
    let run = |fail: bool| {
        let mut cmd = Command::new(&python);
        cmd.args(["-c", &script]).env("RUNG_CUPTI", &lib);
        if fail {
            cmd.env("FAKE_CUPTI_FAIL_ENABLE", "1");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let v = run(false);
    assert_eq!(v["n"], 6, "{v}");
    let t = v["times"].as_array().unwrap();
    assert!((t[0].as_f64().unwrap() - 0.270).abs() < 1e-12 && (t[1].as_f64().unwrap() - 0.309).abs() < 1e-12, "{v}");
    assert_eq!((v["again"].as_u64(), v["many"].as_u64(), v["ordered"].as_bool()), (Some(0), Some(12_000), Some(true)));
    // Tracing starts on (the three kinds), and turns off and on again once each, whatever the
    // number of calls: the bench traces only every other call.
    assert_eq!(v["toggles"], serde_json::json!([3, 0, 0, 3, 3]), "{v}");
    // CUPTI refusing (another profiler attached, or no driver): events, and the reason.
    let v = run(true);
    let why = v["why"].as_str().unwrap();
    assert!(
        why.contains("cuptiActivityEnable(10): CUPTI_ERROR_NOT_INITIALIZED") && why.ends_with("; timed by events"),
        "{why}"
    );
}

/// The Python worker's persisting-L2 guard, against a fake driver: a context that starts with a
/// set-aside (an environment's default) is not the version's doing; a limit raised above it is,
/// and is put back; every persisting line is reset before each timed call either way.
#[test]
fn the_persisting_l2_guard_flags_only_what_the_version_raised_above_the_contexts_baseline() {
    let Some(python) = common::python_with_numpy() else { return };
    let script = format!(
        r#"
import ctypes, json, sys
sys.path.insert(0, {worker:?})
import rung_bench as w

class Cu:
    def __init__(self, limit):
        self.limit, self.resets, self.sets = limit, 0, []
    def cuCtxGetLimit(self, ref, which):
        assert which == 0x06
        ref._obj.value = self.limit
        return 0
    def cuCtxSetLimit(self, which, size):
        self.sets.append(size.value)
        self.limit = size.value
        return 0
    def cuCtxResetPersistingL2Cache(self):
        self.resets += 1
        return 0

def guard(base, limit):
    w._L2_BASELINE = base
    f = w._Flusher.__new__(w._Flusher)
    f.c, f.cu = ctypes, Cu(limit)
    got = f.undo_persisting()
    return [got, f.cu.limit, f.cu.resets, f.cu.sets]

mb = 1 << 20
print(json.dumps({{"env_default": guard(12 * mb, 12 * mb), "none": guard(0, 0), "raised": guard(12 * mb, 20 * mb),
                  "from_zero": guard(0, 16 * mb), "lowered": guard(12 * mb, 4 * mb)}}))
"#,
        worker = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python"),
    );
    let out = Command::new(&python).args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mb = 1u64 << 20;
    // [bytes flagged, the limit after, persisting-line resets, limits set]
    assert_eq!(v["env_default"], serde_json::json!([0, 12 * mb, 1, []]), "{v}");
    assert_eq!(v["none"], serde_json::json!([0, 0, 1, []]), "{v}");
    assert_eq!(v["raised"], serde_json::json!([20 * mb, 12 * mb, 1, [12 * mb]]), "{v}");
    assert_eq!(v["from_zero"], serde_json::json!([16 * mb, 0, 1, [0]]), "{v}");
    assert_eq!(v["lowered"], serde_json::json!([0, 12 * mb, 1, [12 * mb]]), "{v}");
}
